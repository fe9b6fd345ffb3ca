"""Qwen3 and Qwen3-MoE: Qwen2's layout with per-head q/k RMSNorm and no q/k/v bias; Qwen3-MoE's experts have
no shared expert (`qwen3_mlps`, also Qwen3-VL's)."""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta, decoder
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.llama import llama_attention
from launcher.model.arch.families.qwen2 import moe_layers, sliding_kinds
from launcher.model.arch.layers import MLP, DenseMLP, MoE
from launcher.model.arch.model import Model

MODEL_TYPES = ("qwen3", "qwen3_moe")

DEFAULTS: dict[str, dict[str, Any]] = {
    "qwen3": dict(vocab_size=151936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=32, head_dim=128, tie_word_embeddings=False,
                  attention_bias=False, use_sliding_window=False, sliding_window=4096, max_window_layers=28,
                  max_position_embeddings=32768),
    "qwen3_moe": dict(vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=24,
                      num_attention_heads=32, num_key_value_heads=4, head_dim=None, tie_word_embeddings=False,
                      attention_bias=False, use_sliding_window=False, sliding_window=4096,
                      max_window_layers=28, decoder_sparse_step=1, moe_intermediate_size=768,
                      num_experts_per_tok=8, num_experts=128, mlp_only_layers=None,
                      max_position_embeddings=32768),
}  # fmt: skip


# transformers' attribute_map: the public name -> the name a saved config holds.
ATTRIBUTE_MAP: dict[str, dict[str, str]] = {"qwen3_moe": {"num_experts": "num_local_experts"}}


def qwen3_mlps(c: Cfg, hidden: int, num_layers: int, *, moe: bool) -> list[MLP]:
    """Each layer's MLP: with experts (the MoE models), a MoE of routed experts only (no shared expert) on the
    decoder_sparse_step layers and the dense MLP elsewhere; else the dense MLP everywhere."""
    sparse: set[int] = set()
    experts: MoE | None = None
    if moe and c.int0("num_experts") > 0:
        sparse = moe_layers(c, num_layers)
        experts = MoE(hidden=hidden, num_experts=c.int("num_experts"), experts_per_token=c.int("num_experts_per_tok"),
                      expert_intermediate=c.int("moe_intermediate_size"))  # fmt: skip
    dense = DenseMLP(hidden=hidden, inter=c.int("intermediate_size"), detail="dense_first" if experts else "dense")
    return [experts if experts is not None and i in sparse else dense for i in range(num_layers)]


def read(c: Cfg, meta: Meta) -> Model:
    hidden = c.int("hidden_size")
    num_layers = c.int("num_hidden_layers")
    window, kinds = sliding_kinds(c, num_layers)
    attn = {k: llama_attention(c, hidden, k, window, qk_norm="head") for k in set(kinds)}
    mlps = qwen3_mlps(c, hidden, num_layers, moe=meta.model_type == "qwen3_moe")
    return decoder(c, meta, parts=lambda i: (attn[kinds[i]], mlps[i]), rotary_dim=attn[kinds[0]].head_dim)
