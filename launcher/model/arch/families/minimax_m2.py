"""MiniMax-M2 / M2.1: GQA attention with RMSNorm over the whole q and k projections and RoPE on `rotary_dim`
of each head; every layer a MoE of 256 experts, top 8, no shared expert, under Mixtral's checkpoint names
(`block_sparse_moe.gate`, `experts.N.w1/w3/w2`). The sigmoid router's per-expert score correction
(`block_sparse_moe.e_score_correction_bias`) is a buffer in transformers: saved, not a parameter. With
`use_mtp`, checkpoints append `num_mtp_modules` MTP layers after the decoder layers, which vLLM skips when
loading."""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta, decoder, heads
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.hy_v3 import nextn_layer
from launcher.model.arch.layers import Attention, MoE
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import Tensor

MODEL_TYPES = ("minimax_m2",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "minimax_m2": dict(vocab_size=200064, hidden_size=3072, intermediate_size=1536, num_hidden_layers=62,
                       num_attention_heads=48, num_key_value_heads=8, head_dim=128, tie_word_embeddings=False,
                       num_experts=256, num_experts_per_tok=8, rotary_dim=None, max_position_embeddings=196608),
}  # fmt: skip

# transformers' attribute_map: the public name -> the name a saved config holds.
ATTRIBUTE_MAP: dict[str, dict[str, str]] = {"minimax_m2": {"num_experts": "num_local_experts"}}


def _rotary_dim(c: Cfg, d: int) -> int:
    """Channels of each head that RoPE rotates: `rotary_dim`, else partial_rotary_factor x head_dim."""
    rope = c.raw.get("rope_parameters")
    factor = rope.get("partial_rotary_factor") if isinstance(rope, dict) else None
    if isinstance(factor, int | float):
        return int(d * factor)
    return c.opt_int("rotary_dim") or d


def read(c: Cfg, meta: Meta) -> Model:
    hidden, inter = c.int("hidden_size"), c.int("intermediate_size")
    n, kv, d = heads(c)
    num_layers = c.int("num_hidden_layers")
    attn = Attention(hidden=hidden, heads=n, kv_heads=kv, head_dim=d, qk_norm="full")
    num_experts = c.int("num_experts")
    score_bias = Tensor("e_score_correction_bias", "experts", "buffer", (num_experts,), gguf="exp_probs_b",
                        detail="router")  # fmt: skip
    moe = MoE(hidden=hidden, num_experts=num_experts, experts_per_token=c.int("num_experts_per_tok"),
              expert_intermediate=inter, name="block_sparse_moe", expert_names=("w1", "w3", "w2"),
              extra=(score_bias,))  # fmt: skip
    layer_norms = ("input_layernorm", "post_attention_layernorm")
    # MTP modules (one decoder layer each) numbered on after the last decoder layer.
    num_mtp = c.int0("num_mtp_modules", 0) if c.bool("use_mtp", False) else 0
    mtp = tuple(
        nextn_layer(f"model.layers.{num_layers + j}", hidden, attn, moe, layer_norms=layer_norms)
        for j in range(num_mtp)
    )
    return decoder(c, meta, parts=lambda i: (attn, moe), rotary_dim=_rotary_dim(c, d), layer_norms=layer_norms,
                   mtp_layers=mtp)  # fmt: skip
