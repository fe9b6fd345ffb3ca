"""KV-cache bytes per token, by layer kind, per tensor-parallel rank. Pure arithmetic.

Standard attention stores a key and a value vector per KV head per layer for every token; MLA stores one
compressed latent (plus the decoupled rope key) per layer; sliding-window layers hold at most `window` tokens.
Each `--kv-cache-dtype` is priced as vLLM lays out its page (vllm/v1/kv_cache_interface.py AttentionSpec, after
the attention backend's `customize_spec`): the element of vllm/utils/torch_utils.py STR_DTYPE_TO_TORCH_DTYPE,
plus the scales and packing the dtype's backend stores in the page.
"""

from __future__ import annotations

from dataclasses import field

from launcher.common.errors import ConfigError
from launcher.common.records import dataclass
from launcher.common.units import cdiv
from launcher.model.arch.layers import (
    Attention,
    ChunkedLocalAttention,
    CompressedAttention,
    Mixer,
    MLAttention,
    SlidingWindowAttention,
    kv_heads_per_rank,
)
from launcher.model.arch.model import Model

__all__ = [
    "DTYPE_BYTES",
    "KV_CACHE_DTYPES",
    "KVPerToken",
    "attention_head_bytes",
    "boundary_layers",
    "compressed_bytes_per_token",
    "dsv4_fp8_layout",
    "kv_element_bytes",
    "kv_heads_per_rank",
    "kv_per_token",
    "mla_token_bytes",
]

# Every --kv-cache-dtype a vLLM release from 0.10 to 0.32 accepts (vllm/config/cache.py CacheDType; 0.32 holds all of
# them): bfloat16 from 0.11, fp8_ds_mla from 0.12, float16 from 0.18, the per-token-head, nvfp4 and turboquant types
# from 0.20, int4_per_token_head from 0.25, nvfp4_4over6 from 0.28, nvfp4_ds_mla from 0.30, ultraquant_4bit in 0.32.
KV_CACHE_DTYPES = (
    "auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla", "nvfp4_ds_mla",
    "int4_per_token_head", "int8_per_token_head", "fp8_per_token_head", "nvfp4", "nvfp4_4over6",
    "turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc", "ultraquant_4bit",
)  # fmt: skip

DTYPE_BYTES = {"float32": 4, "fp32": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2}

# What "auto" becomes: the dtype the model is served in (budget resolves it; float32 only under --dtype float32).
SERVED_DTYPES = {"float32": 4, "bfloat16": 2, "float16": 2}
FP8_DTYPES = frozenset({"fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc"})  # one byte per element, a per-tensor scale outside
PER_TOKEN_HEAD_DTYPES = frozenset({"int8_per_token_head", "fp8_per_token_head", "int4_per_token_head"})
NVFP4_DTYPES = frozenset({"nvfp4", "nvfp4_4over6"})
DS_MLA_DTYPES = frozenset({"fp8_ds_mla", "nvfp4_ds_mla"})
# TurboQuant presets (model_executor/layers/quantization/turboquant/config.py TQ_PRESETS): (key bits, value bits);
# 8-bit keys are stored as fp8.
TURBOQUANT_DTYPES = {"turboquant_k8v4": (8, 4), "turboquant_4bit_nc": (4, 4), "turboquant_k3v4_nc": (3, 4),
               "turboquant_3bit_nc": (3, 3)}  # fmt: skip
_SCALE = 4  # one fp32 scale (per-token-head dtypes: per token, per KV head, for K and for V)
_ULTRAQUANT_GROUP = 32  # v1/attention/ops/ultraquant/format.py GROUP_SIZE: one E8M0 scale byte per 32 values


def known_dtype(kv_cache_dtype: str) -> str:
    d = kv_cache_dtype.lower()
    if d not in KV_CACHE_DTYPES and d not in SERVED_DTYPES:
        raise ConfigError(f"unknown kv_cache_dtype {kv_cache_dtype!r}; known: {', '.join(KV_CACHE_DTYPES)}",
                          field="kv_cache_dtype")  # fmt: skip
    return d


