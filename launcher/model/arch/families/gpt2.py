"""GPT-2 (and GPT-SW3, which transformers builds as GPT-2): learned position embeddings, LayerNorms with biases,
a fused c_attn projection and a plain (ungated) MLP, every linear biased. Its linears are Conv1D modules that
store the weight as (in, out), the transpose of nn.Linear, so checkpoints (and our tensors) hold them that way.

Also home of the pieces the other GPT-style families share: Conv1D-transposed parts, learned position tables,
a biased output head, GPT-2's field names and its frame of layers, embeddings and head.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from launcher.common.records import dataclass
from launcher.model.arch.common import Meta, decoder
from launcher.model.arch.config import Cfg
from launcher.model.arch.layers import MLP, Attention, DenseMLP
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import Tensor, linear, norm, param

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


def cross_attention(hidden: int, *, conv1d: bool = True) -> tuple[Tensor, ...]:
    """add_cross_attention: a second attention over encoder states (K and V fused in c_attn, Q in q_attn) and
    its LayerNorm; built by transformers, cached per encoder token rather than per generated token. GPT-2's
    projections are Conv1D (weights stored transposed), GPTBigCode's (`conv1d=False`) Linear."""
    ts = linear("crossattention.c_attn", "attention", 2 * hidden, hidden, None, bias=True)  # K and V
    ts += linear("crossattention.q_attn", "attention", hidden, hidden, None, bias=True)
    ts += linear("crossattention.c_proj", "attention", hidden, hidden, None, bias=True)
    ts += norm("ln_cross_attn", hidden, None, bias=True)
    return tuple(transposed(ts) if conv1d else ts)


def dims(c: Cfg) -> tuple[int, int, int, int]:
    """(hidden, heads, head_dim, MLP width) under GPT-2's field names."""
    hidden, n = c.int("n_embd"), c.int("n_head")
    d = hidden // n
    if d <= 0:
        raise c.error("n_embd // n_head is 0", "n_head")
    inter = c.opt_int("n_inner") or 4 * hidden  # n_inner unset: the classic 4x MLP
    return hidden, n, d, inter


def gpt2_model(c: Cfg, meta: Meta, attn: Attention, mlp: MLP, cross: tuple[Tensor, ...]) -> Model:
    """GPT-2's frame around a layer's attention and MLP: transformer.h layers with biased ln_1 and ln_2 (and
    the cross-attention tensors, if any), the wte embedding beside the learned wpe positions, and ln_f."""
    hidden = attn.hidden
    wpe = learned_positions("transformer.wpe", c.int("n_positions"), hidden)
    return decoder(c, meta, parts=lambda i: (attn, mlp), rotary_dim=0, hidden=hidden, num_layers=c.int("n_layer"),
                   layer_norms=("ln_1", "ln_2"), norm_bias=True, prefix="transformer.h", embed="transformer.wte",
                   final_norm="transformer.ln_f", layer_extra=cross, embed_extra=(wpe,),
                   max_pos_key="n_positions")  # fmt: skip


def read(c: Cfg, meta: Meta) -> Model:
    hidden, n, d, inter = dims(c)
    cross = cross_attention(hidden) if c.bool("add_cross_attention") else ()
    # q, k and v in one c_attn (3 × hidden wide), every head its own K and V
    attn = Conv1DAttention(hidden=hidden, heads=n, kv_heads=n, head_dim=d, qkv_bias=True, o_bias=True,
                           fused_qkv="c_attn", names=("q", "k", "v", "c_proj"), name="attn")  # fmt: skip
    mlp = Conv1DMLP(hidden=hidden, inter=inter, gated=False, bias=True, names=("", "c_fc", "c_proj"))
    return gpt2_model(c, meta, attn, mlp, cross)
