"""`plan` against real vLLM 0.32 CPU start-ups of tiny models of many families (tests/fixtures/vllm-cpu).

Each case holds the model's config.json, the logs of two boots (`kvbytes`: an explicit --kv-cache-memory-bytes;
`util`: a --gpu-memory-utilization on this kind of VM) and what vLLM reported: the logged tokens and
concurrency and its cache_config_info metrics (num_gpu_blocks, block_size, mamba_page_size_padded).
From the budget the pool must come out exact; from the utilization alone within 1 %, planned at the total
vLLM sized against (NUMA node 0 as read at launch), so a host whose memory grows cannot move the check.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from launcher.cli import main
from launcher.common.units import GiB
from launcher.plan.planning import Plan, make_plan, profile_from_flags

ROOT = Path(__file__).parent / "fixtures" / "vllm-cpu"
CASES = sorted(p for p in ROOT.iterdir() if (p / "case.yaml").exists()) if ROOT.exists() else []


def _runs() -> list[tuple[str, str]]:
    out = []
    for d in CASES:
        case = yaml.safe_load((d / "case.yaml").read_text())
        for run, r in case["runs"].items():
            if r.get("kv_cache_tokens"):
                out.append((d.name, run))
    return out


RUNS = _runs()


def _flags(argv: list[str]) -> dict[str, Any]:
    """vLLM's argv after the model, as a dict of flag -> value (True for switches)."""
    flags: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("--"):
            key = a[2:].replace("-", "_")
            if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                flags[key] = argv[i + 1]
                i += 2
                continue
            flags[key] = True
        i += 1
    return flags


def _case(name: str, run: str) -> tuple[dict[str, Any], dict[str, Any]]:
    case = yaml.safe_load((ROOT / name / "case.yaml").read_text())
    return case, case["runs"][run]


def _metric(r: dict[str, Any], key: str) -> str | None:
    for line in r.get("cache_config_info") or []:
        m = re.search(rf'\b{key}="([^"]*)"', line)
        if m:
            return m.group(1)
    return None


def plan_run(name: str, run: str, cpu_rss_bytes: int | None = None) -> Plan:
    """The plan for one logged boot: the same model, flags and total memory vLLM had."""
    _, r = _case(name, run)
    f = _flags(r["argv"])
    fields: dict[str, Any] = {
        "machine": "cpu",
        "gpu_memory_gib": r["node0_memtotal_bytes"] / GiB,
        "max_model_len": int(f["max_model_len"]),
        "dtype": f.get("dtype", "auto"),
    }
    for key in ("kv_cache_memory_bytes", "tensor_parallel_size", "block_size", "max_num_batched_tokens"):
        if key in f:
            fields[key] = int(f[key])
    if "gpu_memory_utilization" in f:
        fields["gpu_memory_utilization"] = float(f["gpu_memory_utilization"])
    if "speculative_config" in f:
        fields["speculative_config"] = json.loads(f["speculative_config"])
    for key in ("mamba_cache_mode", "mamba_ssm_cache_dtype", "mamba_cache_dtype", "runner"):
        if key in f:
            fields[key] = f[key]
    if "no_enable_prefix_caching" in f:
        fields["enable_prefix_caching"] = False
    # The boots ran on a CPU with AVX512-BF16 (their logs say "Reset SSM cache type to float32"); plan for that
    # CPU, whatever CPU runs the tests.
    fields["cpu_bf16"] = True
    prof = profile_from_flags(None, str(ROOT / name / "config.json"), **fields)
    return make_plan(prof, live=False, use_calibration=False, cpu_rss_bytes=cpu_rss_bytes)


@pytest.mark.parametrize(("name", "run"), [r for r in RUNS if not r[1].startswith("util")])
def test_pool_exact_from_the_budget(name: str, run: str) -> None:
    """An explicit KV budget: blocks, block size, tokens and concurrency exactly as vLLM reported them."""
    _, r = _case(name, run)
    p = plan_run(name, run).prediction
    blocks = _metric(r, "num_gpu_blocks")
    if blocks is not None:
        assert p.pool.num_blocks == int(blocks)
    bs = _metric(r, "block_size")
    if bs is not None:
        assert p.layout.block_size == int(bs)
    padded = _metric(r, "mamba_page_size_padded")
    if padded not in (None, "None"):
        assert p.layout.page_bytes == int(padded)
    assert p.pool.tokens == r["kv_cache_tokens"][-1]
    assert f"{p.pool.max_concurrency:.2f}" == f"{r['max_concurrency'][-1]:.2f}"


