"""GLM-4 (glm) and GLM-4-0414 (glm4): q/k/v with biases and o without, gate and up fused into one
gate_up_proj, rotary on half of each head (`partial_rotary_factor` 0.5); glm4 adds a norm after the attention
and after the MLP (four norms per layer)."""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta, decoder, heads
from launcher.model.arch.config import Cfg
from launcher.model.arch.layers import Attention, DenseMLP
from launcher.model.arch.model import Model

MODEL_TYPES = ("glm", "glm4")

_GLM = dict(vocab_size=151552, hidden_size=4096, intermediate_size=13696, num_hidden_layers=40,
            num_attention_heads=32, num_key_value_heads=2, head_dim=128, tie_word_embeddings=False,
            attention_bias=True, max_position_embeddings=131072)  # fmt: skip
DEFAULTS: dict[str, dict[str, Any]] = {"glm": _GLM, "glm4": _GLM}

GLM4_NORMS = ("input_layernorm", "post_attention_layernorm", "post_self_attn_layernorm", "post_mlp_layernorm")


def rotary_dim(c: Cfg, head_dim: int, default: float = 0.5) -> int:
    """Rotary width: head_dim × partial_rotary_factor, from the config or its rope_parameters (GLM: 0.5)."""
    factor: Any = c.raw.get("partial_rotary_factor")
    rope = c.raw.get("rope_parameters")
    if factor is None and isinstance(rope, dict):
        factor = rope.get("partial_rotary_factor")
    if factor is None:
        factor = default
    if isinstance(factor, bool) or not isinstance(factor, int | float) or not 0 < factor <= 1:
        raise c.error(f"must be a number in (0, 1], got {factor!r}", "partial_rotary_factor")
    return int(head_dim * factor)


def read(c: Cfg, meta: Meta) -> Model:
    hidden = c.int("hidden_size")
    n, kv, d = heads(c)
    attn = Attention(hidden=hidden, heads=n, kv_heads=kv, head_dim=d, qkv_bias=c.bool("attention_bias"))
    mlp = DenseMLP(hidden=hidden, inter=c.int("intermediate_size"), fused_gate_up="gate_up_proj")
    names = GLM4_NORMS if meta.model_type == "glm4" else GLM4_NORMS[:2]
    return decoder(c, meta, parts=lambda i: (attn, mlp), rotary_dim=rotary_dim(c, d), layer_norms=names)
