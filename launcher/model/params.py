"""Model -> the parameter count by part, per layer, and in finer detail. Pure arithmetic over the tensors
each layer part reports (launcher.model.arch)."""

from __future__ import annotations

from launcher.common.records import dataclass
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import PARTS, Part, Role, Tensor

__all__ = ["PARTS", "ParamCount", "Part", "Role", "Tensor", "count", "tensors"]


def tensors(m: Model) -> list[Tensor]:
    """Every weight tensor of the model as transformers builds it (tied lm_head omitted)."""
    return m.tensors()


@dataclass(frozen=True)
class ParamCount:
    total: int
    text_total: int
    parts: dict[Part, int]
    detail: dict[str, int]
    per_layer: tuple[int, ...]
    buffers: int = 0  # elements of persistent buffers the checkpoint holds (not parameters)

    def to_json(self) -> dict[str, object]:
        return {
            "total": self.total,
            "text_total": self.text_total,
            "parts": dict(self.parts),
            "detail": dict(self.detail),
            "buffers": self.buffers,
        }


def count(m: Model, ts: list[Tensor] | None = None) -> ParamCount:
    """Parameters by part; `total` is the whole model vLLM loads, `text_total` the language model alone."""
    ts = m.tensors() if ts is None else ts
    parts: dict[Part, int] = dict.fromkeys(PARTS, 0)
    detail: dict[str, int] = {}
    per_layer = [0] * m.num_layers
    buffers = 0
    for t in ts:
        n = t.numel
        if not t.is_parameter:
            buffers += n
            continue
        parts[t.part] += n
        if t.detail:
            detail[t.detail] = detail.get(t.detail, 0) + n
        if t.layer is not None and t.layer < m.num_layers:
            per_layer[t.layer] += n
    total = sum(parts.values())
    return ParamCount(
        total=total,
        text_total=total - parts["vision"],
        parts=parts,
        detail=detail,
        per_layer=tuple(per_layer),
        buffers=buffers,
    )
