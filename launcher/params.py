"""ModelShape -> every weight tensor the model holds, and the parameter count by part.

Pure arithmetic. The tensor list is what the storage formats price (formats.py): a linear layer is priced
differently from an embedding, a norm or a bias, so we keep each tensor's role and shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Literal

from launcher.model import ModelShape

Part = Literal[
    "embedding", "lm_head", "attention", "mlp", "experts", "norms", "vision", "other",
]  # fmt: skip
Role = Literal["embedding", "lm_head", "linear", "expert", "router", "bias", "norm", "sink", "conv", "position"]

PARTS: tuple[Part, ...] = ("embedding", "lm_head", "attention", "mlp", "experts", "norms", "vision", "other")


@dataclass(frozen=True)
class Tensor:
    """One weight tensor (or `copies` identical ones: the experts of one layer)."""

    name: str
    part: Part
    role: Role
    shape: tuple[int, ...]  # linears are (out_features, in_features), as PyTorch stores them
    copies: int = 1
    layer: int | None = None
    gguf: str | None = None  # llama.cpp's name for the tensor kind, for GGUF mixes (attn_v, ffn_down, output…)
    detail: str = ""  # finer bucket: q_norm/k_norm, MLA low-rank, router, shared_experts, dense_first…

    @property
    def numel(self) -> int:
        return prod(self.shape) * self.copies


@dataclass(frozen=True)
class ParamCount:
    total: int
    text_total: int
    parts: dict[Part, int]
    detail: dict[str, int]
    per_layer: tuple[int, ...]

    def to_json(self) -> dict[str, object]:
        return {
            "total": self.total,
            "text_total": self.text_total,
            "parts": dict(self.parts),
            "detail": dict(self.detail),
        }


def _linear(
    name: str, part: Part, out_f: int, in_f: int, layer: int | None, *, bias: bool = False,
    gguf: str | None = None, detail: str = "", copies: int = 1, role: Role = "linear",
) -> list[Tensor]:  # fmt: skip
    ts = [Tensor(f"{name}.weight", part, role, (out_f, in_f), copies, layer, gguf, detail)]
    if bias:
        ts.append(Tensor(f"{name}.bias", part, "bias", (out_f,), copies, layer, gguf, detail))
    return ts


def _attention(s: ModelShape, i: int) -> list[Tensor]:
    p = f"model.layers.{i}.self_attn"
    h, n, k, d = s.hidden_size, s.num_heads, s.num_kv_heads, s.head_dim
    ts: list[Tensor] = []
    if s.mla is not None:
        m = s.mla
        qk_head = m.qk_nope_head_dim + m.qk_rope_head_dim
        if m.q_lora_rank is None:
            ts += _linear(f"{p}.q_proj", "attention", n * qk_head, h, i, gguf="attn_q")
        else:
            # Low-rank query: down to q_lora_rank, normalised, up to every head.
            ts += _linear(f"{p}.q_a_proj", "attention", m.q_lora_rank, h, i, bias=s.qkv_bias, gguf="attn_q_a",
                          detail="mla_low_rank")  # fmt: skip
            ts.append(Tensor(f"{p}.q_a_layernorm.weight", "attention", "norm", (m.q_lora_rank,), 1, i,
                             "attn_q_a_norm", "attention_norms"))  # fmt: skip
            ts += _linear(f"{p}.q_b_proj", "attention", n * qk_head, m.q_lora_rank, i, gguf="attn_q_b",
                          detail="mla_low_rank")  # fmt: skip
        # One shared latent (kv_lora_rank) plus the decoupled rope key, then expanded per head to k_nope and v.
        ts += _linear(f"{p}.kv_a_proj_with_mqa", "attention", m.kv_lora_rank + m.qk_rope_head_dim, h, i,
                      bias=s.qkv_bias, gguf="attn_kv_a_mqa", detail="mla_low_rank")  # fmt: skip
        ts.append(Tensor(f"{p}.kv_a_layernorm.weight", "attention", "norm", (m.kv_lora_rank,), 1, i,
                         "attn_kv_a_norm", "attention_norms"))  # fmt: skip
        ts += _linear(f"{p}.kv_b_proj", "attention", n * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank, i,
                      gguf="attn_kv_b", detail="mla_low_rank")  # fmt: skip
        ts += _linear(f"{p}.o_proj", "attention", h, n * m.v_head_dim, i, bias=s.o_bias, gguf="attn_output")
        return ts
    if s.fused_qkv:
        ts += _linear(f"{p}.qkv_proj", "attention", (n + 2 * k) * d, h, i, bias=s.qkv_bias, gguf="attn_qkv")
    else:
        ts += _linear(f"{p}.q_proj", "attention", n * d, h, i, bias=s.qkv_bias, gguf="attn_q")
        ts += _linear(f"{p}.k_proj", "attention", k * d, h, i, bias=s.qkv_bias, gguf="attn_k")  # GQA: k heads
        ts += _linear(f"{p}.v_proj", "attention", k * d, h, i, bias=s.qkv_bias, gguf="attn_v")
    ts += _linear(f"{p}.o_proj", "attention", h, n * d, i, bias=s.o_bias, gguf="attn_output")
    if s.qk_norm:
        # Per-head RMSNorm on q and k: one head_dim vector each, shared across heads.
        ts.append(Tensor(f"{p}.q_norm.weight", "attention", "norm", (d,), 1, i, "attn_q_norm", "attention_norms"))
        ts.append(Tensor(f"{p}.k_norm.weight", "attention", "norm", (d,), 1, i, "attn_k_norm", "attention_norms"))
    if s.attention_sinks:
        ts.append(Tensor(f"{p}.sinks", "attention", "sink", (n,), 1, i, "attn_sinks", "sinks"))
    return ts


def _dense_mlp(s: ModelShape, i: int, inter: int, part: Part, prefix: str, detail: str) -> list[Tensor]:
    h = s.hidden_size
    if s.fused_qkv:  # Phi-3 fuses gate and up as well
        return [
            *_linear(f"{prefix}.gate_up_proj", part, 2 * inter, h, i, gguf="ffn_up", detail=detail),
            *_linear(f"{prefix}.down_proj", part, h, inter, i, gguf="ffn_down", detail=detail),
        ]
    # SwiGLU: gate and up (h -> I) side by side, down (I -> h).
    return [
        *_linear(f"{prefix}.gate_proj", part, inter, h, i, bias=s.mlp_bias, gguf="ffn_gate", detail=detail),
        *_linear(f"{prefix}.up_proj", part, inter, h, i, bias=s.mlp_bias, gguf="ffn_up", detail=detail),
        *_linear(f"{prefix}.down_proj", part, h, inter, i, bias=s.mlp_bias, gguf="ffn_down", detail=detail),
    ]


def _moe(s: ModelShape, i: int) -> list[Tensor]:
    assert s.moe is not None
    m, h = s.moe, s.hidden_size
    p = f"model.layers.{i}.mlp"
    e, inter = m.num_experts, m.expert_intermediate
    router = "router" if s.model_type == "gpt_oss" else "gate"
    ts = _linear(f"{p}.{router}", "experts", e, h, i, bias=m.router_bias, gguf="ffn_gate_inp", detail="router",
                 role="router")  # fmt: skip
    ts += _linear(f"{p}.experts.gate_proj", "experts", inter, h, i, bias=m.expert_bias, gguf="ffn_gate_exps",
                  detail="routed_experts", copies=e, role="expert")  # fmt: skip
    ts += _linear(f"{p}.experts.up_proj", "experts", inter, h, i, bias=m.expert_bias, gguf="ffn_up_exps",
                  detail="routed_experts", copies=e, role="expert")  # fmt: skip
    ts += _linear(f"{p}.experts.down_proj", "experts", h, inter, i, bias=m.expert_bias, gguf="ffn_down_exps",
                  detail="routed_experts", copies=e, role="expert")  # fmt: skip
    if m.shared_intermediate:
        name = "shared_expert" if m.shared_expert_gate else "shared_experts"
        ts += [
            Tensor(
                t.name,
                "experts",
                t.role,
                t.shape,
                t.copies,
                t.layer,
                t.gguf and t.gguf + "_shexp",
                "shared_experts",
            )
            for t in _dense_mlp(s, i, m.shared_intermediate, "experts", f"{p}.{name}", "shared_experts")
        ]
        if m.shared_expert_gate:
            ts += _linear(f"{p}.shared_expert_gate", "experts", 1, h, i, gguf="ffn_gate_inp_shexp",
                          detail="shared_experts", role="router")  # fmt: skip
    return ts


def _vision(s: ModelShape) -> list[Tensor]:
    """SigLIP vision tower (no pooling head when vision_use_head is false) and Gemma 3's projector."""
    v = s.vision
    assert v is not None
    hv, iv = v.hidden_size, v.intermediate_size
    p = "vision_tower.vision_model"
    patches = (v.image_size // v.patch_size) ** 2
    ts = [
        Tensor(
            f"{p}.embeddings.patch_embedding.weight",
            "vision",
            "conv",
            (hv, v.num_channels, v.patch_size, v.patch_size),
        ),
        Tensor(f"{p}.embeddings.patch_embedding.bias", "vision", "bias", (hv,)),
        Tensor(f"{p}.embeddings.position_embedding.weight", "vision", "position", (patches, hv)),
    ]
    for i in range(v.num_layers):
        q = f"{p}.encoder.layers.{i}"
        ts += [
            Tensor(f"{q}.layer_norm1.weight", "vision", "norm", (hv,)),
            Tensor(f"{q}.layer_norm1.bias", "vision", "bias", (hv,)),
        ]
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            ts += _linear(f"{q}.self_attn.{proj}", "vision", hv, hv, None, bias=True)
        ts += [
            Tensor(f"{q}.layer_norm2.weight", "vision", "norm", (hv,)),
            Tensor(f"{q}.layer_norm2.bias", "vision", "bias", (hv,)),
        ]
        ts += _linear(f"{q}.mlp.fc1", "vision", iv, hv, None, bias=True)
        ts += _linear(f"{q}.mlp.fc2", "vision", hv, iv, None, bias=True)
    ts += [
        Tensor(f"{p}.post_layernorm.weight", "vision", "norm", (hv,)),
        Tensor(f"{p}.post_layernorm.bias", "vision", "bias", (hv,)),
    ]
    if v.use_head:
        q = f"{p}.head"
        ts.append(Tensor(f"{q}.probe", "vision", "position", (1, 1, hv)))
        ts += _linear(f"{q}.attention.in_proj", "vision", 3 * hv, hv, None, bias=True)
        ts += _linear(f"{q}.attention.out_proj", "vision", hv, hv, None, bias=True)
        ts += [
            Tensor(f"{q}.layernorm.weight", "vision", "norm", (hv,)),
            Tensor(f"{q}.layernorm.bias", "vision", "bias", (hv,)),
        ]
        ts += _linear(f"{q}.mlp.fc1", "vision", iv, hv, None, bias=True)
        ts += _linear(f"{q}.mlp.fc2", "vision", hv, iv, None, bias=True)
    # Projector: an RMSNorm over the vision width, then a (vision -> text hidden) matrix stored without bias.
    ts.append(Tensor("multi_modal_projector.mm_soft_emb_norm.weight", "vision", "norm", (hv,)))
    ts.append(Tensor("multi_modal_projector.mm_input_projection_weight", "vision", "linear", (v.projector_out, hv)))
    return ts


# Norms after the input norm, by how many a decoder layer has (Gemma 2/3 wrap attention and MLP in pairs).
_LAYER_NORMS = {
    2: ("post_attention_layernorm",),
    4: ("post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"),
}


def tensors(s: ModelShape) -> list[Tensor]:
    """Every weight tensor of the model as transformers builds it (tied lm_head omitted)."""
    h = s.hidden_size
    ts = [Tensor("model.embed_tokens.weight", "embedding", "embedding", (s.vocab_size, h), gguf="token_embd")]
    for i in range(s.num_layers):
        ts.append(Tensor(f"model.layers.{i}.input_layernorm.weight", "norms", "norm", (h,), 1, i, "attn_norm"))
        ts += _attention(s, i)
        for norm in _LAYER_NORMS[s.norms_per_layer]:
            ts.append(Tensor(f"model.layers.{i}.{norm}.weight", "norms", "norm", (h,), 1, i, "ffn_norm"))
        if s.mlp_kinds[i] == "moe":
            ts += _moe(s, i)
        else:
            dense_detail = "dense_first" if s.is_moe else "dense"
            ts += _dense_mlp(s, i, s.intermediate_size, "mlp", f"model.layers.{i}.mlp", dense_detail)
    ts.append(Tensor("model.norm.weight", "norms", "norm", (h,), gguf="output_norm"))
    if not s.tied_embeddings:
        ts.append(Tensor("lm_head.weight", "lm_head", "lm_head", (s.vocab_size, h), gguf="output"))
    if s.vision is not None:
        ts += _vision(s)
    return ts


def count(s: ModelShape, ts: list[Tensor] | None = None) -> ParamCount:
    """Parameters by part; `total` is the whole model vLLM loads, `text_total` the language model alone."""
    ts = tensors(s) if ts is None else ts
    parts: dict[Part, int] = dict.fromkeys(PARTS, 0)
    detail: dict[str, int] = {}
    per_layer = [0] * s.num_layers
    for t in ts:
        n = t.numel
        parts[t.part] += n
        if t.detail:
            detail[t.detail] = detail.get(t.detail, 0) + n
        if t.layer is not None:
            per_layer[t.layer] += n
    total = sum(parts.values())
    return ParamCount(
        total=total,
        text_total=total - parts["vision"],
        parts=parts,
        detail=detail,
        per_layer=tuple(per_layer),
    )
