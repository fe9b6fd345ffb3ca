"""GPT-2 (and GPT-SW3, which transformers builds as GPT-2): learned position embeddings, LayerNorms with biases,
a fused c_attn projection and a plain (ungated) MLP, every linear biased. Its linears are Conv1D modules that
store the weight as (in, out), the transpose of nn.Linear, so checkpoints (and our tensors) hold them that way.

Also home of the pieces the other GPT-style families share: Conv1D-transposed parts, learned position tables
and a biased output head.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from launcher.arch.common import Meta, build, embed_head, tied
from launcher.arch.config import Cfg
from launcher.arch.layers import Attention, DenseMLP, Layer, norms
from launcher.arch.model import Model
from launcher.arch.tensors import Part, Tensor, norm, param

MODEL_TYPES = ("gpt2", "gpt-sw3")

_GPT2 = dict(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12, n_inner=None,
             tie_word_embeddings=True, add_cross_attention=False)  # fmt: skip

# transformers' GPT2Config defaults; gpt-sw3 is GPT2Config under another model_type.
DEFAULTS: dict[str, dict[str, Any]] = {"gpt2": _GPT2, "gpt-sw3": _GPT2}

_MAP = {"hidden_size": "n_embd", "max_position_embeddings": "n_positions", "num_attention_heads": "n_head",
        "num_hidden_layers": "n_layer"}  # fmt: skip
ATTRIBUTE_MAP: dict[str, dict[str, str]] = {"gpt2": _MAP, "gpt-sw3": _MAP}


def transposed(ts: list[Tensor]) -> list[Tensor]:
    """Conv1D weights: stored (in, out), the transpose of a Linear's (out, in)."""
    return [dataclasses.replace(t, shape=t.shape[::-1]) if t.role == "linear" else t for t in ts]


def conv1d_linear(name: str, part: Part, out_f: int, in_f: int, *, gguf: str | None = None) -> list[Tensor]:
    """A biased Conv1D relative to its module (layer=None), weight stored (in, out)."""
    return [Tensor(f"{name}.weight", part, "linear", (in_f, out_f), gguf=gguf),
            Tensor(f"{name}.bias", part, "bias", (out_f,), gguf=gguf)]  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class Conv1DAttention(Attention):
    """Attention whose projections are Conv1D modules (weights stored transposed)."""

    def tensors(self, prefix: str, layer: int | None) -> list[Tensor]:
        return transposed(super().tensors(prefix, layer))


@dataclass(frozen=True, kw_only=True)
class Conv1DMLP(DenseMLP):
    """A dense MLP whose projections are Conv1D modules (weights stored transposed)."""

    def tensors(self, prefix: str, layer: int | None) -> list[Tensor]:
        return transposed(super().tensors(prefix, layer))


def learned_positions(name: str, positions: int, hidden: int) -> Tensor:
    """A learned absolute position table (positions × hidden), priced with the embeddings."""
    return param(f"{name}.weight", "embedding", (positions, hidden), None, role="position", gguf="position_embd")[0]


def head_bias(vocab: int, name: str = "lm_head") -> Tensor:
    """The output projection's bias: kept even when its weight is tied to the embedding."""
    return Tensor(f"{name}.bias", "lm_head", "bias", (vocab,), gguf="output")


def cross_attention(hidden: int) -> tuple[Tensor, ...]:
    """add_cross_attention: a second attention over encoder states (K and V fused in c_attn, Q in q_attn) and
    its LayerNorm; built by transformers, cached per encoder token rather than per generated token."""
    ts = conv1d_linear("crossattention.c_attn", "attention", 2 * hidden, hidden)  # K and V
    ts += conv1d_linear("crossattention.q_attn", "attention", hidden, hidden)
    ts += conv1d_linear("crossattention.c_proj", "attention", hidden, hidden)
    ts += norm("ln_cross_attn", hidden, None, bias=True)
    return tuple(ts)


def read(c: Cfg, meta: Meta) -> Model:
    vocab, hidden, n = c.int("vocab_size"), c.int("n_embd"), c.int("n_head")
    d = hidden // n
    if d <= 0:
        raise c.error("n_embd // n_head is 0", "n_head")
    inter = c.opt_int("n_inner") or 4 * hidden  # n_inner unset: the classic 4x MLP
    cross = cross_attention(hidden) if c.bool("add_cross_attention") else ()
    is_tied = tied(c, meta)
    # q, k and v in one c_attn (3 × hidden wide), every head its own K and V
    attn = Conv1DAttention(hidden=hidden, heads=n, kv_heads=n, head_dim=d, qkv_bias=True, o_bias=True,
                           fused_qkv="c_attn", names=("q", "k", "v", "c_proj"), name="attn")  # fmt: skip
    mlp = Conv1DMLP(hidden=hidden, inter=inter, gated=False, bias=True, names=("", "c_fc", "c_proj"))
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
