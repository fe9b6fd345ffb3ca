"""Plan step 6, the verdict: one gpu_memory_utilization for every rank, each rank's pool and whether it fits, the
plan's figures (its bottleneck rank's) with every note, and vLLM's own refusal of the settings."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

from launcher.common.records import dataclass
from launcher.model import formats
from launcher.model.arch.model import Model
from launcher.plan import budget
from launcher.plan.buckets import Buckets
from launcher.plan.cache import PlanCache
from launcher.plan.machines import Machine, MemoryReading
from launcher.plan.profiles import Profile
from launcher.plan.ranks import Slot
from launcher.plan.resolve import Request
from launcher.vllm import quant, served, specs
from launcher.vllm import versions as V
from launcher.vllm.kvdtypes import kv_dtype_notes, kv_refusal


@dataclass(frozen=True)
class Verdict:
    """Step 6: every slot's prediction, the bottleneck's as the plan's (notes included), the rank table, vLLM's
    refusal, and the model vLLM is told to serve."""

    buckets: Buckets
    predictions: tuple[budget.Prediction, ...]  # per slot, at the common utilization
    worst: int  # the bottleneck slot: fewest blocks
    prediction: budget.Prediction  # the plan's
    ranks: tuple[dict[str, Any], ...]  # every rank: its stage, node, buckets and blocks
    invalid: str | None  # vLLM's own refusal text for impossible settings
    served_model: str


def verdict(b: Buckets, cache: PlanCache) -> Verdict:
    """Step 6: the utilization, each slot's pool and verdict, the bottleneck, the plan's notes and refusals."""
    weights = b.layout.weights
    r = weights.layers.request
    slots = weights.slots
    util, firsts = common_utilization(b)
    preds = tuple(_predict(req, c, rb, util) for req, c, rb in zip(b.requests, b.layout.ranks, b.ranks, strict=True))
    worst = min(range(len(slots)), key=lambda i: (preds[i].pool.num_blocks, -slots[i].pp_rank))
    pred = _bottleneck(r.profile, slots, preds, worst, firsts)
    ranks = rank_table(slots, preds, worst, weights.layers.stages, r.args.tensor_parallel_size)
    launch_notes, unlaunchable = launch_check(r.profile, pred, r.spec, r.stored, r.version)  # read back by that vLLM
    notes = [*launch_notes, *plan_notes(b)]
    if notes:
        pred = dataclasses.replace(pred, notes=(*pred.notes, *notes))
    invalid = unlaunchable or refusal(r)
    served, served_note = cache.get(("served", r.profile.model), lambda: served_model(r.profile.model))
    if served_note:
        pred = dataclasses.replace(pred, notes=(*pred.notes, served_note))
    return Verdict(b, preds, worst, pred, ranks, invalid, served)


def common_utilization(b: Buckets) -> tuple[float | None, list[tuple[float, str]]]:
    """One gpu_memory_utilization for all ranks: as given; else, with several ranks, what the hungriest rank needs,
    never above what any allows (the smallest where any is discrete or the biggest pool is asked for). None: each
    chooses its own. Also each rank's own choice."""
    profile = b.layout.weights.layers.request.profile
    slots = b.layout.weights.slots
    util = None if profile.gpu_memory_utilization == "auto" else float(profile.gpu_memory_utilization)
    firsts: list[tuple[float, str]] = []
    if util is None and len(slots) > 1:
        firsts = [budget.choose_utilization(*x) for x in zip(b.requests, b.layout.ranks, b.ranks, strict=True)]
        util = max(u for u, _ in firsts)
        if profile.biggest_pool or not all(sl.machine.unified for sl in slots):
            util = min(u for u, _ in firsts)
    return util, firsts


def _predict(
    req: budget.PlanRequest, c: budget.RankCache, b: budget.RankBuckets, util: float | None
) -> budget.Prediction:
    if util is not None:
        req = dataclasses.replace(req, gpu_memory_utilization=util)
    return budget.rank_prediction(req, c, b, *budget.choose_utilization(req, c, b))


def _bottleneck(
    profile: Profile,
    slots: tuple[Slot, ...],
    preds: tuple[budget.Prediction, ...],
    worst: int,
    firsts: list[tuple[float, str]],
) -> budget.Prediction:
    """The bottleneck rank's prediction, with the reasons of every rank that does not fit."""
    pred = preds[worst]
    if profile.gpu_memory_utilization == "auto" and len(slots) > 1:
        pred = dataclasses.replace(pred, util_reason=firsts[worst][1] + " (one value for every rank)")
    if not all(p.fits for p in preds):
        bad = [(sl, p) for sl, p in zip(slots, preds, strict=True) if not p.fits]
        reasons = tuple(f"rank {sl.ranks[0]} ({sl.node}): {r}" for sl, p in bad for r in p.reasons)
        pred = dataclasses.replace(
            pred, fits=False, reasons=reasons or pred.reasons, failure=bad[0][1].failure, fixes=bad[0][1].fixes
        )
    return pred


