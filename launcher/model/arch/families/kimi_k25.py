"""Kimi K2.5 / K2.6 / K2.7 (KimiK25ForConditionalGeneration): Kimi K2's DeepSeek-V3 language model (`text_config`,
model_type kimi_k2 or deepseek_v3) under `language_model.`, a MoonViT vision tower (`vision_tower.`) and a
patch-merging projector (`mm_projector.`). Home of the MoonViT tower, which Kimi K3 shares.

MoonViT (vLLM's kimi_k25_vit.py): a patch conv, a learned height × width position grid, pre-norm blocks with one
fused qkv projection (`wqkv`, q/k/v each `qkv_hidden_size` wide) and `wo`, a two-layer MLP (fc0, fc1), a final norm.
K2.5's blocks are LayerNorm with biases; K3's are RMSNorm without biases, its qkv 1536 wide. The projector
concatenates merge_h × merge_w neighbouring patches: K2.5's `patchmerger` LayerNorms each patch then runs two biased
linears (`proj.0`, `proj.2` in the checkpoint) into the text width; K3's `patchmergerv2` has no biases and an RMSNorm
after (post_norm).

transformers' Kimi_K25VisionConfig (and so vLLM, which reads K2.5 with it) names the tower's sizes hidden_size,
num_hidden_layers…; the released configs name them vt_hidden_size, vt_num_hidden_layers… (the remote code's names),
read here when the former are absent.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from launcher.common.records import dataclass
from launcher.model.arch.common import Meta, text_config, under
from launcher.model.arch.config import Cfg
from launcher.model.arch.families import deepseek_v3
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import Tensor, linear, norm, param
from launcher.model.arch.towers import Tower

MODEL_TYPES = ("kimi_k25",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "kimi_k25": dict(tie_word_embeddings=True),  # Kimi_K25Config's; the released configs set false
    "deepseek_v3": deepseek_v3.DEFAULTS["deepseek_v3"],
}

# Kimi_K25VisionConfig's defaults, by the names the released configs use for them.
VISION_DEFAULTS: dict[str, Any] = dict(
    patch_size=14, init_pos_emb_height=64, init_pos_emb_width=64, vt_num_attention_heads=16, vt_num_hidden_layers=27,
    vt_hidden_size=1152, vt_intermediate_size=4304, merge_kernel_size=[2, 2],
)  # fmt: skip

# vLLM profiles the encoder with a 3000 × 3000 image (kimi_k25.py MaxImageTokenMeta).
MAX_SIDE = 3000


@dataclass(frozen=True, kw_only=True)
class MoonViT(Tower):
    """Kimi's MoonViT and its projector, under the checkpoint's names."""

    modalities: ClassVar[tuple[str, ...]] = ("vision_chunk",)  # vLLM's modality for images and video chunks
    hidden: int
    intermediate: int
    num_layers: int
    patch_size: int
    pos_grid: tuple[int, int]
    merge: tuple[int, int]
    out_hidden: int  # the text hidden size
    qkv_hidden: int
    rms: bool = False  # RMSNorm blocks (K3) rather than LayerNorm
    attn_bias: bool = True
    linear_bias: bool = True
    patch_bias: bool = True
    projector_v2: bool = False  # patchmergerv2: no biases, an RMSNorm after
    prefix: str = "vision_tower"

    @property
    def patches_per_item(self) -> int:
        return (MAX_SIDE // self.patch_size) ** 2

    @property
    def tokens_per_item(self) -> int:
        return self.patches_per_item // (self.merge[0] * self.merge[1])

    def _norm(self, name: str) -> list[Tensor]:
        return norm(name, self.hidden, None, part="vision", bias=not self.rms)

    def tensors(self) -> list[Tensor]:
        hv, p, q = self.hidden, self.prefix, self.qkv_hidden
        ts = [Tensor(f"{p}.patch_embed.proj.weight", "vision", "conv", (hv, 3, self.patch_size, self.patch_size))]
        if self.patch_bias:
            ts.append(Tensor(f"{p}.patch_embed.proj.bias", "vision", "bias", (hv,)))
        ts += param(f"{p}.patch_embed.pos_emb.weight", "vision", (*self.pos_grid, hv), None, role="position")
        for i in range(self.num_layers):
            b = f"{p}.encoder.blocks.{i}"
            ts += self._norm(f"{b}.norm0") + self._norm(f"{b}.norm1")
            ts += linear(f"{b}.wqkv", "vision", 3 * q, hv, None, bias=self.attn_bias)
            ts += linear(f"{b}.wo", "vision", hv, q, None, bias=self.attn_bias)
            ts += linear(f"{b}.mlp.fc0", "vision", self.intermediate, hv, None, bias=self.linear_bias)
            ts += linear(f"{b}.mlp.fc1", "vision", hv, self.intermediate, None, bias=self.linear_bias)
        ts += self._norm(f"{p}.encoder.final_layernorm")
        return ts + self._projector()

    def _projector(self) -> list[Tensor]:
        hm = self.hidden * self.merge[0] * self.merge[1]
        bias = not self.projector_v2
        ts = [] if self.projector_v2 else norm("mm_projector.pre_norm", self.hidden, None, part="vision", bias=True)
        ts += linear("mm_projector.proj.0", "vision", hm, hm, None, bias=bias)
        ts += linear("mm_projector.proj.2", "vision", self.out_hidden, hm, None, bias=bias)
        if self.projector_v2:
            ts += norm("mm_projector.post_norm", self.out_hidden, None, part="vision")
        return ts


def _vision_int(v: Cfg, key: str) -> int:
    """A tower size by transformers' name (hidden_size) or, absent, the released configs' (vt_hidden_size)."""
    return v.int(key) if v.has(key) else v.int("vt_" + key)


def moonvit(top: Cfg, out_hidden: int, defaults: dict[str, Any], **kw: Any) -> MoonViT:
    """The wrapper's MoonViT from its vision_config; `kw` what the variant fixes (K3's RMSNorm, no biases)."""
    v = top.sub("vision_config", defaults)
    hidden = _vision_int(v, "hidden_size")
    merge = v.int_list("merge_kernel_size") or [2, 2]
    if len(merge) != 2 or min(merge) <= 0:
        raise v.error("must be two positive integers", "merge_kernel_size")
    heights = [v.int(k) for k in ("pos_emb_height", "init_pos_emb_height") if v.has(k)]
    widths = [v.int(k) for k in ("pos_emb_width", "init_pos_emb_width") if v.has(k)]
    return MoonViT(
        hidden=hidden, intermediate=_vision_int(v, "intermediate_size"), num_layers=_vision_int(v, "num_hidden_layers"),
        patch_size=v.int("patch_size"), merge=(merge[0], merge[1]), out_hidden=out_hidden,
        pos_grid=(heights[-1] if heights else 64, widths[-1] if widths else 64),
        qkv_hidden=v.opt_int("qkv_hidden_size") or hidden, **kw,
    )  # fmt: skip


def read(c: Cfg, meta: Meta) -> Model:
    top = c
    inner = c.sub("text_config").raw.get("model_type")
    # transformers reads kimi_k2 as deepseek_v3 (Kimi_K25Config.__post_init__); vLLM reads both with DeepseekV3Config.
    text_type = inner if inner in ("kimi_k2", "deepseek_v3") else "deepseek_v3"
    c, meta = text_config(top, meta, text_type, DEFAULTS["deepseek_v3"],
                          aliases=deepseek_v3.ATTRIBUTE_MAP["deepseek_v3"])  # fmt: skip
    text = under(deepseek_v3.read(c, meta), "language_model.")
    tower = moonvit(top, text.hidden_size, VISION_DEFAULTS)
    return dataclasses.replace(text, towers=(tower,), defaults_used=tuple(sorted(c.used)))
