"""vlaunch prices every layer of every configs-2026 checkpoint in the format vLLM 0.32 stores it in.

The truth is vLLM's own answer, layer by layer: scripts/quant_oracle.py builds each model with vLLM's CPU build on the
meta device and records what its quantization config class returned for every layer it built (pinned in
tests/fixtures/quant-oracle/vllm-0.32.0.json; tests/e2e/test_quant_oracle.py makes it again from vLLM and checks the
pin). Here, without vLLM, each of those layers is matched to the tensors vlaunch prices for it and the formats must
agree: the ModelOpt NVFP4 / FP8 / MXFP8 / MIXED_PRECISION exports, DeepSeek-V4's NVFP4 and MXFP4 experts behind
block-FP8 layers, block-FP8, MXFP4 (gpt-oss) and 16-bit checkpoints alike.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from launcher.model.formats import weight_bytes
from launcher.vllm import served
from tests.quant_layers import PINNED, compare, load_model, oracle_label, pair_dirs

RECORDS: dict[str, dict[str, Any]] = json.loads(PINNED.read_text())
BUILT = sorted(name for name, rec in RECORDS.items() if rec.get("layers"))


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {d.name: d for d in pair_dirs(tmp_path_factory.mktemp("configs-2026"))}


def test_every_config_has_an_oracle_record(model_dirs: dict[str, Path]) -> None:
    assert sorted(model_dirs) == sorted(RECORDS)
    assert len(BUILT) >= 59  # the models vLLM's CPU build constructs; the rest are named in the e2e test


@pytest.mark.parametrize("name", BUILT)
def test_every_layer_priced_as_vllm_stores_it(name: str, model_dirs: dict[str, Path]) -> None:
    model, spec = load_model(model_dirs[name])
    if spec.unread:  # vLLM reads no quantization here: every layer 16-bit, and vlaunch refuses the launch for it
        assert {oracle_label(m, d) for _, m, d in RECORDS[name]["layers"].values()} == {None}
        assert RECORDS[name]["quantization"] is None
        return
    result = compare(RECORDS[name], model, spec)
    assert result.disagree == [], "\n".join(result.disagree[:20])
    assert result.unmatched == [], f"vLLM layers vlaunch has no tensor for: {result.unmatched[:20]}"
    assert result.agree == len(RECORDS[name]["layers"]) - result.skipped


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_every_config_counts_and_what_vllm_refuses_is_refused(name: str, model_dirs: dict[str, Path]) -> None:
    """Every configs-2026 file gets its weights; where vLLM 0.32 will not build the model, vlaunch's plan refuses it
    with vLLM's own words, and where vLLM builds it, vlaunch does not refuse it for that."""
    model, spec = load_model(model_dirs[name])
    assert weight_bytes(model, spec).total_bytes > 0
    cfg = json.loads((model_dirs[name] / "config.json").read_text())
    ours = served.refusal(
        cfg.get("architectures") or [], str(cfg["model_type"]), version=(0, 32, 0), trust_remote_code=False,
        auto_map=isinstance(cfg.get("auto_map"), dict),
    )  # fmt: skip
    rec = RECORDS[name]
    if rec.get("stage") == "model_config":  # vLLM's ModelConfig refused it
        assert ours is not None
        said = rec["reason"]
        words = (
            "custom code" if "custom code" in said else "does not recognize" if "recognize" in said else "not supported"
        )
        assert words in said and ("trust-remote-code" in ours if words == "custom code" else words in ours)
    else:
        assert ours is None, ours
