"""Jais 2: LayerNorms with bias, biases on every attention projection (o included), and a plain (ungated)
MLP, up then down with biases, under a squared-ReLU activation."""

from __future__ import annotations

from typing import Any

from launcher.arch.common import Meta, build, embed_head, heads, tied
from launcher.arch.config import Cfg
from launcher.arch.layers import Attention, DenseMLP, Layer, norms
from launcher.arch.model import Model

MODEL_TYPES = ("jais2",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "jais2": dict(vocab_size=150272, hidden_size=3328, intermediate_size=26624, num_hidden_layers=32,
                  num_attention_heads=26, num_key_value_heads=None, head_dim=None, tie_word_embeddings=False,
                  attention_bias=True, mlp_bias=True, max_position_embeddings=8192),
}  # fmt: skip


def read(c: Cfg, meta: Meta) -> Model:
    vocab, hidden, inter = c.int("vocab_size"), c.int("hidden_size"), c.int("intermediate_size")
    n, kv, d = heads(c)
    bias, mlp_bias = c.bool("attention_bias"), c.bool("mlp_bias")
    is_tied = tied(c, meta)
    layers = [
        Layer(
            prefix=f"model.layers.{i}",
            norms=norms(hidden, "input_layernorm", "post_attention_layernorm", bias=True),
            mixers=(Attention(hidden=hidden, heads=n, kv_heads=kv, head_dim=d, qkv_bias=bias, o_bias=bias),),
            mlps=(DenseMLP(hidden=hidden, inter=inter, gated=False, bias=mlp_bias),),
        )
        for i in range(c.int("num_hidden_layers"))
    ]
    embeddings, head = embed_head(vocab, hidden, is_tied, norm_bias=True)
    return build(c, meta, vocab=vocab, hidden=hidden, layers=layers, is_tied=is_tied, embeddings=embeddings,
                 head=head, rotary_dim=d)  # fmt: skip
