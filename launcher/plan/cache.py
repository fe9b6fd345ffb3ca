"""The work plans of one model have in common, kept once.

A search (`vlaunch fit`) plans one model hundreds of times with a few flags changed. What does not change between
those plans is worked out once: the model read from its files, the vLLM version, the machine's reading, the
tensors and their bytes per format, each rank's weights and cache layout, the calibration store. Each entry is
keyed by every input of what it keeps, so a plan made with a shared cache is the plan made with a fresh one.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, TypeVar

_T = TypeVar("_T")


class PlanCache:
    """Results of the plan steps' expensive parts, each under a key that names its inputs."""

    def __init__(self) -> None:
        self._entries: dict[Hashable, tuple[tuple[object, ...], Any]] = {}

    def get(self, key: Hashable, compute: Callable[[], _T], *objects: object) -> _T:
        """compute(), kept under `key`. `objects` are inputs the key names by id(): the entry holds them, so no
        other object can take their id while it lives, and a hit requires the very same objects."""
        hit = self._entries.get(key)
        if (
            hit is not None
            and len(hit[0]) == len(objects)
            and all(a is b for a, b in zip(hit[0], objects, strict=True))
        ):
            return hit[1]  # type: ignore[no-any-return]
        value = compute()
        self._entries[key] = (objects, value)
        return value

    def __len__(self) -> int:
        return len(self._entries)
