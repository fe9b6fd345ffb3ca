"""Several ranks for real on this machine: a Ray cluster on 127.0.0.1, and vLLM's CPU build at tp=2."""

from __future__ import annotations

from launcher.common.units import GiB
from launcher.plan.planning import make_plan
from launcher.plan.profiles import load_profile, profile_from_mapping
from launcher.run import cluster
from launcher.vllm import logs
from tests.e2e.conftest import ROOT, VLLM_PYTHON


def test_local_ray_cluster_started_checked_and_stopped(vllm_ready: None) -> None:
    p = profile_from_mapping(
        {
            "model": "x/y",
            "tensor_parallel_size": 2,
            "vllm": {"python": str(VLLM_PYTHON)},
            "nodes": [{"host": "127.0.0.1", "role": "head", "machine": "cpu", "gpus": 2}],
        }
    )
    assert cluster.preflight(p) == []
    try:
        cluster.start(p, echo=print)
        res = cluster.check_resources(p, 2)
        assert res["nodes"] == 1 and float(res["resources"]["CPU"]) == 2.0  # type: ignore[index]
    finally:
        assert cluster.stop(p) == []
    r = cluster.run(cluster.resources_command(p), timeout=60)
    assert r.returncode != 0  # nothing left to connect to


def test_tp2_on_cpu_pool_per_rank(vllm_ready: None, start_vllm) -> None:
    """vLLM's CPU build runs tensor parallel 2 with its multiprocessing executor (Ray is not supported on CPU)."""
    profile = load_profile(ROOT / "profiles" / "tiny-cpu.yaml").with_overrides(
        tensor_parallel_size=2,
        gpu_memory_utilization=0.25,
        vllm={"env": {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_OMP_THREADS_BIND": "0|1"}},
    )
    plan = make_plan(profile)
    assert len(plan.ranks) == 2
    server = start_vllm(list(plan.argv), dict(plan.env), name="tp2")
    assert server.wait_for("KV cache size:"), server.text()[-3000:]
    text = server.text()
    server.stop()
    autos = list(logs.CPU_AUTO_SET.finditer(text))
    assert len(autos) == 2  # each rank claims its share of the node
    seen_total = logs.number(autos[0]["total"])
    if abs(seen_total - plan.machine.total_bytes / GiB) > 0.01:
        plan = make_plan(profile.with_overrides(gpu_memory_gib=seen_total))
    logged = int(logs.number(logs.KV_CACHE_SIZE.search(text)["tokens"]))  # type: ignore[index]
    predicted = plan.prediction.pool.tokens
    print(f"tp=2: predicted {predicted:,} logged {logged:,} ({100 * (predicted - logged) / logged:+.2f}%)")
    assert abs(predicted - logged) / logged <= 0.02
