"""vLLM's cache spec per layer kind (vllm/v1/kv_cache_interface.py): the bytes of one block of one layer
(`page_bytes`) and the bytes one request of max_model_len tokens can hold (`max_memory_bytes`).

Attention pages grow with the block size; a Mamba / linear-attention page is one request's state and does not.
The state shapes and dtypes are vLLM's (vllm/model_executor/layers/mamba/mamba_utils.py), which differ from
the model's own in small ways: speculative tokens widen the conv state, Mamba2 pads n_groups to the TP size.
Pure integer arithmetic.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from math import gcd, prod
from typing import Literal

from launcher.common.records import dataclass
from launcher.common.units import cdiv
from launcher.model.arch.layers import (
    Attention,
    ChunkedLocalAttention,
    CompressedAttention,
    GatedDeltaNet,
    Mamba,
    Mamba2,
    Mixer,
    MLAttention,
    ShortConv,
    SlidingWindowAttention,
    kv_heads_per_rank,
)
from launcher.model.kv import (
    DTYPE_BYTES,
    attention_head_bytes,
    dsv4_fp8_layout,
    dsv4_indexer_key_bytes,
    dsv4_state_bytes,
    kv_element_bytes,
    mla_token_bytes,
)
from launcher.vllm import versions as V

MambaMode = Literal["none", "align", "all"]


@dataclass(frozen=True)
class Context:
    """What a spec needs from the engine settings to size one request."""

    max_model_len: int
    max_num_batched_tokens: int
    max_concurrent_batches: int  # pipeline stages, or 2 with async scheduling
    version: V.Version
    dcp: int = 1  # decode context parallel: each rank keeps 1/dcp of a request's attention tokens

    @property
    def attention_tokens(self) -> int:
        """The tokens of one max_model_len request one rank's attention layer keeps (cdiv(max_model_len, dcp):
        FullAttentionSpec.max_memory_usage_bytes, 0.2x; the same blocks as 0.3x's block span × dcp)."""
        return cdiv(self.max_model_len, self.dcp)

    @property
    def in_flight_tokens(self) -> int:
        """Tokens scheduled but not yet freed: one step's batch before 0.26, every concurrent batch's since."""
        if V.IN_FLIGHT_TOKENS.on(self.version):
            return self.max_concurrent_batches * self.max_num_batched_tokens
        return self.max_num_batched_tokens


class CacheSpec(ABC):
    """One layer's cache: a page per block, and how many bytes one request of max_model_len may hold."""

    kind: str
    block_size: int

    @property
    @abstractmethod
    def page_bytes(self) -> int: ...

    @abstractmethod
    def max_memory_bytes(self, ctx: Context) -> int: ...

    @property
    def grows_with_block(self) -> bool:
        """Attention pages scale with the block size; state pages do not."""
        return True

    def with_block_size(self, block_size: int) -> CacheSpec:
        from dataclasses import replace

        return replace(self, block_size=block_size)  # type: ignore[type-var]


@dataclass(frozen=True)
class FullAttentionSpec(CacheSpec):
    """K and V per KV head per token (AttentionSpec.page_size_bytes after the backend's customize_spec)."""

    block_size: int
    kv_heads: int  # on this rank
    head_size: int
    head_size_v: int
    element_bytes: int
    scale_bytes: int = 0  # per token per head, for K and for V (per-token-head dtypes)
    page_padded: int | None = None  # vLLM pads a smaller page up to the common one
    kind: str = "full_attention"
    head_bytes: int | None = None  # one token of one KV head as the dtype packs it (kv.attention_head_bytes)
    side_bytes: int = 0  # per token beside K and V, the same on every rank (MiniMax-M3's indexer keys, bf16)

    @property
    def token_head_bytes(self) -> int:
        """One token of one KV head: as packed, else K and V elements plus an fp32 scale each when per-token-head."""
        if self.head_bytes is not None:
            return self.head_bytes
        return (self.head_size + self.head_size_v) * self.element_bytes + 2 * self.scale_bytes

    @property
    def page_bytes(self) -> int:
        if self.page_padded is not None:
            return self.page_padded
        # tokens × (KV heads on this rank × one token of one head, plus a side cache's bytes per token)
        return self.block_size * (self.kv_heads * self.token_head_bytes + self.side_bytes)

    def max_memory_bytes(self, ctx: Context) -> int:
        # every token of max_model_len (this rank's share of it under decode context parallel), in whole blocks
        return cdiv(ctx.attention_tokens, self.block_size) * self.page_bytes