def plan_notes(b: Buckets) -> list[str]:
    """What the plan says beside the ranks' own notes: calibration, the version found, the machine, the KV dtype."""
    r = b.layout.weights.layers.request
    profile, version = r.profile, r.version
    notes = list(b.calibration.notes)
    if b.calibration.cpu_worker is not None:
        notes.append(
            f"CPU worker memory calibrated from runs of vLLM {V.fmt_version(version)} here: "
            + b.calibration.cpu_worker.describe()
        )
    notes += r.detected.warnings  # the version assumed, or unlike the image's or python's, or newer than modelled
    if profile.machine == "auto" and r.machine.backend == "cpu":
        notes.append(
            "machine auto: no NVIDIA GPU on this box, so this plans vLLM's CPU backend here; --machine dgx-spark, "
            "h100, rtx4090, … plans for another machine"
        )
    notes += kv_dtype_notes(profile.kv_cache_dtype, r.args.kv_cache_dtype, r.shape, r.source.hf_quant_config, version)
    return notes


def served_refusal(r: Request) -> str | None:
    """vLLM's refusal of the model itself: an architecture its registry lacks, a config type it cannot read."""
    cfg = r.source.config
    archs = cfg.get("architectures")
    return served.refusal(
        [str(a) for a in archs] if isinstance(archs, list) else [],
        str(cfg.get("model_type") or r.shape.model_type),
        version=r.version,
        trust_remote_code="--trust-remote-code" in r.profile.vllm.extra_args,
        auto_map=isinstance(cfg.get("auto_map"), dict),
    )


def refusal(r: Request) -> str | None:
    """vLLM's refusal of the settings (one line), or None: GPUs, tensor parallel, max_model_len, the format, the
    KV cache dtype."""
    profile, machine, shape, args = r.profile, r.machine, r.shape, r.args
    return (
        served_refusal(r)
        or gpu_count_error(profile, machine, r.reading)
        or tp_error(shape, args.tensor_parallel_size)
        or dsv4_error(shape, r.source.config, args.block_size, args.decode_context_parallel_size)
        or dcp_error(args.tensor_parallel_size, args.decode_context_parallel_size)
        or max_len_error(shape, profile, dict(profile.vllm.env))
        or r.quant.refusal
        or quant.refusal(
            r.spec.name,
            version=r.version,
            platform=r.platform,
            compute_capability=machine.compute_capability,
            model_type=shape.model_type,
            method=r.quant.flag,
        )
        or kv_refusal(args.kv_cache_dtype, shape, platform=r.platform, compute_capability=machine.compute_capability)
    )


def rank_table(
    slots: tuple[Slot, ...],
    preds: tuple[budget.Prediction, ...],
    worst: int,
    stages: tuple[range, ...],
    tp: int,
) -> tuple[dict[str, Any], ...]:
    """Every rank's row: its stage, node, layers, buckets and blocks, the bottleneck marked."""
    out = []
    for i, (sl, p) in enumerate(zip(slots, preds, strict=True)):
        for rank in sl.ranks:
            out.append(
                {
                    "rank": rank,
                    "pp_rank": sl.pp_rank,
                    "tp_rank": rank % tp,
                    "node": sl.node,
                    "machine": sl.machine.name,
                    "layers": [stages[sl.pp_rank].start, stages[sl.pp_rank].stop],
                    "weights_bytes": p.weights_bytes,
                    "activation_peak_bytes": p.activation_peak_bytes,
                    "non_torch_bytes": p.non_torch_bytes,
                    "requested_bytes": p.requested_bytes,
                    "available_kv_bytes": p.available_kv_bytes,
                    "kv_pool_blocks": p.pool.num_blocks,
                    "fits": p.fits,
                    "bottleneck": i == worst,
                }
            )
    return tuple(sorted(out, key=lambda row: row["rank"]))


