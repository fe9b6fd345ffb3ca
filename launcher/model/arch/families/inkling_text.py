"""Inkling (text model): sliding-window attention on five of every six layers and full attention on the sixth,
each with its own head geometry (swa_* for the sliding layers), a per-head relative-position bias, per-head q/k
RMSNorms, and four depthwise short convolutions per layer: on the keys and values inside attention, and on the
attention and MLP outputs in the residual stream. MoE layers route over routed experts plus shared experts that
the router also scores; the token embedding carries an RMSNorm.

Each layer therefore keeps a KV cache (window-capped on sliding layers) and a conv state of kernel-1 steps over
the k and v widths and twice the hidden size (codes "SV" / "FV"; the V mixer owns all four conv states). Experts
are stored stacked as 3-D tensors (`mlp.experts.gate_up_proj` E × 2·I × hidden), in transformers as in the
released checkpoint (`model.llm.layers.N.mlp.experts.w13_weight`, served by vLLM's InklingForConditionalGeneration);
names here are transformers' InklingForCausalLM ones. MTP depths (`num_mtp_layers`) sit under
`model.mtp.layers`, each a full block with a dense MLP, as vLLM's InklingMTP loads them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from launcher.common.records import dataclass
from launcher.model.arch.common import Meta, attention, build, embed_head
from launcher.model.arch.config import Cfg
from launcher.model.arch.layers import MLP, Attention, DenseMLP, Layer, Norm, ShortConv, norms, place
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import Tensor, conv1d, linear, param

MODEL_TYPES = ("inkling_text",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "inkling_text": dict(vocab_size=201024, hidden_size=6144, num_hidden_layers=66, num_attention_heads=64,
                         num_key_value_heads=8, head_dim=128, swa_num_attention_heads=64, swa_num_key_value_heads=16,
                         swa_head_dim=128, sliding_window_size=512, d_rel=16, rel_extent=1024, local_layer_ids=None,
                         layer_types=None, max_position_embeddings=131072, conv_kernel_size=4, mlp_layer_types=None,
                         intermediate_size=24576, moe_intermediate_size=3072, n_routed_experts=256,
                         num_experts_per_tok=6, n_shared_experts=2, num_mtp_layers=None, mtp_local_layer_ids=None,
                         chain_hidden_post_norm=False),
}  # fmt: skip

ATTRIBUTE_MAP: dict[str, dict[str, str]] = {
    "inkling_text": {"embedding_multiplier": "logits_mup_width_multiplier", "sliding_window": "sliding_window_size",
                     "num_local_experts": "n_routed_experts", "sconv_kernel_size": "conv_kernel_size",
                     "model_max_length": "max_position_embeddings"},
}  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class InklingConvs(ShortConv):
    """The layer's four short convolutions as one state mixer: the attention and MLP output convs (weights
    here, `attn_sconv` / `mlp_sconv`) and the key and value convs (weights inside attention, `k_sconv` /
    `v_sconv`, which the oracle counts there). State: kernel-1 steps of each stream; vLLM shards the hidden
    streams and the k/v streams over tensor-parallel ranks."""

    kv_width: int  # KV heads × head_dim of this layer's attention
    name: str = ""

    def tensors(self, prefix: str, layer: int | None) -> list[Tensor]:
        p = f"{prefix}.{self.name}" if self.name else prefix  # the convs sit on the layer itself
        return [
            *conv1d(f"{p}.attn_sconv.conv1d", "mixer", self.hidden, self.conv_kernel, layer, bias=False),
            *conv1d(f"{p}.mlp_sconv.conv1d", "mixer", self.hidden, self.conv_kernel, layer, bias=False),
            *place(self.extra, p, layer),
        ]

    def state_shapes(self, tp: int = 1) -> dict[str, tuple[int, ...]]:
        steps = self.conv_kernel - 1
        return {"k_conv": (self.kv_width // tp, steps), "v_conv": (self.kv_width // tp, steps),
                "attn_conv": (self.hidden // tp, steps), "mlp_conv": (self.hidden // tp, steps)}  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class InklingMoE(MLP):
    """Routed experts stacked in 3-D tensors (gate and up fused), shared experts stacked the same way, and a
    router over routed + shared experts with a learned scalar scale."""

    hidden: int
    num_experts: int
    experts_per_token: int
    expert_intermediate: int
    shared_experts: int
    name: str = "mlp"

    @property
    def is_moe(self) -> bool:
        return True

    def tensors(self, prefix: str, layer: int | None) -> list[Tensor]:
        p = f"{prefix}.{self.name}"
        h, e, i, s = self.hidden, self.num_experts, self.expert_intermediate, self.shared_experts
        # The router scores the shared experts too (their softmax weight acts as a sink).
        ts = linear(f"{p}.gate", "experts", e + s, h, layer, gguf="ffn_gate_inp", detail="router", role="router")
        ts += param(f"{p}.gate.global_scale", "experts", (1,), layer, detail="router")
        # Added to the routed experts' scores to balance them: a buffer, saved but not a parameter.
        ts.append(Tensor(f"{p}.gate.e_score_correction_bias", "experts", "buffer", (e,), 1, layer, "exp_probs_b",
                         "router"))  # fmt: skip
        # gate and up stacked: 2 × expert width rows per expert.
        ts += param(f"{p}.experts.gate_up_proj", "experts", (e, 2 * i, h), layer, role="expert",
                    detail="routed_experts")  # fmt: skip
        ts += param(f"{p}.experts.down_proj", "experts", (e, h, i), layer, role="expert", detail="routed_experts")
        for proj, shape in (("gate_proj", (s, i, h)), ("up_proj", (s, i, h)), ("down_proj", (s, h, i))):
            ts += param(f"{p}.shared_experts.{proj}", "experts", shape, layer, role="expert",
                        detail="shared_experts")  # fmt: skip
        return ts

    def active_intermediate(self) -> int:
        return (self.experts_per_token + self.shared_experts) * self.expert_intermediate


def _ids_to_types(c: Cfg, n: int) -> list[str]:
    """`layer_types` ("hybrid_sliding" / "hybrid"), else `local_layer_ids` are sliding, else every layer whose
    index + 1 is not a multiple of 6."""
    raw = c.list("layer_types")
    if raw is not None:
        if len(raw) < n:
            raise c.error(f"has {len(raw)} entries for {n} layers", "layer_types")
        for i, t in enumerate(raw[:n]):
            if t not in ("hybrid", "hybrid_sliding"):
                raise c.error(f"unknown layer type {t!r} at index {i}; known: hybrid, hybrid_sliding", "layer_types")
        return [str(t) for t in raw[:n]]
    ids = c.int_list("local_layer_ids")
    local = set(ids) if ids is not None else {i for i in range(n) if (i + 1) % 6}
    return ["hybrid_sliding" if i in local else "hybrid" for i in range(n)]


@dataclass(frozen=True)
class _Geometry:
    """What every Inkling layer's mixers share: the hidden size, the conv kernel, the relative bias's width and
    the sliding window."""

    hidden: int
    kernel: int
    d_rel: int
    window: int


def read(c: Cfg, meta: Meta) -> Model:
    vocab, hidden = c.int("vocab_size"), c.int("hidden_size")
    num_layers = c.int("num_hidden_layers")
    # An older config names the dense MLP width dense_intermediate_size (transformers folds it in).
    inter = c.int("dense_intermediate_size") if c.has("dense_intermediate_size") else c.int("intermediate_size")
    kernel, d_rel, window = c.int("conv_kernel_size"), c.int("d_rel"), c.int("sliding_window_size")
    geo = _Geometry(hidden, kernel, d_rel, window)
    kinds = _ids_to_types(c, num_layers)
    mlp_types = _mlp_types(c, num_layers)
    by_kind = {k: _mixers(c, geo, k == "hybrid_sliding") for k in set(kinds)}
    # Dense layers scale their output by a learned scalar.
    dense = DenseMLP(hidden=hidden, inter=inter, extra=tuple(param("global_scale", "mlp", (1,), None)))
    moe = InklingMoE(
        hidden=hidden,
        num_experts=c.int("n_routed_experts"),
        experts_per_token=c.int("num_experts_per_tok"),
        expert_intermediate=c.int("moe_intermediate_size"),
        shared_experts=c.int("n_shared_experts"),
    )
    layer_norms = norms(hidden, "input_layernorm", "post_attention_layernorm")
    layers = [Layer(prefix=f"model.layers.{i}", norms=layer_norms, mixers=by_kind[kinds[i]],
                    mlps=(moe if mlp_types[i] == "sparse" else dense,)) for i in range(num_layers)]  # fmt: skip
    mtp = _mtp_layers(c, geo, dense)
    # The checkpoint's unembedding and embedding are separate tensors: transformers never ties them.
    embeddings, head = embed_head(vocab, hidden, False)
    # The embedding's RMSNorm lives inside embed_tokens, where the oracle (and transformers' name rule) puts it.
    embeddings += tuple(param("model.embed_tokens.embed_norm.weight", "embedding", (hidden,), None,
                              detail="embedding_norm"))  # fmt: skip
    # Positions enter through the relative bias and the convolutions: no rotary embedding.
    return build(c, meta, vocab=vocab, hidden=hidden, layers=layers, is_tied=False, embeddings=embeddings,
                 head=head, rotary_dim=0, mtp_layers=mtp)  # fmt: skip


def _mlp_types(c: Cfg, num_layers: int) -> list[str]:
    """`mlp_layer_types` ("dense" / "sparse"), else the first `dense_mlp_idx` layers dense."""
    raw_mlp = c.list("mlp_layer_types")
    if raw_mlp is not None and len(raw_mlp) < num_layers:
        raise c.error(f"has {len(raw_mlp)} entries for {num_layers} layers", "mlp_layer_types")
    k_dense = c.int0("dense_mlp_idx", 0)
    return [str(t) for t in raw_mlp[:num_layers]] if raw_mlp is not None else [
        "dense" if i < k_dense else "sparse" for i in range(num_layers)]  # fmt: skip


def _mixers(c: Cfg, geo: _Geometry, sliding: bool) -> tuple[Attention, InklingConvs]:
    """A layer's attention (swa_* geometry when sliding) with its relative bias and k/v convs, and its convs."""
    hidden, kernel, d_rel, window = geo.hidden, geo.kernel, geo.d_rel, geo.window
    pre = "swa_" if sliding else ""
    n, kv, d = c.int(pre + "num_attention_heads"), c.int(pre + "num_key_value_heads"), c.int(pre + "head_dim")
    c.heads_divide(n, kv, pre + "num_key_value_heads")
    # Sliding layers apply the relative bias over their window, full layers over rel_extent tokens.
    extent = window if sliding else c.int("rel_extent")
    extra = (
        *linear("r_proj", "attention", n * d_rel, hidden, None),  # d_rel mixing weights per head
        *param("rel_logits_proj.proj", "attention", (d_rel, extent), None),  # bias profile per distance
        *conv1d("k_sconv.conv1d", "attention", kv * d, kernel, None, bias=False),
        *conv1d("v_sconv.conv1d", "attention", kv * d, kernel, None, bias=False),
    )
    attn = attention("sliding_attention" if sliding else "full_attention", window=window, c=c, hidden=hidden,
                     heads=n, kv_heads=kv, head_dim=d, qk_norm="head", extra=extra)  # fmt: skip
    return attn, InklingConvs(hidden=hidden, conv_kernel=kernel, kv_width=kv * d)


