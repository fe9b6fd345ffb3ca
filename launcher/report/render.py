"""Human-readable output for plans."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Literal

from launcher.common import units
from launcher.common.units import GiB, KiB, MiB
from launcher.plan.budget import Prediction
from launcher.plan.planning import Plan
from launcher.vllm import pool as vp
from launcher.vllm import versions as V
from launcher.vllm.specs import MambaSpec

if TYPE_CHECKING:
    from launcher.plan.fit import Fit
    from launcher.plan.fit import Row as FitRow
    from launcher.plan.machines import Machine


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
    p, m = plan.prediction, plan.machine
    lines = _plan_head(plan)
    rows = _bucket_rows(plan)
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
    lines += _pool_lines(plan)
    lines.append("")
    lines += _verdict_lines(plan)
    lines.append("")
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in plan.shown_env.items())
    lines.append("command: " + (env + " " if env else "") + shlex.join(plan.shown_argv))
    return "\n".join(lines)


def _plan_head(plan: Plan) -> list[str]:
    """The profile, machine and vLLM in two lines, then the bucket table's header."""
    prof, m, a = plan.profile, plan.machine, plan.prediction.args
    kind = "unified memory" if m.unified else f"{m.gpus} GPU(s)" if m.gpus > 1 else "per GPU"
    return [
        f"{prof.name}: {prof.model} on {m.name} ({m.total_bytes / GiB:.2f} GiB, {kind}), "
        f"vLLM {V.fmt_version(a.version)} ({a.engine}, {a.platform})",
        f"  {plan.spec.describe()}, max_model_len {a.max_model_len:,}, {units.users(prof.users)}, "
        f"tp {a.tensor_parallel_size}"
        + (f", pp {a.pipeline_parallel_size}" if a.pipeline_parallel_size > 1 else "")
        + f", max_num_batched_tokens {a.max_num_batched_tokens:,}, max_num_seqs {a.max_num_seqs}",
        "",
        "  bucket                 GiB",
    ]


def _bucket_rows(plan: Plan) -> list[tuple[str, int, str]]:
    """The bucket table: (name, bytes, what it holds), the OS reserve first when the plan keeps one."""
    p, prof = plan.prediction, plan.profile
    a = p.args
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
    return rows


def _pool_lines(plan: Plan) -> list[str]:
    """What vLLM claims, the KV pool it makes of it, the bottleneck rank and the plan's notes."""
    p = plan.prediction
    a, lay = p.args, p.layout
    lines = [
        f"  gpu_memory_utilization {p.gpu_memory_utilization:.2f} → vLLM claims {p.requested_bytes / GiB:.2f} GiB; "
        f"{p.util_reason}"
    ]
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
    return lines


def _verdict_lines(plan: Plan) -> list[str]:
    """fits: yes (and for what), or NO with the reasons and the cheapest fixes."""
    p, prof, m = plan.prediction, plan.profile, plan.machine
    a = p.args
    if plan.fits and not p.layout.groups:
        return [f"fits: yes — no KV pool; weights, activation and overhead fit in {m.total_bytes / GiB:.2f} GiB"]
    if plan.fits:
        return [f"fits: yes — {units.users(prof.users)} × {a.max_model_len:,} tokens, pool for "
                f"{p.pool.max_concurrency:.2f}"]  # fmt: skip
    lines = ["fits: NO"]
    for r in ([plan.invalid] if plan.invalid else []) + list(p.reasons):
        lines.append(f"  - {r}")
    if p.fixes:
        lines.append("  cheapest fixes: " + "; ".join(p.fixes))
    return lines


# --- vlaunch fit ------------------------------------------------------------------------------------------------


def _fit_cells(r: FitRow, by_users: bool) -> list[str]:
    j = r.to_json()
    o = r.option
    par = (
        "1"
        if o.gpus == 1
        else (f"tp{o.tensor_parallel_size}" if o.tensor_parallel_size > 1 else "")
        + (f"pp{o.pipeline_parallel_size}" if o.pipeline_parallel_size > 1 else "")
        + ("ep" if o.expert_parallel else "")
    )
    users = max(r.users, 1)
    per_user = r.plan.prediction.kv_need_bytes // users
    left = j["os_reserve_left_bytes"]
    ceiling = j["decode_tokens_per_s_ceiling"]
    cells = [
        str(r.rank) + ("*" if r.chosen else ""),
        o.format + ("†" if r.needs_checkpoint else ""),
        o.kv_cache_dtype,
        par,
        str(o.nodes),
        f"mtp{dict(o.speculative).get('num_speculative_tokens', 1)}" if o.speculative else "-",
        str(j["max_num_seqs"]),
        f"{r.max_model_len:,}",
        f"{r.users:,}",
        "yes" if r.fits else "NO",
        f"{j['weights_bytes'] / GiB:.2f}",
        f"{per_user / GiB:.2f}",
        r.binding_bucket or "refused",
        f"{j['gpu_memory_utilization']:.2f}",
        "-" if left is None else f"{left / GiB:.1f}",
        f"{r.max_users:,}",
    ]
    if by_users:
        cells += [f"{r.max_context_by_users.get(n, 0):,}" for n in (1, 4, 16)]
    else:
        cells.append(f"{r.max_context:,}")
    cells.append("-" if ceiling is None else f"{ceiling:,.1f}")
    sp = r.speed
    cells.append("-" if sp is None else f"{sp.expected.tokens_per_s:,.1f}{_SOURCE_MARK[sp.expected.efficiency.source]}")
    cells.append("-" if sp is None else f"{sp.expected.aggregate_tokens_per_s:,.0f}")
    cells.append("-" if sp is None or sp.ttft_s is None else f"{sp.ttft_s:,.1f}")
    cells.append("miss" if r.misses else "")
    return cells


