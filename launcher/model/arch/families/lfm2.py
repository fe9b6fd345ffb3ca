"""LFM2 and LFM2-MoE (Liquid): most layers are gated short convolutions (a conv state of hidden x (L_cache - 1)
per request), a few are attention with per-head q/k RMSNorms (`q_layernorm`, `k_layernorm`) and `out_proj`.
The MLP is SwiGLU named w1 (gate), w3 (up), w2 (down); LFM2 shrinks `intermediate_size` to 2/3 and rounds it
up to `block_multiple_of`. LFM2-MoE keeps `num_dense_layers` dense MLPs, then MoE layers without shared
experts. The final norm is named `embedding_norm`.
"""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta, attention, decoder, heads, layer_types, tied
from launcher.model.arch.config import Cfg
from launcher.model.arch.layers import MLP, DenseMLP, Mixer, MoE, ShortConv
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import Tensor, norm

MODEL_TYPES = ("lfm2", "lfm2_moe")

_COMMON = dict(vocab_size=65536, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
               max_position_embeddings=128000, tie_word_embeddings=True, conv_bias=False, conv_L_cache=3,
               layer_types=None)  # fmt: skip
DEFAULTS: dict[str, dict[str, Any]] = {
    "lfm2": dict(_COMMON, hidden_size=2560, intermediate_size=12288, block_multiple_of=256,
                 block_ffn_dim_multiplier=1.0, block_auto_adjust_ff_dim=True, full_attn_idxs=None),
    "lfm2_moe": dict(_COMMON, hidden_size=2048, intermediate_size=7168, moe_intermediate_size=1792,
                     num_dense_layers=2, num_experts_per_tok=4, num_experts=32, use_expert_bias=True),
}  # fmt: skip

KINDS = {"full_attention": "full_attention", "conv": "conv"}
MLP_NAMES = ("w1", "w3", "w2")  # gate, up, down


def ffn_width(c: Cfg) -> int:
    """LFM2's MLP width: 2/3 of intermediate_size (block_ff_dim in older configs), times the multiplier,
    rounded up to block_multiple_of, when block_auto_adjust_ff_dim is on (as transformers' Lfm2MLP does)."""
    width = c.int("block_ff_dim") if c.has("block_ff_dim") else c.int("intermediate_size")
    if not c.bool("block_auto_adjust_ff_dim"):
        return width
    width = int(2 * width / 3)
    if c.get("block_ffn_dim_multiplier") is not None:
        width = int(c.float("block_ffn_dim_multiplier") * width)
        step = c.int("block_multiple_of")
        width = step * ((width + step - 1) // step)
    return width


def read(c: Cfg, meta: Meta) -> Model:
    hidden = c.int("hidden_size")
    num_layers = c.int("num_hidden_layers")
    is_moe = meta.model_type == "lfm2_moe"
    if is_moe and not c.has("layer_types"):
        raise c.error("lfm2_moe needs layer_types (transformers has no default for it)", "layer_types")
    # LFM2 without layer_types: attention at full_attn_idxs (all layers when absent), short conv elsewhere.
    listed = c.int_list("full_attn_idxs") if not is_moe else []
    idxs = set(range(num_layers) if listed is None else listed)
    kinds = layer_types(c, num_layers, lambda i: "full_attention" if i in idxs else "conv", names=KINDS)
    n, kv, d = heads(c)
    qk_norms = (
        *norm("q_layernorm", d, None, part="attention", gguf="attn_q_norm", detail="attention_norms"),
        *norm("k_layernorm", d, None, part="attention", gguf="attn_k_norm", detail="attention_norms"),
    )
    attn = attention("full_attention", hidden=hidden, heads=n, kv_heads=kv, head_dim=d,
                     names=("q_proj", "k_proj", "v_proj", "out_proj"), extra=qk_norms)  # fmt: skip
    conv = ShortConv(hidden=hidden, conv_kernel=c.int("conv_L_cache"), bias=c.bool("conv_bias"))
    dense_first = 0
    moe: MoE | None = None
    if is_moe:
        dense = DenseMLP(hidden=hidden, inter=c.int("intermediate_size"), names=MLP_NAMES, name="feed_forward",
                         detail="dense_first")  # fmt: skip
        dense_first = c.int0("num_dense_layers")
        n_experts = c.int("num_experts")
        # use_expert_bias: a float32 bias per expert added to the routing scores; a buffer, not a parameter.
        bias = (Tensor("expert_bias", "experts", "buffer", (n_experts,), stored_bytes=4),)
        moe = MoE(hidden=hidden, num_experts=n_experts, experts_per_token=c.int("num_experts_per_tok"),
                  expert_intermediate=c.int("moe_intermediate_size"), expert_names=MLP_NAMES,
                  name="feed_forward", extra=bias if c.bool("use_expert_bias") else ())  # fmt: skip
    else:
        dense = DenseMLP(hidden=hidden, inter=ffn_width(c), names=MLP_NAMES, name="feed_forward")

    def parts(i: int) -> tuple[Mixer, MLP]:
        return attn if kinds[i] == "full_attention" else conv, moe if moe is not None and i >= dense_first else dense

    # Older configs name the flag tie_embedding; transformers reads it in place of tie_word_embeddings.
    is_tied = c.bool("tie_embedding") if c.has("tie_embedding") else tied(c, meta)
    return decoder(c, meta, parts=parts, rotary_dim=d, layer_norms=("operator_norm", "ffn_norm"), is_tied=is_tied,
                   final_norm="model.embedding_norm")  # fmt: skip