# Gemma 3n's worker holds 0.89 GiB besides its weights (its compiled graph: AltUp, Laurel, per-layer inputs), the
# most of any family here; vlaunch's uncalibrated CPU figure is 0.69 GiB: +1.35 % at util 0.6. One calibration
# run of the family removes it (test_calibrated_family_within_a_fraction_of_a_percent).
_RSS_OUTLIERS = {("gemma3n", "util60")}


@pytest.mark.parametrize(
    ("name", "run"),
    [
        pytest.param(*r, marks=pytest.mark.xfail(strict=True, reason="worker RSS 0.2 GiB above the default"))
        if r in _RSS_OUTLIERS
        else r
        for r in RUNS
        if r[1] == "util60"
    ],
)
def test_pool_within_one_percent_from_util(name: str, run: str) -> None:
    """From gpu_memory_utilization alone (0.6 of the node, a pool of ~13 GiB), at the total vLLM logged: the
    pool within 1 %."""
    _, r = _case(name, run)
    p = plan_run(name, run).prediction
    logged = r["kv_cache_tokens"][-1]
    assert abs(p.pool.tokens - logged) <= 0.01 * logged, (p.pool.tokens, logged)


@pytest.mark.parametrize(("name", "run"), [r for r in RUNS if r[1].startswith("util")])
def test_worker_memory_besides_the_pool(name: str, run: str) -> None:
    """What the budget leaves besides the pool on CPU is the worker's resident memory: weights plus vLLM, torch
    and the compiled model (0.68-0.89 GiB across these families). vlaunch assumes 0.69 GiB plus the weights;
    each family's own figure is within 0.2 GiB of it (calibration from one run of the family removes it)."""
    from launcher.check.compare import read_log

    p = plan_run(name, run).prediction
    f = read_log(str(ROOT / name / f"{run}.log"))
    assert f.cpu_non_kv_gib is not None
    predicted = (p.requested_bytes - p.available_kv_bytes) / GiB
    assert abs(predicted - f.cpu_non_kv_gib) <= 0.2, (predicted, f.cpu_non_kv_gib)


@pytest.mark.parametrize(("name", "run"), [r for r in RUNS if not r[1].startswith("util")])
def test_check_reads_the_log_and_agrees(name: str, run: str) -> None:
    """`check` reads the real log (pool, block size, groups, padding) and the plan's diff is zero on each."""
    from launcher.check.compare import compare, read_log

    _, r = _case(name, run)
    f = read_log(str(ROOT / name / f"{run}.log"))
    assert f.kv_pool_tokens == r["kv_cache_tokens"][-1]
    bs = _metric(r, "block_size")
    if bs is not None and f.block_size is not None:  # a log states the block size only when vLLM changed it
        assert f.block_size == int(bs)
    c = compare(plan_run(name, run), f)
    rows = {row.bucket: row for row in c.rows}
    assert rows["kv_pool_tokens"].delta == 0 and rows["max_concurrency"].delta == 0
    for key in ("block_size", "kv_cache_groups", "padding_layers"):
        if key in rows and rows[key].logged is not None:  # stated by the log, or implied by its silence
            assert rows[key].delta == 0, (key, rows[key].predicted, rows[key].logged)


def test_pooling_encoder_has_no_pool() -> None:
    """XLM-RoBERTa under --runner pooling: vLLM prints no KV cache line and keeps its one null block
    (num_gpu_blocks 1); the plan has no pool either."""
    from launcher.check.compare import read_log

    name = "xlm_roberta_pooling"
    if not (ROOT / name / "case.yaml").exists():
        pytest.skip("no pooling fixture")
    _, r = _case(name, "kvbytes")
    assert _metric(r, "num_gpu_blocks") == "1"
    f = read_log(str(ROOT / name / "kvbytes.log"))
    assert f.kv_pool_tokens is None and f.failure is None and f.started
    p = plan_run(name, "kvbytes")
    assert not p.prediction.layout.groups and p.prediction.kv_need_bytes == 0 and p.fits


