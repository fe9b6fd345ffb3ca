"""How vLLM turns one rank's layers into a pool of blocks, and the tokens and concurrency it logs.

1. Every layer gets its cache spec (specs.py). A hybrid with Mamba / linear-attention layers raises the
   attention block size until an attention page holds a whole state, and pads the state page to match
   (Platform._align_hybrid_block_size: "Setting attention block size to N tokens …").
2. Layers are grouped (kv_cache_utils.get_kv_cache_groups): one group when every layer needs the same token
   slots; otherwise one bucket per spec, cut into groups of `group_size` layers, the last of each bucket padded
   ("Add N padding layers, may waste at most X% KV cache memory").
3. A block id spans one layer of every group: bytes per block = the widest group's pages; blocks =
   available // bytes per block; one request needs Σ over groups of cdiv(its bytes, page) blocks.
Pure integer arithmetic (floats only where vLLM itself divides in floating point, to print the same figure).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Literal

from launcher.common.errors import ConfigError
from launcher.common.records import dataclass
from launcher.common.units import cdiv, last_true
from launcher.vllm import versions as V
from launcher.vllm.specs import (
    CacheSpec,
    ChunkedLocalSpec,
    CompressedMLASpec,
    Context,
    FullAttentionSpec,
    MambaSpec,
    MLASpec,
    SlidingMLASpec,
    SlidingWindowSpec,
)

Platform = Literal["cuda", "cpu"]
Engine = Literal["v0", "v1"]


@dataclass(frozen=True)
class Group:
    """One KV-cache group: layers sharing a block table."""

    kind: str  # the spec kind: full_attention, sliding_attention, chunked_attention, mla, or the state mixer's
    layers: int  # real layers in the group
    page_bytes: int  # one block of one layer (padded pages included)
    spec: CacheSpec
    uniform_pages: int = 0  # one group of layers with different pages: the sum of their pages (0: layers × page)

    @property
    def bytes_per_block(self) -> int:
        return self.uniform_pages or self.layers * self.page_bytes

    def blocks_per_request(self, ctx: Context) -> int:
        # the same for every layer of a group: its layers need the same token slots, whatever their pages
        return cdiv(self.spec.max_memory_bytes(ctx), self.spec.page_bytes)


@dataclass(frozen=True)
class KVLayout:
    """How one rank's cache memory is cut into blocks."""

    block_size: int  # attention tokens per block (after hybrid alignment)
    page_bytes: int  # one block of one layer
    bytes_per_block: int  # one block id across the layers that share it (what available memory is divided by)
    groups: tuple[Group, ...]
    group_size: int
    hybrid: bool  # more than one group
    layers_on_rank: int
    padding_layers: tuple[int, ...] = ()  # per bucket, as vLLM logs them
    requested_block_size: int = 0  # before the hybrid alignment
    mamba_page_bytes: int = 0  # the unpadded state page (0: no state layers)
    mamba_mode: str = "none"

    @property
    def n_groups(self) -> int:
        return len(self.groups)

    @property
    def aligned(self) -> bool:
        """vLLM raised the attention block size for the state page (a hybrid: attention-free models have none)."""
        hybrid = any(not isinstance(g.spec, MambaSpec) for g in self.groups)
        return bool(self.mamba_page_bytes) and hybrid and self.block_size != self.requested_block_size

    def state_layers(self) -> int:
        return sum(g.layers for g in self.groups if isinstance(g.spec, MambaSpec))

    def to_json(self) -> dict[str, object]:
        return {
            "block_size": self.block_size,
            "page_bytes": self.page_bytes,
            "bytes_per_block": self.bytes_per_block,
            "groups": [{"kind": g.kind, "layers": g.layers, "page_bytes": g.page_bytes} for g in self.groups],
            "group_size": self.group_size,
            "hybrid": self.hybrid,
            "padding_layers": sum(self.padding_layers),
            "mamba_page_bytes": self.mamba_page_bytes,
            "mamba_page_padding_pct": round(100 * (self.page_bytes - self.mamba_page_bytes) / self.mamba_page_bytes, 2)
            if self.mamba_page_bytes and self.hybrid
            else None,
            "mamba_cache_mode": self.mamba_mode if self.mamba_page_bytes else None,
            "attention_block_size_raised": self.aligned,
        }


