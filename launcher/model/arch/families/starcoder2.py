"""StarCoder2: GQA attention with biases on every projection (use_bias), a plain biased MLP (c_fc, c_proj),
biased LayerNorms, tied output; `sliding_window`, when set, applies to every layer."""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta, decoder
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.mistral import mistral_attention
from launcher.model.arch.layers import DenseMLP
from launcher.model.arch.model import Model

MODEL_TYPES = ("starcoder2",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "starcoder2": dict(vocab_size=49152, hidden_size=3072, intermediate_size=12288, num_hidden_layers=30,
                       num_attention_heads=24, num_key_value_heads=2, max_position_embeddings=4096,
                       sliding_window=None, use_bias=True, tie_word_embeddings=True),
}  # fmt: skip


def read(c: Cfg, meta: Meta) -> Model:
    hidden = c.int("hidden_size")
    bias = c.bool("use_bias")
    attn = mistral_attention(c, hidden, qkv_bias=bias, o_bias=bias)
    mlp = DenseMLP(
        hidden=hidden, inter=c.int("intermediate_size"), gated=False, bias=bias, names=("", "c_fc", "c_proj")
    )
    return decoder(c, meta, parts=lambda i: (attn, mlp), rotary_dim=attn.head_dim, norm_bias=True)
