"""The expected-speed arithmetic (launcher/plan/speed.py, rowspeed.py): each term by hand, and invariants."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from launcher.plan import rowspeed, speed

GB = 10**9


def _step(**kw: object) -> speed.Step:
    reads = speed.WeightReads(dense_bytes=2 * GB, experts=((8 * GB, 2, 8),), active_params=3 * GB)
    return dataclasses.replace(speed.Step(weights=reads, cache_bytes_per_user=0, state_bytes_per_user=0, users=1), **kw)


def test_experts_touched_by_hand() -> None:
    assert speed.experts_touched(2, 8, 1) == pytest.approx(2.0)
    assert speed.experts_touched(2, 8, 2) == pytest.approx(8 * (1 - 0.75**2))  # 3.5
    assert speed.experts_touched(8, 8, 5) == pytest.approx(8.0)
    assert speed.experts_touched(0, 8, 5) == 0.0


def test_step_bytes_by_hand() -> None:
    # one user: 2 GB dense + 8 GB × 2/8 experts = 4 GB; KV 0.1 GB; state 0.05 GB read and written
    s = _step(cache_bytes_per_user=GB // 10, state_bytes_per_user=GB // 20)
    assert s.bytes_per_gpu() == pytest.approx(4 * GB + 0.1 * GB + 0.1 * GB)
    # two users: 8 × (1 − 0.75²) = 3.5 experts of 8 → 2 + 3.5 = 5.5 GB; each user's cache
    s2 = dataclasses.replace(s, users=2)
    assert s2.bytes_per_gpu() == pytest.approx(5.5 * GB + 2 * 0.2 * GB)
    # tensor parallel 2 halves the weights, not a rank's cache (each rank holds its own KV heads)
    s3 = dataclasses.replace(s, tensor_parallel_size=2)
    assert s3.bytes_per_gpu() == pytest.approx(2 * GB + 0.2 * GB)


def test_mtp_tokens_and_reads() -> None:
    assert speed.mtp_tokens_per_step(0, 0.7) == 1.0
    assert speed.mtp_tokens_per_step(1, 0.7) == pytest.approx(1.7)
    assert speed.mtp_tokens_per_step(2, 0.7) == pytest.approx(1 + 0.7 + 0.49)
    reads = speed.WeightReads(dense_bytes=3 * GB, experts=(), active_params=1, mtp_bytes=GB)
    s = speed.Step(weights=reads, cache_bytes_per_user=0, state_bytes_per_user=0, users=1, draft_tokens=3)
    assert s.bytes_per_gpu() == pytest.approx(3 * GB + 2 * GB)  # the MTP layer once per draft


def test_network_seconds_by_hand() -> None:
    link = speed.Link(25 * GB, 30e-6, "test")
    s = _step(nodes=2, tensor_parallel_size=2, hidden_size=8192, layers=80, users=4)
    message = 4 * 8192 * 2
    per = 30e-6 + 2 * 1 / 2 * message / (25 * GB)
    assert s.network_seconds(link) == pytest.approx(2 * 80 * per)
    pp = _step(nodes=2, pipeline_parallel_size=2, hidden_size=8192, layers=80, users=4)
    assert pp.network_seconds(link) == pytest.approx(30e-6 + message / (25 * GB))
    assert _step(hidden_size=8192, layers=80).network_seconds(link) == 0.0


def test_expected_decode_by_hand() -> None:
    eff = speed.Efficiency(0.5, "default", "test")
    s = _step()  # 4 GB per step, one user
    e = speed.expected_decode(s, bandwidth_bytes_per_s=100 * GB, eff=eff, regime_="single")
    assert e.step_seconds == pytest.approx(4 / 50)
    assert e.tokens_per_s == pytest.approx(12.5) and e.aggregate_tokens_per_s == pytest.approx(12.5)
    assert e.bound == "memory"
    # a tiny tensor roof makes the step compute-bound: 2 × 3e9 params ÷ (0.01 TFLOPS × 0.5) = 1.2 s
    c = speed.expected_decode(s, bandwidth_bytes_per_s=100 * GB, eff=eff, regime_="single", flops=0.01)
    assert c.bound == "compute" and c.step_seconds == pytest.approx(1.2)


def test_regimes() -> None:
    assert speed.regime(users=1, moe=True, hybrid=False, nodes=1) == "single"
    assert speed.regime(users=4, moe=True, hybrid=False, nodes=1) == "batched_moe"
    assert speed.regime(users=4, moe=False, hybrid=False, nodes=1) == "batched_dense"
    assert speed.regime(users=1, moe=False, hybrid=True, nodes=1) == "hybrid"
    assert speed.regime(users=1, moe=False, hybrid=True, nodes=2) == "two_node"


def test_efficiency_sources() -> None:
    assert speed.efficiency("dgx-spark", "single").source == "calibrated"
    h100 = speed.efficiency("h100-80gb", "single")
    assert h100.source == "default" and h100.value == speed.efficiency("dgx-spark", "single").value
    assert "dgx-spark" in h100.basis
    moe = speed.efficiency("dgx-spark", "batched_moe")
    assert moe.source == "default"
    assert moe.value == pytest.approx(0.669 * 1.136 / 0.766, abs=0.001)  # llama.cpp's batched ÷ single, scaled
    two = speed.efficiency("dgx-spark", "two_node")
    assert two.value == pytest.approx(0.669 * 0.9, abs=0.001)
    assert speed.efficiency("rtx5090", "single", "llama.cpp").value == 0.432


def test_engine_classes() -> None:
    assert speed.engine_class("llama.cpp b6918") == "llama.cpp"
    assert speed.engine_class("Ollama") == "llama.cpp"
    for e in ("SGLang", "TRT-LLM", "vLLM 0.15.1 (NGC 26.02)"):
        assert speed.engine_class(e) == "vllm"


def test_compute_dtype() -> None:
    assert rowspeed.compute_dtype("fp8", "9.0") == "fp8"
    assert rowspeed.compute_dtype("fp8", "8.0") == "bf16"  # Ampere: W8A16
    assert rowspeed.compute_dtype("nvfp4", "12.1") == "fp4"
    assert rowspeed.compute_dtype("nvfp4", "9.0") == "bf16"
    assert rowspeed.compute_dtype("awq", "12.1") == "bf16"
    assert rowspeed.compute_dtype("fp8", None) == "bf16"


def test_prefill_flops_by_hand() -> None:
    p = speed.Prefill(active_params=10, attention_width=4, layers_full=2, layers_windowed=1, window=2,
                      weights_bytes=0, context=4, chunk=8)  # fmt: skip
    # linear 2·10·4 = 80; full pairs 4·5/2 = 10 per layer; windowed 4·2 − 2·1/2 = 7; attention 4·4·(2·10 + 7)
    assert p.flops() == pytest.approx(80 + 16 * 27)
    t = speed.ttft_seconds(p, flops=1e-9, bandwidth_bytes_per_s=1, decode_eff=1.0)
    assert t == pytest.approx(p.flops() / (1e-9 * 1e12 * speed.PREFILL_EFFICIENCY.value))


@given(
    users=st.integers(1, 512),
    k=st.integers(1, 16),
    e=st.integers(16, 512),
    dense=st.integers(1, 10**11),
    experts=st.integers(0, 10**12),
    cache=st.integers(0, 10**9),
    state=st.integers(0, 10**8),
    tp=st.sampled_from([1, 2, 4, 8]),
)
def test_expected_never_beats_the_ceiling_at_full_efficiency(
    users: int, k: int, e: int, dense: int, experts: int, cache: int, state: int, tp: int
) -> None:
    """At efficiency 1 without MTP the expected speed is at most the ceiling's (a batch touches at least one
    token's experts; the state is read at least once)."""
    reads = speed.WeightReads(dense, ((experts, k, e),), 1)
    step = speed.Step(weights=reads, cache_bytes_per_user=cache, state_bytes_per_user=state, users=users,
                      tensor_parallel_size=tp)  # fmt: skip
    one = dense + experts * k // e
    ceiling_step = one / tp + users * (cache + state)  # the ceiling's bytes (it rounds the share up to a byte)
    unit = speed.Efficiency(1.0, "default", "unit")
    got = speed.expected_decode(step, bandwidth_bytes_per_s=GB, eff=unit, regime_="single")
    assert got.tokens_per_s <= GB / ceiling_step * (1 + 1e-9)
    more = speed.expected_decode(dataclasses.replace(step, users=users + 1), bandwidth_bytes_per_s=GB, eff=unit,
                                 regime_="single")  # fmt: skip
    assert more.aggregate_tokens_per_s >= got.aggregate_tokens_per_s * (1 - 1e-9) or cache + state > 0
