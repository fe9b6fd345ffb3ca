"""Qwen3.5 and Qwen3.5-MoE (Qwen3.6 ships the same model_types): Qwen3-Next's hybrid of Gated DeltaNet and
gated full attention, with the GDN input projections split (in_proj_qkv, in_proj_z, in_proj_b, in_proj_a);
the dense model has a SwiGLU MLP in every layer, the MoE one a sparse MoE with a gated shared expert in every
layer. The wrappers (qwen3_5, qwen3_5_moe) add Qwen3-VL's ViT without deepstack; the checkpoints carry
`mtp_num_hidden_layers` MTP layers that vLLM's qwen3_5_mtp loads."""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta, decoder, text_config, tied
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.qwen3_next import (
    LAYER_NORMS,
    gated_attention,
    gated_delta_net,
    hybrid_kinds,
    mtp_block,
    mtp_tensors,
    rotary_dim,
    sparse_moe,
)
from launcher.model.arch.families.qwen3_vl import VISION_DEFAULTS, vision, wrapper_tied
from launcher.model.arch.layers import MLP, DenseMLP, norms
from launcher.model.arch.model import Model
from launcher.model.arch.towers import Tower

MODEL_TYPES = ("qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text")

_HYBRID = dict(
    num_attention_heads=16,
    head_dim=256,
    tie_word_embeddings=False,
    attention_bias=False,
    linear_conv_kernel_dim=4,
    linear_key_head_dim=128,
    linear_value_head_dim=128,
    linear_num_key_heads=16,
    linear_num_value_heads=32,
    layer_types=None,
    max_position_embeddings=32768,
)
DEFAULTS: dict[str, dict[str, Any]] = {
    "qwen3_5": dict(tie_word_embeddings=False),
    "qwen3_5_moe": dict(tie_word_embeddings=False),
    "qwen3_5_text": dict(_HYBRID, vocab_size=248320, hidden_size=4096, intermediate_size=12288, num_hidden_layers=32,
                         num_key_value_heads=4),
    "qwen3_5_moe_text": dict(_HYBRID, vocab_size=248320, hidden_size=2048, num_hidden_layers=40,
                             num_key_value_heads=2, moe_intermediate_size=512, shared_expert_intermediate_size=512,
                             num_experts_per_tok=8, num_experts=256),
}  # fmt: skip

_WRAPPED = {"qwen3_5": "qwen3_5_text", "qwen3_5_moe": "qwen3_5_moe_text"}


def read(c: Cfg, meta: Meta) -> Model:
    towers: tuple[Tower, ...] = ()
    base = "model"
    if meta.model_type in _WRAPPED:
        top = c
        text_type = _WRAPPED[meta.model_type]
        c, meta = text_config(top, meta, text_type, DEFAULTS[text_type])
        towers = (vision(top, VISION_DEFAULTS, deepstack=False),)
        is_tied = wrapper_tied(top, c)
        base = "model.language_model"
    else:
        is_tied = tied(c, meta)
    hidden = c.int("hidden_size")
    num_layers = c.int("num_hidden_layers")
    kinds = hybrid_kinds(c, num_layers)
    attn = gated_attention(c, hidden)
    gdn = gated_delta_net(c, hidden, split_proj=True)
    mlp: MLP
    if meta.model_type == "qwen3_5_moe_text":
        mlp = sparse_moe(c, hidden)
    else:
        mlp = DenseMLP(hidden=hidden, inter=c.int("intermediate_size"))
    mtp = mtp_block(c, attn, lambda j: mlp, mtp_tensors(hidden), layer_norms=norms(hidden, *LAYER_NORMS))
    return decoder(c, meta, parts=lambda i: (gdn if kinds[i] == "linear_attention" else attn, mlp),
                   rotary_dim=rotary_dim(c, attn.head_dim), layer_norms=LAYER_NORMS, prefix=f"{base}.layers",
                   is_tied=is_tied, embed=f"{base}.embed_tokens", final_norm=f"{base}.norm", towers=towers,
                   mtp_layers=mtp)  # fmt: skip
