"""Nemotron (Nemotron-4 / Minitron): LayerNorm1P norms (weight and bias), a plain (ungated) squared-ReLU
MLP, up then down, and RoPE on part of each head (`partial_rotary_factor`, 0.5 by default)."""

from __future__ import annotations

from typing import Any

from launcher.arch.common import Meta, build, embed_head, heads, tied
from launcher.arch.config import Cfg
from launcher.arch.layers import Attention, DenseMLP, Layer, norms
from launcher.arch.model import Model

MODEL_TYPES = ("nemotron",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "nemotron": dict(vocab_size=256000, hidden_size=6144, intermediate_size=24576, num_hidden_layers=32,
                     num_attention_heads=48, head_dim=None, num_key_value_heads=None, tie_word_embeddings=False,
                     attention_bias=False, mlp_bias=False, partial_rotary_factor=0.5, max_position_embeddings=4096),
}  # fmt: skip


def read(c: Cfg, meta: Meta) -> Model:
    vocab, hidden, inter = c.int("vocab_size"), c.int("hidden_size"), c.int("intermediate_size")
    n, kv, d = heads(c)
    bias, mlp_bias = c.bool("attention_bias"), c.bool("mlp_bias")
    rope = c.raw.get("rope_parameters")
    factor = rope.get("partial_rotary_factor") if isinstance(rope, dict) else None
    factor = factor if isinstance(factor, int | float) else c.float("partial_rotary_factor")
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
                 head=head, rotary_dim=int(d * factor))  # fmt: skip
