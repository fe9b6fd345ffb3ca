"""Gemma 3: Gemma 2's layer with per-head q/k norms, five sliding layers to one global; the multimodal
wrapper (model_type gemma3) adds a SigLIP vision tower and its projector."""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta, decoder, text_config
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.gemma2 import GEMMA_NORMS, alternating_attention
from launcher.model.arch.layers import DenseMLP
from launcher.model.arch.model import Model
from launcher.model.arch.towers import SiglipVision, Tower

MODEL_TYPES = ("gemma3_text", "gemma3")

DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": dict(vocab_size=262208, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                        num_attention_heads=8, num_key_value_heads=4, head_dim=256, tie_word_embeddings=True,
                        attention_bias=False, sliding_window=4096, sliding_window_pattern=6,
                        max_position_embeddings=131072),
    "gemma3": dict(tie_word_embeddings=True),
}  # fmt: skip

SIGLIP_DEFAULTS: dict[str, Any] = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                                       num_attention_heads=12, num_channels=3, image_size=224, patch_size=16,
                                       vision_use_head=True)  # fmt: skip


def read(c: Cfg, meta: Meta) -> Model:
    towers: list[Tower] = []
    if meta.model_type == "gemma3":
        top = c
        c, meta = text_config(c, meta, "gemma3_text", DEFAULTS["gemma3_text"])
        if top.has("vision_config"):
            v = top.sub("vision_config", SIGLIP_DEFAULTS)
            towers.append(
                SiglipVision(
                    hidden=v.int("hidden_size"), intermediate=v.int("intermediate_size"),
                    num_layers=v.int("num_hidden_layers"), num_heads=v.int("num_attention_heads"),
                    patch_size=v.int("patch_size"), image_size=v.int("image_size"),
                    num_channels=v.int("num_channels"), use_head=v.bool("vision_use_head"),
                    projector_out=c.int("hidden_size"),
                )
            )  # fmt: skip
    hidden = c.int("hidden_size")
    # five sliding layers to one global by default
    kinds, attn = alternating_attention(c, hidden, c.int("sliding_window_pattern"), qk_norm="head")
    mlp = DenseMLP(hidden=hidden, inter=c.int("intermediate_size"))
    return decoder(c, meta, parts=lambda i: (attn[kinds[i]], mlp), rotary_dim=attn[kinds[0]].head_dim,
                   layer_norms=GEMMA_NORMS, towers=tuple(towers), rotary_rows=_rope_rows(c))  # fmt: skip


def _rope_rows(c: Cfg) -> int:
    """vLLM builds two ropes (get_rope caches one per distinct base and scaling): the sliding layers' at
    rope_local_base_freq, unscaled (max_position rows), and the global layers' with the config's rope_scaling; a
    linear scaling by `factor` makes its cache max_position × factor rows (LinearScalingRotaryEmbedding)."""
    scaling = c.get("rope_scaling", None)
    params = c.get("rope_parameters", None)  # transformers 5: per layer type
    if scaling is None and isinstance(params, dict) and isinstance(params.get("full_attention"), dict):
        scaling = params["full_attention"]
    if not isinstance(scaling, dict) or (scaling.get("rope_type") or scaling.get("type")) != "linear":
        return 2
    factor = scaling.get("factor")
    return 1 + int(factor) if isinstance(factor, int | float) and factor >= 1 else 2