def align_block_size(
    specs: Sequence[CacheSpec | None],
    block_size: int,
    *,
    kernel_block: int,
    version: V.Version = V.LATEST,
    mamba_chunk: int | None = None,
) -> tuple[int, int]:
    """(attention block size, state page) for a hybrid: the smallest block, at the multiple the version uses, whose
    attention page holds the largest state (Platform._align_hybrid_block_size; HybridAttentionMambaModelConfig
    before 0.20). Non-hybrids keep their block size. `mamba_chunk`: 'all' mode aligns to the SSM chunk too."""
    attn = [s for s in specs if s is not None and s.grows_with_block]
    states = [s for s in specs if isinstance(s, MambaSpec)]
    if not states:
        return block_size, 0
    mamba_page = max(s.state_bytes for s in states)
    if not attn or not V.HYBRID_BLOCK_ALIGN.on(version):
        return block_size, mamba_page  # attention-free: no backend to align with
    first = attn[0]
    per_token = first.with_block_size(1).page_bytes  # the model's attention page for one token
    mla = isinstance(first, MLASpec)
    if V.HYBRID_ALIGN_BACKEND.on(version):
        alignment = max(kernel_block, block_size, 128 if mla else 0)  # MLA decode kernels want 128
    else:
        alignment = 64 if mla else 16  # "some attention backends only support multiples of 16"
    if mamba_chunk:
        # 'all' mode: a block boundary must also be a chunk boundary of the SSM scan
        chunk = math.lcm(mamba_chunk, alignment)
        needed = chunk * cdiv(cdiv(mamba_page, per_token), chunk)
    else:
        needed = alignment * cdiv(mamba_page, alignment * per_token)
    if V.HYBRID_ALIGN_BACKEND.on(version):
        needed = kernel_block * cdiv(needed, kernel_block)
    # An explicit --block-size is overridden too when it is too small for the state.
    return max(block_size, needed), mamba_page


def layout(
    specs: Sequence[CacheSpec | None],
    *,
    block_size: int,
    version: V.Version,
    hybrid_manager: bool = True,
    kernel_block: int = 16,
    mamba_mode: str = "none",
    owned: Sequence[bool] | None = None,
    mamba_chunk: int | None = None,
    max_model_len: int | None = None,
) -> KVLayout:
    """Group the model's layer specs as vLLM's KV-cache manager does (`specs` built at `block_size`), then keep
    the layers this rank owns (`owned`, one flag per spec; pipeline parallel): groups are formed over the whole
    model and projected onto each worker (kv_cache_utils._project_kv_cache_groups_to_worker)."""
    pairs = [(s, owned[i] if owned is not None else True) for i, s in enumerate(specs) if s is not None]
    live = [s for s, _ in pairs]
    mine = [o for _, o in pairs]
    if not live:
        # attention-free and stateless: vLLM keeps one null block and no pool
        return KVLayout(block_size, 0, 0, (), 0, False, 0, requested_block_size=block_size)
    if any(isinstance(s, CompressedMLASpec) for s in live):
        return packed_layout(live, mine, block_size, hybrid_manager=hybrid_manager)
    bs, mamba_page = _layout_block_size(
        live,
        block_size,
        version,
        kernel_block=kernel_block,
        mamba_mode=mamba_mode,
        mamba_chunk=mamba_chunk,
        max_model_len=max_model_len,
    )
    live = _at_block_size(live, bs, mamba_page, mamba_mode=mamba_mode, hybrid_manager=hybrid_manager)

    first = live[0]
    n_mine = sum(mine)
    if all(s == first for s in live):
        # Every layer the same: one group, every layer has a block for every block id.
        g = Group(_kind(first), n_mine, first.page_bytes, first)
        return _layout(bs, (g,), len(live), (), block_size, mamba_page, mamba_mode)
    if _uniform_type(live):
        # Same token slots everywhere (all full attention, different head sizes): one group, pages summed.
        pages = sum(s.page_bytes for s, o in zip(live, mine, strict=True) if o)
        g = Group(_kind(first), n_mine, first.page_bytes, first, uniform_pages=pages)
        return _layout(bs, (g,), len(live), (), block_size, mamba_page, mamba_mode)
    groups, group_size, padding = _hybrid_groups(live, mine, version)
    return _layout(bs, groups, group_size, padding, block_size, mamba_page, mamba_mode)


