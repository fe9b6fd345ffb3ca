"""Which models a vLLM release builds at all: the architectures its model registry holds and the config model types
it can read (transformers' own, or vLLM's config classes), from that release's code
(interface/served-vX_Y_Z.json, written from vLLM's ModelRegistry and config registry).

A release with no such table here is not judged: the refusal is None."""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Sequence

from launcher.vllm import versions as V

RELEASES: tuple[V.Version, ...] = ((0, 32, 0),)  # releases whose tables are held, oldest first


@functools.cache
def _table(release: V.Version) -> tuple[frozenset[str], frozenset[str]]:
    path = os.path.join(os.path.dirname(__file__), "interface", f"served-v{'_'.join(map(str, release))}.json")
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    return frozenset(data["architectures"]), frozenset(data["config_model_types"])


def _release(version: V.Version) -> V.Version | None:
    """The newest held table at or before `version` (vLLM adds models, rarely removes them)."""
    held = [r for r in RELEASES if version >= r]
    return held[-1] if held else None


def refusal(
    architectures: Sequence[str], model_type: str, *, version: V.Version, trust_remote_code: bool, auto_map: bool
) -> str | None:
    """vLLM's reason not to build this model (its own words), or None where it does or no table says."""
    release = _release(version)
    if release is None:
        return None
    archs, model_types = _table(release)
    v = V.fmt_version(release)
    v += "" if version == release else f", the newest table held for {V.fmt_version(version)}"
    if model_type not in model_types and not (trust_remote_code and auto_map):
        how = (
            "pass --trust-remote-code"
            if auto_map
            else "and the config names no code (auto_map) for --trust-remote-code"
        )
        return (
            f"The checkpoint you are trying to load has model type `{model_type}` but Transformers does not "
            f"recognize this architecture (nor has vLLM {v} a config class for it): {how}"
        )
    if architectures and not any(a in archs for a in architectures):
        return (
            f"Model architectures {list(architectures)!r} are not supported for now (the model registry of vLLM {v}); "
            "`vlaunch count` still gives its weights"
        )
    return None
