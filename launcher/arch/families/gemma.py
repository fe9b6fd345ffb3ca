"""Gemma (v1): Llama's layer (two norms, GQA attention, gated MLP with GELU) with a 256-wide head_dim that
is independent of hidden / heads, and the output head tied to the embedding."""

from __future__ import annotations

from typing import Any

from launcher.arch.common import Meta, build, embed_head, heads, tied
from launcher.arch.config import Cfg
from launcher.arch.layers import Attention, DenseMLP, Layer, norms
from launcher.arch.model import Model

MODEL_TYPES = ("gemma",)

# transformers' GemmaConfig defaults (Gemma-7B), for the fields read here.
DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma": dict(vocab_size=256000, hidden_size=3072, intermediate_size=24576, num_hidden_layers=28,
                  num_attention_heads=16, num_key_value_heads=16, head_dim=256, tie_word_embeddings=True,
                  attention_bias=False, max_position_embeddings=8192),
}  # fmt: skip


def read(c: Cfg, meta: Meta) -> Model:
    vocab, hidden, inter = c.int("vocab_size"), c.int("hidden_size"), c.int("intermediate_size")
    n, kv, d = heads(c)
    bias = c.bool("attention_bias")
    is_tied = tied(c, meta)
    layers = [
        Layer(
            prefix=f"model.layers.{i}",
            norms=norms(hidden, "input_layernorm", "post_attention_layernorm"),
            mixers=(Attention(hidden=hidden, heads=n, kv_heads=kv, head_dim=d, qkv_bias=bias, o_bias=bias),),
            mlps=(DenseMLP(hidden=hidden, inter=inter),),
        )
        for i in range(c.int("num_hidden_layers"))
    ]
    embeddings, head = embed_head(vocab, hidden, is_tied)
    return build(c, meta, vocab=vocab, hidden=hidden, layers=layers, is_tied=is_tied, embeddings=embeddings,
                 head=head, rotary_dim=d)  # fmt: skip
