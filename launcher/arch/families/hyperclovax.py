"""HyperCLOVA X SEED: Llama's layer with Peri-LN, an extra RMSNorm on the output of attention (`post_norm1`)
and of the MLP (`post_norm2`) when `use_post_norm`; the scalar multipliers (embedding, residual, attention,
logits) hold no weights."""

from __future__ import annotations

from typing import Any

from launcher.arch.common import Meta, build, embed_head, heads, tied
from launcher.arch.config import Cfg
from launcher.arch.layers import Attention, DenseMLP, Layer, norms
from launcher.arch.model import Model

MODEL_TYPES = ("hyperclovax",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "hyperclovax": dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                        num_attention_heads=32, num_key_value_heads=None, head_dim=None, tie_word_embeddings=False,
                        attention_bias=False, mlp_bias=False, use_post_norm=True, max_position_embeddings=2048),
}  # fmt: skip


def read(c: Cfg, meta: Meta) -> Model:
    vocab, hidden, inter = c.int("vocab_size"), c.int("hidden_size"), c.int("intermediate_size")
    n, kv, d = heads(c)
    bias, mlp_bias = c.bool("attention_bias"), c.bool("mlp_bias")
    is_tied = tied(c, meta)
    names = ["input_layernorm", "post_attention_layernorm"]
    if c.bool("use_post_norm"):
        names += ["post_norm1", "post_norm2"]
    layers = [
        Layer(
            prefix=f"model.layers.{i}",
            norms=norms(hidden, *names),
            mixers=(Attention(hidden=hidden, heads=n, kv_heads=kv, head_dim=d, qkv_bias=bias, o_bias=bias),),
            mlps=(DenseMLP(hidden=hidden, inter=inter, bias=mlp_bias),),
        )
        for i in range(c.int("num_hidden_layers"))
    ]
    embeddings, head = embed_head(vocab, hidden, is_tied)
    return build(c, meta, vocab=vocab, hidden=hidden, layers=layers, is_tied=is_tied, embeddings=embeddings,
                 head=head, rotary_dim=d)  # fmt: skip
