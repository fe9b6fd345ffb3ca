"""Expected decode speed and time to first token: the decode ceiling's bytes, made real. Pure arithmetic.

The ceiling (`decode.py`) assumes memory at its peak and a MoE batch that touches one token's experts. Here a step
reads what a batch of B users really touches — each MoE layer's E·(1 − (1 − k/E)^B) routed experts, every user's
KV cache and recurrent state — at the share of the peak bandwidth an engine reaches in that regime
(`Efficiency`, fitted from published measured points or from this box's own runs), plus what tensor parallel over a
network adds per step. MTP yields 1 + a + a² + … tokens per step at acceptance rate a. Time to first token is the
prefill's multiply-adds over the machine's tensor throughput in the format's compute dtype, at its own efficiency.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from launcher.common.records import dataclass
from launcher.model.arch.model import Model
from launcher.model.params import Tensor
from launcher.plan.decode import step_tensors

Regime = Literal["single", "batched_dense", "batched_moe", "hybrid", "two_node"]
REGIMES: tuple[Regime, ...] = ("single", "batched_dense", "batched_moe", "hybrid", "two_node")
Source = Literal["measured", "calibrated", "default"]


@dataclass(frozen=True)
class WeightReads:
    """What one decode step reads of the weights, all ranks together, split so a batch's experts can be counted."""

    dense_bytes: int  # every tensor each token passes through (attention, dense MLPs, shared experts, the head)
    experts: tuple[tuple[int, int, int], ...]  # per MoE layer: (bytes of all its routed experts, k, E)
    active_params: int  # parameters one token multiplies (two FLOPs each per token)
    mtp_bytes: int = 0  # the MTP layers' weights (read once per drafted token), in dense_bytes when counted

    def bytes_for_batch(self, batch: int) -> float:
        """Weight bytes one step reads for `batch` users: the dense part once, and of each MoE layer the experts
        the batch's tokens are routed to."""
        moe = sum(b * experts_touched(k, e, batch) / e for b, k, e in self.experts)
        return self.dense_bytes + moe


def experts_touched(k: int, e: int, batch: int) -> float:
    """Experts a batch of `batch` tokens touches in one layer when each picks k of e independently and uniformly:
    e · (1 − (1 − k/e)^batch) — k for one token, approaching e as the batch grows."""
    if e <= 0 or k <= 0:
        return 0.0
    k = min(k, e)
    return e * (1.0 - (1.0 - k / e) ** max(batch, 1))


def weight_reads(shape: Model, ts: Sequence[Tensor], sizes: Sequence[int], *, mtp: bool) -> WeightReads:
    """The weights a decode step reads (`decode.step_tensors`, as the ceiling counts them), with each MoE layer's
    routed experts kept apart."""
    dense = params = mtp_bytes = 0
    experts: dict[int, list[int]] = {}
    for t, b, routed in step_tensors(shape, ts, sizes, mtp=mtp):
        if routed is not None and t.layer is not None:
            k, e = routed
            experts.setdefault(t.layer, [0, k, e])[0] += b
            params += t.numel * k // e  # a token multiplies its k experts only
            continue
        dense += b
        mtp_bytes += b if t.layer is not None and t.layer >= shape.num_layers else 0
        params += t.numel
    return WeightReads(dense, tuple((b, k, e) for b, k, e in experts.values()), params, mtp_bytes)


def mtp_tokens_per_step(draft_tokens: int, acceptance: float) -> float:
    """Tokens a step yields per user with `draft_tokens` MTP drafts, the i-th accepted with probability a^i (a draft
    is kept only when every draft before it was): 1 + a + a² + … + a^n."""
    a = min(max(acceptance, 0.0), 1.0)
    return 1.0 + sum(a**i for i in range(1, max(draft_tokens, 0) + 1))


# --- efficiencies: the share of the ceiling an engine reaches --------------------------------------------------

EngineClass = Literal["vllm", "llama.cpp"]
"""vLLM and the engines built like it (SGLang, TensorRT-LLM: CUDA graphs, continuous batching, fused kernels), and
llama.cpp with what runs on it (Ollama)."""


