"""Every vLLM startup-log format vlaunch understands, in one place.

Each pattern is a named, compiled regex with a real example line and the versions that print it. The log text
is not a stable interface; tests/fixtures/logs are the spec. Patterns never anchor at the line start: vLLM
prefixes lines with process names, levels, timestamps and file:line.

`LogParser.feed(line)` takes one line at a time (the live watcher of `serve` uses it); `parse_stream` reads
any file in constant memory, handing the parser only the lines that can matter (a keyword pre-filter over
large chunks keeps request-log noise away from the regexes).
"""

from __future__ import annotations

import ast
import contextlib
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

import regex as re

_N = r"-?[0-9][0-9,]*(?:\.[0-9]+)?"  # 34,952 / 34952 / 12.5 / 12.50 / -0.3


def number(text: str) -> float:
    """'34,952' -> 34952.0, '12.5' -> 12.5. Absurd figures (no finite float) raise ValueError."""
    v = float(text.replace(",", "")[:40])
    if v != v or v in (float("inf"), float("-inf")):
        raise ValueError(text)
    return v


# --- cleaning --------------------------------------------------------------------------------------------------

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")

# --- version and configuration ---------------------------------------------------------------------------------

# "vLLM API server version 0.10.1.1"  (0.4-0.10 api_server)
# "(APIServer pid=1) INFO … █ ▀▄▀ █  version 0.19.0"  (0.11+ banner)
# "Initializing a V0 LLM engine (v0.7.2) with config: …"  /  "Initializing a V1 LLM engine (v0.8.5) with config"
VERSION = re.compile(
    r"(?:vLLM API server version|\bversion|LLM engine \(v)\s*v?(?P<version>\d+\.\d+(?:\.\d+)*(?:\.?(?:post|dev|rc)\d+)?"
    r"(?:\+[\w.]+)?)"
)
# "Initializing a V0 LLM engine (v0.7.2) with config: model='Qwen/…', …"  (0.6-0.10 V0, 0.8+ V1 "V1 LLM engine")
ENGINE_CONFIG = re.compile(
    r"Initializing an? (?:(?P<engine>V[01]) )?LLM engine (?:\(v[^)]*\) )?with config: (?P<config>.*)"
)
# "non-default args: {'model_tag': 'meta-llama/…', 'max_model_len': 8192, 'gpu_memory_utilization': 0.95}"  (0.8.5+)
NON_DEFAULT_ARGS = re.compile(r"non-default args: (?P<args>\{.*\})")
# "Chunked prefill is enabled with max_num_batched_tokens=8192."  (0.6+)
CHUNKED_PREFILL = re.compile(r"Chunked prefill is enabled with max_num_batched_tokens=(?P<mnbt>\d+)")

# --- memory ----------------------------------------------------------------------------------------------------

