"""vLLM 0.32 itself, layer by layer: scripts/quant_oracle.py builds every configs-2026 model with the CPU build on
the meta device and records its quantization config's answer for each layer. The answers must be the pinned ones
(tests/fixtures/quant-oracle/vllm-0.32.0.json, which tests/test_quant_oracle.py holds vlaunch's prices to), and
vlaunch must agree with every one of them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import ROOT, VLLM_PYTHON
from tests.quant_layers import PINNED, compare, load_model, oracle_label, pair_dirs


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    if not VLLM_PYTHON.exists():
        pytest.fail("real vLLM is not set up: run `make e2e`")
    tmp = tmp_path_factory.mktemp("quant-oracle")
    dirs = pair_dirs(tmp / "models")
    out = tmp / "oracle.json"
    cmd = [str(VLLM_PYTHON), str(ROOT / "scripts" / "quant_oracle.py"), str(out), *map(str, dirs)]
    subprocess.run(cmd, check=True, cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=2400)
    records: dict[str, dict[str, Any]] = json.loads(out.read_text())
    return records


def test_vllm_answers_as_pinned(fresh: dict[str, dict[str, Any]]) -> None:
    pinned = json.loads(PINNED.read_text())
    assert sorted(fresh) == sorted(pinned)
    changed = [name for name in pinned if fresh[name] != pinned[name]]
    assert changed == [], f"vLLM answers otherwise than pinned for {changed}"


def test_vlaunch_agrees_with_vllm_on_every_layer(fresh: dict[str, dict[str, Any]], tmp_path: Path) -> None:
    dirs = {d.name: d for d in pair_dirs(tmp_path)}
    total = 0
    for name, rec in sorted(fresh.items()):
        if not rec.get("layers"):
            continue
        model, spec = load_model(dirs[name])
        if spec.unread:  # vLLM reads no quantization: every layer 16-bit, and vlaunch refuses the launch for it
            assert {oracle_label(m, d) for _, m, d in rec["layers"].values()} == {None}, name
            continue
        result = compare(rec, model, spec)
        assert result.disagree == [], f"{name}: " + "\n".join(result.disagree[:20])
        assert result.unmatched == [], f"{name}: {result.unmatched[:20]}"
        total += result.agree
    assert total > 20_000