def engine_class(engine: str) -> EngineClass:
    """The class of an engine as a published point names it ("SGLang", "llama.cpp b6918", "vLLM 0.15.1" …)."""
    low = engine.lower()
    return "llama.cpp" if low.startswith(("llama.cpp", "ollama")) else "vllm"


@dataclass(frozen=True)
class Efficiency:
    """Measured tokens/s over the modelled rate (`Step.ideal_tokens_per_s`) in one regime on one machine."""

    value: float
    source: Source
    basis: str  # the points or runs it was fitted from, or why a default stands in


@dataclass(frozen=True)
class FittedEfficiency:
    """One row of the table below: the median of measured ÷ modelled over the published points of one machine,
    engine class and regime (tests/test_speed_points.py refits it from the points and compares)."""

    machine: str
    engine: EngineClass
    regime: Regime
    value: float
    points: int
    basis: str


PUBLISHED: tuple[FittedEfficiency, ...] = (
    FittedEfficiency("dgx-spark", "vllm", "single", 0.669, 4, "SGLang Llama-3.1-8B/70B fp8, TRT-LLM Llama-3.1-8B "
                     "NVFP4, vLLM 0.15.1 gpt-oss-120b (LMSYS, NVIDIA blogs)"),
    FittedEfficiency("dgx-spark", "vllm", "batched_dense", 0.694, 2, "SGLang Llama-3.1-8B fp8 × 32 users, "
                     "R1-Distill-Qwen-14B fp8 × 8 (LMSYS)"),
    FittedEfficiency("dgx-spark", "vllm", "hybrid", 0.668, 1, "vLLM Nemotron-3-Nano-30B-A3B NVFP4, one user"),
    FittedEfficiency("dgx-spark", "llama.cpp", "single", 0.766, 10, "llama.cpp b6918 and Ollama: gpt-oss-20b/120b, "
                     "Qwen3-Coder-30B-A3B, Qwen2.5-Coder-7B at 64-32,768 tokens"),
    FittedEfficiency("dgx-spark", "llama.cpp", "batched_dense", 0.633, 2, "llama.cpp b6918 Qwen2.5-Coder-7B × 32"),
    FittedEfficiency("dgx-spark", "llama.cpp", "batched_moe", 1.136, 5, "llama.cpp b6918 gpt-oss-20b/120b and "
                     "Qwen3-Coder-30B-A3B × 32: batches share experts more than independent routing would"),
    FittedEfficiency("rtx5090", "llama.cpp", "single", 0.432, 1, "Ollama gpt-oss-20b, one user"),
)  # fmt: skip

DEFAULT_REGIME: dict[Regime, tuple[Regime, float, str]] = {
    "single": ("single", 1.0, "the single-user figure"),
    "batched_dense": ("batched_dense", 1.0, "the batched dense figure"),
    "batched_moe": ("single", 1.0, "no published batched MoE point of a vLLM-class engine: the single-user figure"
                    " × llama.cpp's batched-MoE ÷ single-user figures on the same box"),
    "hybrid": ("hybrid", 1.0, "the hybrid figure"),
    "two_node": ("single", 0.9, "no published two-box point: the single-user figure × 0.9 for the per-layer "
                 "all-reduce's stalls (its wire time is added separately)"),
}  # fmt: skip
"""What stands in for a regime without a point of its own: another regime's figure × a factor, and why."""
FALLBACK_MACHINE = "dgx-spark"
"""Machines without published points borrow the DGX Spark's vLLM figures (labelled default)."""


def efficiency(machine: str, regime: Regime, engine: EngineClass = "vllm") -> Efficiency:
    """The published figure for this machine, engine and regime (calibrated), else a stand-in (default)."""
    table = {(f.machine, f.engine, f.regime): f for f in PUBLISHED}
    if (hit := table.get((machine, engine, regime))) is not None:
        return Efficiency(hit.value, "calibrated", f"{hit.points} published point(s): {hit.basis}")
    other, factor, why = DEFAULT_REGIME[regime]
    if regime == "batched_moe" and engine == "vllm":
        factor = _batched_moe_ratio(table, machine)
    for m in (machine, FALLBACK_MACHINE):
        if (base := table.get((m, engine, other))) is not None:
            where = "" if m == machine else f"no published {engine} point on {machine}: {m}'s; "
            return Efficiency(round(base.value * factor, 3), "default", f"{where}{why} ({base.basis})")
    return Efficiency(0.669, "default", "no published point: the DGX Spark's single-user vLLM figure")


