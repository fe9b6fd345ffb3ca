"""Hy3 (Tencent HY V3): GQA attention with per-head q/k RMSNorm; the first layer dense, the rest a MoE of 192
routed experts (top 8) plus a shared MLP, routed by `mlp.router.gate` with a per-expert score correction the
checkpoint stores as `mlp.expert_bias` (a buffer in transformers: saved, not a parameter). Checkpoints
carry `num_nextn_predict_layers` MTP layers after the decoder layers, which vLLM loads for speculative decoding.

`nextn_layer` is the next-token-prediction layer layout shared with the other families that carry one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from launcher.model.arch.common import Meta, decoder
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.llama import llama_attention
from launcher.model.arch.layers import MLP, DenseMLP, Layer, Mixer, MoE, Norm, norms, shared_experts
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import Tensor, linear

MODEL_TYPES = ("hy_v3",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "hy_v3": dict(vocab_size=120832, hidden_size=4096, intermediate_size=13312, num_hidden_layers=80,
                  num_attention_heads=64, num_key_value_heads=8, head_dim=128, tie_word_embeddings=False,
                  attention_bias=False, mlp_bias=False, num_experts=192, num_experts_per_tok=8,
                  num_shared_experts=1, moe_intermediate_size=1536, mlp_layer_types=None,
                  max_position_embeddings=131072),
}  # fmt: skip

# transformers' attribute_map: the public name -> the name a saved config holds.
ATTRIBUTE_MAP: dict[str, dict[str, str]] = {"hy_v3": {"num_local_experts": "num_experts"}}


def nextn_layer(prefix: str, hidden: int, mixer: Mixer, mlp: MLP, *, layer_norms: Sequence[str],
                final_norm: str | None = "final_layernorm", extra: Sequence[Tensor] = ()) -> Layer:  # fmt: skip
    """A next-token-prediction layer: the token embedding and the previous hidden state, each normalised
    (enorm, hnorm), concatenated and projected back to hidden by eh_proj (2 x hidden in), then one decoder
    layer and, in most layouts, a final norm before the shared output head."""
    extra_norms = [Norm(name="enorm", size=hidden), Norm(name="hnorm", size=hidden)]
    if final_norm:
        extra_norms.append(Norm(name=final_norm, size=hidden))
    return Layer(
        prefix=prefix,
        norms=(*norms(hidden, *layer_norms), *extra_norms),
        mixers=(mixer,),
        mlps=(mlp,),
        extra=(*linear("eh_proj", "other", hidden, 2 * hidden, None), *extra),
    )


def mlp_types(c: Cfg, num_layers: int, default: Sequence[str]) -> list[str]:
    """`mlp_layer_types` ("dense" / "sparse" per layer), else the class's default list."""
    types = c.list("mlp_layer_types") or list(default)
    if len(types) < num_layers:
        raise c.error(f"has {len(types)} entries for {num_layers} layers", "mlp_layer_types")
    for i, t in enumerate(types[:num_layers]):
        if t not in ("dense", "sparse"):
            raise c.error(f"unknown MLP type {t!r} at index {i}; known: dense, sparse", "mlp_layer_types")
    return list(types[:num_layers])


def read(c: Cfg, meta: Meta) -> Model:
    vocab, hidden, inter = c.int("vocab_size"), c.int("hidden_size"), c.int("intermediate_size")
    num_layers = c.int("num_hidden_layers")
    kinds = mlp_types(c, num_layers, ["dense"] + ["sparse"] * (num_layers - 1))
    mlp_bias = c.bool("mlp_bias")
    moe_inter, num_experts = c.int("moe_intermediate_size"), c.int("num_experts")
    moe = MoE(
        hidden=hidden, num_experts=num_experts, experts_per_token=c.int("num_experts_per_tok"),
        expert_intermediate=moe_inter, router_name="router.gate",
        # one shared MLP num_shared_experts times as wide as a routed expert (built even when that is 0)
        shared=shared_experts(hidden, moe_inter * c.int0("num_shared_experts"), name="shared_mlp", bias=mlp_bias),
        extra=(Tensor("expert_bias", "experts", "buffer", (num_experts,), gguf="exp_probs_b", detail="router"),),
    )  # fmt: skip
    dense = DenseMLP(hidden=hidden, inter=inter, bias=mlp_bias, detail="dense_first")
    attn = llama_attention(c, hidden, qk_norm="head")
    layer_norms = ("input_layernorm", "post_attention_layernorm")
    # vLLM's HYV3MTP gives each MTP layer its own output head (loaded from lm_head) and the predictor its own
    # token embedding: both are held in memory when it runs.
    own = (*linear("embed_tokens", "other", vocab, hidden, None, role="embedding"),
           *linear("shared_head.head", "other", vocab, hidden, None, role="lm_head"))  # fmt: skip
    mtp = tuple(
        nextn_layer(f"model.layers.{num_layers + j}", hidden, attn, moe, layer_norms=layer_norms, extra=own)
        for j in range(c.int0("num_nextn_predict_layers", 0))
    )
    return decoder(c, meta, parts=lambda i: (attn, dense if kinds[i] == "dense" else moe), rotary_dim=attn.head_dim,
                   layer_norms=layer_norms, mtp_layers=mtp)  # fmt: skip
