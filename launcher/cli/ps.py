"""`vlaunch ps`: the vLLM servers and `vlaunch serve` processes on this box."""

from __future__ import annotations

from typing import Any

import click

from launcher.cli.options import json_option
from launcher.cli.output import emit_json

COMMAND_WIDTH = 100
"""How much of a command line a row shows (`--json` has it whole)."""


@click.command()
@json_option
def ps(as_json: bool) -> None:
    """List the vLLM processes (API server, engine, workers) and `vlaunch serve` processes on this box, including
    ones vlaunch did not start. A process is listed by the program it runs (`vllm serve`, `python -m
    vllm.entrypoints…`, a `VLLM::` process title, `vlaunch serve`), never because its command line mentions one:
    a shell that runs `vlaunch serve` is not listed; the vlaunch it starts is."""
    from launcher.run import guard

    holder = guard.read_holder()
    instances = guard.scan()
    if as_json:
        emit_json({"lock": holder, "instances": [i.to_json() for i in instances]})
        return
    if holder:
        click.echo(_lock_line(holder, guard.holder_here(holder) is not None))
    if not instances:
        click.echo("no vLLM processes on this box")
        return
    for line in _table(instances):
        click.echo(line)
    if any(i.orphan for i in instances):
        click.echo("orphans: left by a vlaunch serve that is gone; `vlaunch stop --orphans` stops them")


def _lock_line(holder: dict[str, Any], proven: bool) -> str:
    """Who holds the box lock, in one line."""
    from launcher.common.chars import escaped

    shown = {k: "?" if holder.get(k) is None else escaped(holder[k]) for k in ("profile", "log", "host")}
    return (
        f"vlaunch lock: profile '{shown['profile']}', vlaunch pid {holder.get('pid')}, "
        f"vLLM pid {holder.get('vllm_pid')}, port {holder.get('port')}, log {shown['log']}"
        + ("" if proven else " (not proven: another pid namespace, or its pid is gone)")
    )


def _table(instances: list[Any]) -> list[str]:
    """A header row and one row per process: pid, role, resident memory, GPU memory (when nvidia-smi names any
    process), command line."""
    from launcher.common.chars import escaped

    gpu = any(i.gpu_bytes is not None for i in instances)
    head = f"{'PID':>8}  {'ROLE':<8} {'RSS':>10}" + (f"  {'GPU':>10}" if gpu else "") + "  COMMAND"
    rows = [head]
    for i in instances:
        left = f"  [orphan of run {escaped(i.orphan_of)}]" if i.orphan else ""
        mem = f"{i.pid:>8}  {i.role:<8} {i.rss_bytes / 2**30:6.2f} GiB"
        if gpu:
            mem += "           -" if i.gpu_bytes is None else f"  {i.gpu_bytes / 2**30:6.2f} GiB"
        rows.append(f"{mem}  {escaped(i.command)[:COMMAND_WIDTH]}{left}")
    return rows
