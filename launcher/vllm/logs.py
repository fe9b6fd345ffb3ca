"""Every vLLM startup-log line vlaunch understands, in one place.

Each line is a `Pattern`: a name, a compiled regex, a real example line (and the other wordings other versions
print), the versions that print it, the vLLM file that prints it, the boot stage it marks (if any) and the literal
keywords that the stream pre-filter looks for. `PATTERNS` lists them all; the pre-filter's `KEYWORDS` and the boot
stages' `STAGE_TRIGGERS` are derived from it. The log text is not a stable interface; tests/fixtures/logs are the
spec. Patterns never anchor at the line start: vLLM prefixes lines with process names, levels, timestamps and
file:line.

`LogParser.feed(line)` takes one line at a time (the live watcher of `serve` uses it); `parse_text` and
`parse_stream` read a whole log and state the same facts. `parse_stream` reads any file in constant memory,
handing the parser only the lines that can matter, found with bytes searches over large chunks (see "streaming
over files" below): request-log noise, keyword-dense lines, a start-up repeated a thousand times and a 50 MB line
never reach the regexes line by line. What the parser reads of a log:

- a line's first LINE_CAP characters (64 KiB);
- a record that goes on over several lines (a forum's or a terminal's wrap, vLLM's prefix repeated on every line
  of a multi-line message) as one, as well as each line;
- the last boot, when the log holds several (each boot banner starts one);
- once the API server is up, only the lines that can say something new: a new boot, a runtime failure.
"""

from __future__ import annotations

import ast
import contextlib
import re as std_re
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import field
from enum import Enum
from typing import IO, Any

import regex as re

from launcher.common.records import dataclass

_N = r"-?[0-9][0-9,]*(?:\.[0-9]+)?"  # 34,952 / 34952 / 12.5 / 12.50 / -0.3 / -4.74 (a DGX Spark's graph memory)


def number(text: str) -> float:
    """'34,952' -> 34952.0, '12.5' -> 12.5, '-4.74' -> -4.74. Absurd figures (no finite float) raise ValueError."""
    v = float(text.replace(",", "")[:40])
    if v != v or v in (float("inf"), float("-inf")):
        raise ValueError(text)
    return v


class Stage(Enum):
    """vLLM's boot, in order; a pattern's `stage` is the one its line starts."""

    STARTING = "starting"
    LOADING = "loading weights"
    PROFILING = "profiling"
    KV = "KV cache allocated"
    GRAPHS = "CUDA graphs / warm-up"
    READY = "API up"
    FAILED = "failed"


@dataclass(frozen=True)
class Pattern:
    """One kind of line vLLM prints."""

    name: str
    regex: re.Pattern[str]
    example: str  # a real line (or one written from the format string in `source`, where no log had it)
    versions: str  # the vLLM versions that print it, e.g. "0.11.1+"
    source: str  # the vLLM file (and call) that prints it
    keywords: tuple[str, ...]  # literals for the pre-filter: every line the regex matches holds one of them
    stage: Stage | None = None  # the boot stage its line starts; then its keywords are that stage's triggers
    variants: tuple[str, ...] = ()  # the same line as other versions word it

    def search(self, line: str) -> re.Match[str] | None:
        return self.regex.search(line)

    @property
    def keywords_bytes(self) -> tuple[bytes, ...]:
        return tuple(k.encode() for k in self.keywords)

    def finditer(self, text: str) -> Iterator[re.Match[str]]:
        return self.regex.finditer(text)


def _p(
    name: str,
    regex: str,
    *,
    example: str,
    versions: str,
    source: str,
    keywords: tuple[str, ...],
    stage: Stage | None = None,
    variants: tuple[str, ...] = (),
    flags: int = 0,
) -> Pattern:
    return Pattern(name, re.compile(regex, flags), example, versions, source, keywords, stage, variants)


# --- cleaning --------------------------------------------------------------------------------------------------

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")

# --- version and configuration ---------------------------------------------------------------------------------

VERSION = _p(
    "version",
    r"(?:vLLM API server version|\bversion|LLM engine \(v)\s*v?(?P<version>\d+\.\d+(?:\.\d+)*(?:\.?(?:post|dev|rc)\d+)?"
    r"(?:\+[\w.]+)?)",
    example="(APIServer pid=1) INFO 04-22 00:02:45 [entrypoints/utils.py:299]  ▄▄ ▄█ █     █     █ ▀▄▀ █  "
    "version 0.19.0",
    versions="banner 0.11+; 'vLLM API server version' 0.4-0.10; engine line V0 0.6-0.10, V1 0.8+",
    source="entrypoints/utils.py (banner); entrypoints/openai/api_server.py; v1/engine/core.py",
    keywords=("version", "LLM engine (v"),
    variants=(
        "(APIServer pid=1) INFO 09-10 23:26:20 [api_server.py:1805] vLLM API server version 0.10.1.1",
        "INFO 05-30 16:22:20 llm_engine.py:234] Initializing a V0 LLM engine (v0.7.2) with config: model='Qwen/…'",
    ),
)
BOOT_BANNER = _p(
    "boot_banner",
    r"(?:vLLM API server version|█     █     █ ▀▄▀ █\s+version) "
    r"v?(?P<version>\d+\.\d+(?:\.\d+)*(?:\.?(?:post|dev|rc)\d+)?)",
    example="(APIServer pid=1) INFO 04-22 00:02:45 [entrypoints/utils.py:299]  ▄▄ ▄█ █     █     █ ▀▄▀ █  "
    "version 0.19.0",
    versions="'vLLM API server version' 0.4-0.10; the logo banner 0.11+ (this logo in 0.19 and 0.32)",
    source="entrypoints/openai/api_server.py (≤0.10); entrypoints/utils.py log_version_and_model (0.11+): the API "
    "server prints it once, first, when it starts",
    keywords=("vLLM API server version", "█     █     █ ▀▄▀ █"),
    variants=(
        "(APIServer pid=1009) INFO 09-10 23:26:12 [api_server.py:1805] vLLM API server version 0.10.1.1",
        "INFO 08-12 10:02:11 api_server.py:339] vLLM API server version 0.5.4",
    ),
)
ENGINE_CONFIG = _p(
    "engine_config",
    r"Initializing an? (?:(?P<engine>V[01]) )?LLM engine (?:\(v[^)]*\) )?with config: (?P<config>.*)",
    example="INFO 05-30 16:22:20 llm_engine.py:234] Initializing a V0 LLM engine (v0.7.2) with config: "
    "model='Qwen/Qwen2.5-1.5B-Instruct', speculative_config=None, tokenizer='Qwen/Qwen2.5-1.5B-Instruct', "
    "dtype=torch.bfloat16, max_seq_len=32768, tensor_parallel_size=1, pipeline_parallel_size=1",
    versions="V0 0.6-0.10; V1 0.8+ ('Initializing a V1 LLM engine (v0.8.5) with config')",
    source="v1/engine/core.py: 'Initializing a V1 LLM engine (v%s) with config: %s' (VllmConfig.__str__)",
    keywords=("with config: ",),
)
NON_DEFAULT_ARGS = _p(
    "non_default_args",
    r"non-default args: (?P<args>\{[^\n]*+)",  # up to the last "}": LogParser cuts it (linear)
    example="(APIServer pid=1) INFO 04-22 00:03:36 [entrypoints/utils.py:233] non-default args: {'model_tag': "
    "'meta-llama/Llama-3.1-8B-Instruct', 'max_model_len': 8192, 'gpu_memory_utilization': 0.95}",
    versions="0.8.5+",
    source="entrypoints/utils.py: 'non-default args: %s'",
    keywords=("non-default",),
)
CHUNKED_PREFILL = _p(
    "chunked_prefill",
    r"Chunked prefill is enabled with max_num_batched_tokens=(?P<mnbt>\d+)",
    example="(APIServer pid=1) INFO 04-22 00:03:36 [config/scheduler.py:238] Chunked prefill is enabled with "
    "max_num_batched_tokens=8192.",
    versions="0.6+",
    source="config/scheduler.py",
    keywords=("Chunked",),
)

# --- boot stages without numbers -------------------------------------------------------------------------------

LOAD_START = _p(
    "load_start",
    r"Starting to load model|Loading (?:weights|model weights|safetensors)",
    example="(Worker pid=13686) INFO 11-29 20:30:24 [cpu_model_runner.py:68] Starting to load model "
    ".cache/tiny-llama...",
    versions="V1 0.8+ ('Starting to load model'); safetensors progress bar all",
    source="v1/worker/gpu_model_runner.py, cpu_model_runner.py: 'Starting to load model %s...'",
    keywords=("Starting to load model", "Loading weights", "Loading model weights", "Loading safetensors"),
    stage=Stage.LOADING,
    variants=(
        "Loading safetensors checkpoint shards:   0% Completed | 0/1 [00:00<?, ?it/s]",
        "(Worker pid=13686) INFO 11-29 20:30:24 [default_loader.py:501] Loading weights took 0.01 seconds",
        "Loading model weights took 14.9888 GB",
    ),
)
WEIGHTS_LOADED = _p(
    "weights_loaded",
    rf"Loading weights took (?P<secs>{_N}) seconds",
    example="(Worker pid=13686) INFO 11-29 20:30:24 [default_loader.py:501] Loading weights took 0.01 seconds",
    versions="0.8+",
    source="model_executor/model_loader/default_loader.py: 'Loading weights took %.2f seconds'",
    keywords=("Loading weights took",),
    stage=Stage.PROFILING,
)
MEMORY_PROFILING = _p(
    "memory_profiling",
    rf"Memory profiling takes (?P<secs>{_N}) seconds",
    example="INFO 08-12 22:32:11 [worker.py:295] Memory profiling takes 1.73 seconds",
    versions="V0 0.6.5-0.10",
    source="worker/worker.py",
    keywords=("Memory profiling",),
    stage=Stage.PROFILING,
)
GRAPH_CAPTURE_START = _p(
    "graph_capture_start",
    r"Capturing CUDA graph",
    example="Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|██████████| 67/67 [00:03<00:00, 19.1it/s]",
    versions="V1 (progress bar; written from the format string)",
    source="v1/worker/gpu_model_runner.py: tqdm desc 'Capturing CUDA graphs ({}, {})'",
    keywords=("Capturing CUDA graph",),
    stage=Stage.GRAPHS,
)
WARMUP = _p(
    "warmup",
    r"Warming up model",
    example="(Worker pid=13686) INFO 11-29 20:30:25 [cpu_model_runner.py:87] Warming up model for the compilation...",
    versions="CPU backend 0.20+",
    source="v1/worker/cpu/model_runner.py: 'Warming up model for the compilation...'",
    keywords=("Warming up model",),
    stage=Stage.GRAPHS,
)
STARTUP_COMPLETE = _p(
    "startup_complete",
    r"Application startup complete",
    example="INFO:     Application startup complete.",
    versions="all (uvicorn)",
    source="uvicorn",
    keywords=("Application startup complete",),
    stage=Stage.READY,
)

# --- memory ----------------------------------------------------------------------------------------------------

