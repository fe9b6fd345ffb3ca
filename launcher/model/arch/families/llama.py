"""Llama (and every checkpoint vLLM serves as LlamaForCausalLM): RMSNorm, GQA attention, SwiGLU MLP. Its attention
(`llama_attention`) is the one most other families read."""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta, attention, decoder, heads
from launcher.model.arch.config import Cfg
from launcher.model.arch.layers import Attention, DenseMLP
from launcher.model.arch.model import Model

MODEL_TYPES = ("llama",)

# transformers' LlamaConfig defaults, for the fields read here.
DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=None, head_dim=None, tie_word_embeddings=False,
                  attention_bias=False, mlp_bias=False, max_position_embeddings=2048),
}  # fmt: skip


def llama_attention(c: Cfg, hidden: int, kind: str = "full_attention", window: int | None = None,
                    **kw: Any) -> Attention:  # fmt: skip
    """Llama's attention, as most families read it: query heads, KV heads and head_dim from the config (with
    their usual fallbacks) and one `attention_bias` for q, k, v and o; `kind` and `window` for a sliding layer,
    `kw` for what the family adds."""
    n, kv, d = heads(c, hidden=hidden)
    bias = c.bool("attention_bias")
    return attention(kind, window=window, c=c, hidden=hidden, heads=n, kv_heads=kv, head_dim=d, qkv_bias=bias,
                     o_bias=bias, **kw)  # fmt: skip


def read(c: Cfg, meta: Meta) -> Model:
    hidden = c.int("hidden_size")
    attn = llama_attention(c, hidden)
    mlp = DenseMLP(hidden=hidden, inter=c.int("intermediate_size"), bias=c.bool("mlp_bias"))
    return decoder(c, meta, parts=lambda i: (attn, mlp), rotary_dim=attn.head_dim)
