"""Arcee (AFM): Llama's attention with a plain two-matrix MLP (up, ReLU², down) instead of SwiGLU; Jais 2 and
Nemotron build the same layer (`plain_mlp_model`)."""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta, decoder
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.llama import llama_attention
from launcher.model.arch.layers import DenseMLP
from launcher.model.arch.model import Model

MODEL_TYPES = ("arcee",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "arcee": dict(vocab_size=32000, hidden_size=2560, intermediate_size=18432, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=None, head_dim=None, tie_word_embeddings=False,
                  attention_bias=False, mlp_bias=False, max_position_embeddings=4096),
}  # fmt: skip


def plain_mlp_model(c: Cfg, meta: Meta, *, norm_bias: bool = False, rotary_factor: float = 1.0) -> Model:
    """Llama's layer with a plain MLP (up, then down, biased by `mlp_bias`), as Arcee, Jais 2 and Nemotron
    build it; `norm_bias` for LayerNorms with a bias, RoPE on `rotary_factor` of each head."""
    hidden = c.int("hidden_size")
    attn = llama_attention(c, hidden)
    mlp = DenseMLP(hidden=hidden, inter=c.int("intermediate_size"), gated=False, bias=c.bool("mlp_bias"))
    return decoder(c, meta, parts=lambda i: (attn, mlp), rotary_dim=int(attn.head_dim * rotary_factor),
                   norm_bias=norm_bias)  # fmt: skip


def read(c: Cfg, meta: Meta) -> Model:
    return plain_mlp_model(c, meta)
