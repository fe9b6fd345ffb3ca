"""Step 3.7 (StepFun): GQA attention with per-head q/k norms and a head-wise output gate (`g_proj`, one logit per
query head; per channel when `gating` is not per-head), full-attention layers between sliding-window ones (whose
query-head count may differ: `num_sliding_attention_heads`, or the legacy `attention_other_setting`), the first
layers a dense MLP and the rest a MoE of `n_routed_experts` experts (top `num_experts_per_tok`, width
`moe_intermediate_size`) plus a shared expert of `share_expert_dim`; `num_nextn_predict_layers` MTP layers follow
the decoder layers in the checkpoint.

Two shapes of config.json carry it:
- `Step3p7ForConditionalGeneration` (transformers 5.19's Step3p7Config; vLLM 0.32's Step3p7ForConditionalGeneration):
  the text model in `text_config` (model_type step3p5) and a vision tower (an open_clip-style ViT: a patch conv,
  learned positions, pre-norm blocks with a fused qkv `in_proj` and layer-scale gammas, two stride-2 conv
  downsamplers to 4 × its width) with a linear projector (`vit_large_projector`).
- `Step3p7FlashForCausalLM` (stepfun-ai/Step-3.7-Flash): the text model's fields at the top level and no tower.
  vLLM 0.32 registers no such architecture; transformers' Step3p7Config reads only text_config and vision_config, so
  it builds class defaults for such a file. The fields are read here as Step3p7TextConfig reads them, with the names
  these files use (num_experts, first_k_dense_replace).

Names are the checkpoint's (what transformers' save_pretrained writes back, and vLLM's Step3p7 weight mapper reads):
the text model under `model.`, each layer's MoE under `moe.` with its experts stacked in one tensor per projection
(priced per expert here, as vLLM loads them) and the score correction `moe.router_bias`, the shared expert beside it
(`share_expert`); the tower under `vision_model.`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from launcher.common.records import dataclass
from launcher.model.arch.common import Meta, attention, decoder, text_config
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.hy_v3 import nextn_layer
from launcher.model.arch.layers import MLP, Attention, DenseMLP, Mixer, MoE, shared_experts
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import Tensor, linear, norm, param
from launcher.model.arch.towers import Tower

# step3p5 (Step 3.5's own configs, which vLLM reads with its Step3p5Config names) is not claimed: only the text
# config nested in a step3p7 one is read as transformers' Step3p7TextConfig (model_type step3p5).
MODEL_TYPES = ("step3p7",)

_TEXT = dict(vocab_size=128815, hidden_size=4096, intermediate_size=11264, num_hidden_layers=45, num_attention_heads=64,
             num_key_value_heads=8, head_dim=128, max_position_embeddings=128000, tie_word_embeddings=False,
             num_experts_per_tok=8, moe_intermediate_size=1280, n_routed_experts=288, share_expert_dim=1280,
             sliding_window=None, attention_bias=False, mlp_bias=False, num_nextn_predict_layers=0)  # fmt: skip
DEFAULTS: dict[str, dict[str, Any]] = {"step3p7": dict(_TEXT, projector_bias=False), "step3p5": _TEXT}
_TEXT_NAMES = {"num_local_experts": "n_routed_experts", "moe_num_experts": "n_routed_experts",
               "num_experts": "n_routed_experts", "moe_top_k": "num_experts_per_tok",
               "num_attention_groups": "num_key_value_heads", "share_expert_dims": "share_expert_dim",
               "num_mtp_layers": "num_nextn_predict_layers"}  # fmt: skip
ATTRIBUTE_MAP: dict[str, dict[str, str]] = {"step3p7": _TEXT_NAMES, "step3p5": _TEXT_NAMES}
VISION_DEFAULTS: dict[str, Any] = dict(hidden_size=1536, num_hidden_layers=47, num_channels=3, image_size=728,
                                       patch_size=14, mlp_ratio=8960 / 1536)  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class Step3p7Vision(Tower):
    """Step 3.7's ViT, its downsamplers and projector, under the checkpoint's names."""

    hidden: int
    intermediate: int
    num_layers: int
    channels: int
    patch_size: int
    image_size: int
    out_hidden: int
    projector_bias: bool = False
    prefix: str = "vision_model"

    @property
    def patches_per_item(self) -> int:
        return (self.image_size // self.patch_size) ** 2

    @property
    def tokens_per_item(self) -> int:
        return self.patches_per_item // 16  # two stride-2 downsamplers

    def tensors(self) -> list[Tensor]:
        hv, iv, p = self.hidden, self.intermediate, self.prefix
        ts = [Tensor(f"{p}.conv1.weight", "vision", "conv", (hv, self.channels, self.patch_size, self.patch_size)),
              *param(f"{p}.positional_embedding", "vision", (self.patches_per_item, hv), None, role="position"),
              *norm(f"{p}.ln_pre", hv, None, part="vision", bias=True)]  # fmt: skip
        for i in range(self.num_layers):
            q = f"{p}.transformer.resblocks.{i}"
            ts += norm(f"{q}.ln_1", hv, None, part="vision", bias=True)
            ts += [Tensor(f"{q}.attn.in_proj_weight", "vision", "linear", (3 * hv, hv)),
                   Tensor(f"{q}.attn.in_proj_bias", "vision", "bias", (3 * hv,))]  # fmt: skip
            ts += linear(f"{q}.attn.out_proj", "vision", hv, hv, None, bias=True)
            ts += norm(f"{q}.ln_2", hv, None, part="vision", bias=True)
            ts += linear(f"{q}.mlp.c_fc", "vision", iv, hv, None, bias=True)
            ts += linear(f"{q}.mlp.c_proj", "vision", hv, iv, None, bias=True)
            ts += param(f"{q}.ls_1.gamma", "vision", (hv,), None) + param(f"{q}.ls_2.gamma", "vision", (hv,), None)
        for j, (c_in, c_out) in enumerate(((hv, 2 * hv), (2 * hv, 4 * hv)), start=1):
            ts += [Tensor(f"{p}.vit_downsampler{j}.weight", "vision", "conv", (c_out, c_in, 3, 3)),
                   Tensor(f"{p}.vit_downsampler{j}.bias", "vision", "bias", (c_out,))]  # fmt: skip
        return ts + linear("vit_large_projector", "vision", self.out_hidden, 4 * hv, None, bias=self.projector_bias)


@dataclass(frozen=True, kw_only=True)
class StepMoE(MoE):
    """Step's MoE as its checkpoint holds it: `moe.gate` (router), `moe.router_bias` (the score correction, a buffer),
    the experts' gate/up/down projections stacked per layer under `moe.`, and the shared expert `share_expert` in
    the layer itself."""

    def tensors(self, prefix: str, layer: int | None) -> list[Tensor]:
        p, h, e, i = f"{prefix}.{self.name}", self.hidden, self.num_experts, self.expert_intermediate
        ts = linear(f"{p}.gate", "experts", e, h, layer, gguf="ffn_gate_inp", detail="router", role="router")
        ts.append(Tensor(f"{p}.router_bias", "experts", "buffer", (e,), 1, layer, "exp_probs_b", "router"))
        for proj, shape, gguf in (("gate_proj", (i, h), "ffn_gate_exps"), ("up_proj", (i, h), "ffn_up_exps"),
                                  ("down_proj", (h, i), "ffn_down_exps")):  # fmt: skip
            ts += linear(f"{p}.{proj}", "experts", *shape, layer, gguf=gguf, detail="routed_experts", copies=e,
                         role="expert")  # fmt: skip
        if self.shared is not None:
            ts += self.shared.tensors(prefix, layer)
        return ts


def padded(c: Cfg, key: str, n: int, n_mtp: int) -> tuple[list[str] | None, list[str] | None]:
    """A per-layer list (layer_types, mlp_layer_types) and its tail for the MTP layers, when the list is padded
    with them (Step3p7TextConfig.__post_init__)."""
    raw = c.list(key) if c.has(key) else None
    if raw is None:
        return None, None
    if len(raw) < n:
        raise c.error(f"has {len(raw)} entries for {n} layers", key)
    values = [str(v) for v in raw]
    return values[:n], values[n : n + n_mtp] if len(values) >= n + n_mtp and n_mtp else None


def mlp_kinds(c: Cfg, n: int, n_mtp: int) -> list[str]:
    """ "sparse" or "dense" for the decoder and then the MTP layers: mlp_layer_types, else the legacy
    moe_layers_enum, else first_k_dense_replace (these files' name), else sparse from layer 3 on."""
    main, tail = padded(c, "mlp_layer_types", n, n_mtp)
    if main is not None:
        bad = [t for t in main if t not in ("sparse", "dense")]
        if bad:
            raise c.error(f"unknown MLP type {bad[0]!r}; known: sparse, dense", "mlp_layer_types")
        return main + (tail or ["sparse"] * n_mtp)
    enum = c.get("moe_layers_enum")
    if enum is not None:
        items = enum.split(",") if isinstance(enum, str) else enum if isinstance(enum, list) else None
        if items is None or not all(str(i).strip().isdigit() for i in items if str(i).strip()):
            raise c.error("must be a comma-separated string or a list of layer indices", "moe_layers_enum")
        moe = {int(i) for i in items if str(i).strip()}
        return ["sparse" if i in moe or i >= n else "dense" for i in range(n + n_mtp)]
    first = c.int0("first_k_dense_replace") if c.has("first_k_dense_replace") else 3
    return ["sparse" if i >= first else "dense" for i in range(n + n_mtp)]


def _attention(c: Cfg, hidden: int, kind: str) -> Attention:
    heads = c.int("num_attention_heads")
    if kind == "sliding_attention":
        other = c.sub("attention_other_setting")
        legacy = other.int("num_attention_heads") if other.has("num_attention_heads") else heads
        heads = c.opt_int("num_sliding_attention_heads") or legacy
    kv, d, bias = c.int("num_key_value_heads"), c.int("head_dim"), c.bool("attention_bias")
    c.heads_divide(heads, kv)
    gating = c.get("gating", True)
    # The output gate g_proj: one logit per query head ("per-head", transformers' default), else per channel.
    gate = linear("g_proj", "attention", heads if gating is True or gating == "per-head" else heads * d, hidden, None)
    return attention(kind, window=c.opt_int("sliding_window"), c=c, hidden=hidden, heads=heads, kv_heads=kv,
                     head_dim=d, qkv_bias=bias, o_bias=bias, qk_norm="head", extra=tuple(gate))  # fmt: skip


def read_text(c: Cfg, meta: Meta, base: str) -> Model:
    hidden, n = c.int("hidden_size"), c.int("num_hidden_layers")
    n_mtp = c.int0("num_nextn_predict_layers")
    kinds, mtp_kinds = padded(c, "layer_types", n, n_mtp)
    kinds = kinds or ["full_attention"] * n
    attn = {k: _attention(c, hidden, k) for k in {*kinds, *(mtp_kinds or ["full_attention"])}}
    mlps = mlp_kinds(c, n, n_mtp)
    moe_inter = c.int("moe_intermediate_size")
    shared = shared_experts(hidden, c.int("share_expert_dim"), name="share_expert", bias=c.bool("mlp_bias"))
    moe = StepMoE(hidden=hidden, num_experts=c.int("n_routed_experts"), experts_per_token=c.int("num_experts_per_tok"),
                  expert_intermediate=moe_inter, name="moe", shared=shared)  # fmt: skip
    dense = DenseMLP(hidden=hidden, inter=c.int("intermediate_size"), bias=c.bool("mlp_bias"), detail="dense_first")

    def parts(i: int) -> tuple[Mixer, MLP]:
        return attn[kinds[i]], moe if mlps[i] == "sparse" else dense

    layer_norms = ("input_layernorm", "post_attention_layernorm")
    mtp = tuple(
        nextn_layer(f"{base}.layers.{n + j}", hidden, attn[(mtp_kinds or ["full_attention"] * n_mtp)[j]],
                    moe if mlps[n + j] == "sparse" else dense, layer_norms=layer_norms, final_norm="shared_head.norm")
        for j in range(n_mtp)
    )  # fmt: skip
    return decoder(c, meta, parts=parts, rotary_dim=c.int("head_dim"), prefix=f"{base}.layers",
                   embed=f"{base}.embed_tokens", final_norm=f"{base}.norm", mtp_layers=mtp)  # fmt: skip


def vision(top: Cfg, out_hidden: int) -> Step3p7Vision:
    v = top.sub("vision_config", VISION_DEFAULTS)
    hidden = v.int("width") if v.has("width") else v.int("hidden_size")
    layers = v.int("layers") if v.has("layers") else v.int("num_hidden_layers")
    return Step3p7Vision(hidden=hidden, intermediate=int(hidden * v.float("mlp_ratio")), num_layers=layers,
                         channels=v.int("num_channels"), patch_size=v.int("patch_size"),
                         image_size=v.int("image_size"), out_hidden=out_hidden,
                         projector_bias=top.bool("projector_bias"))  # fmt: skip


def read(c: Cfg, meta: Meta) -> Model:
    if "text_config" not in c.raw:
        return read_text(c, meta, "model")
    top = c
    c, meta = text_config(top, meta, "step3p5", DEFAULTS["step3p5"], aliases=ATTRIBUTE_MAP["step3p5"])
    text = read_text(c, meta, "model")
    return dataclasses.replace(text, towers=(vision(top, text.hidden_size),), defaults_used=tuple(sorted(c.used)))
