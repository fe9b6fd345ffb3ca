"""A plan as a pipeline of steps, each a function of the one before (and of the cache its expensive parts share):

    profile + machine ─ resolve.resolve_request  → Request        the engine arguments for the vLLM version
                      ─ layers.model_layers      → ModelLayers    tensors and bytes, drafter, KV per token
                      ─ ranks.rank_weights       → RankWeights    where the ranks run, the weights each loads
                      ─ cache_layout.cache_layout → CacheLayout   specs, groups, blocks per request
                      ─ buckets.buckets          → Buckets        activation, non-torch, graphs, context
                      ─ verdict.verdict          → Verdict        utilization, pool, fits, users, notes

`explain` prints each step's output in that order (`vlaunch plan --explain`).
"""

from __future__ import annotations

from launcher.common.records import dataclass
from launcher.common.units import GiB
from launcher.plan.buckets import Buckets, buckets
from launcher.plan.cache import PlanCache
from launcher.plan.cache_layout import CacheLayout, cache_layout
from launcher.plan.layers import ModelLayers, model_layers
from launcher.plan.profiles import Profile
from launcher.plan.ranks import RankWeights, rank_weights
from launcher.plan.resolve import PlanOptions, Request, resolve_request
from launcher.plan.verdict import Verdict, verdict
from launcher.vllm import versions as V


@dataclass(frozen=True)
class Steps:
    """Every step's output of one plan, in order."""

    request: Request
    model: ModelLayers
    weights: RankWeights
    layout: CacheLayout
    buckets: Buckets
    verdict: Verdict


def run(profile: Profile, options: PlanOptions, cache: PlanCache) -> Steps:
    """The steps of one plan, each fed the one before."""
    request = resolve_request(profile, options, cache)
    model = model_layers(request, cache)
    weights = rank_weights(model, cache)
    layout = cache_layout(weights, cache)
    sized = buckets(layout, cache)
    return Steps(request, model, weights, layout, sized, verdict(sized, cache))


def _gib(n: int | float) -> str:
    return f"{n / GiB:.2f} GiB"


def _explain_request(r: Request) -> list[str]:
    a, m = r.args, r.machine
    return [
        "1. request (resolve.Request)",
        f"   model {r.profile.model} ({r.shape.model_type}), config {r.source.config_path}",
        f"   vLLM {V.fmt_version(r.version)} ({r.detected.source}), engine {a.engine} on {a.platform}",
        f"   machine {m.name}: {_gib(m.total_bytes)} per GPU, {'unified' if m.unified else 'discrete'} memory, "
        f"{m.gpus} GPU(s) ({m.source})",
        f"   weights {r.spec.describe()} (checkpoint {r.stored.describe()}), --quantization {r.quant.flag or '-'}",
        f"   max_model_len {a.max_model_len:,}, block_size {a.block_size}, kv_cache_dtype {a.kv_cache_dtype}, "
        f"tp {a.tensor_parallel_size} × pp {a.pipeline_parallel_size}, max_num_batched_tokens "
        f"{a.max_num_batched_tokens:,}, max_num_seqs {a.max_num_seqs}, prefix caching {a.prefix_caching}, "
        f"enforce_eager {a.enforce_eager}, speculative {a.speculative_method or '-'}",
    ]


def _explain_model(m: ModelLayers) -> list[str]:
    shape = m.request.shape
    kinds = ", ".join(sorted(shape.mixer_kinds)) or "none"
    drafter = f"{m.drafter.num_layers} layers, {_gib(m.drafter_bytes)} per rank" if m.drafter is not None else "-"
    stages = ", ".join(f"pp {i}: layers {s.start}-{s.stop - 1}" for i, s in enumerate(m.stages))
    return [
        "2. model (layers.ModelLayers)",
        f"   {shape.num_layers} layers ({kinds}), {len(shape.mtp_layers)} MTP; {len(m.tensors)} tensors, "
        f"{_gib(sum(m.tensor_bytes))} in {m.request.spec.name}",
        f"   drafter {drafter}; KV {m.kv.per_token:,} bytes per token per rank; {stages}",
    ]


