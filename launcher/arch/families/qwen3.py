"""Qwen3 and Qwen3-MoE: Qwen2's layout with per-head q/k RMSNorm and no q/k/v bias; Qwen3-MoE's experts have
no shared expert."""

from __future__ import annotations

from typing import Any

from launcher.arch.common import Meta, attention, build, embed_head, heads, layer_types, tied
from launcher.arch.config import Cfg
from launcher.arch.layers import MLP, DenseMLP, Layer, MoE, norms
from launcher.arch.model import Model

MODEL_TYPES = ("qwen3", "qwen3_moe")

DEFAULTS: dict[str, dict[str, Any]] = {
    "qwen3": dict(vocab_size=151936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=32, head_dim=128, tie_word_embeddings=False,
                  attention_bias=False, use_sliding_window=False, sliding_window=4096, max_window_layers=28,
                  max_position_embeddings=32768),
    "qwen3_moe": dict(vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=24,
                      num_attention_heads=32, num_key_value_heads=4, head_dim=None, tie_word_embeddings=False,
                      attention_bias=False, use_sliding_window=False, sliding_window=4096,
                      max_window_layers=28, decoder_sparse_step=1, moe_intermediate_size=768,
                      num_experts_per_tok=8, num_experts=128, mlp_only_layers=None,
                      max_position_embeddings=32768),
}  # fmt: skip


# transformers' attribute_map: the public name -> the name a saved config holds.
ATTRIBUTE_MAP: dict[str, dict[str, str]] = {"qwen3_moe": {"num_experts": "num_local_experts"}}


def read(c: Cfg, meta: Meta) -> Model:
    vocab, hidden, inter = c.int("vocab_size"), c.int("hidden_size"), c.int("intermediate_size")
    n, kv, d = heads(c)
    num_layers = c.int("num_hidden_layers")
    window = c.opt_int("sliding_window") if c.bool("use_sliding_window") else None
    mwl = c.int0("max_window_layers")
    kinds = layer_types(c, num_layers, lambda i: "sliding_attention" if window and i >= mwl else "full_attention")
    kinds = [k if window else "full_attention" for k in kinds]  # no window: "sliding" layers see everything
    bias = c.bool("attention_bias")
    is_tied = tied(c, meta)
    moe: MoE | None = None
    sparse: set[int] = set()
    if meta.model_type == "qwen3_moe" and c.int0("num_experts") > 0:
        step = c.int("decoder_sparse_step")
        only = set(c.int_list("mlp_only_layers") or [])
        sparse = {i for i in range(num_layers) if i not in only and (i + 1) % step == 0}
        moe = MoE(hidden=hidden, num_experts=c.int("num_experts"), experts_per_token=c.int("num_experts_per_tok"),
                  expert_intermediate=c.int("moe_intermediate_size"))  # fmt: skip
    dense = DenseMLP(hidden=hidden, inter=inter, detail="dense_first" if moe else "dense")
    layers = []
    for i in range(num_layers):
        mlp: MLP = moe if moe is not None and i in sparse else dense
        layers.append(
            Layer(
                prefix=f"model.layers.{i}",
                norms=norms(hidden, "input_layernorm", "post_attention_layernorm"),
                mixers=(
                    attention(
                        kinds[i],
                        window=window,
                        c=c,
                        hidden=hidden,
                        heads=n,
                        kv_heads=kv,
                        head_dim=d,
                        qkv_bias=bias,
                        o_bias=bias,
                        qk_norm="head",
                    ),
                ),
                mlps=(mlp,),
            )
        )
    embeddings, head = embed_head(vocab, hidden, is_tied)
    return build(c, meta, vocab=vocab, hidden=hidden, layers=layers, is_tied=is_tied, embeddings=embeddings,
                 head=head, rotary_dim=d)  # fmt: skip
