"""Gemma (v1): Llama's layer (two norms, GQA attention, gated MLP with GELU) with a 256-wide head_dim that
is independent of hidden / heads, and the output head tied to the embedding."""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta, decoder
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.llama import llama_attention
from launcher.model.arch.layers import DenseMLP
from launcher.model.arch.model import Model

MODEL_TYPES = ("gemma",)

# transformers' GemmaConfig defaults (Gemma-7B), for the fields read here.
DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma": dict(vocab_size=256000, hidden_size=3072, intermediate_size=24576, num_hidden_layers=28,
                  num_attention_heads=16, num_key_value_heads=16, head_dim=256, tie_word_embeddings=True,
                  attention_bias=False, max_position_embeddings=8192),
}  # fmt: skip


def read(c: Cfg, meta: Meta) -> Model:
    hidden = c.int("hidden_size")
    attn = llama_attention(c, hidden)
    mlp = DenseMLP(hidden=hidden, inter=c.int("intermediate_size"))
    return decoder(c, meta, parts=lambda i: (attn, mlp), rotary_dim=attn.head_dim)