def _explain_weights(w: RankWeights) -> list[str]:
    out = ["3. weights per rank (ranks.RankWeights)"]
    for slot, b in zip(w.slots, w.weights, strict=True):
        out.append(
            f"   pp {slot.pp_rank}, ranks {', '.join(map(str, slot.ranks))} on {slot.node} ({slot.machine.name}): "
            f"{_gib(b)}" + (f" (checkpoint extra {w.exact_extra:,} bytes)" if w.exact_extra else "")
        )
    return out


def _explain_layout(c: CacheLayout) -> list[str]:
    out = ["4. cache layout (cache_layout.CacheLayout)"]
    for slot, rank in zip(c.weights.slots, c.ranks, strict=True):
        lay = rank.layout
        groups = ", ".join(f"{g.kind} × {g.layers}" for g in lay.groups) or "no KV cache"
        out.append(
            f"   pp {slot.pp_rank}: {groups}; block {lay.block_size} tokens, {lay.bytes_per_block:,} bytes per block; "
            f"{rank.blocks_per_request:,} blocks per request ({_gib(rank.request_bytes)}), state "
            f"{rank.state_request_bytes:,} bytes"
        )
    return out


def _explain_buckets(b: Buckets) -> list[str]:
    out = ["5. buckets (buckets.Buckets)"]
    for slot, rb in zip(b.layout.weights.slots, b.ranks, strict=True):
        out.append(
            f"   pp {slot.pp_rank}: weights {_gib(rb.weights_bytes)}, KV need {_gib(rb.kv_need_bytes)}, activation "
            f"{_gib(rb.activation.peak)} ({rb.activation.model}), non-torch {_gib(rb.non_torch_bytes)}, CUDA graphs "
            f"{_gib(rb.cudagraph_bytes)}, context {_gib(rb.context_bytes)}, OS reserve {_gib(rb.os_reserve_bytes)}; "
            f"in the budget besides KV {_gib(rb.non_kv_in_budget)}, outside it {_gib(rb.outside_bytes)}"
        )
    cal = b.calibration
    if cal.gpu_terms is not None or cal.cpu_worker is not None:
        out.append(f"   calibrated: {cal.gpu_terms.note if cal.gpu_terms else 'CPU worker memory'}")
    return out


def _explain_verdict(v: Verdict) -> list[str]:
    p = v.prediction
    out = [
        "6. verdict (verdict.Verdict)",
        f"   gpu_memory_utilization {p.gpu_memory_utilization}: {p.util_reason}",
        f"   budget {_gib(p.requested_bytes)}, available KV {_gib(p.available_kv_bytes)}; pool {p.pool.num_blocks:,} "
        f"blocks, {p.pool.tokens:,} tokens, {p.pool.max_concurrency:.2f} requests of {p.args.max_model_len:,}",
        f"   users {v.buckets.layout.weights.layers.request.profile.users} (at most {p.max_users}); bottleneck pp "
        f"{v.buckets.layout.weights.slots[v.worst].pp_rank}; fits {p.fits and v.invalid is None}"
        + (f" ({p.failure})" if p.failure else ""),
    ]
    out += [f"   invalid: {v.invalid}"] if v.invalid else []
    out += [f"   reason: {r}" for r in p.reasons]
    out += [f"   fix: {f}" for f in p.fixes]
    out += [f"   note: {n}" for n in p.notes]
    return out


def explain(steps: Steps) -> list[str]:
    """Each step's output, in the pipeline's order, as lines to print."""
    return [
        *_explain_request(steps.request),
        *_explain_model(steps.model),
        *_explain_weights(steps.weights),
        *_explain_layout(steps.layout),
        *_explain_buckets(steps.buckets),
        *_explain_verdict(steps.verdict),
    ]
