"""Expected decode speed against 25 published measured points (tests/fixtures/speed-points): the efficiency table
is the points' fit, the expected speed lands within ±30 % of measured on at least 80 % of each engine class's
points, and no ceiling is below a measured speed."""

from __future__ import annotations

import pytest

from launcher.plan import speed
from tests import speed_points as S

POINTS = S.all_points()


def _report(points: list[S.Point]) -> str:
    return "\n".join(
        f"{p.label}: expected {S.expected(p):.1f}, measured {p.measured:.1f} ({S.expected(p) / p.measured - 1:+.0%})"
        for p in points
    )


@pytest.mark.parametrize("engine", ["vllm", "llama.cpp"])
def test_expected_within_30_percent_on_80_percent_of_each_engine_class(engine: str) -> None:
    mine = [p for p in POINTS if p.engine == engine]
    within = [p for p in mine if abs(S.expected(p) - p.measured) <= 0.3 * p.measured]
    print(f"\n{engine}: {len(within)} of {len(mine)} within ±30 %\n{_report(mine)}")
    assert mine and len(within) >= 0.8 * len(mine), _report(mine)


def test_no_ceiling_below_a_measured_point() -> None:
    below = [p for p in POINTS if p.ceiling < p.measured]
    assert not below, _report(below)


def test_the_efficiency_table_is_the_fit_of_the_points() -> None:
    fitted = S.refit(POINTS)
    table = {(f.machine, f.engine, f.regime): f for f in speed.PUBLISHED}
    assert set(table) == set(fitted)
    for key, (median, n) in fitted.items():
        assert table[key].points == n, key
        assert table[key].value == pytest.approx(median, abs=0.0015), key


def test_the_points_cover_every_engine_class_and_both_machines() -> None:
    assert {p.engine for p in POINTS} == {"vllm", "llama.cpp"}
    assert {p.machine for p in POINTS} == {"dgx-spark", "rtx5090"}
    assert len(POINTS) == 25


def test_a_batch_of_moe_tokens_reads_more_experts_than_one_token() -> None:
    """gpt-oss-120b × 32 users: 128 experts, 4 per token: 128 · (1 − (124/128)^32) ≈ 81.7 experts per layer."""
    p = next(p for p in POINTS if p.raw["model"] == "gpt-oss-120b" and p.raw["users"] == 32)
    assert speed.experts_touched(4, 128, 32) == pytest.approx(81.65, abs=0.01)
    assert p.modelled < p.ceiling / 4  # the ceiling counts one token's 4 experts per layer
