"""`vlaunch serve`: plan, guard, pre-flight and launch vLLM, then check the prediction live."""

from __future__ import annotations

import sys
from typing import Any

import click

from launcher.cli.options import VllmCommand, asked, gib_at_least_zero, plan_options, split_command, vllm_words
from launcher.cli.output import bar_style, emit_json


@click.command(cls=VllmCommand)
@click.argument("words", metavar="[PROFILE] [-- VLLM COMMAND…]", nargs=-1, type=click.UNPROCESSED)
@click.option("--dry-run", is_flag=True, help="Print the plan, the guard's verdict and the command; start nothing.")
@click.option("--force", is_flag=True, help="Launch even when the plan says it does not fit.")
@click.option("--verbose", "-v", is_flag=True, help="Echo every vLLM line, not only the boot stages.")
@click.option("--logs-dir", default="logs", show_default=True, help="Where run logs and records go.")
@click.option("--stop-after-ready", is_flag=True, hidden=True)
@click.option("--skip-preflight", is_flag=True,
              help="Launch without the pre-flight checks (executable, docker, GPU, machine, port, model).")  # fmt: skip
@click.option(
    "--stop-below-gib",
    type=float,
    callback=gib_at_least_zero,
    metavar="GIB",
    help="Stop vLLM cleanly (exit 11) when the box's MemAvailable falls below GIB, before the OOM killer acts.",
)
@plan_options
def serve(
    words: tuple[str, ...],
    dry_run: bool,
    force: bool,
    verbose: bool,
    logs_dir: str,
    stop_after_ready: bool,
    skip_preflight: bool,
    stop_below_gib: float | None,
    as_json: bool,
    free_gib: float | None,
    no_calibration: bool,
    **flags: Any,
) -> None:
    """Plan, guard, pre-flight and launch vLLM for PROFILE, check the prediction live, stop cleanly on Ctrl-C.

    With no PROFILE, no --model and no pasted command: the bundled profile for this box (`vlaunch profiles
    --default`). A vLLM command pasted after `--` is launched as planned, like `plan -- vllm serve …`.
    On unified memory (a DGX Spark, the CPU backend) a watchdog warns when MemAvailable falls below the OS
    reserve the plan kept, naming who grew; --stop-below-gib stops vLLM instead of waiting for the OOM killer.

    Exit 0 after a clean stop, 1 when vLLM fails to boot, 3 when the plan does not fit (unless --force),
    4 when another vLLM holds the box; pre-flight refusals (one line each, nothing started): 5 missing
    executable, 6 container runtime, 7 GPU, 8 machine mismatch, 9 port in use, 10 model. 11 when the
    watchdog stopped vLLM. 130 when stopped before vLLM was ready. --dry-run prints the pre-flight result
    and starts nothing.
    """
    from pathlib import Path

    from launcher.common.units import gib_to_bytes
    from launcher.run import guard, serving
    from launcher.run import preflight as pf

    profile, command = split_command(words)
    if not (profile or command or flags.get("model") or flags.get("config") or vllm_words()):
        profile = _serve_default_profile(as_json)
    request = asked(profile, flags, command)
    result = _serve_plan(request, free_gib, not no_calibration)
    options = serving.ServeOptions(
        logs_dir=Path(logs_dir),
        force=force,
        verbose=verbose,
        stop_after_ready=stop_after_ready,
        skip_preflight=skip_preflight,
        stop_below_bytes=None if stop_below_gib is None else gib_to_bytes(stop_below_gib),
    )
    verdict = guard.verdict()
    checked = serving.preflight_here(result, options)
    findings = pf.preflight(result) if dry_run and checked else None
    cluster = bool(request.profile.nodes)
    _serve_show(result, verdict, findings, cluster, as_json=as_json, dry_run=dry_run, skip_preflight=skip_preflight)
    _serve_refuse(result, verdict, force=force, dry_run=dry_run)
    if dry_run:
        return
    if checked:
        _serve_preflight(result)
    _serve_launch(result, options)


def _serve_default_profile(as_json: bool) -> str:
    """The bundled profile for this box, when serve is given no PROFILE, no --model and no pasted command."""
    from launcher.plan.machines import detect
    from launcher.plan.profiles import default_profile_path

    bundled = default_profile_path(detect()[0].name)  # the bundled file itself, never ./profiles/NAME.yaml
    if not as_json:
        click.echo(f"profile: {bundled.stem} (the bundled default for this box; `vlaunch profiles` lists others)")
    return str(bundled)


def _serve_plan(request: Any, free_gib: float | None, use_calibration: bool) -> Any:
    """The request's plan against what is free right now (or --free-gib)."""
    from launcher.common.units import gib_to_bytes
    from launcher.plan.planning import make_plan
    from launcher.run import guard

    p = request.profile
    free = None if free_gib is None else gib_to_bytes(free_gib)
    if free is None and not p.nodes:
        free = guard.live_free_bytes(p.machine)  # the start-up check against what is free right now
    # serve runs the launch's python anyway: it may ask it for its vLLM version
    return make_plan(p, free_bytes=free, use_calibration=use_calibration, notes=request.notes, detect=True)


def _serve_show(
    result: Any, verdict: str, findings: Any, cluster: bool, *, as_json: bool, dry_run: bool, skip_preflight: bool
) -> None:
    """The plan and the guard's verdict and, for --dry-run, the pre-flight result and a cluster's steps."""
    from launcher.report.render import render_plan
    from launcher.run import serving

    if as_json and dry_run:
        out = {"plan": result.to_json(), "guard": verdict, "argv": result.shown_argv}
        emit_json({**out, "preflight": None if findings is None else [f.to_json() for f in findings]})
    else:
        click.echo(render_plan(result, bar=bar_style(False)))
        click.echo(f"guard: {verdict}")
        if dry_run:
            skipped = "skipped" if skip_preflight else "skipped: run it on the head node"
            for line in serving.preflight_lines(findings, skipped):
                click.echo(line)
    if cluster and dry_run and not as_json:
        for line in serving.cluster_dry_run_lines(result):
            click.echo(line)


def _serve_refuse(result: Any, verdict: str, *, force: bool, dry_run: bool) -> None:
    """Exit, with one line, when the plan does not fit (without --force) or another vLLM holds the box."""
    from launcher.run import serving

    refused = serving.refusal(result, verdict, force=force, dry_run=dry_run)
    if refused is not None:
        click.echo(f"vlaunch: {refused.line}", err=True)
        sys.exit(refused.code)


def _serve_preflight(result: Any) -> None:
    """Run the pre-flight checks; on a refusal print one line each and exit with the first one's code."""
    from launcher.run import preflight as pf
    from launcher.run import serving

    findings = pf.preflight(result)
    refusals = pf.refusals(findings)
    if refusals:  # one line each, in check order; the exit code is the first one's; nothing is written
        for w in pf.warnings(findings):
            click.echo(f"vlaunch: warning: {w.line()}", err=True)
        for r in refusals:
            click.echo(f"vlaunch: error: {r.line()}", err=True)
        sys.exit(refusals[0].code)
    for line in serving.preflight_lines(findings, ""):
        click.echo(line)


def _serve_launch(result: Any, options: Any) -> None:
    """Launch vLLM, say how the run ended, and exit with its code."""
    from launcher.run import serving

    run = serving.launch(result, options, echo=click.echo)
    if run.error:
        click.echo(f"vlaunch: error: {run.error}", err=True)
    if run.warning:
        click.echo(f"vlaunch: warning: {run.warning}", err=True)
    if run.record_path is not None:
        click.echo(f"run record: {run.record_path}")
    sys.exit(run.exit_code)
