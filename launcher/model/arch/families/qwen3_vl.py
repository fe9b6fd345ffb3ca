"""Qwen3-VL and Qwen3-VL-MoE: a Qwen3 language model (per-head q/k norms; the MoE has no shared expert) under
`model.language_model`, and a ViT under `model.visual`: a 3-D patch conv, a learned position grid, LayerNorm
blocks, a 2×2 patch merger into the text width and, at the `deepstack_visual_indexes` blocks, extra mergers
whose features are added to the first decoder layers' hidden states. The ViT here is shared with Qwen3.5 and
Qwen4-Exp (no deepstack).

The bf16 MoE checkpoints store each layer's experts fused (gate_up_proj E × hidden × 2·inter, down_proj
E × inter × hidden); they are priced here per expert, as vLLM loads them and the quantized checkpoints
store them."""

from __future__ import annotations

from typing import Any

from launcher.common.records import dataclass
from launcher.model.arch.common import Meta, decoder, text_config
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.llama import llama_attention
from launcher.model.arch.families.qwen2_5_vl import Qwen25Vision, vit_block, vit_geometry
from launcher.model.arch.families.qwen3 import qwen3_mlps
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import Tensor, linear, norm, param

MODEL_TYPES = ("qwen3_vl", "qwen3_vl_moe")

DEFAULTS: dict[str, dict[str, Any]] = {
    "qwen3_vl": dict(tie_word_embeddings=False),
    "qwen3_vl_moe": dict(tie_word_embeddings=False),
    "qwen3_vl_text": dict(vocab_size=151936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
                          num_attention_heads=32, num_key_value_heads=32, head_dim=128, attention_bias=False,
                          max_position_embeddings=128000),
    "qwen3_vl_moe_text": dict(vocab_size=151936, hidden_size=2048, intermediate_size=5632, num_hidden_layers=24,
                              num_attention_heads=16, num_key_value_heads=16, head_dim=None, attention_bias=False,
                              decoder_sparse_step=1, moe_intermediate_size=1408, num_experts_per_tok=4,
                              num_experts=60, mlp_only_layers=None, tie_word_embeddings=True,
                              max_position_embeddings=128000),
}  # fmt: skip

# The vision config's class defaults (Qwen3-VL; Qwen3.5 and Qwen4-Exp have no deepstack).
VISION_DEFAULTS: dict[str, Any] = dict(
    depth=27,
    hidden_size=1152,
    intermediate_size=4304,
    in_channels=3,
    patch_size=16,
    temporal_patch_size=2,
    spatial_merge_size=2,
    out_hidden_size=3584,
    num_position_embeddings=2304,
    deepstack_visual_indexes=[8, 16, 24],
)

# transformers' attribute_map of the MoE text config: saved configs hold num_experts as num_local_experts.
TEXT_ATTRIBUTE_MAP: dict[str, str] = {"num_experts": "num_local_experts"}

# vLLM profiles the encoder with the largest image the processor accepts: max_pixels 16777216 (16 px patches).
MAX_PIXELS = 16777216


@dataclass(frozen=True, kw_only=True)
class QwenVision(Qwen25Vision):
    """The Qwen3-VL ViT (and Qwen3.5's, Qwen4-Exp's): Qwen2.5-VL's geometry with a biased patch conv, learned
    positions, LayerNorm blocks with a fused qkv and a plain MLP, a 2×2 merger into the text width, and
    `deepstack` extra mergers."""

    num_positions: int
    deepstack: int
    max_pixels: int = MAX_PIXELS
    prefix: str = "model.visual"

    def merger(self, p: str, *, postshuffle: bool) -> list[Tensor]:
        # merge² neighbouring patches concatenated; deepstack mergers normalise after that concatenation.
        hm = self.hidden * self.merge * self.merge
        return [
            *norm(f"{p}.norm", hm if postshuffle else self.hidden, None, part="vision", bias=True),
            *linear(f"{p}.linear_fc1", "vision", hm, hm, None, bias=True),
            *linear(f"{p}.linear_fc2", "vision", self.out_hidden, hm, None, bias=True),
        ]

    def tensors(self) -> list[Tensor]:
        hv, iv, p = self.hidden, self.intermediate, self.prefix
        k = (self.temporal_patch_size, self.patch_size, self.patch_size)
        ts = [
            Tensor(f"{p}.patch_embed.proj.weight", "vision", "conv", (hv, self.in_channels, *k)),
            Tensor(f"{p}.patch_embed.proj.bias", "vision", "bias", (hv,)),
            *param(f"{p}.pos_embed.weight", "vision", (self.num_positions, hv), None, role="position"),
        ]
        for i in range(self.depth):
            ts += vit_block(f"{p}.blocks.{i}", hv, iv, norm_bias=True, mlp=("linear_fc1", "linear_fc2"))
        ts += self.merger(f"{p}.merger", postshuffle=False)
        for j in range(self.deepstack):
            ts += self.merger(f"{p}.deepstack_merger_list.{j}", postshuffle=True)
        return ts


def vision(top: Cfg, defaults: dict[str, Any], *, deepstack: bool) -> QwenVision:
    """The wrapper's vision tower (transformers builds the class-default one when vision_config is absent)."""
    v = top.sub("vision_config", defaults)
    return QwenVision(**vit_geometry(v), num_positions=v.int("num_position_embeddings"),
                      deepstack=len(v.int_list("deepstack_visual_indexes") or []) if deepstack else 0)  # fmt: skip


def wrapper_tied(top: Cfg, text: Cfg) -> bool:
    """transformers ties the wrapper's lm_head by the top-level flag (default false); a text_config that sets
    it when the top level does not (pre-v5 saves) speaks for the checkpoint."""
    if top.has("tie_word_embeddings"):
        return top.bool("tie_word_embeddings")
    if text.has("tie_word_embeddings"):
        return text.bool("tie_word_embeddings")
    return top.bool("tie_word_embeddings")


def read(c: Cfg, meta: Meta) -> Model:
    is_moe = meta.model_type == "qwen3_vl_moe"
    text_type = f"{meta.model_type}_text"
    top = c
    c, meta = text_config(top, meta, text_type, DEFAULTS[text_type], aliases=TEXT_ATTRIBUTE_MAP if is_moe else None)
    tower = vision(top, VISION_DEFAULTS, deepstack=True)
    hidden = c.int("hidden_size")
    attn = llama_attention(c, hidden, qk_norm="head")
    mlps = qwen3_mlps(c, hidden, c.int("num_hidden_layers"), moe=is_moe)
    base = "model.language_model"
    return decoder(c, meta, parts=lambda i: (attn, mlps[i]), rotary_dim=attn.head_dim, prefix=f"{base}.layers",
                   is_tied=wrapper_tied(top, c), embed=f"{base}.embed_tokens", final_norm=f"{base}.norm",
                   towers=(tower,))  # fmt: skip
