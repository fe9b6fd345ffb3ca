"""The plan's memory besides KV as named terms: each with its bytes, where vLLM counts it (inside its budget,
outside it from the start, or added once the pool is carved) and where the figure comes from:

- source-derived: vLLM's own arithmetic on this model (parameters × format as its loaders shard them; the profile
  run's shapes);
- calibrated: measured by earlier runs of this vLLM on this machine (`vlaunch calibrate`, serve's records);
- default: a constant of the version model, measured on the logs it names;
- given: the profile's (overhead_gib, os_reserve_gib);
- measured: read from this machine now (the OS reserve on unified memory).

Pure: the terms are read off one rank's request and buckets.
"""

from __future__ import annotations

from typing import Literal

from launcher.common.records import dataclass
from launcher.common.units import GiB
from launcher.plan import budget

TermSource = Literal["source-derived", "calibrated", "default", "given", "measured"]
Where = Literal["budget", "outside", "post_pool"]


@dataclass(frozen=True)
class Term:
    name: str
    bytes: int
    where: Where  # budget: inside vLLM's budget (profiled); outside: held beside it; post_pool: added after the pool
    source: TermSource
    basis: str  # where the figure comes from, one line

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "bytes": self.bytes, "where": self.where, "source": self.source,
                "basis": self.basis}  # fmt: skip


def non_kv_terms(
    req: budget.PlanRequest, b: budget.RankBuckets, link_basis: str, reserve: TermSource = "default"
) -> tuple[Term, ...]:
    """One rank's terms besides KV. On CUDA the budget's terms add up to what vLLM's profiling keeps out of the
    pool (`non_kv_in_budget`); the rest is what the process holds beside it. `reserve`: where the OS reserve came
    from (given, measured on this box, or the default)."""
    if req.args.platform == "cpu":
        return _cpu_terms(req, b, reserve)
    if req.overhead_bytes is not None:  # the lesson's fixed overhead stands for non-torch, graphs and context
        given = Term("overhead", req.overhead_bytes, "budget", "given", "overhead_gib as given (the lesson's model)")
        return (_weights(req, b), _activation(req, b), given)
    return (_weights(req, b), _activation(req, b), *_non_torch(req, b, link_basis), *_graphs_and_context(req, b),
            *_reserve(b, reserve))  # fmt: skip


def _weights(req: budget.PlanRequest, b: budget.RankBuckets) -> Term:
    cal = req.calibration
    if cal is not None and cal.weights_scale is not None:
        return Term("weights", b.weights_bytes, "budget", "calibrated",
                    f"{cal.weights_scale:.4f} × the modelled weights ({cal.note})")  # fmt: skip
    why = "parameters × the format's bytes (scales included), as this rank loads them under TP / PP / EP"
    return Term("weights", b.weights_bytes, "budget", "source-derived", why)


def _activation(req: budget.PlanRequest, b: budget.RankBuckets) -> Term:
    act, a = b.activation, req.args
    parts = {"forward": act.forward, "sampler": act.sampler + act.moe_workspace, "encoder": act.encoder}
    biggest = max(parts, key=lambda k: parts[k])
    what = {
        "forward": f"one forward pass of {a.max_num_batched_tokens:,} tokens (max_num_batched_tokens)",
        "sampler": f"the sampler on {min(a.max_num_seqs, a.max_num_batched_tokens):,} requests × the vocabulary, "
        "in fp32 with its sort and softmax copies"
        + (
            f", beside the fused-MoE workspace ({act.moe_workspace / GiB:.2f} GiB) the forward left"
            if act.moe_workspace
            else ""
        ),
        "encoder": "the vision encoder on as many items as one batch holds",
    }[biggest]
    if "calibrated" in act.model:
        return Term("activation_peak", act.peak, "budget", "calibrated", f"the modelled peak ({what}), scaled")
    if act.model == "textbook":
        return Term("activation_peak", act.peak, "budget", "source-derived", f"the lesson's model: {what}")
    return Term("activation_peak", act.peak, "budget", "source-derived", f"the profile run's largest part: {what}")


def _non_torch(req: budget.PlanRequest, b: budget.RankBuckets, link_basis: str) -> tuple[Term, ...]:
    cal = req.calibration
    if cal is not None and cal.non_torch_bytes is not None:  # _overhead_terms took it in place of the default
        return (Term("non_torch", b.non_torch_bytes, "budget", "calibrated", cal.note),)
    (base, base_why), (tp, tp_why) = budget.non_torch_parts(req.args, req.tp_link)
    terms = [Term("non_torch", base, "budget", "default", base_why)]
    if req.args.tensor_parallel_size > 1:
        why = f"interconnect {req.tp_link} ({link_basis}); {tp_why}"
        terms.append(Term("nccl_all_reduce", tp, "budget", "default", why))
    return tuple(terms)


def _graphs_and_context(req: budget.PlanRequest, b: budget.RankBuckets) -> tuple[Term, ...]:
    cal, graphs = req.calibration, b.cudagraph_bytes
    calibrated = cal is not None and cal.cudagraph_bytes is not None and graphs  # as _overhead_terms takes it
    source: TermSource = "calibrated" if calibrated else "default"
    basis = cal.note if calibrated and cal is not None else budget.cudagraph_basis(req.args)
    out: list[Term] = []
    in_budget = graphs - b.graphs_outside
    if in_budget:
        out.append(Term("cuda_graphs", in_budget, "budget", source, "vLLM's estimate, taken from its budget; " + basis))
    if b.graphs_outside:
        out.append(Term("cuda_graphs", b.graphs_outside, "post_pool", source, "captured after the pool; " + basis))
    where: Where = "budget" if budget.context_in_budget(req.args) else "outside"
    out.append(Term("cuda_context", b.context_bytes, where, "default", budget.BASIS["cuda_context"]))
    if b.sampler_excess:
        out.append(Term("sampler_warmup", b.sampler_excess, "post_pool", "source-derived",
                        "the sampler warm-up after the graphs, past the activation peak profiling freed"))  # fmt: skip
    return tuple(out)


def _reserve(b: budget.RankBuckets, reserve: TermSource) -> tuple[Term, ...]:
    if not b.os_reserve_bytes:
        return ()
    why = f"{b.os_reserve_bytes / GiB:.1f} GiB kept for the OS and other processes on unified memory"
    return (Term("os_reserve", b.os_reserve_bytes, "outside", reserve, why),)


def _cpu_terms(req: budget.PlanRequest, b: budget.RankBuckets, reserve: TermSource) -> tuple[Term, ...]:
    worker = b.non_kv_in_budget - b.weights_bytes
    source: TermSource = "default"
    basis = budget.BASIS["cpu_worker"]
    if req.cpu_rss_bytes is not None:
        source, basis = "calibrated", "the worker's resident memory at KV time, measured by a run on this machine"
    return (_weights(req, b), Term("cpu_worker", worker, "budget", source, basis), *_reserve(b, reserve))


def post_pool(b: budget.RankBuckets, requested: int) -> dict[str, object]:
    """What the process adds past vLLM's budget once the pool is carved, in vLLM's order, and the room for it."""
    peaks = [{"name": n, "bytes": v} for n, v in budget.post_pool_peaks(b)]
    room = b.total_bytes - b.os_reserve_bytes - requested
    return {"room_bytes": room, "peaks": peaks, "need_bytes": b.outside_bytes,
            "binding": budget.post_pool_binding(b, requested + b.os_reserve_bytes)}  # fmt: skip
