"""vLLM's log lines as data: one `Pattern` per kind of line, and `PATTERNS`, the table of them all.

Each `Pattern` has a name, a compiled regex, a real example line (and the other wordings other versions print),
the versions that print it, the vLLM file that prints it, the boot stage it marks (if any) and the literal keywords
that the stream pre-filter looks for. The pre-filter's `KEYWORDS` and the boot stages' `STAGE_TRIGGERS` are derived
from the table. The log text is not a stable interface; tests/fixtures/logs are the spec. Patterns never anchor at
the line start: vLLM prefixes lines with process names, levels, timestamps and file:line.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from enum import Enum

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
# The periodic engine statistics (every VLLM_LOG_STATS_INTERVAL, 10 s, while requests run; at DEBUG when idle).
# Between the queue and the KV cache usage, 0.19+ may add "Preemptions: N", 0.27+ "Deferred: N reqs" (counted in
# Waiting too) and 0.32 "KV fetch: …"; V0 says "Swapped: N reqs, Pending: N reqs" and ends with the swap space's
# "CPU KV cache usage" after the device's "GPU KV cache usage". Each part is a literal with digits between: the regex
# is linear.
ENGINE_THROUGHPUT = _p(
    "engine_throughput",
    r"(?:Engine (?P<engine>\d+): |(?P<engines>\d+) Engines Aggregated: )?"
    rf"Avg prompt throughput: (?P<prompt>{_N}) tokens/s, Avg generation throughput: (?P<generation>{_N}) tokens/s, "
    r"Running: (?P<running>\d+) reqs, (?:Swapped: (?P<swapped>\d+) reqs, )?(?:Pending|Waiting): (?P<waiting>\d+) "
    r"reqs, (?:Deferred: (?P<deferred>\d+) reqs, )?"
    r"(?:KV fetch: \d+ waiting to start, \d+ in progress, \d+ completed waiting, )?"
    r"(?:Preemptions: (?P<preemptions>\d+), )?"
    rf"(?P<kv_device>[A-Z]+) KV cache usage: (?P<kv_usage>{_N})%",
    example="(APIServer pid=22780) INFO 12-03 10:18:11 [loggers.py:335] Engine 000: Avg prompt throughput: 15.4 "
    "tokens/s, Avg generation throughput: 746.6 tokens/s, Running: 3 reqs, Waiting: 0 reqs, CPU KV cache usage: "
    "58.1%, Prefix cache hit rate: 0.0%",
    versions="V0 0.4-0.10 ('Running: … Swapped: … Pending: … GPU KV cache usage: …%, CPU KV cache usage: …%.'); "
    "V1 0.7 without the 'Engine 000: ' prefix; V1 0.8-0.28 'Engine 000: …, GPU KV cache usage: …%, Prefix cache hit "
    "rate: …%' ('Preemptions' 0.19+, 'Deferred' 0.27+); 0.30+ the device's name ('CPU KV cache usage' on the CPU "
    "build); 0.32 'KV fetch', the prefix cache rate only once it has lookups; 'N Engines Aggregated: ' with data "
    "parallel 0.19+ (read in the sources of 0.4.3, 0.6.6, 0.7.3, 0.8.5, 0.10.1.1, 0.11.0, 0.19.0, 0.27.0, 0.28.0, "
    "0.30.0, 0.32.0; the variants but the 0.32 CPU example written from the format strings)",
    source="v1/metrics/loggers.py LoggingStatLogger.log: log_prefix + 'Avg prompt throughput: %.1f tokens/s, Avg "
    "generation throughput: %.1f tokens/s, Running: %d reqs, Waiting: %d reqs, … %s KV cache usage: %.1f%%, …' "
    "(V1); engine/metrics.py LoggingStatLogger.log (V0)",
    keywords=("Avg prompt throughput",),
    variants=(
        "INFO 08-12 10:04:21 metrics.py:351] Avg prompt throughput: 812.3 tokens/s, Avg generation throughput: 45.1 "
        "tokens/s, Running: 4 reqs, Swapped: 0 reqs, Pending: 2 reqs, GPU KV cache usage: 12.5%, CPU KV cache usage: "
        "0.0%.",
        "INFO 02-20 11:00:10 [loggers.py:78] Avg prompt throughput: 101.4 tokens/s, Avg generation throughput: 230.8 "
        "tokens/s, Running: 3 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.2%, Prefix cache hit rate: 0.0%",
        "(APIServer pid=1) INFO 09-10 23:50:12 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg "
        "generation throughput: 1523.7 tokens/s, Running: 32 reqs, Waiting: 5 reqs, GPU KV cache usage: 87.3%, "
        "Prefix cache hit rate: 41.0%",
        "(APIServer pid=1) INFO 04-22 00:06:10 [v1/metrics/loggers.py:259] Engine 001: Avg prompt throughput: 1640.2 "
        "tokens/s, Avg generation throughput: 812.0 tokens/s, Running: 64 reqs, Waiting: 12 reqs, Preemptions: 3, "
        "GPU KV cache usage: 99.1%, Prefix cache hit rate: 12.4%",
        "(APIServer pid=1) INFO 11-20 08:00:30 [v1/metrics/loggers.py:310] 2 Engines Aggregated: Avg prompt "
        "throughput: 220.0 tokens/s, Avg generation throughput: 3100.5 tokens/s, Running: 96 reqs, Waiting: 7 reqs, "
        "Deferred: 2 reqs, GPU KV cache usage: 45.6%, Prefix cache hit rate: 30.2%",
        "(APIServer pid=1) INFO 12-01 09:10:00 [loggers.py:335] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg "
        "generation throughput: 410.3 tokens/s, Running: 8 reqs, Waiting: 3 reqs, Deferred: 3 reqs, KV fetch: 1 "
        "waiting to start, 2 in progress, 0 completed waiting, Preemptions: 1, XPU KV cache usage: 66.6%",
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
MAMBA_BLOCKS = _p(
    "mamba_blocks",
    r"max_num_seqs \((?P<seqs>\d+)\) exceeds available Mamba cache blocks \((?P<blocks>\d+)\)",
    example="ValueError: max_num_seqs (1024) exceeds available Mamba cache blocks (939).",
    versions="0.20.0+",
    source="config/compilation.py CompilationConfig (FULL decode CUDA graphs over state layers)",
    keywords=("Mamba cache blocks",),
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
    INIT_ENGINE, API_READY, REQUEST_TRAFFIC, ENGINE_THROUGHPUT,
    GATE_GPU, GATE_CPU, KV_TOO_SMALL_V1, KV_TOO_SMALL_V0, NO_KV_MEMORY, WORKER_KILLED, CUDA_OOM, SAMPLER_OOM,
    MAMBA_BLOCKS, GRAPH_CAPTURE_FRAME,
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
