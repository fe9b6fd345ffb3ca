"""The plan's memory besides KV as named terms (plan --json's non_kv_terms and post_pool), the interconnect that
sizes tensor parallel's buffers, and the launches that start, carve the pool, then run out."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from launcher.cli import main
from launcher.plan import budget
from launcher.plan.planning import make_plan, profile_from_flags

GiB = 1 << 30
LLAMA8B = "meta-llama/Llama-3.1-8B-Instruct"
QWEN30B = "Qwen/Qwen3-30B-A3B"
PROFILES = Path(__file__).resolve().parent.parent / "profiles"


def plan(*args: str) -> dict[str, Any]:
    r = CliRunner().invoke(main, ["plan", *args, "--json"])
    assert r.exit_code in (0, 3), r.stderr + r.stdout[-2000:]
    data: dict[str, Any] = json.loads(r.stdout)
    return data


def terms(d: dict[str, Any], where: str | None = None) -> dict[str, int]:
    out: dict[str, int] = {}
    for t in d["non_kv_terms"]:
        if where is None or t["where"] == where:
            out[t["name"]] = out.get(t["name"], 0) + t["bytes"]
    return out


CASES = [
    ["--model", LLAMA8B, "--machine", "h100-80gb", "--vllm-version", "0.19.0"],
    ["--model", LLAMA8B, "--machine", "h100-80gb", "--vllm-version", "0.32.0", "-tp", "2"],
    ["--model", LLAMA8B, "--machine", "a100-80gb", "--vllm-version", "0.10.1", "-tp", "2"],
    ["--model", QWEN30B, "--machine", "h200", "--vllm-version", "0.11.0", "-pp", "2"],
    ["--model", LLAMA8B, "--machine", "rtx4090", "--vllm-version", "0.8.5", "-q", "awq", "--enforce-eager"],
    ["--model", LLAMA8B, "--machine", "dgx-spark", "--vllm-version", "0.32.0", "--max-model-len", "32768"],
    ["--model", LLAMA8B, "--machine", "cpu", "--gpu-memory-gib", "64", "--vllm-version", "0.32.0"],
    ["--model", LLAMA8B, "--machine", "h100-80gb", "--overhead-gib", "1.5", "--max-num-batched-tokens", "8192"],
]


@pytest.mark.parametrize("args", CASES, ids=lambda a: "-".join(a[3:]))
def test_budget_terms_add_up_to_what_profiling_keeps_out_of_the_pool(args: list[str]) -> None:
    d = plan(*args)
    assert d["non_kv_terms"], "every plan states its terms"
    for t in d["non_kv_terms"]:
        assert t["source"] in ("source-derived", "calibrated", "default", "given", "measured") and t["basis"]
        assert t["where"] in ("budget", "outside", "post_pool") and t["bytes"] >= 0
    if d["engine"].get("kv_cache_memory_bytes") is None:
        in_budget = sum(terms(d, "budget").values())
        assert in_budget == d["requested_bytes"] - d["available_kv_bytes"]
    post = d["post_pool"]
    assert post["need_bytes"] == sum(p["bytes"] for p in post["peaks"])
    assert post["room_bytes"] == d["machine_total_bytes"] - d["os_reserve_bytes"] - d["requested_bytes"]


def test_tensor_parallel_buffers_follow_the_interconnect() -> None:
    base = ["--model", LLAMA8B, "--machine", "h100-80gb", "--vllm-version", "0.19.0", "-tp", "2"]
    by_link = {link: terms(plan(*base, "--interconnect", link))["nccl_all_reduce"] for link in
               ("nvswitch", "nvlink", "pcie", "network")}  # fmt: skip
    # the H100 logs of vLLM 0.19: 2.07-2.13 GiB of non-torch memory with TP 2 and 4, against 0.25 GiB at TP 1
    assert 1.80 * GiB <= by_link["nvswitch"] + 0.25 * GiB <= 2.13 * GiB
    assert by_link["nvswitch"] > by_link["nvlink"] > by_link["pcie"] > by_link["network"] == 0
    auto = plan(*base)
    assert terms(auto)["nccl_all_reduce"] == by_link["nvswitch"]  # h100-80gb is an HGX board
    link = next(t for t in auto["non_kv_terms"] if t["name"] == "nccl_all_reduce")
    assert "nvswitch" in link["basis"]
    one = plan("--model", LLAMA8B, "--machine", "h100-80gb", "--vllm-version", "0.19.0")
    assert "nccl_all_reduce" not in terms(one)


def test_two_sparks_talk_over_the_network() -> None:
    d = plan(str(PROFILES / "two-sparks-70b.yaml"))
    link = next(t for t in d["non_kv_terms"] if t["name"] == "nccl_all_reduce")
    assert link["bytes"] == 0 and "spans nodes" in link["basis"]


def test_interconnect_is_a_checked_profile_field(tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["plan", "--model", LLAMA8B, "--machine", "h100-80gb", "--interconnect", "nvlnk"])
    assert r.exit_code != 0 and "did you mean 'nvlink'" in r.stderr


# --- after the pool: vLLM starts, carves its pool, then runs out ----------------------------------------------------


def test_graphs_captured_after_the_pool_do_not_fit_above_a_tight_budget() -> None:
    """Before vLLM 0.20 CUDA graphs are captured after the pool, outside the budget (gpu_worker.py: the estimate
    joined the budget in 0.20): at 0.99 of an H100 the 0.79 GiB above the budget holds the CUDA context but not the
    graphs too."""
    args = ["--model", LLAMA8B, "--machine", "h100-80gb", "--gpu-memory-utilization", "0.99"]
    old = plan(*args, "--vllm-version", "0.19.0")
    assert old["fits"] is False and old["failure"] == "cuda_oom"
    assert old["post_pool"]["binding"] == "cuda_graph_capture"
    assert any("run out capturing CUDA graphs" in r for r in old["reasons"]), old["reasons"]
    new = plan(*args, "--vllm-version", "0.20.0")  # the estimate is inside the budget: only the context is outside
    assert new["post_pool"]["binding"] is None and new["failure"] != "cuda_oom"
    eager = plan(*args, "--vllm-version", "0.19.0", "--enforce-eager")
    assert eager["post_pool"]["binding"] is None


def test_the_cuda_context_alone_past_the_gpu() -> None:
    d = plan("--model", LLAMA8B, "--machine", "h100-80gb", "--gpu-memory-utilization", "1.0", "--vllm-version",
             "0.32.0")  # fmt: skip
    assert d["failure"] == "cuda_oom" and d["post_pool"]["binding"] == "cuda_context"
    assert any("the CUDA context alone" in r for r in d["reasons"])


def test_a_sampler_warm_up_past_the_freed_peak_is_a_post_pool_peak() -> None:
    """The warm-up (V1, after the graphs) reuses the activation peak profiling freed; a peak calibrated below the
    sampler's need leaves the rest to fresh memory."""
    sampler, peak = 3 * GiB, 2 * GiB
    act = budget.Activation(forward=peak, sampler=sampler, encoder=0, peak=peak, model="vllm-v1 (calibrated)")
    args = _args(engine="v1")
    assert budget.sampler_excess(args, act) == sampler - peak
    assert budget.sampler_excess(_args(engine="v0"), act) == 0  # V0 warms no sampler after its pool
    full = budget.Activation(forward=peak, sampler=sampler, encoder=0, peak=sampler, model="vllm-v1")
    assert budget.sampler_excess(args, full) == 0