MODEL_LOADING = _p(
    "model_loading",
    rf"(?:Model loading|Loading model weights) took (?P<gib>{_N}) Gi?B",
    example="(EngineCore pid=242) INFO 04-22 00:04:02 [v1/worker/gpu_model_runner.py:4820] Model loading took "
    "14.99 GiB memory and 14.429680 seconds",
    versions="'… GiB memory and' 0.11.1+; '… GiB and' 0.8.3-0.11.0; '… GB and' 0.8.0-0.8.2 (value in GiB); "
    "'Loading model weights took … GB' V0 0.4-0.7 and V1 0.7",
    source="v1/worker/gpu_model_runner.py: 'Model loading took %s GiB memory and %.6f seconds'",
    keywords=("Model loading took", "Loading model weights took"),
    stage=Stage.PROFILING,
    variants=(
        "(EngineCore_0 pid=1159) (RayWorkerWrapper pid=1273) INFO 09-10 23:47:50 [gpu_model_runner.py:2007] Model "
        "loading took 17.2217 GiB and 1219.554719 seconds",
        "INFO 05-30 16:23:22 model_runner.py:1115] Loading model weights took 2.8875 GB",
    ),
)
AVAILABLE_KV = _p(
    "available_kv",
    rf"Available KV cache memory: (?P<gib>{_N}) ?GiB",
    example="(EngineCore pid=242) INFO 04-22 00:04:20 [v1/worker/gpu_worker.py:436] Available KV cache memory: "
    "58.11 GiB",
    versions="V1 0.9.1+ ('%.2f' before 0.14, format_gib after)",
    source="v1/worker/gpu_worker.py",
    keywords=("Available KV cache memory",),
    stage=Stage.KV,
)
KV_BYTES_RESERVED = _p(
    "kv_bytes_reserved",
    rf"reserved (?P<gib>{_N}) ?GiB memory for KV Cache as specified by kv_cache_memory_bytes",
    example="Initial free memory 70.1 GiB, reserved 4.0 GiB memory for KV Cache as specified by "
    "kv_cache_memory_bytes config and skipped memory profiling.",
    versions="0.11+ (--kv-cache-memory)",
    source="v1/worker/gpu_worker.py",
    keywords=("as specified by kv_cache_memory_bytes",),
)
V0_BUDGET = _p(
    "v0_budget",
    rf"total_gpu_memory \((?P<total>{_N}) ?GiB\) x gpu_memory_utilization \((?P<util>{_N})\) = (?P<budget>{_N}) ?GiB",
    example="INFO 05-30 16:23:28 worker.py:267] the current vLLM instance can use total_gpu_memory (14.56GiB) x "
    "gpu_memory_utilization (0.50) = 7.28GiB",
    versions="V0 0.6.5-0.10.2 (one record on three lines)",
    source="worker/worker.py",
    keywords=("x gpu_memory_utilization (",),
)
V0_BREAKDOWN = _p(
    "v0_breakdown",
    rf"model weights take (?P<weights>{_N}) ?GiB; non_torch_memory takes (?P<non_torch>{_N}) ?GiB; PyTorch activation "
    rf"peak memory takes (?P<activation>{_N}) ?GiB; the rest of the memory reserved for KV Cache is (?P<kv>{_N}) ?GiB",
    example="INFO 05-30 16:23:28 worker.py:267] model weights take 2.89GiB; non_torch_memory takes 0.01GiB; PyTorch "
    "activation peak memory takes 2.02GiB; the rest of the memory reserved for KV Cache is 2.36GiB.",
    versions="V0 0.6.5-0.10.2",
    source="worker/worker.py",
    keywords=("model weights take ",),
)
V0_PROFILE_064 = _p(
    "v0_profile_064",
    rf"Memory profiling results: total_gpu_memory=(?P<total>{_N})GiB initial_memory_usage=(?P<initial>{_N})GiB "
    rf"peak_torch_memory=(?P<peak_torch>{_N})GiB memory_usage_post_profile=(?P<post>{_N})Gib "
    rf"non_torch_memory=(?P<non_torch>{_N})GiB kv_cache_size=(?P<kv>{_N})GiB gpu_memory_utilization=(?P<util>{_N})",
    example="Memory profiling results: total_gpu_memory=23.58GiB initial_memory_usage=15.34GiB "
    "peak_torch_memory=17.98GiB memory_usage_post_profile=15.35GiB non_torch_memory=0.35GiB kv_cache_size=2.89GiB "
    "gpu_memory_utilization=0.90",
    versions="V0 0.6.4",
    source="worker/worker.py",
    keywords=("Memory profiling",),
    flags=re.IGNORECASE,
)
# The GPU worker's summary, one line: "Free memory on device (78.68/79.19 GiB) on startup. Desired GPU memory
# utilization is (0.95, 75.23 GiB). Actual usage is … Replace gpu_memory_utilization config with
# `--kv-cache-memory=61258029056` …" (0.10.2 INFO, 0.11-0.25 DEBUG, 0.26+ INFO; 0.27+ "… GiB for consumed memory
# (weights + non-torch), …")
_GPU_SUMMARY = (
    "(EngineCore pid=242) DEBUG 04-22 00:04:24 [v1/worker/gpu_worker.py:661] Free memory on device (78.68/79.19 GiB) "
    "on startup. Desired GPU memory utilization is (0.95, 75.23 GiB). Actual usage is 14.99 GiB for weight, 1.89 GiB "
    "for peak activation, 0.25 GiB for non-torch memory, and 0.91 GiB for CUDAGraph memory. Replace "
    "gpu_memory_utilization config with `--kv-cache-memory=61258029056` (57.05 GiB) to fit into requested memory, or "
    "`--kv-cache-memory=64959076352` (60.5 GiB) to fully utilize gpu memory. Current kv cache memory in use is "
    "58.11 GiB."
)
_GPU_SUMMARY_VERSIONS = "0.10.2 INFO, 0.11-0.25 DEBUG, 0.26+ INFO"
FREE_ON_DEVICE = _p(
    "free_on_device",
    rf"Free memory on device(?: (?P<device>\S+))? \((?P<free>{_N})/(?P<total>{_N}) GiB\) on startup",
    example=_GPU_SUMMARY,
    versions=_GPU_SUMMARY_VERSIONS,
    source="v1/worker/gpu_worker.py",
    keywords=("Free memory on device",),
)
DESIRED_UTIL = _p(
    "desired_util",
    rf"desired GPU memory utilization (?:is )?\((?P<util>{_N}), (?P<req>{_N}) GiB\)",
    example=_GPU_SUMMARY,
    versions=_GPU_SUMMARY_VERSIONS,
    source="v1/worker/gpu_worker.py",
    keywords=("GPU memory utilization",),
    flags=re.IGNORECASE,
)
ACTUAL_USAGE = _p(
    "actual_usage",
    rf"Actual usage is (?P<weights>{_N}) GiB for weight, (?P<activation>{_N}) GiB for peak activation, "
    rf"(?P<non_torch>{_N}) GiB for non-torch memory, and (?P<cudagraph>{_N}) GiB for CUDAGraph memory",
    example=_GPU_SUMMARY,
    versions="0.10.2-0.26",
    source="v1/worker/gpu_worker.py",
    keywords=("Actual usage is ",),
)
ACTUAL_USAGE_027 = _p(
    "actual_usage_027",
    rf"Actual usage is (?P<consumed>{_N}) GiB for consumed memory \(weights \+ non-torch\), (?P<activation>{_N}) GiB "
    rf"for peak activation, and (?P<cudagraph>{_N}) GiB for CUDAGraph memory",
    example="Actual usage is 15.24 GiB for consumed memory (weights + non-torch), 1.89 GiB for peak activation, and "
    "0.91 GiB for CUDAGraph memory.",
    versions="0.27+ (written from the format string)",
    source="v1/worker/gpu_worker.py: 'Actual usage is {} GiB for consumed memory (weights + non-torch), …'",
    keywords=("Actual usage is ",),
)
KV_MEMORY_SUGGESTION = _p(
    "kv_memory_suggestion",
    r"--kv-cache-memory=(?P<fit>\d+)`?(?: \([^)]*\))? to fit into requested memory, or "
    r"`?--kv-cache-memory=(?P<full>\d+)",
    example=_GPU_SUMMARY,
    versions=_GPU_SUMMARY_VERSIONS,
    source="v1/worker/gpu_worker.py",
    keywords=("--kv-cache-memory=",),
)

# --- CUDA graphs -----------------------------------------------------------------------------------------------

GRAPH_CAPTURE = _p(
    "graph_capture",
    rf"Graph capturing finished in (?P<secs>{_N}) secs?(?:, took (?P<gib>{_N}) GiB)?",
    example="(EngineCore pid=242) INFO 04-22 00:04:24 [v1/worker/gpu_model_runner.py:6046] Graph capturing finished "
    "in 3 secs, took 0.91 GiB",
    versions="V1 all; V0 0.6.4+. Negative on unified memory: 'took -0.03 GiB' (DGX Spark)",
    source="v1/worker/gpu_model_runner.py: 'Graph capturing finished in %.0f secs, took %.2f GiB'",
    keywords=("Graph capturing",),
    stage=Stage.GRAPHS,
    variants=("Graph capturing finished in 5 secs, took -0.03 GiB",),
)
CUDAGRAPH_ESTIMATE = _p(
    "cudagraph_estimate",
    rf"Estimated CUDA graph memory: (?P<gib>{_N}) GiB",
    example="(EngineCore pid=242) INFO 04-22 00:04:20 [v1/worker/gpu_model_runner.py:5955] Estimated CUDA graph "
    "memory: 0.84 GiB total",
    versions="0.18+. Negative on unified memory: '-4.74 GiB total' (DGX Spark)",
    source="v1/worker/gpu_model_runner.py: 'Estimated CUDA graph memory: %.2f GiB total'",
    keywords=("Estimated CUDA graph memory: ",),
    variants=("Estimated CUDA graph memory: -4.74 GiB total",),
)
CUDAGRAPH_POOL = _p(
    "cudagraph_pool",
    rf"CUDA graph pool memory: (?P<actual>{_N}) GiB \(actual\), (?P<estimated>{_N}) GiB",
    example="CUDA graph pool memory: 0.91 GiB (actual), 0.84 GiB (estimated), difference: 0.07 GiB (8.3%).",
    versions="0.18+ (written from the format string)",
    source="v1/worker/gpu_worker.py: 'CUDA graph pool memory: %s GiB (actual), %s GiB (estimated), difference: …'",
    keywords=("CUDA graph pool memory: ",),
)

# --- the pool --------------------------------------------------------------------------------------------------

KV_CACHE_SIZE = _p(
    "kv_cache_size",
    rf"(?P<device>[A-Z]+) KV cache size: (?P<tokens>{_N}) tokens",
    example="(EngineCore pid=242) INFO 04-22 00:04:20 [v1/core/kv_cache_utils.py:1319] GPU KV cache size: "
    "476,016 tokens",
    versions="V1 0.8-0.27 alone; 0.28+ with the concurrency on one line; 0.30+ 'CPU …' on the CPU backend",
    source="v1/core/kv_cache_utils.py: '%s KV cache size: %s tokens, Maximum concurrency for %s tokens per request: …'",
    keywords=("KV cache size:",),
    stage=Stage.KV,
    variants=(
        "(EngineCore pid=13515) INFO 11-29 20:29:41 [kv_cache_utils.py:2327] CPU KV cache size: 3,843,712 tokens, "
        "Maximum concurrency for 2,048 tokens per request: 1876.81x",
    ),
)
MAX_CONCURRENCY = _p(
    "max_concurrency",
    rf"Maximum concurrency for (?P<max_model_len>{_N}) tokens per\s+request: (?P<x>{_N}) ?x",
    example="(EngineCore pid=242) INFO 04-22 00:04:20 [v1/core/kv_cache_utils.py:1324] Maximum concurrency for 8,192 "
    "tokens per request: 58.11x",
    versions="V1 with commas; V0 0.6.3+ without",
    source="v1/core/kv_cache_utils.py",
    keywords=("Maximum concurrency for ",),
)
V0_BLOCKS = _p(
    "v0_blocks",
    rf"#?\s*(?P<device>GPU|cuda|rocm|xpu|tpu|hpu|cpu|neuron) blocks: (?P<blocks>{_N})",
    example="INFO 05-30 16:23:28 executor_base.py:110] # CUDA blocks: 5519, # CPU blocks: 9362",
    versions="'# GPU blocks: N, # CPU blocks: M' V0 0.4.3-0.6.6; '# cuda blocks' 0.7-0.10; '# CPU blocks' V0 CPU "
    "≤0.6; '# GPU blocks: N' V1 0.7",
    source="executor/executor_base.py",
    keywords=(" blocks: ",),
    stage=Stage.KV,
    variants=("# GPU blocks: 1478, # CPU blocks: 2048",),
    flags=re.IGNORECASE,
)
OVERRIDE_BLOCKS = _p(
    "override_blocks",
    r"Overriding num_gpu_blocks=(?P<old>\d+) with num_gpu_blocks_override=(?P<new>\d+)",
    example="Overriding num_gpu_blocks=29773 with num_gpu_blocks_override=512",
    versions="0.4+ (written from the format string)",
    source="v1/core/kv_cache_utils.py: 'Overriding num_gpu_blocks=%d with num_gpu_blocks_override=%d'",
    keywords=("Overriding num_gpu_blocks=",),
)
CPU_AUTO_SET = _p(
    "cpu_auto_set",
    rf"Auto set \((?P<kv>{_N})/(?P<total>{_N})\) GiB for KV cache on node (?P<node>\d+), with "
    rf"(?P<requested>{_N}) GiB requested memory for the worker\. (?P<non_kv>{_N}) GiB memory was consumed",
    example="(Worker pid=13539) INFO 11-29 20:29:41 [cpu_worker.py:260] Auto set (3.67/8.71) GiB for KV cache on "
    "node 0, with 4.36 GiB requested memory for the worker. 0.69 GiB memory was consumed by non-kv usages.",
    versions="CPU backend 0.20+",
    source="v1/worker/cpu_worker.py",
    keywords=("Auto set (",),
    stage=Stage.KV,
)
CPU_EXPLICIT_SET = _p(
    "cpu_explicit_set",
    rf"Explicitly set \((?P<kv>{_N})/(?P<total>{_N})\) GiB for KV cache on node (?P<node>\d+)",
    example="(Worker pid=14174) INFO 11-29 20:32:39 [cpu_worker.py:260] Explicitly set (1.0/9.84) GiB for KV cache "
    "on node 0.",
    versions="CPU backend 0.20+ (VLLM_CPU_KVCACHE_SPACE)",
    source="v1/worker/cpu_worker.py",
    keywords=("Explicitly set (",),
    stage=Stage.KV,
)
AUTO_FIT = _p(
    "auto_fit",
    r"Auto-fit max_model_len: (?:reduced from (?P<old>\d+) to (?P<new>\d+)"
    r"|full model context length (?P<full>\d+) fits)",
    example="Auto-fit max_model_len: reduced from 131072 to 40960 to fit in available KV cache memory (5.0 GiB)",
    versions="0.30+ (written from the format string)",
    source="v1/core/kv_cache_utils.py: 'Auto-fit max_model_len: reduced from %d to %d to fit in available KV …'",
    keywords=("Auto-fit max_model_len: ",),
    variants=("Auto-fit max_model_len: full model context length 32768 fits in available KV cache memory (9.2 GiB)",),
)

# --- hybrid models: block sizes, padding, mamba state ----------------------------------------------------------

