"""Mellum 2: GQA attention with per-head q/k RMSNorm, full or sliding-window layers by `layer_types`; each
layer's MLP dense or a MoE (`mlp_layer_types`, all MoE by default) of routed experts only, routed by a bare
weight (`mlp.gate`)."""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta, decoder, layer_types
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.hy_v3 import mlp_types
from launcher.model.arch.families.llama import llama_attention
from launcher.model.arch.layers import DenseMLP, MoE
from launcher.model.arch.model import Model

MODEL_TYPES = ("mellum",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "mellum": dict(vocab_size=98304, hidden_size=2304, intermediate_size=7168, num_hidden_layers=28,
                   num_attention_heads=32, num_key_value_heads=4, head_dim=128, tie_word_embeddings=False,
                   attention_bias=False, sliding_window=1024, moe_intermediate_size=896, num_experts_per_tok=8,
                   num_experts=64, layer_types=None, mlp_layer_types=None, max_position_embeddings=131072),
}  # fmt: skip

# transformers' attribute_map: the public name -> the name a saved config holds.
ATTRIBUTE_MAP: dict[str, dict[str, str]] = {"mellum": {"num_experts": "num_local_experts"}}


def read(c: Cfg, meta: Meta) -> Model:
    hidden = c.int("hidden_size")
    num_layers = c.int("num_hidden_layers")
    kinds = layer_types(c, num_layers)
    mlps = mlp_types(c, num_layers, ["sparse"] * num_layers)
    window = c.opt_int("sliding_window")
    attn = {k: llama_attention(c, hidden, k, window, qk_norm="head") for k in set(kinds)}
    moe = MoE(hidden=hidden, num_experts=c.int("num_experts"), experts_per_token=c.int("num_experts_per_tok"),
              expert_intermediate=c.int("moe_intermediate_size"))  # fmt: skip
    dense = DenseMLP(hidden=hidden, inter=c.int("intermediate_size"), detail="dense_first")
    return decoder(c, meta, parts=lambda i: (attn[kinds[i]], moe if mlps[i] == "sparse" else dense),
                   rotary_dim=attn[kinds[0]].head_dim)  # fmt: skip
