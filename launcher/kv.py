"""KV-cache bytes per token, by layer kind, per tensor-parallel rank. Pure arithmetic.

Standard attention stores a key and a value vector per KV head per layer for every token; MLA stores one
compressed latent (plus the decoupled rope key) per layer; sliding-window layers hold at most `window` tokens.
"""

from __future__ import annotations

from dataclasses import field

from launcher.arch.layers import (
    Attention,
    ChunkedLocalAttention,
    Mixer,
    MLAttention,
    SlidingWindowAttention,
    kv_heads_per_rank,
)
from launcher.arch.model import Model
from launcher.errors import ConfigError
from launcher.records import dataclass

__all__ = ["DTYPE_BYTES", "KV_CACHE_DTYPES", "KVPerToken", "kv_element_bytes", "kv_heads_per_rank", "kv_per_token"]

KV_CACHE_DTYPES = (
    "auto", "bfloat16", "float16", "float32", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc",
    "int8_per_token_head", "fp8_per_token_head", "fp8_ds_mla",
)  # fmt: skip
# fp8_ds_mla (DeepSeek V3.2's FlashMLA sparse format): per token per MLA layer a 512-element fp8 latent, 4 fp32
# scales (one per 128 elements) and the 64-element rope key kept in bf16 — vLLM's MLAAttentionSpec page size.
DS_MLA_BYTES_PER_TOKEN = 512 * 1 + 4 * 4 + 64 * 2

DTYPE_BYTES = {"float32": 4, "fp32": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2}


def kv_element_bytes(kv_cache_dtype: str, model_dtype: str | None) -> tuple[int, int]:
    """(bytes per K/V element, bytes of scale per token per KV head per K-or-V) for vLLM's kv_cache_dtype."""
    d = kv_cache_dtype.lower()
    if d == "auto":
        # vLLM's "auto": the model's dtype. A missing or fp32 dtype is served in 16 bits by default.
        md = (model_dtype or "bfloat16").lower()
        return (2 if DTYPE_BYTES.get(md, 2) == 4 else DTYPE_BYTES.get(md, 2)), 0
    if d in ("bfloat16", "float16", "bf16", "fp16", "half"):
        return 2, 0
    if d in ("float32", "fp32"):
        return 4, 0
    if d in ("fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla"):
        return 1, 0
    if d in ("int8_per_token_head", "fp8_per_token_head"):
        return 1, 4  # one fp32 scale per token per head, for K and for V
    raise ConfigError(f"unknown kv_cache_dtype {kv_cache_dtype!r}; known: {', '.join(KV_CACHE_DTYPES)}",
                      field="kv_cache_dtype")  # fmt: skip


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
        window = tokens if self.sliding_window is None else min(tokens, self.sliding_window)
        chunk = tokens if self.attention_chunk is None else min(tokens, self.attention_chunk)
        return self.full_attention * tokens + self.sliding_attention * window + self.chunked_attention * chunk

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
    if not isinstance(mixer, Attention | MLAttention):
        return 0
    elem, scale = kv_element_bytes(kv_cache_dtype, model_dtype)
    # The mixer's own elements per token on this rank: K and V per KV head for attention (GQA: only KV heads);
    # MLA's one latent plus the rope key, replicated on every rank. Per-token-head dtypes add a scale per KV head
    # for K and for V (MLA's latent has none).
    scales = 0 if isinstance(mixer, MLAttention) else 2 * kv_heads_per_rank(mixer.kv_heads, tp) * scale
    if isinstance(mixer, MLAttention) and kv_cache_dtype.lower() == "fp8_ds_mla":
        return DS_MLA_BYTES_PER_TOKEN
    elems = mixer.kv_elements_per_token(tp)
    return elems * elem + scales if elems else 0


def kv_per_token(shape: Model, kv_cache_dtype: str = "auto", tp: int = 1) -> KVPerToken:
    if tp < 1:
        raise ConfigError(f"must be ≥ 1, got {tp}", field="tensor_parallel_size")
    elem, _ = kv_element_bytes(kv_cache_dtype, shape.torch_dtype)
    per_layer = heads = 0  # the first attention layer's bytes per token and KV heads per rank
    full = sliding = chunked = 0
    n_full = n_sliding = n_chunked = 0
    window: int | None = None
    chunk: int | None = None
    without: dict[str, int] = {}
    for layer in shape.layers:
        for m in layer.mixers:
            b = mixer_bytes_per_token(m, kv_cache_dtype, shape.torch_dtype, tp)
            if b and not per_layer:
                per_layer = b
                heads = kv_heads_per_rank(m.kv_heads, tp) if isinstance(m, Attention) else 1
            if not b:
                without[m.kind] = without.get(m.kind, 0) + 1
            elif isinstance(m, SlidingWindowAttention):
                sliding += b
                n_sliding += 1
                window = m.window if window is None else max(window, m.window)
            elif isinstance(m, ChunkedLocalAttention):
                chunked += b
                n_chunked += 1
                chunk = m.chunk
            else:
                full += b
                n_full += 1
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
