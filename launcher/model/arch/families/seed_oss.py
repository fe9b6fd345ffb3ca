"""Seed-OSS: Llama's layer with biases on q, k and v (`attention_bias`) but, by default, none on o
(`attention_out_bias`), and head_dim 128 independent of hidden / heads."""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta, decoder, heads
from launcher.model.arch.config import Cfg
from launcher.model.arch.layers import Attention, DenseMLP
from launcher.model.arch.model import Model

MODEL_TYPES = ("seed_oss",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "seed_oss": dict(vocab_size=155136, hidden_size=4096, intermediate_size=27648, num_hidden_layers=64,
                     num_attention_heads=80, num_key_value_heads=8, head_dim=128, tie_word_embeddings=False,
                     attention_bias=True, attention_out_bias=False, mlp_bias=False, max_position_embeddings=524288),
}  # fmt: skip


def read(c: Cfg, meta: Meta) -> Model:
    hidden = c.int("hidden_size")
    n, kv, d = heads(c)
    qkv_bias, o_bias = c.bool("attention_bias"), c.bool("attention_out_bias")
    attn = Attention(hidden=hidden, heads=n, kv_heads=kv, head_dim=d, qkv_bias=qkv_bias, o_bias=o_bias)
    mlp = DenseMLP(hidden=hidden, inter=c.int("intermediate_size"), bias=c.bool("mlp_bias"))
    return decoder(c, meta, parts=lambda i: (attn, mlp), rotary_dim=d)
