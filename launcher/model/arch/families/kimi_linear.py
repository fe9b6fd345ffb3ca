"""Kimi Linear: Kimi Delta Attention (KDA, a gated delta net with a per-channel decay) on most layers and NoPE
multi-head latent attention on every fourth, the first layer dense and the rest a MoE with a shared expert.

Both mixers sit at `self_attn`, so the oracle files the KDA parameters under attention; a KDA layer keeps a conv
state over q, k and v and one head_dim × head_dim recurrent matrix per head (vLLM: fp32 by default), an MLA layer
one latent per token. The released config names the layer kinds in `linear_attn_config` (1-indexed
`full_attn_layers` / `kda_layers`), which transformers turns into `layer_types` (vLLM reads only the former).
Checkpoint names: MoE layers under `block_sparse_moe` (experts w1/w3/w2, the router's e_score_correction_bias a
buffer), the dense layer under `mlp`; the output head is never tied to the embedding.
"""

from __future__ import annotations

from typing import Any

from launcher.common.records import dataclass
from launcher.model.arch.common import Meta, decoder
from launcher.model.arch.config import Cfg
from launcher.model.arch.layers import MLP, DenseMLP, GatedDeltaNet, Mixer, MLAttention, MoE, place, shared_experts
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import Tensor, conv1d, linear, norm, param

MODEL_TYPES = ("kimi_linear",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "kimi_linear": dict(vocab_size=163840, hidden_size=2304, intermediate_size=9216, moe_intermediate_size=1024,
                        num_hidden_layers=27, num_attention_heads=32, num_key_value_heads=32, num_shared_experts=1,
                        kv_lora_rank=512, q_lora_rank=None, qk_rope_head_dim=64, v_head_dim=128, qk_nope_head_dim=128,
                        num_experts_per_token=8, tie_word_embeddings=False, attention_bias=False, num_experts=256,
                        mlp_layer_types=None, layer_types=None, linear_head_dim=128, linear_num_heads=32,
                        linear_conv_kernel_dim=4, model_max_length=1048576),
}  # fmt: skip

ATTRIBUTE_MAP: dict[str, dict[str, str]] = {
    "kimi_linear": {"max_position_embeddings": "model_max_length", "norm_topk_prob": "moe_renormalize",
                    "n_group": "num_expert_group", "num_local_experts": "num_experts",
                    "num_experts_per_tok": "num_experts_per_token", "n_shared_experts": "num_shared_experts"},
}  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class KimiDeltaAttention(GatedDeltaNet):
    """Kimi Delta Attention: separate q/k/v projections, each with its own depthwise conv (the checkpoint keeps
    q_conv1d, k_conv1d and v_conv1d; transformers stacks them into one conv over 3 × heads × head_dim), a low-rank
    forget gate with a decay bias per channel, a beta per head, a low-rank output gate and a gated RMSNorm.

    Cache geometry is a gated delta net's with as many k as v heads: conv over q, k and v, and a recurrent
    head_dim × head_dim matrix per head."""

    name: str = "self_attn"
    full_rank_gate: bool = False  # Kimi K3: one hidden -> every channel output gate (g_proj), not g_a/g_b

    @property
    def code(self) -> str:
        return "K"

    def tensors(self, prefix: str, layer: int | None) -> list[Tensor]:
        p = f"{prefix}.{self.name}"
        h, heads, d = self.hidden, self.num_v_heads, self.head_v_dim
        width = heads * d  # q, k, v and the gates all span every head
        ts: list[Tensor] = []
        for x in ("q", "k", "v"):
            ts += linear(f"{p}.{x}_proj", "attention", width, h, layer)
        for x in ("q", "k", "v"):
            ts += conv1d(f"{p}.{x}_conv1d", "attention", width, self.conv_kernel, layer, bias=False)
        ts += param(f"{p}.A_log", "attention", (1, 1, heads, 1), layer)  # one decay rate per head
        # Forget gate: hidden -> head_dim -> every channel, plus a bias per channel.
        ts += linear(f"{p}.f_a_proj", "attention", d, h, layer)
        ts += linear(f"{p}.f_b_proj", "attention", width, d, layer)
        ts += param(f"{p}.dt_bias", "attention", (width,), layer)
        ts += linear(f"{p}.b_proj", "attention", heads, h, layer)  # beta: one write strength per head
        # Output gate, low rank like the forget gate (or full rank), then a gated RMSNorm over head_dim.
        if self.full_rank_gate:
            ts += linear(f"{p}.g_proj", "attention", width, h, layer)
        else:
            ts += linear(f"{p}.g_a_proj", "attention", d, h, layer)
            ts += linear(f"{p}.g_b_proj", "attention", width, d, layer)
        ts += norm(f"{p}.o_norm", d, layer, part="attention", detail="attention_norms")
        ts += linear(f"{p}.o_proj", "attention", h, width, layer, gguf="attn_output")
        return ts + place(self.extra, p, layer)


