"""A plan's expected speed: its decode step and its prefill, read off the plan, priced by `speed`.

The efficiency comes from this box's own runs (`vlaunch calibrate` over serve's records: measured), else from the
published points (`speed.PUBLISHED`: calibrated), else a stated stand-in (default).
"""

from __future__ import annotations

from launcher.common.records import dataclass
from launcher.model.kv import KVPerToken, context_bytes
from launcher.plan import speed
from launcher.plan.cache import PlanCache
from launcher.plan.planning import Plan

COMPUTE_DTYPE: dict[str, tuple[str, str]] = {
    "fp8": ("fp8", "8.9"), "int8": ("fp8", "8.9"), "mxfp8": ("fp8", "8.9"),
    "nvfp4": ("fp4", "10.0"), "mxfp4": ("fp8", "10.0"),
}  # fmt: skip
"""The dtype a format's GEMMs run in, from the compute capability that has the kernels (W8A8 FP8 from Ada; NVFP4
W4A4 and gpt-oss's MXFP4 × MXFP8 on Blackwell); below it, and for every other format, the weights are widened to
16 bits (Marlin-style W4A16 / W8A16)."""


@dataclass(frozen=True)
class RowSpeed:
    expected: speed.Expected
    ttft_s: float | None
    ttft_source: str | None
    ttft_basis: str


def compute_dtype(fmt: str, compute_capability: str | None) -> str:
    dtype, since = COMPUTE_DTYPE.get(fmt, ("bf16", "0.0"))
    if compute_capability is None:
        return "bf16"
    major, minor = (int(x) for x in compute_capability.split(".")[:2])
    need_major, need_minor = (int(x) for x in since.split("."))
    return dtype if (major, minor) >= (need_major, need_minor) else "bf16"


def _kv(plan: Plan, cache: PlanCache) -> KVPerToken:
    from launcher.plan.layers import kv_geometry

    a = plan.prediction.args
    return kv_geometry(plan.shape, a.kv_cache_dtype, a.tensor_parallel_size, cache)


def _reads(plan: Plan, cache: PlanCache) -> speed.WeightReads:
    from launcher.plan.layers import tensor_bytes

    mtp = plan.prediction.args.speculative_method == "mtp"
    ts, sizes = tensor_bytes(plan.shape, plan.spec, cache)
    key = ("weight_reads", id(plan.shape), plan.spec, mtp)
    return cache.get(key, lambda: speed.weight_reads(plan.shape, ts, sizes, mtp=mtp), plan.shape)


def decode_step(plan: Plan, users: int, cache: PlanCache, acceptance: float) -> speed.Step:
    """The plan's decode step for `users` users, each at max_model_len tokens of context."""
    a, p = plan.prediction.args, plan.prediction
    kv = _kv(plan, cache)
    return speed.Step(
        weights=_reads(plan, cache),
        cache_bytes_per_user=kv.bytes_for_context(a.max_model_len),
        state_bytes_per_user=p.state_bytes_per_request * a.pipeline_parallel_size,  # every stage's state layers
        users=max(users, 1),
        tensor_parallel_size=a.tensor_parallel_size,
        pipeline_parallel_size=a.pipeline_parallel_size,
        nodes=max(len(plan.profile.nodes), 1),
        draft_tokens=a.num_speculative_tokens if a.speculative_method == "mtp" else 0,
        acceptance=acceptance,
        hidden_size=plan.shape.hidden_size,
        layers=plan.shape.num_layers,
    )


def prefill(plan: Plan, cache: PlanCache, context: int) -> speed.Prefill:
    a = plan.prediction.args
    kv = _kv(plan, cache)
    windowed = kv.layers_sliding + kv.layers_chunked
    window = kv.sliding_window or kv.attention_chunk or 0
    shape = plan.shape
    return speed.Prefill(
        active_params=_reads(plan, cache).active_params,
        attention_width=shape.num_heads * shape.head_dim,
        layers_full=kv.layers_full,
        layers_windowed=windowed,
        window=window,
        weights_bytes=plan.prediction.weights_bytes,
        context=context,
        chunk=a.max_num_batched_tokens,
        tensor_parallel_size=a.tensor_parallel_size,
    )