def _args(engine: str) -> budget.EngineArgs:
    p = make_plan(profile_from_flags(LLAMA8B, None, machine="h100-80gb"), live=False)
    return dataclasses.replace(p.prediction.args, engine=engine)


def test_the_fix_for_a_post_pool_oom_is_a_utilization_that_leaves_room() -> None:
    args = ["--model", LLAMA8B, "--machine", "h100-80gb", "--vllm-version", "0.19.0", "--max-model-len", "8192"]
    d = plan(*args, "--gpu-memory-utilization", "0.99")
    [fix] = [f for f in d["fixes"] if f.startswith("--gpu-memory-utilization")]
    util = fix.split()[1]
    again = plan(*args, "--gpu-memory-utilization", util)
    assert again["fits"] is True and again["post_pool"]["binding"] is None


# --- weights per rank: vision towers under tensor parallel ------------------------------------------------------------

SCOUT = str(Path(__file__).parent / "fixtures" / "configs-v2" / "extra" / "llama4--scout-17b-16e.json")


def test_vision_tower_linear_layers_split_over_tensor_parallel() -> None:
    """vLLM builds Llama 4's vision encoder from its parallel linear layers: at TP 4 a rank of Llama-4-Scout loads
    53.12 GiB ("Model loading took 53.12 GiB", H100 × 4), not the whole 1.66 GiB tower on top of its share."""
    d = plan("--model", SCOUT, "--machine", "h100-80gb", "-tp", "4", "--vllm-version", "0.19.0",
             "--max-model-len", "8192")  # fmt: skip
    assert abs(d["weights_bytes"] / GiB - 53.12) <= 0.1