def layer_kinds(c: Cfg, n: int) -> list[str]:
    """Each layer's mixer: `layer_types`, else `linear_attn_config`'s 1-indexed lists, else MLA on every
    fourth layer after the first (transformers' default)."""
    raw = c.list("layer_types")
    if raw:
        if len(raw) < n:
            raise c.error(f"has {len(raw)} entries for {n} layers", "layer_types")
        for i, t in enumerate(raw[:n]):
            if t not in ("full_attention", "linear_attention"):
                raise c.error(f"unknown layer type {t!r} at index {i}; known: full_attention, linear_attention",
                              "layer_types")  # fmt: skip
        return [str(t) for t in raw[:n]]
    lac = c.sub("linear_attn_config")
    if lac.has("full_attn_layers") and lac.has("kda_layers"):
        kinds: list[str | None] = [None] * n
        for key, kind in (("full_attn_layers", "full_attention"), ("kda_layers", "linear_attention")):
            for i in lac.int_list(key) or []:
                if not 1 <= i <= n:
                    raise lac.error(f"layer {i} is outside 1..{n} (the lists are 1-indexed)", key)
                kinds[i - 1] = kind
        missing = [i + 1 for i, k in enumerate(kinds) if k is None]
        if missing:  # transformers rejects the config too
            raise lac.error(f"layers {missing} are in neither full_attn_layers nor kda_layers", "kda_layers")
        return [str(k) for k in kinds]
    return ["full_attention" if i and i % 4 == 0 else "linear_attention" for i in range(n)]


def mlp_kinds(c: Cfg, n: int) -> list[str]:
    """Dense or MoE per layer: `mlp_layer_types`, else dense for the first `first_k_dense_replace` (default 1)."""
    raw = c.list("mlp_layer_types")
    if raw:
        if len(raw) < n:
            raise c.error(f"has {len(raw)} entries for {n} layers", "mlp_layer_types")
        return ["sparse" if t == "sparse" else "dense" for t in raw[:n]]
    k_dense = c.int0("first_k_dense_replace", 1)
    return ["dense" if i < k_dense else "sparse" for i in range(n)]


def read(c: Cfg, meta: Meta) -> Model:
    hidden, inter = c.int("hidden_size"), c.int("intermediate_size")
    num_layers = c.int("num_hidden_layers")
    bias = c.bool("attention_bias")
    lac = c.sub("linear_attn_config")
    # The checkpoint's linear_attn_config wins over the flat fields, as in transformers' __post_init__.
    lin_heads = lac.int("num_heads") if lac.has("num_heads") else c.int("linear_num_heads")
    lin_dim = lac.int("head_dim") if lac.has("head_dim") else c.int("linear_head_dim")
    kernel = lac.int("short_conv_kernel_size") if lac.has("short_conv_kernel_size") else c.int("linear_conv_kernel_dim")
    kda = KimiDeltaAttention(hidden=hidden, num_k_heads=lin_heads, num_v_heads=lin_heads, head_k_dim=lin_dim,
                             head_v_dim=lin_dim, conv_kernel=kernel)  # fmt: skip
    mla = MLAttention(hidden=hidden, heads=c.int("num_attention_heads"), q_lora_rank=c.opt_int("q_lora_rank"),
                      kv_lora_rank=c.int("kv_lora_rank"), qk_nope_head_dim=c.int("qk_nope_head_dim"),
                      qk_rope_head_dim=c.int("qk_rope_head_dim"), v_head_dim=c.int("v_head_dim"), qkv_bias=bias,
                      o_bias=bias)  # fmt: skip
    moe_inter = c.int("moe_intermediate_size")
    # The shared expert is one MLP num_shared_experts times as wide as a routed expert.
    n_shared = c.int0("num_shared_experts")
    moe = MoE(hidden=hidden, num_experts=c.int("num_experts"), experts_per_token=c.int("num_experts_per_token"),
              expert_intermediate=moe_inter, expert_names=("w1", "w3", "w2"), name="block_sparse_moe", score_bias=True,
              shared=shared_experts(hidden, moe_inter * n_shared) if n_shared else None)  # fmt: skip
    dense = DenseMLP(hidden=hidden, inter=inter, detail="dense_first")
    kinds, mlps = layer_kinds(c, num_layers), mlp_kinds(c, num_layers)

    def parts(i: int) -> tuple[Mixer, MLP]:
        return mla if kinds[i] == "full_attention" else kda, moe if mlps[i] == "sparse" else dense

    # transformers never ties Kimi Linear's head to the embedding (nor does vLLM).
    # NoPE latent attention: no rotary embedding anywhere in the model.
    return decoder(c, meta, parts=parts, rotary_dim=0, is_tied=False, max_pos_key="model_max_length")
