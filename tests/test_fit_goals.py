"""`vlaunch fit` decides like an expert: one box unless the user owns more, the user's goal (--prefer) and targets
(--min-tokens-per-s, --max-ttft), expected speed next to the ceiling, and formats that exist."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from launcher.cli import main

EXTRA = Path(__file__).parent / "fixtures" / "configs-v2" / "extra"
LLAMA8B = "meta-llama/Llama-3.1-8B-Instruct"
NEMOTRON9B = str(EXTRA / "nemotron_h--nemotron-nano-9b-v2.json")
QWEN_NEXT = str(EXTRA / "qwen3_next--80b-a3b-instruct.json")
DECODE_KEYS = {"tokens_per_s", "expected_tokens_per_s", "expected_aggregate_tokens_per_s", "expected_source",
               "ttft_s", "ttft_source"}  # fmt: skip


def fit_json(*args: str, codes: tuple[int, ...] = (0, 3)) -> dict[str, Any]:
    r = CliRunner().invoke(main, ["fit", *args, "--json"])
    assert r.exit_code in codes, r.stderr + r.stdout[-2000:]
    return json.loads(r.stdout)


def chosen(d: dict[str, Any]) -> dict[str, Any]:
    [row] = [o for o in d["options"] if o["chosen"]]
    assert row["rank"] == d["chosen"]
    return row


# What an expert runs on one DGX Spark (128 GB shared): the checkpoint's own format when it fits with room for the
# users (gpt-oss's MXFP4); else vLLM's online fp8 (near-lossless, half the bytes of bf16, so twice the decode); 4-bit
# only when 8-bit cannot hold the users (GLM-4.5-Air: 110 GB at fp8).
SPARK_PICKS = [
    ("meta-llama/Llama-3.1-70B-Instruct", "fp8", "online"),
    (QWEN_NEXT, "fp8", "online"),
    (str(EXTRA / "glm4_moe--glm-4.5-air.json"), "mxfp4", "online"),
    ("openai/gpt-oss-120b", "mxfp4", "own"),
    (NEMOTRON9B, "fp8", "online"),
    (str(EXTRA / "granitemoehybrid--granite-4.0-h-small.json"), "fp8", "online"),
]


@pytest.mark.parametrize(("users", "context"), [("4", "32k"), ("32", "8k")])
@pytest.mark.parametrize(("model", "fmt", "kind"), SPARK_PICKS, ids=lambda v: Path(str(v)).stem[:24])
def test_rank_1_on_one_spark_is_one_box(model: str, fmt: str, kind: str, users: str, context: str) -> None:
    d = fit_json(model, "--machine", "dgx-spark", "--users", users, "--context", context, codes=(0,))
    best = chosen(d)
    assert best["rank"] == 1 and best["fits"] and best["meets_targets"]
    assert (best["nodes"], best["gpus"]) == (1, 1)
    assert all(o["nodes"] == 1 for o in d["options"])  # a second box is the user's to offer (--max-nodes 2)
    assert (best["format"], best["checkpoint_format"]) == (fmt, kind)
    assert d["prefer"] == "balanced" and d["ranking_rule"].startswith("rows that fit")
    assert set(best["decode"]) >= DECODE_KEYS
    assert (
        best["decode"]["expected_tokens_per_s"] <= best["decode"]["tokens_per_s"] * 1.0001 or best["speculative_config"]
    )  # below the ceiling, unless MTP drafts are counted accepted


def test_json_contract_adds_and_keeps() -> None:
    d = fit_json(LLAMA8B, "--machine", "dgx-spark", "--users", "4", "--context", "8k")
    assert {"ranking_rule", "prefer", "mtp_acceptance", "meets_targets"} <= set(d)
    assert {"min_tokens_per_s", "max_ttft_s"} <= set(d["target"])
    for o in d["options"]:
        assert set(o["decode"]) >= DECODE_KEYS
        assert o["decode_tokens_per_s_ceiling"] == o["decode"]["tokens_per_s"]
        assert o["decode"]["expected_source"] in ("measured", "calibrated", "default")
        assert o["decode"]["ttft_source"] in ("measured", "calibrated", "default")


def test_balanced_gives_up_bf16_for_speed_and_quality_keeps_it() -> None:
    """Nemotron-Nano-9B-v2 at 4 × 32K: fp8 decodes ~1.9× faster than bf16 for a difference few users see."""
    bal = chosen(fit_json(NEMOTRON9B, "--machine", "dgx-spark", "--users", "4", "--context", "32k"))
    q = chosen(fit_json(NEMOTRON9B, "--machine", "dgx-spark", "--users", "4", "--context", "32k", "--prefer",
                        "quality"))  # fmt: skip
    assert bal["format"] == "fp8" and q["format"] == "bf16" and q["kv_cache_dtype"] == "auto"
    assert bal["decode"]["expected_tokens_per_s"] > 1.5 * q["decode"]["expected_tokens_per_s"]


def test_speed_puts_the_fastest_first() -> None:
    d = fit_json(LLAMA8B, "--machine", "dgx-spark", "--users", "1", "--context", "8k", "--prefer", "speed")
    eligible = [o for o in d["options"] if o["fits"] and o["meets_targets"] and not o["needs_checkpoint"]]
    best = chosen(d)
    fastest = max(o["decode"]["expected_tokens_per_s"] for o in eligible)
    assert best["decode"]["expected_tokens_per_s"] >= fastest / 1.05
    assert best["format"] == "mxfp4"  # 4-bit weights: the fewest bytes per step


def test_min_tokens_per_s_target() -> None:
    base = [LLAMA8B, "--machine", "dgx-spark", "--users", "1", "--context", "8k"]
    free = chosen(fit_json(*base))
    target = free["decode"]["expected_tokens_per_s"] * 1.2  # more than the balanced pick reaches
    d = fit_json(*base, "--min-tokens-per-s", f"{target:.2f}")
    best = chosen(d)
    assert best["decode"]["expected_tokens_per_s"] >= target
    slow = [o for o in d["options"] if o["fits"] and o["decode"]["expected_tokens_per_s"] < target]
    assert slow and all(not o["meets_targets"] and o["target_misses"] for o in slow)
    assert all(o["rank"] > best["rank"] for o in slow)
    # a target no row reaches: nothing chosen, exit 3, the note names the fastest
    r = CliRunner().invoke(main, ["fit", *base, "--min-tokens-per-s", "10000", "--json"])
    assert r.exit_code == 3
    out = json.loads(r.stdout)
    assert out["chosen"] is None and out["fits"] and not out["meets_targets"]
    assert any("no row meets the targets" in n for n in out["notes"])


def test_max_ttft_target() -> None:
    """Llama-3.1-8B at 32K on a Spark: bf16 prefill runs at BF16's tensor rate, fp8 at FP8's (twice): a 10 s
    target turns quality's bf16 pick into fp8."""
    base = [LLAMA8B, "--machine", "dgx-spark", "--users", "1", "--context", "32k", "--prefer", "quality"]
    assert chosen(fit_json(*base))["format"] == "bf16"
    d = fit_json(*base, "--max-ttft", "10")
    best = chosen(d)
    assert best["decode"]["ttft_s"] <= 10 and best["format"] != "bf16"
    bf16 = [o for o in d["options"] if o["format"] == "bf16" and o["fits"]]
    assert bf16 and all(any("time to first token" in m for m in o["target_misses"]) for o in bf16)


