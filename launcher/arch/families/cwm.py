"""CWM (Code World Model): Llama's layer with `sliding_window` attention on three of every four layers
(layer i is global when i % 4 == 0, unless the config lists `layer_types`)."""

from __future__ import annotations

from typing import Any

from launcher.arch.common import Meta, attention, build, embed_head, heads, layer_types, tied
from launcher.arch.config import Cfg
from launcher.arch.layers import DenseMLP, Layer, norms
from launcher.arch.model import Model

MODEL_TYPES = ("cwm",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "cwm": dict(vocab_size=128256, hidden_size=6144, intermediate_size=21504, num_hidden_layers=64,
                num_attention_heads=48, num_key_value_heads=8, head_dim=128, tie_word_embeddings=False,
                mlp_bias=False, sliding_window=8192, layer_types=None, max_position_embeddings=131072),
}  # fmt: skip


def read(c: Cfg, meta: Meta) -> Model:
    vocab, hidden, inter = c.int("vocab_size"), c.int("hidden_size"), c.int("intermediate_size")
    n, kv, d = heads(c)
    num_layers = c.int("num_hidden_layers")
    window = c.int("sliding_window")  # CwmConfig requires one
    kinds = layer_types(c, num_layers, lambda i: "full_attention" if i % 4 == 0 else "sliding_attention")
    is_tied = tied(c, meta)
    mlp = DenseMLP(hidden=hidden, inter=inter, bias=c.bool("mlp_bias"))
    layers = [
        Layer(
            prefix=f"model.layers.{i}",
            norms=norms(hidden, "input_layernorm", "post_attention_layernorm"),
            mixers=(attention(kinds[i], window=window, c=c, hidden=hidden, heads=n, kv_heads=kv, head_dim=d),),
            mlps=(mlp,),
        )
        for i in range(num_layers)
    ]
    embeddings, head = embed_head(vocab, hidden, is_tied)
    return build(c, meta, vocab=vocab, hidden=hidden, layers=layers, is_tied=is_tied, embeddings=embeddings,
                 head=head, rotary_dim=d)  # fmt: skip
