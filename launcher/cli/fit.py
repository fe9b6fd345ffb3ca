"""`vlaunch fit`: the ways to run a model on a machine, each planned as `plan` plans it, best first."""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from launcher.cli.options import (
    FORCE_HELP,
    VllmCommand,
    build_profile,
    detect,
    machine_names,
    plan_options,
    vllm_words,
)
from launcher.cli.output import (
    EXIT_DOES_NOT_FIT,
    distinct_outputs,
    emit_json,
    inputs_of,
    output_target,
    write_text,
)
from launcher.common.errors import VlaunchError

_FIT_PINNABLE = ("quantization", "kv_cache_dtype", "tensor_parallel_size", "pipeline_parallel_size",
                 "speculative_config", "max_num_seqs")  # fmt: skip


@click.command(cls=VllmCommand)
@click.argument("model_arg", metavar="[MODEL]", required=False)
@plan_options
@click.option("--context", "context", metavar="TOKENS",
              help="Context each user needs (8192, 32k, 32K, 128K); default: the longest that fits.")  # fmt: skip
@click.option("--compare", metavar="M1,M2,…", help="Search these machines too (spark,h100,rtx4090).")
@click.option("--gpus", type=click.IntRange(1, 4096), help="GPUs in the box (default: read, else 1).")
@click.option(
    "--max-nodes",
    type=click.IntRange(1, 2),
    help="DGX Sparks a model may span (one GPU each, vLLM's Ray executor); default: the profile's nodes, else 1.",
)
@click.option(
    "--prefer",
    type=click.Choice(["speed", "balanced", "quality"]),
    default="balanced",
    show_default=True,
    help="What ranks first among the rows that fit: decode speed, 8-bit-or-better weights then speed, or the "
    "weights closest to 16 bits.",
)
@click.option("--min-tokens-per-s", type=click.FloatRange(min=0, min_open=True), metavar="TOKENS",
              help="Target: expected decode tokens/s per user at least this.")  # fmt: skip
