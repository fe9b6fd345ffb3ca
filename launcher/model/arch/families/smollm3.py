"""SmolLM3: Llama's layer with tied embeddings by default; every fourth layer skips RoPE (`no_rope_layers`),
which changes no weights. Sliding-window layers exist only with `use_sliding_window`, on the no-RoPE layers
unless `layer_types` says otherwise."""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta, decoder, layer_types
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.llama import llama_attention
from launcher.model.arch.layers import DenseMLP
from launcher.model.arch.model import Model

MODEL_TYPES = ("smollm3",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "smollm3": dict(vocab_size=128256, hidden_size=2048, intermediate_size=11008, num_hidden_layers=36,
                    num_attention_heads=16, num_key_value_heads=4, tie_word_embeddings=True, attention_bias=False,
                    mlp_bias=False, use_sliding_window=False, sliding_window=None, no_rope_layers=None,
                    no_rope_layer_interval=4, layer_types=None, max_position_embeddings=32768),
}  # fmt: skip


def read(c: Cfg, meta: Meta) -> Model:
    hidden = c.int("hidden_size")
    num_layers = c.int("num_hidden_layers")
    window = c.opt_int("sliding_window") if c.bool("use_sliding_window") else None
    interval = c.int("no_rope_layer_interval")
    # no_rope_layers[i] is 1 where layer i uses RoPE; by default every interval-th layer does not.
    rope = c.int_list("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(num_layers)]
    if len(rope) < num_layers:
        raise c.error(f"has {len(rope)} entries for {num_layers} layers", "no_rope_layers")
    kinds = layer_types(c, num_layers, lambda i: "sliding_attention" if window and not rope[i] else "full_attention")
    kinds = [k if window else "full_attention" for k in kinds]  # without use_sliding_window every layer is full
    attn = {k: llama_attention(c, hidden, k, window) for k in set(kinds)}
    mlp = DenseMLP(hidden=hidden, inter=c.int("intermediate_size"), bias=c.bool("mlp_bias"))
    return decoder(c, meta, parts=lambda i: (attn[kinds[i]], mlp), rotary_dim=attn[kinds[0]].head_dim)
