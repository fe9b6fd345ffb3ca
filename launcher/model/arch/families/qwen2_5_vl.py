"""Qwen2.5-VL: a Qwen2 language model (q/k/v biases, no o bias, head_dim = hidden / heads; sliding layers from
`max_window_layers` on when `use_sliding_window`) and a ViT with RMSNorm blocks, a biased SwiGLU MLP, no
learned positions (2-D rotary, windowed attention in most blocks), and an RMSNorm + 2-layer MLP merger of 2×2
patches into the text width. Hub configs are often flat: the text fields at the top level beside
vision_config, which transformers moves into text_config. Checkpoints keep the pre-v5 names (`model.layers`,
`visual.blocks`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

from launcher.common.records import dataclass
from launcher.model.arch.common import Meta, attention, decoder, text_config
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.qwen2 import sliding_kinds
from launcher.model.arch.layers import DenseMLP
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import Tensor, linear, norm
from launcher.model.arch.towers import Tower

MODEL_TYPES = ("qwen2_5_vl",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "qwen2_5_vl": dict(tie_word_embeddings=False),
    "qwen2_5_vl_text": dict(vocab_size=152064, hidden_size=8192, intermediate_size=29568, num_hidden_layers=80,
                            num_attention_heads=64, num_key_value_heads=8, use_sliding_window=False,
                            sliding_window=4096, max_window_layers=80, layer_types=None,
                            max_position_embeddings=32768),
}  # fmt: skip

VISION_DEFAULTS: dict[str, Any] = dict(
    depth=32,
    hidden_size=3584,
    intermediate_size=3420,
    in_channels=3,
    patch_size=14,
    temporal_patch_size=2,
    spatial_merge_size=2,
    out_hidden_size=3584,
)

# vLLM profiles the encoder with the largest image the processor accepts: max_pixels 12845056 (14 px patches).
MAX_PIXELS = 12845056


def vit_block(q: str, hidden: int, inter: int, *, norm_bias: bool, mlp: tuple[str, ...]) -> list[Tensor]:
    """One block of the Qwen ViTs (shared with Qwen3-VL's): two norms, a fused qkv and proj, and the MLP's
    projections `mlp` (the ones out of the hidden size, then the one back), every linear biased."""
    ts = norm(f"{q}.norm1", hidden, None, part="vision", bias=norm_bias)
    ts += norm(f"{q}.norm2", hidden, None, part="vision", bias=norm_bias)
    ts += linear(f"{q}.attn.qkv", "vision", 3 * hidden, hidden, None, bias=True)  # q, k and v in one matrix
    ts += linear(f"{q}.attn.proj", "vision", hidden, hidden, None, bias=True)
    for name in mlp[:-1]:
        ts += linear(f"{q}.mlp.{name}", "vision", inter, hidden, None, bias=True)
    ts += linear(f"{q}.mlp.{mlp[-1]}", "vision", hidden, inter, None, bias=True)
    return ts


def vit_geometry(v: Cfg) -> dict[str, Any]:
    """The fields of Qwen25Vision (and of Qwen3-VL's QwenVision) from a vision_config."""
    return dict(hidden=v.int("hidden_size"), intermediate=v.int("intermediate_size"), depth=v.int("depth"),
                in_channels=v.int("in_channels"), patch_size=v.int("patch_size"),
                temporal_patch_size=v.int("temporal_patch_size"), merge=v.int("spatial_merge_size"),
                out_hidden=v.int("out_hidden_size"))  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class Qwen25Vision(Tower):
    """The Qwen2.5-VL ViT: a bias-free patch conv over (time, h, w), RMSNorm blocks with a fused biased qkv and a
    biased SwiGLU MLP, and the merger (RMSNorm, then merge² patches through two linears into the text width).
    Its geometry fields are Qwen3-VL's too (QwenVision extends it)."""

    modalities: ClassVar[tuple[str, ...]] = ("image", "video")  # vLLM marks the tower for both

    hidden: int
    intermediate: int
    depth: int
    in_channels: int
    patch_size: int
    temporal_patch_size: int
    merge: int  # spatial_merge_size: merge × merge patches become one text token
    out_hidden: int
    max_pixels: int = MAX_PIXELS
    prefix: str = "visual"

    @property
    def patches_per_item(self) -> int:
        return self.max_pixels // (self.patch_size * self.patch_size)

    @property
    def tokens_per_item(self) -> int:
        return self.patches_per_item // (self.merge * self.merge)  # merge × merge patches per text token

    def tensors(self) -> list[Tensor]:
        hv, iv, p = self.hidden, self.intermediate, self.prefix
        k = (self.temporal_patch_size, self.patch_size, self.patch_size)
        ts = [Tensor(f"{p}.patch_embed.proj.weight", "vision", "conv", (hv, self.in_channels, *k))]
        for i in range(self.depth):
            ts += vit_block(f"{p}.blocks.{i}", hv, iv, norm_bias=False, mlp=("gate_proj", "up_proj", "down_proj"))
        hm = hv * self.merge * self.merge  # merge² neighbouring patches concatenated
        ts += norm(f"{p}.merger.ln_q", hv, None, part="vision")
        ts += linear(f"{p}.merger.mlp.0", "vision", hm, hm, None, bias=True)
        ts += linear(f"{p}.merger.mlp.2", "vision", self.out_hidden, hm, None, bias=True)
        return ts


def read(c: Cfg, meta: Meta) -> Model:
    top = c
    if top.has("text_config"):
        c, meta = text_config(top, meta, "qwen2_5_vl_text", DEFAULTS["qwen2_5_vl_text"])
        # pre-v5 saves kept tie_word_embeddings in text_config: transformers ties when either level says so
        is_tied = top.bool("tie_word_embeddings")
        if not is_tied and c.has("tie_word_embeddings"):
            is_tied = c.bool("tie_word_embeddings")
    else:
        # a flat hub config: transformers builds text_config from the top-level fields
        c = Cfg(top.raw, DEFAULTS["qwen2_5_vl_text"], source=top.source, used=top.used)
        meta = replace(meta, model_type="qwen2_5_vl_text", wrapper_type=meta.model_type)
        is_tied = top.bool("tie_word_embeddings")
    tower = Qwen25Vision(**vit_geometry(top.sub("vision_config", VISION_DEFAULTS)))
    hidden = c.int("hidden_size")
    n = c.int("num_attention_heads")
    kv = c.opt_int("num_key_value_heads") or n
    c.heads_divide(n, kv)
    if hidden % n:  # head_dim is always hidden / heads here, and transformers refuses a remainder
        raise c.error(f"hidden_size {hidden} is not a multiple of num_attention_heads {n}", "num_attention_heads")
    d = hidden // n
    # transformers drops the window unless use_sliding_window; without one a "sliding" layer sees everything
    window, kinds = sliding_kinds(c, c.int("num_hidden_layers"))
    attn = {k: attention(k, window=window, c=c, hidden=hidden, heads=n, kv_heads=kv, head_dim=d, qkv_bias=True)
            for k in set(kinds)}  # fmt: skip
    mlp = DenseMLP(hidden=hidden, inter=c.int("intermediate_size"))
    return decoder(c, meta, parts=lambda i: (attn[kinds[i]], mlp), rotary_dim=d, is_tied=is_tied, towers=(tower,))