_SOURCE_MARK = {"measured": "m", "calibrated": "c", "default": "d"}


def _ranks(ranks: list[int]) -> str:
    """#3, #5–9: rows by rank, consecutive ones as a span."""
    spans: list[list[int]] = []
    for r in ranks:
        if spans and r == spans[-1][-1] + 1:
            spans[-1].append(r)
        else:
            spans.append([r])
    return ", ".join(f"#{s[0]}" if len(s) == 1 else f"#{s[0]}–{s[-1]}" for s in spans)


def render_fit(fit: Fit, *, top: int | None = 12) -> str:
    """The options as a table per machine, best first, with what each costs and why."""
    t = fit.target
    by_users = t.users is None
    head = ["#", "weights", "KV", "par", "nodes", "spec", "seqs", "context", "users", "fits", "weights",
            "KV/user", "binds", "util", "OS left", "max users"]  # fmt: skip
    head += ["ctx@1", "ctx@4", "ctx@16"] if by_users else ["max ctx"]
    head += ["tok/s≤", "tok/s", "total", "TTFT", "targets"]
    lines = [
        f"{fit.model} ({fit.model_type}, {fit.checkpoint_format} checkpoint, context {fit.model_context:,}), "
        f"vLLM {fit.vllm_version} ({fit.vllm_version_source})",
        f"target: {_fit_want(fit)}",
        f"searched {fit.options} options with {fit.plans} plans in {fit.seconds:.2f} s",
        f"ranked for {fit.prefer} (--prefer): {fit.ranking_rule}",
    ]
    for m in fit.machines:
        lines += _fit_machine_lines(fit, m, head, top)
    lines += [
        "",
        "GiB per GPU. weights: † a checkpoint in that format is needed (vLLM makes only fp8 and its online "
        "shorthands from a 16-bit one while loading). binds: the bucket that stops the row (when it fits: the one "
        "each user grows). OS left: memory vLLM's claim leaves to the OS on unified memory.",
        "tok/s≤ is a ceiling per user, not a benchmark: bandwidth ÷ bytes one decode step reads (active weights, "
        "every user's KV at the full context)"
        + "".join(f"; {m.name}: {m.bandwidth_source}" for m in fit.machines if m.bandwidth_source)
        + ".",
        "tok/s is the expected decode per user (total: all users), TTFT one user's prefill at the context in "
        f"seconds; c: calibrated from published measured points, m: measured in this box's runs, d: a default. MTP "
        f"drafts accepted at {fit.mtp_acceptance:g} (--mtp-acceptance).",
    ]
    lines += [f"note: {n}" for n in fit.notes]
    return "\n".join(lines)


def _fit_want(fit: Fit) -> str:
    """The target the fit searched for, in words."""
    t = fit.target
    return (
        f"{units.users(t.users)} × {t.context:,} tokens"
        if t.users is not None and t.context is not None
        else f"{units.users(t.users)} at the longest context that fits"
        if t.users is not None
        else f"one user at {t.context:,} tokens; max users and the longest context for 1, 4, 16 users"
        if t.context is not None
        else f"the model's context ({fit.model_context:,}); max users and the longest context for 1, 4, 16 users"
    )


_FIT_RIGHT = {
    0,
    7,
    8,
    10,
    11,
    13,
    14,
    15,
    16,
    17,
    18,
    19,
    20,
    21,
    22,
}  # the last column (targets) reads left  # the fit table's columns aligned right


def _fit_machine_lines(fit: Fit, m: Machine, head: list[str], top: int | None) -> list[str]:
    """One machine's table (its first `top` rows), why rows do not fit, and the chosen row's command."""
    by_users = fit.target.users is None
    rows = [r for r in fit.rows if r.machine == m.name]
    shown = rows if top is None else rows[:top]
    bw = f", {m.bandwidth_bytes_per_s / 1e9:,.0f} GB/s" if m.bandwidth_bytes_per_s else ""
    kind = "unified" if m.unified else "per GPU"
    lines = ["", f"{m.name} ({m.total_bytes / GiB:.2f} GiB {kind}{bw}): {len(rows)} options, "
             f"{sum(r.fits for r in rows)} fit"]  # fmt: skip
    table = [head] + [_fit_cells(r, by_users) for r in shown]
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    for row in table:
        cells = [
            c.rjust(w) if i in _FIT_RIGHT else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  " + "  ".join(cells).rstrip())
    if len(shown) < len(rows):
        lines.append(f"  … {len(rows) - len(shown)} more (--all, or --json for every row)")
    why: dict[str, list[int]] = {}
    for r in shown:
        reasons = ([r.plan.invalid] if r.plan.invalid else []) + list(r.plan.prediction.reasons)
        if not r.fits and reasons:
            why.setdefault(reasons[0], []).append(r.rank)
    for reason, ranks in why.items():
        lines.append(f"  {_ranks(ranks)}: {reason}")
    best = next((r for r in rows if r.chosen), None)
    if best is not None:
        from launcher.plan.profiles import cli_words

        # the row's whole profile as flags: the base's own (the machine's figure, the version…) and the option's
        flags = " ".join(shlex.quote(f) for f in cli_words(best.plan.profile))
        nodes = " (with nodes: write it as a profile)" if best.option.nodes > 1 else ""
        command = f"vlaunch plan --model {shlex.quote(fit.model)} {flags}"
        lines.append(f"  chosen #{best.rank}: {command}{nodes}")
    elif rows:
        lines.append("  nothing fits: the reasons above say which bucket and by how much")
    return lines
