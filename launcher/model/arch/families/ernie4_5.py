"""ERNIE 4.5 (Baidu): Llama's layer where one `use_bias` switches on every projection's bias; the MoE model
(ernie4_5_moe) makes layers start..end (every `moe_layer_interval`-th) a MoE of routed plus shared experts
whose router keeps a learned score-correction bias, and its checkpoints may carry a dense MTP block."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from launcher.model.arch.common import Meta, decoder, heads
from launcher.model.arch.config import Cfg
from launcher.model.arch.layers import Attention, DenseMLP, Layer, MoE, Norm, shared_experts
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import Tensor, linear

MODEL_TYPES = ("ernie4_5", "ernie4_5_moe")

DEFAULTS: dict[str, dict[str, Any]] = {
    "ernie4_5": dict(vocab_size=103424, hidden_size=1024, intermediate_size=3072, num_hidden_layers=18,
                     num_attention_heads=16, num_key_value_heads=2, head_dim=128, tie_word_embeddings=True,
                     use_bias=False, max_position_embeddings=131072),
    "ernie4_5_moe": dict(vocab_size=103424, hidden_size=2560, intermediate_size=12288, num_hidden_layers=28,
                         num_attention_heads=20, num_key_value_heads=4, tie_word_embeddings=True, use_bias=False,
                         moe_intermediate_size=1536, moe_k=6, moe_num_experts=64, moe_num_shared_experts=2,
                         moe_layer_start_index=1, moe_layer_end_index=-1, moe_layer_interval=1,
                         max_position_embeddings=131072),
}  # fmt: skip

ATTRIBUTE_MAP: dict[str, dict[str, str]] = {
    "ernie4_5_moe": {"num_experts": "moe_num_experts", "num_experts_per_tok": "moe_k"},
}


def _moe_layers(c: Cfg, num_layers: int) -> set[int]:
    """Layers transformers builds as MoE: from start to end (-1: the last layer), every interval-th."""
    start, interval = c.int0("moe_layer_start_index"), c.int("moe_layer_interval")
    end = c.get("moe_layer_end_index")
    if isinstance(end, bool) or not isinstance(end, int) or end < -1:
        raise c.error(f"must be a layer index or -1, got {end!r}", "moe_layer_end_index")
    end = num_layers - 1 if end == -1 else end
    return {i for i in range(num_layers) if (i + 1) % interval == 0 and start <= i <= end}


def mtp_layer(j: int, hidden: int, attn: Attention, mlp: DenseMLP) -> Layer:
    """ERNIE's next-token-prediction block as the checkpoint stores it (vLLM's ernie_mtp.py): a dense decoder
    layer under model.mtp_block.j, two norms over the embedding and the hidden state, and mtp_linear_proj
    that merges them (2 × hidden in: the two are concatenated). It reuses the main embedding and head."""
    block = f"mtp_block.{j}"
    return Layer(
        prefix="model",
        norms=(Norm(name=f"{block}.input_layernorm", size=hidden),
               Norm(name=f"{block}.post_attention_layernorm", size=hidden),
               Norm(name=f"mtp_emb_norm.{j}", size=hidden), Norm(name=f"mtp_hidden_norm.{j}", size=hidden)),
        mixers=(replace(attn, name=f"{block}.self_attn"),),
        mlps=(replace(mlp, name=f"{block}.mlp", detail="mtp"),),
        extra=tuple(linear(f"mtp_linear_proj.{j}", "other", hidden, 2 * hidden, None)),
    )  # fmt: skip


def read(c: Cfg, meta: Meta) -> Model:
    vocab, hidden, inter = c.int("vocab_size"), c.int("hidden_size"), c.int("intermediate_size")
    n, kv, d = heads(c)
    num_layers = c.int("num_hidden_layers")
    bias = c.bool("use_bias")
    is_moe = meta.model_type == "ernie4_5_moe"
    attn = Attention(hidden=hidden, heads=n, kv_heads=kv, head_dim=d, qkv_bias=bias, o_bias=bias)
    dense = DenseMLP(hidden=hidden, inter=inter, bias=bias, detail="dense_first" if is_moe else "dense")
    moe: MoE | None = None
    sparse: set[int] = set()
    if is_moe:
        e, moe_inter = c.int("moe_num_experts"), c.int("moe_intermediate_size")
        n_shared = c.int0("moe_num_shared_experts")
        sparse = _moe_layers(c, num_layers)
        moe = MoE(
            hidden=hidden, num_experts=e, experts_per_token=c.int("moe_k"), expert_intermediate=moe_inter,
            # The shared experts are one MLP as wide as all of them together.
            shared=shared_experts(hidden, moe_inter * n_shared, bias=bias) if n_shared else None,
            # The router is kept (and saved) in float32, as is one correction bias per expert (a 1 × E parameter)
            # added to the routing scores.
            router_bytes=4,
            extra=(Tensor("moe_statics.e_score_correction_bias", "experts", "bias", (1, e), detail="router",
                          stored_bytes=4),),
        )  # fmt: skip
    mtp = tuple(mtp_layer(j, hidden, attn, dense) for j in range(c.int0("num_nextn_predict_layers", 0)))
    # The MoE model's lm_head takes `use_bias`; the bias stays even when the weight is tied.
    head_bias = (Tensor("lm_head.bias", "lm_head", "bias", (vocab,)),) if is_moe and bias else ()
    return decoder(c, meta, parts=lambda i: (attn, moe if moe is not None and i in sparse else dense), rotary_dim=d,
                   head_extra=head_bias, mtp_layers=mtp)  # fmt: skip
