"""Decode efficiency measured on this box: serve's run record (its decode step and vLLM's statistics lines) →
`vlaunch calibrate` → calibration.yaml → `fit` labels the rows `measured`."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from launcher.cli import main
from launcher.cli.options import build_profile
from launcher.plan import rowspeed, speed
from launcher.plan.cache import PlanCache
from launcher.plan.planning import make_plan
from launcher.plan.speed_calibration import intervals, lookup_speed, run_speed

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
POOL = 400_000  # the record's pool, in tokens


def _plan() -> Any:
    return make_plan(build_profile(None, {"model": MODEL, "machine": "dgx-spark", "max_model_len": 8192,
                                          "users": 4}))  # fmt: skip


def _record(plan: Any, samples: list[dict[str, Any]]) -> dict[str, Any]:
    inputs = json.loads(json.dumps(rowspeed.step_inputs(plan, PlanCache())))
    pred = plan.to_json()
    return {"predicted": pred, "speed_inputs": inputs, "logged": {"kv_pool_tokens": POOL, "throughput": samples}}


def _modelled(plan: Any, running: int, context: int) -> float:
    """The aggregate rate at efficiency 1 for `running` users at `context` tokens (speed's arithmetic: its own
    tests check it by hand)."""
    step = rowspeed.decode_step(plan, running, PlanCache(), speed.DEFAULT_MTP_ACCEPTANCE)
    kv = rowspeed._kv(plan, PlanCache())
    step = dataclasses.replace(step, cache_bytes_per_user=kv.bytes_for_context(context))
    unit = speed.Efficiency(1.0, "default", "unit")
    return speed.expected_decode(
        step, bandwidth_bytes_per_s=273 * 10**9, eff=unit, regime_="single"
    ).aggregate_tokens_per_s


def _sample(gen: float, running: int, usage: float, prompt: float = 0.0) -> dict[str, Any]:
    return {"prompt_tokens_per_s": prompt, "generation_tokens_per_s": gen, "running": running, "waiting": 0,
            "kv_cache_usage": usage, "line": 1}  # fmt: skip


def test_an_interval_is_logged_rate_over_the_modelled_one() -> None:
    plan = _plan()
    # 4 running requests holding 1 % of a 400,000-token pool: 1,000 tokens each
    rate = _modelled(plan, 4, 1000)
    rec = _record(plan, [_sample(0.6 * rate, 4, 0.01), _sample(0.6 * rate, 4, 0.01, prompt=2 * rate)])
    got = run_speed(rec, "run.json")
    assert got is not None and got.machine == "dgx-spark"
    [one] = got.intervals  # the prefill-bound interval is left out
    assert (one.regime, one.running, one.context) == ("batched_dense", 4, 1000)
    assert one.efficiency == pytest.approx(0.6, abs=1e-3)


def test_broken_intervals_give_nothing() -> None:
    plan = _plan()
    rec = _record(plan, [_sample(0, 4, 0.01), _sample(1e9, 4, 0.01), _sample(10.0, 0, 0.01), {"x": 1}, "junk"])
    assert run_speed(rec, "r") is None  # idle, absurd (past EFFICIENCY_BOUNDS), no request, damaged
    assert intervals({"bandwidth_bytes_per_s": "fast"}, [_sample(10, 1, 0.1)], POOL) == []
    damaged = _record(plan, [_sample(10, 1, 0.1)])
    damaged["speed_inputs"]["weights"]["dense_bytes"] = -5
    assert run_speed(damaged, "r") is None
    assert run_speed({"predicted": {}, "logged": {}}, "r") is None  # a record from before speed_inputs


def test_calibrate_stores_and_fit_uses_the_measured_efficiency(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    plan = _plan()
    rate = _modelled(plan, 1, 2000)
    rec = _record(plan, [_sample(0.5 * rate, 1, 0.005) for _ in range(3)])
    (tmp_path / "run.json").write_text(json.dumps(rec))
    r = CliRunner().invoke(main, ["calibrate", str(tmp_path / "run.json"), "--json"])
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert [i["regime"] for i in out["speed"][0]["intervals"]] == ["single"] * 3
    stored = lookup_speed("dgx-spark", out["speed"][0]["vllm_version"])
    assert stored["single"].source == "measured" and stored["single"].value == pytest.approx(0.5, abs=1e-3)
    fit = CliRunner().invoke(main, ["fit", MODEL, "--machine", "dgx-spark", "--users", "1", "--context", "8k",
                                    "--json"])  # fmt: skip
    rows = json.loads(fit.stdout)["options"]
    assert {o["decode"]["expected_source"] for o in rows} == {"measured"}
    assert all(o["decode"]["expected_efficiency"] == pytest.approx(0.5, abs=1e-3) for o in rows)
    off = CliRunner().invoke(main, ["fit", MODEL, "--machine", "dgx-spark", "--users", "1", "--context", "8k",
                                    "--no-calibration", "--json"])  # fmt: skip
    assert {o["decode"]["expected_source"] for o in json.loads(off.stdout)["options"]} == {"calibrated"}
    # another machine's store is never used
    other = CliRunner().invoke(main, ["fit", MODEL, "--machine", "h100-80gb", "--users", "1", "--context", "8k",
                                      "--json"])  # fmt: skip
    assert "measured" not in {o["decode"]["expected_source"] for o in json.loads(other.stdout)["options"]}