def row_speed(
    plan: Plan,
    users: int,
    bandwidth: int,
    cache: PlanCache,
    *,
    acceptance: float = speed.DEFAULT_MTP_ACCEPTANCE,
    measured: dict[str, speed.Efficiency] | None = None,
) -> RowSpeed:
    """The expected decode speed of `users` users at the plan's max_model_len, and one user's time to first token
    at it. `measured`: efficiencies by regime from this box's runs of this model (they win over the published)."""
    m, shape = plan.machine, plan.shape
    step = decode_step(plan, users, cache, acceptance)
    hybrid = bool(plan.prediction.state_bytes_per_request)
    regime = speed.regime(users=users, moe=shape.is_moe, hybrid=hybrid, nodes=step.nodes)
    eff = (measured or {}).get(regime) or speed.efficiency(m.name, regime)
    flops = m.tflops(compute_dtype(plan.spec.name, m.compute_capability))
    expected = speed.expected_decode(step, bandwidth_bytes_per_s=bandwidth, eff=eff, regime_=regime, flops=flops)
    if flops is None:
        return RowSpeed(expected, None, None, f"{m.name}: no tensor throughput figure")
    pre = prefill(plan, cache, plan.prediction.args.max_model_len)
    ttft = speed.ttft_seconds(pre, flops=flops, bandwidth_bytes_per_s=bandwidth, decode_eff=eff.value)
    basis = f"{flops:g} TFLOPS ({m.tensor_source}) × {speed.PREFILL_EFFICIENCY.value}: {speed.PREFILL_EFFICIENCY.basis}"
    return RowSpeed(expected, ttft, speed.PREFILL_EFFICIENCY.source, basis)


# --- a launch's decode step, kept in its run record: `vlaunch calibrate` prices each logged interval with it -----


def step_inputs(plan: Plan, cache: PlanCache | None = None) -> dict[str, object] | None:
    """What prices a decode step of this launch at any number of users and context (JSON): None for a pooling
    model or a machine without a bandwidth figure."""
    if plan.prediction.args.pooling or not plan.machine.bandwidth_bytes_per_s:
        return None
    cache = PlanCache() if cache is None else cache
    step = decode_step(plan, 1, cache, speed.DEFAULT_MTP_ACCEPTANCE)
    kv = _kv(plan, cache)
    w = step.weights
    return {
        "machine": plan.machine.name,
        "bandwidth_bytes_per_s": plan.machine.bandwidth_bytes_per_s,
        "weights": {
            "dense_bytes": w.dense_bytes,
            "experts": [list(x) for x in w.experts],
            "active_params": w.active_params,
            "mtp_bytes": w.mtp_bytes,
        },
        "kv": {
            "full": kv.full_attention,
            "sliding": kv.sliding_attention,
            "window": kv.sliding_window,
            "chunked": kv.chunked_attention,
            "chunk": kv.attention_chunk,
        },
        "state_bytes_per_user": step.state_bytes_per_user,
        "tensor_parallel_size": step.tensor_parallel_size,
        "pipeline_parallel_size": step.pipeline_parallel_size,
        "nodes": step.nodes,
        "draft_tokens": step.draft_tokens,
        "hidden_size": step.hidden_size,
        "layers": step.layers,
        "moe": plan.shape.is_moe,
        "hybrid": bool(plan.prediction.state_bytes_per_request),
    }


def _int(v: object) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"not a byte count: {v!r}")
    return v


def kv_bytes(kv: dict[str, object], context: int) -> int:
    """KVPerToken.bytes_for_context over the stored figures."""
    window, chunk = kv.get("window"), kv.get("chunk")
    return context_bytes(context, _int(kv.get("full", 0)), _int(kv.get("sliding", 0)),
                         window if isinstance(window, int) else None, _int(kv.get("chunked", 0)),
                         chunk if isinstance(chunk, int) else None)  # fmt: skip


def step_from_inputs(inputs: dict[str, object], users: int, context: int, acceptance: float) -> speed.Step:
    """The stored step at `users` users of `context` tokens each. ValueError when the inputs are damaged."""
    w = inputs["weights"]
    kv = inputs["kv"]
    if not isinstance(w, dict) or not isinstance(kv, dict) or not isinstance(w.get("experts"), list):
        raise ValueError("damaged speed inputs")
    experts = tuple((_int(b), _int(k), _int(e)) for b, k, e in w["experts"])
    reads = speed.WeightReads(_int(w["dense_bytes"]), experts, _int(w["active_params"]), _int(w.get("mtp_bytes", 0)))
    return speed.Step(
        weights=reads,
        cache_bytes_per_user=kv_bytes(kv, max(context, 1)),
        state_bytes_per_user=_int(inputs["state_bytes_per_user"]),
        users=max(users, 1),
        tensor_parallel_size=max(_int(inputs["tensor_parallel_size"]), 1),
        pipeline_parallel_size=max(_int(inputs["pipeline_parallel_size"]), 1),
        nodes=max(_int(inputs["nodes"]), 1),
        draft_tokens=_int(inputs["draft_tokens"]),
        acceptance=acceptance,
        hidden_size=_int(inputs["hidden_size"]),
        layers=_int(inputs["layers"]),
    )
