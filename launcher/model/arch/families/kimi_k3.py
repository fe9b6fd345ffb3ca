"""Kimi K3 (KimiK3ForConditionalGeneration): a Kimi Linear language model (`text_config`, model_type kimi_linear)
under `language_model.`, with Kimi K2.5's MoonViT in its K3 form (RMSNorm, no biases, qkv 1536 wide, the
patchmergerv2 projector).

The text model differs from Kimi Linear (vLLM's models/kimi_k3/nvidia/model.py):
- KDA layers may carry a full-rank output gate (`linear_attn_config.use_full_rank_gate`: g_proj, hidden -> every
  channel, instead of g_a_proj/g_b_proj);
- MLA layers (q low-rank, NoPE when `mla_use_nope`) may carry an output gate (`mla_use_output_gate`: g_proj,
  hidden -> heads × v_head_dim);
- the MoE is a latent MoE: the router and the shared experts (num_shared_experts × moe_intermediate_size) see the
  hidden size, the routed experts run at `routed_expert_hidden_size` between routed_expert_down_proj (with an RMSNorm,
  `latent_moe_use_norm`) and routed_expert_up_proj;
- with `attn_res_block_size`, every layer has an attention-residual norm and a 1-wide projection before its
  attention and its MLP (self_attention_res_*, mlp_res_*), and the model one more before the output
  (output_attn_res_*).
transformers 5.19 has no Kimi K3 class; the counts are checked against vLLM's.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from launcher.common.records import dataclass
from launcher.model.arch.common import Meta, decoder, text_config, under
from launcher.model.arch.config import Cfg
from launcher.model.arch.families import kimi_linear
from launcher.model.arch.families.kimi_k25 import moonvit
from launcher.model.arch.layers import MLP, DenseMLP, Mixer, MLAttention, MoE, place, shared_experts
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import Tensor, linear, norm

MODEL_TYPES = ("kimi_k3",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "kimi_k3": dict(tie_word_embeddings=False),
    "kimi_linear": kimi_linear.DEFAULTS["kimi_linear"],
}

# vLLM's KimiK3VisionConfig defaults, by the released configs' names.
VISION_DEFAULTS: dict[str, Any] = dict(
    patch_size=14, init_pos_emb_height=64, init_pos_emb_width=64, vt_num_attention_heads=12, vt_num_hidden_layers=27,
    vt_hidden_size=1024, vt_intermediate_size=4096, merge_kernel_size=[2, 2], qkv_hidden_size=1536,
)  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class LatentMoE(MoE):
    """Kimi K3's MoE: router and shared experts at the hidden size, routed experts at `latent` between a down
    projection (and its RMSNorm) and an up projection."""

    latent: int
    latent_norm: bool = True

    def tensors(self, prefix: str, layer: int | None) -> list[Tensor]:
        p, h, r, e, i = f"{prefix}.{self.name}", self.hidden, self.latent, self.num_experts, self.expert_intermediate
        ts = linear(f"{p}.{self.router_name}", "experts", e, h, layer, gguf="ffn_gate_inp", detail="router",
                    role="router")  # fmt: skip
        # The router's score correction: a buffer vLLM keeps as a parameter, saved beside the router.
        ts.append(Tensor(f"{p}.{self.router_name}.e_score_correction_bias", "experts", "buffer", (e,), 1, layer,
                         "exp_probs_b", "router"))  # fmt: skip
        gate, up, down = self.expert_names
        for name, shape in ((gate, (i, r)), (up, (i, r)), (down, (r, i))):
            ts += linear(f"{p}.{self.experts_name}.{name}", "experts", *shape, layer, detail="routed_experts",
                         copies=e, role="expert")  # fmt: skip
        if self.shared is not None:
            ts += self.shared.tensors(p, layer)
        ts += linear(f"{p}.routed_expert_down_proj", "experts", r, h, layer, detail="latent")
        if self.latent_norm:
            ts += norm(f"{p}.routed_expert_norm", r, layer, part="experts", detail="latent")
        return ts + linear(f"{p}.routed_expert_up_proj", "experts", h, r, layer, detail="latent")


def res_tensors(hidden: int, names: tuple[str, ...]) -> tuple[Tensor, ...]:
    """Attention-residual norms and their 1-wide projections, relative to the owning module."""
    out: list[Tensor] = []
    for n in names:
        out += norm(f"{n}_res_norm", hidden, None)
        out += linear(f"{n}_res_proj", "other", 1, hidden, None)
    return tuple(out)


def _moe(c: Cfg, hidden: int) -> LatentMoE:
    moe_inter = c.int("moe_intermediate_size")
    n_shared = c.int0("num_shared_experts")
    return LatentMoE(
        hidden=hidden, num_experts=c.int("num_experts"), experts_per_token=c.int("num_experts_per_token"),
        expert_intermediate=moe_inter, expert_names=("w1", "w3", "w2"), name="block_sparse_moe", score_bias=True,
        shared=shared_experts(hidden, moe_inter * n_shared) if n_shared else None,
        latent=c.int("routed_expert_hidden_size"), latent_norm=c.bool("latent_moe_use_norm", True),
    )  # fmt: skip


def _mla(c: Cfg, hidden: int) -> MLAttention:
    heads, v = c.int("num_attention_heads"), c.int("v_head_dim")
    gate = linear("g_proj", "attention", heads * v, hidden, None) if c.bool("mla_use_output_gate", False) else []
    bias = c.bool("attention_bias")
    return MLAttention(hidden=hidden, heads=heads, q_lora_rank=c.opt_int("q_lora_rank"),
                       kv_lora_rank=c.int("kv_lora_rank"), qk_nope_head_dim=c.int("qk_nope_head_dim"),
                       qk_rope_head_dim=c.int("qk_rope_head_dim"), v_head_dim=v, qkv_bias=bias, o_bias=bias,
                       extra=tuple(gate))  # fmt: skip


def read_text(c: Cfg, meta: Meta) -> Model:
    hidden, n = c.int("hidden_size"), c.int("num_hidden_layers")
    lac = c.sub("linear_attn_config")
    kda = kimi_linear.KimiDeltaAttention(
        hidden=hidden, num_k_heads=lac.int("num_heads"), num_v_heads=lac.int("num_heads"),
        head_k_dim=lac.int("head_dim"), head_v_dim=lac.int("head_dim"), conv_kernel=lac.int("short_conv_kernel_size"),
        full_rank_gate=lac.bool("use_full_rank_gate", False),
    )  # fmt: skip
    mla, moe = _mla(c, hidden), _moe(c, hidden)
    dense = DenseMLP(hidden=hidden, inter=c.int("intermediate_size"), detail="dense_first")
    kinds = kimi_linear.layer_kinds(c, n)
    first, freq = c.int0("first_k_dense_replace", 1), c.int("moe_layer_freq", 1)

    def parts(i: int) -> tuple[Mixer, MLP]:
        return mla if kinds[i] == "full_attention" else kda, moe if i >= first and i % freq == 0 else dense

    res = c.opt_int("attn_res_block_size") is not None
    model = decoder(c, meta, parts=parts, rotary_dim=0 if c.bool("mla_use_nope", True) else c.int("qk_rope_head_dim"),
                    is_tied=False, max_pos_key="max_position_embeddings",
                    layer_extra=res_tensors(hidden, ("self_attention", "mlp")) if res else (),
                    head_extra=place(res_tensors(hidden, ("output_attn",)), "model", None) if res else ())  # fmt: skip
    return model


def read(c: Cfg, meta: Meta) -> Model:
    top = c
    c, meta = text_config(top, meta, "kimi_linear", DEFAULTS["kimi_linear"],
                          aliases=kimi_linear.ATTRIBUTE_MAP["kimi_linear"])  # fmt: skip
    text = under(read_text(c, meta), "language_model.")
    tower = moonvit(top, text.hidden_size, VISION_DEFAULTS, rms=True, attn_bias=False, linear_bias=False,
                    patch_bias=False, projector_v2=True)  # fmt: skip
    return dataclasses.replace(text, towers=(tower,), defaults_used=tuple(sorted(c.used)))