def _layout_block_size(
    live: list[CacheSpec],
    block_size: int,
    version: V.Version,
    *,
    kernel_block: int,
    mamba_mode: str,
    mamba_chunk: int | None,
    max_model_len: int | None,
) -> tuple[int, int]:
    """The block size vLLM uses for these specs, and the state page it aligns to (0: none)."""
    bs, mamba_page = align_block_size(
        live,
        block_size,
        kernel_block=kernel_block,
        version=version,
        mamba_chunk=mamba_chunk if mamba_mode == "all" else None,
    )
    if max_model_len and mamba_mode == "none" and not any(s.grows_with_block for s in live):
        # attention-free without prefix caching: a state block stands for a whole max_model_len sequence
        # (MambaModelConfig: mamba_block_size = max_model_len)
        bs = max_model_len
    return bs, mamba_page


def _at_block_size(
    live: list[CacheSpec], bs: int, mamba_page: int, *, mamba_mode: str, hybrid_manager: bool
) -> list[CacheSpec]:
    """The specs at block size `bs`, state pages padded to the attention page, all full attention without the
    hybrid manager."""
    # attention pages at the new block size; in 'all' mode a state block covers as many tokens
    live = [s.with_block_size(bs) if s.grows_with_block or mamba_mode == "all" else s for s in live]
    if mamba_page and any(s.grows_with_block for s in live):
        attn_page = next(s for s in live if s.grows_with_block).page_bytes
        live = [replace(s, page_padded=attn_page) if isinstance(s, MambaSpec) else s for s in live]
    if not hybrid_manager:
        live = [_as_full(s) for s in live]
    return live


def _hybrid_groups(
    live: list[CacheSpec], mine: list[bool], version: V.Version
) -> tuple[tuple[Group, ...], int, tuple[int, ...]]:
    """Layers of several kinds: the groups (this rank's layers in each), the group size and the padding layers."""
    live = _unify_pages(live)
    buckets: dict[CacheSpec, list[bool]] = {}
    for s, o in zip(live, mine, strict=True):
        buckets.setdefault(s, []).append(o)
    counts = [len(v) for v in buckets.values()]
    group_size = min(counts)
    # counts close to each other: one group per kind of the largest count, padding the others (fewer padded
    # layers than splitting the larger kind)
    close = 1.5 if V.GROUP_SIZE_CLOSE.on(version) else 1.25 if V.GROUP_SIZE_125.on(version) else 0.0
    if max(counts) < close * min(counts):
        group_size = max(counts)
    groups: list[Group] = []
    padding: list[int] = []
    for spec, owners in buckets.items():
        n = len(owners)
        k = cdiv(n, group_size)
        if n % group_size:
            padding.append(group_size - n % group_size)
        # layers[i::k]: the k groups of a bucket differ by at most one layer; a rank keeps the ones it owns
        for i in range(k):
            groups.append(Group(_kind(spec), sum(owners[i::k]), spec.page_bytes, spec))
    return tuple(groups), group_size, tuple(padding)


# --- DeepSeek-V4: pages of several sizes packed in one block (vLLM 0.32) ---------------------------------------------


