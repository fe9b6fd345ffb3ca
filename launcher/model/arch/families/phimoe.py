"""Phi-3.5-MoE: Mixtral's layout (16 experts, top 2, checkpoint names `block_sparse_moe.experts.N.w1/w3/w2`)
with LayerNorms (weight and bias) instead of RMSNorm, an optional lm_head bias, and `sliding_window`, when
set, on every layer."""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta, decoder
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.mistral import mistral_attention
from launcher.model.arch.layers import MoE
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import Tensor

MODEL_TYPES = ("phimoe",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "phimoe": dict(vocab_size=32064, hidden_size=4096, intermediate_size=6400, num_hidden_layers=32,
                   num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=False, attention_bias=False,
                   lm_head_bias=False, sliding_window=None, num_local_experts=16, num_experts_per_tok=2,
                   max_position_embeddings=4096 * 32),
}  # fmt: skip


def read(c: Cfg, meta: Meta) -> Model:
    vocab, hidden = c.int("vocab_size"), c.int("hidden_size")
    bias = c.bool("attention_bias")
    attn = mistral_attention(c, hidden, qkv_bias=bias, o_bias=bias)
    moe = MoE(hidden=hidden, num_experts=c.int("num_local_experts"), experts_per_token=c.int("num_experts_per_tok"),
              expert_intermediate=c.int("intermediate_size"), name="block_sparse_moe",
              expert_names=("w1", "w3", "w2"))  # fmt: skip
    # the bias stays the head's own even when its weight is tied
    bias_of_head = (Tensor("lm_head.bias", "lm_head", "bias", (vocab,)),) if c.bool("lm_head_bias") else ()
    return decoder(c, meta, parts=lambda i: (attn, moe), rotary_dim=attn.head_dim, norm_bias=True,
                   head_extra=bias_of_head)  # fmt: skip
