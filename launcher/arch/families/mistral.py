"""Mistral and Mixtral: Llama's layout without biases; `sliding_window` (when set) on every layer; Mixtral
replaces the MLP by 8 SwiGLU experts, top-2."""

from __future__ import annotations

from typing import Any

from launcher.arch.common import Meta, attention, build, embed_head, heads, tied
from launcher.arch.config import Cfg
from launcher.arch.layers import MLP, DenseMLP, Layer, MoE, norms
from launcher.arch.model import Model

MODEL_TYPES = ("mistral", "mixtral")

DEFAULTS: dict[str, dict[str, Any]] = {
    "mistral": dict(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                    num_attention_heads=32, num_key_value_heads=8, head_dim=None, tie_word_embeddings=False,
                    sliding_window=4096, max_position_embeddings=4096 * 32),
    "mixtral": dict(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                    num_attention_heads=32, num_key_value_heads=8, head_dim=None, tie_word_embeddings=False,
                    sliding_window=None, num_local_experts=8, num_experts_per_tok=2,
                    max_position_embeddings=4096 * 32),
}  # fmt: skip


def read(c: Cfg, meta: Meta) -> Model:
    vocab, hidden, inter = c.int("vocab_size"), c.int("hidden_size"), c.int("intermediate_size")
    n, kv, d = heads(c)
    window = c.opt_int("sliding_window")
    kind = "sliding_attention" if window else "full_attention"
    is_tied = tied(c, meta)
    mlp: MLP
    if meta.model_type == "mixtral":
        mlp = MoE(hidden=hidden, num_experts=c.int("num_local_experts"),
                  experts_per_token=c.int("num_experts_per_tok"), expert_intermediate=inter)  # fmt: skip
    else:
        mlp = DenseMLP(hidden=hidden, inter=inter)
    layers = [
        Layer(
            prefix=f"model.layers.{i}",
            norms=norms(hidden, "input_layernorm", "post_attention_layernorm"),
            mixers=(attention(kind, window=window, hidden=hidden, heads=n, kv_heads=kv, head_dim=d),),
            mlps=(mlp,),
        )
        for i in range(c.int("num_hidden_layers"))
    ]
    embeddings, head = embed_head(vocab, hidden, is_tied)
    return build(c, meta, vocab=vocab, hidden=hidden, layers=layers, is_tied=is_tied, embeddings=embeddings,
                 head=head, rotary_dim=d)  # fmt: skip
