"""`vlaunch archs`: every model_type vlaunch reads, its family, its layer kinds and how exactly it is counted."""

from __future__ import annotations

from dataclasses import field
from typing import Any

from launcher.common.errors import ConfigError
from launcher.common.records import dataclass
from launcher.model.arch import read_config, registry


@dataclass(frozen=True)
class ArchInfo:
    model_type: str | None  # None: a vLLM architecture whose config's model_type transformers does not know
    family: str  # family module, or "generic"
    support: str  # "exact" | "generic"
    layer_kinds: dict[str, int] = field(default_factory=dict)  # of the class-default model
    architectures: tuple[str, ...] = ()  # vLLM architectures served by it
    towers: int = 0
    mtp_layers: int = 0
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "model_type": self.model_type,
            "family": self.family,
            "arch_support": self.support,
            "layer_kinds": dict(self.layer_kinds),
            "architectures": list(self.architectures),
            "towers": self.towers,
            "mtp_layers": self.mtp_layers,
            "note": self.note,
        }


def _defaults_summary(model_type: str) -> tuple[dict[str, int], int, int, str]:
    """Layer kinds of the model transformers' class defaults describe (a family's flagship, mostly)."""
    try:
        m = read_config({"model_type": model_type}, "class defaults")
    except ConfigError as e:
        return {}, 0, 0, f"class defaults do not describe a whole model ({e.message})"
    kinds: dict[str, int] = {}
    for layer in m.layers:
        for k in layer.kinds or ("none",):
            kinds[k] = kinds.get(k, 0) + 1
    return kinds, len(m.towers), len(m.mtp_layers), ""


def list_archs() -> list[ArchInfo]:
    by_type: dict[str, list[str]] = {}
    for arch, mt in registry.VLLM_ARCHITECTURES.items():
        if mt is not None:
            by_type.setdefault(mt, []).append(arch)
    for arch, mt in registry.VLLM_POOLING_ARCHITECTURES.items():
        by_type.setdefault(mt, []).append(arch)
    for arch, mt in registry.ARCHITECTURES.items():
        by_type.setdefault(mt, [])
        if arch not in by_type[mt]:
            by_type[mt].append(arch)
    out: list[ArchInfo] = []
    seen: set[str] = set()
    for module in registry.all_family_modules():
        fam = registry.load_family(module)
        for mt in fam.MODEL_TYPES:
            kinds, towers, mtp, note = _defaults_summary(mt)
            out.append(ArchInfo(mt, module, "exact", kinds, tuple(sorted(by_type.get(mt, ()))), towers, mtp, note))
            seen.add(mt)
    for alias, module in registry.ALIASES.items():
        if alias not in seen:  # a name no module lists as its own (gpt-sw3: not a Python identifier)
            out.append(ArchInfo(alias, module, "exact", note=f"another name for the {module} family"))
            seen.add(alias)
    for arch, mt in sorted(registry.VLLM_ARCHITECTURES.items()):
        if mt is not None and (mt in seen or registry.module_name(mt) is not None):
            continue
        if arch in registry.ARCHITECTURES:
            continue
        reason = registry.GENERIC.get(mt or "", registry.GENERIC_REASON)
        out.append(ArchInfo(mt, "generic", "generic", architectures=(arch,), note=reason))
    return out
