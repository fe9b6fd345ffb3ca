"""Gemma 2: four norms per layer (around attention and around the MLP), sliding-window attention on every
other layer (`alternating_attention`, shared with Gemma 3, VaultGemma and gpt-oss), tied embeddings."""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta, decoder, layer_types
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.llama import llama_attention
from launcher.model.arch.layers import Attention, DenseMLP
from launcher.model.arch.model import Model

MODEL_TYPES = ("gemma2",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma2": dict(vocab_size=256000, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                   num_attention_heads=8, num_key_value_heads=4, head_dim=256, tie_word_embeddings=True,
                   attention_bias=False, sliding_window=4096, max_position_embeddings=8192),
}  # fmt: skip

GEMMA_NORMS = ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm")


def alternating_attention(c: Cfg, hidden: int, every: int = 2, **kw: Any) -> tuple[list[str], dict[str, Attention]]:
    """Each layer's kind (`layer_types`, else every `every`-th layer global and the others sliding: by default
    even layers 0, 2, ... slide, odd ones attend globally) and Llama's attention for each kind over
    `sliding_window`; `kw` for what the family adds."""
    kinds = layer_types(c, c.int("num_hidden_layers"),
                        lambda i: "sliding_attention" if (i + 1) % every else "full_attention")  # fmt: skip
    window = c.opt_int("sliding_window")
    return kinds, {k: llama_attention(c, hidden, k, window, **kw) for k in set(kinds)}


def read(c: Cfg, meta: Meta) -> Model:
    hidden = c.int("hidden_size")
    kinds, attn = alternating_attention(c, hidden)
    mlp = DenseMLP(hidden=hidden, inter=c.int("intermediate_size"))
    return decoder(c, meta, parts=lambda i: (attn[kinds[i]], mlp), rotary_dim=attn[kinds[0]].head_dim,
                   layer_norms=GEMMA_NORMS)  # fmt: skip
