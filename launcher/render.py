"""Human-readable output for plans."""

from __future__ import annotations

import shlex
from typing import Literal

from launcher import units
from launcher.budget import Prediction
from launcher.planning import Plan
from launcher.units import GiB, KiB, MiB
from launcher.vllm import pool as vp
from launcher.vllm import versions as V
from launcher.vllm.specs import MambaSpec


def _g(b: int | float) -> str:
    return f"{b / GiB:8.2f}"


BarStyle = Literal["unicode", "ascii"]
BAR_WIDTH = 60
# (label, unicode char, ascii char) in drawing order; then free and the overshoot past capacity.
_BAR_CHARS = {
    "OS reserve": ("░", ":"),
    "weights": ("█", "#"),
    "KV cache": ("▓", "="),
    "state": ("▤", "~"),
    "activation": ("▒", "+"),
    "overhead": ("▞", "-"),
    "free": ("·", "."),
    "over": ("╳", "!"),
}


def memory_bar(
    buckets: list[tuple[str, int]], capacity: int, style: BarStyle = "ascii", width: int = BAR_WIDTH
) -> list[str]:
    """The buckets as one bar drawn to capacity (`[...]`), what does not fit spilling past `]`, and a legend."""
    col = 0 if style == "unicode" else 1
    used = sum(b for _, b in buckets)
    scale = max(capacity, used, 1)
    cells: list[str] = []
    cum = 0
    for name, b in buckets:
        start = round(cum * width / scale)
        cum += b
        cells += [_BAR_CHARS[name][col]] * (round(cum * width / scale) - start)
    cap_cols = round(capacity * width / scale)
    inside = cells[:cap_cols] + [_BAR_CHARS["free"][col]] * (cap_cols - len(cells))
    spill = [_BAR_CHARS["over"][col]] * (len(cells) - cap_cols)
    legend = [f"{_BAR_CHARS[n][col]} {n} {b / GiB:.2f}" for n, b in buckets if b > 0]
    if used <= capacity:
        legend.append(f"{_BAR_CHARS['free'][col]} free {(capacity - used) / GiB:.2f}")
    else:
        legend.append(f"{_BAR_CHARS['over'][col]} over by {(used - capacity) / GiB:.2f}")
    return [
        "  [" + "".join(inside) + "]" + "".join(spill) + f"  {capacity / GiB:.2f} GiB",
        "   " + "  ".join(legend) + " GiB",
    ]


def _hybrid_lines(plan: Plan) -> list[str]:
    """What vLLM does with a model whose layers keep different caches: state, block size, groups, padding."""
    p, a = plan.prediction, plan.prediction.args
    lay = p.layout
    out: list[str] = []
    if lay.mamba_page_bytes:
        state_layers = lay.state_layers()
        attn_layers = lay.layers_on_rank - state_layers
        out.append(
            f"  state per request: {p.state_bytes_per_request / MiB:,.2f} MiB over {state_layers} "
            f"Mamba/linear-attention layers ({lay.mamba_page_bytes / KiB:,.1f} KiB each, SSM state "
            f"{a.mamba_ssm_cache_dtype}), mamba_cache_mode {a.mamba_cache_mode}: vLLM keeps "
            f"{_state_blocks(p)} state block(s) per layer per request"
        )
        if attn_layers:
            out.append(
                f"  hybrid: the state is fixed per request and only {attn_layers} of {lay.layers_on_rank} layers "
                'grow with context, so "KV per token × tokens" does not size this model: users × (state + KV of '
                "the attention layers) does"
            )
        else:
            out.append("  attention-free: a request holds its state whatever its length; nothing grows with context")
        if lay.aligned:
            out.append(
                f"  attention block size {lay.block_size} tokens (vLLM raises it from {lay.requested_block_size} so "
                f"an attention page ≥ the {lay.mamba_page_bytes / KiB:,.1f} KiB state page; the state page is "
                f"padded {100 * (lay.page_bytes - lay.mamba_page_bytes) / lay.mamba_page_bytes:.2f}%)"
            )
    if lay.hybrid:
        kinds: dict[str, int] = {}
        for g in lay.groups:
            kinds[g.kind] = kinds.get(g.kind, 0) + 1
        groups = ", ".join(f"{n} × {k}" for k, n in kinds.items())
        pad = sum(lay.padding_layers)
        out.append(
            f"  KV cache groups: {lay.n_groups} of {lay.group_size} layers ({groups})"
            + (f"; {pad} padding layer(s)" if pad else "")
        )
    return out


def _state_blocks(p: Prediction) -> int:
    ctx = p.args.context()
    return next((g.blocks_per_request(ctx) for g in p.layout.groups if isinstance(g.spec, MambaSpec)), 0)


