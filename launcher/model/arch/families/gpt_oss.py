"""gpt-oss: attention with biases and a learned sink logit per head, alternating sliding (128) and full
layers, a MoE with biased experts and router (MXFP4 experts in the released checkpoints)."""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta, decoder
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.gemma2 import alternating_attention
from launcher.model.arch.layers import MoE
from launcher.model.arch.model import Model

MODEL_TYPES = ("gpt_oss",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "gpt_oss": dict(vocab_size=201088, hidden_size=2880, intermediate_size=2880, num_hidden_layers=36,
                    num_attention_heads=64, num_key_value_heads=8, head_dim=64, tie_word_embeddings=False,
                    attention_bias=True, sliding_window=128, num_local_experts=128, num_experts_per_tok=4,
                    max_position_embeddings=131072),
}  # fmt: skip


def read(c: Cfg, meta: Meta) -> Model:
    hidden = c.int("hidden_size")
    kinds, attn = alternating_attention(c, hidden, sinks=True)
    moe = MoE(hidden=hidden, num_experts=c.int("num_local_experts"), experts_per_token=c.int("num_experts_per_tok"),
              expert_intermediate=c.int("intermediate_size"), router_name="router", router_bias=True,
              expert_bias=True)  # fmt: skip
    return decoder(c, meta, parts=lambda i: (attn[kinds[i]], moe), rotary_dim=attn[kinds[0]].head_dim)
