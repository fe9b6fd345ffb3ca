"""Nemotron (Nemotron-4 / Minitron): LayerNorm1P norms (weight and bias), a plain (ungated) squared-ReLU
MLP, up then down, and RoPE on part of each head (`partial_rotary_factor`, 0.5 by default)."""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.arcee import plain_mlp_model
from launcher.model.arch.model import Model

MODEL_TYPES = ("nemotron",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "nemotron": dict(vocab_size=256000, hidden_size=6144, intermediate_size=24576, num_hidden_layers=32,
                     num_attention_heads=48, head_dim=None, num_key_value_heads=None, tie_word_embeddings=False,
                     attention_bias=False, mlp_bias=False, partial_rotary_factor=0.5, max_position_embeddings=4096),
}  # fmt: skip


def read(c: Cfg, meta: Meta) -> Model:
    rope = c.raw.get("rope_parameters")
    factor = rope.get("partial_rotary_factor") if isinstance(rope, dict) else None
    factor = factor if isinstance(factor, int | float) else c.float("partial_rotary_factor")
    if isinstance(factor, bool) or not 0 <= factor <= 1:  # NaN fails both comparisons
        raise c.error(f"partial rotary factor must be a number in [0, 1], got {factor!r}", "partial_rotary_factor")
    return plain_mlp_model(c, meta, norm_bias=True, rotary_factor=factor)
