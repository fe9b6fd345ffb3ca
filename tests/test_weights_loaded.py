"""vlaunch's weights per rank against what vLLM says it loaded ("Model loading took X GiB"), on every held real log
that states it and whose launch vlaunch can plan (tests/fixtures/devlogs.yaml): within 1 % or 0.2 GiB.

vLLM prints two decimals (0.005 GiB); the figure is the memory the load added on the device, so it holds the
weights as vLLM allocates them (padding, fused scales, the rotary tables it builds while loading: Gemma 3's global
rope, linearly scaled by 8, has a cos/sin cache of 8 × max_position rows beside its local one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from launcher.check.parser import parse_text
from launcher.common.units import GiB
from tests.devlogs_eval import cases, plan_for

LOGS = Path(__file__).parent / "fixtures" / "logs"


def _stating() -> list[tuple[dict[str, Any], float]]:
    out = []
    for case in cases()["success"] + cases()["failure"]:
        log = LOGS / f"{case['id']}.log"
        if log.exists():
            loaded = parse_text(log.read_text(errors="replace")).model_loading_gib
            if loaded is not None:
                out.append((case, loaded))
    return out


STATING = _stating()


def test_the_logs_that_state_weights_are_all_here() -> None:
    assert len(STATING) >= 18


@pytest.mark.parametrize(
    ("case", "loaded"),
    [pytest.param(c, g, id=c["id"]) for c, g in STATING],
)
def test_weights_per_rank_as_vllm_loaded_them(case: dict[str, Any], loaded: float) -> None:
    predicted = plan_for(case).prediction.weights_bytes / GiB
    assert abs(predicted - loaded) <= max(0.01 * loaded, 0.2), f"vlaunch {predicted:.3f} GiB, vLLM {loaded} GiB"
