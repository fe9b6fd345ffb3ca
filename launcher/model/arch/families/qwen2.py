"""Qwen2 and Qwen2-MoE: q/k/v biases (no o bias); sliding-window layers from `max_window_layers` on when
`use_sliding_window`; Qwen2-MoE adds a shared expert behind a 1-wide sigmoid gate. Home of the sliding-window and
MoE-layer rules the other Qwen families share."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from launcher.model.arch.common import Meta, attention, decoder, heads, layer_types
from launcher.model.arch.config import Cfg
from launcher.model.arch.layers import MLP, DenseMLP, Mixer, MoE, shared_experts
from launcher.model.arch.model import Model

MODEL_TYPES = ("qwen2", "qwen2_moe")

DEFAULTS: dict[str, dict[str, Any]] = {
    "qwen2": dict(vocab_size=151936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=32, tie_word_embeddings=False,
                  use_sliding_window=False, sliding_window=4096, max_window_layers=28,
                  max_position_embeddings=32768),
    "qwen2_moe": dict(vocab_size=151936, hidden_size=2048, intermediate_size=5632, num_hidden_layers=24,
                      num_attention_heads=16, num_key_value_heads=16, tie_word_embeddings=False,
                      use_sliding_window=False, sliding_window=4096, max_window_layers=28,
                      decoder_sparse_step=1, moe_intermediate_size=1408, shared_expert_intermediate_size=5632,
                      num_experts_per_tok=4, num_experts=60, mlp_only_layers=None, qkv_bias=True,
                      max_position_embeddings=32768),
}  # fmt: skip


def sliding_kinds(c: Cfg, num_layers: int, slides: Callable[[int, int], bool] = lambda i, mwl: i >= mwl,
                  ) -> tuple[int | None, list[str]]:  # fmt: skip
    """The window (none unless `use_sliding_window`) and each layer's kind: `layer_types`, else sliding where
    slides(i, max_window_layers) (by default from max_window_layers on)."""
    window = c.opt_int("sliding_window") if c.bool("use_sliding_window") else None
    mwl = c.int0("max_window_layers")
    kinds = layer_types(c, num_layers, lambda i: "sliding_attention" if window and slides(i, mwl) else "full_attention")
    # Without a window (use_sliding_window false) a "sliding" layer attends to everything.
    return window, [k if window else "full_attention" for k in kinds]


def moe_layers(c: Cfg, num_layers: int) -> set[int]:
    """The layers with a MoE: every decoder_sparse_step-th ((i + 1) a multiple of it), except mlp_only_layers."""
    only = set(c.int_list("mlp_only_layers") or [])
    step = c.int("decoder_sparse_step")
    return {i for i in range(num_layers) if i not in only and (i + 1) % step == 0}


def read(c: Cfg, meta: Meta) -> Model:
    hidden, inter = c.int("hidden_size"), c.int("intermediate_size")
    n, kv, d = heads(c)
    num_layers = c.int("num_hidden_layers")
    if meta.model_type == "qwen2_moe":
        # Qwen2-MoE slides on the even layers below max_window_layers.
        window, kinds = sliding_kinds(c, num_layers, lambda i, mwl: bool((i + 1) % 2) and i < mwl)
    else:
        window, kinds = sliding_kinds(c, num_layers)
    bias = c.bool("qkv_bias", True)
    attn = {k: attention(k, window=window, c=c, hidden=hidden, heads=n, kv_heads=kv, head_dim=d, qkv_bias=bias)
            for k in set(kinds)}  # fmt: skip
    moe: MoE | None = None
    sparse: set[int] = set()
    if meta.model_type == "qwen2_moe" and c.int0("num_experts") > 0:
        sparse = moe_layers(c, num_layers)
        shared_inter = c.int0("shared_expert_intermediate_size")
        moe = MoE(
            hidden=hidden, num_experts=c.int("num_experts"), experts_per_token=c.int("num_experts_per_tok"),
            expert_intermediate=c.int("moe_intermediate_size"),
            shared=shared_experts(hidden, shared_inter, name="shared_expert") if shared_inter else None,
            shared_gate=bool(shared_inter),
        )  # fmt: skip
    dense = DenseMLP(hidden=hidden, inter=inter, detail="dense_first" if moe else "dense")

    def parts(i: int) -> tuple[Mixer, MLP]:
        return attn[kinds[i]], moe if moe is not None and i in sparse else dense

    return decoder(c, meta, parts=parts, rotary_dim=d)
