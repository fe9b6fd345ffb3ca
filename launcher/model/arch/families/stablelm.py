"""StableLM (StableLM-3B-4E1T, StableLM 2): Llama's GQA attention and SwiGLU MLP with biased LayerNorms,
optional q/k/v biases, optional per-head q/k LayerNorms (one weight-only LayerNorm for each head, StableLM 2
12B), an optional parallel residual (one norm per layer) and rotary on a quarter of each head by default."""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta, decoder
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.gpt_neox import partial_rotary
from launcher.model.arch.layers import Attention, DenseMLP
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import Tensor

MODEL_TYPES = ("stablelm",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "stablelm": dict(vocab_size=50304, intermediate_size=6912, hidden_size=2560, num_hidden_layers=32,
                     num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=4096,
                     tie_word_embeddings=False, use_qkv_bias=False, qk_layernorm=False, use_parallel_residual=False,
                     partial_rotary_factor=0.25),
}  # fmt: skip


def per_head_norms(name: str, heads: int, head_dim: int) -> list[Tensor]:
    """StableLmLayerNormPerHead: a weight-only LayerNorm over head_dim for each head (norms.0 … norms.H-1).

    Held in a ModuleList, so transformers' parameter names file them under attention, not norms: they get the
    `state` role (a bare 1-D parameter, never quantized) to be counted there."""
    return [
        Tensor(f"{name}.norms.{h}.weight", "attention", "state", (head_dim,), detail="attention_norms")
        for h in range(heads)
    ]


def read(c: Cfg, meta: Meta) -> Model:
    hidden = c.int("hidden_size")
    n = c.int("num_attention_heads")
    kv = c.int("num_key_value_heads")
    c.heads_divide(n, kv)
    d = hidden // n  # StableLM ignores any head_dim field
    if d <= 0:
        raise c.error("hidden_size // num_attention_heads is 0", "num_attention_heads")
    qk: tuple[Tensor, ...] = ()
    if c.bool("qk_layernorm"):
        qk = (*per_head_norms("q_layernorm", n, d), *per_head_norms("k_layernorm", kv, d))
    # A parallel residual feeds attention and MLP from the one input norm.
    names = ("input_layernorm",) if c.bool("use_parallel_residual") else ("input_layernorm", "post_attention_layernorm")
    qkv_bias = c.bool("use_qkv_bias")
    attn = Attention(hidden=hidden, heads=n, kv_heads=kv, head_dim=d, qkv_bias=qkv_bias, extra=qk)
    mlp = DenseMLP(hidden=hidden, inter=c.int("intermediate_size"))
    return decoder(c, meta, parts=lambda i: (attn, mlp), rotary_dim=partial_rotary(c, d, "partial_rotary_factor"),
                   layer_norms=names, norm_bias=True)  # fmt: skip
