"""Weight tensors: what a layer part holds, with the role the storage formats price it by.

A linear layer is priced differently from an embedding, a norm or a bias, so each tensor keeps its role and
shape; `part` is the bucket it is reported in. Pure data and tiny constructors, no I/O.
"""

from __future__ import annotations

from math import prod
from typing import Literal

from launcher.common.records import dataclass

Part = Literal["embedding", "lm_head", "attention", "mixer", "mlp", "experts", "norms", "vision", "other"]
Role = Literal[
    "embedding", "lm_head", "linear", "expert", "router", "bias", "norm", "sink", "conv", "position", "state",
    "buffer", "unloaded",
]  # fmt: skip

PARTS: tuple[Part, ...] = ("embedding", "lm_head", "attention", "mixer", "mlp", "experts", "norms", "vision", "other")


@dataclass(frozen=True)
class Tensor:
    """One weight tensor (or `copies` identical ones: the experts of one layer)."""

    name: str
    part: Part
    role: Role
    shape: tuple[int, ...]  # linears are (out_features, in_features), as PyTorch stores them
    copies: int = 1
    layer: int | None = None
    gguf: str | None = None  # llama.cpp's name for the tensor kind, for GGUF mixes (attn_v, ffn_down, output…)
    detail: str = ""  # finer bucket: attention_norms, mla_low_rank, router, shared_experts, dense_first…
    stored_bytes: int = 0  # bytes per element the checkpoint stores whatever the format (F32 buffers); 0: the format's

    @property
    def numel(self) -> int:
        return prod(self.shape) * self.copies

    @property
    def is_parameter(self) -> bool:
        """A parameter of the served model. Not: a buffer (saved in the checkpoint, not a parameter), nor an
        "unloaded" tensor (transformers allocates it, no checkpoint holds it and vLLM never loads it)."""
        return self.role not in ("buffer", "unloaded")

    @property
    def in_checkpoint(self) -> bool:
        return self.role != "unloaded"


def linear(
    name: str, part: Part, out_f: int, in_f: int, layer: int | None, *, bias: bool = False,
    gguf: str | None = None, detail: str = "", copies: int = 1, role: Role = "linear",
) -> list[Tensor]:  # fmt: skip
    """A Linear's weight (out × in) and, when it has one, its bias (out)."""
    ts = [Tensor(f"{name}.weight", part, role, (out_f, in_f), copies, layer, gguf, detail)]
    if bias:
        ts.append(Tensor(f"{name}.bias", part, "bias", (out_f,), copies, layer, gguf, detail))
    return ts


def norm(
    name: str, size: int | tuple[int, ...], layer: int | None, *, part: Part = "norms", bias: bool = False,
    gguf: str | None = None, detail: str = "", weight: bool = True,
) -> list[Tensor]:  # fmt: skip
    """An RMSNorm (weight) or LayerNorm (weight and bias) over `size`; `weight=False` for a bias-only norm."""
    shape = (size,) if isinstance(size, int) else size
    ts = [Tensor(f"{name}.weight", part, "norm", shape, 1, layer, gguf, detail)] if weight else []
    if bias:
        ts.append(Tensor(f"{name}.bias", part, "norm", shape, 1, layer, gguf, detail))
    return ts


def conv1d(
    name: str, part: Part, channels: int, kernel: int, layer: int | None, *, bias: bool = True, detail: str = "",
    in_per_group: int = 1,
) -> list[Tensor]:  # fmt: skip
    """A depthwise causal conv (channels × 1 × kernel), as Mamba, Gated DeltaNet and short-conv layers hold it."""
    ts = [Tensor(f"{name}.weight", part, "conv", (channels, in_per_group, kernel), 1, layer, None, detail)]
    if bias:
        ts.append(Tensor(f"{name}.bias", part, "bias", (channels,), 1, layer, None, detail))
    return ts


def param(
    name: str,
    part: Part,
    shape: tuple[int, ...],
    layer: int | None,
    *,
    role: Role = "state",
    detail: str = "",
    gguf: str | None = None,
    copies: int = 1,
) -> list[Tensor]:
    """A bare nn.Parameter (A_log, D, dt_bias, sinks, a learned position table)."""
    return [Tensor(name, part, role, shape, copies, layer, gguf, detail)]
