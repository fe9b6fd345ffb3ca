"""Arcee (AFM): Llama's attention with a plain two-matrix MLP (up, ReLU², down) instead of SwiGLU."""

from __future__ import annotations

from typing import Any

from launcher.arch.common import Meta, build, embed_head, heads, tied
from launcher.arch.config import Cfg
from launcher.arch.layers import Attention, DenseMLP, Layer, norms
from launcher.arch.model import Model

MODEL_TYPES = ("arcee",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "arcee": dict(vocab_size=32000, hidden_size=2560, intermediate_size=18432, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=None, head_dim=None, tie_word_embeddings=False,
                  attention_bias=False, mlp_bias=False, max_position_embeddings=4096),
}  # fmt: skip


def read(c: Cfg, meta: Meta) -> Model:
    vocab, hidden, inter = c.int("vocab_size"), c.int("hidden_size"), c.int("intermediate_size")
    n, kv, d = heads(c)
    bias = c.bool("attention_bias")
    is_tied = tied(c, meta)
    attn = Attention(hidden=hidden, heads=n, kv_heads=kv, head_dim=d, qkv_bias=bias, o_bias=bias)
    mlp = DenseMLP(hidden=hidden, inter=inter, gated=False, bias=c.bool("mlp_bias"))
    layers = [
        Layer(
            prefix=f"model.layers.{i}",
            norms=norms(hidden, "input_layernorm", "post_attention_layernorm"),
            mixers=(attn,),
            mlps=(mlp,),
        )
        for i in range(c.int("num_hidden_layers"))
    ]
    embeddings, head = embed_head(vocab, hidden, is_tied)
    return build(c, meta, vocab=vocab, hidden=hidden, layers=layers, is_tied=is_tied, embeddings=embeddings,
                 head=head, rotary_dim=d)  # fmt: skip
