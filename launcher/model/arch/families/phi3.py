"""Phi-3 / Phi-4: Llama's layer with q, k and v fused into one qkv_proj and gate and up into gate_up_proj;
`sliding_window`, when set, applies to every layer."""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta, decoder
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.mistral import mistral_attention
from launcher.model.arch.layers import DenseMLP
from launcher.model.arch.model import Model

MODEL_TYPES = ("phi3",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "phi3": dict(vocab_size=32064, hidden_size=3072, intermediate_size=8192, num_hidden_layers=32,
                 num_attention_heads=32, num_key_value_heads=None, tie_word_embeddings=False,
                 sliding_window=None, max_position_embeddings=4096),
}  # fmt: skip


def read(c: Cfg, meta: Meta) -> Model:
    hidden = c.int("hidden_size")
    attn = mistral_attention(c, hidden, fused_qkv="qkv_proj")
    mlp = DenseMLP(hidden=hidden, inter=c.int("intermediate_size"), fused_gate_up="gate_up_proj")
    return decoder(c, meta, parts=lambda i: (attn, mlp), rotary_dim=attn.head_dim)
