"""GPT-J: one LayerNorm per layer feeding attention and MLP in parallel, unbiased q/k/v/out projections, a
plain biased MLP, rotary embeddings on the first `rotary_dim` channels of each head, and an output head with a
bias (kept even when its weight is tied to the embedding)."""

from __future__ import annotations

from typing import Any

from launcher.arch.common import Meta, build, embed_head, tied
from launcher.arch.config import Cfg
from launcher.arch.families.gpt2 import head_bias
from launcher.arch.layers import Attention, DenseMLP, Layer, norms
from launcher.arch.model import Model

MODEL_TYPES = ("gptj",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "gptj": dict(vocab_size=50400, n_positions=2048, n_embd=4096, n_layer=28, n_head=16, rotary_dim=64,
                 n_inner=None, tie_word_embeddings=False),
}  # fmt: skip

ATTRIBUTE_MAP: dict[str, dict[str, str]] = {
    "gptj": {"max_position_embeddings": "n_positions", "hidden_size": "n_embd", "num_attention_heads": "n_head",
             "num_hidden_layers": "n_layer"},
}  # fmt: skip


def read(c: Cfg, meta: Meta) -> Model:
    vocab, hidden, n = c.int("vocab_size"), c.int("n_embd"), c.int("n_head")
    d = hidden // n
    if d <= 0:
        raise c.error("n_embd // n_head is 0", "n_head")
    inter = c.opt_int("n_inner") or 4 * hidden  # n_inner unset: the classic 4x MLP
    rotary = c.opt_int("rotary_dim") or d  # rotary_dim unset: rotate the whole head
    is_tied = tied(c, meta)
    attn = Attention(hidden=hidden, heads=n, kv_heads=n, head_dim=d, names=("q_proj", "k_proj", "v_proj", "out_proj"),
                     name="attn")  # fmt: skip
    mlp = DenseMLP(hidden=hidden, inter=inter, gated=False, bias=True, names=("", "fc_in", "fc_out"))
    ln = norms(hidden, "ln_1", bias=True)  # one norm feeds attention and MLP in parallel
    layers = [
        Layer(prefix=f"transformer.h.{i}", norms=ln, mixers=(attn,), mlps=(mlp,)) for i in range(c.int("n_layer"))
    ]
    embeddings, head = embed_head(vocab, hidden, is_tied, embed="transformer.wte", final_norm="transformer.ln_f",
                                  norm_bias=True)  # fmt: skip
    head += (head_bias(vocab),)
    return build(c, meta, vocab=vocab, hidden=hidden, layers=layers, is_tied=is_tied, embeddings=embeddings,
                 head=head, rotary_dim=min(rotary, d), max_pos_key="n_positions")  # fmt: skip
