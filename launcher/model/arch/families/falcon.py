"""Falcon: q/k/v fused in query_key_value, a plain MLP, LayerNorms with biases, optional biases on the linears.
Three attention layouts: multi-query (one K/V head, Falcon-7B), grouped (`new_decoder_architecture`,
num_kv_heads K/V heads, Falcon-40B/180B/11B) and plain multi-head; attention and MLP run in parallel off one
or two LayerNorms (`parallel_attn`, `num_ln_in_parallel_attn`), or in sequence with two. Rotary or ALiBi."""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta, decoder, tied
from launcher.model.arch.config import Cfg
from launcher.model.arch.layers import Attention, DenseMLP
from launcher.model.arch.model import Model

MODEL_TYPES = ("falcon",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "falcon": dict(vocab_size=65024, hidden_size=4544, num_hidden_layers=32, num_attention_heads=71,
                   num_ln_in_parallel_attn=None, num_kv_heads=None, alibi=False, new_decoder_architecture=False,
                   multi_query=True, parallel_attn=True, bias=False, max_position_embeddings=2048,
                   ffn_hidden_size=None, tie_word_embeddings=True),
}  # fmt: skip


def layer_norms(c: Cfg, new_arch: bool) -> tuple[str, ...]:
    """Sequential blocks norm before attention and before the MLP; parallel ones share one norm, or (the new
    decoder architecture's default) keep one for each branch."""
    if not c.bool("parallel_attn"):
        return ("input_layernorm", "post_attention_layernorm")
    num_ln = c.opt_int("num_ln_in_parallel_attn") or (2 if new_arch else 1)
    if num_ln == 2:
        return ("ln_attn", "ln_mlp")
    return ("input_layernorm",)


def read(c: Cfg, meta: Meta) -> Model:
    n = c.int("num_attention_heads")
    # Older configs name the width n_embed; transformers reads it in place of hidden_size.
    hidden = c.int("n_embed") if c.has("n_embed") else c.int("hidden_size")
    d = hidden // n
    if d <= 0 or d * n != hidden:
        raise c.error(f"hidden_size {hidden} is not a multiple of num_attention_heads {n}", "num_attention_heads")
    new_arch = c.bool("new_decoder_architecture")
    if new_arch:
        kv = c.opt_int("num_kv_heads") or n  # grouped K/V heads, as many as the query heads when unset
        c.heads_divide(n, kv, "num_kv_heads")
    else:
        kv = 1 if c.bool("multi_query") else n  # multi-query: one K and one V head for all query heads
    bias = c.bool("bias")
    inter = c.opt_int("ffn_hidden_size") or 4 * hidden  # unset: the classic 4x MLP
    ln = layer_norms(c, new_arch)
    is_tied = tied(c, meta) if c.get("tie_word_embeddings") is not None else True
    # query_key_value: n query heads plus kv K heads and kv V heads, head_dim each
    attn = Attention(hidden=hidden, heads=n, kv_heads=kv, head_dim=d, qkv_bias=bias, o_bias=bias,
                     fused_qkv="query_key_value", names=("q", "k", "v", "dense"), name="self_attention")  # fmt: skip
    mlp = DenseMLP(hidden=hidden, inter=inter, gated=False, bias=bias, names=("", "dense_h_to_4h", "dense_4h_to_h"))
    rotary = 0 if c.bool("alibi") else d  # ALiBi adds biases to the scores instead of rotating q and k
    return decoder(c, meta, parts=lambda i: (attn, mlp), rotary_dim=rotary, layer_norms=ln, norm_bias=True,
                   prefix="transformer.h", is_tied=is_tied, embed="transformer.word_embeddings",
                   final_norm="transformer.ln_f", hidden=hidden)  # fmt: skip
