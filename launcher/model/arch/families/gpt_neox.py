"""GPT-NeoX (Pythia, GPT-NeoX-20B): LayerNorms with biases, q/k/v fused in query_key_value, a plain biased
MLP, rotary embeddings on only a fraction of each head (rotary_pct, 0.25 by default). The output head is saved
as `embed_out` (transformers renames it to lm_head when loading)."""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta, decoder
from launcher.model.arch.config import Cfg
from launcher.model.arch.layers import Attention, DenseMLP
from launcher.model.arch.model import Model

MODEL_TYPES = ("gpt_neox",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "gpt_neox": dict(vocab_size=50432, hidden_size=6144, num_hidden_layers=44, num_attention_heads=64,
                     intermediate_size=24576, tie_word_embeddings=False, attention_bias=True,
                     max_position_embeddings=2048, rotary_pct=0.25),
}  # fmt: skip


def partial_rotary(c: Cfg, head_dim: int, key: str = "rotary_pct") -> int:
    """Rotary width per head: rope_parameters' partial_rotary_factor, else the legacy key, times head_dim."""
    rope = c.get("rope_parameters")
    factor: Any = rope.get("partial_rotary_factor") if isinstance(rope, dict) else None
    if factor is None:
        factor = c.float(key)
    if isinstance(factor, bool) or not isinstance(factor, int | float) or not 0 <= factor <= 1:
        raise c.error(f"partial rotary factor must be a number in [0, 1], got {factor!r}", key)
    return int(head_dim * factor)


def read(c: Cfg, meta: Meta) -> Model:
    hidden = c.int("hidden_size")
    n = c.int("num_attention_heads")
    d = hidden // n
    if d <= 0:
        raise c.error("hidden_size // num_attention_heads is 0", "num_attention_heads")
    bias = c.bool("attention_bias")
    # query_key_value: 3 × hidden (every head has its own K and V)
    attn = Attention(hidden=hidden, heads=n, kv_heads=n, head_dim=d, qkv_bias=bias, o_bias=bias,
                     fused_qkv="query_key_value", names=("q", "k", "v", "dense"), name="attention")  # fmt: skip
    mlp = DenseMLP(hidden=hidden, inter=c.int("intermediate_size"), gated=False, bias=True,
                   names=("", "dense_h_to_4h", "dense_4h_to_h"))  # fmt: skip
    return decoder(c, meta, parts=lambda i: (attn, mlp), rotary_dim=partial_rotary(c, d), norm_bias=True,
                   prefix="gpt_neox.layers", embed="gpt_neox.embed_in", final_norm="gpt_neox.final_layer_norm",
                   head="embed_out")  # fmt: skip
