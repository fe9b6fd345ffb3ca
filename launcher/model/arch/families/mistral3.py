"""Mistral 3 (Mistral-Small-3.1 / 3.2, the Ministral-3 releases): a Mistral or Ministral 3 language model
behind a Pixtral vision encoder (2-D RoPE transformer with RMSNorms and SwiGLU MLPs, no biases) and a
projector that merges each 2x2 block of patches before two linears into the text width.

Checkpoints keep the pre-5.0 names (`language_model.model.*`, `language_model.lm_head`, `vision_tower.*`,
`multi_modal_projector.*`), and so do our tensors. The output head follows the language model's
`tie_word_embeddings` (as vLLM, which builds the text model from text_config); transformers' full
Mistral3ForConditionalGeneration instead follows the top-level flag, whose class default is True, so for a
config that sets the two differently transformers' whole-model count omits the lm_head that vLLM loads.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from launcher.common.records import dataclass
from launcher.model.arch.common import Meta, text_config, under
from launcher.model.arch.config import Cfg
from launcher.model.arch.families import ministral3, mistral
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import Tensor, linear, norm
from launcher.model.arch.towers import Tower

MODEL_TYPES = ("mistral3",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "mistral3": dict(tie_word_embeddings=True, spatial_merge_size=2, multimodal_projector_bias=False,
                     vision_feature_layer=-1),
}  # fmt: skip

# Mistral3Config builds these when text_config / vision_config are absent (Mistral-Small-3.1's shapes); a
# sub-config that is present starts from its own class defaults instead.
TEXT_WHEN_ABSENT: dict[str, Any] = dict(
    vocab_size=131072, hidden_size=5120, intermediate_size=32768, num_hidden_layers=40, num_attention_heads=32,
    num_key_value_heads=8, head_dim=128, tie_word_embeddings=False, sliding_window=None,
    max_position_embeddings=131072,
)  # fmt: skip
PIXTRAL_WHEN_ABSENT: dict[str, Any] = dict(
    hidden_size=1024,
    intermediate_size=4096,
    num_hidden_layers=24,
    num_attention_heads=16,
    num_channels=3,
    image_size=1540,
    patch_size=14,
)
PIXTRAL_DEFAULTS: dict[str, Any] = dict(
    hidden_size=1024,
    intermediate_size=4096,
    num_hidden_layers=24,
    num_attention_heads=16,
    num_channels=3,
    image_size=1024,
    patch_size=16,
)

TEXT_FAMILIES = {"mistral": mistral, "ministral3": ministral3}


@dataclass(frozen=True, kw_only=True)
class PixtralVision(Tower):
    """Pixtral's encoder (patch conv, RMSNorm, layers of bias-free attention and SwiGLU) and Mistral 3's
    projector (RMSNorm, 2x2 patch merger, two linears)."""

    hidden: int
    intermediate: int
    num_layers: int
    patch_size: int
    image_size: int
    num_channels: int
    merge: int  # spatial_merge_size: merge x merge patches become one token
    feature_layers: int  # vision layers whose outputs are concatenated before linear_1
    projector_out: int  # the text hidden size
    projector_bias: bool

    @property
    def patches_per_item(self) -> int:
        return (self.image_size // self.patch_size) ** 2

    def tensors(self) -> list[Tensor]:
        hv, iv, p = self.hidden, self.intermediate, "vision_tower"
        ts = [Tensor(f"{p}.patch_conv.weight", "vision", "conv",
                     (hv, self.num_channels, self.patch_size, self.patch_size))]  # fmt: skip
        ts += norm(f"{p}.ln_pre", hv, None, part="vision")
        for i in range(self.num_layers):
            q = f"{p}.transformer.layers.{i}"
            ts += norm(f"{q}.attention_norm", hv, None, part="vision")
            for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
                ts += linear(f"{q}.attention.{proj}", "vision", hv, hv, None)  # every head is hidden / heads wide
            ts += norm(f"{q}.ffn_norm", hv, None, part="vision")
            ts += linear(f"{q}.feed_forward.gate_proj", "vision", iv, hv, None)
            ts += linear(f"{q}.feed_forward.up_proj", "vision", iv, hv, None)
            ts += linear(f"{q}.feed_forward.down_proj", "vision", hv, iv, None)
        m, t, b = "multi_modal_projector", self.projector_out, self.projector_bias
        ts += norm(f"{m}.norm", hv, None, part="vision")
        # The merger sees merge² neighbouring patches side by side and maps them back to one vision-wide token.
        ts += linear(f"{m}.patch_merger.merging_layer", "vision", hv, hv * self.merge**2, None)
        ts += linear(f"{m}.linear_1", "vision", t, hv * self.feature_layers, None, bias=b)
        ts += linear(f"{m}.linear_2", "vision", t, t, None, bias=b)
        return ts


def read(c: Cfg, meta: Meta) -> Model:
    top = c
    raw_text = top.raw.get("text_config")
    text_type = raw_text.get("model_type", "mistral") if isinstance(raw_text, dict) else "mistral"
    family = TEXT_FAMILIES.get(text_type) if isinstance(text_type, str) else None
    if family is None:
        raise top.error(f"language model {text_type!r} is not one Mistral 3 is known to wrap "
                        f"({', '.join(TEXT_FAMILIES)})", "text_config.model_type")  # fmt: skip
    defaults = family.DEFAULTS[text_type] if isinstance(raw_text, dict) else TEXT_WHEN_ABSENT
    t, tmeta = text_config(top, meta, text_type, defaults)
    model = under(family.read(t, tmeta), "language_model.")

    raw_vision = top.raw.get("vision_config")
    v = top.sub("vision_config", PIXTRAL_DEFAULTS if isinstance(raw_vision, dict) else PIXTRAL_WHEN_ABSENT)
    vision_type = v.raw.get("model_type", "pixtral")
    if vision_type != "pixtral":
        raise v.error(f"vision encoder {vision_type!r} is not Pixtral", "model_type")
    layer = top.get("vision_feature_layer")
    feature_layers = len(layer) if isinstance(layer, list) else 1  # a list concatenates several layers' outputs
    tower = PixtralVision(
        hidden=v.int("hidden_size"), intermediate=v.int("intermediate_size"), num_layers=v.int("num_hidden_layers"),
        patch_size=v.int("patch_size"), image_size=v.int("image_size"), num_channels=v.int("num_channels"),
        merge=top.int("spatial_merge_size"), feature_layers=feature_layers, projector_out=model.hidden_size,
        projector_bias=top.bool("multimodal_projector_bias"),
    )  # fmt: skip
    return dataclasses.replace(model, towers=(tower,), defaults_used=tuple(sorted(top.used)))