@click.option("--max-ttft", "max_ttft", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Target: expected time to first token at the context at most this many seconds.")  # fmt: skip
@click.option("--mtp-acceptance", type=click.FloatRange(0, 1), default=0.7, show_default=True,
              help="Chance each MTP draft token is accepted (the expected speed of MTP rows).")  # fmt: skip
@click.option(
    "--formats",
    "formats_",
    metavar="F1,F2,…",
    help="Weight formats to consider (default: the checkpoint's own and those its family ships).",
)
@click.option(
    "--memory-bandwidth-gbs",
    type=click.FloatRange(min=0.001, max=1e7),
    help="Memory bandwidth per GPU in GB/s for the decode ceiling (default: the machine catalog's).",
)
@click.option("--top", type=click.IntRange(min=1), default=12, show_default=True, help="Rows shown per machine.")
@click.option("--all", "show_all", is_flag=True, help="Show every row.")
@click.option("--html", "html_path", metavar="FILE", help="Also write the options as bars on one scale.")
@click.option(
    "--write-profile",
    "write_profile",
    metavar="NAME",
    help="Write the chosen row as profiles/NAME.yaml (or NAME when it is a path) for plan and serve.",
)
@click.option("--pick", type=click.IntRange(min=1), metavar="RANK",
              help="With --write-profile (required): write the row of this rank, not the chosen one.")  # fmt: skip
@click.option("--force", is_flag=True, help=FORCE_HELP)
def fit(
    model_arg: str | None,
    context: str | None,
    compare: str | None,
    gpus: int | None,
    max_nodes: int | None,
    prefer: str,
    min_tokens_per_s: float | None,
    max_ttft: float | None,
    mtp_acceptance: float,
    formats_: str | None,
    memory_bandwidth_gbs: float | None,
    top: int,
    show_all: bool,
    html_path: str | None,
    write_profile: str | None,
    pick: int | None,
    force: bool,
    as_json: bool,
    free_gib: float | None,
    no_calibration: bool,
    **flags: Any,
) -> None:
    """The ways to run MODEL on a machine, each planned exactly as `plan` plans it, best first.

    MODEL is a repo id, a model directory, a config.json or a profile (or leave it out and give --model,
    --hf-config-path or --config). vlaunch enumerates the weight format (the checkpoint's own; for a 16-bit
    checkpoint what vLLM makes from it while loading: fp8, MXFP4, NVFP4 for MoE experts on Blackwell), the KV cache
    dtype (auto, fp8), tensor / pipeline parallel over the box's GPUs (expert parallel for a MoE), up to
    --max-nodes DGX Sparks, MTP speculative decoding where the checkpoint has it, and max_num_seqs; a choice given
    as a flag (--quantization, --kv-cache-dtype, -tp, -pp, --speculative-config, --max-num-seqs) is held. Rows
    that fit, run from the checkpoint at hand and meet --min-tokens-per-s / --max-ttft come first, then by
    --prefer (the output states the rule in one line). Each row shows the decode ceiling (bandwidth ÷ bytes per
    step), the expected decode per user and in total, and the time to first token, each with its source. Exit 3
    when no option fits or none meets the targets.
    """
    if pick is not None and not write_profile:
        raise click.UsageError("--pick RANK chooses the row --write-profile writes; give --write-profile NAME too")
    target_context = _target_context(context, flags.get("max_model_len"))
    flags = _with_vllm_values(flags, model_arg)
    if not (model_arg or flags.get("model") or flags.get("config") or flags.get("serve_config")):
        raise click.UsageError("Missing argument 'MODEL' (a repo id, directory, config.json or profile) or --model")
    flags = {**flags, "max_model_len": None}
    base = _fit_base(model_arg, flags)
    if base.source is not None:  # a profile: its users and context are the target unless flags say otherwise
        if flags.get("users") is None:
            flags = {**flags, "users": base.users}
        if target_context is None and isinstance(base.max_model_len, int):
            target_context = base.max_model_len
    from launcher.common.units import gib_to_bytes

    free_bytes = None if free_gib is None else gib_to_bytes(free_gib)
    options = {"gpus": gpus, "max_nodes": max_nodes, "bandwidth_gbs": memory_bandwidth_gbs, "free_bytes": free_bytes,
               "prefer": prefer, "mtp_acceptance": mtp_acceptance}  # fmt: skip
    goals = {"min_tokens_per_s": min_tokens_per_s, "max_ttft_s": max_ttft}
    result = _search(base, flags, target_context, compare, formats_, goals, use_calibration=not no_calibration,
                     **options)  # fmt: skip
    written = _write_outputs(result, base, flags, write_profile, pick, html_path, force)
    _show_fit(result, written, html_path, as_json=as_json, top=None if show_all else top)
    if not result.meets_targets:
        sys.exit(EXIT_DOES_NOT_FIT)


def _target_context(context: str | None, given_len: Any) -> int | None:
    """--context (or --max-model-len) in tokens; None for the longest that fits."""
    from launcher.plan.profiles import parse_tokens

    if context is not None and given_len is not None and str(context) != str(given_len):
        raise VlaunchError("--context and --max-model-len say different things; give one")
    raw_context = context if context is not None else given_len
    if raw_context is not None and str(raw_context).strip().lower() in ("auto", "-1"):
        raw_context = None  # the longest that fits: fit's own search
    return None if raw_context is None else parse_tokens(raw_context, "--context")


def _allowed_formats(formats_: str | None) -> tuple[str, ...] | None:
    """--formats as format names; None for every format the search considers."""
    if not formats_:
        return None
    from launcher.model.formats import normalize_name

    return tuple(normalize_name(x) for x in formats_.split(",") if x.strip())


def _search(
    base: Any,
    flags: dict[str, Any],
    context: int | None,
    compare: str | None,
    formats_: str | None,
    goals: dict[str, float | None],
    **options: Any,
) -> Any:
    """The search over the base profile's machine and --compare's, holding the choices given as flags."""
    from launcher.plan import fit as fitting

    pinned = {k: flags.get(k) for k in _FIT_PINNABLE if flags.get(k) is not None}
    machines = [base.machine, *(machine_names(compare) if compare else [])]
    allowed = _allowed_formats(formats_)
    target = fitting.Target(users=flags.get("users"), context=context, **goals)
    return fitting.search(base, machines, target, formats_allowed=allowed, pinned=pinned, detect=detect(), **options)


def _show_fit(result: Any, written: str | None, html_path: str | None, *, as_json: bool, top: int | None) -> None:
    """The rows, best first, and what was written."""
    from launcher.report.render import render_fit

    if as_json:
        data = result.to_json()
        data["written_profile"] = written
        emit_json(data)
    else:
        click.echo(render_fit(result, top=top))
        if written:
            click.echo(f"profile: {written} (vlaunch plan {written}; vlaunch serve {written})")
        if html_path:
            click.echo(f"html: {html_path}")


def _with_vllm_values(flags: dict[str, Any], profile: str | None) -> dict[str, Any]:
    """fit's flags with the vLLM options given to it read in: the values it holds fixed (`-q`, `-tp` …) are
    planning values; the rest stays vLLM's, passed to every row."""
    from launcher.plan.request import vllm_values

    words = vllm_words()
    if not words:
        return flags
    parsed = vllm_values(words, flags, profile if profile and profile.endswith((".yaml", ".yml")) else None)
    ctx = click.get_current_context()
    ctx.meta["vlaunch.vllm_words"] = parsed.extra_args
    return {**parsed.values, **{k: v for k, v in flags.items() if v is not None}}


def _fit_base(model: str | None, flags: dict[str, Any]) -> Any:
    """The profile fit starts from: a profile (a .yaml file, or a name `vlaunch profiles` lists) with the flags
    over it, or MODEL (repo id, directory, config.json) with the flags; without MODEL, what --model,
    --hf-config-path or --config name."""
    from pathlib import Path

    from launcher.common.files import expand_user
    from launcher.plan.profiles import profile_names

    if model is None:
        return build_profile(None, flags)
    local = Path(expand_user(model, VlaunchError))
    names = set(profile_names(Path.cwd() / "profiles"))
    is_dir_or_json = local.is_dir() or (local.is_file() and local.suffix == ".json")
    if not is_dir_or_json and (model.endswith((".yaml", ".yml")) or ("/" not in model and model in names)):
        return build_profile(model, flags)
    if flags.get("model") and flags["model"] != model:
        raise VlaunchError(f"MODEL is {model!r} and --model is {flags['model']!r}; give one")
    return build_profile(None, {**flags, "model": model})


def _write_outputs(
    result: Any,
    base: Any,
    flags: dict[str, Any],
    write_profile: str | None,
    pick: int | None,
    html_path: str | None,
    force: bool,
) -> str | None:
    """Write --write-profile's row and --html's page, both refused before either is written; the profile's path."""
    from launcher.plan import fit as fitting

    inputs = inputs_of(base, flags.get("serve_config"), source=result.rows[0].plan.source if result.rows else None)
    path = _fit_profile_path(write_profile) if write_profile else None
    distinct_outputs([("--write-profile", path), ("--html", html_path)])
    for out in (path, html_path):
        if out:
            output_target(out, inputs, force)
    written = None
    if write_profile and path:
        row = _fit_pick(result, pick)
        if not os.path.isabs(path) and path.startswith("profiles" + os.sep):
            os.makedirs("profiles", exist_ok=True)  # where `plan NAME` and `serve NAME` look first
        text = fitting.profile_text(row, os.path.basename(path).rsplit(".", 1)[0], result)
        write_text(path, text, inputs=inputs, force=force)
        written = path
    if html_path:
        from launcher.report.html import fit_page_data, render_fit_html

        page = render_fit_html(fit_page_data(result))
        write_text(html_path, page, inputs=inputs, force=force)
    return written


def _fit_profile_path(name: str) -> str:
    """--write-profile NAME: ./profiles/NAME.yaml (what `plan NAME` finds), or NAME itself when it is a path."""
    import re

    if "/" in name or name.endswith((".yaml", ".yml")):
        return name
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", name):
        raise VlaunchError("must be a profile name of letters, digits, '.', '_' and '-' (or a path)",
                           field="--write-profile")  # fmt: skip
    return os.path.join("profiles", f"{name}.yaml")


def _fit_pick(result: Any, pick: int | None) -> Any:
    if pick is not None:
        row = next((r for r in result.rows if r.rank == pick), None)
        if row is None:
            raise VlaunchError(f"no row of rank {pick}; the search has {len(result.rows)}", field="--pick")
        return row
    row = result.chosen()
    if row is None:
        from launcher.plan.fit import NothingFits

        raise NothingFits("no option fits, so none is chosen; --pick RANK writes a row anyway", field="--write-profile")
    return row
