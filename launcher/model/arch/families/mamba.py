"""Mamba (v1) and Falcon-Mamba: every layer one selective-SSM mixer under `backbone.`, no attention and no MLP.

Falcon-Mamba differs only in RMS norms on B, C and dt inside the mixer, and those carry no weights (transformers
keeps non-persistent ones-buffers), so both read the same. Per request a layer keeps a conv state of
d_inner x (kernel - 1) and an SSM state of d_inner x d_state; vLLM serves both as MambaForCausalLM.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from launcher.model.arch.common import Meta, build, embed_head, tied
from launcher.model.arch.config import Cfg
from launcher.model.arch.layers import MLP, Layer, Mamba, Mixer, Norm
from launcher.model.arch.model import Model

MODEL_TYPES = ("mamba", "falcon_mamba")

_MAMBA = dict(vocab_size=50280, hidden_size=768, state_size=16, num_hidden_layers=32, expand=2, conv_kernel=4,
              use_bias=False, use_conv_bias=True, time_step_rank="auto", tie_word_embeddings=True)  # fmt: skip
DEFAULTS: dict[str, dict[str, Any]] = {"mamba": _MAMBA, "falcon_mamba": _MAMBA}


def dt_rank(c: Cfg, key: str, hidden: int) -> int:
    """The low rank of the dt projection: "auto" is ceil(hidden / 16), as transformers computes it."""
    if c.get(key) == "auto":
        return math.ceil(hidden / 16)
    return c.int(key)


def backbone(c: Cfg, meta: Meta, blocks: Sequence[tuple[tuple[Mixer, ...], tuple[MLP, ...]]], *,
             is_tied: bool | None = None, **kw: Any) -> Model:  # fmt: skip
    """Mamba's frame (shared with Mamba2 and Nemotron-H): a layer per block (its mixers and MLPs) under
    `backbone.layers`, each with one norm, the embedding `backbone.embeddings` and the final norm `norm_f`; no
    rotary embedding."""
    vocab, hidden = c.int("vocab_size"), c.int("hidden_size")
    tie = tied(c, meta) if is_tied is None else is_tied
    layers = [
        Layer(prefix=f"backbone.layers.{i}", norms=(Norm(name="norm", size=hidden, gguf="attn_norm"),), mixers=mixers,
              mlps=mlps)
        for i, (mixers, mlps) in enumerate(blocks)
    ]  # fmt: skip
    embeddings, head = embed_head(vocab, hidden, tie, embed="backbone.embeddings", final_norm="backbone.norm_f")
    return build(c, meta, vocab=vocab, hidden=hidden, layers=layers, is_tied=tie, embeddings=embeddings, head=head,
                 rotary_dim=0, **kw)  # fmt: skip


def read(c: Cfg, meta: Meta) -> Model:
    hidden = c.int("hidden_size")
    # intermediate_size is derived (expand * hidden) unless the saved config states it.
    d_inner = c.opt_int("intermediate_size") or c.int("expand") * hidden
    mixer = Mamba(hidden=hidden, d_inner=d_inner, d_state=c.int("state_size"), conv_kernel=c.int("conv_kernel"),
                  dt_rank=dt_rank(c, "time_step_rank", hidden), conv_bias=c.bool("use_conv_bias"),
                  proj_bias=c.bool("use_bias"))  # fmt: skip
    return backbone(c, meta, [((mixer,), ())] * c.int("num_hidden_layers"))
