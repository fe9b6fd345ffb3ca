"""CWM (Code World Model): Llama's layer with `sliding_window` attention on three of every four layers
(layer i is global when i % 4 == 0, unless the config lists `layer_types`)."""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta, attention, decoder, heads, layer_types
from launcher.model.arch.config import Cfg
from launcher.model.arch.layers import DenseMLP
from launcher.model.arch.model import Model

MODEL_TYPES = ("cwm",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "cwm": dict(vocab_size=128256, hidden_size=6144, intermediate_size=21504, num_hidden_layers=64,
                num_attention_heads=48, num_key_value_heads=8, head_dim=128, tie_word_embeddings=False,
                mlp_bias=False, sliding_window=8192, layer_types=None, max_position_embeddings=131072),
}  # fmt: skip


def read(c: Cfg, meta: Meta) -> Model:
    hidden = c.int("hidden_size")
    n, kv, d = heads(c)
    window = c.int("sliding_window")  # CwmConfig requires one
    kinds = layer_types(c, c.int("num_hidden_layers"),
                        lambda i: "full_attention" if i % 4 == 0 else "sliding_attention")  # fmt: skip
    attn = {k: attention(k, window=window, c=c, hidden=hidden, heads=n, kv_heads=kv, head_dim=d) for k in set(kinds)}
    mlp = DenseMLP(hidden=hidden, inter=c.int("intermediate_size"), bias=c.bool("mlp_bias"))
    return decoder(c, meta, parts=lambda i: (attn[kinds[i]], mlp), rotary_dim=d)
