"""Gemma 4: Gemma 3n's attention (per-head q/k norms, weightless v norm, optional KV-shared last layers) in
Gemma 3's five-sliding-to-one-global pattern, where the global layers have their own wider head_dim
(`global_head_dim`, 512 by default) and, with `attention_k_eq_v`, their own KV heads
(`num_global_key_value_heads`) and no v_proj (the keys serve as values). Saved configs spell these per-layer
values out in `per_layer_config`. Optional: per-layer inputs (as Gemma 3n), an MoE block running beside the
dense MLP (a scaled router and fused gate/up experts), and double-wide MLPs on the KV-shared layers.

Checkpoints also carry buffers that transformers does not count as parameters: a one-element `layer_scalar`
per decoder layer (priced here as a buffer), and four scalar clip bounds per clipped linear of the encoders
(the audio encoder's by default; left out: 16 bytes a linear). The multimodal wrapper (model_type gemma4) adds, when
configured, a ViT (2-D position table, Gemma-style layers) and a Conformer audio encoder, each with an
embedder into the text width; its language model lives under `model.language_model.`.
"""

from __future__ import annotations

from typing import Any, ClassVar

from launcher.common.records import dataclass
from launcher.model.arch.common import Meta, build, embed_head, heads, layer_types, text_config, tied
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.gemma2 import GEMMA_NORMS
from launcher.model.arch.families.gemma3n import gemma_attention, kv_sources, per_layer_input
from launcher.model.arch.layers import MLP, DenseMLP, Layer, MoE, Norm, norms
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import Tensor, conv1d, linear, norm, param
from launcher.model.arch.towers import Tower

MODEL_TYPES = ("gemma4_text", "gemma4")

# transformers' Gemma4TextConfig defaults, for the fields read here (global_head_dim and
# num_global_key_value_heads are the __post_init__ defaults of those config.json keys).
TEXT_DEFAULTS: dict[str, Any] = dict(
    vocab_size=262144, hidden_size=2304, intermediate_size=9216, num_hidden_layers=30, num_attention_heads=8,
    num_key_value_heads=4, head_dim=256, tie_word_embeddings=True, attention_bias=False, sliding_window=512,
    use_bidirectional_attention=None, vocab_size_per_layer_input=262144, hidden_size_per_layer_input=256,
    attention_k_eq_v=False, num_kv_shared_layers=0, enable_moe_block=False, use_double_wide_mlp=False,
    num_experts=None, top_k_experts=None, moe_intermediate_size=None, global_head_dim=512,
    num_global_key_value_heads=None, max_position_embeddings=131072,
)  # fmt: skip
DEFAULTS: dict[str, dict[str, Any]] = {"gemma4_text": TEXT_DEFAULTS, "gemma4": dict(tie_word_embeddings=True)}

VISION_DEFAULTS: dict[str, Any] = dict(
    hidden_size=768, intermediate_size=3072, num_hidden_layers=16, num_attention_heads=12, num_key_value_heads=12,
    head_dim=64, pooling_kernel_size=3, patch_size=16, position_embedding_size=10 * 1024,
)  # fmt: skip
AUDIO_DEFAULTS: dict[str, Any] = dict(
    hidden_size=1024, num_hidden_layers=12, num_attention_heads=8, subsampling_conv_channels=[128, 32],
    conv_kernel_size=5, output_proj_dims=1536,
)  # fmt: skip
IMAGE_SOFT_TOKENS = 280  # the image processor's default max_soft_tokens
AUDIO_CLIP_FRAMES = 3000  # 30 s of 10 ms mel frames, the feature extractor's default max_length
PER_LAYER_KEYS = ("head_dim", "num_key_value_heads")  # what transformers reads from per_layer_config


