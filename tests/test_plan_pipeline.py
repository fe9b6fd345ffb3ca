"""The plan's steps (launcher.plan.pipeline): each step's output on fixture configs, the figures worked out here
from the configs (layers, heads, head_dim, the published parameter counts), and the steps composing into exactly
what make_plan returns."""

from __future__ import annotations

import dataclasses
import math

import pytest

from launcher.plan import budget
from launcher.plan.cache import PlanCache
from launcher.plan.pipeline import Steps, explain
from launcher.plan.planning import Plan, make_plan, plan_of, profile_from_flags

LLAMA8B = "tests/fixtures/configs/Llama-3.1-8B.json"  # 32 layers, 8 KV heads × 128, vocab 128256, 131072 positions
QWEN30B = "tests/fixtures/configs/Qwen3-30B-A3B.json"  # 48 layers, 4 KV heads × 128, hidden 2048, 40960 positions
QWEN_NEXT = "tests/fixtures/configs-v2/configs/qwen3_next--default.json"  # 12 full-attention layers of 48
LLAMA8B_PARAMS = 8_030_261_248  # the checkpoint's safetensors parameter count
QWEN30B_PARAMS = 30_532_122_624


def steps_of(p: Plan) -> Steps:
    assert p.steps is not None
    return p.steps


def plan(config: str, **fields: object) -> Plan:
    return make_plan(profile_from_flags("m/x", config, **fields), live=False)


@pytest.fixture(scope="module")
def llama() -> Plan:
    return plan(LLAMA8B, machine="h100-80gb", max_model_len=8192, gpu_memory_utilization=0.5)


@pytest.fixture(scope="module")
def qwen_pp2() -> Plan:
    return plan(QWEN30B, machine="h100-80gb", max_model_len=8192, pipeline_parallel_size=2)


CASES = [
    (LLAMA8B, {"machine": "h100-80gb", "max_model_len": 8192, "gpu_memory_utilization": 0.5}),
    (QWEN30B, {"machine": "h100-80gb", "max_model_len": 8192, "pipeline_parallel_size": 2}),
    (QWEN_NEXT, {"machine": "dgx-spark", "max_model_len": 32768}),
    (LLAMA8B, {"machine": "rtx4090", "max_model_len": "auto"}),
    (LLAMA8B, {"machine": "cpu", "gpu_memory_gib": 8.71, "gpu_memory_utilization": 0.3, "max_model_len": 2048}),
]


@pytest.mark.parametrize(("config", "fields"), CASES, ids=["llama", "qwen-pp2", "qwen-next", "auto", "cpu"])
def test_steps_compose_into_what_make_plan_returns(config: str, fields: dict[str, object]) -> None:
    p = plan(config, **fields)
    s = p.steps
    assert s is not None
    again = plan_of(s)
    assert again == p and again.argv == p.argv and again.to_json() == p.to_json()
    # each step is fed the one before
    assert s.model.request is s.request
    assert s.weights.layers is s.model
    assert s.layout.weights is s.weights
    assert s.buckets.layout is s.layout
    assert s.verdict.buckets is s.buckets
    assert s.verdict.prediction is p.prediction and s.verdict.invalid == p.invalid
    assert len(s.weights.slots) == len(s.weights.weights) == len(s.layout.ranks) == len(s.buckets.ranks)
    assert len(s.verdict.predictions) == len(s.weights.slots)


def test_request_step(llama: Plan) -> None:
    r = steps_of(llama).request
    a = r.args
    assert (a.max_model_len, a.block_size, a.kv_cache_dtype, a.engine, a.platform) == (
        8192, 16, "bfloat16", "v1", "cuda",
    )  # fmt: skip
    assert (a.tensor_parallel_size, a.pipeline_parallel_size) == (1, 1)
    assert r.machine.name == "h100-80gb" and not r.machine.unified
    assert r.spec.name == r.stored.name == "bf16" and r.quant.flag is None
    assert r.shape.num_layers == 32


def test_model_step(llama: Plan, qwen_pp2: Plan) -> None:
    m = steps_of(llama).model
    # K and V × 32 layers × 8 KV heads × 128 × 2 bytes
    assert m.kv.per_token == 2 * 32 * 8 * 128 * 2 == 131_072
    # 9 tensors a layer (q, k, v, o, gate, up, down, two norms), the embedding, the final norm and lm_head
    assert len(m.tensors) == 32 * 9 + 3
    assert m.drafter is None and m.drafter_bytes == 0
    assert m.stages == (range(0, 32),)
    q = steps_of(qwen_pp2).model
    assert q.kv.per_token == 2 * 48 * 4 * 128 * 2
    assert q.stages == (range(0, 24), range(24, 48))  # vLLM's get_pp_indices: equal halves


