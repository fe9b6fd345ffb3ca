"""A.X K1 (SK Telecom): DeepSeek-V3's architecture with one addition, an RMSNorm on the output of every MoE
block (`post_mlp_layernorm`, stored at the decoder-layer level in checkpoints; transformers renames it into
the MoE at load time and back on save). Dense layers have none in the checkpoint or in transformers (vLLM
allocates one there anyway, unused)."""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.deepseek_v3 import mla, read_mla_moe
from launcher.model.arch.layers import Norm
from launcher.model.arch.model import Model

MODEL_TYPES = ("axk1",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "axk1": dict(vocab_size=163840, hidden_size=7168, intermediate_size=18432, moe_intermediate_size=2048,
                 num_hidden_layers=61, num_attention_heads=64, n_shared_experts=1, n_routed_experts=192,
                 kv_lora_rank=512, q_lora_rank=1536, qk_rope_head_dim=64, v_head_dim=128, qk_nope_head_dim=128,
                 num_experts_per_tok=8, first_k_dense_replace=1, max_position_embeddings=32768,
                 tie_word_embeddings=False, attention_bias=False),
}  # fmt: skip
ATTRIBUTE_MAP: dict[str, dict[str, str]] = {"axk1": {"num_local_experts": "n_routed_experts"}}


def read(c: Cfg, meta: Meta) -> Model:
    hidden, n = c.int("hidden_size"), c.int("num_hidden_layers")
    # transformers always builds the low-rank query (q_a/q_b): q_lora_rank is required.
    c.int("q_lora_rank")
    attn = mla(c, hidden)
    first = c.int0("first_k_dense_replace")
    return read_mla_moe(c, meta, is_moe=[i >= first for i in range(n)], attn=[attn] * n, mtp_attn=attn,
                        moe_norms=(Norm(name="post_mlp_layernorm", size=hidden, gguf="ffn_post_norm"),))  # fmt: skip