@dataclass(frozen=True, kw_only=True)
class Gemma4MoE(MoE):
    """The MoE block beside the dense MLP: a router (a weightless norm, a learned scale per channel, the
    projection, a scale per expert) and experts whose gate and up are one matrix."""

    dense_intermediate: int  # the dense MLP every token also runs

    def tensors(self, prefix: str, layer: int | None) -> list[Tensor]:
        h, e, i = self.hidden, self.num_experts, self.expert_intermediate
        ts = linear(f"{prefix}.router.proj", "experts", e, h, layer, gguf="ffn_gate_inp", detail="router",
                    role="router")  # fmt: skip
        ts += param(f"{prefix}.router.scale", "experts", (h,), layer, detail="router")
        ts += param(f"{prefix}.router.per_expert_scale", "experts", (e,), layer, detail="router")
        # gate and up stacked: 2·expert width × hidden per expert
        ts += linear(f"{prefix}.experts.gate_up_proj", "experts", 2 * i, h, layer, gguf="ffn_up_exps",
                     detail="routed_experts", copies=e, role="expert")  # fmt: skip
        ts += linear(f"{prefix}.experts.down_proj", "experts", h, i, layer, gguf="ffn_down_exps",
                     detail="routed_experts", copies=e, role="expert")  # fmt: skip
        return ts

    def active_intermediate(self) -> int:
        return self.experts_per_token * self.expert_intermediate + self.dense_intermediate


@dataclass(frozen=True, kw_only=True)
class Gemma4Vision(Tower):
    """Gemma 4's ViT (linear patch embedding, a 2-D learned position table, Gemma-style layers with q/k
    norms) and the embedder that maps its pooled output into the text width."""

    modalities: ClassVar[tuple[str, ...]] = ("image", "video")  # vLLM marks the tower for both

    hidden: int
    intermediate: int
    num_layers: int
    heads: int
    kv_heads: int
    head_dim: int
    patch_size: int
    position_size: int
    pooling: int
    projector_out: int
    prefix: str = "model.vision_tower"

    @property
    def patches_per_item(self) -> int:
        return IMAGE_SOFT_TOKENS * self.pooling**2  # each soft token pools pooling × pooling patches

    def tensors(self) -> list[Tensor]:
        hv, iv, d, p = self.hidden, self.intermediate, self.head_dim, self.prefix
        ts = linear(f"{p}.patch_embedder.input_proj", "vision", hv, 3 * self.patch_size**2, None)  # RGB patch
        # one table per image axis (x, y), each position_size entries wide
        ts += param(f"{p}.patch_embedder.position_embedding_table", "vision", (2, self.position_size, hv), None,
                    role="position")  # fmt: skip
        for i in range(self.num_layers):
            q = f"{p}.encoder.layers.{i}"
            ts += linear(f"{q}.self_attn.q_proj.linear", "vision", self.heads * d, hv, None)
            ts += linear(f"{q}.self_attn.k_proj.linear", "vision", self.kv_heads * d, hv, None)
            ts += linear(f"{q}.self_attn.v_proj.linear", "vision", self.kv_heads * d, hv, None)
            ts += linear(f"{q}.self_attn.o_proj.linear", "vision", hv, self.heads * d, None)
            ts += norm(f"{q}.self_attn.q_norm", d, None, part="vision")
            ts += norm(f"{q}.self_attn.k_norm", d, None, part="vision")
            ts += linear(f"{q}.mlp.gate_proj.linear", "vision", iv, hv, None)
            ts += linear(f"{q}.mlp.up_proj.linear", "vision", iv, hv, None)
            ts += linear(f"{q}.mlp.down_proj.linear", "vision", hv, iv, None)
            for n in GEMMA_NORMS:
                ts += norm(f"{q}.{n}", hv, None, part="vision")
        ts += linear("model.embed_vision.embedding_projection", "vision", self.projector_out, hv, None)
        return ts


