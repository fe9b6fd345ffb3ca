"""`vlaunch render`: a profile's planned launch as a script, a systemd unit, a docker command or a vLLM config."""

from __future__ import annotations

import sys
from typing import Any

import click

from launcher.cli.options import FORCE_HELP, VllmCommand, asked, detect, plan_options, split_command, vllm_words
from launcher.cli.output import EXIT_DOES_NOT_FIT, emit_json, inputs_of, write_text
from launcher.common.errors import VlaunchError

# render's own options: what `vlaunch serve` in a unit is not given again
_RENDER_ONLY = frozenset({"words", "kind", "output", "force", "as_json", "free_gib"} | {
    "vlaunch", "env_file", "logs_dir", "unit_user", "unit_group"})  # fmt: skip
_UNIT_OPTIONS = ("--vlaunch", "--env-file", "--logs-dir", "--unit-user", "--unit-group")


@click.command(cls=VllmCommand)
@click.argument("words", metavar="[PROFILE] [-- VLLM COMMAND…]", nargs=-1, type=click.UNPROCESSED)
@click.option("--as", "kind", required=True, type=click.Choice(["script", "systemd", "docker", "vllm-config"]),
              help="script: bash launch script; systemd: a unit that runs `vlaunch serve PROFILE`; docker: `docker "
              "run` for NVIDIA's vLLM container; vllm-config: YAML for `vllm serve --config`.")  # fmt: skip
@click.option("-o", "--output", metavar="FILE", help="Write to FILE instead of stdout.")
@click.option("--force", is_flag=True, help=FORCE_HELP)
@click.option("--vlaunch", "vlaunch", metavar="PATH",
              help="systemd: the vlaunch the unit runs (default: this one, by its absolute path).")  # fmt: skip
@click.option("--env-file", metavar="PATH",
              help="systemd: the file with secrets such as HF_TOKEN (default: /etc/vlaunch/PROFILE.env).")  # fmt: skip
@click.option("--logs-dir", metavar="DIR", help="systemd: where serve writes run logs and records (default: ./logs).")
@click.option("--unit-user", metavar="USER", help="systemd: User= the unit runs as (default: none, root).")
@click.option("--unit-group", metavar="GROUP", help="systemd: Group= the unit runs as.")
@plan_options
def render(
    words: tuple[str, ...],
    kind: str,
    output: str | None,
    force: bool,
    vlaunch: str | None,
    env_file: str | None,
    logs_dir: str | None,
    unit_user: str | None,
    unit_group: str | None,
    as_json: bool,
    free_gib: float | None,
    no_calibration: bool,
    **flags: Any,
) -> None:
    """Render PROFILE's planned launch as a script, a systemd unit, a docker command or a vLLM config file.

    The values come from the plan (gpu_memory_utilization included), quoted for the target. A systemd unit runs
    `vlaunch serve PROFILE` with the options given here (the box lock, pre-flight, supervisor and watchdog hold
    under systemd too), reads secrets from an environment file and restarts on failure except where a restart
    cannot help (the box is held, the plan does not fit, bad input). Exit 3 when the plan does not fit (the file
    is written all the same, with a warning).
    """
    from launcher.common.units import gib_to_bytes
    from launcher.plan.planning import make_plan
    from launcher.report.templating import render_launch

    unit_flags = (vlaunch, env_file, logs_dir, unit_user, unit_group)
    if kind != "systemd" and any(x is not None for x in unit_flags):
        raise click.UsageError(f"{', '.join(_UNIT_OPTIONS)} are for --as systemd")
    profile, command = split_command(words)
    request = asked(profile, flags, command)
    p = request.profile
    free = None if free_gib is None else gib_to_bytes(free_gib)
    result = make_plan(p, free_bytes=free, use_calibration=not no_calibration, notes=request.notes, detect=detect())
    try:
        unit = None
        if kind == "systemd":
            unit = _unit(result, profile, command, {**flags, "no_calibration": no_calibration}, unit_flags)
        text = render_launch(result, kind, unit)
    except ValueError as e:
        raise VlaunchError(str(e)) from None
    if output:
        write_text(output, text, inputs=inputs_of(p, profile, *request.inputs, source=result.source), force=force)
    if as_json:
        emit_json({"as": kind, "output": output, "fits": result.fits, "text": text})
    elif not output:
        click.echo(text, nl=False)
    if not result.fits:
        click.echo(f"vlaunch: warning: the plan does not fit on {result.machine.name}", err=True)
        sys.exit(EXIT_DOES_NOT_FIT)


def _unit(
    plan: Any, profile: str | None, command: tuple[str, ...], flags: dict[str, Any], given: tuple[Any, ...]
) -> Any:
    """The systemd unit that serves what render planned: `vlaunch serve` with PROFILE as an absolute path, the
    planning options and vLLM options given to render, and the pasted command."""
    import os
    from pathlib import Path

    from launcher.plan.profiles import resolve_profile_arg
    from launcher.report.templating import systemd_version, unit_for, vlaunch_command

    vlaunch, env_file, logs_dir, user, group = given
    words = [os.path.abspath(resolve_profile_arg(profile, Path.cwd() / "profiles"))] if profile else []
    words += [*_option_words(flags), *vllm_words()]
    unit = unit_for(
        plan,
        words=words,
        pasted=command,
        vlaunch=vlaunch_command(vlaunch),
        logs_dir=logs_dir,
        env_file=env_file,
        user=user,
        group=group,
        systemd=systemd_version(),
    )
    exe = unit.serve[0]
    if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        click.echo(f"vlaunch: warning: {exe} is not an executable file here; the unit's ExecStart runs it", err=True)
    for note in unit.notes:
        click.echo(f"vlaunch: warning: {note}", err=True)
    return unit


def _option_words(flags: dict[str, Any]) -> list[str]:
    """The planning options given to render (by dest), as `vlaunch serve` takes them."""
    ctx = click.get_current_context()
    out: list[str] = []
    for param in ctx.command.params:
        if not isinstance(param, click.Option) or param.name in _RENDER_ONLY or param.name not in flags:
            continue
        value = flags[param.name]
        if value is None or (value is False and not param.secondary_opts):
            continue
        if param.secondary_opts:
            out.append(param.opts[0] if value else param.secondary_opts[0])
        elif param.is_flag:
            out.append(param.opts[0])
        else:
            out += [param.opts[0], str(value)]
    return out