def packed_layout(live: list[CacheSpec], mine: list[bool], block_size: int, *, hybrid_manager: bool) -> KVLayout:
    """DeepSeek-V4's caches: its indexer backend declares block-outermost KV layouts only (BLHNC,
    DeepseekV4IndexerBackend.supported_kv_cache_layouts), so the layers' pages of different sizes are packed side
    by side in one block (kv_cache_utils._get_packed_kv_cache_groups) instead of being unified. A block id spans
    the widest group's pages, rounded up to every layer's stride alignment (_get_kv_cache_bytes_per_block)."""
    if not hybrid_manager:
        raise ConfigError(
            "--disable-hybrid-kv-cache-manager: vLLM's DeepSeek-V4 cache with the sliding windows allocated as full "
            "attention is not predicted",
            field="disable_hybrid_kv_cache_manager",
        )
    members, repeats = packed_groups(live)
    groups = []
    for idx in members:
        first = live[idx[0]]
        owned = [i for i in idx if mine[i]]
        kind = first.kind if isinstance(first, SlidingMLASpec) else "compressed_mla"
        # UniformTypeKVCacheSpecs: a block of the group holds one page of each of its layers on this rank
        pages = sum(live[i].page_bytes for i in owned)
        groups.append(Group(kind, len(owned), first.page_bytes, first, uniform_pages=pages))
    stride = math.lcm(*(s.stride_alignment for s in live if isinstance(s, CompressedMLASpec)))
    widest = max(g.bytes_per_block for g in groups)
    return KVLayout(
        block_size=block_size,
        page_bytes=groups[0].page_bytes,
        bytes_per_block=cdiv(widest, stride) * stride,
        groups=tuple(groups),
        group_size=repeats or 0,
        hybrid=len(groups) > 1,
        layers_on_rank=sum(g.layers for g in groups),
        requested_block_size=block_size,
    )


def _same_type(a: CacheSpec, b: CacheSpec) -> bool:
    """UniformTypeKVCacheSpecs.is_uniform_type of two layers: one block size, and both full attention (MLA included)
    or both sliding windows of one size."""
    if a.block_size != b.block_size:
        return False
    if isinstance(a, SlidingMLASpec) or isinstance(b, SlidingMLASpec):
        return isinstance(a, SlidingMLASpec) and isinstance(b, SlidingMLASpec) and a.window == b.window
    return True


def _buckets(live: list[CacheSpec]) -> list[dict[int, list[int]]]:
    """Layers bucketed by type in registration order, each bucket's layers by page size (first seen first)."""
    buckets: list[list[int]] = []
    for i, s in enumerate(live):
        home = next((b for b in buckets if _same_type(live[b[0]], s)), None)
        if home is None:
            buckets.append([i])
        else:
            home.append(i)
    out: list[dict[int, list[int]]] = []
    for b in buckets:
        by_page: dict[int, list[int]] = {}
        for i in b:
            by_page.setdefault(live[i].page_bytes, []).append(i)
        out.append(by_page)
    return out


