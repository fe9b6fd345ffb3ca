"""Apertus (Swiss AI): Llama's attention with per-head q/k RMSNorm, a plain (ungated) MLP whose xIELU
activation carries two learned scalars per layer, and norms named attention_layernorm/feedforward_layernorm."""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta, decoder
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.llama import llama_attention
from launcher.model.arch.layers import DenseMLP
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import param

MODEL_TYPES = ("apertus",)

# transformers' ApertusConfig defaults (head_dim is no field: hidden_size // heads unless the file sets it).
DEFAULTS: dict[str, dict[str, Any]] = {
    "apertus": dict(vocab_size=131072, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                    num_attention_heads=32, num_key_value_heads=None, hidden_act="xielu",
                    tie_word_embeddings=False, attention_bias=False, max_position_embeddings=65536),
}  # fmt: skip


def read(c: Cfg, meta: Meta) -> Model:
    hidden = c.int("hidden_size")
    # xIELU learns alpha_p and alpha_n (one scalar each); its beta and eps are buffers, not parameters.
    act = (
        (
            *param("act_fn.alpha_p", "mlp", (1,), None),
            *param("act_fn.alpha_n", "mlp", (1,), None),
            *param("act_fn.beta", "mlp", (), None, role="buffer"),
            *param("act_fn.eps", "mlp", (), None, role="buffer"),
        )
        if c.str("hidden_act") == "xielu"
        else ()
    )
    mlp = DenseMLP(hidden=hidden, inter=c.int("intermediate_size"), gated=False, extra=act)
    attn = llama_attention(c, hidden, qk_norm="head")
    return decoder(c, meta, parts=lambda i: (attn, mlp), rotary_dim=attn.head_dim,
                   layer_norms=("attention_layernorm", "feedforward_layernorm"))  # fmt: skip
