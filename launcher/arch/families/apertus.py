"""Apertus (Swiss AI): Llama's attention with per-head q/k RMSNorm, a plain (ungated) MLP whose xIELU
activation carries two learned scalars per layer, and norms named attention_layernorm/feedforward_layernorm."""

from __future__ import annotations

from typing import Any

from launcher.arch.common import Meta, build, embed_head, heads, tied
from launcher.arch.config import Cfg
from launcher.arch.layers import Attention, DenseMLP, Layer, norms
from launcher.arch.model import Model
from launcher.arch.tensors import param

MODEL_TYPES = ("apertus",)

# transformers' ApertusConfig defaults (head_dim is no field: hidden_size // heads unless the file sets it).
DEFAULTS: dict[str, dict[str, Any]] = {
    "apertus": dict(vocab_size=131072, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                    num_attention_heads=32, num_key_value_heads=None, hidden_act="xielu",
                    tie_word_embeddings=False, attention_bias=False, max_position_embeddings=65536),
}  # fmt: skip


def read(c: Cfg, meta: Meta) -> Model:
    vocab, hidden, inter = c.int("vocab_size"), c.int("hidden_size"), c.int("intermediate_size")
    n, kv, d = heads(c)
    bias = c.bool("attention_bias")
    # xIELU learns alpha_p and alpha_n (one scalar each); its beta and eps are buffers, not parameters.
    act = (
        (
            *param("act_fn.alpha_p", "mlp", (1,), None),
            *param("act_fn.alpha_n", "mlp", (1,), None),
            *param("act_fn.beta", "mlp", (), None, role="buffer"),
            *param("act_fn.eps", "mlp", (), None, role="buffer"),
        )
        if c.str("hidden_act") == "xielu"
        else ()
    )
    is_tied = tied(c, meta)
    mlp = DenseMLP(hidden=hidden, inter=inter, gated=False, extra=act)
    attn = Attention(hidden=hidden, heads=n, kv_heads=kv, head_dim=d, qkv_bias=bias, o_bias=bias, qk_norm="head")
    layers = [
        Layer(
            prefix=f"model.layers.{i}",
            norms=norms(hidden, "attention_layernorm", "feedforward_layernorm"),
            mixers=(attn,),
            mlps=(mlp,),
        )
        for i in range(c.int("num_hidden_layers"))
    ]
    embeddings, head = embed_head(vocab, hidden, is_tied)
    return build(c, meta, vocab=vocab, hidden=hidden, layers=layers, is_tied=is_tied, embeddings=embeddings,
                 head=head, rotary_dim=d)  # fmt: skip
