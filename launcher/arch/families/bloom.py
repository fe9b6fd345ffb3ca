"""BLOOM: ALiBi position biases (no rotary or learned positions), a LayerNorm right after the word embeddings,
LayerNorms with biases, q/k/v fused in query_key_value, a plain 4x MLP, every linear biased; tied output."""

from __future__ import annotations

from typing import Any

from launcher.arch.common import Meta, build, embed_head, tied
from launcher.arch.config import Cfg
from launcher.arch.layers import Attention, DenseMLP, Layer, norms
from launcher.arch.model import Model
from launcher.arch.tensors import norm

MODEL_TYPES = ("bloom",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "bloom": dict(vocab_size=250880, hidden_size=64, n_layer=2, n_head=8, tie_word_embeddings=True),
}  # fmt: skip

ATTRIBUTE_MAP: dict[str, dict[str, str]] = {
    "bloom": {"num_hidden_layers": "n_layer", "num_attention_heads": "n_head"},
}


def read(c: Cfg, meta: Meta) -> Model:
    vocab, n = c.int("vocab_size"), c.int("n_head")
    # Released configs name the width n_embed; transformers reads it in place of hidden_size.
    hidden = c.int("n_embed") if c.has("n_embed") else c.int("hidden_size")
    d = hidden // n
    if d <= 0:
        raise c.error("hidden_size // n_head is 0", "n_head")
    is_tied = tied(c, meta)
    # query_key_value: 3 × hidden (every head has its own K and V)
    attn = Attention(hidden=hidden, heads=n, kv_heads=n, head_dim=d, qkv_bias=True, o_bias=True,
                     fused_qkv="query_key_value", names=("q", "k", "v", "dense"), name="self_attention")  # fmt: skip
    # dense_h_to_4h: always 4 × hidden wide (BLOOM has no intermediate-size field)
    mlp = DenseMLP(hidden=hidden, inter=4 * hidden, gated=False, bias=True,
                   names=("", "dense_h_to_4h", "dense_4h_to_h"))  # fmt: skip
    ln = norms(hidden, "input_layernorm", "post_attention_layernorm", bias=True)
    layers = [
        Layer(prefix=f"transformer.h.{i}", norms=ln, mixers=(attn,), mlps=(mlp,)) for i in range(c.int("n_layer"))
    ]
    embeddings, head = embed_head(vocab, hidden, is_tied, embed="transformer.word_embeddings",
                                  final_norm="transformer.ln_f", norm_bias=True)  # fmt: skip
    embeddings += tuple(norm("transformer.word_embeddings_layernorm", hidden, None, bias=True))
    return build(c, meta, vocab=vocab, hidden=hidden, layers=layers, is_tied=is_tied, embeddings=embeddings,
                 head=head, rotary_dim=0, max_pos_key="")  # fmt: skip
