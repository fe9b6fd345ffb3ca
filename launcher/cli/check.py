"""`vlaunch check`: what a vLLM startup log states, its failure and fix, and predicted vs logged."""

from __future__ import annotations

import sys
from typing import Any

import click

from launcher.cli.options import VllmCommand, build_profile, detect, plan_options, vllm_words
from launcher.cli.output import emit_json


@click.command(cls=VllmCommand)
@click.argument("log")
@click.option("--profile", "profile", metavar="PROFILE", help="Compare against this profile's plan.")
@plan_options
def check(
    log: str, profile: str | None, as_json: bool, free_gib: float | None, no_calibration: bool, **flags: Any
) -> None:
    """Read a vLLM startup log: the numbers it states, the failure and its fix, and predicted vs logged.

    LOG `-` (or /dev/stdin) reads the log from the standard input: `docker logs vllm 2>&1 | vlaunch check -`.

    With --profile or --config/--model the log's own flags (non-default args, engine config, version, total
    memory) complete the plan, so `vlaunch check LOG --config config.json` needs nothing else.
    Failures: memory (insufficient_free_memory, kv_too_small_for_max_model_len, no_kv_memory, cuda_oom,
    worker_killed), invalid_config, and the launch environment (docker_daemon, no_gpu_runtime, no_cuda_gpu,
    driver_too_old, address_in_use, repo_access, out_of_disk).
    Exit 0: vLLM started (or the log shows no failure), 1: the log shows a failure, 2: unreadable input or not a
    vLLM log.
    """
    from launcher.check.compare import read_log, render_comparison, render_facts, require_vllm_log

    facts = require_vllm_log(read_log(log))
    out: dict[str, Any] = {**facts.to_json(), **facts.bytes_json()}
    plan_, comparison, note = plan_for_log(facts, profile, flags, free_gib, not no_calibration)
    if plan_ is not None and comparison is not None:
        out["predicted"] = plan_.to_json()
        out["diff"] = comparison.to_json()
    out.setdefault("predicted", None)
    out.setdefault("diff", None)
    if note:
        out["note"] = note
    if as_json:
        emit_json(out)
    else:
        click.echo(render_facts(facts))
        if comparison is not None:
            click.echo(render_comparison(comparison))
        if note:
            click.echo(f"note: {note}")
    if facts.failure is not None:
        sys.exit(1)


def plan_for_log(
    facts: Any, profile: str | None, flags: dict[str, Any], free_gib: float | None, use_calibration: bool = True
) -> Any:
    """(plan, comparison, note) for a log: the profile / --config / --model, completed by the log's own flags.

    A file that is not a vLLM log is refused here (exit 2), for `check` and `report` alike."""
    from launcher.check.compare import compare, require_vllm_log
    from launcher.common.units import gib_to_bytes
    from launcher.plan.planning import make_plan

    require_vllm_log(facts)
    if not (profile or flags.get("config") or flags.get("serve_config") or flags.get("model") or vllm_words()):
        return None, None, None
    merged = _log_flags(facts, profile, flags)
    if not merged.get("machine") and not profile:
        return None, None, "the log states no total memory: give --machine to compare"
    p = build_profile(profile, merged)
    free = free_gib if free_gib is not None else facts.free_memory_gib
    free_bytes = None if free is None else gib_to_bytes(free)
    plan_ = make_plan(p, free_bytes=free_bytes, use_calibration=use_calibration, detect=detect())
    return plan_, compare(plan_, facts), None


def _log_flags(facts: Any, profile: str | None, flags: dict[str, Any]) -> dict[str, Any]:
    """The log's own flags, version and (without a profile) machine, under the flags given."""
    from launcher.check.compare import flags_from_log

    merged = {k: v for k, v in flags_from_log(facts).items()}
    merged.update({k: v for k, v in flags.items() if v is not None})
    if not merged.get("vllm_version") and facts.vllm_version:
        merged["vllm_version"] = facts.vllm_version
    if not merged.get("machine") and facts.total_memory_gib is not None and not profile:
        merged["machine"] = "cpu" if facts.device == "cpu" else "cuda"
        merged.setdefault("gpu_memory_gib", facts.total_memory_gib)
    return merged
