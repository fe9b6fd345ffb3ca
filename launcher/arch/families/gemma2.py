"""Gemma 2: four norms per layer (around attention and around the MLP), sliding-window attention on every
other layer, tied embeddings."""

from __future__ import annotations

from typing import Any

from launcher.arch.common import Meta, attention, build, embed_head, heads, layer_types, tied
from launcher.arch.config import Cfg
from launcher.arch.layers import DenseMLP, Layer, norms
from launcher.arch.model import Model

MODEL_TYPES = ("gemma2",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma2": dict(vocab_size=256000, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                   num_attention_heads=8, num_key_value_heads=4, head_dim=256, tie_word_embeddings=True,
                   attention_bias=False, sliding_window=4096, max_position_embeddings=8192),
}  # fmt: skip

GEMMA_NORMS = ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm")


def read(c: Cfg, meta: Meta) -> Model:
    vocab, hidden, inter = c.int("vocab_size"), c.int("hidden_size"), c.int("intermediate_size")
    n, kv, d = heads(c)
    num_layers = c.int("num_hidden_layers")
    kinds = layer_types(c, num_layers, lambda i: "sliding_attention" if (i + 1) % 2 else "full_attention")
    window = c.opt_int("sliding_window")
    bias = c.bool("attention_bias")
    is_tied = tied(c, meta)
    layers = [
        Layer(
            prefix=f"model.layers.{i}",
            norms=norms(hidden, *GEMMA_NORMS),
            mixers=(
                attention(
                    kinds[i],
                    window=window,
                    c=c,
                    hidden=hidden,
                    heads=n,
                    kv_heads=kv,
                    head_dim=d,
                    qkv_bias=bias,
                    o_bias=bias,
                ),
            ),
            mlps=(DenseMLP(hidden=hidden, inter=inter),),
        )
        for i in range(num_layers)
    ]
    embeddings, head = embed_head(vocab, hidden, is_tied)
    return build(c, meta, vocab=vocab, hidden=hidden, layers=layers, is_tied=is_tied, embeddings=embeddings,
                 head=head, rotary_dim=d)  # fmt: skip