def _batched_moe_ratio(table: dict[tuple[str, EngineClass, Regime], FittedEfficiency], machine: str) -> float:
    """How much faster than independent routing a batch of MoE tokens ran, relative to one user, where one engine
    has both points: batched-MoE ÷ single-user of llama.cpp on this machine (or the Spark)."""
    for m in (machine, FALLBACK_MACHINE):
        batched, single = table.get((m, "llama.cpp", "batched_moe")), table.get((m, "llama.cpp", "single"))
        if batched is not None and single is not None:
            return batched.value / single.value
    return 1.0


# --- one decode step, and the first token ------------------------------------------------------------------------


@dataclass(frozen=True)
class Link:
    """A network between boxes, as tensor or pipeline parallel's messages see it."""

    bandwidth_bytes_per_s: int
    latency_s: float  # one collective or send of a small message, end to end
    basis: str


NETWORK = Link(
    25_000_000_000,
    30e-6,
    "ConnectX-7 at 200 Gb/s (25 GB/s) between two DGX Sparks; 30 µs per small NCCL all-reduce over RoCE (default)",
)
PREFILL_EFFICIENCY = Efficiency(
    0.5, "default", "half the dense tensor peak: vLLM's prefill GEMMs at 2-8K-token chunks (no published TTFT point)"
)
DEFAULT_MTP_ACCEPTANCE = 0.7
"""The chance a drafted MTP token is accepted, each after the one before it (--mtp-acceptance changes it): vLLM's
Qwen3-Next and DeepSeek MTP posts report 0.6-0.9 for the first draft on chat traffic."""


@dataclass(frozen=True)
class Step:
    """One decode step of a batch, on one GPU (the bottleneck rank)."""

    weights: WeightReads
    cache_bytes_per_user: int  # KV one user's step reads on one rank, all of its pipeline stages
    state_bytes_per_user: int  # recurrent state one user holds on one rank, all stages: read, then rewritten
    users: int
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    nodes: int = 1
    draft_tokens: int = 0  # MTP drafts per step (0: off)
    acceptance: float = DEFAULT_MTP_ACCEPTANCE
    hidden_size: int = 0  # the activations tensor / pipeline parallel exchange per token
    layers: int = 0

    @property
    def batch_tokens(self) -> int:
        """Tokens the verifying pass runs: each user's token and its drafts."""
        return max(self.users, 1) * (1 + self.draft_tokens)

    def bytes_per_gpu(self) -> float:
        """Bytes the bottleneck GPU reads per step: its share of the weights (the MTP layers once per draft, the
        routed experts the batch's tokens touch), and every user's KV cache, with the state read and rewritten.
        Pipeline stages run one after another, so a step costs the sum of their reads: the whole model ÷ tp."""
        w = self.weights
        drafts = w.mtp_bytes * max(self.draft_tokens - 1, 0)  # the MTP layer runs once per draft
        weights = w.bytes_for_batch(self.batch_tokens) + drafts
        cache = max(self.users, 1) * (self.cache_bytes_per_user + 2 * self.state_bytes_per_user)
        return weights / max(self.tensor_parallel_size, 1) + cache

    def network_seconds(self, link: Link) -> float:
        """What the boxes' link adds per step: two all-reduces per layer when tensor parallel spans boxes (ring:
        2(tp−1)/tp of the message each), one send per stage boundary when the pipeline does."""
        if self.nodes <= 1:
            return 0.0
        message = self.batch_tokens * self.hidden_size * 2  # bf16 activations of every token in the step
        tp, pp = self.tensor_parallel_size, self.pipeline_parallel_size
        wire = 0.0
        if tp > 1:
            per = link.latency_s + 2 * (tp - 1) / tp * message / link.bandwidth_bytes_per_s
            wire += 2 * self.layers * per
        if pp > 1:
            wire += (pp - 1) * (link.latency_s + message / link.bandwidth_bytes_per_s)
        return wire

    def tokens_per_user(self) -> float:
        return mtp_tokens_per_step(self.draft_tokens, self.acceptance)


