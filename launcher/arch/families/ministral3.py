"""Ministral 3 (the language model of the Ministral-3 releases): Mistral's layer (GQA attention with a fixed
128-wide head_dim, SwiGLU MLP, two norms) with YaRN-extended positions; `sliding_window`, when set, applies to
every layer. Inside a Mistral 3 wrapper its tensors live under `language_model.` (see mistral3.py)."""

from __future__ import annotations

from typing import Any

from launcher.arch.common import Meta, attention, build, embed_head, heads, tied
from launcher.arch.config import Cfg
from launcher.arch.layers import DenseMLP, Layer, norms
from launcher.arch.model import Model

MODEL_TYPES = ("ministral3",)

# transformers' Ministral3Config defaults (Ministral-3-8B), for the fields read here.
DEFAULTS: dict[str, dict[str, Any]] = {
    "ministral3": dict(vocab_size=131072, hidden_size=4096, intermediate_size=14336, num_hidden_layers=34,
                       num_attention_heads=32, num_key_value_heads=8, head_dim=128, tie_word_embeddings=False,
                       sliding_window=None, max_position_embeddings=262144),
}  # fmt: skip


def read(c: Cfg, meta: Meta) -> Model:
    vocab, hidden, inter = c.int("vocab_size"), c.int("hidden_size"), c.int("intermediate_size")
    n, kv, d = heads(c)
    window = c.opt_int("sliding_window")
    kind = "sliding_attention" if window else "full_attention"
    is_tied = tied(c, meta)
    layers = [
        Layer(
            prefix=f"model.layers.{i}",
            norms=norms(hidden, "input_layernorm", "post_attention_layernorm"),
            mixers=(attention(kind, window=window, hidden=hidden, heads=n, kv_heads=kv, head_dim=d),),
            mlps=(DenseMLP(hidden=hidden, inter=inter),),
        )
        for i in range(c.int("num_hidden_layers"))
    ]
    embeddings, head = embed_head(vocab, hidden, is_tied)
    return build(c, meta, vocab=vocab, hidden=hidden, layers=layers, is_tied=is_tied, embeddings=embeddings,
                 head=head, rotary_dim=d)  # fmt: skip