def _served_bytes(model_dtype: str | None) -> int:
    """vLLM's "auto": the model's dtype. A missing or fp32 checkpoint dtype is served in 16 bits by default."""
    md = (model_dtype or "bfloat16").lower()
    return 2 if DTYPE_BYTES.get(md, 2) == 4 else DTYPE_BYTES.get(md, 2)


def kv_element_bytes(kv_cache_dtype: str, model_dtype: str | None) -> tuple[int, int]:
    """(bytes of the cache tensor's element, fp32 scale bytes per token per KV head for K and for V).

    The element is STR_DTYPE_TO_TORCH_DTYPE's: 1 byte (uint8 / int8 / float8) for every quantized dtype, packed
    4-bit ones included; `attention_head_bytes` and `mla_token_bytes` give what a token really takes."""
    d = known_dtype(kv_cache_dtype)
    if d == "auto":
        return _served_bytes(model_dtype), 0
    if d in SERVED_DTYPES:
        return SERVED_DTYPES[d], 0
    return 1, _SCALE if d in PER_TOKEN_HEAD_DTYPES else 0


def turboquant_slot_bytes(kv_cache_dtype: str, head_size: int) -> int:
    """TurboQuantConfig.slot_size_aligned: one head's key and value packed in one slot."""
    key_bits, value_bits = TURBOQUANT_DTYPES[kv_cache_dtype]
    # fp8 keys: a byte per element; else Lloyd-Max indices of key_bits each plus an fp16 vector norm
    key = head_size if key_bits == 8 else cdiv(head_size * key_bits, 8) + 2
    # values: value_bits each, plus an fp16 scale and an fp16 zero point
    value = cdiv(head_size * value_bits, 8) + 4
    slot = key + value
    return slot + slot % 2  # rounded up to even (effective_head_size = slot // 2)


