"""What a log states: `LogFacts`, the figures exactly as printed, and the `Failure` it names."""

from __future__ import annotations

from collections import deque
from dataclasses import field
from typing import Any

from launcher.common.records import dataclass
from launcher.common.units import gib_to_bytes

# The figures a log states in GiB (`LogFacts.<name>_gib`), which `bytes_json` states in bytes too.
_GIB_FIGURES = (
    "total_memory",
    "free_memory",
    "requested_memory",
    "model_loading",
    "available_kv",
    "cudagraph",
    "cudagraph_estimate",
    "activation",
    "non_torch",
    "weights",
    "consumed",
    "cpu_non_kv",
)


@dataclass
class Failure:
    # memory: insufficient_free_memory | kv_too_small_for_max_model_len | no_kv_memory | worker_killed | cuda_oom;
    # invalid_config; the launch environment: driver_too_old | no_gpu_runtime | no_cuda_gpu | docker_daemon |
    # out_of_disk | address_in_use | repo_access; other
    kind: str
    message: str
    fix: str
    estimated_max_model_len: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "message": self.message,
            "fix": self.fix,
            "estimated_max_model_len": self.estimated_max_model_len,
        }


@dataclass(frozen=True)
class ThroughputSample:
    """One periodic statistics line of a serving vLLM (`engine_throughput`): the averages over its interval and
    the scheduler's queue and KV cache at its end."""

    prompt_tokens_per_s: float
    generation_tokens_per_s: float
    running: int
    waiting: int  # "Waiting" (V1), "Pending" (V0)
    kv_cache_usage: float  # the device's KV cache in use, a fraction (0-1) of the logged percent
    line: int  # the line's number in the log, from 1

    def to_json(self) -> dict[str, Any]:
        return {
            "prompt_tokens_per_s": self.prompt_tokens_per_s,
            "generation_tokens_per_s": self.generation_tokens_per_s,
            "running": self.running,
            "waiting": self.waiting,
            "kv_cache_usage": self.kv_cache_usage,
            "line": self.line,
        }


# A serving log prints a statistics line every 10 s: the last MAX_THROUGHPUT_SAMPLES are kept (about 2.8 hours).
MAX_THROUGHPUT_SAMPLES = 1000


def _samples() -> deque[ThroughputSample]:
    return deque(maxlen=MAX_THROUGHPUT_SAMPLES)


# When a log shows several, the higher wins. The launch environment's failures rank below the memory failures (a
# log that got as far as a memory failure got past them); among them the root cause first: a driver too old for
# torch also leaves vLLM without a GPU platform ("Failed to infer device type").
FAILURE_RANK = {
    "worker_killed": 70,
    "insufficient_free_memory": 60,
    "kv_too_small_for_max_model_len": 50,
    "no_kv_memory": 50,
    "mamba_blocks_below_max_num_seqs": 50,
    "invalid_config": 40,
    "cuda_oom": 30,
    "driver_too_old": 29,
    "no_gpu_runtime": 28,
    "no_cuda_gpu": 27,
    "docker_daemon": 26,
    "out_of_disk": 25,
    "address_in_use": 24,
    "repo_access": 23,
    "other": 10,
}


