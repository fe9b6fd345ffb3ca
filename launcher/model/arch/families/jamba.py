"""Jamba: Mamba (v1) layers with one attention layer every `attn_layer_period` (at `attn_layer_offset`), and a
MoE replacing the dense MLP every `expert_layer_period` (at `expert_layer_offset`). The Mamba mixer adds RMS
norms on dt, B and C (with weights, unlike Falcon-Mamba's); no positional encoding anywhere.
"""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta, attention, decoder, heads
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.mamba import dt_rank
from launcher.model.arch.layers import MLP, DenseMLP, Mamba, Mixer, MoE
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import norm

MODEL_TYPES = ("jamba",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "jamba": dict(vocab_size=65536, tie_word_embeddings=False, hidden_size=4096, intermediate_size=14336,
                  num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, head_dim=None,
                  max_position_embeddings=262144, num_experts_per_tok=2, num_experts=16, expert_layer_period=2,
                  expert_layer_offset=1, attn_layer_period=8, attn_layer_offset=4, mamba_d_state=16,
                  mamba_d_conv=4, mamba_expand=2, mamba_dt_rank="auto", mamba_conv_bias=True,
                  mamba_proj_bias=False),
}  # fmt: skip

ATTRIBUTE_MAP: dict[str, dict[str, str]] = {"jamba": {"num_local_experts": "num_experts"}}


def read(c: Cfg, meta: Meta) -> Model:
    hidden, inter = c.int("hidden_size"), c.int("intermediate_size")
    n, kv, d = heads(c)
    a_period, a_offset = c.int("attn_layer_period"), c.int0("attn_layer_offset")
    e_period, e_offset = c.int("expert_layer_period"), c.int0("expert_layer_offset")
    if a_offset >= a_period:
        raise c.error("must be smaller than attn_layer_period", "attn_layer_offset")
    if e_offset >= e_period:
        raise c.error("must be smaller than expert_layer_period", "expert_layer_offset")
    d_state, rank = c.int("mamba_d_state"), dt_rank(c, "mamba_dt_rank", hidden)
    # dt, B and C each get an RMSNorm over their own width (dt_rank, d_state, d_state).
    mixer_norms = tuple(
        t for name, size in (("dt_layernorm", rank), ("b_layernorm", d_state), ("c_layernorm", d_state))
        for t in norm(name, size, None, part="mixer", detail="mixer_norms")
    )  # fmt: skip
    mamba = Mamba(hidden=hidden, d_inner=c.int("mamba_expand") * hidden, d_state=d_state,
                  conv_kernel=c.int("mamba_d_conv"), dt_rank=rank, conv_bias=c.bool("mamba_conv_bias"),
                  proj_bias=c.bool("mamba_proj_bias"), name="mamba", extra=mixer_norms)  # fmt: skip
    attn = attention("full_attention", hidden=hidden, heads=n, kv_heads=kv, head_dim=d)
    experts = c.int("num_experts")
    dense = DenseMLP(hidden=hidden, inter=inter, name="feed_forward")
    moe = MoE(hidden=hidden, num_experts=experts, experts_per_token=c.int("num_experts_per_tok"),
              expert_intermediate=inter, router_name="router", name="feed_forward")  # fmt: skip

    def parts(i: int) -> tuple[Mixer, MLP]:
        # A layer off the expert period, or a model with one expert, has a plain MLP and no router.
        return attn if i % a_period == a_offset else mamba, moe if experts > 1 and i % e_period == e_offset else dense

    return decoder(c, meta, parts=parts, rotary_dim=0, layer_norms=("input_layernorm", "pre_ff_layernorm"),
                   final_norm="model.final_layernorm")  # fmt: skip
