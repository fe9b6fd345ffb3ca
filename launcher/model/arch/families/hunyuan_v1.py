"""Hunyuan V1 (Hunyuan-7B dense, Hunyuan-A13B MoE): Llama's layer with per-head RMSNorm on q and k named
`query_layernorm` / `key_layernorm`; the MoE variant routes with `mlp.gate.wg` (built and saved in fp32) to
experts of intermediate_size and always adds a shared MLP of the same width. `num_experts` and `moe_topk`
may be per-layer lists."""

from __future__ import annotations

import dataclasses
from typing import Any

from launcher.common.records import dataclass
from launcher.model.arch.common import Meta, decoder, heads
from launcher.model.arch.config import Cfg
from launcher.model.arch.layers import MLP, Attention, DenseMLP, MoE, shared_experts
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import Tensor, norm

MODEL_TYPES = ("hunyuan_v1_dense", "hunyuan_v1_moe")

_COMMON: dict[str, Any] = dict(
    vocab_size=290943,
    hidden_size=4096,
    intermediate_size=11008,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=None,
    head_dim=None,
    tie_word_embeddings=False,
    attention_bias=False,
    max_position_embeddings=2048,
)
DEFAULTS: dict[str, dict[str, Any]] = {
    "hunyuan_v1_dense": _COMMON,
    "hunyuan_v1_moe": {**_COMMON, "num_experts": 1, "moe_topk": 1},
}  # fmt: skip

# transformers' attribute_map: the public name -> the name a saved config holds.
ATTRIBUTE_MAP: dict[str, dict[str, str]] = {
    "hunyuan_v1_moe": {"num_experts_per_tok": "moe_topk", "num_local_experts": "num_experts"},
}


@dataclass(frozen=True, kw_only=True)
class HunyuanMoE(MoE):
    """Hunyuan's MoE: its router `gate.wg` is built in fp32 and saved so (4 bytes per weight in any format)."""

    def tensors(self, prefix: str, layer: int | None) -> list[Tensor]:
        return [dataclasses.replace(t, stored_bytes=4) if t.role == "router" else t
                for t in super().tensors(prefix, layer)]  # fmt: skip


def _per_layer(c: Cfg, key: str, num_layers: int) -> list[int]:
    """An int for every layer, or a list with one entry per layer."""
    value = c.get(key)
    if isinstance(value, list):
        values = c.int_list(key) or []
        if len(values) < num_layers:
            raise c.error(f"has {len(values)} entries for {num_layers} layers", key)
        return values[:num_layers]
    return [c.int(key)] * num_layers


def read(c: Cfg, meta: Meta) -> Model:
    hidden, inter = c.int("hidden_size"), c.int("intermediate_size")
    n, kv, d = heads(c)
    num_layers = c.int("num_hidden_layers")
    bias = c.bool("attention_bias")
    qk_norms = (
        *norm("query_layernorm", d, None, part="attention", gguf="attn_q_norm", detail="attention_norms"),
        *norm("key_layernorm", d, None, part="attention", gguf="attn_k_norm", detail="attention_norms"),
    )
    attn = Attention(hidden=hidden, heads=n, kv_heads=kv, head_dim=d, qkv_bias=bias, o_bias=bias, extra=qk_norms)
    mlps: list[MLP]
    if meta.model_type == "hunyuan_v1_moe":
        experts, topk = _per_layer(c, "num_experts", num_layers), _per_layer(c, "moe_topk", num_layers)
        shared = shared_experts(hidden, inter, name="shared_mlp")  # one always-on MLP as wide as an expert
        mlps = [
            HunyuanMoE(
                hidden=hidden,
                num_experts=e,
                experts_per_token=k,
                expert_intermediate=inter,
                router_name="gate.wg",
                shared=shared,
            )
            for e, k in zip(experts, topk, strict=True)
        ]
    else:
        mlps = [DenseMLP(hidden=hidden, inter=inter)] * num_layers
    return decoder(c, meta, parts=lambda i: (attn, mlps[i]), rotary_dim=d)
