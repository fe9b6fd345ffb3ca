"""`vlaunch fit` → `vlaunch serve` → the pool vLLM logged, for real (the CPU build, a tiny Llama).

fit writes its chosen row as a profile; serve boots that profile unchanged; the pool vLLM logs is within 1 % of
the row. The row is compared at the total vLLM logged: this VM's memory can be hot-added between the search and
the launch, and a row planned at another total is another row.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from launcher.plan.planning import make_plan
from launcher.plan.profiles import load_profile
from tests.e2e.conftest import ROOT

VLAUNCH = [sys.executable, "-m", "launcher"]


def _vlaunch(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*VLAUNCH, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False)


def test_fit_writes_a_profile_that_serve_boots(vllm_ready: None, tmp_path: Path) -> None:
    # every CPU serve calibrates the worker's resident memory: one boot first, as a user's box would have had
    r = _vlaunch("serve", "profiles/tiny-cpu.yaml", "--stop-after-ready", "--logs-dir", str(tmp_path / "calibrate"))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]

    written = tmp_path / "fitted.yaml"
    r = _vlaunch("fit", "tiny-cpu", "--users", "4", "--context", "2048", "--write-profile", str(written), "--json")
    assert r.returncode == 0, r.stderr
    found = json.loads(r.stdout)
    row = next(o for o in found["options"] if o["chosen"])
    assert (row["format"], row["kv_cache_dtype"], row["users"], row["max_model_len"]) == ("bf16", "auto", 4, 2048)
    assert found["written_profile"] == str(written)

    logs = tmp_path / "logs"
    r = _vlaunch("serve", str(written), "--stop-after-ready", "--logs-dir", str(logs))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    record = json.loads(next(logs.glob("fitted-*.json")).read_text())
    logged = record["logged"]["kv_pool_tokens"]
    seen_gib = record["logged"]["total_memory_gib"]  # what vLLM multiplied the utilization by (0.01 GiB steps)
    fit_total = found["machines"][0]["total_bytes"]
    expected = row["kv_pool_tokens"]
    if abs(seen_gib * 2**30 - fit_total) > 0.01 * 2**30:
        # the node's memory moved between the search and the launch: the row as fit gives it at vLLM's total
        again = make_plan(load_profile(written).with_overrides(gpu_memory_gib=seen_gib))
        expected = again.prediction.pool.tokens
        print(f"total moved {seen_gib - fit_total / 2**30:+.2f} GiB between fit and serve")
    else:
        assert record["predicted"]["kv_pool_tokens"] == row["kv_pool_tokens"]  # serve planned the row itself
    error = (expected - logged) / logged
    print(f"fit's row: {row['kv_pool_tokens']:,} tokens at {fit_total / 2**30:.2f} GiB; vLLM logged {logged:,} at "
          f"{seen_gib:.2f} GiB ({100 * error:+.3f}%)")  # fmt: skip
    assert abs(error) <= 0.01
    assert record["predicted"]["gpu_memory_utilization"] == row["gpu_memory_utilization"]