def test_two_cpu_workers_at_util_0_6_are_refused() -> None:
    """Tensor parallel 2 on one node at --gpu-memory-utilization 0.6: each CPU worker claimed 0.6 of the node
    (13.33 GiB of KV each, 2 × 14.12 GiB of 23.54), and the kernel killed one. The plan refuses it; `check` names it."""
    from launcher.check.compare import read_log

    name, run = "qwen3_next_tp2", "util60"
    if not (ROOT / name / f"{run}.log").exists():
        pytest.skip("no tp2 fixture")
    f = read_log(str(ROOT / name / f"{run}.log"))
    assert f.failure is not None and f.failure.kind == "worker_killed" and "-9" in f.failure.message
    plan = plan_run(name, run)
    assert not plan.fits and plan.prediction.failure == "eats_os_reserve"
    assert any("2 CPU workers" in r for r in plan.prediction.reasons)
    ok = plan_run(name, "util")  # 2 × 0.1 of the node leaves the OS its share
    assert ok.fits


@pytest.mark.parametrize("name", sorted({n for n, r in RUNS if r == "util60"} & {n for n, r in RUNS if r == "util"}))
def test_calibrated_family_within_a_fraction_of_a_percent(name: str) -> None:
    """`serve` records the worker's resident memory of each run per family; the next plan of that family uses it.
    Calibrated on the util 0.1 boot, the util 0.6 boot is predicted within 0.3 %."""
    from launcher.check.compare import read_log
    from launcher.plan import calibration
    from launcher.vllm import pool as vp

    first = plan_run(name, "util").prediction
    f = read_log(str(ROOT / name / "util.log"))
    assert f.kv_pool_tokens is not None and f.total_memory_gib is not None
    pool_bytes = vp.pool_bytes_from_tokens(first.layout, first.args.context(), f.kv_pool_tokens)
    base = calibration.cpu_worker_from_log(f.total_memory_gib, 0.1, pool_bytes, first.weights_bytes)
    _, r = _case(name, "util60")
    plan = plan_run(name, "util60", cpu_rss_bytes=base + first.weights_bytes)
    logged = r["kv_cache_tokens"][-1]
    assert abs(plan.prediction.pool.tokens - logged) <= 0.003 * logged, (plan.prediction.pool.tokens, logged)


MAMBA2 = ROOT / "mamba2"


def _check(*args: str) -> dict[str, Any]:
    r = CliRunner().invoke(main, ["check", str(MAMBA2 / "kvbytes.log"), "--config", str(MAMBA2 / "config.json"),
                                  *args, "--json"])  # fmt: skip
    assert r.exit_code in (0, 3), r.stderr
    rows: dict[str, Any] = json.loads(r.stdout)["diff"]["rows"]
    return rows


def test_check_takes_the_cpu_isa_from_the_log(monkeypatch: pytest.MonkeyPatch) -> None:
    """The log was written on a CPU with AVX512-BF16 ("Reset SSM cache type to float32"); checked on a box
    without it, the plan still keeps the SSM state in float32, as that vLLM did."""
    monkeypatch.setattr("launcher.plan.resolve.cpu_has_avx512_bf16", lambda: False)
    rows = _check()
    assert rows["kv_pool_tokens"]["predicted"] == rows["kv_pool_tokens"]["logged"] == 684032
    other = _check("--no-cpu-bf16")  # said otherwise: the state in the model's dtype, smaller pages, more tokens
    assert other["kv_pool_tokens"]["predicted"] > 684032


def test_cpu_bf16_is_a_fact_of_the_plan_not_of_the_planning_box(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("launcher.plan.resolve.cpu_has_avx512_bf16", lambda: True)
    flags = {"machine": "cpu", "gpu_memory_gib": 16.0, "max_model_len": 4096, "dtype": "bfloat16"}
    on = make_plan(profile_from_flags(None, str(MAMBA2 / "config.json"), **flags), live=False)
    off = make_plan(profile_from_flags(None, str(MAMBA2 / "config.json"), cpu_bf16=False, **flags), live=False)
    assert on.prediction.state_bytes_per_request > off.prediction.state_bytes_per_request
