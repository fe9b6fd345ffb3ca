"""GPTBigCode (StarCoder, SantaCoder): GPT-2's layer with nn.Linear (not Conv1D) projections and multi-query
attention: one K and one V head shared by every query head, fused with Q in c_attn."""

from __future__ import annotations

from typing import Any

from launcher.arch.common import Meta, build, embed_head, tied
from launcher.arch.config import Cfg
from launcher.arch.families.gpt2 import learned_positions
from launcher.arch.layers import Attention, DenseMLP, Layer, norms
from launcher.arch.model import Model
from launcher.arch.tensors import Tensor, linear, norm

MODEL_TYPES = ("gpt_bigcode",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "gpt_bigcode": dict(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12, n_inner=None,
                        multi_query=True, tie_word_embeddings=True, add_cross_attention=False),
}  # fmt: skip

ATTRIBUTE_MAP: dict[str, dict[str, str]] = {
    "gpt_bigcode": {"hidden_size": "n_embd", "max_position_embeddings": "n_positions",
                    "num_attention_heads": "n_head", "num_hidden_layers": "n_layer"},
}  # fmt: skip


def cross_attention(hidden: int) -> tuple[Tensor, ...]:
    """add_cross_attention (only without multi_query): K and V fused in c_attn, Q in q_attn, and a LayerNorm."""
    ts = linear("crossattention.c_attn", "attention", 2 * hidden, hidden, None, bias=True)  # K and V
    ts += linear("crossattention.q_attn", "attention", hidden, hidden, None, bias=True)
    ts += linear("crossattention.c_proj", "attention", hidden, hidden, None, bias=True)
    ts += norm("ln_cross_attn", hidden, None, bias=True)
    return tuple(ts)


def read(c: Cfg, meta: Meta) -> Model:
    vocab, hidden, n = c.int("vocab_size"), c.int("n_embd"), c.int("n_head")
    d = hidden // n
    if d <= 0:
        raise c.error("n_embd // n_head is 0", "n_head")
    kv = 1 if c.bool("multi_query") else n  # multi-query: a single K/V head
    inter = c.opt_int("n_inner") or 4 * hidden  # n_inner unset: the classic 4x MLP
    cross: tuple[Tensor, ...] = ()
    if c.bool("add_cross_attention"):
        if kv == 1:
            raise c.error("cross-attention is not implemented for multi-query attention", "add_cross_attention")
        cross = cross_attention(hidden)
    is_tied = tied(c, meta)
    # c_attn: hidden for Q plus one kv-wide block each for K and V
    attn = Attention(hidden=hidden, heads=n, kv_heads=kv, head_dim=d, qkv_bias=True, o_bias=True,
                     fused_qkv="c_attn", names=("q", "k", "v", "c_proj"), name="attn")  # fmt: skip
    mlp = DenseMLP(hidden=hidden, inter=inter, gated=False, bias=True, names=("", "c_fc", "c_proj"))
    ln = norms(hidden, "ln_1", "ln_2", bias=True)
    layers = [
        Layer(prefix=f"transformer.h.{i}", norms=ln, mixers=(attn,), mlps=(mlp,), extra=cross)
        for i in range(c.int("n_layer"))
    ]
    embeddings, head = embed_head(vocab, hidden, is_tied, embed="transformer.wte", final_norm="transformer.ln_f",
                                  norm_bias=True)  # fmt: skip
    embeddings += (learned_positions("transformer.wpe", c.int("n_positions"), hidden),)
    return build(c, meta, vocab=vocab, hidden=hidden, layers=layers, is_tied=is_tied, embeddings=embeddings,
                 head=head, rotary_dim=0, max_pos_key="n_positions")  # fmt: skip