# "Model loading took 14.99 GiB memory and 14.429680 seconds" (0.11.1+), "Model loading took 14.2488 GiB and 2.99
# seconds" (0.8.3-0.11.0), "Model loading took 67.72 GB and …" (0.8.0-0.8.2, value in GiB),
# "Loading model weights took 14.9888 GB" (V0 0.4-0.7), "Loading model weights took 67.7229 GB" (V1 0.7)
MODEL_LOADING = re.compile(rf"(?:Model loading|Loading model weights) took (?P<gib>{_N}) Gi?B")
# "Available KV cache memory: 58.11 GiB"  (V1 0.9.1+; "%.2f" before 0.14, format_gib after)
AVAILABLE_KV = re.compile(rf"Available KV cache memory: (?P<gib>{_N}) ?GiB")
# "Initial free memory 70.1 GiB, reserved 4.0 GiB memory for KV Cache as specified by kv_cache_memory_bytes"
KV_BYTES_RESERVED = re.compile(
    rf"reserved (?P<gib>{_N}) ?GiB memory for KV Cache as specified by kv_cache_memory_bytes"
)
# V0 0.6.5-0.10.2, one record on three lines:
# "the current vLLM instance can use total_gpu_memory (14.56GiB) x gpu_memory_utilization (0.50) = 7.28GiB"
V0_BUDGET = re.compile(
    rf"total_gpu_memory \((?P<total>{_N}) ?GiB\) x gpu_memory_utilization \((?P<util>{_N})\) = (?P<budget>{_N}) ?GiB"
)
# "model weights take 2.89GiB; non_torch_memory takes 0.01GiB; PyTorch activation peak memory takes 2.02GiB; the rest
#  of the memory reserved for KV Cache is 2.36GiB."
V0_BREAKDOWN = re.compile(
    rf"model weights take (?P<weights>{_N}) ?GiB; non_torch_memory takes (?P<non_torch>{_N}) ?GiB; PyTorch activation "
    rf"peak memory takes (?P<activation>{_N}) ?GiB; the rest of the memory reserved for KV Cache is (?P<kv>{_N}) ?GiB"
)
# V0 0.6.4: "Memory profiling results: total_gpu_memory=23.58GiB initial_memory_usage=15.34GiB
#  peak_torch_memory=17.06GiB memory_usage_post_profile=15.35GiB non_torch_memory=0.35GiB kv_cache_size=3.81GiB
#  gpu_memory_utilization=0.90"
V0_PROFILE_064 = re.compile(
    rf"Memory profiling results: total_gpu_memory=(?P<total>{_N})GiB initial_memory_usage=(?P<initial>{_N})GiB "
    rf"peak_torch_memory=(?P<peak_torch>{_N})GiB memory_usage_post_profile=(?P<post>{_N})Gib "
    rf"non_torch_memory=(?P<non_torch>{_N})GiB kv_cache_size=(?P<kv>{_N})GiB gpu_memory_utilization=(?P<util>{_N})",
    re.IGNORECASE,
)
# "Free memory on device (78.68/79.19 GiB) on startup. Desired GPU memory utilization is (0.95, 75.23 GiB). Actual
#  usage is 14.99 GiB for weight, 1.89 GiB for peak activation, 0.25 GiB for non-torch memory, and 0.91 GiB for
#  CUDAGraph memory. Replace gpu_memory_utilization config with `--kv-cache-memory=61258029056` …"
#  (0.10.2 INFO, 0.11-0.25 DEBUG, 0.26+ INFO; 0.27+ "… GiB for consumed memory (weights + non-torch), …")
FREE_ON_DEVICE = re.compile(
    rf"Free memory on device(?: (?P<device>\S+))? \((?P<free>{_N})/(?P<total>{_N}) GiB\) on startup"
)
DESIRED_UTIL = re.compile(
    rf"desired GPU memory utilization (?:is )?\((?P<util>{_N}), (?P<req>{_N}) GiB\)", re.IGNORECASE
)
ACTUAL_USAGE = re.compile(
    rf"Actual usage is (?P<weights>{_N}) GiB for weight, (?P<activation>{_N}) GiB for peak activation, "
    rf"(?P<non_torch>{_N}) GiB for non-torch memory, and (?P<cudagraph>{_N}) GiB for CUDAGraph memory"
)
ACTUAL_USAGE_027 = re.compile(
    rf"Actual usage is (?P<consumed>{_N}) GiB for consumed memory \(weights \+ non-torch\), (?P<activation>{_N}) GiB "
    rf"for peak activation, and (?P<cudagraph>{_N}) GiB for CUDAGraph memory"
)
KV_MEMORY_SUGGESTION = re.compile(
    r"--kv-cache-memory=(?P<fit>\d+)`?(?: \([^)]*\))? to fit into requested memory, or "
    r"`?--kv-cache-memory=(?P<full>\d+)"
)

# --- CUDA graphs -----------------------------------------------------------------------------------------------

# "Graph capturing finished in 3 secs, took 0.91 GiB"  (V1 all; V0 0.6.4+)
GRAPH_CAPTURE = re.compile(rf"Graph capturing finished in (?P<secs>{_N}) secs?(?:, took (?P<gib>{_N}) GiB)?")
# "Estimated CUDA graph memory: 0.84 GiB total"  (0.18+)
CUDAGRAPH_ESTIMATE = re.compile(rf"Estimated CUDA graph memory: (?P<gib>{_N}) GiB")
# "CUDA graph pool memory: 0.91 GiB (actual), 0.84 GiB (estimated), difference: 0.07 GiB (8.3%)."  (0.18+)
CUDAGRAPH_POOL = re.compile(rf"CUDA graph pool memory: (?P<actual>{_N}) GiB \(actual\), (?P<estimated>{_N}) GiB")

# --- the pool --------------------------------------------------------------------------------------------------

