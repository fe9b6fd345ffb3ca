"""Llama (and every checkpoint vLLM serves as LlamaForCausalLM): RMSNorm, GQA attention, SwiGLU MLP."""

from __future__ import annotations

from typing import Any

from launcher.arch.common import Meta, build, embed_head, heads, tied
from launcher.arch.config import Cfg
from launcher.arch.layers import Attention, DenseMLP, Layer, norms
from launcher.arch.model import Model

MODEL_TYPES = ("llama",)

# transformers' LlamaConfig defaults, for the fields read here.
DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=None, head_dim=None, tie_word_embeddings=False,
                  attention_bias=False, mlp_bias=False, max_position_embeddings=2048),
}  # fmt: skip


def read(c: Cfg, meta: Meta) -> Model:
    vocab, hidden, inter = c.int("vocab_size"), c.int("hidden_size"), c.int("intermediate_size")
    n, kv, d = heads(c)
    bias, mlp_bias = c.bool("attention_bias"), c.bool("mlp_bias")
    is_tied = tied(c, meta)
    layers = [
        Layer(
            prefix=f"model.layers.{i}",
            norms=norms(hidden, "input_layernorm", "post_attention_layernorm"),
            mixers=(Attention(hidden=hidden, heads=n, kv_heads=kv, head_dim=d, qkv_bias=bias, o_bias=bias),),
            mlps=(DenseMLP(hidden=hidden, inter=inter, bias=mlp_bias),),
        )
        for i in range(c.int("num_hidden_layers"))
    ]
    embeddings, head = embed_head(vocab, hidden, is_tied)
    return build(c, meta, vocab=vocab, hidden=hidden, layers=layers, is_tied=is_tied, embeddings=embeddings,
                 head=head, rotary_dim=d)  # fmt: skip
