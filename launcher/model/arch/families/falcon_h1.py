"""Falcon-H1: every layer runs attention and a Mamba2 mixer in parallel on the same normed input, then a SwiGLU
MLP; so every layer keeps both a KV cache and a Mamba2 state. The Mamba width is `mamba_d_ssm` (not tied to
hidden_size), its gated RMSNorm is optional (`mamba_rms_norm`), and out_proj's bias follows
`projectors_bias` while in_proj's follows `mamba_proj_bias`.
"""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta, build, embed_head, tied
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.llama import llama_attention
from launcher.model.arch.families.mamba2 import mamba2_mixer
from launcher.model.arch.layers import DenseMLP, Layer, norms
from launcher.model.arch.model import Model

MODEL_TYPES = ("falcon_h1",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "falcon_h1": dict(vocab_size=128000, tie_word_embeddings=False, hidden_size=4096, intermediate_size=14336,
                      num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                      max_position_embeddings=8192, mamba_d_ssm=1024, mamba_n_heads=128, mamba_d_head="auto",
                      mamba_n_groups=1, mamba_d_state=256, mamba_d_conv=4, mamba_expand=2, mamba_conv_bias=True,
                      mamba_proj_bias=False, mamba_rms_norm=False, projectors_bias=False, attention_bias=False,
                      mlp_bias=False),
}  # fmt: skip


def read(c: Cfg, meta: Meta) -> Model:
    vocab, hidden, inter = c.int("vocab_size"), c.int("hidden_size"), c.int("intermediate_size")
    # Mamba width: mamba_d_ssm, or mamba_expand * hidden when unset; "auto" heads split it evenly.
    d_inner = c.opt_int("mamba_d_ssm") or c.int("mamba_expand") * hidden
    m_heads = c.int("mamba_n_heads")
    m_head_dim = d_inner // m_heads if c.get("mamba_d_head") == "auto" else c.int("mamba_d_head")
    if m_heads * m_head_dim != d_inner:
        raise c.error(f"mamba_n_heads * mamba_d_head must equal the Mamba width ({d_inner})", "mamba_d_head")
    mamba = mamba2_mixer(c, hidden, heads=m_heads, head_dim=m_head_dim, d_state="mamba_d_state",
                         n_groups="mamba_n_groups", conv_kernel="mamba_d_conv", conv_bias="mamba_conv_bias",
                         proj_bias="mamba_proj_bias", out_bias="projectors_bias",
                         gated_norm=c.bool("mamba_rms_norm"), name="mamba")  # fmt: skip
    attn = llama_attention(c, hidden)
    mlp = DenseMLP(hidden=hidden, inter=inter, bias=c.bool("mlp_bias"), name="feed_forward")
    layers = [
        Layer(
            prefix=f"model.layers.{i}",
            norms=norms(hidden, "input_layernorm", "pre_ff_layernorm"),
            mixers=(attn, mamba),
            mlps=(mlp,),
        )
        for i in range(c.int("num_hidden_layers"))
    ]
    is_tied = tied(c, meta)
    embeddings, head = embed_head(vocab, hidden, is_tied, final_norm="model.final_layernorm")
    return build(c, meta, vocab=vocab, hidden=hidden, layers=layers, is_tied=is_tied, embeddings=embeddings,
                 head=head, rotary_dim=attn.head_dim)  # fmt: skip
