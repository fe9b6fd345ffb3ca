"""Laguna (poolside): attention whose query-head count varies by layer (`num_attention_heads_per_layer`,
KV heads fixed), with per-head q/k RMSNorm and a sigmoid output gate `g_proj` (one value per head, or per
channel when `gating` is not per-head); full or sliding-window layers by `layer_types`. The first layer's MLP
is dense, the rest a MoE of routed experts plus one shared expert, with a learned per-expert score correction
(`mlp.experts.e_score_correction_bias` in checkpoints)."""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta, attention, decoder, layer_types
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.hy_v3 import mlp_types
from launcher.model.arch.layers import Attention, DenseMLP, MoE, shared_experts
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import linear, param

MODEL_TYPES = ("laguna",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "laguna": dict(vocab_size=100352, hidden_size=2048, intermediate_size=8192, num_hidden_layers=40,
                   num_attention_heads=48, num_key_value_heads=8, head_dim=128, tie_word_embeddings=False,
                   attention_bias=False, sliding_window=512, moe_intermediate_size=512,
                   shared_expert_intermediate_size=512, num_experts_per_tok=8, num_experts=256, layer_types=None,
                   gating=True, num_attention_heads_per_layer=None, mlp_layer_types=None,
                   max_position_embeddings=131072),
}  # fmt: skip


def _rotary_dim(c: Cfg, d: int, kinds: list[str]) -> int:
    """vLLM keeps one cos/sin cache per RoPE setting in use: full layers rotate half of each head by default,
    sliding layers all of it."""
    rope = c.raw.get("rope_parameters")
    factors = {"full_attention": 0.5, "sliding_attention": 1.0}
    if isinstance(rope, dict):
        for kind in factors:
            sub = rope.get(kind)
            if isinstance(sub, dict) and isinstance(sub.get("partial_rotary_factor"), int | float):
                factors[kind] = float(sub["partial_rotary_factor"])
    return sum(int(d * factors[k]) for k in sorted(set(kinds)) if k in factors)


def read(c: Cfg, meta: Meta) -> Model:
    hidden = c.int("hidden_size")
    num_layers = c.int("num_hidden_layers")
    kv = c.int("num_key_value_heads")
    d = c.opt_int("head_dim") or hidden // c.int("num_attention_heads")
    per_layer = c.int_list("num_attention_heads_per_layer") or [c.int("num_attention_heads")] * num_layers
    if len(per_layer) < num_layers:
        raise c.error(f"has {len(per_layer)} entries for {num_layers} layers", "num_attention_heads_per_layer")
    for n in per_layer:
        c.heads_divide(n, kv)
    kinds = layer_types(c, num_layers)
    mlps = mlp_types(c, num_layers, ["dense"] + ["sparse"] * (num_layers - 1))
    window = c.opt_int("sliding_window")
    bias = c.bool("attention_bias")
    gating = c.get("gating")
    per_head = gating is True or gating == "per-head"
    num_experts = c.int("num_experts")
    moe = MoE(
        hidden=hidden,
        num_experts=num_experts,
        experts_per_token=c.int("num_experts_per_tok"),
        expert_intermediate=c.int("moe_intermediate_size"),
        shared=shared_experts(hidden, c.int0("shared_expert_intermediate_size"), name="shared_expert"),
        extra=tuple(
            param(
                "experts.e_score_correction_bias",
                "experts",
                (num_experts,),
                None,
                role="bias",
                detail="router",
                gguf="exp_probs_b",
            )
        ),
    )
    dense = DenseMLP(hidden=hidden, inter=c.int("intermediate_size"), detail="dense_first")

    def attn(kind: str, n: int) -> Attention:
        # The output gate: one sigmoid per head, or per channel (heads x head_dim).
        gate = tuple(linear("g_proj", "attention", n if per_head else n * d, hidden, None, detail="output_gate"))
        return attention(kind, window=window, c=c, hidden=hidden, heads=n, kv_heads=kv, head_dim=d, qkv_bias=bias,
                         o_bias=bias, qk_norm="head", extra=gate)  # fmt: skip

    attns = {(k, n): attn(k, n) for k, n in set(zip(kinds, per_layer[:num_layers], strict=True))}
    return decoder(c, meta, parts=lambda i: (attns[kinds[i], per_layer[i]], moe if mlps[i] == "sparse" else dense),
                   rotary_dim=_rotary_dim(c, d, kinds))  # fmt: skip