# "GPU KV cache size: 476,016 tokens"  (V1 0.8-0.27 alone; 0.28+ with the concurrency on one line; 0.30+ "CPU …")
KV_CACHE_SIZE = re.compile(rf"(?P<device>[A-Z]+) KV cache size: (?P<tokens>{_N}) tokens")
# "Maximum concurrency for 8,192 tokens per request: 58.11x"  (V1 commas; V0 0.6.3+ without)
MAX_CONCURRENCY = re.compile(rf"Maximum concurrency for (?P<max_model_len>{_N}) tokens per\s+request: (?P<x>{_N}) ?x")
# "# GPU blocks: 1952, # CPU blocks: 2048" (V0 0.4.3-0.6.6), "# cuda blocks: 5519, # CPU blocks: 9362" (0.7-0.10),
# "# CPU blocks: 34845" (V0 CPU ≤0.6), "# GPU blocks: 1381" (V1 0.7, one value)
V0_BLOCKS = re.compile(
    rf"#?\s*(?P<device>GPU|cuda|rocm|xpu|tpu|hpu|cpu|neuron) blocks: (?P<blocks>{_N})", re.IGNORECASE
)
OVERRIDE_BLOCKS = re.compile(r"Overriding num_gpu_blocks=(?P<old>\d+) with num_gpu_blocks_override=(?P<new>\d+)")
# "Auto set (1.93/8.71) GiB for KV cache on node 0, with 2.61 GiB requested memory for the worker. 0.69 GiB memory
#  was consumed by non-kv usages."  (CPU backend 0.20+)
CPU_AUTO_SET = re.compile(
    rf"Auto set \((?P<kv>{_N})/(?P<total>{_N})\) GiB for KV cache on node (?P<node>\d+), with "
    rf"(?P<requested>{_N}) GiB requested memory for the worker\. (?P<non_kv>{_N}) GiB memory was consumed"
)
# "Explicitly set (1.0/19.34) GiB for KV cache on node 0."  (CPU backend 0.20+, VLLM_CPU_KVCACHE_SPACE)
CPU_EXPLICIT_SET = re.compile(
    rf"Explicitly set \((?P<kv>{_N})/(?P<total>{_N})\) GiB for KV cache on node (?P<node>\d+)"
)
# "Auto-fit max_model_len: reduced from 131072 to 40960 to fit in available GPU memory (5.0 GiB available …)"
AUTO_FIT = re.compile(
    r"Auto-fit max_model_len: (?:reduced from (?P<old>\d+) to (?P<new>\d+)"
    r"|full model context length (?P<full>\d+) fits)"
)

# --- timing ----------------------------------------------------------------------------------------------------

# "init engine (profile, create kv cache, warmup model) took 21.45 seconds" (≤0.19), "… took 36.94 s" (0.20+)
INIT_ENGINE = re.compile(rf"init engine \(profile, create kv cache, warmup model\) took (?P<secs>{_N}) s")
API_READY = re.compile(r"Application startup complete|Starting vLLM API server|Available routes are")

# --- failures --------------------------------------------------------------------------------------------------

