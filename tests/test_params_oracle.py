"""Parameter counts against transformers' own meta-device counts (ORACLE.tsv) and the lesson's figures."""

from __future__ import annotations

import csv
import json

import pytest

from launcher.model.arch import read_config as shape_from_config
from launcher.model.params import count
from tests.conftest import CONFIGS

ORACLE = list(csv.DictReader((CONFIGS / "ORACLE.tsv").read_text().splitlines(), delimiter="\t"))


def _count(name: str):
    cfg = json.loads((CONFIGS / f"{name}.json").read_text())
    return count(shape_from_config(cfg, name))


def test_oracle_covers_every_config() -> None:
    names = {r["model"].split("#")[0] for r in ORACLE}
    files = {p.stem for p in CONFIGS.glob("*.json") if not p.name.endswith(".hf_quant_config.json")}
    assert names == files
    assert len(ORACLE) == 52


@pytest.mark.parametrize("row", ORACLE, ids=[r["model"] for r in ORACLE])
def test_matches_transformers(row: dict[str, str]) -> None:
    name = row["model"]
    full = name.endswith("#full-multimodal")
    c = _count(name.split("#")[0])
    assert (c.total if full else c.text_total) == int(row["total_params"])
    # The oracle's buckets, by parameter name: q/k norms and MLA's a-layernorms are "norms" there.
    attn_norms = c.detail.get("attention_norms", 0)
    assert c.parts["embedding"] == int(row["embed"])
    assert c.parts["lm_head"] == int(row["lm_head"])
    assert c.parts["attention"] - attn_norms == int(row["attn"])
    assert c.parts["mlp"] + c.parts["experts"] == int(row["mlp"])
    assert c.parts["norms"] + attn_norms == int(row["norms"])
    if full:
        assert c.parts["vision"] == int(row["other"])
        assert c.total - c.text_total == int(row["other"])


@pytest.mark.parametrize(
    ("name", "total"),
    [
        ("Llama-3.1-8B", 8_030_261_248),
        ("Llama-3.2-1B-Instruct", 1_235_814_400),
        ("Llama-3.1-70B", 70_553_706_496),
        ("Qwen2.5-7B", 7_615_616_512),
        ("Qwen3-8B", 8_190_735_360),
    ],
)
def test_lesson_figures(name: str, total: int) -> None:
    assert _count(name).total == total


def test_lesson_llama8b_breakdown() -> None:
    c = _count("Llama-3.1-8B")
    assert set(c.per_layer) == {218_112_000}
    assert c.parts["embedding"] == c.parts["lm_head"] == 525_336_576
    assert c.parts["attention"] == 32 * 41_943_040
    assert c.parts["mlp"] == 32 * 176_160_768
    assert c.parts["norms"] == 32 * 8_192 + 4_096


def test_tied_head_costs_nothing() -> None:
    c = _count("Llama-3.2-1B-Instruct")
    assert c.parts["lm_head"] == 0
    assert c.parts["embedding"] == 128_256 * 2_048


def test_multimodal_total_includes_vision() -> None:
    c = _count("gemma-3-27b-it")
    assert c.text_total == 27_009_346_304
    assert c.total == 27_432_406_640


def test_moe_detail() -> None:
    c = _count("DeepSeek-V2-Lite")
    # layer 0 dense (first_k_dense_replace=1), then 64 routed + 2 shared experts of 1408
    assert c.detail["dense_first"] == 3 * 2048 * 10944
    assert c.detail["shared_experts"] == 26 * 3 * 2048 * 2 * 1408
    assert c.detail["routed_experts"] == 26 * 64 * 3 * 2048 * 1408
    assert c.detail["router"] == 26 * 64 * 2048
