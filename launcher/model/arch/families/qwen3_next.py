"""Qwen3-Next: a hybrid of Gated DeltaNet linear attention (three layers of four) and gated full attention
(q_proj twice as wide: a sigmoid output gate per channel; per-head q/k RMSNorm), every layer a MoE of many
small routed experts plus one shared expert behind a 1-wide sigmoid gate. The checkpoints carry an MTP
block (`mtp.*`: fc over [embedding; hidden], a full-attention MoE layer, its own norms) that transformers
does not build and vLLM loads for speculative decoding.

The builders here (layer kinds, GDN, gated attention, MoE, MTP block) are shared with Qwen3.5 and Qwen4-Exp.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from launcher.common.records import dataclass
from launcher.model.arch.common import Meta, decoder, heads, layer_types
from launcher.model.arch.config import Cfg
from launcher.model.arch.layers import (
    MLP,
    Attention,
    DenseMLP,
    GatedDeltaNet,
    Layer,
    Mixer,
    MoE,
    Norm,
    norms,
    shared_experts,
)
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import Tensor, linear, norm

MODEL_TYPES = ("qwen3_next",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "qwen3_next": dict(vocab_size=151936, hidden_size=2048, intermediate_size=5632, num_hidden_layers=48,
                       num_attention_heads=16, num_key_value_heads=2, head_dim=256, tie_word_embeddings=False,
                       attention_bias=False, linear_conv_kernel_dim=4, linear_key_head_dim=128,
                       linear_value_head_dim=128, linear_num_key_heads=16, linear_num_value_heads=32,
                       decoder_sparse_step=1, moe_intermediate_size=512, shared_expert_intermediate_size=512,
                       num_experts_per_tok=10, num_experts=512, mlp_only_layers=None, layer_types=None,
                       max_position_embeddings=32768),
}  # fmt: skip

LAYER_NORMS = ("input_layernorm", "post_attention_layernorm")

# transformers' layer_types names for the hybrid layers.
HYBRID_NAMES = {"linear_attention": "linear_attention", "full_attention": "full_attention"}


def hybrid_kinds(c: Cfg, n: int, *, full: str = "full_attention", names: dict[str, str] | None = None) -> list[str]:
    """`layer_types`, else every `full_attention_interval`-th layer (4; a constructor argument that
    transformers pops) is full attention and the rest Gated DeltaNet."""
    interval = c.int("full_attention_interval", 4)
    return layer_types(c, n, lambda i: "linear_attention" if (i + 1) % interval else full, names=names or HYBRID_NAMES)


def rotary_dim(c: Cfg, head_dim: int, default: float = 0.25) -> int:
    """Rotary width: partial_rotary_factor (top level or in rope_parameters; transformers' default 0.25 here)
    of head_dim."""
    rope = c.get("rope_parameters") or c.get("rope_scaling") or {}
    factor = c.get("partial_rotary_factor")
    if factor is None and isinstance(rope, dict):
        factor = rope.get("partial_rotary_factor")
    return int(head_dim * (factor if isinstance(factor, int | float) and not isinstance(factor, bool) else default))


def gated_attention(c: Cfg, hidden: int) -> Attention:
    """Full attention with the output gate (q_proj emits queries and gate) and per-head q/k norms."""
    n, kv, d = heads(c, hidden=hidden)
    bias = c.bool("attention_bias")
    return Attention(
        hidden=hidden,
        heads=n,
        kv_heads=kv,
        head_dim=d,
        qkv_bias=bias,
        o_bias=bias,
        qk_norm="head",
        output_gate=True,
    )


def gated_delta_net(c: Cfg, hidden: int, *, split_proj: bool) -> GatedDeltaNet:
    return GatedDeltaNet(
        hidden=hidden,
        num_k_heads=c.int("linear_num_key_heads"),
        num_v_heads=c.int("linear_num_value_heads"),
        head_k_dim=c.int("linear_key_head_dim"),
        head_v_dim=c.int("linear_value_head_dim"),
        conv_kernel=c.int("linear_conv_kernel_dim"),
        split_proj=split_proj,
    )


def sparse_moe(c: Cfg, hidden: int) -> MoE:
    """Routed experts behind `gate`, plus `shared_expert` (always built) behind `shared_expert_gate`."""
    return MoE(
        hidden=hidden,
        num_experts=c.int("num_experts"),
        experts_per_token=c.int("num_experts_per_tok"),
        expert_intermediate=c.int("moe_intermediate_size"),
        shared=shared_experts(hidden, c.int0("shared_expert_intermediate_size"), name="shared_expert"),
        shared_gate=True,
    )


@dataclass(frozen=True, kw_only=True)
class MTPLayer(Layer):
    """A next-token-prediction layer of the checkpoint's `mtp.*` block; the first one also carries the block's
    own tensors (absolute names: fc, pre-fc norms, final norm), which all MTP layers share."""

    block: tuple[Tensor, ...] = ()

    def tensors(self, index: int | None) -> list[Tensor]:
        return super().tensors(index) + [dataclasses.replace(t, layer=index) for t in self.block]


def mtp_count(c: Cfg) -> int:
    """MTP layers: `mtp_num_hidden_layers` (what Qwen3.5 configs say and vLLM's qwen3_5_mtp reads), else
    `num_nextn_predict_layers` (what vLLM's qwen3_next_mtp reads), else none."""
    n = c.int0("mtp_num_hidden_layers", None)
    return n if n else c.int0("num_nextn_predict_layers", None)


def mtp_tensors(hidden: int, prefix: str = "mtp") -> tuple[Tensor, ...]:
    """The MTP block's own tensors: fc maps the normed token embedding and the normed last hidden state
    (2 × hidden) back to hidden; a final norm before the (shared) lm_head."""
    return (
        *linear(f"{prefix}.fc", "other", hidden, 2 * hidden, None),  # [embedding; hidden] -> hidden
        *norm(f"{prefix}.pre_fc_norm_embedding", hidden, None),
        *norm(f"{prefix}.pre_fc_norm_hidden", hidden, None),
        *norm(f"{prefix}.norm", hidden, None),
    )


def mtp_block(
    c: Cfg,
    attn: Mixer,
    mlp: Callable[[int], MLP],
    block: tuple[Tensor, ...],
    *,
    layer_norms: tuple[Norm, ...] = (),
    extra: tuple[Tensor, ...] = (),
    prefix: str = "mtp",
) -> tuple[Layer, ...]:
    """The `mtp.*` block as vLLM's qwen3_next_mtp / qwen3_5_mtp load it: `block` (fc, norms), then full-attention
    decoder layers (mlp(j) for layer j, as vLLM numbers them from 0). Embedding and lm_head are the main
    model's, which vLLM shares with the draft."""
    return tuple(
        MTPLayer(
            prefix=f"{prefix}.layers.{j}",
            norms=layer_norms,
            mixers=(attn,),
            mlps=(mlp(j),),
            extra=extra,
            block=block if j == 0 else (),
        )
        for j in range(mtp_count(c))
    )


def read(c: Cfg, meta: Meta) -> Model:
    hidden = c.int("hidden_size")
    num_layers = c.int("num_hidden_layers")
    kinds = hybrid_kinds(c, num_layers)
    attn = gated_attention(c, hidden)
    gdn = gated_delta_net(c, hidden, split_proj=False)
    only: set[int] = set(c.int_list("mlp_only_layers") or [])
    step = c.int("decoder_sparse_step")
    has_experts = c.int0("num_experts") > 0
    moe = sparse_moe(c, hidden) if has_experts else None

    def mlp(i: int) -> MLP:
        # MoE where the index is not in mlp_only_layers and (i + 1) is a multiple of decoder_sparse_step.
        if moe is not None and i not in only and (i + 1) % step == 0:
            return moe
        return DenseMLP(hidden=hidden, inter=c.int("intermediate_size"), detail="dense_first" if moe else "dense")

    mtp = mtp_block(c, attn, mlp, mtp_tensors(hidden), layer_norms=norms(hidden, *LAYER_NORMS))
    return decoder(c, meta, parts=lambda i: (gdn if kinds[i] == "linear_attention" else attn, mlp(i)),
                   rotary_dim=rotary_dim(c, attn.head_dim), layer_norms=LAYER_NORMS, mtp_layers=mtp)  # fmt: skip