ATTN_BLOCK_SIZE = _p(
    "attn_block_size",
    r"Setting attention block size to (?P<n>\d+) tokens",
    example="Setting attention block size to 528 tokens to ensure that attention page size is >= mamba page size.",
    versions="'… >= mamba page size.' 0.10.2+ (sources of 0.10.2, 0.14.0, 0.19.0, 0.32.0); the quantized-primary and "
    "XPU wordings 0.32 (examples written from the format strings)",
    source="platforms/interface.py _align_hybrid_block_size (model_executor/models/config.py "
    "HybridAttentionMambaModelConfig ≤0.19): 'Setting attention block size to %d tokens to ensure that attention "
    "page size is >= mamba page size.'; platforms/interface.py _align_heterogeneous_kv_block_size: 'Setting "
    "attention block size to %d tokens so the quantized primary KV page covers the higher-precision padded-spec "
    "page.'; platforms/xpu.py: '[XPU]Setting attention block size to %d tokens to ensure multiple of %d.'",
    keywords=("Setting attention block size",),
    variants=(
        "Setting attention block size to 32 tokens so the quantized primary KV page covers the higher-precision "
        "padded-spec page.",
        "[XPU]Setting attention block size to 64 tokens to ensure multiple of 64.",
    ),
)
KV_BLOCK_SIZE = _p(
    "kv_block_size",
    r"Setting kv cache block size to (?P<n>\d+)(?: for (?P<backends>\S+) backend)?",
    example="Setting kv cache block size to 64 for FLASHMLA backend(s).",
    versions="'… backend(s).' 0.32, '… backend.' 0.19; ROCm AITER '[ROCM_AITER_UNIFIED_ATTN]: Setting kv cache block "
    "size to 64.' 0.14-0.19 (examples written from the format strings)",
    source="platforms/interface.py update_block_size_for_backend: 'Setting kv cache block size to %d for %s "
    "backend(s).'",
    keywords=("Setting kv cache block size",),
    variants=(
        "Setting kv cache block size to 128 for CPU_ATTN backend.",
        "[ROCM_AITER_UNIFIED_ATTN]: Setting kv cache block size to 64.",
    ),
)
MAMBA_PADDING = _p(
    "mamba_padding",
    rf"Padding mamba page size by (?P<pct>{_N})% to ensure",
    example="(Worker pid=7177) INFO 12-01 08:05:21 [interface.py:1120] Padding mamba page size by 91.04% to ensure "
    "that mamba page size and attention page size are exactly equal.",
    versions="0.10.2+ (sources of 0.10.2, 0.14.0, 0.19.0, 0.32.0)",
    source="platforms/interface.py _align_hybrid_block_size (model_executor/models/config.py ≤0.19): 'Padding mamba "
    "page size by %.2f%% to ensure that mamba page size and attention page size are exactly equal.'",
    keywords=("Padding mamba page size",),
)
PADDING_LAYERS = _p(
    "padding_layers",
    rf"Add (?P<n>\d+) padding layers, may waste at most (?P<pct>{_N})% KV cache memory",
    example="Add 2 padding layers, may waste at most 6.67% KV cache memory",
    versions="0.10.2+ (sources of 0.10.2, 0.14.0, 0.19.0, 0.32.0; written from the format string)",
    source="v1/core/kv_cache_utils.py _get_kv_cache_groups_uniform_page_size: 'Add %d padding layers, may waste at "
    "most %.2f%% KV cache memory'",
    keywords=("padding layers",),
)
MAMBA_CACHE_MODE = _p(
    "mamba_cache_mode",
    r"Mamba cache mode is set to '(?P<mode>\w+)'",
    example="(APIServer pid=7078) INFO 12-01 08:05:07 [config.py:688] Mamba cache mode is set to 'align' for "
    "Qwen3NextForCausalLM by default when prefix caching is enabled",
    versions="0.19+ (sources of 0.19.0, 0.32.0; not 0.14.0)",
    source="model_executor/models/config.py MambaModelConfig: \"Mamba cache mode is set to '%s' for %s by default "
    "when prefix caching is enabled\" (INFO); \"Mamba cache mode is set to 'none' when prefix caching is "
    'disabled" (WARNING)',
    keywords=("Mamba cache mode",),
    variants=("Mamba cache mode is set to 'none' when prefix caching is disabled",),
)
SSM_DTYPE_RESET = _p(
    "ssm_dtype_reset",
    r"Reset SSM cache type to (?P<dtype>\w+)",
    example="(APIServer pid=13467) WARNING 11-29 20:29:17 [cpu.py:317] Reset SSM cache type to float32 for "
    "accelerated GDN mamba backend 'none'.",
    versions="CPU backend 0.32 (not in 0.19.0)",
    source="platforms/cpu.py: \"Reset SSM cache type to float32 for accelerated GDN mamba backend '%s'.\"",
    keywords=("Reset SSM cache type",),
)
MAMBA_SSM_DTYPE = _p(
    "mamba_ssm_dtype",
    r"Updating mamba_ssm_cache_dtype to '(?P<dtype>\w+)'|Using (?P<dtype>\w+) SSM state storage",
    example="Updating mamba_ssm_cache_dtype to 'float32' for NemotronH model",
    versions="'Updating …' 0.14+ (sources of 0.14.0, 0.19.0, 0.32.0); 'Using … SSM state storage' CPU 0.32 "
    "(written from the format strings)",
    source="model_executor/models/config.py NemotronHForCausalLMConfig: \"Updating mamba_ssm_cache_dtype to '%s' for "
    "NemotronH model\"; platforms/cpu.py: 'Using %s SSM state storage for the CPU accelerated GDN backend.'",
    keywords=("mamba_ssm_cache_dtype", "SSM state storage"),
    variants=("Using bfloat16 SSM state storage for the CPU accelerated GDN backend.",),
)
KV_GROUP_SIZES = _p(
    "kv_group_sizes",
    r"kv cache group sizes \((?P<sizes>[0-9, ]*)\)",
    example="(EngineCore pid=7146) INFO 12-01 08:06:04 [kv_cache_utils.py:853] kv cache group sizes (128, 128, 128, "
    "128)",
    versions="0.32, only with two groups or more (not in 0.19.0)",
    source="v1/core/kv_cache_utils.py resolve_kv_cache_block_sizes: 'kv cache group sizes %s' (info_once, a tuple)",
    keywords=("kv cache group sizes",),
)
PAGE_SIZES_NOT_UNIFIED = _p(
    "page_sizes_not_unified",
    r"KV cache page sizes cannot be unified; treating sliding-window layers as full attention",
    example="KV cache page sizes cannot be unified; treating sliding-window layers as full attention for cache "
    "allocation. Sliding-window attention compute is unchanged.",
    versions="0.32 (not in 0.19.0; written from the format string)",
    source="v1/core/kv_cache_utils.py _try_get_full_allocation_fallback_groups",
    keywords=("cannot be unified",),
)
HYBRID_MANAGER_DISABLED = _p(
    "hybrid_manager_disabled",
    r"Hybrid KV cache manager is disabled for this hybrid model",
    example="Hybrid KV cache manager is disabled for this hybrid model, This means we do not enable any "
    "optimizations for saving KV cache memory (e.g., dropping the KV cache outside the sliding window). The compute "
    "of layers like sliding window is still saved.",
    versions="0.10.2+ (sources of 0.10.2, 0.14.0, 0.19.0, 0.32.0; written from the format string)",
    source="v1/core/kv_cache_utils.py unify_hybrid_kv_cache_specs",
    keywords=("Hybrid KV cache manager is disabled",),
)

# --- timing ----------------------------------------------------------------------------------------------------

INIT_ENGINE = _p(
    "init_engine",
    rf"init engine \(profile, create kv cache, warmup model\) took (?P<secs>{_N}) s",
    example="(EngineCore pid=242) INFO 04-22 00:04:24 [v1/engine/core.py:283] init engine (profile, create kv cache, "
    "warmup model) took 21.45 seconds",
    versions="'… took 21.45 seconds' ≤0.19; '… took 36.94 s' 0.20+",
    source="v1/engine/core.py",
    keywords=("init engine",),
    stage=Stage.GRAPHS,
    variants=("[core.py:337]              init engine (profile, create kv cache, warmup model) took 140.65 s",),
)
API_READY = _p(
    "api_ready",
    r"Application startup complete|Starting vLLM API server|Available routes are",
    example="(APIServer pid=13649) INFO 11-29 20:31:00 [launcher.py:186] Available routes are:",
    versions="all",
    source="entrypoints/openai/api_server.py, entrypoints/launcher.py, uvicorn",
    keywords=("Application startup complete", "Starting vLLM API server", "Available routes are"),
    variants=(
        "INFO:     Application startup complete.",
        "(APIServer pid=1) INFO 04-22 00:04:30 [api_server.py:1] Starting vLLM API server 0 on http://0.0.0.0:8000",
    ),
)

REQUEST_TRAFFIC = _p(
    "request_traffic",
    r'Received request \S+: |Added request \S+\.|Finished request \S+\.| HTTP/1\.1" \d{3}',
    example='INFO:     127.0.0.1:37220 - "GET /metrics HTTP/1.1" 200 OK',
    versions="uvicorn's access log, all; 'Received request' with request logging; 'Added request', 'Finished "
    "request' V1 (written from the format strings). Each is printed only once the API server serves",
    source="uvicorn; entrypoints/logger.py; v1/engine/async_llm.py",
    keywords=("Received request ", "Added request ", "Finished request ", ' HTTP/1.1" '),
    variants=(
        "(APIServer pid=1) INFO 04-22 00:05:01 [entrypoints/logger.py:40] Received request cmpl-3f2a-0: prompt: "
        "'Hello', params: SamplingParams(n=1, temperature=0.7, max_tokens=16), prompt_token_ids: None",
        "(APIServer pid=1) INFO 04-22 00:05:01 [v1/engine/async_llm.py:270] Added request cmpl-3f2a-0.",
        "(APIServer pid=1) INFO 04-22 00:05:02 [v1/engine/async_llm.py:310] Finished request cmpl-3f2a-0.",
    ),
)

# --- failures --------------------------------------------------------------------------------------------------

GATE_GPU = _p(
    "gate_gpu",
    rf"Free memory on device(?: (?P<device>\S+))? \((?P<free>{_N})/(?P<total>{_N}) GiB\) on startup is less than "
    rf"desired GPU memory utilization \((?P<util>{_N}), (?P<req>{_N}) GiB\)",
    example="(Worker pid=445) ERROR 04-22 00:03:10 [v1/executor/multiproc_executor.py:857] ValueError: Free memory on "
    "device cuda:1 (60.85/79.19 GiB) on startup is less than desired GPU memory utilization (0.95, 75.23 GiB). "
    "Decrease GPU memory utilization or reduce GPU memory used by other processes.",
    versions="0.9.1+",
    source="v1/worker/utils.py request_memory",
    keywords=("Free memory on device",),
)
GATE_CPU = _p(
    "gate_cpu",
    rf"Available memory on node (?P<node>\d+) \((?P<free>{_N})/(?P<total>{_N}) GiB\) on "
    r"(?:startup|kv cache allocation) "
    rf"is less than (?:desired CPU memory utilization \((?P<util>{_N}), (?P<req>{_N}) GiB\)|requested memory)",
    example="(VllmWorker-0 pid=14331) ERROR 11-29 20:33:11 [multiproc_executor.py:953] ValueError: Available memory "
    "on node 0 (8.53/9.84 GiB) on startup is less than desired CPU memory utilization (0.99, 9.74 GiB).",
    versions="CPU backend 0.20+",
    source="v1/worker/cpu_worker.py",
    keywords=("Available memory on node ",),
)
KV_TOO_SMALL_V1 = _p(
    "kv_too_small_v1",
    r"To serve at least one request with the models?'s max seq len "
    rf"\((?P<mml>\d+)\),? \(?(?P<need>{_N}) Gi?B KV cache is "
    rf"needed, which is larger than the available KV cache memory \((?P<avail>{_N}) Gi?B\)\.(?: ?Based on the "
    rf"available memory,(?: the estimated maximum model length is (?P<est>\d+))?)?",
    example="ValueError: To serve at least one request with the model's max seq len (131072), (4.54 GiB KV cache is "
    "needed, which is larger than the available KV cache memory (1.71 GiB). Based on the available memory, the "
    "estimated maximum model length is 49360.",
    versions="V1 0.8.4+ ('models's' before 0.22); GB in 0.8.0-0.8.2; without the '(' before the needed memory in "
    "later versions (the variant, as users paste it into issues)",
    source="v1/core/kv_cache_utils.py _check_enough_kv_cache_memory",
    keywords=("max seq len",),
    variants=(
        "ValueError: To serve at least one request with the model's max seq len (196608), 23.25 GiB KV cache is "
        "needed, which is larger than the available KV cache memory (22.5 GiB). Based on the available memory, the "
        "estimated maximum model length is 190272. Try increasing `gpu_memory_utilization` or decreasing "
        "`max_model_len` when initializing the engine.",
    ),
)
KV_TOO_SMALL_V0 = _p(
    "kv_too_small_v0",
    r"The model's max seq len \((?P<mml>\d+)\) is larger than the maximum number of tokens that can be stored in KV "
    r"cache \((?P<tokens>\d+)\)",
    example="ValueError: The model's max seq len (4096) is larger than the maximum number of tokens that can be "
    "stored in KV cache (3584). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
    "initializing the engine.",
    versions="V0",
    source="worker/worker.py raise_if_cache_size_invalid",
    keywords=("max seq len",),
)
NO_KV_MEMORY = _p(
    "no_kv_memory",
    r"No available memory for the cache blocks|Cannot auto-fit max_model_len: not enough GPU memory",
    example="ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
    "initializing the engine.",
    versions="all; 'Cannot auto-fit' 0.30+",
    source="v1/core/kv_cache_utils.py",
    keywords=("No available memory for the cache blocks", "Cannot auto-fit max_model_len"),
    variants=("ValueError: Cannot auto-fit max_model_len: not enough GPU memory for the KV cache",),
)
WORKER_KILLED = _p(
    "worker_killed",
    r"Worker proc (?P<worker>\S+) died unexpectedly \(exit code: (?P<code>-?\d+)\)",
    example="(EngineCore pid=12261) ERROR 12-01 09:54:36 [multiproc_executor.py:315] Worker proc VllmWorker-0 died "
    "unexpectedly (exit code: -9), shutting down executor.",
    versions="V1 multiprocessing executor (seen in 0.32)",
    source="v1/executor/multiproc_executor.py",
    keywords=("died unexpectedly (exit code: ",),
)
CUDA_OOM = _p(
    "cuda_oom",
    r"CUDA out of memory|CUDA error: out of memory|OutOfMemoryError|out of memory occurred when warming up",
    example="ERROR 04-07 15:55:35 [engine.py:448] RuntimeError: CUDA error: out of memory",
    versions="all (torch)",
    source="torch; v1/worker/gpu_model_runner.py _dummy_sampler_run",
    keywords=("out of memory", "OutOfMemoryError"),
    variants=(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        "79.19 GiB of which 1.20 GiB is free.",
        "RuntimeError: CUDA out of memory occurred when warming up sampler with 256 dummy requests. Please try "
        "lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine.",
    ),
)
SAMPLER_OOM = _p(
    "sampler_oom",
    r"warming up sampler with (?P<n>\d+) dummy requests",
    example="(VllmWorker rank=1 pid=2445156) ERROR 05-10 16:00:15 [multiproc_executor.py:470] RuntimeError: CUDA out "
    "of memory occurred when warming up sampler with 256 dummy requests. Please try lowering `max_num_seqs` or "
    "`gpu_memory_utilization` when initializing the engine.",
    versions="V1 0.8+",
    source="v1/worker/gpu_model_runner.py _dummy_sampler_run",
    keywords=("warming up sampler with ",),
)
GRAPH_CAPTURE_FRAME = _p(
    "graph_capture_frame",
    r"capture_end|graph capture|capture_model|cudagraph",
    example='ERROR 04-07 15:55:35 [engine.py:448]   File "/python3.9/site-packages/torch/cuda/graphs.py", line 84, '
    "in capture_end",
    versions="all (a traceback frame)",
    source="torch/cuda/graphs.py; v1/worker/gpu_model_runner.py capture_model",
    keywords=("aptur",),
    flags=re.IGNORECASE,
)
INVALID_CONFIG = _p(
    "invalid_config",
    r"User-specified max_model_len \((?P<mml>\d+)\) is greater than the derived max_model_len \((?P<what>[^)]*)\)"
    r"|must be divisible by tensor parallel size|is not divisible by|Invalid (?:argument|value)"
    r"|Quantization method specified in the model config \([^)]*\) does not match"
    r"|current platform (?P<platform>\w+) does not support ray",
    example="(EngineCore pid=29142) ERROR 11-29 21:17:43 [core.py:1510] ValueError: current platform cpu does not "
    "support ray.",
    versions="all; pydantic's 'Value error, …' from 0.10 (that variant written from the format string)",
    source="config/model.py, config/parallel.py, v1/executor",
    keywords=("Error: ", "Value error, "),  # its messages are an exception's (pydantic's from 0.10)
    variants=(
        "ValueError: User-specified max_model_len (200000) is greater than the derived max_model_len "
        "(max_position_embeddings=131072 or model_max_length=None in model's config.json).",
        "(APIServer pid=1)   Value error, User-specified max_model_len (200000) is greater than the derived "
        "max_model_len (max_position_embeddings=131072 or model_max_length=None in model's config.json).",
    ),
)
ERROR_LINE = _p(
    "error_line",
    r"\b(?:[A-Z]\w*Error|Exception): (?P<message>.+)",
    example="(EngineCore pid=29142) ERROR 11-29 21:17:43 [core.py:1510] ValueError: current platform cpu does not "
    "support ray.",
    versions="all (a Python exception)",
    source="Python",
    keywords=("Error: ", "Exception: "),
    variants=(
        "(EngineCore pid=14315) ERROR 11-29 20:33:13 [core.py:1510] Exception: WorkerProc initialization failed due "
        "to an exception in a background process. See stack trace for root cause.",
    ),
)
ENGINE_INIT_FAILED = _p(
    "engine_init_failed",
    r"Engine core initialization failed|EngineCore failed to start",
    example="(EngineCore pid=29142) ERROR 11-29 21:17:43 [core.py:1510] EngineCore failed to start.",
    versions="V1",
    source="v1/engine/core.py; v1/engine/utils.py",
    keywords=("Engine core initialization failed", "EngineCore failed to start"),
    variants=(
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {'EngineCore': 1}",
    ),
)

