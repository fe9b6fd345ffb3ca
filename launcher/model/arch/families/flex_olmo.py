"""FlexOlmo: OLMo 2's layer (norms after attention and after the MLP, none before; RMSNorm over the whole q
and k projections) with a MoE of independently trained experts in place of the MLP, no shared expert; the
router is a bare weight (`mlp.gate`)."""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta, decoder
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.llama import llama_attention
from launcher.model.arch.layers import MoE
from launcher.model.arch.model import Model

MODEL_TYPES = ("flex_olmo",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "flex_olmo": dict(vocab_size=100352, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=None, tie_word_embeddings=False,
                      attention_bias=False, num_experts=7, num_experts_per_tok=5, max_position_embeddings=4096),
}  # fmt: skip

# transformers' attribute_map: the public name -> the name a saved config holds.
ATTRIBUTE_MAP: dict[str, dict[str, str]] = {"flex_olmo": {"num_local_experts": "num_experts"}}


def read(c: Cfg, meta: Meta) -> Model:
    hidden = c.int("hidden_size")
    attn = llama_attention(c, hidden, qk_norm="full")
    moe = MoE(hidden=hidden, num_experts=c.int("num_experts"), experts_per_token=c.int("num_experts_per_tok"),
              expert_intermediate=c.int("intermediate_size"))  # fmt: skip
    return decoder(c, meta, parts=lambda i: (attn, moe), rotary_dim=attn.head_dim,
                   layer_norms=("post_attention_layernorm", "post_feedforward_layernorm"))  # fmt: skip
