"""HyperCLOVA X SEED: Llama's layer with Peri-LN, an extra RMSNorm on the output of attention (`post_norm1`)
and of the MLP (`post_norm2`) when `use_post_norm`; the scalar multipliers (embedding, residual, attention,
logits) hold no weights."""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta, decoder
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.llama import llama_attention
from launcher.model.arch.layers import DenseMLP
from launcher.model.arch.model import Model

MODEL_TYPES = ("hyperclovax",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "hyperclovax": dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                        num_attention_heads=32, num_key_value_heads=None, head_dim=None, tie_word_embeddings=False,
                        attention_bias=False, mlp_bias=False, use_post_norm=True, max_position_embeddings=2048),
}  # fmt: skip


def read(c: Cfg, meta: Meta) -> Model:
    hidden = c.int("hidden_size")
    names = ["input_layernorm", "post_attention_layernorm"]
    if c.bool("use_post_norm"):
        names += ["post_norm1", "post_norm2"]
    attn = llama_attention(c, hidden)
    mlp = DenseMLP(hidden=hidden, inter=c.int("intermediate_size"), bias=c.bool("mlp_bias"))
    return decoder(c, meta, parts=lambda i: (attn, mlp), rotary_dim=attn.head_dim, layer_norms=names)