# --- the launch environment: docker, the GPU and its driver, the port, the model repo, the disk -----------------
# What fails before vLLM can size anything. The docker lines are the docker CLI's (stderr of `docker run`), the GPU
# lines torch's, the CUDA runtime's or nvidia-container-cli's, the repo lines huggingface_hub's and transformers'.

DOCKER_DAEMON = _p(
    "docker_daemon",
    r"Cannot connect to the Docker daemon at |failed to connect to the docker API at "
    r"|(?P<denied>permission denied) while trying to connect to the (?:Docker daemon socket|docker API) at ",
    example="docker: Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?",
    versions="docker CLI, all; 'docker API' wording docker 28+",
    source="docker CLI (cli/command)",
    keywords=("Docker daemon", "docker API"),
    variants=(
        "docker: permission denied while trying to connect to the Docker daemon socket at unix:///var/run/docker.sock: "
        'Head "http://%2Fvar%2Frun%2Fdocker.sock/_ping": dial unix /var/run/docker.sock: connect: permission denied.',
        "docker: failed to connect to the docker API at unix:///var/run/docker.sock; check if the path is correct and "
        "if the daemon is running: dial unix /var/run/docker.sock: connect: no such file or directory",
        "permission denied while trying to connect to the docker API at unix:///var/run/docker.sock",
    ),
)
NO_GPU_RUNTIME = _p(
    "no_gpu_runtime",
    r'could not select device driver "[^"]*" with capabilities: \[\[gpu\]\]|unknown or invalid runtime name: nvidia',
    example='docker: Error response from daemon: could not select device driver "" with capabilities: [[gpu]].',
    versions="docker 19.03+ (`--gpus`) without the NVIDIA Container Toolkit; '--runtime nvidia' without it",
    source="dockerd (daemon/nvidia_linux.go)",
    keywords=("could not select device driver", "invalid runtime name"),
    variants=("docker: Error response from daemon: unknown or invalid runtime name: nvidia.",),
)
NO_CUDA_GPU = _p(
    "no_cuda_gpu",
    r"No CUDA GPUs are available|(?P<infer>Failed to infer device type)|Found no NVIDIA driver on your system"
    r"|no CUDA-capable device is detected|(?P<libcuda>libcuda\.so(?:\.1)?: cannot open shared object file)"
    r"|(?P<toolkit>nvidia-container-cli: initialization error)",
    example="RuntimeError: No CUDA GPUs are available",
    versions="all (torch's lazy CUDA init); 'Failed to infer device type' vLLM 0.6+ (a pydantic 'Value error, …' "
    "from 0.10); the libcuda import warning vLLM's CUDA build on a box without the driver",
    source="torch/cuda/__init__.py _lazy_init; c10/cuda; vllm config/device.py DeviceConfig: 'Failed to infer device "
    "type, please set the environment variable `VLLM_LOGGING_LEVEL=DEBUG` …'; vllm _custom_ops.py; "
    "nvidia-container-cli",
    keywords=(
        "No CUDA GPUs",
        "infer device type",
        "no NVIDIA driver",
        "CUDA-capable device",
        "libcuda.so",
        "nvidia-container-cli: initialization error",
    ),
    variants=(
        "(APIServer pid=1)   Value error, Failed to infer device type, please set the environment variable "
        "`VLLM_LOGGING_LEVEL=DEBUG` to turn on verbose logging to help debug the issue. [type=value_error, "
        "input_value=ArgsKwargs((), {'device': 'auto'}), input_type=ArgsKwargs]",
        "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed "
        "a driver from http://www.nvidia.com/Download/index.aspx",
        "RuntimeError: CUDA error: no CUDA-capable device is detected",
        "WARNING 04-22 09:12:01 [_custom_ops.py:20] Failed to import from vllm._C with ImportError('libcuda.so.1: "
        "cannot open shared object file: No such file or directory')",
        "nvidia-container-cli: initialization error: load library failed: libnvidia-ml.so.1: cannot open shared "
        "object file: no such file or directory: unknown.",
    ),
)
DRIVER_TOO_OLD = _p(
    "driver_too_old",
    r"NVIDIA driver on your system is too old \(found version (?P<found>\d+)\)"
    r"|CUDA driver version is insufficient for CUDA runtime version"
    r"|unsatisfied condition: cuda ?>= ?(?P<need>\d+(?:\.\d+)*)"
    r"|(?P<mismatch>system has unsupported display driver / cuda driver combination)",
    example="RuntimeError: The NVIDIA driver on your system is too old (found version 12020). Please update your GPU "
    "driver by downloading and installing a new version from the URL: http://www.nvidia.com/Download/index.aspx "
    "Alternatively, go to: https://pytorch.org to install a PyTorch version that has been compiled with your version "
    "of the CUDA driver.",
    versions="all (torch; the CUDA runtime's cudaErrorInsufficientDriver / 803; nvidia-container-cli checking an "
    "image's NVIDIA_REQUIRE_CUDA)",
    source="c10/cuda/CUDAFunctions.cpp; CUDA runtime error strings; nvidia-container-cli requirement check",
    keywords=(
        "driver on your system is too old",
        "driver version is insufficient",
        "unsatisfied condition",
        "unsupported display driver",
    ),
    variants=(
        "RuntimeError: CUDA error: CUDA driver version is insufficient for CUDA runtime version",
        "nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.8, please update your driver to a "
        "newer version, or use an earlier cuda container: unknown.",
        "RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling "
        "NumCudaDevices() that might have already set an error? Error 803: system has unsupported display driver / "
        "cuda driver combination",
    ),
)
ADDRESS_IN_USE = _p(
    "address_in_use",
    r"\[Errno (?:98|48)\] (?:Address already in use|error while attempting to bind on address "
    r"\((?P<addr>[^)\n]{0,256}?), (?P<port>\d+)(?:, \d+, \d+)?\): address already in use)"
    r"|ZMQError: Address already in use(?: \(addr='[^'\n]{0,256}?(?::(?P<iport>\d+))?'\))?"
    r"|failed to bind to (?:[^\s:]*+:)*?(?P<iport>\d+) \(errno: 98 - Address already in use\)"
    r"|port: (?P<iport>\d+), useIpv6: \w+, code: -98, name: EADDRINUSE",
    example="(APIServer pid=1) OSError: [Errno 98] Address already in use",
    versions="all: vLLM binds its API socket before the engine starts (0.6+: create_server_socket; before, uvicorn "
    "after 'Application startup complete'); ZMQ and torch.distributed ports for the engine's own sockets",
    source="entrypoints/launchers/launcher.py create_server_socket (sock.bind); uvicorn/server.py (asyncio "
    "create_server); zmq; torch c10d TCPStore",
    keywords=(
        "Errno 98",
        "Errno 48",
        "Address already in use",
        "EADDRINUSE",
        "error while attempting to bind on address",
    ),
    variants=(
        "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): address already in use",
        "OSError: [Errno 48] Address already in use",
        "zmq.error.ZMQError: Address already in use (addr='tcp://10.0.0.2:13345')",
        "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
        "port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use",
        "RuntimeError: The server socket has failed to listen on any local network address. The server socket has "
        "failed to bind to [::]:29500 (errno: 98 - Address already in use).",
    ),
)
# A URL up to huggingface.co's host and an optional "api/models/": the shortest run of non-spaces before it, never
# re-scanned from a later start (`\S*?huggingface` searches the rest of the text for the literal at each start).
_HF_URL = r"(?:(?!huggingface\.co)\S)*+huggingface\.co/(?:api/models/)?"
HF_GATED = _p(
    "hf_gated",
    r"GatedRepoError|(?:Cannot access|trying to access a) gated repo"
    r"(?: for url " + _HF_URL + r"(?P<repo>[\w.-]+/[\w.-]+))?"
    r"|Access to model (?P<repo>[\w.-]+/[\w.-]+) is restricted(?P<unlisted> and you are not in the authorized list)?",
    example="Access to model meta-llama/Llama-3.1-8B-Instruct is restricted. You must have access to it and be "
    "authenticated to access it. Please log in.",
    versions="huggingface_hub 0.14+ (the server's message); transformers 4.3x+ 'You are trying to access a gated repo'",
    source="huggingface_hub utils/_http.py hf_raise_for_status: 'Cannot access gated repo for url {url}.' + the "
    "server's X-Error-Message; transformers utils/hub.py cached_files",
    keywords=("GatedRepoError", "gated repo", "Access to model "),
    variants=(
        "huggingface_hub.errors.GatedRepoError: 401 Client Error. (Request ID: "
        "Root=1-6808ef3a-0b7c2f1e5d3a4b6c7d8e9f01;3f1c8a2e-4b5d-4e6f-8a7b-9c0d1e2f3a4b)",
        "Cannot access gated repo for url https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct/resolve/main/"
        "config.json.",
        "Access to model ardent-figment/gated-model is restricted and you are not in the authorized list. Visit "
        "https://huggingface.co/ardent-figment/gated-model to ask for access.",
        "OSError: You are trying to access a gated repo.",
    ),
)
HF_REPO_NOT_FOUND = _p(
    "hf_repo_not_found",
    r"\b(?P<status>40[134]) Client Error(?:: [\w ]+ for url: " + _HF_URL + r"(?P<repo>[\w.-]+/[\w.-]+))?"
    r"|Repository Not Found for url: (?:" + _HF_URL + r"(?P<repo>[\w.-]+/[\w.-]+))?"
    r"|(?P<revision>Revision Not Found for url)"
    # the name starts where a run of name characters starts: a long run is tried once, not from every position in it
    r"|(?<![\w./-])(?P<repo>[\w./-]{1,256}) is not a local folder and is not a valid model identifier"
    r"|(?P<invalid>Invalid repository ID or local directory specified): '(?P<repo>[^']*)'",
    example="Repository Not Found for url: https://huggingface.co/api/models/Qwen/Qwen3-8B-Instructt/tree/main"
    "?recursive=true&expand=false.",
    versions="huggingface_hub all ('Repository Not Found for url'); transformers 4.x ('is not a valid model "
    "identifier'); vLLM 0.7+ get_config ('Invalid repository ID or local directory specified', a pydantic "
    "'Value error, …' from 0.10)",
    source="huggingface_hub utils/_http.py hf_raise_for_status; transformers utils/hub.py; vllm "
    "transformers_utils/config.py get_config",
    keywords=(
        "Client Error",
        "Repository Not Found",
        "Revision Not Found",
        "valid model identifier",
        "Invalid repository ID",
    ),
    variants=(
        "huggingface_hub.errors.RepositoryNotFoundError: 404 Client Error. (Request ID: "
        "Root=1-6808f1c2-5e3d2c1b0a9f8e7d6c5b4a39;9b8a7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d)",
        "requests.exceptions.HTTPError: 404 Client Error: Not Found for url: "
        "https://huggingface.co/api/models/meta-llama/Llama-2-7b-chat/revision/main",
        "Revision Not Found for url: https://huggingface.co/api/models/Qwen/Qwen3-8B/revision/v2.",
        "OSError: Qwen/Qwen3-8B-Instructt is not a local folder and is not a valid model identifier listed on "
        "'https://huggingface.co/models'",
        "(APIServer pid=1)   Value error, Invalid repository ID or local directory specified: "
        "'Qwen/Qwen3-8B-Instructt'.",
    ),
)
_NETWORK_DOWN = r"name resolution|Name or service not known|Network is unreachable|Connection refused|timed out"
HF_UNREACHABLE = _p(
    "hf_unreachable",
    r"We couldn't connect to '(?P<endpoint>[^']+)'|(?P<offline>outgoing traffic has been disabled)"
    r"|trying to locate the files? on the Hub"
    r"|(?P<hint>host='huggingface\.co'|Failed to resolve 'huggingface\.co'"
    # each character is read by one attempt: the search stops at the next "Error retrieving file list: "
    r"|Error retrieving file list: (?:(?!Error retrieving file list: |" + _NETWORK_DOWN + r").)*+"
    r"(?:" + _NETWORK_DOWN + r"))",
    example="OSError: We couldn't connect to 'https://huggingface.co' to load this file, couldn't find it in the "
    "cached files and it looks like meta-llama/Llama-2-7b-hf is not the path to a directory containing a file named "
    "config.json.",
    versions="transformers 4.x ('… to load the files, and couldn't find them in the cached files' in 4.5x); "
    "huggingface_hub LocalEntryNotFoundError all; vLLM 0.10+ 'Error retrieving file list: …, retrying 1 of 2'",
    source="transformers utils/hub.py cached_files; huggingface_hub file_download.py, _snapshot_download.py; vllm "
    "transformers_utils/repo_utils.py with_retry",
    keywords=(
        "couldn't connect to",
        "outgoing traffic",
        "locate the file",
        "huggingface.co'",
        "Error retrieving file list",
    ),
    variants=(
        "huggingface_hub.errors.LocalEntryNotFoundError: Cannot find an appropriate cached snapshot folder for the "
        "specified revision on the local disk and outgoing traffic has been disabled. To enable repo look-ups and "
        "downloads online, set 'HF_HUB_OFFLINE=0' as environment variable.",
        "huggingface_hub.errors.LocalEntryNotFoundError: An error happened while trying to locate the file on the Hub "
        "and we cannot find the requested files in the local cache. Please check your connection and try again or "
        "make sure your Internet connection is on.",
        "(APIServer pid=1) ERROR 04-22 10:02:11 [repo_utils.py:124] Error retrieving file list: [Errno -3] Temporary "
        "failure in name resolution, retrying 1 of 2",
        "requests.exceptions.ConnectionError: (MaxRetryError(\"HTTPSConnectionPool(host='huggingface.co', port=443): "
        'Max retries exceeded with url: /api/models/Qwen/Qwen3-8B (Caused by NameResolutionError("<urllib3.'
        "connection.HTTPSConnection object at 0x7f1c2b3d4e50>: Failed to resolve 'huggingface.co' ([Errno -3] "
        "Temporary failure in name resolution)\"))\"), '(Request ID: 4c0e5c2a-7f1b-4d3e-9a8b-6c5d4e3f2a1b)')",
    ),
)
OUT_OF_DISK = _p(
    "out_of_disk",
    r"No space left on device(?:: '(?P<path>[^']*)')?"
    r"|(?P<shm>failed to extend /dev/shm\S*|Error while creating shared memory segment /dev/shm\S*)",
    example="OSError: [Errno 28] No space left on device",
    versions="all (Python, safetensors, torch); NCCL on docker's 64 MB /dev/shm",
    source="the OS (ENOSPC); NCCL shm transport",
    keywords=("No space left on device", "/dev/shm"),
    variants=(
        "OSError: [Errno 28] No space left on device: '/root/.cache/huggingface/hub/models--Qwen--Qwen3-8B/blobs/"
        "a6344aac8c09253b3b630fb776ae94478aa0275b.incomplete'",
        "misc/shmutils.cc:72 NCCL WARN Error: failed to extend /dev/shm/nccl-vzIpS6 to 9637892 bytes",
        "Error while creating shared memory segment /dev/shm/nccl-vzIpS6 (size 9637888)",
    ),
)

