"""IBM Granite (granite) and Granite SWA (granite_swa): Llama's layer with one `attention_bias` for all four
projections and `mlp_bias`; the *_swa models add a learned sink logit per head on every layer and make three
of every four layers sliding-window (layer i is global when i % 4 == 0, unless `layer_types` says otherwise).
The embedding/residual/logit multipliers scale activations only."""

from __future__ import annotations

from typing import Any

from launcher.arch.common import Meta, attention, build, embed_head, heads, layer_types, tied
from launcher.arch.config import Cfg
from launcher.arch.layers import Attention, DenseMLP, Layer, norms
from launcher.arch.model import Model

MODEL_TYPES = ("granite", "granite_swa")

DEFAULTS: dict[str, dict[str, Any]] = {
    "granite": dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                    num_attention_heads=32, num_key_value_heads=None, tie_word_embeddings=False,
                    attention_bias=False, mlp_bias=False, max_position_embeddings=2048),
    "granite_swa": dict(vocab_size=100352, hidden_size=2560, intermediate_size=8192, num_hidden_layers=24,
                        num_attention_heads=20, num_key_value_heads=4, tie_word_embeddings=True,
                        attention_bias=False, mlp_bias=False, sliding_window=128, layer_types=None,
                        max_position_embeddings=8192),
}  # fmt: skip


def granite_attention(c: Cfg, meta: Meta, num_layers: int, hidden: int) -> list[Attention]:
    """Each layer's attention: biased (or not) q/k/v/o; the SWA models' sinks and sliding layers."""
    n, kv, d = heads(c, hidden=hidden)
    bias = c.bool("attention_bias")
    if not meta.model_type.endswith("_swa"):
        return [Attention(hidden=hidden, heads=n, kv_heads=kv, head_dim=d, qkv_bias=bias, o_bias=bias)] * num_layers
    window = c.opt_int("sliding_window")
    kinds = layer_types(c, num_layers, lambda i: "full_attention" if i % 4 == 0 else "sliding_attention")
    return [
        attention(k if window else "full_attention", window=window, c=c, hidden=hidden, heads=n, kv_heads=kv,
                  head_dim=d, qkv_bias=bias, o_bias=bias, sinks=True)
        for k in kinds
    ]  # fmt: skip


def read(c: Cfg, meta: Meta) -> Model:
    vocab, hidden, inter = c.int("vocab_size"), c.int("hidden_size"), c.int("intermediate_size")
    num_layers = c.int("num_hidden_layers")
    attns = granite_attention(c, meta, num_layers, hidden)
    is_tied = tied(c, meta)
    mlp = DenseMLP(hidden=hidden, inter=inter, bias=c.bool("mlp_bias"))
    layers = [
        Layer(
            prefix=f"model.layers.{i}",
            norms=norms(hidden, "input_layernorm", "post_attention_layernorm"),
            mixers=(attns[i],),
            mlps=(mlp,),
        )
        for i in range(num_layers)
    ]
    embeddings, head = embed_head(vocab, hidden, is_tied)
    return build(c, meta, vocab=vocab, hidden=hidden, layers=layers, is_tied=is_tied, embeddings=embeddings,
                 head=head, rotary_dim=attns[0].head_dim)  # fmt: skip