@dataclass(frozen=True)
class SlidingWindowSpec(FullAttentionSpec):
    window: int = 0
    kind: str = "sliding_attention"

    def max_memory_bytes(self, ctx: Context) -> int:
        # The last window-1 tokens plus what is in flight, never more than max_model_len; +1 block because the
        # window need not start at a block boundary (SlidingWindowSpec.max_admission_blocks_per_request).
        tokens = min(self.window - 1 + ctx.in_flight_tokens, ctx.max_model_len)
        return (cdiv(tokens, self.block_size) + 1) * self.page_bytes


@dataclass(frozen=True)
class ChunkedLocalSpec(FullAttentionSpec):
    chunk: int = 0
    kind: str = "chunked_attention"

    def max_memory_bytes(self, ctx: Context) -> int:
        # one chunk plus what is in flight (ChunkedLocalAttentionSpec.max_admission_blocks_per_request)
        return cdiv(min(self.chunk + ctx.in_flight_tokens, ctx.max_model_len), self.block_size) * self.page_bytes


@dataclass(frozen=True)
class MLASpec(CacheSpec):
    """One latent per token, the same on every rank (MLAAttentionSpec)."""

    block_size: int
    head_size: int  # kv_lora_rank + qk_rope_head_dim
    element_bytes: int
    token_bytes: int | None = None  # one token's latent as the dtype packs it (kv.mla_token_bytes: 656 fp8_ds_mla)
    indexer_bytes: int = 0  # DeepSeek V3.2's indexer keys per token, kept beside the latent
    kind: str = "mla"

    @property
    def page_bytes(self) -> int:
        per_token = self.head_size * self.element_bytes if self.token_bytes is None else self.token_bytes
        return self.block_size * (per_token + self.indexer_bytes)

    def max_memory_bytes(self, ctx: Context) -> int:
        return cdiv(ctx.attention_tokens, self.block_size) * self.page_bytes


@dataclass(frozen=True)
class CompressedMLASpec(CacheSpec):
    """DeepSeek-V4's compressed KV and its indexer keys (vLLM 0.32 MLAAttentionSpec with tokens_per_state and
    alignment, v1/kv_cache_interface.py): one head, one state of `state_bytes` per `tokens_per_state` tokens, the
    page padded up to a multiple of `alignment` (_apply_alignment_padding). Full attention: a request holds every
    token of max_model_len. The same on every rank (max_tp_shards 1)."""

    block_size: int
    state_bytes: int
    tokens_per_state: int = 1
    alignment: int = 1
    kernel_block: int = 0  # the one kernel block its backend takes (DeepSeek-V4 sparse MLA, indexer: 256); 0: any
    kind: str = "compressed_mla"

    @property
    def page_bytes(self) -> int:
        # AttentionSpec.unpadded_page_size_bytes: 1 head × (block_size // tokens_per_state) states × state bytes,
        # rounded up to the alignment
        raw = self.block_size // self.tokens_per_state * self.state_bytes
        return cdiv(raw, self.alignment) * self.alignment

    @property
    def stride_alignment(self) -> int:
        """KVCacheSpec.get_block_stride_alignment: a block bigger than the backend's one kernel block
        (customize_attention_spec: MultipleOf(kernel block)) is strided in whole kernel-block pages."""
        if not self.kernel_block:
            return 1
        kernel = gcd(self.kernel_block, self.block_size)
        return 1 if kernel == self.block_size else self.with_block_size(kernel).page_bytes

    def max_memory_bytes(self, ctx: Context) -> int:
        # FullAttentionSpec.max_memory_usage_bytes: every token, in whole blocks
        return cdiv(ctx.attention_tokens, self.block_size) * self.page_bytes