def regime(*, users: int, moe: bool, hybrid: bool, nodes: int) -> Regime:
    """The efficiency a row runs at: over two boxes; a hybrid (recurrent-state) model; one user; a batch."""
    if nodes > 1:
        return "two_node"
    if hybrid:
        return "hybrid"
    if users <= 1:
        return "single"
    return "batched_moe" if moe else "batched_dense"


@dataclass(frozen=True)
class Expected:
    tokens_per_s: float  # per user
    aggregate_tokens_per_s: float
    step_seconds: float
    regime: Regime
    efficiency: Efficiency
    bound: Literal["memory", "compute"]

    def to_json(self) -> dict[str, object]:
        return {
            "expected_tokens_per_s": round(self.tokens_per_s, 2),
            "expected_aggregate_tokens_per_s": round(self.aggregate_tokens_per_s, 1),
            "expected_source": self.efficiency.source,
            "expected_regime": self.regime,
            "expected_efficiency": self.efficiency.value,
            "expected_basis": self.efficiency.basis,
            "expected_bound": self.bound,
        }


def expected_decode(
    step: Step, *, bandwidth_bytes_per_s: int, eff: Efficiency, regime_: Regime, flops: float | None = None,
    link: Link = NETWORK,
) -> Expected:  # fmt: skip
    """Tokens/s per user = tokens per step ÷ step time; the step is the memory it reads at the regime's share of
    the bandwidth, or the batch's multiply-adds at the prefill's share of the tensor peak when that is longer, plus
    the network's time."""
    memory = step.bytes_per_gpu() / (bandwidth_bytes_per_s * eff.value)
    compute = 0.0
    if flops:
        mults = 2 * step.weights.active_params * step.batch_tokens / max(step.tensor_parallel_size, 1)
        compute = mults / (flops * 1e12 * PREFILL_EFFICIENCY.value)
    seconds = max(memory, compute) + step.network_seconds(link)
    per_user = step.tokens_per_user() / seconds if seconds > 0 else 0.0
    bound: Literal["memory", "compute"] = "compute" if compute > memory else "memory"
    return Expected(per_user, per_user * max(step.users, 1), seconds, regime_, eff, bound)


@dataclass(frozen=True)
class Prefill:
    """One user's prompt of `context` tokens, prefilled in chunks of `chunk` tokens on one rank."""

    active_params: int
    attention_width: int  # query heads × head_dim: the attention's multiply-adds per token pair and layer
    layers_full: int  # attention layers that see every token before
    layers_windowed: int  # sliding / chunked layers: each sees at most `window` tokens before
    window: int
    weights_bytes: int  # one rank's weights, read once per chunk
    context: int
    chunk: int
    tensor_parallel_size: int = 1

    def flops(self) -> float:
        """2 FLOPs per parameter per token, and the attention's QKᵀ and PV (2 × 2 × width per token pair), over the
        causal half of the context (a windowed layer: each token against at most `window`)."""
        c = self.context
        linear = 2.0 * self.active_params * c
        pairs_full = c * (c + 1) / 2
        w = min(self.window, c) if self.window else c
        pairs_window = c * w - w * (w - 1) / 2
        attention = 4.0 * self.attention_width * (self.layers_full * pairs_full + self.layers_windowed * pairs_window)
        return (linear + attention) / max(self.tensor_parallel_size, 1)


def ttft_seconds(p: Prefill, *, flops: float, bandwidth_bytes_per_s: int, decode_eff: float) -> float:
    """Time to first token: the prefill's FLOPs at PREFILL_EFFICIENCY of the tensor peak, or the weights read once
    per chunk when that is longer (short prompts on big models)."""
    compute = p.flops() / (flops * 1e12 * PREFILL_EFFICIENCY.value)
    chunks = -(-max(p.context, 1) // max(p.chunk, 1))
    memory = chunks * p.weights_bytes / (bandwidth_bytes_per_s * decode_eff)
    return max(compute, memory)
