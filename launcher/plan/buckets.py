"""Plan step 5, the buckets: each rank's activation peak, non-torch memory, CUDA graphs and context, with the
terms calibrated from earlier runs of this vLLM on this machine, and what of them vLLM's budget holds."""

from __future__ import annotations

import math

from launcher.common.records import dataclass
from launcher.common.units import gib_to_bytes
from launcher.plan import budget
from launcher.plan.cache import PlanCache
from launcher.plan.cache_layout import CacheLayout
from launcher.plan.calibration import CpuWorker, lookup_cpu_worker, lookup_terms, machine_key
from launcher.plan.ranks import Slot
from launcher.plan.resolve import Request
from launcher.vllm import versions as V


@dataclass(frozen=True)
class Calibration:
    """What earlier runs measured: the CPU worker's memory, or the GPU terms; notes for stored terms left out."""

    cpu_worker: CpuWorker | None = None
    gpu_terms: budget.Calibrated | None = None
    notes: tuple[str, ...] = ()  # stored terms left out: outside their physical bounds


@dataclass(frozen=True)
class Buckets:
    """Step 5: per slot, what the arithmetic is asked (the utilization still open) and the rank's buckets."""

    layout: CacheLayout
    calibration: Calibration
    requests: tuple[budget.PlanRequest, ...]
    ranks: tuple[budget.RankBuckets, ...]


def buckets(layout: CacheLayout, cache: PlanCache) -> Buckets:
    """Step 5: the calibrated terms, then each slot's buckets."""
    weights = layout.weights
    layers = weights.layers
    r = layers.request
    profile = r.profile
    cal = calibration(r, cache)
    overhead = None if profile.overhead_gib is None else gib_to_bytes(profile.overhead_gib)
    requests = []
    for slot, w, rank in zip(weights.slots, weights.weights, layout.ranks, strict=True):
        rss = r.options.cpu_rss_bytes
        if rss is None and cal.cpu_worker is not None:
            rss = cal.cpu_worker.base_bytes + w
        requests.append(
            budget.PlanRequest(
                shape=r.shape,
                weights_bytes=w,
                kv_bytes_per_token=layers.kv.per_token,
                args=r.args,
                total_bytes=slot.machine.total_bytes,
                unified=slot.machine.unified,
                users=profile.users,
                gpu_memory_utilization=None,
                os_reserve_bytes=slot.reserve,
                free_bytes=slot.free,
                overhead_bytes=overhead,
                biggest_pool=profile.biggest_pool,
                gpus=slot.machine.gpus,
                pp_rank=slot.pp_rank,
                cpu_rss_bytes=rss,
                drafter=layers.drafter,
                calibration=cal.gpu_terms,
                kv_layout=rank.layout,
                tp_link=tp_link(r, weights.slots, slot)[0],
            )
        )
    ranks = tuple(budget.rank_buckets(req, rank) for req, rank in zip(requests, layout.ranks, strict=True))
    return Buckets(layout, cal, tuple(requests), ranks)


def tp_link(r: Request, slots: tuple[Slot, ...], slot: Slot) -> tuple[str, str]:
    """How `slot`'s tensor-parallel peers reach each other, and why: a group spanning nodes over the network; else
    the profile's `interconnect`, else the machine's."""
    if r.args.tensor_parallel_size == 1:
        return "none", "tensor_parallel_size 1"
    if len({s.node for s in slots if s.pp_rank == slot.pp_rank}) > 1:
        return "network", "the tensor-parallel group spans nodes"
    if r.profile.interconnect != "auto":
        return r.profile.interconnect, "interconnect as given"
    return slot.machine.interconnect, slot.machine.interconnect_source


def calibration(r: Request, cache: PlanCache) -> Calibration:
    """The stored measurements this plan takes: the CPU worker's (CPU backend, no measured RSS), or the GPU terms
    (no fixed overhead given); none with --no-calibration."""
    profile, machine, version, use = r.profile, r.machine, r.version, r.options.use_calibration
    if r.platform == "cpu" and r.options.cpu_rss_bytes is None and use:
        util = profile.gpu_memory_utilization
        budget_ = None if util == "auto" else math.ceil(machine.total_bytes * float(util))  # like runs: this budget
        worker, notes = cache.get(
            ("cpu_worker", version, profile.vllm.python, r.shape.family, machine.total_bytes, budget_),
            lambda: lookup_cpu_worker("cpu", V.fmt_version(version), profile.vllm.python, family=r.shape.family,
                                      total_bytes=machine.total_bytes, budget_bytes=budget_),
        )  # fmt: skip
        return Calibration(cpu_worker=worker, notes=notes)
    if r.platform != "cuda" or not use or profile.overhead_gib is not None:
        return Calibration()
    key = machine_key(machine.name, machine.total_bytes)
    terms, notes = cache.get(
        ("terms", key, version, machine.total_bytes),
        lambda: lookup_terms(key, V.fmt_version(version), total_bytes=machine.total_bytes),
    )
    if not terms:
        return Calibration(notes=notes)
    args = r.args
    nt_key = "non_torch_bytes_tp1" if args.tensor_parallel_size == 1 else "non_torch_bytes_tp_many"
    gpu_terms = budget.Calibrated(
        non_torch_bytes=terms.get(nt_key) if args.pipeline_parallel_size == 1 else None,
        cudagraph_bytes=terms.get("cudagraph_bytes"),
        activation_scale=(terms.get("activation_scale_by_family") or {}).get(
            r.shape.model_type, terms.get("activation_scale")
        ),
        weights_scale=terms.get("weights_scale"),
        note=f"calibrated from {terms.get('runs', 0)} run(s) of vLLM {V.fmt_version(version)} on this {key}",
    )
    return Calibration(gpu_terms=gpu_terms, notes=notes)