def test_weights_step(llama: Plan, qwen_pp2: Plan) -> None:
    w = steps_of(llama).weights
    rotary = 131072 * 128 * 2  # the cos/sin cache: max positions × rotary dim × 2 bytes
    assert w.weights == (2 * LLAMA8B_PARAMS + rotary,)
    assert [s.pp_rank for s in w.slots] == [0] and w.slots[0].ranks == (0,)
    q = steps_of(qwen_pp2).weights
    assert [s.ranks for s in q.slots] == [(0,), (1,)]
    rotary = 40960 * 128 * 2
    # the stages split every parameter once; each holds its own rotary cache
    assert sum(q.weights) - 2 * rotary == 2 * QWEN30B_PARAMS
    # untied embedding and lm_head weigh the same: the last stage holds the final norm (2048 × 2 bytes) more
    assert q.weights[1] - q.weights[0] == 2048 * 2


def test_cache_layout_step(llama: Plan, qwen_pp2: Plan) -> None:
    (rank,) = steps_of(llama).layout.ranks
    lay = rank.layout
    assert len(lay.groups) == 1 and not lay.hybrid
    assert lay.block_size == 16
    assert lay.bytes_per_block == 32 * 16 * 2 * 8 * 128 * 2 == 2 << 20  # layers × tokens × K,V × heads × dim × 2
    assert rank.blocks_per_request == 8192 // 16
    assert rank.request_bytes == 8192 * 131_072 == 1 << 30
    assert rank.state_bytes == rank.state_request_bytes == 0
    for r in steps_of(qwen_pp2).layout.ranks:
        assert r.layout.bytes_per_block == 24 * 16 * 2 * 4 * 128 * 2  # each stage's 24 layers


def test_cache_layout_step_hybrid() -> None:
    (rank,) = steps_of(plan(QWEN_NEXT, machine="dgx-spark", max_model_len=32768)).layout.ranks
    kinds = {g.kind for g in rank.layout.groups}
    assert kinds == {"full_attention", "linear_attention"} and rank.layout.hybrid
    assert rank.state_bytes > 0 and rank.state_request_bytes >= rank.state_bytes  # padded pages
    assert rank.request_bytes == rank.blocks_per_request * rank.layout.bytes_per_block


def test_buckets_step(llama: Plan, qwen_pp2: Plan) -> None:
    (req,), (rb,) = steps_of(llama).buckets.requests, steps_of(llama).buckets.ranks
    assert req.gpu_memory_utilization is None  # chosen by the verdict
    act = rb.activation
    assert act.peak == max(act.forward, act.sampler + act.moe_workspace, act.encoder)
    assert rb.overhead_bytes == rb.non_torch_bytes + rb.cudagraph_bytes + rb.context_bytes
    # a discrete GPU with vLLM 0.20+: the CUDA-graph estimate is inside the budget, the context outside
    assert rb.non_kv_in_budget == rb.weights_bytes + act.peak + rb.non_torch_bytes + rb.cudagraph_bytes
    assert rb.outside_bytes == rb.context_bytes
    assert rb.kv_need_bytes == 1 << 30 and rb.os_reserve_bytes == 0
    first, last = steps_of(qwen_pp2).buckets.ranks
    assert first.activation.sampler == 0 < last.activation.sampler  # the sampler warms up on the last stage only
    hidden = 2 * 8192 * 2048 * 2  # stage 1 receives hidden states and residual: 2 × tokens × hidden × 2 bytes
    # 0.13+: the sampler runs beside the fused-MoE workspace the forward left
    kept = last.activation.moe_workspace
    assert kept == 2 * 8192 * 8 * (2048 + 2048)  # bf16 × tokens × top-k × (max(768, 2048) + max(1536, 2048))
    assert last.activation.peak == max(last.activation.forward, last.activation.sampler + kept) + hidden


def test_verdict_step(llama: Plan) -> None:
    v = steps_of(llama).verdict
    (rb,) = v.buckets.ranks
    p = v.prediction
    total = llama.machine.total_bytes
    assert (p.gpu_memory_utilization, p.util_reason) == (0.5, "as given")
    assert p.requested_bytes == math.ceil(total * 0.5)  # vLLM 0.14+: ceil(total × util)
    assert p.available_kv_bytes == p.requested_bytes - rb.non_kv_in_budget
    assert p.pool.num_blocks == p.available_kv_bytes // (2 << 20)
    assert p.pool.tokens == p.pool.num_blocks * 16
    assert p.max_users == (total - p.weights_bytes - p.overhead_bytes - p.activation_peak_bytes) // (1 << 30)
    assert p.fits and v.invalid is None and v.worst == 0 and v.served_model == "m/x"
    assert [r["rank"] for r in v.ranks] == [0] and v.ranks[0]["bottleneck"]


