"""vlaunch's weights per rank against what vLLM says it loaded ("Model loading took X GiB"), on every held real log
that states it and whose launch vlaunch can plan (tests/fixtures/devlogs.yaml): within 1 % or 0.2 GiB.

vLLM prints two decimals (0.005 GiB); the figure is the memory the load added on the device, so it holds the
weights as vLLM allocates them (padding, fused scales, the rotary tables it builds while loading)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from launcher.check.parser import parse_text
from launcher.common.units import GiB
from tests.devlogs_eval import cases, plan_for

LOGS = Path(__file__).parent / "fixtures" / "logs"
# Gemma 3 multimodal (SigLIP tower): vLLM 0.8 and 0.19 load about 0.4-0.5 GiB more than the weights vlaunch prices;
# where it goes is not yet known, so these stay marked until it is found.
KNOWN_GAPS = {
    "llmd-planner-v0.19.0-google-gemma-3-4b-it--h100-80gb--tp1pp1dp1--8192": "gemma-3 loads 0.51 GiB more",
    "vllm-16199-gemma3-27b-awq-4096-fail": "gemma-3 loads 0.38 GiB more",
}


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
    [
        pytest.param(c, g, id=c["id"], marks=[pytest.mark.xfail(reason=KNOWN_GAPS[c["id"]], strict=True)])
        if c["id"] in KNOWN_GAPS
        else pytest.param(c, g, id=c["id"])
        for c, g in STATING
    ],
)
def test_weights_per_rank_as_vllm_loaded_them(case: dict[str, Any], loaded: float) -> None:
    predicted = plan_for(case).prediction.weights_bytes / GiB
    assert abs(predicted - loaded) <= max(0.01 * loaded, 0.2), f"vlaunch {predicted:.3f} GiB, vLLM {loaded} GiB"