def render_plan(plan: Plan, *, bar: BarStyle | None = "ascii") -> str:
    """The plan as text; `bar` adds the memory bar under the bucket table (None: no bar)."""
    p, prof, m = plan.prediction, plan.profile, plan.machine
    a = p.args
    kind = "unified memory" if m.unified else f"{m.gpus} GPU(s)" if m.gpus > 1 else "per GPU"
    lines = [
        f"{prof.name}: {prof.model} on {m.name} ({m.total_bytes / GiB:.2f} GiB, {kind}), "
        f"vLLM {V.fmt_version(a.version)} ({a.engine}, {a.platform})",
        f"  {plan.spec.describe()}, max_model_len {a.max_model_len:,}, {units.users(prof.users)}, "
        f"tp {a.tensor_parallel_size}"
        + (f", pp {a.pipeline_parallel_size}" if a.pipeline_parallel_size > 1 else "")
        + f", max_num_batched_tokens {a.max_num_batched_tokens:,}, max_num_seqs {a.max_num_seqs}",
        "",
        "  bucket                 GiB",
    ]
    per_tok = p.kv_bytes_per_token
    rows = []
    if p.os_reserve_bytes:
        rows.append(("OS reserve", p.os_reserve_bytes, "left to the OS, page cache and desktop"))
    lay = p.layout
    kv_rows: list[tuple[str, int, str]] = [
        ("KV cache", p.kv_need_bytes, f"{prof.users} × {a.max_model_len:,} tokens × {per_tok / KiB:.1f} KiB")
        if lay.groups
        else ("KV cache", 0, "none: " + ("an encoder keeps no KV cache" if a.pooling else "no layer keeps one"))
    ]
    if p.state_need_bytes:
        attn_layers = lay.layers_on_rank - lay.state_layers()
        kv_rows = [
            (
                "KV cache",
                p.kv_need_bytes - p.state_need_bytes,
                f"{prof.users} × {a.max_model_len:,} tokens, {attn_layers} of {lay.layers_on_rank} layers",
            ),
            (
                "state",
                p.state_need_bytes,
                f"{prof.users} × {p.state_request_bytes / MiB:,.1f} MiB per request, any length",
            ),
        ]
    rows += [
        ("weights", p.weights_bytes, plan.spec.describe() + (" per rank" if a.tensor_parallel_size > 1 else "")),
        *kv_rows,
        ("activation", p.activation_peak_bytes, f"profiling peak ({p.activation.model})"),
        (
            "overhead",
            p.overhead_bytes,
            f"non-torch {p.non_torch_bytes / GiB:.2f}, CUDA graphs {p.cudagraph_bytes / GiB:.2f}, "
            f"CUDA context {p.context_bytes / GiB:.2f}",
        ),
    ]
    biggest = {"weights": "weights", "kv_cache": "KV cache", "activation": "activation", "overhead": "overhead"}[
        p.biggest_bucket
    ]
    for name, b, why in rows:
        mark = " ◀ biggest" if name == biggest else ""
        lines.append(f"  {name:<16}{_g(b)}   {why}{mark}")
    lines.append(f"  {'total':<16}{_g(p.plan_total_bytes)}   of {m.total_bytes / GiB:.2f}")
    if bar is not None:
        lines.append("")
        lines += memory_bar([(name, b) for name, b, _ in rows], m.total_bytes, bar)
    lines.append("")
    lines.append(
        f"  gpu_memory_utilization {p.gpu_memory_utilization:.2f} → vLLM claims {p.requested_bytes / GiB:.2f} GiB; "
        f"{p.util_reason}"
    )
    lines += _hybrid_lines(plan)
    if lay.groups:
        lines.append(
            f"  available KV {p.available_kv_bytes / GiB:.2f} GiB → {p.pool.num_blocks:,} blocks of {lay.block_size} "
            f"tokens ({lay.bytes_per_block / KiB:,.0f} KiB each"
            + (f", {lay.n_groups} hybrid groups" if lay.hybrid else "")
            + ")"
        )
        lines.append(f"  predicted log: {vp.format_tokens_line(p.pool, a.max_model_len, a.version, a.platform)}")
        lines.append(f"  max users at {a.max_model_len:,} tokens: {p.max_users} (memory − OS − weights − overhead − "
                     "activation, ÷ KV per request)")  # fmt: skip
    if len(plan.ranks) > 1:
        neck = next(r for r in plan.ranks if r["bottleneck"])
        lines.append(
            f"  ranks: {len(plan.ranks)} (tp {a.tensor_parallel_size} × pp {a.pipeline_parallel_size}); bottleneck "
            f"rank {neck['rank']} (stage {neck['pp_rank']}, layers {neck['layers'][0]}-{neck['layers'][1] - 1}, "
            f"{neck['node']}): {neck['kv_pool_blocks']:,} blocks; the pool is the minimum over ranks"
        )
    for n in p.notes:
        lines.append(f"  note: {n}")
    lines.append("")
    if plan.fits and not lay.groups:
        lines.append(f"fits: yes — no KV pool; weights, activation and overhead fit in {m.total_bytes / GiB:.2f} GiB")
    elif plan.fits:
        lines.append(f"fits: yes — {units.users(prof.users)} × {a.max_model_len:,} tokens, pool for "
                     f"{p.pool.max_concurrency:.2f}")  # fmt: skip
    else:
        lines.append("fits: NO")
        for r in ([plan.invalid] if plan.invalid else []) + list(p.reasons):
            lines.append(f"  - {r}")
        if p.fixes:
            lines.append("  cheapest fixes: " + "; ".join(p.fixes))
    lines.append("")
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in plan.env)
    lines.append("command: " + (env + " " if env else "") + shlex.join(plan.argv))
    return "\n".join(lines)