# --- the registry, and what is derived from it -----------------------------------------------------------------

PATTERNS: tuple[Pattern, ...] = (
    BOOT_BANNER, VERSION, ENGINE_CONFIG, NON_DEFAULT_ARGS, CHUNKED_PREFILL,
    LOAD_START, WEIGHTS_LOADED, MEMORY_PROFILING, GRAPH_CAPTURE_START, WARMUP, STARTUP_COMPLETE,
    MODEL_LOADING, AVAILABLE_KV, KV_BYTES_RESERVED, V0_BUDGET, V0_BREAKDOWN, V0_PROFILE_064, FREE_ON_DEVICE,
    DESIRED_UTIL, ACTUAL_USAGE, ACTUAL_USAGE_027, KV_MEMORY_SUGGESTION,
    GRAPH_CAPTURE, CUDAGRAPH_ESTIMATE, CUDAGRAPH_POOL,
    KV_CACHE_SIZE, MAX_CONCURRENCY, V0_BLOCKS, OVERRIDE_BLOCKS, CPU_AUTO_SET, CPU_EXPLICIT_SET, AUTO_FIT,
    ATTN_BLOCK_SIZE, KV_BLOCK_SIZE, MAMBA_PADDING, PADDING_LAYERS, MAMBA_CACHE_MODE, SSM_DTYPE_RESET, MAMBA_SSM_DTYPE,
    KV_GROUP_SIZES, PAGE_SIZES_NOT_UNIFIED, HYBRID_MANAGER_DISABLED,
    INIT_ENGINE, API_READY, REQUEST_TRAFFIC,
    GATE_GPU, GATE_CPU, KV_TOO_SMALL_V1, KV_TOO_SMALL_V0, NO_KV_MEMORY, WORKER_KILLED, CUDA_OOM, SAMPLER_OOM,
    GRAPH_CAPTURE_FRAME,
    INVALID_CONFIG, ERROR_LINE, ENGINE_INIT_FAILED,
    DOCKER_DAEMON, NO_GPU_RUNTIME, NO_CUDA_GPU, DRIVER_TOO_OLD, ADDRESS_IN_USE, HF_GATED, HF_REPO_NOT_FOUND,
    HF_UNREACHABLE, OUT_OF_DISK,
)  # fmt: skip


def keywords_of(patterns: Iterable[Pattern]) -> tuple[bytes, ...]:
    """The pre-filter: a line can matter only if it holds one of these (bytes, for chunk scanning)."""
    return tuple(dict.fromkeys(k.encode() for p in patterns for k in p.keywords))


def stage_triggers(patterns: Iterable[Pattern]) -> tuple[tuple[Stage, tuple[str, ...]], ...]:
    """Per boot stage, in boot order, the literals whose appearance in a line means vLLM has reached it."""
    ps = tuple(patterns)
    out = []
    for stage in Stage:
        triggers = tuple(dict.fromkeys(k for p in ps if p.stage is stage for k in p.keywords))
        if triggers:
            out.append((stage, triggers))
    return tuple(out)


KEYWORDS: tuple[bytes, ...] = keywords_of(PATTERNS)
STAGE_TRIGGERS: tuple[tuple[Stage, tuple[str, ...]], ...] = stage_triggers(PATTERNS)


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


# When a log shows several, the higher wins. The launch environment's failures rank below the memory failures (a
# log that got as far as a memory failure got past them); among them the root cause first: a driver too old for
# torch also leaves vLLM without a GPU platform ("Failed to infer device type").
_FAILURE_RANK = {
    "worker_killed": 70,
    "insufficient_free_memory": 60,
    "kv_too_small_for_max_model_len": 50,
    "no_kv_memory": 50,
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
            "started": self.started,
            "failure": self.failure.to_json() if self.failure else None,
        }


def _num(s: str | None) -> float | None:
    return None if s is None else number(s)


def _int(s: str | None) -> int | None:
    return None if s is None else int(number(s))


def _round_util_down(x: float) -> float:
    return max(0.01, int(x * 100) / 100)


# A line at WARNING, DEBUG or INFO level (vLLM's, uvicorn's, NCCL's, a Python warning): what it says about the
# environment only hints at a failure; it becomes one when the launch failed without starting.
_NOT_FATAL = re.compile(r"\b(?:WARN(?:ING)?|DEBUG|INFO)\b(?=:| \d\d-\d\d )|\bNCCL WARN\b|\b\w*Warning: ")
_SOCKET = re.compile(r"(?:unix|tcp|npipe)://[^\s;:]+?(?=\.?(?:\s|$)|[:;])")


@dataclass
class _RepoAccess:
    """What the log says about reaching the model's repo, line by line (huggingface_hub, transformers and vLLM each
    print their own part of one failure); `failure()` names the most specific cause."""

    repo: str | None = None
    status: int | None = None  # 401 | 403 | 404
    gated: bool = False
    unlisted: bool = False  # gated, and the token's account is not on the authorised list
    missing: bool = False
    revision: bool = False
    offline_mode: bool = False  # HF_HUB_OFFLINE is set and the files are not cached
    unreachable: bool = False
    invalid: bool = False  # vLLM's "Invalid repository ID or local directory specified"

    def failure(self) -> Failure:
        r = self.repo or "the model"
        page = f"https://huggingface.co/{self.repo}" if self.repo else "the model's page on huggingface.co"
        token = "`export HF_TOKEN=hf_…` (a token of that account; in docker `-e HF_TOKEN`)"
        if self.gated and (self.unlisted or self.status == 403):
            msg = f"{r} is a gated repo and the token's account is not on its authorised list (403)"
            return Failure("repo_access", msg, f"ask for access (accept the licence) on {page}, then {token}")
        if self.gated:
            msg = f"{r} is a gated repo and the request had no token with access to it (401)"
            return Failure("repo_access", msg, f"accept the licence on {page} and {token}")
        if self.revision:
            msg = f"the revision asked for (branch, tag or commit) does not exist in {self.repo or 'the model repo'}"
            return Failure("repo_access", msg, "check --revision against the repo's branches and tags")
        if self.missing and self.status == 404:
            msg = f"Hugging Face has no repo {self.repo} (404)" if self.repo else "Hugging Face has no such repo (404)"
            fix = "check the repo id (owner/name, as on huggingface.co), or give a local directory as the model"
            return Failure("repo_access", msg, fix)
        if self.offline_mode:
            msg = f"HF_HUB_OFFLINE is set and {r} is not in the Hugging Face cache"
            get = f"`hf download {self.repo}`" if self.repo else "`hf download REPO`"
            return Failure("repo_access", msg, f"download it first ({get}, same HF_HOME) or give a local directory")
        if self.unreachable:
            msg = f"huggingface.co could not be reached and {r} is not in the local cache (offline?)"
            fix = (
                "HF_HUB_OFFLINE=1 with the model already in the HF cache (`hf download` where there is network, "
                "same HF_HOME), or give a local directory as the model"
            )
            return Failure("repo_access", msg, fix)
        if self.missing or self.status in (401, 403):
            msg = f"Hugging Face refused {r} ({self.status or 'not found'}: no such repo, or a private or gated one "
            msg += "without a token that has access)"
            return Failure("repo_access", msg, f"check the repo id; if it is gated or private, accept the licence on "
                           f"{page} and {token}")  # fmt: skip
        msg = f"vLLM found no config.json for {r}: not a repo it could read, nor a local directory with one"
        fix = "check the repo id or the path (a local directory needs config.json); a gated repo needs " + token
        return Failure("repo_access", msg, fix)


