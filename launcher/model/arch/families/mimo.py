"""MiMo (Xiaomi MiMo-7B): a Qwen2 decoder (q/k/v biases) plus `num_nextn_predict_layers` next-token-prediction
layers under `model.mtp_layers.N`, which vLLM's MiMoForCausalLM skips and its MiMoMTP draft model loads.

An MTP layer normalises the token embedding (token_layernorm) and the previous hidden state (hidden_layernorm),
projects their concatenation back to hidden (input_proj, 2 × hidden in, no bias), runs one Qwen2 decoder layer and
a final_layernorm; the embedding and the output head are the main model's. transformers has no MiMo class (the
model's own remote code subclasses Qwen2's config), so the counts here are checked against vLLM's classes.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from launcher.model.arch.common import Meta, heads
from launcher.model.arch.config import Cfg
from launcher.model.arch.families import qwen2
from launcher.model.arch.layers import Attention, DenseMLP, Layer, Norm, norms
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import linear

MODEL_TYPES = ("mimo",)

# No transformers class: Qwen2's defaults (the remote MiMoConfig extends Qwen2Config), and no MTP layer unless
# the config names them.
DEFAULTS: dict[str, dict[str, Any]] = {"mimo": dict(qwen2.DEFAULTS["qwen2"], num_nextn_predict_layers=0)}


def mtp_layer(j: int, hidden: int, attn: Attention, mlp: DenseMLP) -> Layer:
    """MTP layer j as the checkpoint stores it (vLLM's MiMoMultiTokenPredictorLayer)."""
    return Layer(
        prefix=f"model.mtp_layers.{j}",
        norms=(
            *norms(hidden, "input_layernorm", "post_attention_layernorm"),
            *(Norm(name=n, size=hidden) for n in ("token_layernorm", "hidden_layernorm", "final_layernorm")),
        ),
        mixers=(attn,),
        mlps=(mlp,),
        extra=tuple(linear("input_proj", "other", hidden, 2 * hidden, None)),
    )


def read(c: Cfg, meta: Meta) -> Model:
    model = qwen2.read(c, meta)
    hidden = c.int("hidden_size")
    n, kv, d = heads(c)
    # vLLM's MTP block is a Qwen2DecoderLayer: full attention with q/k/v biases, the dense MLP.
    attn = Attention(hidden=hidden, heads=n, kv_heads=kv, head_dim=d, qkv_bias=c.bool("qkv_bias", True))
    mlp = DenseMLP(hidden=hidden, inter=c.int("intermediate_size"))
    mtp = tuple(mtp_layer(j, hidden, attn, mlp) for j in range(c.int0("num_nextn_predict_layers")))
    return dataclasses.replace(model, mtp_layers=mtp, defaults_used=tuple(sorted(c.used)))
