"""DeepSeek-V4's KV cache pool against vLLM 0.32's own code (.venv-vllm): scripts/kv_dsv4_oracle.py builds every
cache layer's spec with vLLM's get_kv_cache_spec of its class and groups, counts and prices them with vLLM's
kv_cache_utils; vlaunch's plan must give the same blocks, bytes per block, logged tokens and concurrency for the
memory it leaves the pool. (The CPU build cannot boot DeepSeek-V4: this is vLLM's arithmetic, not a measured boot.)"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from launcher.plan.planning import make_plan, profile_from_flags
from tests.e2e.conftest import ROOT, VLLM_PYTHON

CONFIGS = ROOT / "tests" / "fixtures" / "configs-2026"
MTP = {"method": "mtp", "num_speculative_tokens": 2}
# (config, flags): both exports on 8 H200s with vLLM's defaults, shorter contexts, MTP, a bigger block, one Spark
CASES: list[tuple[str, dict[str, Any]]] = [
    ("deepseek-ai--DeepSeek-V4-Pro", {"machine": "h200", "tensor_parallel_size": 8}),
    ("nvidia--DeepSeek-V4-Flash-NVFP4", {"machine": "h200", "tensor_parallel_size": 8}),
    ("nvidia--DeepSeek-V4-Flash-NVFP4", {"machine": "h200", "tensor_parallel_size": 4, "max_model_len": 256_000,
                                         "max_num_batched_tokens": 6144, "speculative_config": MTP}),
    ("deepseek-ai--DeepSeek-V4-Pro", {"machine": "h200", "tensor_parallel_size": 8, "block_size": 512,
                                      "max_model_len": 131_072, "kv_cache_dtype": "fp8"}),
    ("nvidia--DeepSeek-V4-Flash-NVFP4", {"machine": "dgx-spark", "max_model_len": 65_536,
                                         "kv_cache_memory_bytes": 20 << 30}),
]  # fmt: skip


def _model_dir(tmp: Path, name: str) -> Path:
    (tmp / "config.json").write_text((CONFIGS / f"{name}_config.json").read_text())
    quant = CONFIGS / f"{name}_hf_quant_config.json"
    if quant.exists():
        (tmp / "hf_quant_config.json").write_text(quant.read_text())
    return tmp


def _id(x: Any) -> str:
    if isinstance(x, str):
        return x.split("--")[1]
    return "-".join("mtp" if k == "speculative_config" else f"{k}={v}" for k, v in x.items())


@pytest.mark.parametrize(("name", "flags"), CASES, ids=_id)
def test_pool_matches_vllm(tmp_path: Path, name: str, flags: dict[str, Any]) -> None:
    if not VLLM_PYTHON.exists():
        pytest.skip("no .venv-vllm (make vllm-cpu)")
    profile = profile_from_flags(str(_model_dir(tmp_path, name)), None, **flags)
    p = make_plan(profile.with_overrides(vllm={"version": "0.32.0"}), live=False).prediction
    ctx = p.args.context()
    case = {"available": p.available_kv_bytes, "max_model_len": ctx.max_model_len,
            "max_num_batched_tokens": ctx.max_num_batched_tokens, "concurrent_batches": ctx.max_concurrent_batches,
            "mtp": 1 if "speculative_config" in flags else 0, "kv_cache_dtype": flags.get("kv_cache_dtype", "auto"),
            "block_size": p.args.block_size}  # fmt: skip
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu"}
    argv = [str(VLLM_PYTHON), str(ROOT / "scripts" / "kv_dsv4_oracle.py"), str(CONFIGS / f"{name}_config.json"),
            json.dumps([case])]  # fmt: skip
    run = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600, check=True)
    (theirs,) = json.loads(run.stdout.strip().splitlines()[-1])
    assert p.layout.bytes_per_block == theirs["bytes_per_block"]
    assert sorted((g.layers, g.blocks_per_request(ctx)) for g in p.layout.groups) == sorted(
        (g["layers"], g["blocks_per_request"]) for g in theirs["groups"]
    )
    assert p.pool.num_blocks == theirs["num_blocks"]
    assert p.pool.tokens == theirs["tokens"]
    assert p.pool.max_concurrency == pytest.approx(theirs["concurrency"], rel=1e-12)
