"""GPT-J: one LayerNorm per layer feeding attention and MLP in parallel, unbiased q/k/v/out projections, a
plain biased MLP, rotary embeddings on the first `rotary_dim` channels of each head, and an output head with a
bias (kept even when its weight is tied to the embedding)."""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta, decoder
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.gpt2 import dims, head_bias
from launcher.model.arch.layers import Attention, DenseMLP
from launcher.model.arch.model import Model

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
    hidden, n, d, inter = dims(c)
    rotary = c.opt_int("rotary_dim") or d  # rotary_dim unset: rotate the whole head
    attn = Attention(hidden=hidden, heads=n, kv_heads=n, head_dim=d, names=("q_proj", "k_proj", "v_proj", "out_proj"),
                     name="attn")  # fmt: skip
    mlp = DenseMLP(hidden=hidden, inter=inter, gated=False, bias=True, names=("", "fc_in", "fc_out"))
    # one norm (ln_1) feeds attention and MLP in parallel
    return decoder(c, meta, parts=lambda i: (attn, mlp), rotary_dim=min(rotary, d), hidden=hidden,
                   num_layers=c.int("n_layer"), layer_norms=("ln_1",), norm_bias=True, prefix="transformer.h",
                   embed="transformer.wte", final_norm="transformer.ln_f",
                   head_extra=(head_bias(c.int("vocab_size")),), max_pos_key="n_positions")  # fmt: skip
