"""Encoders that multimodal wrappers load next to their language model (vision and audio towers).

A tower knows its tensors and the few numbers the activation estimate needs (tokens per item, width). Each
tower class lives here so several families can share one (SigLIP serves Gemma 3 and others). Pure.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from launcher.common.records import dataclass
from launcher.model.arch.tensors import Tensor, linear, norm, param


class Tower(ABC):
    """An encoder loaded beside the language model; `modalities` are what `--limit-mm-per-prompt` names."""

    modalities: ClassVar[tuple[str, ...]] = ("image",)  # vLLM skips the tower when all of these are limited to 0
    hidden: int
    intermediate: int

    @abstractmethod
    def tensors(self) -> list[Tensor]: ...

    @property
    @abstractmethod
    def patches_per_item(self) -> int:
        """Encoder tokens for one image (or one audio clip) at the default resolution."""

    @property
    def tokens_per_item(self) -> int:
        """Text-side embeddings one item becomes (what vLLM's encoder budget counts); 256 unless a tower says."""
        return 256


def siglip_encoder(p: str, hv: int, iv: int, num_layers: int) -> list[Tensor]:
    """A SigLIP / CLIP encoder's layers under `p`: pre-norm attention (q, k, v, out with biases) and a two-layer MLP."""
    ts: list[Tensor] = []
    for i in range(num_layers):
        q = f"{p}.encoder.layers.{i}"
        ts += norm(f"{q}.layer_norm1", hv, None, part="vision", bias=True)
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            ts += linear(f"{q}.self_attn.{proj}", "vision", hv, hv, None, bias=True)
        ts += norm(f"{q}.layer_norm2", hv, None, part="vision", bias=True)
        ts += linear(f"{q}.mlp.fc1", "vision", iv, hv, None, bias=True)
        ts += linear(f"{q}.mlp.fc2", "vision", hv, iv, None, bias=True)
    return ts


@dataclass(frozen=True, kw_only=True)
class SiglipVision(Tower):
    """A SigLIP vision transformer (optionally with its attention-pooling head) and Gemma 3's projector."""

    hidden: int
    intermediate: int
    num_layers: int
    num_heads: int
    patch_size: int
    image_size: int
    num_channels: int
    use_head: bool
    projector_out: int  # the text hidden size the projector maps into
    prefix: str = "vision_tower.vision_model"

    @property
    def patches_per_item(self) -> int:
        return (self.image_size // self.patch_size) ** 2

    def tensors(self) -> list[Tensor]:
        hv, iv, p = self.hidden, self.intermediate, self.prefix
        ts = [
            Tensor(
                f"{p}.embeddings.patch_embedding.weight",
                "vision",
                "conv",
                (hv, self.num_channels, self.patch_size, self.patch_size),
            ),
            Tensor(f"{p}.embeddings.patch_embedding.bias", "vision", "bias", (hv,)),
            *param(
                f"{p}.embeddings.position_embedding.weight",
                "vision",
                (self.patches_per_item, hv),
                None,
                role="position",
            ),
        ]
        ts += siglip_encoder(p, hv, iv, self.num_layers)
        ts += norm(f"{p}.post_layernorm", hv, None, part="vision", bias=True)
        if self.use_head:
            q = f"{p}.head"
            ts += param(f"{q}.probe", "vision", (1, 1, hv), None, role="position")
            ts += linear(f"{q}.attention.in_proj", "vision", 3 * hv, hv, None, bias=True)
            ts += linear(f"{q}.attention.out_proj", "vision", hv, hv, None, bias=True)
            ts += norm(f"{q}.layernorm", hv, None, part="vision", bias=True)
            ts += linear(f"{q}.mlp.fc1", "vision", iv, hv, None, bias=True)
            ts += linear(f"{q}.mlp.fc2", "vision", hv, iv, None, bias=True)
        # Projector: an RMSNorm over the vision width, then a (vision -> text hidden) matrix stored without bias,
        # as a bare parameter that multiplies from the right (vision rows, text columns).
        ts += norm("multi_modal_projector.mm_soft_emb_norm", hv, None, part="vision")
        ts.append(Tensor("multi_modal_projector.mm_input_projection_weight", "vision", "linear",
                         (hv, self.projector_out)))  # fmt: skip
        return ts