@dataclass(frozen=True, kw_only=True)
class Gemma4Audio(Tower):
    """Gemma 4's Conformer audio encoder (two strided 3x3 convs, then layers of two half-step feed-forwards,
    chunked attention with a relative-position key projection, and a gated depthwise conv) with its output
    projection and the embedder into the text width."""

    modalities: ClassVar[tuple[str, ...]] = ("audio",)
    hidden: int
    intermediate: int  # the feed-forwards' width
    num_layers: int
    heads: int
    channels: tuple[int, int]  # subsampling_conv_channels
    conv_kernel: int
    output_dim: int
    projector_out: int
    prefix: str = "model.audio_tower"

    @property
    def patches_per_item(self) -> int:
        return AUDIO_CLIP_FRAMES // 4  # two stride-2 convs

    def tensors(self) -> list[Tensor]:
        h, (c0, c1), p = self.hidden, self.channels, self.prefix
        s = f"{p}.subsample_conv_projection"
        ts = [Tensor(f"{s}.layer0.conv.weight", "vision", "conv", (c0, 1, 3, 3)),  # one mel "channel" in
              Tensor(f"{s}.layer1.conv.weight", "vision", "conv", (c1, c0, 3, 3))]  # fmt: skip
        ts += norm(f"{s}.layer0.norm", c0, None, part="vision")
        ts += norm(f"{s}.layer1.norm", c1, None, part="vision")
        # The input projection reads the flattened (frequency / 4) × channels features after the two convs.
        ts += linear(f"{s}.input_proj_linear", "vision", h, (c0 // 4) * c1, None)
        for i in range(self.num_layers):
            q = f"{p}.layers.{i}"
            for ff in ("feed_forward1", "feed_forward2"):
                ts += linear(f"{q}.{ff}.ffw_layer_1.linear", "vision", self.intermediate, h, None)
                ts += linear(f"{q}.{ff}.ffw_layer_2.linear", "vision", h, self.intermediate, None)
                ts += norm(f"{q}.{ff}.pre_layer_norm", h, None, part="vision")
                ts += norm(f"{q}.{ff}.post_layer_norm", h, None, part="vision")
            for proj in ("q_proj", "k_proj", "v_proj", "post"):
                ts += linear(f"{q}.self_attn.{proj}.linear", "vision", h, h, None)
            ts += linear(f"{q}.self_attn.relative_k_proj", "vision", h, h, None)
            ts += param(f"{q}.self_attn.per_dim_scale", "vision", (h // self.heads,), None)
            ts += linear(f"{q}.lconv1d.linear_start.linear", "vision", 2 * h, h, None)  # value and GLU gate
            ts += linear(f"{q}.lconv1d.linear_end.linear", "vision", h, h, None)
            ts += conv1d(f"{q}.lconv1d.depthwise_conv1d", "vision", h, self.conv_kernel, None, bias=False)
            ts += norm(f"{q}.lconv1d.pre_layer_norm", h, None, part="vision")
            ts += norm(f"{q}.lconv1d.conv_norm", h, None, part="vision")
            for n in ("norm_pre_attn", "norm_post_attn", "norm_out"):
                ts += norm(f"{q}.{n}", h, None, part="vision")
        ts += linear(f"{p}.output_proj", "vision", self.output_dim, h, None, bias=True)
        ts += linear("model.embed_audio.embedding_projection", "vision", self.projector_out, self.output_dim, None)
        return ts


def overrides(c: Cfg, kinds: list[str], head_dim: int, kv: int) -> dict[int, dict[str, int]]:
    """Per-layer head_dim / KV heads: the config's `per_layer_config`, else the global layers' defaults.
    transformers builds the rotary tables per layer kind, so every layer of one kind must agree."""
    raw = c.get("per_layer_config")
    if raw is None:
        full: dict[str, int] = {"head_dim": c.int("global_head_dim")}
        if c.bool("attention_k_eq_v"):
            full_kv = c.opt_int("num_global_key_value_heads")
            if full_kv is not None:
                full["num_key_value_heads"] = full_kv
        return {i: full for i, k in enumerate(kinds) if k == "full_attention"}
    if not isinstance(raw, dict):
        raise c.error("must be an object of layer index -> overrides", "per_layer_config")
    out: dict[int, dict[str, int]] = {}
    for key, values in raw.items():
        idx = int(key) if isinstance(key, str) and key.isdigit() else -1
        if not 0 <= idx < len(kinds) or not isinstance(values, dict):
            raise c.error(f"entry {key!r} is not a layer index below {len(kinds)} with an object", "per_layer_config")
        sub = Cfg(values, source=c.source, path=f"{c.path}per_layer_config.{key}.", used=c.used)
        unknown = sorted(set(values) - set(PER_LAYER_KEYS))
        if unknown:
            raise sub.error(f"transformers reads only {', '.join(PER_LAYER_KEYS)} per layer", unknown[0])
        globals_ = {"head_dim": head_dim, "num_key_value_heads": kv}
        out[idx] = {k: sub.int(k) for k in values if sub.int(k) != globals_[k]}
    for kind in set(kinds):
        seen = {tuple(sorted(out.get(i, {}).items())) for i, k in enumerate(kinds) if k == kind}
        if len(seen) > 1:
            raise c.error(f"the {kind} layers differ; transformers needs one set of values per layer kind",
                          "per_layer_config")  # fmt: skip
    return out


def encoders(top: Cfg, text_hidden: int) -> list[Tower]:
    out: list[Tower] = []
    if isinstance(top.raw.get("vision_config"), dict):
        v = top.sub("vision_config", VISION_DEFAULTS)
        out.append(
            Gemma4Vision(
                hidden=v.int("hidden_size"), intermediate=v.int("intermediate_size"),
                num_layers=v.int("num_hidden_layers"), heads=v.int("num_attention_heads"),
                kv_heads=v.int("num_key_value_heads"),
                head_dim=v.opt_int("head_dim") or v.int("hidden_size") // v.int("num_attention_heads"),
                patch_size=v.int("patch_size"), position_size=v.int("position_embedding_size"),
                pooling=v.int("pooling_kernel_size"), projector_out=text_hidden,
            )
        )  # fmt: skip
    if isinstance(top.raw.get("audio_config"), dict):
        a = top.sub("audio_config", AUDIO_DEFAULTS)
        channels = a.int_list("subsampling_conv_channels") or []
        if len(channels) != 2:
            raise a.error("needs two channel counts", "subsampling_conv_channels")
        out.append(
            Gemma4Audio(
                hidden=a.int("hidden_size"), intermediate=4 * a.int("hidden_size"),  # feed-forwards are 4x wide
                num_layers=a.int("num_hidden_layers"),
                heads=a.int("num_attention_heads"), channels=(channels[0], channels[1]),
                conv_kernel=a.int("conv_kernel_size"), output_dim=a.int("output_proj_dims"),
                projector_out=text_hidden,
            )
        )  # fmt: skip
    return out


def read(c: Cfg, meta: Meta) -> Model:
    base, top = "model.", None
    if meta.model_type == "gemma4":
        top = c
        c, meta = text_config(c, meta, "gemma4_text", TEXT_DEFAULTS)
        base = "model.language_model."  # Gemma4ForConditionalGeneration's checkpoints
    vocab, hidden, inter = c.int("vocab_size"), c.int("hidden_size"), c.int("intermediate_size")
    n, kv, d = heads(c)
    num_layers = c.int("num_hidden_layers")
    kinds = _kinds(c, num_layers)
    shared = c.int0("num_kv_shared_layers")
    if shared >= num_layers:
        raise c.error(f"must leave at least one of the {num_layers} layers its own KV", "num_kv_shared_layers")
    sources = kv_sources(c, kinds)
    per_layer = overrides(c, kinds, d, kv)
    window = _window(c)
    bias, k_eq_v = c.bool("attention_bias"), c.bool("attention_k_eq_v")
    double_wide = c.bool("use_double_wide_mlp")
    width = c.int0("hidden_size_per_layer_input")
    moe = _moe(c, hidden, inter)
    moe_norms = ("post_feedforward_layernorm_1", "post_feedforward_layernorm_2", "pre_feedforward_layernorm_2")
    is_tied = tied(c, meta)
    layers = []
    for i in range(num_layers):
        layer_d = per_layer.get(i, {}).get("head_dim", d)
        layer_kv = per_layer.get(i, {}).get("num_key_value_heads", kv)
        c.heads_divide(n, layer_kv, "per_layer_config" if i in per_layer else "num_key_value_heads")
        mixer = gemma_attention(c, kinds[i], window, hidden=hidden, heads=n, kv_heads=layer_kv, head_dim=layer_d,
                                qkv_bias=bias, o_bias=bias, shares_kv_with=sources[i],
                                k_eq_v=k_eq_v and kinds[i] != "sliding_attention")  # fmt: skip
        # KV-shared layers get an MLP twice as wide when use_double_wide_mlp is set.
        wide = 2 if double_wide and sources[i] is not None else 1
        mlps: tuple[MLP, ...] = (DenseMLP(hidden=hidden, inter=inter * wide),)
        layer_norms = norms(hidden, *GEMMA_NORMS)
        if moe is not None:
            mlps += (moe,)
            layer_norms += tuple(Norm(name=nm, size=hidden) for nm in moe_norms)
        # The layer's output scale: a one-element buffer, saved with the layer but not a parameter.
        extra: tuple[Tensor, ...] = (Tensor("layer_scalar", "other", "buffer", (1,)),)
        if width:
            layer_norms += (Norm(name="post_per_layer_input_norm", size=hidden),)
            extra += per_layer_input(hidden, width)
        layers.append(Layer(prefix=f"{base}layers.{i}", norms=layer_norms, mixers=(mixer,), mlps=mlps, extra=extra))
    embeddings, head = embed_head(vocab, hidden, is_tied, embed=f"{base}embed_tokens", final_norm=f"{base}norm")
    table, model_extra = _per_layer_inputs(c, base, num_layers, width, hidden) if width else ((), [])
    embeddings += table
    return build(c, meta, vocab=vocab, hidden=hidden, layers=layers, is_tied=is_tied, embeddings=embeddings,
                 head=head, rotary_dim=d, extra=tuple(model_extra),
                 towers=tuple(encoders(top, hidden)) if top is not None else ())  # fmt: skip


def _kinds(c: Cfg, num_layers: int) -> list[str]:
    """Each layer's attention: `layer_types`, else five sliding layers to one full; the last one full."""
    kinds = layer_types(c, num_layers, lambda i: "sliding_attention" if (i + 1) % 6 else "full_attention")
    if len(c.list("layer_types") or kinds) == num_layers:
        kinds[-1] = "full_attention"  # transformers forces the last layer global
    return kinds


def _window(c: Cfg) -> int | None:
    """The sliding window, as the bound transformers applies."""
    window = c.opt_int("sliding_window")
    if window and c.get("use_bidirectional_attention") == "all":
        window = window // 2 + 1  # transformers' exclusive bound for bidirectional sliding attention
    return window


def _moe(c: Cfg, hidden: int, inter: int) -> Gemma4MoE | None:
    """The MoE block every layer adds to its dense MLP (enable_moe_block), else None."""
    if not c.bool("enable_moe_block"):
        return None
    return Gemma4MoE(
        hidden=hidden, num_experts=c.int("num_experts"), experts_per_token=c.int("top_k_experts"),
        expert_intermediate=c.int("moe_intermediate_size"), name="", dense_intermediate=inter,
    )  # fmt: skip


def _per_layer_inputs(
    c: Cfg, base: str, num_layers: int, width: int, hidden: int
) -> tuple[tuple[Tensor, ...], list[Tensor]]:
    """The per-layer inputs' embedding table, and the model's tensors that project and normalise them."""
    # Per-layer inputs: a table of width × layers per token, plus the same width projected from the main
    # embedding, normalised per layer slice.
    table = (Tensor(f"{base}embed_tokens_per_layer.weight", "embedding", "embedding",
                    (c.int("vocab_size_per_layer_input"), num_layers * width)),)  # fmt: skip
    model_extra: list[Tensor] = []
    model_extra += linear(f"{base}per_layer_model_projection", "other", num_layers * width, hidden, None)
    model_extra += norm(f"{base}per_layer_projection_norm", width, None)
    return table, model_extra