# --- the activation peak of a MoE: the fused-MoE workspace held through the sampler run ----------------------------


def test_moe_workspace_is_held_through_the_sampler_run() -> None:
    """vLLM 0.13+ keeps fused MoE's workspace in the worker's WorkspaceManager: the profile's sampler runs beside
    it. Qwen3-30B-A3B (hidden 2048, 8 of 128 experts, expert width 768) with 8,192 batched tokens: TritonExperts'
    workspace13 (M, 8, max(768, 2048)) and workspace2 (M, 8, max(1536, 2048)) in bf16 = 2 × 8192 × 8 × 4096 bytes;
    the log of that launch implies a 2.68 GiB peak where the sampler alone is 2.2."""
    args = ["--model", QWEN30B, "--machine", "h100-80gb", "--max-model-len", "8192"]
    d = plan(*args, "--vllm-version", "0.19.0")
    act = d["activation"]
    assert d["engine"]["max_num_batched_tokens"] == 8192
    assert act["moe_workspace"] == 2 * 8192 * 8 * (2048 + 2048)
    assert abs(d["activation_peak_bytes"] / GiB - 2.68) <= 0.05
    old = plan(*args, "--vllm-version", "0.12.0")  # before the WorkspaceManager the forward's buffers are freed
    assert old["activation"]["moe_workspace"] == 0 and old["activation_peak_bytes"] < d["activation_peak_bytes"]
    dense = plan("--model", LLAMA8B, "--machine", "h100-80gb", "--vllm-version", "0.19.0")
    assert dense["activation"]["moe_workspace"] == 0


# --- decode context parallel: each rank keeps 1/dcp of a request's attention tokens -----------------------------------


@pytest.mark.parametrize("version", ["0.19.0", "0.32.0"])
def test_decode_context_parallel_shards_the_pool_by_tokens(version: str) -> None:
    """FullAttentionSpec.max_memory_usage_bytes (0.19) keeps cdiv(max_model_len, dcp) tokens per rank, and the
    0.19 log multiplies its token count by dcp; 0.32 spans a block over block_size × dcp tokens and logs
    concurrency × max_model_len. Either way a request takes 1/dcp of the blocks."""
    mml = 131072
    base = ["--model", LLAMA8B, "--machine", "h100-80gb", "-tp", "4", "--vllm-version", version,
            "--max-model-len", str(mml), "--gpu-memory-utilization", "0.9"]  # fmt: skip
    one, two = plan(*base), plan(*base, "-dcp", "2")
    blocks = two["kv_pool_blocks"]
    assert blocks == one["kv_pool_blocks"]  # the same memory, the same pages
    per_request = 4096  # cdiv(cdiv(131072, 2), 16): 65,536 tokens per rank in blocks of 16
    assert two["max_concurrency"] == round(blocks / per_request, 2)
    if version == "0.19.0":
        assert two["kv_pool_tokens"] == blocks * 16 * 2
    else:
        assert two["kv_pool_tokens"] == int(blocks / per_request * mml)
    assert "--decode-context-parallel-size" in two["vllm_argv"]
    bad = plan(*base, "-dcp", "3")
    assert bad["failure"] == "invalid_config" and "divisible by dcp_size=3" in bad["reasons"][0]


def test_gemma4_wrapper_loads_its_per_layer_embedding_buffer() -> None:
    """Gemma4ForConditionalGeneration pre-allocates max_num_batched_tokens × layers × hidden_size_per_layer_input
    in the model dtype while loading (gemma4_mm.py), --language-model-only too; Gemma4ForCausalLM does not. The
    default configs: 30 layers, a per-layer input of 256, the same parameters in both."""
    configs = Path(__file__).parent / "fixtures" / "configs-v2" / "configs"
    args = ["--machine", "h100-80gb", "--vllm-version", "0.32.0", "--max-model-len", "8192"]
    wrapper = plan("--model", str(configs / "gemma4--default.json"), *args, "--language-model-only")
    text = plan("--model", str(configs / "gemma4_text--default.json"), *args)
    assert wrapper["engine"]["max_num_batched_tokens"] == 8192
    assert wrapper["weights_bytes"] - text["weights_bytes"] == 8192 * 30 * 256 * 2