def packed_groups(live: list[CacheSpec]) -> tuple[list[list[int]], int | None]:
    """kv_cache_utils._get_packed_kv_cache_groups: the groups (indices into `live`) and the pattern repeats per
    group. A bucket with as many layers of each page size repeats a pattern; those are split into groups of the
    same number of repeats (the fewest padded repeats, _approximate_gcd, not below the largest mixed bucket's
    count); any other bucket is one group, a sliding one split to the states a block already holds."""
    buckets = _buckets(live)
    layers = [sorted(i for idx in b.values() for i in idx) for b in buckets]
    balanced = [len({len(v) for v in b.values()}) == 1 for b in buckets]
    most = [max(len(v) for v in b.values()) for b in buckets]  # get_max_layers_per_page_size
    floor = max((n for b, bal, n in zip(buckets, balanced, most, strict=True) if bal and len(b) > 1), default=0)
    repeats = _approximate_gcd([n for bal, n in zip(balanced, most, strict=True) if bal], floor) if floor else None
    n_groups = [cdiv(n, repeats) if bal and repeats else 1 for bal, n in zip(balanced, most, strict=True)]
    # is_state_bucket: a sliding bucket with no repeat pattern to follow can go down to one layer per group
    state = [repeats is None and isinstance(live[ls[0]], SlidingMLASpec) for ls in layers]
    # the bytes a block must hold however the state buckets are split (widest_group_bytes)
    anchor = max(
        sum(cdiv(len(idx), len(ls) if st else k) * page for page, idx in b.items())
        for b, ls, st, k in zip(buckets, layers, state, n_groups, strict=True)
    )
    members: list[list[int]] = []
    for b, ls, st, k in zip(buckets, layers, state, n_groups, strict=True):
        if anchor and st:  # a state group capped at the states one block already fits
            k = max(k, cdiv(len(ls), max(anchor // live[ls[0]].page_bytes, 1)))
        if k == 1:
            members.append(ls)
            continue
        pattern = list(zip(*b.values(), strict=False))  # one layer of each page size per repeat (zip stops short)
        members += [[i for rep in pattern[j::k] for i in rep] for j in range(k)]
    return members, repeats


def _approximate_gcd(values: Sequence[int], lower_bound: int) -> int:
    """kv_cache_utils._approximate_gcd: the divisor d ≥ lower_bound whose total round-up padding of the values to
    multiples of d is least, the larger d on a tie."""
    best, best_pad = lower_bound, None
    for d in range(lower_bound, max(values) + 1):
        pad = sum((d - x % d) % d for x in values)
        if best_pad is None or pad <= best_pad:
            best, best_pad = d, pad
    return best


def _layout(
    bs: int,
    groups: tuple[Group, ...],
    group_size: int,
    padding: tuple[int, ...],
    requested: int,
    mamba_page: int,
    mamba_mode: str,
) -> KVLayout:
    return KVLayout(
        block_size=bs,
        page_bytes=groups[0].page_bytes,
        # the widest group's pages (get_kv_cache_config_from_groups: max over groups of Σ page)
        bytes_per_block=max(g.bytes_per_block for g in groups),  # 0 only for a rank that owns no layer
        groups=groups,
        group_size=group_size,
        hybrid=len(groups) > 1,
        layers_on_rank=sum(g.layers for g in groups),
        padding_layers=padding,
        requested_block_size=requested,
        mamba_page_bytes=mamba_page,
        mamba_mode=mamba_mode,
    )


def _kind(s: CacheSpec) -> str:
    """A group's kind as the model names its layers (linear_attention, mamba2, … for state groups)."""
    return s.mixer_kind if isinstance(s, MambaSpec) else s.kind


def _as_full(s: CacheSpec) -> CacheSpec:
    """--disable-hybrid-kv-cache-manager: sliding and chunked layers are allocated as full attention."""
    if isinstance(s, SlidingWindowSpec | ChunkedLocalSpec):
        return FullAttentionSpec(s.block_size, s.kv_heads, s.head_size, s.head_size_v, s.element_bytes,
                                 s.scale_bytes, s.page_padded, head_bytes=s.head_bytes,
                                 side_bytes=s.side_bytes)  # fmt: skip
    return s


def _uniform_type(specs: Sequence[CacheSpec]) -> bool:
    """UniformTypeKVCacheSpecs: all full attention (or MLA), or all sliding with one window, any page sizes."""
    if all(type(s) is FullAttentionSpec for s in specs) or all(isinstance(s, MLASpec) for s in specs):
        return True
    if all(isinstance(s, SlidingWindowSpec) for s in specs):
        return len({s.window for s in specs if isinstance(s, SlidingWindowSpec)}) == 1
    if all(isinstance(s, ChunkedLocalSpec) for s in specs):
        return len({s.chunk for s in specs if isinstance(s, ChunkedLocalSpec)}) == 1
    return False


def _unify_pages(specs: list[CacheSpec]) -> list[CacheSpec]:
    """unify_kv_cache_spec_page_size: smaller attention pages take a larger block size (or are padded), state
    pages are padded, until every page is the largest."""
    biggest = max(s.page_bytes for s in specs)
    out: list[CacheSpec] = []
    for s in specs:
        if s.page_bytes == biggest:
            out.append(s)
        elif isinstance(s, MambaSpec | FullAttentionSpec) and (isinstance(s, MambaSpec) or biggest % s.page_bytes != 0):
            out.append(replace(s, page_padded=biggest))
        else:
            out.append(s.with_block_size(s.block_size * (biggest // s.page_bytes)))
    return out


# --- the pool -----------------------------------------------------------------------------------------------------


def blocks_per_request(lay: KVLayout, ctx: Context) -> int:
    """Blocks one max_model_len request needs: Σ over groups (kv_cache_utils.get_max_concurrency_…)."""
    return sum(g.blocks_per_request(ctx) for g in lay.groups)


def auto_fit_max_model_len(lay: KVLayout, ctx: Context, available_bytes: int) -> int:
    """vLLM's `--max-model-len auto` (versions.AUTO_FIT_MAX_MODEL_LEN): the longest max_model_len, up to the
    model's, whose one request fits the pool less the block the block pool holds back as its null block (a binary
    search, as kv_cache_utils._estimate_max_model_len_from_groups). 0 when not even one token fits."""
    if not lay.groups:
        return ctx.max_model_len  # attention-free: the derived length stands
    room = available_bytes - lay.bytes_per_block  # the null block is never handed out

    def fits(n: int) -> bool:
        return blocks_per_request(lay, dataclasses.replace(ctx, max_model_len=n)) * lay.bytes_per_block <= room

    return last_true(1, ctx.max_model_len, fits) if fits(1) else 0


@dataclass(frozen=True)
class Pool:
    available_bytes: int
    num_blocks: int
    tokens: int  # what vLLM logs as "KV cache size: N tokens"
    max_concurrency: float  # what vLLM logs as "Maximum concurrency for L tokens per request: C x"
    blocks_per_request: int
    pool_bytes: int  # num_blocks × bytes_per_block

    def to_json(self) -> dict[str, object]:
        return {
            "kv_pool_bytes": self.pool_bytes,
            "kv_pool_blocks": self.num_blocks,
            "kv_pool_tokens": self.tokens,
            "max_concurrency": round(self.max_concurrency, 2),
        }


def pool(
    lay: KVLayout,
    available_bytes: int,
    ctx: Context,
    *,
    engine: Engine,
    num_blocks_override: int | None = None,
) -> Pool:
    """Blocks from available bytes, then the tokens and concurrency the given version prints."""
    version, mml, bs = ctx.version, ctx.max_model_len, lay.block_size
    if not lay.groups or not lay.bytes_per_block:
        return Pool(available_bytes, 1, 0, 0.0, 0, 0)
    num_blocks = max(0, available_bytes // lay.bytes_per_block)
    if num_blocks_override is not None:
        num_blocks = num_blocks_override
    per_req = blocks_per_request(lay, ctx)
    if engine == "v0" or not V.HYBRID_MANAGER.on(version):
        # V0 and V1 before the hybrid manager: every layer has every block; concurrency = tokens / max_model_len.
        tokens = num_blocks * bs
        conc = tokens / mml
    else:
        conc = num_blocks / per_req if per_req else 0.0
        # 0.9.1-0.20: blocks are shared by all groups, so each token needs one block in every group.
        # before: the blocks of one group in tokens, × dcp ("Multiplying the GPU KV cache size by the cp_world_size")
        tokens = int(conc * mml) if V.TOKENS_FROM_CONCURRENCY.on(version) else num_blocks // lay.n_groups * bs * ctx.dcp
    return Pool(available_bytes, num_blocks, tokens, conc, per_req, num_blocks * lay.bytes_per_block)


def pool_bytes_from_tokens(lay: KVLayout, ctx: Context, tokens: int) -> int:
    """The pool behind a logged token count (0.21+: tokens = int(blocks / blocks per request × max_model_len)):
    the fewest blocks that log it, in bytes."""
    per_req = blocks_per_request(lay, ctx)
    return cdiv(tokens * per_req, ctx.max_model_len) * lay.bytes_per_block


def format_tokens_line(pool_: Pool, max_model_len: int, version: V.Version, platform: Platform) -> str:
    """The log line this version prints, for side-by-side display."""
    dev = "CPU" if platform == "cpu" and V.CPU_DEVICE_NAME.on(version) else "GPU"
    if not V.V08_POOL_LINE.on(version):
        return f"# GPU blocks: {pool_.num_blocks}; Maximum concurrency for {max_model_len} tokens per request: " + (
            f"{pool_.max_concurrency:.2f}x"
        )
    return (
        f"{dev} KV cache size: {pool_.tokens:,} tokens, Maximum concurrency for {max_model_len:,} tokens per "
        f"request: {pool_.max_concurrency:.2f}x"
    )


def requested_bytes(total_bytes: int, util: float, version: V.Version) -> int:
    """vLLM's budget: total × gpu_memory_utilization (ceil since 0.14; a float before, truncated here)."""
    if V.CEIL_BUDGET.on(version):
        return math.ceil(total_bytes * util)
    return int(total_bytes * util)