def test_mtp_acceptance_moves_only_mtp_rows() -> None:
    args = [QWEN_NEXT, "--machine", "dgx-spark", "--users", "1", "--context", "8k", "--formats", "fp8"]
    lo, hi = fit_json(*args, "--mtp-acceptance", "0"), fit_json(*args, "--mtp-acceptance", "1")
    assert lo["mtp_acceptance"] == 0 and hi["mtp_acceptance"] == 1

    def speeds(d: dict[str, Any], mtp: bool) -> list[float]:
        rows = sorted((o for o in d["options"] if bool(o["speculative_config"]) == mtp),
                      key=lambda o: (o["kv_cache_dtype"], o["max_num_seqs"]))  # fmt: skip
        return [o["decode"]["expected_tokens_per_s"] for o in rows]

    assert speeds(lo, False) == speeds(hi, False)
    assert all(a < b for a, b in zip(speeds(lo, True), speeds(hi, True), strict=True))
    # no draft accepted: MTP only costs (its layer is read, nothing gained)
    assert max(speeds(lo, True)) < max(speeds(lo, False))


def test_rows_that_need_another_checkpoint_rank_last_and_are_never_chosen() -> None:
    d = fit_json(LLAMA8B, "--machine", "dgx-spark", "--users", "1", "--context", "8k", "--formats", "bf16,awq,fp8")
    needed = [o for o in d["options"] if o["needs_checkpoint"]]
    assert needed and all(o["format"] == "awq" and o["checkpoint_format"] == "needed" for o in needed)
    assert all(not o["chosen"] for o in needed)
    last_ok = max(o["rank"] for o in d["options"] if o["fits"] and not o["needs_checkpoint"])
    assert all(o["rank"] > last_ok for o in needed if o["fits"])
    assert all(any("needs a awq checkpoint" in r for r in o["reasons"]) for o in needed)


def test_max_nodes_comes_from_a_two_box_profile() -> None:
    d = fit_json("two-sparks-70b", "--context", "8192")
    assert {o["nodes"] for o in d["options"]} == {2}


def test_expert_parallel_is_offered_for_a_moe_over_gpus() -> None:
    d = fit_json("Qwen/Qwen3-30B-A3B", "--machine", "h100-80gb", "--gpus", "2", "--users", "4", "--context", "8k")
    ep = [o for o in d["options"] if o["expert_parallel"]]
    assert ep and all(o["tensor_parallel_size"] > 1 for o in ep)
    assert all("--enable-expert-parallel" in o["flags"] for o in ep)
    dense = fit_json(LLAMA8B, "--machine", "h100-80gb", "--gpus", "2", "--users", "4", "--context", "8k")
    assert not any(o["expert_parallel"] for o in dense["options"])


def test_text_output_states_the_rule_and_the_sources() -> None:
    r = CliRunner().invoke(main, ["fit", LLAMA8B, "--machine", "dgx-spark", "--users", "4", "--context", "8k"])
    assert r.exit_code == 0, r.stderr
    assert "ranked for balanced (--prefer): rows that fit" in r.stdout
    assert "c: calibrated from published measured points" in r.stdout
    header = next(x for x in r.stdout.splitlines() if x.strip().startswith("#"))
    assert "tok/s≤" in header and "TTFT" in header
