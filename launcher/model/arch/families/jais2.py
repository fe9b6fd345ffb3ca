"""Jais 2: LayerNorms with bias, biases on every attention projection (o included), and a plain (ungated)
MLP, up then down with biases, under a squared-ReLU activation."""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.arcee import plain_mlp_model
from launcher.model.arch.model import Model

MODEL_TYPES = ("jais2",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "jais2": dict(vocab_size=150272, hidden_size=3328, intermediate_size=26624, num_hidden_layers=32,
                  num_attention_heads=26, num_key_value_heads=None, head_dim=None, tie_word_embeddings=False,
                  attention_bias=True, mlp_bias=True, max_position_embeddings=8192),
}  # fmt: skip


def read(c: Cfg, meta: Meta) -> Model:
    return plain_mlp_model(c, meta, norm_bias=True)
