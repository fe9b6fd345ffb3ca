"""Plan step 3, weights per rank: where each pipeline stage's ranks run, and the weights one rank of each loads."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from launcher.common.errors import ConfigError
from launcher.common.records import dataclass
from launcher.common.units import GiB, gib_to_bytes
from launcher.model.arch.model import Model
from launcher.plan import budget
from launcher.plan.cache import PlanCache
from launcher.plan.layers import ModelLayers
from launcher.plan.machines import Machine, MemoryReading
from launcher.plan.profiles import Profile

OS_RESERVE_FLOOR = 6 * GiB  # never plan a unified machine with less left to the OS and page cache
OS_RESERVE_DEFAULT = 10 * GiB  # the lesson's assumption for a Spark planned from the catalog
OS_RESERVE_HEADROOM = 2 * GiB  # on top of what the OS uses now, for page cache and a browser


@dataclass(frozen=True)
class Slot:
    """One pipeline stage on one node: its ranks run alike (TP peers on one machine are identical)."""

    pp_rank: int
    ranks: tuple[int, ...]  # global ranks (tp-major within a stage: rank = pp * tp + tp_rank)
    node: str
    machine: Machine
    reserve: int  # OS reserve on that machine
    free: int | None  # free or available memory at launch, when known


@dataclass(frozen=True)
class RankWeights:
    """Step 3: the slots the ranks run in, and the bytes one rank of each loads."""

    layers: ModelLayers
    slots: tuple[Slot, ...]
    exact_extra: int  # what the checkpoint's files hold beyond the modelled bytes (one rank, its own format)
    weights: tuple[int, ...]  # per slot, as loaded: its stage's layers, the drafter on the last stage


def rank_weights(layers: ModelLayers, cache: PlanCache) -> RankWeights:
    """Step 3: place the ranks, then price each slot's weights."""
    r = layers.request
    shape, args, spec = r.shape, r.args, r.spec
    ts, per_tensor = layers.tensors, layers.tensor_bytes
    exact_extra = 0
    if args.tensor_parallel_size == 1 and args.pipeline_parallel_size == 1 and r.source.model_dir:
        ckpt = r.checkpoint if r.source.origin in ("directory", "hf-cache") else None
        if ckpt is not None and ckpt.total_bytes and spec == r.stored:
            exact_extra = ckpt.total_bytes - cache.get(
                ("modelled", id(shape), spec), lambda: _modelled_bytes(ckpt, shape, ts, per_tensor), shape
            )
    slots = placements(r.profile, r.machine, r.reading, args, r.options.free_bytes)
    weights = tuple(exact_extra + _slot_weights(layers, slot.pp_rank, cache) for slot in slots)
    return RankWeights(layers, tuple(slots), exact_extra, weights)


def _slot_weights(layers: ModelLayers, pp_rank: int, cache: PlanCache) -> int:
    """The bytes one rank of pipeline stage `pp_rank` loads (beyond the checkpoint's unmodelled extra)."""
    r = layers.request
    shape, args, spec = r.shape, r.args, r.spec
    weights = cache.get(
        ("rank_weights", id(shape), spec, budget.rank_weight_inputs(shape, args), pp_rank),
        lambda: budget.rank_weight_bytes(shape, layers.tensors, layers.tensor_bytes, spec, args, pp_rank),
        shape,
    )
    if pp_rank == args.pipeline_parallel_size - 1:
        weights += layers.drafter_bytes  # the drafter runs on the last stage
    return weights


def placements(
    profile: Profile, machine: Machine, reading: MemoryReading | None, args: budget.EngineArgs, free: int | None
) -> list[Slot]:
    """Which machine each pipeline stage's ranks run on. One node: all of them; several: GPUs in node order."""
    tp, pp = args.tensor_parallel_size, args.pipeline_parallel_size
    if free is None and reading is not None:
        free = reading.available_bytes
    if not profile.nodes:
        reserve = os_reserve(profile, machine, reading)
        return [Slot(r, tuple(range(r * tp, (r + 1) * tp)), "local", machine, reserve, free) for r in range(pp)]
    from launcher.plan.machines import get_machine

    order = sorted(profile.nodes, key=lambda n: n.role != "head")
    gpu_owner: list[tuple[str, Machine, int]] = []
    for n in order:
        if len(gpu_owner) >= tp * pp:
            break  # the GPUs past those the ranks take are not planned
        m = get_machine(n.machine, gpu_memory_gib=n.gpu_memory_gib)
        reserve = os_reserve(dataclasses.replace(profile, os_reserve_gib=n.os_reserve_gib), m, None)
        gpu_owner += [(n.host, m, reserve)] * min(n.gpus, tp * pp - len(gpu_owner))
    if len(gpu_owner) < tp * pp:
        raise ConfigError(
            f"tensor_parallel_size {tp} × pipeline_parallel_size {pp} needs {tp * pp} GPUs; the nodes have "
            f"{len(gpu_owner)}",
            field="nodes",
        )
    slots: dict[tuple[int, str], list[int]] = {}
    owners: dict[str, tuple[Machine, int]] = {}
    for rank in range(tp * pp):
        host, m, reserve = gpu_owner[rank]
        slots.setdefault((rank // tp, host), []).append(rank)
        owners[host] = (m, reserve)
    return [Slot(pp_r, tuple(rs), host, *owners[host], None) for (pp_r, host), rs in sorted(slots.items())]


def os_reserve(profile: Profile, machine: Machine, reading: MemoryReading | None) -> int:
    """Memory kept for the OS: as given; on unified memory what the OS uses now plus headroom, or the default."""
    if not machine.unified:
        return 0 if profile.os_reserve_gib == "auto" else gib_to_bytes(float(profile.os_reserve_gib))
    if profile.os_reserve_gib != "auto":
        return gib_to_bytes(float(profile.os_reserve_gib))
    if reading is not None:
        in_use = reading.total_bytes - reading.available_bytes
        floor = min(OS_RESERVE_FLOOR, reading.total_bytes * 15 // 100)  # small machines: 15 % of the memory
        return max(floor, in_use + OS_RESERVE_HEADROOM)
    return OS_RESERVE_DEFAULT


def _modelled_bytes(ckpt: Any, shape: Model, ts: Any, per_tensor: Any) -> int:
    """What the format arithmetic gives for the tensors a checkpoint holds: MTP layers only when it carries them."""
    if _ckpt_has_mtp(ckpt, shape):
        return sum(per_tensor)
    return sum(b for t, b in zip(ts, per_tensor, strict=True) if not budget.is_mtp_tensor(t, shape))


_LAYER_INDEX = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def _ckpt_has_mtp(ckpt: Any, shape: Model) -> bool:
    """The checkpoint holds next-token-prediction weights (`mtp.*`, or layers past the decoder's)."""
    if not shape.mtp_layers:
        return False
    for t in ckpt.tensors:
        if t.name.startswith("mtp.") or ".mtp." in t.name:
            return True
        m = _LAYER_INDEX.search(t.name)
        if m and int(m.group(1)) >= shape.num_layers:
            return True
    return False