# "ValueError: Free memory on device cuda:1 (60.87/79.19 GiB) on startup is less than desired GPU memory utilization
#  (0.95, 75.23 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes."  (0.9.1+)
GATE_GPU = re.compile(
    rf"Free memory on device(?: (?P<device>\S+))? \((?P<free>{_N})/(?P<total>{_N}) GiB\) on startup is less than "
    rf"desired GPU memory utilization \((?P<util>{_N}), (?P<req>{_N}) GiB\)"
)
# "ValueError: Available memory on node 0 (8.53/9.84 GiB) on startup is less than desired CPU memory utilization
#  (0.99, 9.74 GiB)."  (CPU 0.20+)
GATE_CPU = re.compile(
    rf"Available memory on node (?P<node>\d+) \((?P<free>{_N})/(?P<total>{_N}) GiB\) on "
    r"(?:startup|kv cache allocation) "
    rf"is less than (?:desired CPU memory utilization \((?P<util>{_N}), (?P<req>{_N}) GiB\)|requested memory)"
)
# "To serve at least one request with the models's max seq len (131072), (4.54 GiB KV cache is needed, which is larger
#  than the available KV cache memory (1.71 GiB). Based on the available memory, the estimated maximum model length
#  is 49360. …"  (V1 0.8.4+; "model's" from 0.22; GB in 0.8.0-0.8.2)
KV_TOO_SMALL_V1 = re.compile(
    r"To serve at least one request with the models?'s max seq len "
    rf"\((?P<mml>\d+)\),? \((?P<need>{_N}) Gi?B KV cache is "
    rf"needed, which is larger than the available KV cache memory \((?P<avail>{_N}) Gi?B\)\.(?: ?Based on the "
    rf"available memory,(?: the estimated maximum model length is (?P<est>\d+))?)?"
)
# "The model's max seq len (4096) is larger than the maximum number of tokens that can be stored in KV cache (3584)."
KV_TOO_SMALL_V0 = re.compile(
    r"The model's max seq len \((?P<mml>\d+)\) is larger than the maximum number of tokens that can be stored in KV "
    r"cache \((?P<tokens>\d+)\)"
)
NO_KV_MEMORY = re.compile(
    r"No available memory for the cache blocks|Cannot auto-fit max_model_len: not enough GPU memory"
)
# "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB …"
# "RuntimeError: CUDA error: out of memory" (graph capture), "CUDA out of memory occurred when warming up sampler
# with 256 dummy requests"
CUDA_OOM = re.compile(
    r"CUDA out of memory|CUDA error: out of memory|OutOfMemoryError|out of memory occurred when warming up"
)
SAMPLER_OOM = re.compile(r"warming up sampler with (?P<n>\d+) dummy requests")
GRAPH_CAPTURE_FRAME = re.compile(r"capture_end|graph capture|capture_model|cudagraph", re.IGNORECASE)
INVALID_CONFIG = re.compile(
    r"User-specified max_model_len \((?P<mml>\d+)\) is greater than the derived max_model_len \((?P<what>[^)]*)\)"
    r"|must be divisible by tensor parallel size|is not divisible by|Invalid (?:argument|value)"
    r"|Quantization method specified in the model config \([^)]*\) does not match"
    r"|current platform (?P<platform>\w+) does not support ray"
)
ERROR_LINE = re.compile(r"\b(?:[A-Z]\w*Error|Exception): (?P<message>.+)")
ENGINE_INIT_FAILED = re.compile(r"Engine core initialization failed|EngineCore failed to start")

# The cheap pre-filter: a line can matter only if it contains one of these (bytes, for chunk scanning).
KEYWORDS: tuple[bytes, ...] = (
    b"GiB", b" GB", b"version", b"config", b"non-default", b"Chunked", b"aptur", b"cache size", b"tokens per",
    b"blocks", b"Auto", b"init engine", b"startup", b"API server", b"routes", b"emory", b"max seq len", b"rror",
    b"failed",
)  # fmt: skip


@dataclass
class Failure:
    # insufficient_free_memory | kv_too_small_for_max_model_len | no_kv_memory | cuda_oom | invalid_config | other
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


_FAILURE_RANK = {
    "insufficient_free_memory": 6,
    "kv_too_small_for_max_model_len": 5,
    "no_kv_memory": 5,
    "invalid_config": 4,
    "cuda_oom": 3,
    "other": 1,
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
    per_worker_available_kv_gib: list[float] = field(default_factory=list)
    per_worker_loading_gib: list[float] = field(default_factory=list)
    non_default_args: dict[str, Any] = field(default_factory=dict)

    @property
    def started(self) -> bool:
        return self.failure is None and (
            self.kv_pool_tokens is not None or self.num_blocks is not None or self.api_ready
        )

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
            "started": self.started,
            "failure": self.failure.to_json() if self.failure else None,
        }


def _num(s: str | None) -> float | None:
    return None if s is None else number(s)


def _int(s: str | None) -> int | None:
    return None if s is None else int(number(s))


def _round_util_down(x: float) -> float:
    return max(0.01, int(x * 100) / 100)


