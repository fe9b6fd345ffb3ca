"""Calibration: leave-one-out over the dev logs, matching by machine and version, and safety."""

from __future__ import annotations

import os
import statistics
from pathlib import Path

import pytest
from click.testing import CliRunner

from launcher import calibration
from launcher.check import read_log
from launcher.cli import main
from tests.devlogs_eval import cases, plan_for

LOGS = Path(__file__).parent / "fixtures" / "logs"


def _samples() -> list[tuple[dict, calibration.Sample]]:
    out = []
    for c in cases()["success"]:
        log = LOGS / f"{c['id']}.log"
        facts = read_log(str(log))
        if facts.kv_pool_tokens is None:
            continue
        plan = plan_for(c)
        key = calibration.machine_key(plan.machine.name, plan.machine.total_bytes)
        out.append(
            (c, calibration.Sample(key, plan.to_json()["vllm_version"], plan.to_json(), facts.to_json(), c["id"]))
        )
    return out


def test_leave_one_out_by_machine_and_version() -> None:
    samples = _samples()
    groups: dict[tuple[str, str], list[tuple[dict, calibration.Sample]]] = {}
    for c, s in samples:
        groups.setdefault((s.machine, s.version), []).append((c, s))
    big = {k: v for k, v in groups.items() if len(v) >= 3}
    assert big, "the dev logs have a group of three or more launches"
    table = []
    for (machine, version), members in big.items():
        errors = []
        for i, (case, s) in enumerate(members):
            rest = [m[1] for j, m in enumerate(members) if j != i]
            calibration.save_terms({(machine, version): calibration.fit(rest)})
            plan = plan_for(case)
            assert any("calibrated from" in n for n in plan.prediction.notes), case["id"]
            err = (plan.prediction.pool.tokens - s.logged["kv_pool_tokens"]) / s.logged["kv_pool_tokens"]
            errors.append(abs(err))
            table.append((machine, version, case["id"], 100 * err))
        median = statistics.median(errors)
        print(
            f"{machine} vLLM {version}: n={len(members)} median |err| {100 * median:.3f}% max {100 * max(errors):.3f}%"
        )
        assert median <= 0.01
    for row in table:
        print("  {} {} {:<80} {:+.3f}%".format(*row))


def test_calibration_of_another_version_or_machine_is_not_applied() -> None:
    samples = [s for _, s in _samples() if s.version == "0.19.0"]
    calibration.save_terms({("h100-80gb", "0.19.0"): calibration.fit(samples)})
    case = next(c for c in cases()["success"] if c["id"].startswith("llmd-planner-v0.19.0-qwen"))
    assert any("calibrated from" in n for n in plan_for(case).prediction.notes)
    other = dict(case, plan={**case["plan"], "vllm_version": "0.20.0"})
    assert not any("calibrated" in n for n in plan_for(other).prediction.notes)
    elsewhere = dict(case, plan={**case["plan"], "machine": "a100-80gb"})
    assert not any("calibrated" in n for n in plan_for(elsewhere).prediction.notes)


def test_calibration_keeps_the_safety_checks() -> None:
    """A calibrated plan still refuses what eats the OS reserve or fails vLLM's start-up check."""
    calibration.save_terms({("dgx-spark", "0.19.0"): {"runs": 3, "activation_scale": 0.1, "non_torch_bytes_tp1": 0}})
    base = ["plan", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--machine", "dgx-spark", "--vllm-version", "0.19.0"]
    base += ["--max-model-len", "8192"]
    r = CliRunner().invoke(main, [*base, "--gpu-memory-utilization", "0.97", "--os-reserve-gib", "10", "--json"])
    assert r.exit_code == 3
    r2 = CliRunner().invoke(main, [*base, "--free-gib", "30"])
    assert "calibrated from 3 run(s) of vLLM 0.19.0 on this dgx-spark" in r2.stdout
    r3 = CliRunner().invoke(main, [*base, "--no-calibration"])
    assert "calibrated" not in r3.stdout
    assert "VLAUNCH_NO_CALIBRATION" not in os.environ  # an argument, not process state
    r4 = CliRunner().invoke(main, [*base, "--free-gib", "30"])
    assert "calibrated from 3 run(s)" in r4.stdout  # the next plan in the same process calibrates again


def test_calibrate_command_from_logs(tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["calibrate", str(LOGS), "--json"])
    assert r.exit_code == 0, r.stderr
    import json

    d = json.loads(r.stdout)
    h100 = next(g for g in d["groups"] if g["machine"] == "h100-80gb" and g["vllm_version"] == "0.19.0")
    assert h100["runs"] >= 9
    assert abs(h100["non_torch_bytes_tp1"] / 2**30 - 0.25) < 0.01  # every single-GPU log says 0.25 GiB
    assert d["stored"] and Path(d["stored"]).exists()


@pytest.mark.parametrize("name", ["cuda"])
def test_machine_key_matches_catalog_totals(name: str) -> None:
    assert calibration.machine_key(name, round(79.19 * 2**30)) == "h100-80gb"
    assert calibration.machine_key(name, round(50.00 * 2**30)) == "cuda-50.00GiB"


def test_cpu_worker_running_mean_and_match() -> None:
    a = calibration.record_cpu_worker("cpu", "0.32.0", "/v/bin/python", 700 * 2**20, "run 1")
    b = calibration.record_cpu_worker("cpu", "0.32.0", "/v/bin/python", 710 * 2**20, "run 2")
    assert (a.runs, b.runs) == (1, 2) and b.base_bytes == 705 * 2**20
    assert calibration.lookup_cpu_worker("cpu", "0.32.0", "/v/bin/python") == b
    assert calibration.lookup_cpu_worker("cpu", "0.31.0", "/v/bin/python") is None  # another version
    assert calibration.lookup_cpu_worker("cpu", "0.32.0", "/other/python") is None  # another install
    # a family's own runs win over the install's mean; other families fall back to it
    c = calibration.record_cpu_worker("cpu", "0.32.0", "/v/bin/python", 900 * 2**20, "gemma3n", family="gemma3n")
    assert c.base_bytes == 900 * 2**20
    assert calibration.lookup_cpu_worker("cpu", "0.32.0", "/v/bin/python", family="gemma3n") == c
    assert calibration.lookup_cpu_worker("cpu", "0.32.0", "/v/bin/python", family="llama").base_bytes == 770 * 2**20
    text = calibration.calibration_path().read_text()
    assert text.startswith("# vlaunch calibration") and "cpu_worker" in text


def test_cpu_worker_from_log_arithmetic() -> None:
    # util0.3 log: ceil(8.71 GiB × 0.3) requested, 2,018,176 tokens × 1,024 B/token of KV, 1.4 MB of weights
    base = calibration.cpu_worker_from_log(8.71, 0.3, 2_018_176 * 1024, 1_443_840)
    assert 700 * 2**20 < base < 720 * 2**20  # the log says 0.69 GiB consumed by non-KV usages
