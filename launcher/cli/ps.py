"""`vlaunch ps`: the vLLM servers on this box."""

from __future__ import annotations

import click

from launcher.cli.options import json_option
from launcher.cli.output import emit_json


@click.command()
@json_option
def ps(as_json: bool) -> None:
    """List the vLLM servers on this box, including ones vlaunch did not start."""
    from launcher.common.chars import escaped
    from launcher.run import guard

    holder = guard.read_holder()
    instances = guard.scan()
    if as_json:
        emit_json({"lock": holder, "instances": [i.to_json() for i in instances]})
        return
    if holder:
        shown = {k: "?" if holder.get(k) is None else escaped(holder[k]) for k in ("profile", "log", "host")}
        click.echo(
            f"vlaunch lock: profile '{shown['profile']}', vlaunch pid {holder.get('pid')}, "
            f"vLLM pid {holder.get('vllm_pid')}, port {holder.get('port')}, log {shown['log']}"
            + ("" if guard.holder_here(holder) else " (not proven: another pid namespace, or its pid is gone)")
        )
    if not instances:
        click.echo("no vLLM processes on this box")
    for i in instances:
        left = f"  [orphan of run {escaped(i.orphan_of)}]" if i.orphan else ""
        click.echo(f"{i.pid:>8}  {i.role:<8} {i.rss_bytes / 2**30:6.2f} GiB  {escaped(i.command)[:100]}{left}")
    if any(i.orphan for i in instances):
        click.echo("orphans: left by a vlaunch serve that is gone; `vlaunch stop --orphans` stops them")