class LogParser:
    """Feed it lines; read `.facts`. Never raises on any input.

    A pattern is tried on a line only when the line holds one of its keywords (what the stream pre-filter looks
    for, so `parse_text` and `parse_stream` read the same). A line that does not start a record (see
    `_continues`) continues the one before: the record they make is matched too, so a statement wrapped by a
    terminal or a forum is read. A boot banner starts a new boot: a log holding several (a service that restarted)
    states its last. Once the API server is up (`serving`), only the lines that hold one of AFTER_BOOT_KEYWORDS are
    read (a new boot, a runtime failure), each alone; the rest is request traffic. So it is after DRY_LINES lines in a
    row that hold keywords and state nothing (prose or prompts quoting vLLM's words, not a start-up): a real start-up
    states something every few lines, and a boot banner reads it again from there."""

    def __init__(self) -> None:
        self.facts = LogFacts()
        self._line = ""  # the previous line, cleaned
        self._line_prefix = ""  # its record prefix (`_prefix`)
        # The record the previous line ends, as its lines (the first whole, then what each continuation adds) and
        # how each break joins (`_SOFT`, `_HARD`, or either: `_EITHER_SOFT` / `_EITHER_HARD` say which on a tie);
        # no lines when the next line cannot continue it.
        self._pieces: list[str] = []
        self._breaks: list[int] = []
        self._record = ""  # the record read so far
        self._record_prefix = ""  # the prefix of its first line
        self._hard: dict[int, bool] = {}  # how `_record` reads the breaks that could be either
        self._boots = 0  # boot banners read
        self._traffic = False  # a request-time line was read: the API server is up, whatever the log began with
        self._before = ""  # while matching a continued record: the record before this line
        self._cur = ""  # and this line alone
        self._error_in_record = False  # an error message of the current record is the last of `_error_lines`
        self._m = 0  # the patterns whose keywords the text being matched holds (bits of `_BIT`)
        self._cont = False  # the text being matched is a continued record
        self._found: dict[str, re.Match[str] | None] = {}  # its searches so far, by pattern
        self._config_set: set[str] = set()  # the facts the last engine-config line set
        self._recent: deque[str] = deque(maxlen=6)
        self._error_lines: list[str] = []
        self._engine_failed = False
        self._hints: dict[str, Failure] = {}  # the environment failures warnings hint at, by kind
        self._pending: dict[str, Failure] = {}  # those hinted since the last line vLLM printed: a new boot's own
        self._repo = _RepoAccess()
        self._hits = 0  # pattern searches that matched
        self._dry = 0  # lines in a row that held keywords and matched no pattern
        self._junk = False  # DRY_LINES such lines: text quoting vLLM's words, not a start-up (see `serving`)

    @property
    def serving(self) -> bool:
        """The API server is up (it said so, or requests are being served: a log that begins after the start-up)
        and nothing failed: only the lines holding an AFTER_BOOT_KEYWORDS keyword can change the facts now."""
        return (self.facts.api_ready or self._traffic or self._junk) and self.facts.failure is None

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
        up = f.kv_pool_tokens is not None or f.num_blocks is not None or f.api_ready
        if self._hints and not up and (f.failure is not None or self._error_lines or self._engine_failed):
            # The launch failed: what the warnings said about the environment explains it (a driver too old for
            # torch is a warning, then vLLM finds no platform).
            for kind, hint in self._hints.items():
                repo = kind == "repo_access"
                self._fail(self._repo.failure() if repo else hint, refine=repo)
        if f.failure is None and not f.started and (self._error_lines or self._engine_failed):
            root = [e for e in self._error_lines if not ENGINE_INIT_FAILED.search(e)]
            msg = (root or self._error_lines or ["the engine core failed to start"])[-1]
            f.failure = Failure("other", msg[:500], "read the error above; it is not a memory failure vlaunch knows")
        return f

    # -- internals --
    def _gap(self) -> None:
        """Lines were left out here (`parse_stream` skips lines that cannot matter): the next one continues
        nothing."""
        self._line = self._line_prefix = ""
        self._end_record()

    def _end_record(self) -> None:
        self._pieces, self._breaks, self._record, self._hard = [], [], "", {}

    def _feed(self, raw: str) -> None:
        f = self.facts
        f.lines_read += 1
        line = clean(raw)
        if self.serving:
            self._line, self._line_prefix = line, ""
            self._end_record()
            if any(k in line for k in _SERVING_STR):
                self._match(line)
                self._recent.append(line[-300:])
            return
        piece = self._continues(line)
        prev = self._line
        self._line, self._line_prefix = line, _prefix(line)
        boots = self._boots
        hits = self._hits
        if piece is None:
            self._error_in_record = False
            self._end_record()
            if len(line) < _RECORD_CAP:
                self._pieces, self._record, self._record_prefix = [line], line, self._line_prefix
            self._match(line)
        else:
            before = self._record
            self._breaks.append(_break_kind(prev, self._pieces[-1], piece))
            self._pieces.append(piece)
            joined = self._record = self._read_record()
            self._match(line)
            if self._boots == boots:  # a banner on this line starts a boot: the record before is not continued
                self._before, self._cur = before, line
                self._match(joined, continuation=True)
                if len(joined) >= _RECORD_CAP:
                    self._end_record()
        self._recent.append(line[-300:])
        if self._boots == boots and self._m:  # the line held keywords (a new boot resets the count)
            self._dry = 0 if self._hits != hits else self._dry + 1
            if self._dry >= DRY_LINES:
                self._junk = True
                self._end_record()

    def _continues(self, line: str) -> str | None:
        """What `line` adds to the record before it, or None when it starts a record. It continues one when it does
        not look like a record start, or when it repeats the prefix (process tag, logger header) of the previous
        line or of the record's first before text that does not (vLLM prefixes every line of a multi-line message;
        a terminal's wrap leaves the lines it adds without one)."""
        if not self._pieces:
            return None
        if not _looks_like_record_start(line):
            return line
        for pre in (self._line_prefix, self._record_prefix):
            if pre and line.startswith(pre):
                rest = line[len(pre) :]
                if not _looks_like_record_start(rest):
                    return rest
        return None

    def _read_record(self) -> str:
        """The record, each break read the way that lets the patterns read most across the breaks that could be
        either (on a tie, their defaults). A forum's re-wrap put a line end where a space was: join with a space. A
        terminal's hard wrap cut at a fixed column, inside a word or a number: join as is."""
        either = [i for i, k in enumerate(self._breaks) if k >= _EITHER_SOFT]
        # the oldest keep the reading they have; past _WEIGHED_PIECES pieces every break does (a new one its
        # default): the work per record is bounded, not 2**_MAX_EITHER readings for each of its lines
        keep = max(0, len(either) - _MAX_EITHER) if len(self._pieces) <= _WEIGHED_PIECES else len(either)
        for i in either[:keep]:
            self._breaks[i] = _HARD if self._hard.get(i, self._breaks[i] == _EITHER_HARD) else _SOFT
        either = either[keep:]
        default = {i: self._breaks[i] == _EITHER_HARD for i in either}
        mask = 0
        if either:  # the judges whose keywords a reading may hold: those of every break joined as is, or spaced
            mask = _mask_of(self._join(dict.fromkeys(either, True))[0]) | _mask_of(self._join({})[0])
            if not mask & _JUDGE_MASK:
                either = []  # no judge can read across a break: every reading scores 0, the defaults win
        best, best_score, best_flips, best_hard = "", -1, 0, default
        for flips in range(1 << len(either)):
            hard = {i: default[i] != bool(flips >> k & 1) for k, i in enumerate(either)}
            text, at = self._join(hard if either else default)
            score = _read_across(text, [at[i] for i in either], mask) if either else 0
            n = bin(flips).count("1")
            if score > best_score or (score == best_score and n < best_flips):
                best, best_score, best_flips, best_hard = text, score, n, hard
        self._hard = best_hard
        return best

    def _join(self, hard: dict[int, bool]) -> tuple[str, dict[int, int]]:
        """The record with each break read as `hard` says (or as its kind fixes it); where each break is in it."""
        parts = [self._pieces[0]]
        n = len(parts[0])
        at: dict[int, int] = {}
        for i, (kind, piece) in enumerate(zip(self._breaks, self._pieces[1:], strict=True)):
            if hard.get(i, kind == _HARD):
                add = piece
                at[i] = n
            else:
                add = " " + piece.strip()
                at[i] = n + 1
            parts.append(add)
            n += len(add)
        return "".join(parts), at

    def _new_boot(self) -> None:
        """A boot banner: what the log said before belongs to an earlier boot. The environment warnings printed
        since vLLM's last line (before this banner) belong to this one."""
        old, old_boots = self.facts, self._boots
        carried = self._pending
        repo = self._repo if "repo_access" in carried else _RepoAccess()
        self.__init__()  # type: ignore[misc]
        self.facts.recognised, self.facts.lines_read, self.facts.source = old.recognised, old.lines_read, old.source
        self._hints, self._repo = dict(carried), repo
        self._boots = old_boots + 1

    def _s(self, p: Pattern, line: str) -> re.Match[str] | None:
        """`p.search(line)`, when the line holds one of p's keywords (once per text: `_match` clears `_found`)."""
        if not self._m & _BIT[p.name]:
            return None
        if p.name not in self._found:
            found = self._found[p.name] = p.regex.search(line)
            self._hits += found is not None
        return self._found[p.name]

    def _match(self, line: str, continuation: bool = False) -> None:
        f = self.facts
        self._m = m0 = _mask_of(line)
        self._cont = continuation
        self._found = {}
        s = self._s
        if not m0:
            return
        if not continuation and s(BOOT_BANNER, line):
            self._new_boot()
            f = self.facts
            self._m, self._cont, self._found = m0, continuation, {}
        if (self._pending or not f.recognised) and _vllm_line(line, m0, s):
            self._pending = {}
            f.recognised = True
        if f.vllm_version is None and (m := s(VERSION, line)) and any(k in line for k in _VERSION_CONTEXT):
            f.vllm_version = m["version"]
        if m := s(ENGINE_CONFIG, line):
            if m["engine"]:
                f.engine = m["engine"].lower()
            self._engine_config(m["config"], continuation)
        if m := s(NON_DEFAULT_ARGS, line):  # a dict cut by a wrap does not parse: only a whole one counts
            self._non_default(m["args"][: m["args"].rfind("}") + 1])
        if m := s(CHUNKED_PREFILL, line):
            f.max_num_batched_tokens = int(m["mnbt"])
        if m := s(MODEL_LOADING, line):
            v = number(m["gib"])
            if not continuation or self._new_in_join(MODEL_LOADING):
                f.per_worker_loading_gib.append(v)
                f.model_loading_gib = max(f.per_worker_loading_gib)
        if m := s(AVAILABLE_KV, line):
            if not continuation or self._new_in_join(AVAILABLE_KV):
                f.per_worker_available_kv_gib.append(number(m["gib"]))
                f.available_kv_gib = min(f.per_worker_available_kv_gib)
            f.engine = f.engine or "v1"
        if m := s(KV_BYTES_RESERVED, line):
            f.available_kv_gib = number(m["gib"])
        if m := s(V0_BUDGET, line):
            f.total_memory_gib = number(m["total"])
            f.gpu_memory_utilization = f.gpu_memory_utilization or number(m["util"])
            f.requested_memory_gib = number(m["budget"])
            f.engine = f.engine or "v0"
        if m := s(V0_BREAKDOWN, line):
            f.weights_gib = number(m["weights"])
            f.non_torch_gib = number(m["non_torch"])
            f.activation_gib = number(m["activation"])
            f.available_kv_gib = number(m["kv"])
            f.engine = f.engine or "v0"
        if m := s(V0_PROFILE_064, line):
            f.total_memory_gib = number(m["total"])
            f.non_torch_gib = number(m["non_torch"])
            f.available_kv_gib = number(m["kv"])
            f.gpu_memory_utilization = f.gpu_memory_utilization or number(m["util"])
            if f.model_loading_gib is not None:
                f.activation_gib = round(number(m["peak_torch"]) - f.model_loading_gib, 2)
            f.engine = f.engine or "v0"
        if (m := s(GATE_GPU, line)) or (m := s(GATE_CPU, line)):
            self._gate_failure(m, line)
        elif m := s(FREE_ON_DEVICE, line):
            f.total_memory_gib = number(m["total"])
            f.free_memory_gib = number(m["free"])
        if m := s(DESIRED_UTIL, line):
            f.gpu_memory_utilization = f.gpu_memory_utilization or number(m["util"])
            f.requested_memory_gib = number(m["req"])
        if m := s(ACTUAL_USAGE, line):
            f.weights_gib = number(m["weights"])
            f.activation_gib = number(m["activation"])
            f.non_torch_gib = number(m["non_torch"])
            f.cudagraph_gib = number(m["cudagraph"])
        if m := s(ACTUAL_USAGE_027, line):
            f.consumed_gib = number(m["consumed"])
            f.activation_gib = number(m["activation"])
            f.cudagraph_gib = number(m["cudagraph"])
        if m := s(KV_MEMORY_SUGGESTION, line):
            f.kv_memory_suggestion_bytes = int(m["fit"])
            f.kv_memory_full_bytes = int(m["full"])
        if (m := s(GRAPH_CAPTURE, line)) and m["gib"]:
            f.cudagraph_gib = number(m["gib"])
        if m := s(CUDAGRAPH_ESTIMATE, line):
            f.cudagraph_estimate_gib = number(m["gib"])
        if m := s(CUDAGRAPH_POOL, line):
            f.cudagraph_gib = number(m["actual"])
        if m := s(KV_CACHE_SIZE, line):
            f.kv_pool_tokens = int(number(m["tokens"]))
            dev = m["device"].lower()
            f.device = f.device or ("cuda" if dev == "gpu" else dev)
            f.engine = f.engine or "v1"
        if m := s(MAX_CONCURRENCY, line):
            f.max_concurrency = number(m["x"])
            f.concurrency_max_model_len = int(number(m["max_model_len"]))
            f.max_model_len = f.max_model_len or f.concurrency_max_model_len
        if (m := s(V0_BLOCKS, line)) and "KV cache" not in line and f.num_blocks is None:
            # "# cuda blocks: 5519, # CPU blocks: 9362": the first count is the device's; the second is swap space.
            dev = m["device"].lower()
            f.num_blocks = int(number(m["blocks"]))
            f.device = f.device or ("cuda" if dev == "gpu" else dev)
        if m := s(OVERRIDE_BLOCKS, line):
            f.num_blocks = int(m["new"])
        if m := s(CPU_AUTO_SET, line):
            f.available_kv_gib = number(m["kv"])
            f.total_memory_gib = number(m["total"])
            f.requested_memory_gib = number(m["requested"])
            f.cpu_non_kv_gib = number(m["non_kv"])
            f.device = "cpu"
        if m := s(CPU_EXPLICIT_SET, line):
            f.available_kv_gib = number(m["kv"])
            f.total_memory_gib = number(m["total"])
            f.device = "cpu"
        if m := s(AUTO_FIT, line):
            f.auto_fit_max_model_len = int(m["new"] or m["full"])
            f.max_model_len = f.auto_fit_max_model_len
        self._hybrid(line, continuation)
        if m := s(INIT_ENGINE, line):
            f.init_engine_seconds = number(m["secs"])
        if s(API_READY, line):
            f.api_ready = True
        if s(REQUEST_TRAFFIC, line):
            self._traffic = True
        self._failures(line)

    def _hybrid(self, line: str, continuation: bool) -> None:
        if not self._m & _HYBRID_MASK:
            return
        f = self.facts
        s = self._s
        if (m := s(ATTN_BLOCK_SIZE, line)) or (m := s(KV_BLOCK_SIZE, line)):
            f.block_size = int(m["n"])  # the later line is the final size: backend choice first, hybrid alignment after
        if m := s(MAMBA_PADDING, line):
            f.mamba_page_padding_pct = number(m["pct"])
        if (m := s(PADDING_LAYERS, line)) and (not continuation or self._new_in_join(PADDING_LAYERS)):
            # One line per attention kind that needs padding; the engine core and every worker (CUDA graph
            # profiling) group the layers, so each line repeats: distinct lines are the model's.
            pad = (int(m["n"]), number(m["pct"]))
            if pad not in f.padding:
                f.padding.append(pad)
        if m := s(MAMBA_CACHE_MODE, line):
            f.mamba_cache_mode = m["mode"]
        if m := s(SSM_DTYPE_RESET, line):
            f.ssm_cache_dtype_reset = f.mamba_ssm_cache_dtype = m["dtype"]
        elif m := s(MAMBA_SSM_DTYPE, line):
            f.mamba_ssm_cache_dtype = m["dtype"]
        if (m := s(KV_GROUP_SIZES, line)) and (sizes := [int(x) for x in re.findall(r"\d+", m["sizes"])]):
            f.kv_cache_group_block_sizes = sizes
            dcp = f.non_default_args.get("decode_context_parallel_size")
            if f.block_size is None and dcp in (None, 1):
                # Attention groups hold block_size tokens (× DCP); mamba groups block_size ('align') or max_model_len.
                f.block_size = min(sizes)
        if s(PAGE_SIZES_NOT_UNIFIED, line):
            f.hybrid_fallback = "page_sizes_not_unified"
        elif s(HYBRID_MANAGER_DISABLED, line):
            f.hybrid_fallback = f.hybrid_fallback or "hybrid_kv_cache_manager_disabled"

    def _new_in_join(self, pattern: Pattern) -> bool:
        """A continued record's match is new only when neither the record before this line nor the line alone
        matched."""
        return not pattern.search(self._before) and not pattern.search(self._cur)

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
        s = self._s
        if m := s(KV_TOO_SMALL_V1, line):
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
        elif m := s(KV_TOO_SMALL_V0, line):
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
        if s(NO_KV_MEMORY, line):
            self._fail(
                Failure(
                    "no_kv_memory",
                    "nothing was left for the KV cache after weights, activations and overhead",
                    "raise --gpu-memory-utilization, use a smaller format (fp8/awq), or lower --max-num-seqs",
                )
            )
        if s(CUDA_OOM, line):
            if m := s(SAMPLER_OOM, line):
                fix = f"--max-num-seqs {max(1, int(m['n']) // 2)}, or lower --gpu-memory-utilization"
                msg = f"CUDA ran out of memory warming up the sampler with {m['n']} dummy requests"
            elif any(GRAPH_CAPTURE_FRAME.search(x) for x in (line, *self._recent)):
                fix = "lower --gpu-memory-utilization (CUDA graphs are captured outside the budget), or --enforce-eager"
                msg = "CUDA ran out of memory capturing CUDA graphs"
            else:
                fix = "lower --gpu-memory-utilization or --max-num-batched-tokens, or free GPU memory"
                msg = "CUDA ran out of memory during start-up"
            self._fail(Failure("cuda_oom", msg, fix), refine=self._cont)  # the rest of a wrapped line says more
        if m := s(WORKER_KILLED, line):
            killed = m["code"] == "-9"
            msg = f"vLLM's worker {m['worker']} died (exit code {m['code']}" + (
                ", SIGKILL: the kernel's OOM killer, most likely)" if killed else ")"
            )
            fix = (
                "lower --gpu-memory-utilization: on shared memory (CPU backend, DGX Spark) each tensor-parallel "
                "worker claims that share of the whole memory, and the OS needs its own"
                if killed
                else "read the worker's error above"
            )
            self._fail(Failure("worker_killed", msg, fix))
        if m := s(INVALID_CONFIG, line):
            fix = "lower --max-model-len" if m["mml"] else "fix the flag named in the message"
            if m["platform"]:
                fix = "--distributed-executor-backend mp (this platform runs tensor parallel without Ray)"
            if m["mml"]:
                fix = (
                    f"lower --max-model-len to the model's limit ({m['what']}), or set VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"
                )
            text = s(ERROR_LINE, line)
            self._fail(Failure("invalid_config", (text["message"] if text else m.group(0)).strip()[:500], fix))
        if s(ENGINE_INIT_FAILED, line):
            self._engine_failed = True
        # an exception a WARNING / INFO line quotes ("… fd limit errors like `OSError: …`") is not an error
        if (m := s(ERROR_LINE, line)) and not _NOT_FATAL.search(line, 0, m.start()):
            if self._cont and self._error_in_record and self._error_lines:
                self._error_lines[-1] = m["message"].strip()  # the same message, continued
            else:
                self._error_lines.append(m["message"].strip())
                if len(self._error_lines) > 8:
                    del self._error_lines[0]
            self._error_in_record = True
        self._environment(line)

    def _environment(self, line: str) -> None:
        """Docker, the GPU and its driver, the port, the model's repo, the disk."""
        if not self._m & _ENV_MASK:
            return
        s = self._s
        hint = _NOT_FATAL.search(line) is not None
        if m := s(DOCKER_DAEMON, line):
            sock = (k.group(0) if (k := _SOCKET.search(line)) else None) or "its socket"
            without = "or run vLLM without docker: `vllm.launch: cli` or `module`"
            if m["denied"]:
                msg = f"docker may not talk to the Docker daemon: permission denied on {sock}"
                fix = f"add the user to the docker group (`sudo usermod -aG docker $USER`, log in again), {without}"
            else:
                msg = f"docker could not reach the Docker daemon at {sock}: is it running?"
                fix = f"start it (`sudo systemctl start docker`), {without}"
            self._env(Failure("docker_daemon", msg, fix), hint)
        if m := s(NO_GPU_RUNTIME, line):
            flag = "`--runtime nvidia`" if "runtime name" in m.group(0) else "`--gpus`"
            self._env(
                Failure(
                    "no_gpu_runtime",
                    f"docker has no NVIDIA GPU runtime: {flag} needs the NVIDIA Container Toolkit",
                    "install nvidia-container-toolkit, then "
                    "`sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl restart docker`",
                ),
                hint,
            )
        if m := s(NO_CUDA_GPU, line):
            if m["infer"]:
                msg = "vLLM found no GPU platform ('Failed to infer device type'): no NVIDIA GPU or driver is visible"
            elif m["libcuda"]:
                msg = "vLLM's CUDA build cannot load libcuda.so.1: no NVIDIA driver is visible"
            elif m["toolkit"]:
                msg = "the NVIDIA container runtime found no working NVIDIA driver on the host"
            else:
                msg = f"no NVIDIA GPU is visible ({m.group(0)})"
            fix = (
                "run on a machine with an NVIDIA GPU and driver (`nvidia-smi` lists it; in docker add `--gpus all`; "
                "an empty CUDA_VISIBLE_DEVICES hides them), or plan for `--machine cpu` with vLLM's CPU build"
            )
            self._env(Failure("no_cuda_gpu", msg, fix), hint)
        if m := s(DRIVER_TOO_OLD, line):
            fix = (
                "upgrade the NVIDIA driver (`nvidia-smi` shows the newest CUDA it supports), or use a vLLM image or "
                "wheel built for that CUDA"
            )
            if m["found"]:
                v = int(m["found"])
                msg = (
                    f"the NVIDIA driver supports CUDA {v // 1000}.{v % 1000 // 10} at most (found version {v}); this "
                    "PyTorch was built for a newer CUDA"
                )
            elif m["need"]:
                msg = f"the image needs CUDA >= {m['need']} and the host's NVIDIA driver supports an older one"
                fix = (
                    f"upgrade the NVIDIA driver to one for CUDA {m['need']}+, or use a vLLM image built for the CUDA "
                    "`nvidia-smi` shows"
                )
            elif m["mismatch"]:
                msg = "the CUDA driver library in use does not match the kernel's NVIDIA driver (error 803)"
                fix += " (or drop a forward-compat libcuda from the image / LD_LIBRARY_PATH)"
            else:
                msg = "the NVIDIA driver is older than the CUDA runtime vLLM's PyTorch was built for"
            self._env(Failure("driver_too_old", msg, fix), hint)
        if m := s(ADDRESS_IN_USE, line):
            self._env(self._address_in_use(m, line), hint)
        if self._repo_access(line):
            unreachable = s(HF_UNREACHABLE, line)
            self._env(self._repo.failure(), hint or bool(unreachable and unreachable["hint"]), refine=True)
        if m := s(OUT_OF_DISK, line):
            path = m["path"] or (m["shm"].split()[-1] if m["shm"] else None)
            if path and path.startswith("/dev/shm"):
                msg = f"shared memory ran out ({path}): docker gives a container 64 MB of /dev/shm"
                fix = "in docker add `--ipc=host` (or `--shm-size 16g`); elsewhere free /dev/shm"
            else:
                msg = f"the disk is full (No space left on device{': ' + path if path else ''})"
                fix = "free disk (`df -h`), or point HF_HOME (where models download) at a disk with room"
            self._env(Failure("out_of_disk", msg, fix), hint)

    def _address_in_use(self, m: re.Match[str], line: str) -> Failure:
        f = self.facts
        if not m.group(0).startswith("[Errno"):  # one of the engine's own sockets (ZMQ, torch.distributed)
            what = "ZMQ" if "ZMQError" in line else "torch.distributed"
            p = m["iport"]
            if p is None:
                return Failure(
                    "address_in_use", f"a {what} socket vLLM binds is taken", "stop the earlier vLLM (`vlaunch ps`)"
                )
            return Failure(
                "address_in_use",
                f"port {p}, which vLLM's {what} binds, is already in use",
                f"stop what listens on {p} (ss -ltnp 'sport = :{p}'; an earlier vLLM? `vlaunch ps`), or set VLLM_PORT "
                "to a free port",
            )
        port: int | None = int(m["port"]) if m["port"] else None
        arg = f.non_default_args.get("port")
        if port is None and isinstance(arg, int) and not isinstance(arg, bool):
            port = arg
        elif port is None and f.non_default_args:
            port = 8000  # the non-default args were logged without one: vLLM's default
        if port is None:
            return Failure(
                "address_in_use",
                "vLLM's API port is already in use: another server (an earlier vLLM?) listens on it",
                "--port with a free port, or stop what listens on vLLM's port (8000 unless --port; "
                "ss -ltnp 'sport = :8000')",
            )
        return Failure(
            "address_in_use",
            f"port {port} is already in use: another server (an earlier vLLM?) listens on it",
            f"--port {port + 1} or stop what listens on {port} (ss -ltnp 'sport = :{port}')",
        )

    def _repo_access(self, line: str) -> bool:
        """Fold what the line says about the model's repo into `_repo`; whether it said anything."""
        s = self._s
        st = self._repo
        said = False
        repos: list[str] = []
        if m := s(HF_GATED, line):
            st.gated = said = True
            st.unlisted = st.unlisted or bool(m["unlisted"])
            repos.append(m["repo"] or "")
        if (m := s(HF_REPO_NOT_FOUND, line)) and "Entry Not Found" not in line and "EntryNotFound" not in line:
            said = True
            if m["status"]:
                st.status = int(m["status"])
            if m["revision"]:
                st.revision = True
            elif m["invalid"]:
                st.invalid = True
            elif not m["status"] or (st.status == 404 and "Revision" not in line):
                st.missing = True
            repos.append(m["repo"] or "")
        if m := s(HF_UNREACHABLE, line):
            said = True
            if m["offline"]:
                st.offline_mode = True
            else:
                st.unreachable = True
        for r in repos:
            r = r.rstrip(".")
            if r and st.repo is None:
                st.repo = r
        return said

    def _env(self, failure: Failure, hint: bool, refine: bool = False) -> None:
        """A warning only hints (see `finish`). Once vLLM is up, a repo, disk or GPU error belongs to a request, not
        to the launch; a taken port still fails it (uvicorn binds after 'Application startup complete' before 0.6)."""
        f = self.facts
        if hint:
            self._hints.setdefault(failure.kind, failure)
            self._pending.setdefault(failure.kind, failure)
        elif failure.kind == "address_in_use" or not (f.api_ready or f.init_engine_seconds is not None):
            self._fail(failure, refine=refine)

    def _fail(self, failure: Failure, refine: bool = False) -> None:
        """Keep the highest-ranked failure; `refine`: a later line of the same failure says more."""
        cur = self.facts.failure
        better = cur is not None and cur.kind == failure.kind and failure.estimated_max_model_len is not None
        if (
            cur is None
            or _FAILURE_RANK[failure.kind] > _FAILURE_RANK[cur.kind]
            or (better and cur.estimated_max_model_len is None)
            or (refine and cur.kind == failure.kind)
        ):
            self.facts.failure = failure

    def _engine_config(self, cfg: str, continued: bool = False) -> None:
        """`continued`: the record a wrapped line continues: it may complete the values its lines set cut."""
        f = self.facts
        if not continued:
            self._config_set = set()
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
            if getattr(f, attr) is None or (continued and attr in self._config_set):
                with contextlib.suppress(ValueError):
                    setattr(f, attr, conv(v))
                    self._config_set.add(attr)

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

