"""IBM Granite (granite) and Granite SWA (granite_swa): Llama's layer with one `attention_bias` for all four
projections and `mlp_bias`; the *_swa models add a learned sink logit per head on every layer and make three
of every four layers sliding-window (layer i is global when i % 4 == 0, unless `layer_types` says otherwise).
The embedding/residual/logit multipliers scale activations only."""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta, decoder, layer_types
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.llama import llama_attention
from launcher.model.arch.layers import Attention, DenseMLP
from launcher.model.arch.model import Model

MODEL_TYPES = ("granite", "granite_swa")

DEFAULTS: dict[str, dict[str, Any]] = {
    "granite": dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                    num_attention_heads=32, num_key_value_heads=None, tie_word_embeddings=False,
                    attention_bias=False, mlp_bias=False, max_position_embeddings=2048),
    "granite_swa": dict(vocab_size=100352, hidden_size=2560, intermediate_size=8192, num_hidden_layers=24,
                        num_attention_heads=20, num_key_value_heads=4, tie_word_embeddings=True,
                        attention_bias=False, mlp_bias=False, sliding_window=128, layer_types=None,
                        max_position_embeddings=8192),
}  # fmt: skip


def granite_attention(c: Cfg, meta: Meta, num_layers: int, hidden: int) -> list[Attention]:
    """Each layer's attention: biased (or not) q/k/v/o; the SWA models' sinks and sliding layers."""
    if not meta.model_type.endswith("_swa"):
        return [llama_attention(c, hidden)] * num_layers
    window = c.opt_int("sliding_window")
    kinds = layer_types(c, num_layers, lambda i: "full_attention" if i % 4 == 0 else "sliding_attention")
    kinds = [k if window else "full_attention" for k in kinds]  # without a window every layer is full
    attn = {k: llama_attention(c, hidden, k, window, sinks=True) for k in set(kinds)}
    return [attn[k] for k in kinds]


def read(c: Cfg, meta: Meta) -> Model:
    hidden = c.int("hidden_size")
    attns = granite_attention(c, meta, c.int("num_hidden_layers"), hidden)
    mlp = DenseMLP(hidden=hidden, inter=c.int("intermediate_size"), bias=c.bool("mlp_bias"))
    return decoder(c, meta, parts=lambda i: (attns[i], mlp), rotary_dim=attns[0].head_dim)
