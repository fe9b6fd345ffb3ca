"""Hybrid models on real vLLM (CPU build): the plan's pool, block size and groups against the boot's own log.

Two tiny random models built here with transformers (`scripts/cpu_family_logs.py --build-only`): Qwen3-Next
(Gated DeltaNet + full attention, MoE) and Granite 4.0-H (Mamba2 + attention: vLLM raises the attention block
size to 640 tokens so a page holds a state). Sized with an explicit --kv-cache-memory-bytes, the pool must come
out exact, whatever the host's memory does meanwhile.
"""

from __future__ import annotations

import subprocess

import pytest

from launcher.check.compare import compare
from launcher.check.parser import parse_text
from launcher.plan.planning import make_plan
from launcher.plan.profiles import load_profile
from tests.e2e.conftest import ROOT, VLLM_PYTHON

FAMILIES = ("qwen3_next", "granitemoehybrid")


@pytest.fixture(scope="module")
def tiny_hybrids() -> None:
    missing = [f for f in FAMILIES if not (ROOT / ".cache" / "tiny-families" / f / "config.json").exists()]
    if missing:
        argv = [str(VLLM_PYTHON), "scripts/cpu_family_logs.py", "--build-only"]
        for f in missing:
            argv += ["--family", f]
        subprocess.run(argv, cwd=ROOT, check=True, timeout=600)


@pytest.mark.parametrize("family", FAMILIES)
def test_hybrid_pool_exact(vllm_ready: None, tiny_hybrids: None, start_vllm, family: str) -> None:
    profile = load_profile(ROOT / "profiles" / "tiny-cpu.yaml").with_overrides(
        name=f"tiny-{family}",
        model=f".cache/tiny-families/{family}",
        max_model_len=4096,
        users=1,
        kv_cache_memory_bytes=256 << 20,
    )
    plan = make_plan(profile)
    server = start_vllm(list(plan.argv), dict(plan.env), name=family)
    assert server.wait_for("KV cache size:"), server.text()[-3000:]
    text = server.text()
    server.stop()
    facts = parse_text(text)
    p = plan.prediction
    print(
        f"{family}: predicted {p.pool.tokens:,} tokens, block {p.layout.block_size}, {p.layout.n_groups} groups; "
        f"logged {facts.kv_pool_tokens:,} tokens, block {facts.block_size}, groups {facts.kv_cache_groups}"
    )
    assert facts.kv_pool_tokens == p.pool.tokens
    assert f"{facts.max_concurrency:.2f}" == f"{p.pool.max_concurrency:.2f}"
    assert facts.mamba_cache_mode == p.args.mamba_cache_mode == "align"
    rows = {r.bucket: r for r in compare(plan, facts).rows}
    assert rows["kv_pool_tokens"].delta == 0
    if facts.block_size is not None:
        assert facts.block_size == p.layout.block_size
    if facts.kv_cache_groups is not None:
        assert facts.kv_cache_groups == p.layout.n_groups