class LogParser:
    """Feed it lines; read `.facts`. Never raises on any input."""

    def __init__(self) -> None:
        self.facts = LogFacts()
        self._prev = ""
        self._prev_single = ""
        self._cur = ""
        self._recent: deque[str] = deque(maxlen=6)
        self._error_lines: list[str] = []
        self._engine_failed = False

    # -- public --
    def feed(self, line: str) -> None:
        with contextlib.suppress(Exception):  # a parser bug must not take down a launch or a check
            self._feed(line)

    def feed_many(self, lines: Iterable[str]) -> LogFacts:
        for line in lines:
            self.feed(line)
        return self.finish()

    def finish(self) -> LogFacts:
        f = self.facts
        if (
            f.failure is None
            and self._engine_failed
            and f.available_kv_gib is not None
            and f.kv_pool_tokens is None
            and f.num_blocks is None
        ):
            # Between "Available KV cache memory" and the pool line only the KV-cache checks can fail.
            if f.available_kv_gib <= 0:
                f.failure = Failure(
                    "no_kv_memory",
                    f"the engine failed with {f.available_kv_gib} GiB available for the KV cache",
                    "raise --gpu-memory-utilization, use a smaller format (fp8/awq), or lower --max-num-seqs",
                )
            else:
                f.failure = Failure(
                    "kv_too_small_for_max_model_len",
                    f"the engine failed right after sizing the KV cache ({f.available_kv_gib} GiB available): "
                    "one max_model_len request does not fit",
                    "lower --max-model-len, raise --gpu-memory-utilization, or --kv-cache-dtype fp8",
                )
        if f.failure is None and not f.started and (self._error_lines or self._engine_failed):
            root = [e for e in self._error_lines if not ENGINE_INIT_FAILED.search(e)]
            msg = (root or self._error_lines or ["the engine core failed to start"])[-1]
            f.failure = Failure("other", msg[:500], "read the error above; it is not a memory failure vlaunch knows")
        return f

    # -- internals --
    def _feed(self, raw: str) -> None:
        f = self.facts
        f.lines_read += 1
        line = raw[:20000].replace("\r", "").rstrip("\n")
        if "\x1b" in line:
            line = ANSI.sub("", line)
        joined = None
        if self._prev and not _looks_like_record_start(line):
            joined = self._prev + " " + line.strip()
        self._prev_single = self._prev
        self._cur = line
        self._prev = line if len(line) < 4000 else ""
        self._match(line)
        if joined is not None:
            self._match(joined, continuation=True)
        self._recent.append(line[-300:])

    def _match(self, line: str, continuation: bool = False) -> None:
        f = self.facts
        if f.vllm_version is None and (m := VERSION.search(line)) and any(k in line for k in _VERSION_CONTEXT):
            f.vllm_version = m["version"]
        if m := ENGINE_CONFIG.search(line):
            if m["engine"]:
                f.engine = m["engine"].lower()
            self._engine_config(m["config"])
        if (m := NON_DEFAULT_ARGS.search(line)) and not continuation:
            self._non_default(m["args"])
        if m := CHUNKED_PREFILL.search(line):
            f.max_num_batched_tokens = int(m["mnbt"])
        if m := MODEL_LOADING.search(line):
            v = number(m["gib"])
            if not continuation or self._new_in_join(MODEL_LOADING):
                f.per_worker_loading_gib.append(v)
                f.model_loading_gib = max(f.per_worker_loading_gib)
        if m := AVAILABLE_KV.search(line):
            if not continuation or self._new_in_join(AVAILABLE_KV):
                f.per_worker_available_kv_gib.append(number(m["gib"]))
                f.available_kv_gib = min(f.per_worker_available_kv_gib)
            f.engine = f.engine or "v1"
        if m := KV_BYTES_RESERVED.search(line):
            f.available_kv_gib = number(m["gib"])
        if m := V0_BUDGET.search(line):
            f.total_memory_gib = number(m["total"])
            f.gpu_memory_utilization = f.gpu_memory_utilization or number(m["util"])
            f.requested_memory_gib = number(m["budget"])
            f.engine = f.engine or "v0"
        if m := V0_BREAKDOWN.search(line):
            f.weights_gib = number(m["weights"])
            f.non_torch_gib = number(m["non_torch"])
            f.activation_gib = number(m["activation"])
            f.available_kv_gib = number(m["kv"])
            f.engine = f.engine or "v0"
        if m := V0_PROFILE_064.search(line):
            f.total_memory_gib = number(m["total"])
            f.non_torch_gib = number(m["non_torch"])
            f.available_kv_gib = number(m["kv"])
            f.gpu_memory_utilization = f.gpu_memory_utilization or number(m["util"])
            if f.model_loading_gib is not None:
                f.activation_gib = round(number(m["peak_torch"]) - f.model_loading_gib, 2)
            f.engine = f.engine or "v0"
        if (m := GATE_GPU.search(line)) or (m := GATE_CPU.search(line)):
            self._gate_failure(m, line)
        elif m := FREE_ON_DEVICE.search(line):
            f.total_memory_gib = number(m["total"])
            f.free_memory_gib = number(m["free"])
        if m := DESIRED_UTIL.search(line):
            f.gpu_memory_utilization = f.gpu_memory_utilization or number(m["util"])
            f.requested_memory_gib = number(m["req"])
        if m := ACTUAL_USAGE.search(line):
            f.weights_gib = number(m["weights"])
            f.activation_gib = number(m["activation"])
            f.non_torch_gib = number(m["non_torch"])
            f.cudagraph_gib = number(m["cudagraph"])
        if m := ACTUAL_USAGE_027.search(line):
            f.consumed_gib = number(m["consumed"])
            f.activation_gib = number(m["activation"])
            f.cudagraph_gib = number(m["cudagraph"])
        if m := KV_MEMORY_SUGGESTION.search(line):
            f.kv_memory_suggestion_bytes = int(m["fit"])
            f.kv_memory_full_bytes = int(m["full"])
        if (m := GRAPH_CAPTURE.search(line)) and m["gib"]:
            f.cudagraph_gib = number(m["gib"])
        if m := CUDAGRAPH_ESTIMATE.search(line):
            f.cudagraph_estimate_gib = number(m["gib"])
        if m := CUDAGRAPH_POOL.search(line):
            f.cudagraph_gib = number(m["actual"])
        if m := KV_CACHE_SIZE.search(line):
            f.kv_pool_tokens = int(number(m["tokens"]))
            dev = m["device"].lower()
            f.device = f.device or ("cuda" if dev == "gpu" else dev)
            f.engine = f.engine or "v1"
        if m := MAX_CONCURRENCY.search(line):
            f.max_concurrency = number(m["x"])
            f.concurrency_max_model_len = int(number(m["max_model_len"]))
            f.max_model_len = f.max_model_len or f.concurrency_max_model_len
        if (m := V0_BLOCKS.search(line)) and "KV cache" not in line and f.num_blocks is None:
            # "# cuda blocks: 5519, # CPU blocks: 9362": the first count is the device's; the second is swap space.
            dev = m["device"].lower()
            f.num_blocks = int(number(m["blocks"]))
            f.device = f.device or ("cuda" if dev == "gpu" else dev)
        if m := OVERRIDE_BLOCKS.search(line):
            f.num_blocks = int(m["new"])
        if m := CPU_AUTO_SET.search(line):
            f.available_kv_gib = number(m["kv"])
            f.total_memory_gib = number(m["total"])
            f.requested_memory_gib = number(m["requested"])
            f.cpu_non_kv_gib = number(m["non_kv"])
            f.device = "cpu"
        if m := CPU_EXPLICIT_SET.search(line):
            f.available_kv_gib = number(m["kv"])
            f.total_memory_gib = number(m["total"])
            f.device = "cpu"
        if m := AUTO_FIT.search(line):
            f.auto_fit_max_model_len = int(m["new"] or m["full"])
            f.max_model_len = f.auto_fit_max_model_len
        if m := INIT_ENGINE.search(line):
            f.init_engine_seconds = number(m["secs"])
        if API_READY.search(line):
            f.api_ready = True
        self._failures(line)

    def _new_in_join(self, pattern: re.Pattern[str]) -> bool:
        """A wrapped line's match is new only when neither half matched on its own."""
        return not pattern.search(self._prev_single) and not pattern.search(self._cur)

    def _gate_failure(self, m: re.Match[str], line: str) -> None:
        f = self.facts
        free, total = number(m["free"]), number(m["total"])
        f.free_memory_gib, f.total_memory_gib = free, total
        util = _num(m["util"])
        req = _num(m["req"])
        if req is not None:
            f.requested_memory_gib = req
        if util is not None:
            f.gpu_memory_utilization = f.gpu_memory_utilization or util
        cpu = "node" in m.re.pattern and "Available memory on node" in line
        f.device = "cpu" if cpu else (f.device or "cuda")
        ok_util = _round_util_down((free - (0.25 if not cpu else 0.1)) / total) if total else None
        where = f"node {m['node']}" if cpu else (m["device"] if m.groupdict().get("device") else "the GPU")
        msg = (
            f"vLLM asked for {req} GiB ({util} × {total} GiB) but only {free} GiB was free on {where}: another "
            "process holds the memory"
            if req is not None
            else f"only {free} of {total} GiB was available on {where}"
        )
        self._fail(
            Failure(
                "insufficient_free_memory",
                msg,
                f"stop the other process, or --gpu-memory-utilization {ok_util} (fits the {free} GiB free)",
            )
        )

    def _failures(self, line: str) -> None:
        f = self.facts
        if m := KV_TOO_SMALL_V1.search(line):
            est = _int(m["est"])
            fix = (
                f"--max-model-len {est} (vLLM's estimate), or raise --gpu-memory-utilization, or --kv-cache-dtype fp8"
                if est
                else "raise --gpu-memory-utilization or lower --max-model-len"
            )
            self._fail(
                Failure(
                    "kv_too_small_for_max_model_len",
                    f"one {m['mml']}-token request needs {m['need']} GiB of KV cache; only {m['avail']} GiB is left",
                    fix,
                    est,
                )
            )
            f.max_model_len = f.max_model_len or int(m["mml"])
            f.available_kv_gib = f.available_kv_gib if f.available_kv_gib is not None else number(m["avail"])
        elif m := KV_TOO_SMALL_V0.search(line):
            tokens = int(m["tokens"])
            self._fail(
                Failure(
                    "kv_too_small_for_max_model_len",
                    f"max_model_len {m['mml']} is more than the {tokens} tokens the KV cache holds",
                    f"--max-model-len {tokens}, or raise --gpu-memory-utilization, or --kv-cache-dtype fp8",
                    tokens,
                )
            )
            f.max_model_len = f.max_model_len or int(m["mml"])
        if NO_KV_MEMORY.search(line):
            self._fail(
                Failure(
                    "no_kv_memory",
                    "nothing was left for the KV cache after weights, activations and overhead",
                    "raise --gpu-memory-utilization, use a smaller format (fp8/awq), or lower --max-num-seqs",
                )
            )
        if CUDA_OOM.search(line):
            if m := SAMPLER_OOM.search(line):
                fix = f"--max-num-seqs {max(1, int(m['n']) // 2)}, or lower --gpu-memory-utilization"
                msg = f"CUDA ran out of memory warming up the sampler with {m['n']} dummy requests"
            elif any(GRAPH_CAPTURE_FRAME.search(x) for x in (line, *self._recent)):
                fix = "lower --gpu-memory-utilization (CUDA graphs are captured outside the budget), or --enforce-eager"
                msg = "CUDA ran out of memory capturing CUDA graphs"
            else:
                fix = "lower --gpu-memory-utilization or --max-num-batched-tokens, or free GPU memory"
                msg = "CUDA ran out of memory during start-up"
            self._fail(Failure("cuda_oom", msg, fix))
        if m := INVALID_CONFIG.search(line):
            fix = "lower --max-model-len" if m["mml"] else "fix the flag named in the message"
            if m["platform"]:
                fix = "--distributed-executor-backend mp (this platform runs tensor parallel without Ray)"
            if m["mml"]:
                fix = (
                    f"lower --max-model-len to the model's limit ({m['what']}), or set VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"
                )
            text = ERROR_LINE.search(line)
            self._fail(Failure("invalid_config", (text["message"] if text else m.group(0)).strip()[:500], fix))
        if ENGINE_INIT_FAILED.search(line):
            self._engine_failed = True
        if m := ERROR_LINE.search(line):
            self._error_lines.append(m["message"].strip())
            if len(self._error_lines) > 8:
                del self._error_lines[0]

    def _fail(self, failure: Failure) -> None:
        cur = self.facts.failure
        better = cur is not None and cur.kind == failure.kind and failure.estimated_max_model_len is not None
        if (
            cur is None
            or _FAILURE_RANK[failure.kind] > _FAILURE_RANK[cur.kind]
            or (better and cur.estimated_max_model_len is None)
        ):
            self.facts.failure = failure

    def _engine_config(self, cfg: str) -> None:
        f = self.facts
        for key, attr, conv in (
            ("model", "model", str),
            ("max_seq_len", "max_model_len", int),
            ("tensor_parallel_size", "tensor_parallel_size", int),
            ("pipeline_parallel_size", "pipeline_parallel_size", int),
            ("dtype", "dtype", str),
            ("kv_cache_dtype", "kv_cache_dtype", str),
            ("quantization", "quantization", str),
            ("enforce_eager", "enforce_eager", str),
            ("device_config", "device", str),
        ):
            m = re.search(rf"\b{key}=(?P<v>'[^']*'|[^,\s]+)", cfg)
            if not m:
                continue
            v = m["v"].strip("'")
            if v in ("None", ""):
                continue
            if attr == "dtype":
                v = v.removeprefix("torch.")
            if attr == "enforce_eager":
                f.enforce_eager = v == "True"
                continue
            if getattr(f, attr) is None:
                with contextlib.suppress(ValueError):
                    setattr(f, attr, conv(v))

    def _non_default(self, text: str) -> None:
        f = self.facts
        try:
            args = ast.literal_eval(text)
        except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
            return
        if not isinstance(args, dict):
            return
        f.non_default_args = {k: v for k, v in args.items() if isinstance(k, str)}
        simple = {
            "model": "model", "max_model_len": "max_model_len", "tensor_parallel_size": "tensor_parallel_size",
            "pipeline_parallel_size": "pipeline_parallel_size", "gpu_memory_utilization": "gpu_memory_utilization",
            "dtype": "dtype", "kv_cache_dtype": "kv_cache_dtype", "quantization": "quantization",
            "enforce_eager": "enforce_eager", "max_num_batched_tokens": "max_num_batched_tokens",
            "max_num_seqs": "max_num_seqs", "block_size": "block_size",
            "kv_cache_memory_bytes": "kv_cache_memory_bytes",
        }  # fmt: skip
        for k, attr in simple.items():
            if k in args and args[k] is not None:
                setattr(f, attr, args[k])
        if f.model is None and isinstance(args.get("model_tag"), str):
            f.model = args["model_tag"]


