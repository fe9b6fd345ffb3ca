"""Cohere2-MoE (Command A+): Cohere 2's parallel block (one input norm feeds attention and the MLP side by
side), three sliding-window layers to one global, tied embeddings; the MLP is a MoE whose router is a bare
weight (`mlp.gate.weight`), with optional shared experts and an optional prefix of dense layers
(`mlp_layer_types`, or the `first_k_dense_replace` a config may give instead)."""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta, decoder, layer_types
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.llama import llama_attention
from launcher.model.arch.layers import DenseMLP, MoE, shared_experts
from launcher.model.arch.model import Model

MODEL_TYPES = ("cohere2_moe",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "cohere2_moe": dict(vocab_size=256000, hidden_size=8192, intermediate_size=22528, num_hidden_layers=40,
                        num_attention_heads=64, num_key_value_heads=None, head_dim=128, tie_word_embeddings=True,
                        attention_bias=False, sliding_window=4096, num_experts=8, num_experts_per_tok=2,
                        num_shared_experts=0, layer_types=None, mlp_layer_types=None,
                        prefix_dense_sliding_window_pattern=1, prefix_dense_intermediate_size=None,
                        sliding_window_pattern=4, first_k_dense_replace=0, max_position_embeddings=8192),
}  # fmt: skip


def _kinds(c: Cfg, num_layers: int, k_dense: int) -> list[str]:
    """Layer kinds: `layer_types`, else the dense prefix and the MoE layers each count their own period."""

    def default(i: int) -> str:
        if i < k_dense:
            j, period = i, c.int("prefix_dense_sliding_window_pattern")
        else:
            j, period = i - k_dense, c.int("sliding_window_pattern")
        return "sliding_attention" if (j + 1) % period else "full_attention"

    return layer_types(c, num_layers, default)


def read(c: Cfg, meta: Meta) -> Model:
    hidden, inter = c.int("hidden_size"), c.int("intermediate_size")
    num_layers = c.int("num_hidden_layers")
    k_dense = c.int0("first_k_dense_replace")
    kinds = _kinds(c, num_layers, k_dense)
    mlp_types = c.list("mlp_layer_types") or ["dense" if i < k_dense else "sparse" for i in range(num_layers)]
    if len(mlp_types) < num_layers:
        raise c.error(f"has {len(mlp_types)} entries for {num_layers} layers", "mlp_layer_types")
    window = c.opt_int("sliding_window")
    n_shared = c.int0("num_shared_experts")
    moe = MoE(
        hidden=hidden, num_experts=c.int("num_experts"), experts_per_token=c.int("num_experts_per_tok"),
        expert_intermediate=inter,  # every routed expert is intermediate_size wide
        # the shared experts run as one MLP num_shared_experts times as wide
        shared=shared_experts(hidden, inter * n_shared) if n_shared else None,
    )  # fmt: skip
    dense = DenseMLP(hidden=hidden, inter=c.opt_int("prefix_dense_intermediate_size") or inter, detail="dense_first")
    attn = {k: llama_attention(c, hidden, k, window) for k in set(kinds)}
    # parallel block: one norm before attention and MLP
    return decoder(c, meta, parts=lambda i: (attn[kinds[i]], dense if mlp_types[i] == "dense" else moe),
                   rotary_dim=attn[kinds[0]].head_dim, layer_norms=("input_layernorm",))  # fmt: skip