# The lines that make a file a vLLM log: every pattern but the ones any program may print (a Python exception, a
# version number, a traceback frame, torch's out-of-memory, the launch environment's failures).
_NOT_VLLM_ONLY = (
    VERSION, ERROR_LINE, GRAPH_CAPTURE_FRAME, INVALID_CONFIG, CUDA_OOM, DOCKER_DAEMON, NO_GPU_RUNTIME, NO_CUDA_GPU,
    DRIVER_TOO_OLD, ADDRESS_IN_USE, HF_GATED, HF_REPO_NOT_FOUND, HF_UNREACHABLE, OUT_OF_DISK, REQUEST_TRAFFIC,
)  # fmt: skip
VLLM_ONLY: tuple[Pattern, ...] = tuple(p for p in PATTERNS if p not in _NOT_VLLM_ONLY)

# Once the API server is up, a log is request traffic: only a new boot (its banner) or a runtime failure (CUDA out
# of memory, a worker that died, the port taken: uvicorn binds after start-up before 0.6) can change what it states.
# A line is read then only when it holds one of these: the boot banner's keywords, CUDA's out of memory, a dead
# worker, uvicorn's bind error (few and long: each is one search of every chunk).
AFTER_BOOT_KEYWORDS: tuple[bytes, ...] = (
    *BOOT_BANNER.keywords_bytes, b"out of memory", b"died unexpectedly (exit code: ",
    b"error while attempting to bind on address",
)  # fmt: skip
_SERVING_STR: tuple[str, ...] = tuple(k.decode() for k in AFTER_BOOT_KEYWORDS)
_SERVING_NO_BANNER: tuple[bytes, ...] = tuple(k for k in AFTER_BOOT_KEYWORDS if k not in BOOT_BANNER.keywords_bytes)

# Which patterns a text can match, from the keywords it holds: one bit per pattern.
_BIT: dict[str, int] = {p.name: 1 << i for i, p in enumerate(PATTERNS)}
_KW_MASKS: tuple[tuple[str, int], ...] = tuple(
    (k, sum(_BIT[p.name] for p in PATTERNS if k in p.keywords))
    for k in dict.fromkeys(k for p in PATTERNS for k in p.keywords)
)


def _mask_of(text: str) -> int:
    m = 0
    for k, bits in _KW_MASKS:
        if k in text:
            m |= bits
    return m


def _bits(patterns: Iterable[Pattern]) -> int:
    return sum(_BIT[p.name] for p in patterns)


_VLLM_ONLY_MASK = _bits(VLLM_ONLY)
_BY_BIT: dict[int, Pattern] = {_BIT[p.name]: p for p in PATTERNS}
_HYBRID_MASK = _bits((ATTN_BLOCK_SIZE, KV_BLOCK_SIZE, MAMBA_PADDING, PADDING_LAYERS, MAMBA_CACHE_MODE, SSM_DTYPE_RESET,
                      MAMBA_SSM_DTYPE, KV_GROUP_SIZES, PAGE_SIZES_NOT_UNIFIED, HYBRID_MANAGER_DISABLED))  # fmt: skip
_ENV_MASK = _bits((DOCKER_DAEMON, NO_GPU_RUNTIME, NO_CUDA_GPU, DRIVER_TOO_OLD, ADDRESS_IN_USE, HF_GATED,
                   HF_REPO_NOT_FOUND, HF_UNREACHABLE, OUT_OF_DISK))  # fmt: skip


def _vllm_line(
    line: str, mask: int, search: Callable[[Pattern, str], re.Match[str] | None] = lambda p, line: p.search(line)
) -> bool:
    hits = mask & _VLLM_ONLY_MASK
    while hits:
        low = hits & -hits
        if search(_BY_BIT[low], line):
            return True
        hits ^= low
    return (
        bool(mask & _BIT[VERSION.name])
        and search(VERSION, line) is not None
        and any(k in line for k in _VERSION_CONTEXT)
    )


def vllm_line(line: str) -> bool:
    """Whether vLLM printed this line: a pattern only vLLM's lines match, or its version banner."""
    return _vllm_line(line, _mask_of(line))


# A statement lies in the first LINE_CAP characters of its line: the rest of a longer line (a progress bar
# rewritten with carriage returns, a dumped tensor, binary junk) is not read.
LINE_CAP = 64 << 10


def clean(raw: str) -> str:
    """A line as the patterns see it: cut at LINE_CAP, without carriage returns and terminal escape codes."""
    line = raw[:LINE_CAP].replace("\r", "").rstrip("\n")
    if "\x1b" in line:
        line = ANSI.sub("", line)
    return line


def _looks_like_record_start(line: str) -> bool:
    s = line.lstrip(" \t\x00")
    if not s:
        return True
    return bool(_RECORD_START.match(s))


# Every regex of the reader is linear in its input: possessive quantifiers and atomic groups where two parts could
# match the same characters (`pid=\d++[^)\n]*+`), a word boundary before `\w+` that a literal follows.
_TAG_SRC = r"\(\w[\w ]*pid=\d++[^)\n]*+\)[ \t]*+"
# (Process tags before the level need no part of their own: a line that starts with one matches `\(\w[\w ]*pid=`.)
_RECORD_START_SRC = (
    r"(?:\x1b\[[0-9;]*m)?"
    r"(?:INFO|DEBUG|WARNING|ERROR|CRITICAL|Traceback|\[|\d{4}-\d\d-\d\d|"
    r"[A-Z][a-z]{2} \d+|\d\d-\d\d \d\d:|\||#|-|\*|File \"|raise |\b\w+Error|\(\w[\w ]*pid=)"
)
_RECORD_START = re.compile(_RECORD_START_SRC)

