"""Predicted pool tokens against real vLLM (CPU build) at several utilizations and context lengths."""

from __future__ import annotations

import pytest

from launcher import logparse
from launcher.planning import make_plan
from launcher.profiles import load_profile
from launcher.units import GiB
from tests.e2e.conftest import ROOT


@pytest.mark.parametrize(("util", "max_model_len"), [(0.3, 2048), (0.45, 4096)])
def test_predicted_pool_within_1_percent(vllm_ready: None, start_vllm, util: float, max_model_len: int) -> None:
    profile = load_profile(ROOT / "profiles" / "tiny-cpu.yaml").with_overrides(
        gpu_memory_utilization=util, max_model_len=max_model_len
    )
    plan = make_plan(profile)
    server = start_vllm(list(plan.argv), dict(plan.env), name=f"util{util}-{max_model_len}")
    assert server.wait_for("KV cache size:"), server.text()[-3000:]
    text = server.text()
    server.stop()
    logged = logparse.KV_CACHE_SIZE.search(text)
    auto = logparse.CPU_AUTO_SET.search(text)
    assert logged and auto, text[-3000:]
    logged_tokens = int(logparse.number(logged["tokens"]))
    predicted = plan.prediction.pool.tokens
    seen_total = logparse.number(auto["total"])
    if abs(seen_total - plan.machine.total_bytes / GiB) > 0.01:
        # The node's memory changed between plan and launch (memory hot-plug on this VM): plan for what vLLM saw.
        plan = make_plan(profile.with_overrides(gpu_memory_gib=seen_total))
        predicted = plan.prediction.pool.tokens
    assert abs(predicted - logged_tokens) / logged_tokens <= 0.01, (predicted, logged_tokens, auto.group(0))