@dataclass
class LogFacts:
    """The numbers a log states, exactly as printed (None when it does not say)."""

    vllm_version: str | None = None
    engine: str | None = None  # v0 | v1
    device: str | None = None  # cuda | cpu | …
    model: str | None = None
    max_model_len: int | None = None
    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    gpu_memory_utilization: float | None = None
    dtype: str | None = None
    kv_cache_dtype: str | None = None
    quantization: str | None = None
    enforce_eager: bool | None = None
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    block_size: int | None = None
    kv_cache_memory_bytes: int | None = None
    total_memory_gib: float | None = None
    free_memory_gib: float | None = None
    requested_memory_gib: float | None = None
    model_loading_gib: float | None = None
    available_kv_gib: float | None = None
    num_blocks: int | None = None
    kv_pool_tokens: int | None = None
    max_concurrency: float | None = None
    concurrency_max_model_len: int | None = None
    cudagraph_gib: float | None = None
    cudagraph_estimate_gib: float | None = None
    activation_gib: float | None = None
    non_torch_gib: float | None = None
    weights_gib: float | None = None  # from a profiling summary
    consumed_gib: float | None = None  # 0.27+: weights + non-torch
    cpu_non_kv_gib: float | None = None
    kv_memory_suggestion_bytes: int | None = None
    kv_memory_full_bytes: int | None = None
    init_engine_seconds: float | None = None
    auto_fit_max_model_len: int | None = None
    api_ready: bool = False
    failure: Failure | None = None
    lines_read: int = 0
    # a line only vLLM prints was read (a vLLM log, even one that stops before the pool line); see `vllm_line`
    recognised: bool = False
    source: str | None = None  # the file it was read from (`check.read_log`), for messages
    per_worker_available_kv_gib: list[float] = field(default_factory=list)
    per_worker_loading_gib: list[float] = field(default_factory=list)
    non_default_args: dict[str, Any] = field(default_factory=dict)
    # hybrid models (attention + mamba, or sliding window + full attention)
    mamba_cache_mode: str | None = None  # none | align | all
    mamba_page_padding_pct: float | None = None
    padding: list[tuple[int, float]] = field(default_factory=list)  # (padding layers, most KV memory wasted %)
    mamba_ssm_cache_dtype: str | None = None
    ssm_cache_dtype_reset: str | None = None  # the dtype the CPU backend reset the SSM state to
    # vLLM logs the groups only when there are two or more ("kv cache group sizes (…)", 0.32): None says one group,
    # or a version that does not log it.
    kv_cache_group_block_sizes: list[int] | None = None
    hybrid_fallback: str | None = None  # page_sizes_not_unified | hybrid_kv_cache_manager_disabled
    # serving: the engine's periodic statistics, in the order printed (the last MAX_THROUGHPUT_SAMPLES)
    throughput: deque[ThroughputSample] = field(default_factory=_samples)

    @property
    def mamba_block_size(self) -> int | None:
        """What vLLM's mamba groups use: the attention block size in 'align' mode (platforms/interface.py), else
        the user's value or max_model_len (model_executor/models/config.py MambaModelConfig)."""
        arg = self.non_default_args.get("mamba_block_size")
        if self.mamba_cache_mode == "align":
            return self.block_size
        if isinstance(arg, int) and not isinstance(arg, bool):
            return arg
        return self.max_model_len if self.mamba_cache_mode == "none" else None

    @property
    def padding_layers(self) -> int | None:
        return sum(n for n, _ in self.padding) if self.padding else None

    @property
    def kv_cache_groups(self) -> int | None:
        return None if self.kv_cache_group_block_sizes is None else len(self.kv_cache_group_block_sizes)

    @property
    def started(self) -> bool:
        return self.failure is None and (
            self.kv_pool_tokens is not None or self.num_blocks is not None or self.api_ready
        )

    def bytes_json(self) -> dict[str, Any]:
        """Each GiB figure as bytes too, the unit `plan --json` reports in: `<figure>_bytes` for `<figure>_gib`.
        vLLM prints GiB with two decimals, so a figure in bytes is the printed one × 2**30, rounded, and lies within
        0.005 GiB of what vLLM measured."""
        out: dict[str, Any] = {}
        for name in _GIB_FIGURES:
            value = getattr(self, f"{name}_gib")
            out[f"{name}_bytes"] = None if value is None else gib_to_bytes(value)
        out["per_worker_available_kv_bytes"] = [gib_to_bytes(v) for v in self.per_worker_available_kv_gib]
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "vllm_version": self.vllm_version,
            "device": self.device,
            "engine": self.engine,
            "model": self.model,
            "max_model_len": self.max_model_len,
            "tensor_parallel_size": self.tensor_parallel_size,
            "pipeline_parallel_size": self.pipeline_parallel_size,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "dtype": self.dtype,
            "kv_cache_dtype": self.kv_cache_dtype,
            "quantization": self.quantization,
            "enforce_eager": self.enforce_eager,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "max_num_seqs": self.max_num_seqs,
            "total_memory_gib": self.total_memory_gib,
            "free_memory_gib": self.free_memory_gib,
            "requested_memory_gib": self.requested_memory_gib,
            "model_loading_gib": self.model_loading_gib,
            "available_kv_gib": self.available_kv_gib,
            "num_blocks": self.num_blocks,
            "kv_pool_tokens": self.kv_pool_tokens,
            "max_concurrency": self.max_concurrency,
            "cudagraph_gib": self.cudagraph_gib,
            "cudagraph_estimate_gib": self.cudagraph_estimate_gib,
            "activation_gib": self.activation_gib,
            "non_torch_gib": self.non_torch_gib,
            "weights_gib": self.weights_gib,
            "consumed_gib": self.consumed_gib,
            "cpu_non_kv_gib": self.cpu_non_kv_gib,
            "kv_memory_suggestion_bytes": self.kv_memory_suggestion_bytes,
            "init_engine_seconds": self.init_engine_seconds,
            "auto_fit_max_model_len": self.auto_fit_max_model_len,
            "per_worker_available_kv_gib": self.per_worker_available_kv_gib,
            "block_size": self.block_size,
            "mamba_block_size": self.mamba_block_size,
            "mamba_page_padding_pct": self.mamba_page_padding_pct,
            "padding_layers": self.padding_layers,
            "padding_layers_by_line": [{"layers": n, "max_waste_pct": pct} for n, pct in self.padding],
            "mamba_cache_mode": self.mamba_cache_mode,
            "mamba_ssm_cache_dtype": self.mamba_ssm_cache_dtype,
            "ssm_cache_dtype_reset": self.ssm_cache_dtype_reset,
            "kv_cache_groups": self.kv_cache_groups,
            "kv_cache_group_block_sizes": self.kv_cache_group_block_sizes,
            "hybrid_fallback": self.hybrid_fallback,
            "throughput": [s.to_json() for s in self.throughput],
            "started": self.started,
            "failure": self.failure.to_json() if self.failure else None,
        }
