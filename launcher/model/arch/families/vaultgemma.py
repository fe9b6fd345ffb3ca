"""VaultGemma: Gemma 2's alternating sliding / full attention, but only two norms per layer (input and
pre-feedforward, no post-norms) and no q/k norms; the output head is tied to the embedding."""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta, decoder
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.gemma2 import alternating_attention
from launcher.model.arch.layers import DenseMLP
from launcher.model.arch.model import Model

MODEL_TYPES = ("vaultgemma",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "vaultgemma": dict(vocab_size=256000, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                       num_attention_heads=8, num_key_value_heads=4, head_dim=256, tie_word_embeddings=True,
                       attention_bias=False, sliding_window=4096, max_position_embeddings=8192),
}  # fmt: skip


def read(c: Cfg, meta: Meta) -> Model:
    hidden = c.int("hidden_size")
    kinds, attn = alternating_attention(c, hidden)
    mlp = DenseMLP(hidden=hidden, inter=c.int("intermediate_size"))
    return decoder(c, meta, parts=lambda i: (attn[kinds[i]], mlp), rotary_dim=attn[kinds[0]].head_dim,
                   layer_norms=("input_layernorm", "pre_feedforward_layernorm"))  # fmt: skip
