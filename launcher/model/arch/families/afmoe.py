"""AFMoE (Arcee Trinity): attention with per-head q/k RMSNorm and a sigmoid output gate (`gate_proj`, one value
per query channel), three sliding-window layers to one global, four norms per layer (around attention and
around the MLP); the first `num_dense_layers` layers are dense, the rest a MoE of routed experts plus always-on
shared experts, with a per-expert routing bias (`expert_bias`) the checkpoint stores."""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta, attention, decoder, heads, layer_types
from launcher.model.arch.config import Cfg
from launcher.model.arch.layers import DenseMLP, MoE, shared_experts
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import linear, param

MODEL_TYPES = ("afmoe",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "afmoe": dict(vocab_size=200192, hidden_size=2048, intermediate_size=6144, moe_intermediate_size=1408,
                  num_hidden_layers=32, num_dense_layers=1, num_attention_heads=16, num_key_value_heads=None,
                  head_dim=128, tie_word_embeddings=False, attention_bias=False, num_experts=64,
                  num_experts_per_tok=6, num_shared_experts=2, global_attn_every_n_layers=4, sliding_window=1024,
                  layer_types=None, max_position_embeddings=16384),
}  # fmt: skip

AFMOE_NORMS = ("input_layernorm", "post_attention_layernorm", "pre_mlp_layernorm", "post_mlp_layernorm")


def read(c: Cfg, meta: Meta) -> Model:
    hidden = c.int("hidden_size")
    n, kv, d = heads(c)
    num_layers = c.int("num_hidden_layers")
    every = c.int("global_attn_every_n_layers")
    kinds = layer_types(c, num_layers, lambda i: "sliding_attention" if (i + 1) % every else "full_attention")
    window = c.opt_int("sliding_window")
    bias = c.bool("attention_bias")
    dense_layers = c.int0("num_dense_layers")
    num_experts, moe_inter = c.int("num_experts"), c.int("moe_intermediate_size")
    # The output gate: one sigmoid per query channel (heads x head_dim), from the layer input.
    gate = tuple(linear("gate_proj", "attention", n * d, hidden, None, detail="output_gate"))
    moe = MoE(
        hidden=hidden, num_experts=num_experts, experts_per_token=c.int("num_experts_per_tok"),
        expert_intermediate=moe_inter, router_name="router.gate",
        # the shared experts run as one MLP num_shared_experts times as wide as a routed expert
        shared=shared_experts(hidden, moe_inter * c.int0("num_shared_experts")),
        extra=tuple(param("expert_bias", "experts", (num_experts,), None, role="bias", detail="router")),
    )  # fmt: skip
    dense = DenseMLP(hidden=hidden, inter=c.int("intermediate_size"), detail="dense_first")
    attn = {k: attention(k, window=window, c=c, hidden=hidden, heads=n, kv_heads=kv, head_dim=d, qkv_bias=bias,
                         o_bias=bias, qk_norm="head", extra=gate) for k in set(kinds)}  # fmt: skip
    return decoder(c, meta, parts=lambda i: (attn[kinds[i]], dense if i < dense_layers else moe), rotary_dim=d,
                   layer_norms=AFMOE_NORMS)  # fmt: skip
