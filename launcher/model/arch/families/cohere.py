"""Command R (cohere) and Command R7B / A (cohere2): one weight-only LayerNorm per layer feeding attention and
the SwiGLU MLP in parallel, tied output. Command R+ adds q/k LayerNorms with one weight per head and channel
(use_qk_norm); cohere2 has three sliding-window layers to every full one."""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta, attention, decoder, heads, layer_types
from launcher.model.arch.config import Cfg
from launcher.model.arch.layers import DenseMLP
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import Tensor, norm

MODEL_TYPES = ("cohere", "cohere2")

_BASE = dict(vocab_size=256000, hidden_size=8192, intermediate_size=22528, num_hidden_layers=40,
             num_attention_heads=64, num_key_value_heads=None, max_position_embeddings=8192,
             tie_word_embeddings=True, attention_bias=False)  # fmt: skip

DEFAULTS: dict[str, dict[str, Any]] = {
    "cohere": {**_BASE, "use_qk_norm": False},
    "cohere2": {**_BASE, "sliding_window": 4096, "layer_types": None},
}

SLIDING_WINDOW_PATTERN = 4  # cohere2 without layer_types: every 4th layer full, the others sliding


def read(c: Cfg, meta: Meta) -> Model:
    hidden = c.int("hidden_size")
    v2 = meta.model_type == "cohere2"
    n, kv, d = heads(c)
    num_layers = c.int("num_hidden_layers")
    kinds = ["full_attention"] * num_layers
    window = None
    qk: tuple[Tensor, ...] = ()
    if v2:
        window = c.opt_int("sliding_window")
        pattern = c.int("sliding_window_pattern", SLIDING_WINDOW_PATTERN)
        kinds = layer_types(c, num_layers, lambda i: "sliding_attention" if (i + 1) % pattern else "full_attention")
        # Without a window a "sliding" layer attends to everything.
        kinds = [k if window else "full_attention" for k in kinds]
    elif c.bool("use_qk_norm"):
        # One LayerNorm weight per head and channel (heads × head_dim), for q and for k; no bias.
        qk = (
            *norm("q_norm", (n, d), None, part="attention", gguf="attn_q_norm", detail="attention_norms"),
            *norm("k_norm", (kv, d), None, part="attention", gguf="attn_k_norm", detail="attention_norms"),
        )
    bias = c.bool("attention_bias")
    attn = {k: attention(k, window=window, c=c, hidden=hidden, heads=n, kv_heads=kv, head_dim=d, qkv_bias=bias,
                         o_bias=bias, extra=qk) for k in set(kinds)}  # fmt: skip
    mlp = DenseMLP(hidden=hidden, inter=c.int("intermediate_size"))
    # one norm feeds attention and MLP in parallel
    return decoder(c, meta, parts=lambda i: (attn[kinds[i]], mlp), rotary_dim=d, layer_norms=("input_layernorm",))
