"""`vlaunch render`: a profile's planned launch as a script, a systemd unit, a docker command or a vLLM config."""

from __future__ import annotations

import sys
from typing import Any

import click

from launcher.cli.options import FORCE_HELP, VllmCommand, asked, detect, plan_options, split_command
from launcher.cli.output import EXIT_DOES_NOT_FIT, emit_json, inputs_of, write_text
from launcher.common.errors import VlaunchError


@click.command(cls=VllmCommand)
@click.argument("words", metavar="[PROFILE] [-- VLLM COMMAND…]", nargs=-1, type=click.UNPROCESSED)
@click.option("--as", "kind", required=True, type=click.Choice(["script", "systemd", "docker", "vllm-config"]),
              help="script: bash launch script; systemd: a unit file; docker: `docker run` for NVIDIA's vLLM "
              "container; vllm-config: YAML for `vllm serve --config`.")  # fmt: skip
@click.option("-o", "--output", metavar="FILE", help="Write to FILE instead of stdout.")
@click.option("--force", is_flag=True, help=FORCE_HELP)
@plan_options
def render(
    words: tuple[str, ...],
    kind: str,
    output: str | None,
    force: bool,
    as_json: bool,
    free_gib: float | None,
    no_calibration: bool,
    **flags: Any,
) -> None:
    """Render PROFILE's planned launch as a script, a systemd unit, a docker command or a vLLM config file.

    The values come from the plan (gpu_memory_utilization included), quoted for the target. Exit 3 when the
    plan does not fit (the file is written all the same, with a warning).
    """
    from launcher.common.units import gib_to_bytes
    from launcher.plan.planning import make_plan
    from launcher.report.templating import render_launch

    profile, command = split_command(words)
    request = asked(profile, flags, command)
    p = request.profile
    free = None if free_gib is None else gib_to_bytes(free_gib)
    result = make_plan(p, free_bytes=free, use_calibration=not no_calibration, notes=request.notes, detect=detect())
    try:
        text = render_launch(result, kind)
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