def _mtp_layers(c: Cfg, geo: _Geometry, dense: DenseMLP) -> tuple[Layer, ...]:
    """The MTP depths (`num_mtp_layers`)."""
    hidden = geo.hidden
    # MTP depths (vLLM's InklingMTP; transformers skips `model.mtp.*`): norms of the hidden state and the
    # embedding, input_proj from [hidden; embedding], and a full block with a dense MLP; full attention unless
    # mtp_local_layer_ids names the depth. Embedding and head are the model's.
    local_mtp: set[int] = set(c.int_list("mtp_local_layer_ids") or [])
    n_mtp = c.int0("num_mtp_layers")
    # The chain norm after every depth is one shared module; it is listed with the first depth.
    chain = (Norm(name="chain_norm", size=hidden),) if n_mtp and c.bool("chain_hidden_post_norm") else ()

    def mtp_layer(j: int) -> Layer:
        b = f"layers.{j}.transformer_block"
        return Layer(
            prefix="model.mtp",
            norms=(Norm(name=f"layers.{j}.hidden_norm", size=hidden), Norm(name=f"layers.{j}.embed_norm", size=hidden),
                   *norms(hidden, f"{b}.input_layernorm", f"{b}.post_attention_layernorm"),
                   *(chain if j == 0 else ())),
            mixers=tuple(replace(m, name=f"{b}.self_attn" if isinstance(m, Attention) else b)
                         for m in _mixers(c, geo, j in local_mtp)),
            mlps=(replace(dense, name=f"{b}.mlp"),),
            extra=tuple(linear(f"layers.{j}.input_proj", "other", hidden, 2 * hidden, None)),
        )  # fmt: skip

    return tuple(mtp_layer(j) for j in range(n_mtp))
