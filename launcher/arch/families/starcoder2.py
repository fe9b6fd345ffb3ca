"""StarCoder2: GQA attention with biases on every projection (use_bias), a plain biased MLP (c_fc, c_proj),
biased LayerNorms, tied output; `sliding_window`, when set, applies to every layer."""

from __future__ import annotations

from typing import Any

from launcher.arch.common import Meta, attention, build, embed_head, heads, tied
from launcher.arch.config import Cfg
from launcher.arch.layers import DenseMLP, Layer, norms
from launcher.arch.model import Model

MODEL_TYPES = ("starcoder2",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "starcoder2": dict(vocab_size=49152, hidden_size=3072, intermediate_size=12288, num_hidden_layers=30,
                       num_attention_heads=24, num_key_value_heads=2, max_position_embeddings=4096,
                       sliding_window=None, use_bias=True, tie_word_embeddings=True),
}  # fmt: skip


def read(c: Cfg, meta: Meta) -> Model:
    vocab, hidden, inter = c.int("vocab_size"), c.int("hidden_size"), c.int("intermediate_size")
    n, kv, d = heads(c)
    window = c.opt_int("sliding_window")
    kind = "sliding_attention" if window else "full_attention"
    bias = c.bool("use_bias")
    is_tied = tied(c, meta)
    attn = attention(kind, window=window, hidden=hidden, heads=n, kv_heads=kv, head_dim=d, qkv_bias=bias, o_bias=bias)
    mlp = DenseMLP(hidden=hidden, inter=inter, gated=False, bias=bias, names=("", "c_fc", "c_proj"))
    ln = norms(hidden, "input_layernorm", "post_attention_layernorm", bias=True)
    layers = [
        Layer(prefix=f"model.layers.{i}", norms=ln, mixers=(attn,), mlps=(mlp,))
        for i in range(c.int("num_hidden_layers"))
    ]
    embeddings, head = embed_head(vocab, hidden, is_tied, norm_bias=True)
    return build(c, meta, vocab=vocab, hidden=hidden, layers=layers, is_tied=is_tied, embeddings=embeddings,
                 head=head, rotary_dim=d)  # fmt: skip
