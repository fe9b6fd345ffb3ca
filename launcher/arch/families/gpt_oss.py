"""gpt-oss: attention with biases and a learned sink logit per head, alternating sliding (128) and full
layers, a MoE with biased experts and router (MXFP4 experts in the released checkpoints)."""

from __future__ import annotations

from typing import Any

from launcher.arch.common import Meta, attention, build, embed_head, heads, layer_types, tied
from launcher.arch.config import Cfg
from launcher.arch.layers import Layer, MoE, norms
from launcher.arch.model import Model

MODEL_TYPES = ("gpt_oss",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "gpt_oss": dict(vocab_size=201088, hidden_size=2880, intermediate_size=2880, num_hidden_layers=36,
                    num_attention_heads=64, num_key_value_heads=8, head_dim=64, tie_word_embeddings=False,
                    attention_bias=True, sliding_window=128, num_local_experts=128, num_experts_per_tok=4,
                    max_position_embeddings=131072),
}  # fmt: skip


def read(c: Cfg, meta: Meta) -> Model:
    vocab, hidden, inter = c.int("vocab_size"), c.int("hidden_size"), c.int("intermediate_size")
    n, kv, d = heads(c)
    num_layers = c.int("num_hidden_layers")
    kinds = layer_types(c, num_layers, lambda i: "sliding_attention" if (i + 1) % 2 else "full_attention")
    window = c.opt_int("sliding_window")
    bias = c.bool("attention_bias")
    is_tied = tied(c, meta)
    moe = MoE(hidden=hidden, num_experts=c.int("num_local_experts"), experts_per_token=c.int("num_experts_per_tok"),
              expert_intermediate=inter, router_name="router", router_bias=True, expert_bias=True)  # fmt: skip
    layers = [
        Layer(
            prefix=f"model.layers.{i}",
            norms=norms(hidden, "input_layernorm", "post_attention_layernorm"),
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
                    sinks=True,
                ),
            ),
            mlps=(moe,),
        )
        for i in range(num_layers)
    ]
    embeddings, head = embed_head(vocab, hidden, is_tied)
    return build(c, meta, vocab=vocab, hidden=hidden, layers=layers, is_tied=is_tied, embeddings=embeddings,
                 head=head, rotary_dim=d)  # fmt: skip
