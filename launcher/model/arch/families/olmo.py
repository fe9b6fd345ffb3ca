"""OLMo, OLMo 2 and OLMo 3: Llama's GQA attention and SwiGLU MLP. OLMo's LayerNorms have no parameters at all;
OLMo 2 and 3 put RMSNorms after attention and after the MLP (none before) and normalise q and k over their
full projection width; OLMo 3 adds sliding-window attention on three layers of every four."""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta, decoder, layer_types
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.llama import llama_attention
from launcher.model.arch.layers import DenseMLP, Norm
from launcher.model.arch.model import Model

MODEL_TYPES = ("olmo", "olmo2", "olmo3")

_BASE = dict(vocab_size=50304, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
             num_attention_heads=32, num_key_value_heads=None, max_position_embeddings=2048,
             tie_word_embeddings=False, attention_bias=False)  # fmt: skip

DEFAULTS: dict[str, dict[str, Any]] = {
    "olmo": _BASE,
    "olmo2": _BASE,
    "olmo3": {**_BASE, "sliding_window": 4096, "layer_types": None},
}


def read(c: Cfg, meta: Meta) -> Model:
    hidden = c.int("hidden_size")
    num_layers = c.int("num_hidden_layers")
    kinds = ["full_attention"] * num_layers
    window = None
    if meta.model_type == "olmo3":
        window = c.opt_int("sliding_window")
        kinds = layer_types(c, num_layers, lambda i: "sliding_attention" if (i + 1) % 4 else "full_attention")
        # Without a window a "sliding" layer attends to everything.
        kinds = [k if window else "full_attention" for k in kinds]
    post_norms = meta.model_type != "olmo"
    # OLMo's LayerNorms carry no weight or bias; OLMo 2/3 norm the outputs of attention and of the MLP.
    ln: tuple[Norm, ...] = ()
    if post_norms:
        ln = (Norm(name="post_attention_layernorm", size=hidden, gguf="attn_post_norm"),
              Norm(name="post_feedforward_layernorm", size=hidden, gguf="ffn_post_norm"))  # fmt: skip
    # OLMo 2/3 normalise q and k over their whole projection (heads × head_dim), not per head.
    attn = {k: llama_attention(c, hidden, k, window, qk_norm="full" if post_norms else "none") for k in set(kinds)}
    mlp = DenseMLP(hidden=hidden, inter=c.int("intermediate_size"))
    return decoder(c, meta, parts=lambda i: (attn[kinds[i]], mlp), rotary_dim=attn[kinds[0]].head_dim, layer_norms=ln,
                   final_norm="model.norm" if post_norms else None)  # fmt: skip