def test_verdict_step_one_utilization_for_every_rank(qwen_pp2: Plan) -> None:
    v = steps_of(qwen_pp2).verdict
    utils = {p.gpu_memory_utilization for p in v.predictions}
    assert utils == {v.prediction.gpu_memory_utilization}
    assert v.prediction.util_reason.endswith(" (one value for every rank)")
    assert v.predictions[v.worst].pool.num_blocks == min(p.pool.num_blocks for p in v.predictions)
    assert v.prediction.pool == v.predictions[v.worst].pool
    assert [(r["rank"], r["layers"]) for r in v.ranks] == [(0, [0, 24]), (1, [24, 48])]


def test_budget_predict_is_the_rank_steps(llama: Plan) -> None:
    b = steps_of(llama).buckets
    (req,) = b.requests
    one = budget.predict(dataclasses.replace(req, gpu_memory_utilization=0.5))
    assert one == steps_of(llama).verdict.predictions[0]


def test_auto_fit_steps_are_the_second_pass() -> None:
    p = plan(LLAMA8B, machine="rtx4090", max_model_len="auto")
    s = p.steps
    assert s is not None
    assert s.request.args.max_model_len == p.prediction.args.max_model_len < 131072
    assert any(n.startswith("max_model_len auto: vLLM reduces 131,072") for n in p.prediction.notes)


def test_a_shared_cache_plans_as_a_fresh_one() -> None:
    cache = PlanCache()
    base = profile_from_flags("m/x", QWEN30B, machine="h100-80gb")
    for length, users in ((8192, 1), (4096, 4), (8192, 1)):
        prof = dataclasses.replace(base, max_model_len=length, users=users)
        assert make_plan(prof, live=False, cache=cache).to_json() == make_plan(prof, live=False).to_json()
    entries = len(cache)
    make_plan(dataclasses.replace(base, max_model_len=2048), live=False, cache=cache)
    assert len(cache) == entries  # a length changes no cached input: weights, layout, model, machine reused


def test_explain_prints_the_steps_in_order(llama: Plan, qwen_pp2: Plan) -> None:
    lines = explain(steps_of(llama))
    heads = [line for line in lines if not line.startswith(" ")]
    assert heads == [
        "1. request (resolve.Request)",
        "2. model (layers.ModelLayers)",
        "3. weights per rank (ranks.RankWeights)",
        "4. cache layout (cache_layout.CacheLayout)",
        "5. buckets (buckets.Buckets)",
        "6. verdict (verdict.Verdict)",
    ]
    text = "\n".join(lines)
    assert "KV 131,072 bytes per token per rank" in text
    assert "512 blocks per request (1.00 GiB)" in text
    assert "gpu_memory_utilization 0.5: as given" in text
    assert f"pool {llama.prediction.pool.num_blocks:,} blocks, {llama.prediction.pool.tokens:,} tokens" in text
    two = explain(steps_of(qwen_pp2))
    assert sum(line.startswith("   pp ") for line in two) == 2 * 3  # weights, layout, buckets: one line per stage


def test_plan_explain_on_the_command_line() -> None:
    """`plan --explain` prints the six steps after the plan; with --json they are an `explain` list, and a plain
    `--json` stays as it was (no `explain` key)."""
    import json

    from click.testing import CliRunner

    from launcher.cli import main

    argv = ["plan", "llama8b-32k", "--machine", "dgx-spark", "--no-calibration"]
    text = CliRunner().invoke(main, [*argv, "--explain"])
    assert text.exit_code == 0, text.output
    tail = text.output.split("\nsteps:\n", 1)[1].splitlines()
    heads = [ln.split(" (")[0] for ln in tail if ln[:1].isdigit()]
    assert heads == ["1. request", "2. model", "3. weights per rank", "4. cache layout", "5. buckets", "6. verdict"]
    assert "   pp 0: full_attention × 32; block 16 tokens, 2,097,152 bytes per block" in text.output  # 2·8·128·2·16·32
    plain = json.loads(CliRunner().invoke(main, [*argv, "--json"]).output)
    both = json.loads(CliRunner().invoke(main, [*argv, "--json", "--explain"]).output)
    assert "explain" not in plain and both.pop("explain")[0].startswith("1. request") and both == plain
