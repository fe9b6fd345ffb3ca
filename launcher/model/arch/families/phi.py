"""Phi (Phi-1, Phi-1.5, Phi-2): one biased LayerNorm per layer feeding attention and MLP in parallel, biased
q/k/v/dense projections, optional per-head q/k LayerNorms, a plain biased MLP (fc1, fc2), partial rotary
(half of each head by default) and an output head with a bias."""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta, decoder, heads
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.gpt2 import head_bias
from launcher.model.arch.families.gpt_neox import partial_rotary
from launcher.model.arch.layers import Attention, DenseMLP
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import Tensor, norm

MODEL_TYPES = ("phi",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "phi": dict(vocab_size=51200, hidden_size=2048, intermediate_size=8192, num_hidden_layers=24,
                num_attention_heads=32, num_key_value_heads=None, max_position_embeddings=2048,
                tie_word_embeddings=False, qk_layernorm=False, partial_rotary_factor=0.5),
}  # fmt: skip


def read(c: Cfg, meta: Meta) -> Model:
    hidden = c.int("hidden_size")
    n, kv, d = heads(c)
    qk_norm: tuple[Tensor, ...] = ()
    if c.bool("qk_layernorm"):
        # LayerNorms (weight and bias) over hidden // heads, shared by all heads, even with an explicit head_dim
        w = hidden // n
        qk_norm = (
            *norm("q_layernorm", w, None, part="attention", bias=True, detail="attention_norms"),
            *norm("k_layernorm", w, None, part="attention", bias=True, detail="attention_norms"),
        )
    attn = Attention(hidden=hidden, heads=n, kv_heads=kv, head_dim=d, qkv_bias=True, o_bias=True,
                     names=("q_proj", "k_proj", "v_proj", "dense"), extra=qk_norm)  # fmt: skip
    mlp = DenseMLP(hidden=hidden, inter=c.int("intermediate_size"), gated=False, bias=True, names=("", "fc1", "fc2"))
    # one norm feeds attention and MLP in parallel
    return decoder(c, meta, parts=lambda i: (attn, mlp), rotary_dim=partial_rotary(c, d, "partial_rotary_factor"),
                   layer_norms=("input_layernorm",), norm_bias=True, final_norm="model.final_layernorm",
                   head_extra=(head_bias(c.int("vocab_size")),))  # fmt: skip