# The prefix vLLM writes before each line of a record, a multi-line message's too: process tags
# ("(EngineCore_DP0 pid=123) "), then the logger's header ("ERROR 04-22 10:00:00 [core.py:700] ", "INFO 05-30
# 16:22:20 llm_engine.py:234] " before 0.6).
_HEADER_SRC = (
    r"(?:INFO|DEBUG|WARNING|ERROR|CRITICAL){ansi} \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d++)? (?:\[?[\w./-]++:\d++\] ?)?"
)
_PREFIX_SRC = "(?>(?:{ansi}" + _TAG_SRC + ")+){ansi}(?:" + _HEADER_SRC + ")?|{ansi}" + _HEADER_SRC
_PREFIX = re.compile(_PREFIX_SRC.format(ansi=""))


def _prefix(line: str) -> str:
    m = _PREFIX.match(line)
    return m.group(0) if m else ""


# Terminal widths a hard wrap cuts at; a continued record longer than _RECORD_CAP is not continued further.
WRAP_COLUMNS = frozenset((80, 100, 120, 132, 160, 200))
_RECORD_CAP = 4000
# Lines in a row that hold keywords and match no pattern before the parser reads only what a serving log can say.
# A vLLM start-up states a fact every few lines: over the 169 real and CPU-build logs in tests/fixtures and the
# shared corpus the longest such run is 17 lines.
DRY_LINES = 500
_NUMBER_END = frozenset("0123456789.,")
# How a record's break joins its two lines: with a space, as is, or either (which one on a tie).
_SOFT, _HARD, _EITHER_SOFT, _EITHER_HARD = 0, 1, 2, 3
_MAX_EITHER = 6  # the breaks that could be either, weighed together (2**6 readings)
# The pieces of a record over which readings are weighed: a statement the patterns read across breaks is a few lines
# of a terminal (the longest, vLLM's "To serve at least one request …", is 5 at 80 columns); a longer record (an
# engine config, a multi-line message, a run of full-width lines) joins its later breaks by their defaults.
_WEIGHED_PIECES = 10


def _break_kind(prev: str, before: str, piece: str) -> int:
    """How the line `prev`, which ends `before`, and the next, which adds `piece`, join. After a full-width line
    (WRAP_COLUMNS) or between digits, either way: a full-width line is a hard wrap on a tie, a number split by a
    re-wrap is not."""
    column = len(prev) in WRAP_COLUMNS
    if column or (before.rstrip()[-1:] in _NUMBER_END and piece[:1].isdigit()):
        return _EITHER_HARD if column else _EITHER_SOFT
    return _SOFT


def _read_across(text: str, breaks: list[int], m: int) -> int:
    """How much the statement patterns read across `breaks` in `text`: the breaks inside each match, summed. `m`:
    the patterns to try (a superset of those whose keywords `text` holds)."""
    score = 0
    for p in _WRAP_JUDGES:
        if m & _BIT[p.name]:
            for hit in p.regex.finditer(text):
                score += sum(hit.start() < b < hit.end() for b in breaks)
    return score


# What tells a forum's re-wrap from a terminal's hard wrap: the patterns that state numbers (not the ones that
# take the rest of a line, which match either reading).
_WRAP_JUDGES: tuple[Pattern, ...] = tuple(
    p for p in PATTERNS if p not in (ERROR_LINE, ENGINE_CONFIG, NON_DEFAULT_ARGS, HF_UNREACHABLE, GRAPH_CAPTURE_FRAME)
)
_JUDGE_MASK = _bits(_WRAP_JUDGES)

# --- streaming over files ---------------------------------------------------------------------------------------
#
# parse_stream reads CHUNK bytes at a time and hands the parser only the lines that can change its facts: before
# the API server is up, the lines holding a keyword and every record that continues over lines (and the line
# before it); once it is up, the lines holding one of AFTER_BOOT_KEYWORDS. Both are found with bytes searches over the
# chunk, not line by line. A chunk that holds two boot banners or more is read from the second-to-last: the boots
# before are replaced. A line keeps its first STREAM_LINE_CAP bytes (LINE_CAP characters at most); the rest is
# skipped without being held, so memory does not grow with the file or with a line.

CHUNK = 8 << 20
# Before the API server is up, the keyword search goes this far ahead of the parser, twice as far each time, up to
# WINDOW_MAX (a start-up is short; a log that never gets the server up is read in big steps).
WINDOW, WINDOW_MAX = 64 << 10, 4 << 20
STREAM_LINE_CAP = 4 * LINE_CAP  # UTF-8: LINE_CAP characters are at most this many bytes

_ANSI_RAW = rb"(?:\x1b\[[0-9;?]*[A-Za-z])*"
_RECORD_START_RAW = _RECORD_START_SRC.encode()
_PREFIX_RAW = _PREFIX_SRC.format(ansi=_ANSI_RAW.decode()).encode()
# A line that does not look like a record start (superset of `_continues`' first case; empty lines start one).
# These two run over whole windows of bytes: the standard library's engine is the faster one there.
_CONTINUATION_RAW = std_re.compile(rb"\n[ \t\x00]*+(?!" + _RECORD_START_RAW + rb"|\r?\n|\Z)")
# A line whose prefix (the longest, as `_prefix` takes it) repeats the previous line's before text that does not
# start a record (the second case).
_SAME_PREFIX_TAIL = rb"))[^\n]*+(?=\n\1[ \t\x00]*+(?!" + _RECORD_START_RAW + rb"|\r?\n|\Z))"
_SAME_PREFIX_RAW = std_re.compile(rb"\n((?>" + _PREFIX_RAW + _SAME_PREFIX_TAIL)
_SAME_PREFIX_AT = std_re.compile(rb"(?<![^\n])((?>" + _PREFIX_RAW + _SAME_PREFIX_TAIL)  # at a line's start only
_BANNER_KEYWORDS = keywords_of((BOOT_BANNER,))


def _read_into(fh: IO[bytes], view: memoryview) -> int:
    readinto = getattr(fh, "readinto", None)
    if readinto is not None:
        n: int = readinto(view)
        return n
    chunk = fh.read(len(view))
    view[: len(chunk)] = chunk
    return len(chunk)


def _blocks(fh: IO[bytes]) -> Iterator[tuple[bytearray, int, int]]:
    """The file as (buf, begin, end), one read at a time: buf[begin:end] are the next complete lines, each ending in
    b"\n"; buf[:begin] is the line before them (to tell whether the first continues it). A line longer than
    STREAM_LINE_CAP keeps its first STREAM_LINE_CAP bytes. One buffer, reused: nothing of it outlives the step."""
    cap = STREAM_LINE_CAP
    buf = bytearray(CHUNK + 2 * cap + 2)
    view = memoryview(buf)
    before = 0  # buf[:before]: the line before, with its newline
    keep = 0  # buf[before:keep]: the start of the line the last read ended in (at most cap bytes)
    long = False  # that line is longer than cap: its rest, up to its newline, is dropped
    while n := _read_into(fh, view[keep : keep + CHUNK]):
        end = keep + n
        if long:
            first = buf.find(b"\n", keep, end)
            if first < 0:
                continue
            view[keep : keep + end - first] = view[first:end]  # the head, then its newline and what follows
            end = keep + end - first
            long = False
        nl = buf.rfind(b"\n", keep, end)
        if nl < 0:
            keep = end if end - before <= cap else before + cap
            long = end - before > cap
            continue
        yield buf, before, nl + 1
        last = buf.rfind(b"\n", 0, nl) + 1  # the last complete line
        line = min(nl + 1 - last, cap)
        rest = min(end - nl - 1, cap)
        long = end - nl - 1 > cap
        view[:line] = view[last : last + line]
        buf[line - 1] = 0x0A
        view[line : line + rest] = view[nl + 1 : nl + 1 + rest]
        before, keep = line, line + rest
    if keep > before:
        buf[keep] = 0x0A
        yield buf, before, keep + 1


def _line_start(data: bytearray, i: int, lo: int) -> int:
    """The start of the line holding data[i], searching back to lo (a line start); -1 when it starts more than
    STREAM_LINE_CAP bytes before i (what is that far into a line is not read)."""
    floor = max(lo, i - STREAM_LINE_CAP)
    j = data.rfind(b"\n", floor, i)
    if j >= 0:
        return j + 1
    return lo if floor == lo else -1


def _keyword_lines(data: bytearray, a: int, b: int, keywords: tuple[bytes, ...], into: set[int]) -> None:
    """Add to `into` the start of every line in data[a:b] (whole lines) that holds one of `keywords` where it is
    read."""
    for kw in keywords:
        i = data.find(kw, a, b)
        while i >= 0:
            s = _line_start(data, i, a)
            if s >= 0:
                into.add(s)
            i = data.find(kw, data.find(b"\n", i, b) + 1, b)


def _full_lines(data: bytearray, a: int, b: int, fed: int, follows: bool = False) -> list[int]:
    """Before the API server is up: the starts of the lines in data[a:b] to hand the parser (and of the line before
    a, when a continues it and it was not handed over yet: fed is the end of the last one handed over). `follows`:
    the line before a continues a record, which a may too (what data does not hold cannot tell)."""
    starts: set[int] = {a} if follows and a < b else set()
    _keyword_lines(data, a, b, KEYWORDS, starts)
    before = data.rfind(b"\n", 0, a - 1) + 1 if a > 0 else 0  # the line before a (a itself when a is 0)
    for m in _CONTINUATION_RAW.finditer(data, max(before - 1, 0), b):
        c = m.start() + 1  # a line that continues the one before
        if c >= a:
            starts.add(c)
            starts.add(data.rfind(b"\n", 0, m.start()) + 1)
        starts.add(data.find(b"\n", c) + 1)  # the next may repeat the prefix of the record's first line
    pairs = _SAME_PREFIX_RAW.finditer(data, before - 1, b) if before > 0 else _pairs_at_start(data, b)
    for m in pairs:
        starts.add(m.start() + 1 if data[m.start()] == 0x0A else m.start())
        starts.add(m.end() + 1)
    return sorted(s for s in starts if a <= s < b or (before <= s < a and s >= fed))


def _pairs_at_start(data: bytearray, b: int) -> Iterator[std_re.Match[bytes]]:
    m = _SAME_PREFIX_AT.match(data, 0, b)
    if m:
        yield m
    yield from _SAME_PREFIX_RAW.finditer(data, 0, b)


def _serving_lines(data: bytearray, a: int, b: int, banners: tuple[bytes, ...]) -> list[int]:
    """Once the API server is up: the starts of the lines in data[a:b] that hold an AFTER_BOOT_KEYWORDS keyword (of
    the banner's, only `banners`: those `_boot_skip` found in data)."""
    starts: set[int] = set()
    _keyword_lines(data, a, b, banners + _SERVING_NO_BANNER, starts)
    return sorted(starts)


def _boot_skip(data: bytearray, a: int, b: int) -> tuple[int, tuple[bytes, ...]]:
    """Where to start reading data[a:b]: at its second-to-last boot banner, when it holds two or more (the parser
    replaces the boots before; the last keeps the warnings printed just before it, from the boot before), else a.
    And the banner keywords data[a:b] holds."""
    found: set[int] = set()
    held: list[bytes] = []
    for kw in _BANNER_KEYWORDS:
        end = b
        for k in range(16):
            i = data.rfind(kw, a, end)
            if i < 0:
                break
            if k == 0:
                held.append(kw)
            s = _line_start(data, i, a)
            if s < 0:
                end = i
                continue
            found.add(s)
            end = s
    banners = 0
    for s in sorted(found, reverse=True):
        e = data.find(b"\n", s, b)
        if BOOT_BANNER.search(clean(data[s : min(e, s + STREAM_LINE_CAP)].decode("utf-8", errors="replace"))):
            banners += 1
            if banners == 2:
                return s, tuple(held)
    return a, tuple(held)


def _line_end(data: bytearray, i: int, b: int) -> int:
    """The first line boundary at or after i (data[b - 1] is a newline)."""
    if i >= b:
        return b
    return data.find(b"\n", i - 1, b) + 1


def _parse_block(p: LogParser, data: bytearray, begin: int, n: int, before: tuple[bool, bool]) -> tuple[bool, bool]:
    """Hand the parser the lines of data[begin:n] that can matter. `before`, and what it returns for the next block:
    whether the last line was handed over, and whether it continues a record."""
    fed = begin if before[0] else -1  # the end of the last line handed over (-1: not the line before begin)
    pos, banners = _boot_skip(data, begin, n)
    follows = before[1] and pos == begin
    window = WINDOW
    while pos < n:
        serving = p.serving
        if serving:
            starts, nxt = _serving_lines(data, pos, n, banners), n
            window = WINDOW
        else:
            nxt = _line_end(data, min(n, pos + window), n)
            starts = _full_lines(data, pos, nxt, fed, follows)
            window = min(2 * window, WINDOW_MAX)
        follows = False
        for s in starts:
            e = data.find(b"\n", s, n)
            if s != fed:
                p._gap()
            p.feed(data[s : min(e, s + STREAM_LINE_CAP)].decode("utf-8", errors="replace"))
            fed = e + 1
            if p.serving != serving:
                nxt = fed
                break
        pos = nxt
    last = data.rfind(b"\n", 0, n - 1) + 1
    return fed == n, last > 0 and begin <= last and _CONTINUATION_RAW.match(data, last - 1, n) is not None


def _candidate_lines(fh: IO[bytes]) -> Iterator[bytes]:
    """The lines parse_stream hands a parser that is not serving yet, in file order."""
    for data, begin, n in _blocks(fh):
        for s in _full_lines(data, begin, n, begin):
            yield bytes(data[s : data.find(b"\n", s, n)])


def parse_stream(fh: IO[bytes]) -> LogFacts:
    """Parse a whole log from a binary file object, in constant memory."""
    p = LogParser()
    before = (False, False)
    for data, begin, n in _blocks(fh):
        before = _parse_block(p, data, begin, n, before)
    return p.finish()


def parse_text(text: str) -> LogFacts:
    """Parse a whole log held in memory: the same facts as parse_stream (lines end at "\n")."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return LogParser().feed_many(lines)