@dataclass(frozen=True)
class SlidingMLASpec(CompressedMLASpec):
    """DeepSeek-V4's sliding-window KV and its compressors' fp32 partial windows (vLLM 0.32 SlidingWindowMLASpec):
    a page of `block_size` states padded to `alignment`, a request holding its last `window` tokens."""

    window: int = 0
    kind: str = "sliding_mla"

    def max_memory_bytes(self, ctx: Context) -> int:
        # SlidingWindowSpec.max_admission_blocks_per_request: the last window-1 tokens plus what is in flight, +1
        # block for a window that starts inside one (extra_retained_tokens is 0 with one MTP module)
        tokens = min(self.window - 1 + ctx.in_flight_tokens, ctx.max_model_len)
        return (cdiv(tokens, self.block_size) + 1) * self.page_bytes


@dataclass(frozen=True)
class MambaSpec(CacheSpec):
    """A fixed state per request (MambaSpec): conv and SSM / recurrent tensors, padded to the attention page."""

    shapes: tuple[tuple[int, ...], ...]
    dtype_bytes: tuple[int, ...]
    mixer_kind: str
    mode: MambaMode = "none"
    speculative_blocks: int = 0  # one state per draft token (num_speculative_tokens)
    checkpoint_blocks: int = 0  # Mamba2 in align mode keeps a prefill checkpoint
    page_padded: int | None = None
    block_size: int = 0
    kind: str = "mamba"

    @property
    def state_bytes(self) -> int:
        return sum(prod(s) * b for s, b in zip(self.shapes, self.dtype_bytes, strict=True))

    @property
    def page_bytes(self) -> int:
        return self.page_padded if self.page_padded is not None else self.state_bytes

    @property
    def grows_with_block(self) -> bool:
        return False

    def max_memory_bytes(self, ctx: Context) -> int:
        if self.mode == "all":
            # a state at every block boundary of the context (models with SupportsMambaPrefixCaching, 0.15-0.27)
            return cdiv(ctx.max_model_len, self.block_size) * self.page_bytes
        if self.mode == "align":
            # the running state and the last block boundary's (for prefix caching), plus speculative states
            return self.page_bytes * (2 + self.speculative_blocks + self.checkpoint_blocks)
        return self.page_bytes * (1 + self.speculative_blocks)


# --- a layer's spec -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SpecSettings:
    """The engine settings that decide a layer's spec."""

    block_size: int
    kv_cache_dtype: str
    model_dtype: str | None
    tp: int
    version: V.Version
    mamba_mode: MambaMode = "none"
    conv_dtype: str = "auto"  # --mamba-cache-dtype
    ssm_dtype: str = "auto"  # --mamba-ssm-cache-dtype after the model's and the platform's defaults
    num_speculative_tokens: int = 0
    kept_layers: frozenset[int] = frozenset()  # layers whose KV stays in the model's dtype (kvdtypes.kept_layers)


def _dtype_bytes(name: str, model_dtype: str | None) -> int:
    """A state dtype's bytes; "auto" is the dtype the model is served in (`model_dtype`, 16 bits if unknown)."""
    if name == "auto":
        return DTYPE_BYTES.get((model_dtype or "bfloat16").lower(), 2)
    return DTYPE_BYTES.get(name.lower(), 2)


def attention_spec(m: Attention, s: SpecSettings, kv_cache_dtype: str | None = None) -> FullAttentionSpec:
    dtype = s.kv_cache_dtype if kv_cache_dtype is None else kv_cache_dtype
    elem, scale = kv_element_bytes(dtype, s.model_dtype)
    heads = kv_heads_per_rank(m.kv_heads, s.tp)
    packed = attention_head_bytes(dtype, s.model_dtype, m.head_dim, m.v_dim)
    common = dict(block_size=s.block_size, kv_heads=heads, head_size=m.head_dim, head_size_v=m.v_dim,
                  element_bytes=elem, scale_bytes=scale, head_bytes=packed,
                  side_bytes=m.side_cache_bytes_per_token())  # fmt: skip
    if isinstance(m, SlidingWindowAttention):
        return SlidingWindowSpec(**common, window=m.window)  # type: ignore[arg-type]
    if isinstance(m, ChunkedLocalAttention):
        return ChunkedLocalSpec(**common, chunk=m.chunk)  # type: ignore[arg-type]
    return FullAttentionSpec(**common)  # type: ignore[arg-type]


