"""Phi-3 / Phi-4: Llama's layer with q, k and v fused into one qkv_proj and gate and up into gate_up_proj;
`sliding_window`, when set, applies to every layer."""

from __future__ import annotations

from typing import Any

from launcher.arch.common import Meta, attention, build, embed_head, heads, tied
from launcher.arch.config import Cfg
from launcher.arch.layers import DenseMLP, Layer, norms
from launcher.arch.model import Model

MODEL_TYPES = ("phi3",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "phi3": dict(vocab_size=32064, hidden_size=3072, intermediate_size=8192, num_hidden_layers=32,
                 num_attention_heads=32, num_key_value_heads=None, tie_word_embeddings=False,
                 sliding_window=None, max_position_embeddings=4096),
}  # fmt: skip


def read(c: Cfg, meta: Meta) -> Model:
    vocab, hidden, inter = c.int("vocab_size"), c.int("hidden_size"), c.int("intermediate_size")
    n, kv, d = heads(c)
    window = c.opt_int("sliding_window")
    kind = "sliding_attention" if window else "full_attention"
    is_tied = tied(c, meta)
    layers = [
        Layer(
            prefix=f"model.layers.{i}",
            norms=norms(hidden, "input_layernorm", "post_attention_layernorm"),
            mixers=(
                attention(kind, window=window, hidden=hidden, heads=n, kv_heads=kv, head_dim=d, fused_qkv="qkv_proj"),
            ),
            mlps=(DenseMLP(hidden=hidden, inter=inter, fused_gate_up="gate_up_proj"),),
        )
        for i in range(c.int("num_hidden_layers"))
    ]
    embeddings, head = embed_head(vocab, hidden, is_tied)
    return build(c, meta, vocab=vocab, hidden=hidden, layers=layers, is_tied=is_tied, embeddings=embeddings,
                 head=head, rotary_dim=d)  # fmt: skip
