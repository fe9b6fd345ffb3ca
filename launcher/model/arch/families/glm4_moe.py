"""GLM-4.5 / 4.6 / 4.7 and GLM-4.5-Air (glm4_moe): GLM's biased q/k/v (optional per-head q/k norms), half-width
rotary, the first `first_k_dense_replace` layers dense and the rest a sigmoid-routed MoE with shared experts;
the checkpoints add `num_nextn_predict_layers` MTP layers after the last decoder layer."""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta, decoder, heads
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.glm import rotary_dim
from launcher.model.arch.families.hy_v3 import nextn_layer
from launcher.model.arch.layers import Attention, DenseMLP, MoE, shared_experts
from launcher.model.arch.model import Model

MODEL_TYPES = ("glm4_moe",)

# head_dim is no field of Glm4MoeConfig: hidden_size // heads unless the file sets it (the releases set 128).
DEFAULTS: dict[str, dict[str, Any]] = {
    "glm4_moe": dict(vocab_size=151552, hidden_size=4096, intermediate_size=10944, num_hidden_layers=46,
                     num_attention_heads=96, num_key_value_heads=8, tie_word_embeddings=False,
                     attention_bias=False, use_qk_norm=False, moe_intermediate_size=1408, num_experts_per_tok=8,
                     n_shared_experts=1, n_routed_experts=128, first_k_dense_replace=1,
                     num_nextn_predict_layers=1, max_position_embeddings=131072),
}  # fmt: skip

ATTRIBUTE_MAP: dict[str, dict[str, str]] = {
    "glm4_moe": {"num_local_experts": "n_routed_experts", "num_mtp_layers": "num_nextn_predict_layers"},
}


def read(c: Cfg, meta: Meta) -> Model:
    hidden, inter = c.int("hidden_size"), c.int("intermediate_size")
    n, kv, d = heads(c)
    num_layers = c.int("num_hidden_layers")
    k_dense = c.int0("first_k_dense_replace")
    moe_inter, n_shared = c.int("moe_intermediate_size"), c.int0("n_shared_experts")
    attn = Attention(hidden=hidden, heads=n, kv_heads=kv, head_dim=d, qkv_bias=c.bool("attention_bias"),
                     qk_norm="head" if c.bool("use_qk_norm") else "none")  # fmt: skip
    moe = MoE(
        hidden=hidden, num_experts=c.int("n_routed_experts"), experts_per_token=c.int("num_experts_per_tok"),
        expert_intermediate=moe_inter,
        # noaux_tc routing: a float32 e_score_correction_bias buffer per expert beside the router
        score_bias=True, score_bias_bytes=4,
        # The shared experts are one MLP as wide as all of them together.
        shared=shared_experts(hidden, moe_inter * n_shared) if n_shared else None,
    )  # fmt: skip
    dense = DenseMLP(hidden=hidden, inter=inter, detail="dense_first")
    # A GLM-4.5 MTP layer as the checkpoint stores it (vLLM's glm4_moe_mtp.py): a decoder layer, enorm and hnorm
    # over the token embedding and the previous hidden state, eh_proj merging the two, and shared_head.norm.
    # Unlike DeepSeek's, it has no embedding or head of its own: vLLM loads the main model's into it. vLLM builds
    # each MTP layer like a main layer of its index: MoE, since it comes after the dense ones.
    mtp = tuple(
        nextn_layer(f"model.layers.{num_layers + j}", hidden, attn, dense if num_layers + j < k_dense else moe,
                    layer_norms=("input_layernorm", "post_attention_layernorm"), final_norm="shared_head.norm")
        for j in range(c.int0("num_nextn_predict_layers"))
    )  # fmt: skip
    return decoder(c, meta, parts=lambda i: (attn, dense if i < k_dense else moe), rotary_dim=rotary_dim(c, d),
                   mtp_layers=mtp)  # fmt: skip
