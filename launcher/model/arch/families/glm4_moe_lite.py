"""GLM-4.x-Lite (GLM-4.7-Flash): DeepSeek-V3's layout at a small scale, multi-head latent attention with wide
heads (192 + 64 query/key, 256 value) and a MoE of routed plus shared experts. Unlike DeepSeek, transformers
picks each layer's MLP from `mlp_layer_types`, which defaults to one dense layer then MoE whatever
`first_k_dense_replace` says; the checkpoint carries `num_nextn_predict_layers` DeepSeek-style MTP layers.
"""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.deepseek_v3 import mla, read_mla_moe, sparse_layers
from launcher.model.arch.model import Model

MODEL_TYPES = ("glm4_moe_lite",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "glm4_moe_lite": dict(vocab_size=154880, hidden_size=2048, intermediate_size=10240, moe_intermediate_size=1536,
                          num_hidden_layers=47, num_attention_heads=20, n_shared_experts=1, n_routed_experts=64,
                          kv_lora_rank=512, q_lora_rank=768, qk_rope_head_dim=64, v_head_dim=256,
                          qk_nope_head_dim=192, num_experts_per_tok=4, max_position_embeddings=202752,
                          tie_word_embeddings=False, mlp_layer_types=None, attention_bias=False),
}  # fmt: skip
ATTRIBUTE_MAP: dict[str, dict[str, str]] = {
    "glm4_moe_lite": {"num_local_experts": "n_routed_experts", "head_dim": "qk_rope_head_dim"},
}


def read(c: Cfg, meta: Meta) -> Model:
    hidden, n = c.int("hidden_size"), c.int("num_hidden_layers")
    attn = mla(c, hidden)
    # transformers: mlp_layer_types, else layer 0 dense and the rest MoE (first_k_dense_replace is not read).
    return read_mla_moe(c, meta, is_moe=sparse_layers(c, n, first_dense=1), attn=[attn] * n, mtp_attn=attn)
