"""GPTBigCode (StarCoder, SantaCoder): GPT-2's layer with nn.Linear (not Conv1D) projections and multi-query
attention: one K and one V head shared by every query head, fused with Q in c_attn."""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.gpt2 import cross_attention, dims, gpt2_model
from launcher.model.arch.layers import Attention, DenseMLP
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import Tensor

MODEL_TYPES = ("gpt_bigcode",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "gpt_bigcode": dict(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12, n_inner=None,
                        multi_query=True, tie_word_embeddings=True, add_cross_attention=False),
}  # fmt: skip

ATTRIBUTE_MAP: dict[str, dict[str, str]] = {
    "gpt_bigcode": {"hidden_size": "n_embd", "max_position_embeddings": "n_positions",
                    "num_attention_heads": "n_head", "num_hidden_layers": "n_layer"},
}  # fmt: skip


def read(c: Cfg, meta: Meta) -> Model:
    hidden, n, d, inter = dims(c)
    kv = 1 if c.bool("multi_query") else n  # multi-query: a single K/V head
    cross: tuple[Tensor, ...] = ()
    if c.bool("add_cross_attention"):
        if kv == 1:
            raise c.error("cross-attention is not implemented for multi-query attention", "add_cross_attention")
        cross = cross_attention(hidden, conv1d=False)
    # c_attn: hidden for Q plus one kv-wide block each for K and V
    attn = Attention(hidden=hidden, heads=n, kv_heads=kv, head_dim=d, qkv_bias=True, o_bias=True,
                     fused_qkv="c_attn", names=("q", "k", "v", "c_proj"), name="attn")  # fmt: skip
    mlp = DenseMLP(hidden=hidden, inter=inter, gated=False, bias=True, names=("", "c_fc", "c_proj"))
    return gpt2_model(c, meta, attn, mlp, cross)