def ultraquant_slot_bytes(head_size: int) -> int:
    """ultraquant/format.py slot_size: K and V as 4-bit codes (2 per byte), each with an E8M0 byte per 32 values."""
    return 2 * (head_size // 2 + head_size // _ULTRAQUANT_GROUP)


def attention_head_bytes(kv_cache_dtype: str, model_dtype: str | None, head_size: int, head_size_v: int) -> int:
    """Bytes one token of one KV head takes in one attention layer's page (AttentionSpec at block size 1 and one
    KV head, as the dtype's backend packs it)."""
    d = known_dtype(kv_cache_dtype)
    if d in NVFP4_DTYPES:
        # FlashInferBackend.customize_spec: K and V in separate slots of nvfp4_kv_cache_full_dim bytes each, fp4
        # data (2 values per byte) and an fp8 block scale per 16 values
        return 2 * (head_size // 2 + head_size // 16)
    if d in TURBOQUANT_DTYPES:
        return turboquant_slot_bytes(d, head_size)  # TurboQuantAttentionBackend: one packed K+V slot per head
    if d == "ultraquant_4bit":
        return ultraquant_slot_bytes(head_size)  # UltraQuantAttentionBackend: one packed K+V slot per head
    elem, scale = kv_element_bytes(d, model_dtype)
    if d == "int4_per_token_head":
        # TritonAttentionBackend.customize_spec: two int4 values per byte, then an fp32 scale for K and for V
        return head_size // 2 + head_size_v // 2 + 2 * scale
    # K and V, each element `elem` bytes; per-token-head dtypes add an inline fp32 scale for K and for V
    return (head_size + head_size_v) * elem + 2 * scale


def mla_token_bytes(kv_cache_dtype: str, model_dtype: str | None, head_size: int) -> int:
    """Bytes one token takes in one MLA layer's page (MLAAttentionSpec: one latent of `head_size` =
    kv_lora_rank + qk_rope_head_dim, no V, no head split)."""
    d = known_dtype(kv_cache_dtype)
    if d == "fp8_ds_mla":
        # FlashMLA sparse's layout (mla_attention.py state_content_bytes): 512 fp8 latent values, 4 fp32 scales
        # (one per 128) and the 64 rope values in bf16, whatever the model's geometry
        return 512 * 1 + 4 * 4 + 64 * 2
    if d == "nvfp4_ds_mla":
        # the NVFP4 DS-MLA layout (flashmla_sparse.py): 352 bytes a token; DeepSeek V3.2's geometry only
        return 352
    elem, scale = kv_element_bytes(d, model_dtype)
    latent = head_size // 2 if d == "int4_per_token_head" else head_size * elem
    # MLACommonBackend.customize_spec: per-token-head dtypes add an fp32 scale pair after the latent
    return latent + 2 * scale


# --- DeepSeek-V4 (vllm/models/deepseek_v4/attention.py, vLLM 0.32) ---------------------------------------------------

# fp8_ds_mla's state of one K=V vector of 512: 448 B of fp8 NoPE values, 128 B of RoPE values (64 in bf16) and 8 B
# of UE8M0 scales (DeepseekV4Attention.get_kv_cache_spec state_content_bytes; DeepseekV4SWACache
# packed_bytes_per_token)
DSV4_FP8_STATE_BYTES = 448 + 64 * 2 + 8
_INDEXER_SCALE_BLOCK = 128  # DeepseekV4Indexer.quant_block_size: one fp32 scale per 128 key values


def dsv4_fp8_layout(kv_cache_dtype: str) -> bool:
    """vLLM 0.32's default DeepSeek-V4 backends (FlashMLA on SM90 / SM100, FlashInfer's SM120 kernels on SM12x) store
    the fp8_ds_mla layout: "auto" and every fp8 dtype become fp8_ds_mla (_resolve_dsv4_kv_cache_dtype), any other
    dtype is refused there."""
    d = known_dtype(kv_cache_dtype)
    return d == "auto" or d.startswith("fp8")


def dsv4_state_bytes(kv_cache_dtype: str, model_dtype: str | None, head_dim: int) -> int:
    """One stored K=V state (a window token's or a compressed entry's): fp8_ds_mla's packed 584 bytes, else a plain
    row of head_dim elements (FlashInfer's DeepSeek-V4 backend, taken only when asked for by --attention-backend)."""
    if dsv4_fp8_layout(kv_cache_dtype):
        return DSV4_FP8_STATE_BYTES
    elem, _ = kv_element_bytes(kv_cache_dtype, model_dtype)
    return head_dim * elem


def dsv4_indexer_key_bytes(index_head_dim: int) -> int:
    """The lightning indexer's key per compressed entry (DeepseekV4Indexer.__init__ k_cache_head_dim, the FP8 cache
    vLLM uses unless --attention-config asks for MXFP4): fp8 values plus an fp32 scale per 128 (132 for 128)."""
    return index_head_dim + index_head_dim // _INDEXER_SCALE_BLOCK * 4


def compressed_bytes_per_token(m: CompressedAttention, kv_cache_dtype: str, model_dtype: str | None) -> tuple[int, int]:
    """(bytes per token of context the compressed caches grow by, bytes per token of the sliding window) of one
    DeepSeek-V4 layer, replicated on every rank (num_kv_heads 1, max_tp_shards 1). One compressed state (and for
    CSA one indexer key) per compress_rate tokens, rounded up to whole bytes per token (HCA: 584 / 128 = 4.5625
    gives 5); the window holds a state per token for its last `window` tokens. The compressors' fp32 partial
    windows are a fixed state per request, not per token (their pages are in launcher.vllm.specs)."""
    state = dsv4_state_bytes(kv_cache_dtype, model_dtype, m.head_dim)
    if not m.compress_rate:
        return 0, state
    index = dsv4_indexer_key_bytes(m.index_head_dim) if m.index_heads else 0
    return cdiv(state + index, m.compress_rate), state


# --- layers kept in the model's dtype ---------------------------------------------------------------------------------


def is_hybrid(shape: Model) -> bool:
    return bool(shape.mixer_kinds & {"linear_attention", "mamba", "mamba2", "short_conv"})


def boundary_layers(kv_cache_dtype: str, shape: Model, *, hybrids_keep_none: bool = True) -> frozenset[int]:
    """Layers TurboQuant and UltraQuant keep in the model's dtype (TurboQuantConfig.get_boundary_skip_layers: the
    first and last 2, at most half of them). `hybrids_keep_none`: a hybrid keeps none (vLLM from 0.21 on; the
    release's rule is `launcher.vllm.kvdtypes.kept_layers`)."""
    d = kv_cache_dtype.lower()
    if d not in TURBOQUANT_DTYPES and d != "ultraquant_4bit":
        return frozenset()
    if is_hybrid(shape) and hybrids_keep_none:
        return frozenset()
    n = min(2, len(shape.layers) // 2)
    return frozenset(range(n)) | frozenset(range(len(shape.layers) - n, len(shape.layers)))


# --- bytes per token of a model ------------------------------------------------------------------------------------


def context_bytes(
    tokens: int, full: int, sliding: int, window: int | None, chunked: int = 0, chunk: int | None = None
) -> int:
    """KV bytes of one sequence of `tokens`: full-attention layers hold every token, sliding-window layers at most
    `window`, chunked-local layers at most `chunk` (bytes per token summed over each kind's layers)."""
    w = tokens if window is None else min(tokens, window)
    c = tokens if chunk is None else min(tokens, chunk)
    return full * tokens + sliding * w + chunked * c


@dataclass(frozen=True)
class KVPerToken:
    """KV bytes per token of context, per rank, split by layer kind."""

    full_attention: int  # bytes/token summed over full-attention (and MLA) layers
    sliding_attention: int  # bytes/token summed over sliding-window layers (each holds ≤ window tokens)
    sliding_window: int | None
    per_layer: int  # bytes/token of one attention layer (the first)
    layers_full: int
    layers_sliding: int
    mla: bool
    tensor_parallel_size: int
    kv_heads_per_rank: int
    element_bytes: int
    chunked_attention: int = 0  # bytes/token summed over chunked-local layers (each holds ≤ chunk tokens)
    attention_chunk: int | None = None
    layers_chunked: int = 0
    layers_without_kv: dict[str, int] = field(default_factory=dict)  # state mixers and shared-KV layers

    @property
    def per_token(self) -> int:
        """Every attention layer storing every token: the textbook figure."""
        return self.full_attention + self.sliding_attention + self.chunked_attention

    def bytes_for_context(self, tokens: int) -> int:
        """Bytes one sequence of `tokens` occupies: sliding and chunked layers stop growing at their span."""
        return context_bytes(tokens, self.full_attention, self.sliding_attention, self.sliding_window,
                             self.chunked_attention, self.attention_chunk)  # fmt: skip

    def to_json(self) -> dict[str, object]:
        by_kind: dict[str, int] = {
            "full_attention": self.full_attention,
            "sliding_attention": self.sliding_attention,
        }
        layers: dict[str, int] = {"full_attention": self.layers_full, "sliding_attention": self.layers_sliding}
        if self.layers_chunked:
            by_kind["chunked_attention"] = self.chunked_attention
            layers["chunked_attention"] = self.layers_chunked
        return {
            "kv_bytes_per_token": self.per_token,
            "by_layer_kind": by_kind,
            "sliding_window": self.sliding_window,
            "attention_chunk_size": self.attention_chunk,
            "layers": layers,
            "layers_without_kv": dict(self.layers_without_kv),
            "per_layer_bytes_per_token": self.per_layer,
            "mla": self.mla,
            "tensor_parallel_size": self.tensor_parallel_size,
            "kv_heads_per_rank": self.kv_heads_per_rank,
            "element_bytes": self.element_bytes,
        }


def mixer_bytes_per_token(mixer: Mixer, kv_cache_dtype: str, model_dtype: str | None, tp: int = 1) -> int:
    """Bytes per token one mixer stores on one rank (0 for state mixers and layers that share another's KV)."""
    if isinstance(mixer, CompressedAttention):
        return sum(compressed_bytes_per_token(mixer, kv_cache_dtype, model_dtype))  # compressed + window
    if isinstance(mixer, MLAttention):
        # one latent plus the rope key, replicated on every rank
        return mla_token_bytes(kv_cache_dtype, model_dtype, mixer.kv_elements_per_token(tp))
    if not isinstance(mixer, Attention) or mixer.shares_kv_with is not None:
        return 0
    # GQA: only KV heads are stored, split across the tensor-parallel ranks
    heads = kv_heads_per_rank(mixer.kv_heads, tp)
    side = mixer.side_cache_bytes_per_token()  # a side cache beside K and V (MiniMax-M3's indexer keys)
    return heads * attention_head_bytes(kv_cache_dtype, model_dtype, mixer.head_dim, mixer.v_dim) + side


def _kv_parts(m: Mixer, dtype: str, model_dtype: str | None, tp: int) -> list[tuple[str, int]]:
    """A mixer's bytes per token by the span they cover: "full" (every token), "sliding" (its window), "chunked"
    (its chunk). A DeepSeek-V4 layer has both a compressed part that grows and a window."""
    if isinstance(m, CompressedAttention):
        grows, window = compressed_bytes_per_token(m, dtype, model_dtype)
        return [(k, b) for k, b in (("full", grows), ("sliding", window)) if b]
    b = mixer_bytes_per_token(m, dtype, model_dtype, tp)
    if not b:
        return []
    if isinstance(m, SlidingWindowAttention):
        return [("sliding", b)]
    return [("chunked" if isinstance(m, ChunkedLocalAttention) else "full", b)]


def kv_per_token(shape: Model, kv_cache_dtype: str = "auto", tp: int = 1) -> KVPerToken:
    if tp < 1:
        raise ConfigError(f"must be ≥ 1, got {tp}", field="tensor_parallel_size")
    elem, _ = kv_element_bytes(kv_cache_dtype, shape.torch_dtype)
    kept = boundary_layers(kv_cache_dtype, shape)  # TurboQuant / UltraQuant: these stay in the model's dtype
    per_layer = heads = 0  # the first attention layer's bytes per token and KV heads per rank
    by_span = {"full": 0, "sliding": 0, "chunked": 0}
    layers = {"full": 0, "sliding": 0, "chunked": 0}
    window: int | None = None
    chunk: int | None = None
    without: dict[str, int] = {}
    for i, layer in enumerate(shape.layers):
        dtype = "auto" if i in kept else kv_cache_dtype
        for m in layer.mixers:
            parts = _kv_parts(m, dtype, shape.torch_dtype, tp)
            if parts and not per_layer:
                per_layer = sum(b for _, b in parts)
                heads = kv_heads_per_rank(m.kv_heads, tp) if isinstance(m, Attention) else 1
            if not parts:
                without[m.kind] = without.get(m.kind, 0) + 1
            for span, b in parts:
                by_span[span] += b
                layers[span] += 1
                if span == "sliding":
                    w = m.window  # type: ignore[attr-defined]  # SlidingWindowAttention or CompressedAttention
                    window = w if window is None else max(window, w)
                elif span == "chunked":
                    chunk = m.chunk  # type: ignore[attr-defined]
    full, sliding, chunked = by_span["full"], by_span["sliding"], by_span["chunked"]
    n_full, n_sliding, n_chunked = layers["full"], layers["sliding"], layers["chunked"]
    return KVPerToken(
        full_attention=full,
        sliding_attention=sliding,
        sliding_window=window,
        per_layer=per_layer,
        layers_full=n_full,
        layers_sliding=n_sliding,
        mla=shape.mla is not None,
        tensor_parallel_size=tp,
        kv_heads_per_rank=heads,
        element_bytes=elem,
        chunked_attention=chunked,
        attention_chunk=chunk,
        layers_chunked=n_chunked,
        layers_without_kv=without,
    )
