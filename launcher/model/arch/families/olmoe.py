"""OLMoE: Llama's layer with RMSNorm on the whole q and k projections (q over hidden_size, k over the KV
width) and a MoE of 64 small experts, top 8, no shared expert; the router is a bare weight (`mlp.gate`)."""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta, decoder, heads
from launcher.model.arch.config import Cfg
from launcher.model.arch.layers import Attention, MoE
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import norm

MODEL_TYPES = ("olmoe",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "olmoe": dict(vocab_size=50304, hidden_size=2048, intermediate_size=2048, num_hidden_layers=16,
                  num_attention_heads=16, num_key_value_heads=None, tie_word_embeddings=False, attention_bias=False,
                  num_experts=64, num_experts_per_tok=8, max_position_embeddings=4096),
}  # fmt: skip

# transformers' attribute_map: the public name -> the name a saved config holds.
ATTRIBUTE_MAP: dict[str, dict[str, str]] = {"olmoe": {"num_local_experts": "num_experts"}}


def read(c: Cfg, meta: Meta) -> Model:
    hidden = c.int("hidden_size")
    n, kv, d = heads(c)
    bias = c.bool("attention_bias")
    # q_norm spans hidden_size and k_norm the KV heads at hidden // heads each, whatever head_dim says.
    qk_norms = (
        *norm("q_norm", hidden, None, part="attention", gguf="attn_q_norm", detail="attention_norms"),
        *norm("k_norm", hidden // n * kv, None, part="attention", gguf="attn_k_norm", detail="attention_norms"),
    )
    attn = Attention(hidden=hidden, heads=n, kv_heads=kv, head_dim=d, qkv_bias=bias, o_bias=bias, extra=qk_norms)
    moe = MoE(hidden=hidden, num_experts=c.int("num_experts"), experts_per_token=c.int("num_experts_per_tok"),
              expert_intermediate=c.int("intermediate_size"))  # fmt: skip
    return decoder(c, meta, parts=lambda i: (attn, moe), rotary_dim=d)
