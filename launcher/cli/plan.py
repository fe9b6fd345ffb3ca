"""`vlaunch plan`: the four buckets, vLLM's KV pool and a safe gpu_memory_utilization, before launch."""

from __future__ import annotations

import sys
from typing import Any

import click

from launcher.cli.options import (
    FORCE_HELP,
    VllmCommand,
    asked,
    detect,
    machine_names,
    plan_options,
    split_command,
)
from launcher.cli.output import EXIT_DOES_NOT_FIT, bar_style, emit_json, inputs_of, write_text
from launcher.common.errors import VlaunchError


@click.command(cls=VllmCommand, context_settings={"ignore_unknown_options": False})
@click.argument("words", metavar="[PROFILE] [-- VLLM COMMAND…]", nargs=-1, type=click.UNPROCESSED)
@plan_options
@click.option("--html", "html_path", metavar="FILE", help="Also write the memory picture as one HTML page.")
@click.option("--compare", metavar="M1,M2,…", help="Draw the profile on these machines too (spark,h100,rtx4090).")
@click.option("--ascii", "ascii_bar", is_flag=True, help="Draw the memory bar in plain ASCII.")
@click.option("--force", is_flag=True, help=FORCE_HELP)
@click.option(
    "--explain",
    is_flag=True,
    help="Also show each step of the plan in order: request, model, weights per rank, cache layout, buckets, "
    "verdict (with --json: an `explain` list of lines).",
)
def plan(
    words: tuple[str, ...],
    force: bool,
    as_json: bool,
    free_gib: float | None,
    html_path: str | None,
    compare: str | None,
    ascii_bar: bool,
    no_calibration: bool,
    explain: bool,
    **flags: Any,
) -> None:
    """Predict the four buckets, vLLM's KV pool and a safe gpu_memory_utilization.

    PROFILE is a YAML file or the name of a profile (`vlaunch profiles`). Flags are vLLM's and override the
    profile; so does a vLLM command pasted after `--` (`vlaunch plan -- vllm serve MODEL --max-model-len 32k`),
    whose flags vlaunch does not model are passed to vLLM as written. --html FILE writes a bar per machine drawn
    to its capacity; --compare a,b,c plans the same profile on other machines. Exit 3 when the plan, or any
    compared machine, does not fit (the reasons say which bucket and by how much); the HTML is written all the
    same.
    """
    from launcher.common.units import gib_to_bytes
    from launcher.plan.planning import make_plan
    from launcher.report.render import render_plan

    profile, command = split_command(words)
    request = asked(profile, flags, command)
    p = request.profile
    free = None if free_gib is None else gib_to_bytes(free_gib)
    result = make_plan(p, free_bytes=free, use_calibration=not no_calibration, notes=request.notes, detect=detect())
    plans = _compare_plans(result, compare) if compare else [result]
    style = bar_style(ascii_bar)
    if as_json:
        data = result.to_json()
        if compare:
            data["compare"] = [x.to_json() for x in plans]
        if explain:
            data["explain"] = _explained(result)
        emit_json(data)
    else:
        click.echo(render_plan(result, bar=style))
        if explain:
            click.echo("\nsteps:\n" + "\n".join(_explained(result)))
        if compare:
            _show_compare(plans, style)
    if html_path:
        from launcher.report.html import page_data, render_html

        page = render_html(page_data([x.to_json() for x in plans], description=p.description))
        write_text(html_path, page, inputs=inputs_of(p, *request.inputs, source=result.source), force=force)
        if not as_json:
            click.echo(f"html: {html_path}")
    if not all(x.fits for x in plans):
        sys.exit(EXIT_DOES_NOT_FIT)


def _explained(result: Any) -> list[str]:
    """The plan's steps, in order (launcher.plan.pipeline)."""
    from launcher.plan.pipeline import explain

    return explain(result.steps)


def _compare_plans(main_plan: Any, names: str) -> list[Any]:
    """The main plan's profile planned on each machine of a comma-separated list (aliases allowed)."""
    from launcher.plan.planning import make_plan

    wanted = machine_names(names)
    if not wanted:
        raise VlaunchError("--compare needs machine names, e.g. --compare spark,h100,rtx4090")
    if main_plan.machine.name not in wanted:
        wanted.insert(0, main_plan.machine.name)
    plans = []
    for name in dict.fromkeys(wanted):
        if name == main_plan.machine.name:
            plans.append(main_plan)
        else:
            other = main_plan.profile.with_overrides(machine=name, gpu_memory_gib=None)
            plans.append(make_plan(other, use_calibration=main_plan.use_calibration, detect=main_plan.detect))
    return plans


def _show_compare(plans: list[Any], style: Any) -> None:
    """A verdict and a memory bar per compared machine."""
    from launcher.report.render import memory_bar

    click.echo("\ncompare:")
    for x in plans:
        pr = x.prediction
        buckets = [("OS reserve", pr.os_reserve_bytes), ("weights", pr.weights_bytes),
                   ("KV cache", pr.kv_need_bytes), ("activation", pr.activation_peak_bytes),
                   ("overhead", pr.overhead_bytes)]  # fmt: skip
        verdict = "fits" if x.fits else "does NOT fit"
        click.echo(f"  {x.machine.name}: {verdict}, max users {pr.max_users}")
        click.echo(memory_bar(buckets, x.machine.total_bytes, style)[0])
