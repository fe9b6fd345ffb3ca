"""KV-cache bytes per token, by layer kind, per tensor-parallel rank. Pure arithmetic.

Standard attention stores a key and a value vector per KV head per layer for every token; MLA stores one
compressed latent (plus the decoupled rope key) per layer; sliding-window layers hold at most `window` tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

from launcher.errors import ConfigError
from launcher.model import ModelShape

KV_CACHE_DTYPES = (
    "auto", "bfloat16", "float16", "float32", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc",
    "int8_per_token_head", "fp8_per_token_head",
)  # fmt: skip

_MODEL_DTYPE_BYTES = {"float32": 4, "fp32": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2}


def kv_element_bytes(kv_cache_dtype: str, model_dtype: str | None) -> tuple[int, int]:
    """(bytes per K/V element, bytes of scale per token per KV head per K-or-V) for vLLM's kv_cache_dtype."""
    d = kv_cache_dtype.lower()
    if d == "auto":
        # vLLM's "auto": the model's dtype. A missing or fp32 dtype is served in 16 bits by default.
        md = (model_dtype or "bfloat16").lower()
        return (2 if _MODEL_DTYPE_BYTES.get(md, 2) == 4 else _MODEL_DTYPE_BYTES.get(md, 2)), 0
    if d in ("bfloat16", "float16", "bf16", "fp16", "half"):
        return 2, 0
    if d in ("float32", "fp32"):
        return 4, 0
    if d in ("fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc"):
        return 1, 0
    if d in ("int8_per_token_head", "fp8_per_token_head"):
        return 1, 4  # one fp32 scale per token per head, for K and for V
    raise ConfigError(f"unknown kv_cache_dtype {kv_cache_dtype!r}; known: {', '.join(KV_CACHE_DTYPES)}",
                      field="kv_cache_dtype")  # fmt: skip


def kv_heads_per_rank(total_kv_heads: int, tp: int) -> int:
    """KV heads one tensor-parallel rank holds: split when tp divides them, replicated when tp > heads."""
    return max(1, total_kv_heads // tp)


@dataclass(frozen=True)
class KVPerToken:
    """KV bytes per token of context, per rank, split by layer kind."""

    full_attention: int  # bytes/token summed over full-attention layers
    sliding_attention: int  # bytes/token summed over sliding-window layers (each holds ≤ window tokens)
    sliding_window: int | None
    per_layer: int  # bytes/token of one attention layer
    layers_full: int
    layers_sliding: int
    mla: bool
    tensor_parallel_size: int
    kv_heads_per_rank: int
    element_bytes: int

    @property
    def per_token(self) -> int:
        """Every attention layer storing every token: the textbook figure."""
        return self.full_attention + self.sliding_attention

    def bytes_for_context(self, tokens: int) -> int:
        """Bytes one sequence of `tokens` occupies: sliding layers stop growing at the window."""
        window = tokens if self.sliding_window is None else min(tokens, self.sliding_window)
        return self.full_attention * tokens + self.sliding_attention * window

    def to_json(self) -> dict[str, object]:
        return {
            "kv_bytes_per_token": self.per_token,
            "by_layer_kind": {
                "full_attention": self.full_attention,
                "sliding_attention": self.sliding_attention,
            },
            "sliding_window": self.sliding_window,
            "layers": {"full_attention": self.layers_full, "sliding_attention": self.layers_sliding},
            "per_layer_bytes_per_token": self.per_layer,
            "mla": self.mla,
            "tensor_parallel_size": self.tensor_parallel_size,
            "kv_heads_per_rank": self.kv_heads_per_rank,
            "element_bytes": self.element_bytes,
        }


def layer_bytes_per_token(shape: ModelShape, kv_cache_dtype: str = "auto", tp: int = 1) -> tuple[int, int]:
    """(bytes per token for one attention layer on one rank, KV heads per rank)."""
    elem, scale = kv_element_bytes(kv_cache_dtype, shape.torch_dtype)
    if shape.mla is not None:
        # One latent of kv_lora_rank plus the shared rope key, replicated on every rank: no ×2, no head split.
        return (shape.mla.kv_lora_rank + shape.mla.qk_rope_head_dim) * elem, 1
    heads = kv_heads_per_rank(shape.num_kv_heads, tp)
    # 2: a key and a value vector per KV head; only KV heads count (GQA), queries are never stored.
    return 2 * heads * (shape.head_dim * elem + scale), heads


def kv_per_token(shape: ModelShape, kv_cache_dtype: str = "auto", tp: int = 1) -> KVPerToken:
    if tp < 1:
        raise ConfigError(f"must be ≥ 1, got {tp}", field="tensor_parallel_size")
    per_layer, heads = layer_bytes_per_token(shape, kv_cache_dtype, tp)
    elem, _ = kv_element_bytes(kv_cache_dtype, shape.torch_dtype)
    return KVPerToken(
        full_attention=per_layer * shape.num_full_layers,
        sliding_attention=per_layer * shape.num_sliding_layers,
        sliding_window=shape.sliding_window,
        per_layer=per_layer,
        layers_full=shape.num_full_layers,
        layers_sliding=shape.num_sliding_layers,
        mla=shape.mla is not None,
        tensor_parallel_size=tp,
        kv_heads_per_rank=heads,
        element_bytes=elem,
    )
