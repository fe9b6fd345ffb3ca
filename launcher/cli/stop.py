"""`vlaunch stop`: stop a vLLM server, or the orphans a dead `vlaunch serve` left."""

from __future__ import annotations

from typing import Any

import click

from launcher.cli.options import json_option
from launcher.common.errors import VlaunchError


def _stop_timeout(ctx: click.Context, param: click.Parameter, value: float) -> float:
    import math

    if not (math.isfinite(value) and 0 < value <= 3600):
        raise click.BadParameter(f"must be a number of seconds above 0 and at most 3600, got {value}")
    return value


@click.command()
@click.argument("target", required=False)
@click.option("--timeout", default=30.0, show_default=True, callback=_stop_timeout,
              help="Seconds to wait before killing (above 0, at most 3600).")  # fmt: skip
@click.option("--orphans", is_flag=True, help="Stop every vLLM process left by a vlaunch serve that is gone.")
@json_option
def stop(target: str | None, timeout: float, orphans: bool, as_json: bool) -> None:
    """Stop a vLLM server: by profile name, by pid (a vLLM process or `vlaunch serve` that `vlaunch ps` lists; any
    other pid is refused, exit 2), or the one vlaunch is running when none is given; --orphans: the vLLM processes a
    `vlaunch serve` that died left running (`vlaunch ps` marks them). Exits 4 when something it was to stop still
    runs or may not be signalled."""
    from launcher.common.chars import escaped
    from launcher.run import guard, serving

    if orphans:
        if target is not None:
            raise click.UsageError("--orphans stops every orphan; it takes no TARGET")
        _stop_orphans(timeout, as_json)
        return
    holder = guard.read_holder()
    names = (holder.get("profile"), str(holder.get("pid"))) if holder and holder.get("pid") is not None else ()
    if target is None or target in names:
        if not holder:
            raise VlaunchError("no vlaunch-managed server is running; give a PID (see `vlaunch ps`)")
        left = serving.stop_holder(holder, timeout)
        _still_running(left.alive, left.denied)
        text = f"stopped {escaped(holder.get('profile'))} (vlaunch pid {holder.get('pid')})"
        _say(as_json, text, stopped="server", profile=holder.get("profile"), pid=holder.get("pid"))
        return
    if not (target.isascii() and target.isdigit()):  # "١٢٣".isdigit() too, and int() would read it as pid 123
        raise VlaunchError(f"no running server for profile {escaped(target)!r} (see `vlaunch ps`)")
    _refuse_unlisted(int(target))
    left = serving.stop_pid(int(target), timeout)
    _still_running(left.alive, left.denied)
    _say(as_json, f"stopped pid {int(target)}", stopped="pid", profile=None, pid=int(target))


def _say(as_json: bool, text: str, **data: Any) -> None:
    """What was stopped: one line, or --json's object (`stopped`: server, pid or orphans; and what)."""
    from launcher.cli.output import emit_json

    if as_json:
        emit_json(data)
    else:
        click.echo(text)


def _refuse_unlisted(pid: int) -> None:
    """`stop PID` takes what `vlaunch ps` lists (a vLLM process or a `vlaunch serve`); any other pid is refused
    (exit 2, one line saying what it runs) before anything is signalled."""
    import psutil

    from launcher.common.chars import escaped
    from launcher.run import guard
    from launcher.run import supervise as sup

    if sup.plausible_pid(pid) is None or pid in {i.pid for i in guard.scan()}:
        return  # serving.stop_pid refuses a pid no process can have
    try:
        words = psutil.Process(pid).cmdline()
        what = f"it runs `{escaped(' '.join(words))[:80]}`" if words else "a kernel thread"
    except psutil.ZombieProcess:
        what = "a zombie"
    except psutil.NoSuchProcess:
        what = "no such process"
    except (psutil.Error, ValueError):
        what = "its command line cannot be read"
    raise VlaunchError(
        f"pid {pid} is neither a vLLM process nor a `vlaunch serve` ({what}): nothing stopped; "
        "`vlaunch ps` lists what `vlaunch stop PID` takes"
    )


def _stop_orphans(timeout: float, as_json: bool = False) -> None:
    """Stop every vLLM process a `vlaunch serve` that is gone left running."""
    from launcher.cli.output import emit_json
    from launcher.common.chars import escaped
    from launcher.run import guard

    done = guard.stop_orphans(timeout)
    gone = [p for p in done.stopped if p not in done.alive]
    if as_json:
        _still_running(done.alive, done.denied)
        emit_json({"stopped": "orphans", "pids": gone, "containers": list(done.containers)})
        return
    if not done.stopped:
        click.echo("no orphaned vLLM processes on this box")
        return
    if gone:
        click.echo(f"stopped {len(gone)} orphaned process(es): {', '.join(map(str, gone))}")
    for box in done.containers:
        click.echo(f"killed container {escaped(box)}")
    _still_running(done.alive, done.denied)


def _still_running(alive: list[int], denied: list[int]) -> None:
    """`stop` fails (exit 4, one line) when anything it meant to stop still runs."""
    from launcher.run.guard import GuardError

    if denied:
        raise GuardError(f"cannot signal pid {denied[0]}: operation not permitted" + (
            f" (nor {', '.join(map(str, denied[1:]))})" if denied[1:] else ""))  # fmt: skip
    if alive:
        raise GuardError(f"still alive after the stop: pid {', '.join(map(str, alive))}")
