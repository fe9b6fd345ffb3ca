"""Plan step 4, the cache layout: each rank's KV cache as vLLM lays it out — every layer's spec, the groups and
their block size, and the blocks one request of max_model_len takes."""

from __future__ import annotations

from launcher.common.records import dataclass
from launcher.plan import budget
from launcher.plan.cache import PlanCache
from launcher.plan.ranks import RankWeights
from launcher.vllm import pool as vp


@dataclass(frozen=True)
class CacheLayout:
    """Step 4: per slot, the rank's layout and one request's share of its pool."""

    weights: RankWeights
    ranks: tuple[budget.RankCache, ...]


def cache_layout(weights: RankWeights, cache: PlanCache) -> CacheLayout:
    """Step 4: the layers' specs grouped into vLLM's blocks, for each slot's pipeline stage."""
    ctx = weights.layers.request.args.context()
    ranks = tuple(budget.rank_cache(_layout(weights, slot.pp_rank, cache), ctx) for slot in weights.slots)
    return CacheLayout(weights, ranks)


def _layout(weights: RankWeights, pp_rank: int, cache: PlanCache) -> vp.KVLayout:
    layers = weights.layers
    shape, drafter, args = layers.request.shape, layers.drafter, layers.request.args
    return cache.get(
        ("layout", id(shape), id(drafter), budget.layout_inputs(shape, args), pp_rank),
        lambda: budget.rank_layout(shape, args, pp_rank, drafter)[0],
        shape,
        drafter,
    )
