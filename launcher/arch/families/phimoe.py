"""Phi-3.5-MoE: Mixtral's layout (16 experts, top 2, checkpoint names `block_sparse_moe.experts.N.w1/w3/w2`)
with LayerNorms (weight and bias) instead of RMSNorm, an optional lm_head bias, and `sliding_window`, when
set, on every layer."""

from __future__ import annotations

from typing import Any

from launcher.arch.common import Meta, attention, build, embed_head, heads, tied
from launcher.arch.config import Cfg
from launcher.arch.layers import Layer, MoE, norms
from launcher.arch.model import Model
from launcher.arch.tensors import Tensor

MODEL_TYPES = ("phimoe",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "phimoe": dict(vocab_size=32064, hidden_size=4096, intermediate_size=6400, num_hidden_layers=32,
                   num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=False, attention_bias=False,
                   lm_head_bias=False, sliding_window=None, num_local_experts=16, num_experts_per_tok=2,
                   max_position_embeddings=4096 * 32),
}  # fmt: skip


def read(c: Cfg, meta: Meta) -> Model:
    vocab, hidden, inter = c.int("vocab_size"), c.int("hidden_size"), c.int("intermediate_size")
    n, kv, d = heads(c)
    window = c.opt_int("sliding_window")
    kind = "sliding_attention" if window else "full_attention"
    bias = c.bool("attention_bias")
    is_tied = tied(c, meta)
    moe = MoE(hidden=hidden, num_experts=c.int("num_local_experts"), experts_per_token=c.int("num_experts_per_tok"),
              expert_intermediate=inter, name="block_sparse_moe", expert_names=("w1", "w3", "w2"))  # fmt: skip
    layers = [
        Layer(
            prefix=f"model.layers.{i}",
            norms=norms(hidden, "input_layernorm", "post_attention_layernorm", bias=True),
            mixers=(
                attention(
                    kind, window=window, hidden=hidden, heads=n, kv_heads=kv, head_dim=d, qkv_bias=bias, o_bias=bias
                ),
            ),
            mlps=(moe,),
        )
        for i in range(c.int("num_hidden_layers"))
    ]
    embeddings, head = embed_head(vocab, hidden, is_tied, norm_bias=True)
    if c.bool("lm_head_bias"):  # the bias stays the head's own even when its weight is tied
        head += (Tensor("lm_head.bias", "lm_head", "bias", (vocab,)),)
    return build(c, meta, vocab=vocab, hidden=hidden, layers=layers, is_tied=is_tied, embeddings=embeddings,
                 head=head, rotary_dim=d)  # fmt: skip
