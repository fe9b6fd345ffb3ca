"""Ministral 3 (the language model of the Ministral-3 releases): Mistral's layer (GQA attention with a fixed
128-wide head_dim, SwiGLU MLP, two norms) with YaRN-extended positions; `sliding_window`, when set, applies to
every layer. Inside a Mistral 3 wrapper its tensors live under `language_model.` (see mistral3.py)."""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta
from launcher.model.arch.config import Cfg
from launcher.model.arch.families import mistral
from launcher.model.arch.model import Model

MODEL_TYPES = ("ministral3",)

# transformers' Ministral3Config defaults (Ministral-3-8B), for the fields read here.
DEFAULTS: dict[str, dict[str, Any]] = {
    "ministral3": dict(vocab_size=131072, hidden_size=4096, intermediate_size=14336, num_hidden_layers=34,
                       num_attention_heads=32, num_key_value_heads=8, head_dim=128, tie_word_embeddings=False,
                       sliding_window=None, max_position_embeddings=262144),
}  # fmt: skip


def read(c: Cfg, meta: Meta) -> Model:
    return mistral.read(c, meta)  # Mistral's layer; only the defaults (and the positions' scaling) differ