def launch_check(
    profile: Profile, pred: budget.Prediction, spec: formats.FormatSpec, stored: formats.FormatSpec, version: V.Version
) -> tuple[list[str], str | None]:
    """The serve arguments the plan writes, read back with the option table of the vLLM that runs: refused (one
    line) when that vLLM lacks an option the plan sets or reads one otherwise; notes for pass-through flags that
    change memory."""
    from launcher.plan.argv import engine_values, serve_args
    from launcher.vllm import interface
    from launcher.vllm.flags import check_launch

    planned = [("host", profile.vllm.host), ("port", profile.vllm.port), *engine_values(profile, pred, spec, stored)]
    words = serve_args(profile, pred, spec, stored)
    return check_launch(words, planned, interface.for_version(version), profile.vllm.extra_args)


def served_model(model: str) -> tuple[str, str | None]:
    """(what vLLM is told to serve, a note): a model's config.json is no model vLLM can serve, so the command names
    the repo its `_name_or_path` gives where it gives one."""
    if not model.endswith(".json") or not Path(model).is_file():
        return model, None
    import json

    try:
        with open(model, encoding="utf-8") as fh:
            name = json.load(fh).get("_name_or_path")
    except (OSError, ValueError, AttributeError):
        name = None
    if isinstance(name, str) and re.fullmatch(r"[\w.-]+/[\w.-]+", name):
        return name, f"model {name}: the config's _name_or_path (a config.json is counted, not served)"
    return model, (
        "a config.json is counted, not served: the command names it as vLLM's model, which vLLM cannot serve; give "
        "the model vLLM serves (a repo id or a directory) with --model and count from --hf-config-path"
    )


def max_len_error(shape: Model, profile: Profile, env: dict[str, str]) -> str | None:
    limit = shape.max_position_embeddings
    mml = profile.max_model_len
    if (
        limit
        and isinstance(mml, int)
        and mml > limit
        and env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN") not in ("1", "true", "True")
    ):
        return (
            f"User-specified max_model_len ({mml}) is greater than the derived max_model_len "
            f"(max_position_embeddings={limit} or model_max_length=None in model's config.json). To allow "
            "overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1."
        )
    return None


def known_gpus(machine: Machine, reading: MemoryReading | None) -> int | None:
    """GPUs the box has, where that is known: a unified machine (a Spark: one GB10) or a box read by nvidia-smi.
    A catalog discrete card names one GPU of a box whose count it does not know."""
    if machine.backend != "cuda":
        return None
    if machine.unified or reading is not None:
        return machine.gpus
    return None


def gpu_count_error(profile: Profile, machine: Machine, reading: MemoryReading | None) -> str | None:
    if profile.nodes:
        return None  # the nodes' GPUs are counted by placements
    world = profile.tensor_parallel_size * profile.pipeline_parallel_size * profile.data_parallel_size
    have = known_gpus(machine, reading)
    if have is None or world <= have:
        return None
    parts = f"tensor_parallel_size {profile.tensor_parallel_size} × pipeline_parallel_size " + (
        f"{profile.pipeline_parallel_size}"
    )
    if profile.data_parallel_size > 1:
        parts += f" × data_parallel_size {profile.data_parallel_size}"
    more = " (several Sparks: a profile with nodes:, see profiles/two-sparks-70b.yaml)" if machine.unified else ""
    return f"{machine.name} has {have} GPU{'s' if have > 1 else ''}; {parts} needs {world}{more}"


def dcp_error(tp: int, dcp: int) -> str | None:
    """ParallelConfig: decode context parallel reuses the tensor-parallel ranks."""
    return f"tp_size={tp} must be divisible by dcp_size={dcp}." if tp % dcp else None


def dsv4_error(shape: Model, config: Any, block_size: int, dcp: int) -> str | None:
    """What stops vLLM 0.32 building DeepSeek-V4's cache (None for other models, or when nothing does)."""
    if "compressed_attention" not in shape.mixer_kinds:
        return None
    if not isinstance(config, dict) or not isinstance(config.get("compress_ratios"), list):
        # DeepseekV4Attention.__init__ reads config.compress_ratios[layer_id]; vLLM's DeepseekV4Config sets none
        return (
            "vLLM 0.32 reads each DeepSeek-V4 layer's compression from config.json's compress_ratios, which this "
            "config lacks"
        )
    if block_size % specs.DSV4_KERNEL_BLOCK:
        # v1/worker/utils.py select_common_block_size: the sparse-MLA and indexer kernels take blocks of 256 only
        return f"No common block size for {block_size} (DeepSeek-V4's sparse MLA and indexer backends: [256])."
    if dcp > 1:
        return "DCP not support sliding window."  # SlidingWindowSpec.max_memory_usage_bytes (DeepSeek-V4's window)
    return None


def tp_error(shape: Model, tp: int) -> str | None:
    if shape.num_heads % tp:
        return f"Total number of attention heads ({shape.num_heads}) must be divisible by tensor parallel size ({tp})."
    return None