def mla_spec(m: MLAttention, s: SpecSettings, kv_cache_dtype: str | None = None) -> MLASpec:
    dtype = s.kv_cache_dtype if kv_cache_dtype is None else kv_cache_dtype
    elem, _ = kv_element_bytes(dtype, s.model_dtype)
    head = m.kv_lora_rank + m.qk_rope_head_dim
    # V3.2's indexer caches fp8 keys of index_head_dim plus an fp32 scale per 128 (132 bytes for 128 dims).
    indexer = m.indexer.head_dim + 4 * cdiv(m.indexer.head_dim, 128) if m.indexer is not None else 0
    return MLASpec(s.block_size, head, elem, mla_token_bytes(dtype, s.model_dtype, head), indexer)


def kept_layers_block_size(block_size: int, served_bytes: int, kernel_block: int, version: V.Version) -> int:
    """The block size when some layers keep their KV out of a quantized cache (TurboQuant's boundary layers):
    Platform._align_heterogeneous_kv_block_size raises it until the primary page covers a kept layer's page at the
    smallest kernel block. It prices the primary page with the first layer's backend, a kept layer's (FlashAttention
    or FlashInfer, which pack nothing): one byte per K and V element, `served_bytes` times smaller than a kept page."""
    if not V.KV_SKIP_LAYERS_ALIGN.on(version):
        return block_size
    alignment = max(kernel_block, block_size)
    # alignment × ⌈kept page × kernel block / (alignment × primary page)⌉, the K/V geometry cancelling out
    return max(block_size, alignment * cdiv(served_bytes * kernel_block, alignment))


# Recurrent state dtype when --mamba-ssm-cache-dtype is auto, by mixer class (vLLM's per-layer default).
_SSM_FP32_BY_DEFAULT = frozenset({"KimiDeltaAttention"})  # MambaStateDtypeCalculator.kda_state_dtype