_VERSION_CONTEXT = ("vLLM", "LLM engine", "█", "▀", "api_server")


def _looks_like_record_start(line: str) -> bool:
    s = line.lstrip(" \t\x00")
    if not s:
        return True
    return bool(_RECORD_START.match(s))


_RECORD_START = re.compile(
    r"(?:\(\w[\w ]*pid=\d+[^)]*\)\s*)*(?:\x1b\[[0-9;]*m)?"
    r"(?:INFO|DEBUG|WARNING|ERROR|CRITICAL|Traceback|\[|\d{4}-\d\d-\d\d|"
    r"[A-Z][a-z]{2} \d+|\d\d-\d\d \d\d:|\||#|-|\*|File \"|raise |\w+Error|\(\w[\w ]*pid=)"
)

# --- streaming over files ---------------------------------------------------------------------------------------

CHUNK = 8 << 20


# Once vLLM is up, the rest of a log is request traffic: only a failure or a new boot can change the facts.
AFTER_BOOT_KEYWORDS: tuple[bytes, ...] = (b"rror", b"version", b"non-default", b"emory")


def _candidate_lines(fh: IO[bytes], keywords: Callable[[], tuple[bytes, ...]] = lambda: KEYWORDS) -> Iterator[bytes]:
    """Lines containing a keyword, plus the line after each (for wrapped lines), in file order."""
    tail = b""
    carry = False  # the last line of the previous chunk was a keyword line: its continuation starts this one
    while True:
        block = fh.read(CHUNK)
        if not block:
            break
        data = tail + block
        cut = data.rfind(b"\n")
        if cut < 0:
            tail = data[-CHUNK:] if len(data) > 4 * CHUNK else data  # one absurd line: keep its end only
            continue
        body, tail = data[: cut + 1], data[cut + 1 :]
        carry = yield from _scan(body, keywords(), carry)
    if tail:
        yield from _scan(tail + b"\n", keywords(), carry)


