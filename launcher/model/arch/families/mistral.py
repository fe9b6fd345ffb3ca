"""Mistral and Mixtral: Llama's layout without biases; `sliding_window` (when set) on every layer (that attention,
`mistral_attention`, is also Phi-3's, StarCoder2's and Phi-3.5-MoE's; Ministral 3 reads as Mistral); Mixtral
replaces the MLP by 8 SwiGLU experts, top-2."""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta, attention, decoder, heads
from launcher.model.arch.config import Cfg
from launcher.model.arch.layers import MLP, Attention, DenseMLP, MoE
from launcher.model.arch.model import Model

MODEL_TYPES = ("mistral", "mixtral")

DEFAULTS: dict[str, dict[str, Any]] = {
    "mistral": dict(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                    num_attention_heads=32, num_key_value_heads=8, head_dim=None, tie_word_embeddings=False,
                    sliding_window=4096, max_position_embeddings=4096 * 32),
    "mixtral": dict(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                    num_attention_heads=32, num_key_value_heads=8, head_dim=None, tie_word_embeddings=False,
                    sliding_window=None, num_local_experts=8, num_experts_per_tok=2,
                    max_position_embeddings=4096 * 32),
}  # fmt: skip


def mistral_attention(c: Cfg, hidden: int, **kw: Any) -> Attention:
    """GQA attention with sliding windows on every layer when the config sets `sliding_window`, full attention
    otherwise; `kw` for what a family adds (biases, a fused qkv)."""
    n, kv, d = heads(c, hidden=hidden)
    window = c.opt_int("sliding_window")
    kind = "sliding_attention" if window else "full_attention"
    return attention(kind, window=window, hidden=hidden, heads=n, kv_heads=kv, head_dim=d, **kw)


def read(c: Cfg, meta: Meta) -> Model:
    hidden, inter = c.int("hidden_size"), c.int("intermediate_size")
    attn = mistral_attention(c, hidden)
    mlp: MLP = DenseMLP(hidden=hidden, inter=inter)
    if meta.model_type == "mixtral":
        mlp = MoE(hidden=hidden, num_experts=c.int("num_local_experts"),
                  experts_per_token=c.int("num_experts_per_tok"), expert_intermediate=inter)  # fmt: skip
    return decoder(c, meta, parts=lambda i: (attn, mlp), rotary_dim=attn.head_dim)