def state_spec(m: Mixer, s: SpecSettings) -> MambaSpec | None:
    """vLLM's state shapes (MambaStateShapeCalculator) and dtypes (MambaStateDtypeCalculator) for one layer."""
    tp, spec_tokens = s.tp, s.num_speculative_tokens
    # blocks kept per draft token (one state per speculative position) since 0.15; the conv window widens anyway
    spec_blocks = spec_tokens if V.MAMBA_MODES.on(s.version) else 0
    conv_b = _dtype_bytes(s.conv_dtype, s.model_dtype)
    ssm_name = s.ssm_dtype
    if ssm_name == "auto" and type(m).__name__ in _SSM_FP32_BY_DEFAULT:
        ssm_name = "float32"
    ssm_b = conv_b if ssm_name == "auto" else _dtype_bytes(ssm_name, s.model_dtype)
    shapes: tuple[tuple[int, ...], ...]
    checkpoint = 0
    if isinstance(m, GatedDeltaNet):
        # conv over q, k and v: the last kernel-1 inputs (plus one per draft token); a head_v × head_k matrix per
        # value head
        shapes = (
            (m.conv_dim // tp, m.conv_kernel - 1 + spec_tokens),
            (m.num_v_heads // tp, m.head_v_dim, m.head_k_dim),
        )
    elif isinstance(m, Mamba2):
        # n_groups not divisible by tp is padded so every head's group travels with it
        groups = m.n_groups + (0 if m.n_groups % tp == 0 else tp - m.n_groups)
        conv_dim = m.d_inner + 2 * groups * m.d_state
        shapes = ((conv_dim // tp, m.conv_kernel - 1 + spec_tokens), (m.heads // tp, m.head_dim, m.d_state))
        checkpoint = 1  # MambaMixer2.get_kv_cache_spec: one prefill checkpoint block in align mode
    elif isinstance(m, Mamba):
        shapes = ((m.d_inner // tp, m.conv_kernel - 1), (m.d_inner // tp, m.d_state))
    elif isinstance(m, ShortConv):
        shapes = ((m.hidden // tp, m.conv_kernel - 1 + spec_tokens),)
        return MambaSpec(shapes, (conv_b,), m.kind, s.mamba_mode, spec_blocks, 0)
    else:
        return None
    return MambaSpec(
        shapes, (conv_b, ssm_b), m.kind, s.mamba_mode, spec_blocks, checkpoint if s.mamba_mode == "align" else 0
    )


# DeepSeek-V4 in vLLM 0.32 (vllm/models/deepseek_v4/, versions.DSV4_CACHE)
DSV4_KERNEL_BLOCK = 256  # DeepseekV4SparseMLABackend / DeepseekV4IndexerBackend.get_supported_kernel_block_sizes
_DSV4_SWA_BLOCK = 64  # DeepseekV4SWACache(block_size=64): DeepseekV4Attention does not pass one
_DSV4_STATE_BLOCK = {4: 4, 128: 8}  # CompressorStateCache.block_size per compress ratio
_FP32 = 4  # the compressors keep their state in float32 (DeepseekCompressor state_dtype)


def compressed_specs(m: CompressedAttention, s: SpecSettings) -> tuple[CacheSpec, ...]:
    """The cache layers one DeepSeek-V4 attention registers, in vLLM's order (DeepseekV4Attention.__init__): for
    CSA the indexer's keys and its compressor's state, then the sliding window (every layer, MTP's too), then the
    compressed KV and its compressor's state (CSA and HCA)."""
    fp8 = dsv4_fp8_layout(s.kv_cache_dtype)
    # fp8_ds_mla pages are padded to FlashMLA's 576-byte packing stride, plain rows to FlashInfer's 512
    align = 576 if fp8 else 512
    state = dsv4_state_bytes(s.kv_cache_dtype, s.model_dtype, m.head_dim)
    coff = 2 if m.overlap else 1  # CSA's compressor keeps two overlapping series (coff = 1 + (ratio == 4))

    def compressor(dim: int) -> SlidingMLASpec:
        # CompressorStateCache: kv and score state of coff series (2 × coff × dim fp32 values) per token, a window
        # of coff × compress_rate tokens
        return SlidingMLASpec(_DSV4_STATE_BLOCK.get(m.compress_rate, 8), 2 * coff * dim * _FP32, alignment=align,
                              window=coff * m.compress_rate, kind="compressor_state")  # fmt: skip

    out: list[CacheSpec] = []
    if m.index_heads:  # DeepseekV4IndexerCache: one key per compress_rate tokens
        keys = dsv4_indexer_key_bytes(m.index_head_dim)
        out += [CompressedMLASpec(s.block_size, keys, m.compress_rate, align, DSV4_KERNEL_BLOCK),
                compressor(m.index_head_dim)]  # fmt: skip
    out.append(SlidingMLASpec(_DSV4_SWA_BLOCK, state, alignment=align, window=m.window))  # DeepseekV4SWACache
    if m.compress_rate:  # DeepseekV4Attention.get_kv_cache_spec (None for a sliding-window-only layer)
        out += [CompressedMLASpec(s.block_size, state, m.compress_rate, align, DSV4_KERNEL_BLOCK),
                compressor(m.head_dim)]  # fmt: skip
    return tuple(out)


def layer_specs(m: Mixer, s: SpecSettings, prefix: str | None = None) -> tuple[CacheSpec, ...]:
    """Every cache layer vLLM registers for this mixer: none, one (`layer_spec`), or DeepSeek-V4's several."""
    if isinstance(m, CompressedAttention):
        return compressed_specs(m, s)
    spec = layer_spec(m, s, prefix)
    return () if spec is None else (spec,)


def layer_spec(m: Mixer, s: SpecSettings, prefix: str | None = None) -> CacheSpec | None:
    """The spec vLLM gives this mixer of the layer at `prefix`; None for a layer that keeps no cache (KV shared
    with another layer). A layer in `s.kept_layers` (by the index in its prefix, vLLM's extract_layer_index)
    keeps its KV in the model's dtype."""
    kept = "auto" if prefix is not None and _layer_index(prefix) in s.kept_layers else None
    if isinstance(m, Attention):
        return None if m.shares_kv_with is not None else attention_spec(m, s, kept)
    if isinstance(m, MLAttention):
        return mla_spec(m, s, kept)
    return state_spec(m, s)


def _layer_index(prefix: str) -> int | None:
    """models/utils.py extract_layer_index: the one integer among the prefix's dotted parts."""
    numbers = [int(p) for p in prefix.split(".") if p.isdigit()]
    return numbers[0] if len(numbers) == 1 else None


def has_unmodelled(m: Mixer) -> bool:
    """A mixer kind whose vLLM cache vlaunch does not reproduce."""
    return not isinstance(m, Attention | MLAttention | CompressedAttention | GatedDeltaNet | Mamba | Mamba2 | ShortConv)