def _scan(body: bytes, keywords: tuple[bytes, ...], carry: bool) -> Generator[bytes, None, bool]:
    starts: set[int] = {0} if carry else set()
    for kw in keywords:
        i = body.find(kw)
        while i >= 0:
            s = body.rfind(b"\n", 0, i) + 1
            starts.add(s)
            e = body.find(b"\n", i)
            if e < 0:
                break
            starts.add(e + 1)  # the following line, which may continue a wrapped one
            i = body.find(kw, e + 1)
    for s in sorted(starts):
        if s >= len(body):
            continue
        e = body.find(b"\n", s)
        yield body[s : e if e >= 0 else len(body)]
    return len(body) in starts


def parse_stream(fh: IO[bytes]) -> LogFacts:
    """Parse a whole log from a binary file object, in constant memory."""
    p = LogParser()

    def keywords() -> tuple[bytes, ...]:
        f = p.facts
        booted = f.api_ready or f.init_engine_seconds is not None
        return AFTER_BOOT_KEYWORDS if booted and f.failure is None else KEYWORDS

    for raw in _candidate_lines(fh, keywords):
        p.feed(raw.decode("utf-8", errors="replace"))
    return p.finish()


def parse_text(text: str) -> LogFacts:
    return LogParser().feed_many(text.splitlines())
