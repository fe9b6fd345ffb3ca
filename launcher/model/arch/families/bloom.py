"""BLOOM: ALiBi position biases (no rotary or learned positions), a LayerNorm right after the word embeddings,
LayerNorms with biases, q/k/v fused in query_key_value, a plain 4x MLP, every linear biased; tied output."""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta, decoder
from launcher.model.arch.config import Cfg
from launcher.model.arch.layers import Attention, DenseMLP
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import norm

MODEL_TYPES = ("bloom",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "bloom": dict(vocab_size=250880, hidden_size=64, n_layer=2, n_head=8, tie_word_embeddings=True),
}  # fmt: skip

ATTRIBUTE_MAP: dict[str, dict[str, str]] = {
    "bloom": {"num_hidden_layers": "n_layer", "num_attention_heads": "n_head"},
}


def read(c: Cfg, meta: Meta) -> Model:
    n = c.int("n_head")
    # Released configs name the width n_embed; transformers reads it in place of hidden_size.
    hidden = c.int("n_embed") if c.has("n_embed") else c.int("hidden_size")
    d = hidden // n
    if d <= 0:
        raise c.error("hidden_size // n_head is 0", "n_head")
    # query_key_value: 3 × hidden (every head has its own K and V)
    attn = Attention(hidden=hidden, heads=n, kv_heads=n, head_dim=d, qkv_bias=True, o_bias=True,
                     fused_qkv="query_key_value", names=("q", "k", "v", "dense"), name="self_attention")  # fmt: skip
    # dense_h_to_4h: always 4 × hidden wide (BLOOM has no intermediate-size field)
    mlp = DenseMLP(hidden=hidden, inter=4 * hidden, gated=False, bias=True,
                   names=("", "dense_h_to_4h", "dense_4h_to_h"))  # fmt: skip
    # ALiBi position biases: no rotary; the LayerNorm right after the word embeddings counts with them
    return decoder(c, meta, parts=lambda i: (attn, mlp), rotary_dim=0, hidden=hidden, num_layers=c.int("n_layer"),
                   norm_bias=True, prefix="transformer.h", embed="transformer.word_embeddings",
                   final_norm="transformer.ln_f",
                   embed_extra=norm("transformer.word_embeddings_layernorm", hidden, None, bias=True),
                   max_pos_key="")  # fmt: skip
