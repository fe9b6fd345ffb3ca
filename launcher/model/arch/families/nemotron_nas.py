"""Nemotron-NAS (DeciLM: Llama-3.x-Nemotron Super / Ultra / 51B): a Llama whose layers were pruned one by one by a
neural-architecture search, each described by its own entry of `block_configs`.

Per layer (vLLM's nemotron_nas.py DeciLMDecoderLayer): the attention is Llama's with num_attention_heads //
`attention.n_heads_in_group` KV heads and its input_layernorm, or absent (`attention.no_op`: no weights, no norm, no
KV cache); the MLP is Llama's gated MLP of `ffn.intermediate_size`, or of ffn_mult × 2/3 × hidden rounded up to a
multiple of 256 (`ffn.ffn_mult`), with its post_attention_layernorm, or absent (`ffn.no_op`). KV bytes per token are
the attention layers' alone, each with its own KV heads.

A block `replace_with_linear` holds one hidden × hidden linear instead (`self_attn.linear_attn` / `mlp.linear_mlp`
in the checkpoint), counted as the checkpoint stores it; vLLM 0.32 reads only `no_op` and builds no such layer.
transformers has no DeciLM class (the checkpoints ship their own), so counts are checked against vLLM's.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from launcher.model.arch.common import Meta, build, embed_head, tied
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.llama import DEFAULTS as LLAMA
from launcher.model.arch.layers import MLP, Attention, DenseMLP, Layer, Mixer, Norm
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import Tensor, linear

MODEL_TYPES = ("nemotron-nas",)

# No transformers class: the remote DeciLMConfig extends LlamaConfig; `block_configs` has no default here.
DEFAULTS: dict[str, dict[str, Any]] = {"nemotron-nas": dict(LLAMA["llama"], block_configs=None)}

REPLACED_NOTE = (
    "block_configs replaces a layer's attention or MLP by one linear (replace_with_linear), which vLLM 0.32's "
    "DeciLM does not build (nemotron_nas.py reads only no_op): counted as the checkpoint stores it"
)


def ffn_width(ffn: Cfg, hidden: int) -> int:
    """The MLP width of a block: DeciLM's _ffn_mult_to_intermediate_size of `ffn_mult` (2/3 × ffn_mult × hidden,
    rounded up to a multiple of 256), else `intermediate_size`, as vLLM reads them."""
    if not ffn.has("ffn_mult"):
        return ffn.int("intermediate_size")
    width = int(2 * ffn.float("ffn_mult") * hidden / 3)
    return width + (-width % 256)


def block(c: Cfg, i: int, hidden: int, heads: int, head_dim: int, bias: tuple[bool, bool]) -> tuple[Layer, bool]:
    """Layer i from `block_configs[i]`, and whether a part of it is replaced by a linear."""
    blk = _block(c, i)
    att, ffn = blk.sub("attention"), blk.sub("ffn")
    prefix = f"model.layers.{i}"
    layer_norms: list[Norm] = []
    mixers: tuple[Mixer, ...] = ()
    mlps: tuple[MLP, ...] = ()
    extra: list[Tensor] = []
    replaced = False
    if att.bool("replace_with_linear", False) and not att.bool("no_op", False):
        extra += linear("self_attn.linear_attn", "attention", hidden, hidden, None)
        replaced = True
    elif not att.bool("no_op", False):
        group = att.int("n_heads_in_group")
        if heads % group:
            raise att.error(f"does not divide num_attention_heads {heads}", "n_heads_in_group")
        mixers = (Attention(hidden=hidden, heads=heads, kv_heads=heads // group, head_dim=head_dim, qkv_bias=bias[0],
                            o_bias=bias[1]),)  # fmt: skip
        layer_norms.append(Norm(name="input_layernorm", size=hidden, gguf="attn_norm"))
    if ffn.bool("replace_with_linear", False) and not ffn.bool("no_op", False):
        extra += linear("mlp.linear_mlp", "mlp", hidden, hidden, None)
        replaced = True
    elif not ffn.bool("no_op", False):
        mlps = (DenseMLP(hidden=hidden, inter=ffn_width(ffn, hidden), bias=c.bool("mlp_bias")),)
        layer_norms.append(Norm(name="post_attention_layernorm", size=hidden, gguf="ffn_norm"))
    return Layer(prefix=prefix, norms=tuple(layer_norms), mixers=mixers, mlps=mlps, extra=tuple(extra)), replaced


def _block(c: Cfg, i: int) -> Cfg:
    blocks = c.get("block_configs")
    if not isinstance(blocks, list):
        raise c.error("must be a list of one {attention, ffn} object per layer", "block_configs")
    if i >= len(blocks) or not isinstance(blocks[i], dict):
        raise c.error(f"has no object for layer {i}", "block_configs")
    return Cfg(blocks[i], source=c.source, path=f"{c.path}block_configs[{i}].", used=c.used)


def read(c: Cfg, meta: Meta) -> Model:
    vocab, hidden = c.int("vocab_size"), c.int("hidden_size")
    heads = c.int("num_attention_heads")
    head_dim = c.opt_int("head_dim") or hidden // heads
    # vLLM: attention_bias (or `bias`) on q, k, v and o; a `qkv_bias` key overrides q, k and v's.
    o_bias = c.bool("attention_bias") or c.bool("bias", False)
    bias = (c.bool("qkv_bias") if c.has("qkv_bias") else o_bias, o_bias)
    built = [block(c, i, hidden, heads, head_dim, bias) for i in range(c.int("num_hidden_layers"))]
    is_tied = tied(c, meta)
    embeddings, head = embed_head(vocab, hidden, is_tied)
    model = build(c, meta, vocab=vocab, hidden=hidden, layers=[layer for layer, _ in built], is_tied=is_tied,
                  embeddings=embeddings, head=head, rotary_dim=head_dim)  # fmt: skip
    if any(r for _, r in built):
        model = dataclasses.replace(model, support_note=REPLACED_NOTE)
    return model
