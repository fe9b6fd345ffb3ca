"""bench/gpu_terms.py, the GPU check, as far as a box without a GPU can run it: every launch planned, the failing
one refused where vLLM would fail (the sampler warm-up), and the table it reads a real log into."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import gpu_terms  # noqa: E402

from launcher.check.stream import parse_stream  # noqa: E402
from launcher.plan.planning import make_plan, profile_from_flags  # noqa: E402

LLAMA = str(ROOT / "tests" / "fixtures" / "configs" / "Llama-3.1-8B.json")
H100_LOG = (
    ROOT
    / "tests"
    / "fixtures"
    / "logs"
    / "llmd-planner-v0.19.0-meta-llama-llama-3-1-8b---h100-80gb--tp1pp1dp1--8192.log"
)


def test_dry_run_plans_every_launch_and_the_one_that_must_fail(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert gpu_terms.main(["--dry-run", "--model", LLAMA, "--out", str(tmp_path), "--tp", "1,2"]) == 0
    results = json.loads((tmp_path / "gpu_terms.json").read_text())
    names = [r["launch"] for r in results]
    assert names == ["util0.5-tp1", "util0.8-tp1", "util0.5-tp2", "util0.8-tp2", "sampler-warmup-oom"]
    assert all(r["planned_fits"] for r in results[:-1])
    failing = results[-1]
    assert failing["planned_fits"] is False
    assert any("warming up the sampler" in r for r in failing["reasons"]), failing["reasons"]
    assert "sampler-warmup-oom: planned kv_cache_memory_too_large; vLLM not run" in capsys.readouterr().out


def test_without_a_gpu_it_says_so() -> None:
    if gpu_terms.gpu_count():
        pytest.skip("this box has an NVIDIA GPU")
    assert gpu_terms.main(["--model", LLAMA]) == 2


def test_rows_set_a_real_logs_terms_beside_the_plan() -> None:
    """The table read from a real H100 log of vLLM 0.19 (Llama-3.1-8B, 8,192 tokens): every term the log states
    has its row, and the plan's pool lands within a few hundred tokens of the logged one."""
    with H100_LOG.open("rb") as fh:
        facts = parse_stream(fh)
    prof = profile_from_flags("meta-llama/Llama-3.1-8B-Instruct", None, machine="h100-80gb", max_model_len=8192,
                              gpu_memory_utilization=facts.gpu_memory_utilization)  # fmt: skip
    prof = prof.with_overrides(vllm={"version": "0.19.0"})
    rows = {r["term"]: r for r in gpu_terms.rows(make_plan(prof, live=False).to_json(), facts)}
    assert rows["weights"]["logged"] is not None and abs(rows["weights"]["delta"]) < 0.1
    assert rows["kv_pool_tokens"]["logged"] == facts.kv_pool_tokens
    assert abs(rows["kv_pool_tokens"]["delta"]) <= 0.005 * facts.kv_pool_tokens
