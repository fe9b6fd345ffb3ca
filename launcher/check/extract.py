"""The extractors of what a start-up states: its configuration, memory, CUDA graphs, pool, hybrid layout and
timing, and of what serving states (the engine's periodic statistics). Each takes the parser, a pattern's match and
the text it matched; `FACT_RULES` says which pattern hands its match to which, in the order the parser reads them (a
later line of the same figure wins)."""

from __future__ import annotations

import ast
import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeAlias

import regex as re

from launcher.check.facts import ThroughputSample
from launcher.check.failures import gate_failure
from launcher.vllm.logs import (
    ACTUAL_USAGE,
    ACTUAL_USAGE_027,
    API_READY,
    ATTN_BLOCK_SIZE,
    AUTO_FIT,
    AVAILABLE_KV,
    CHUNKED_PREFILL,
    CPU_AUTO_SET,
    CPU_EXPLICIT_SET,
    CUDAGRAPH_ESTIMATE,
    CUDAGRAPH_POOL,
    DESIRED_UTIL,
    ENGINE_CONFIG,
    ENGINE_THROUGHPUT,
    FREE_ON_DEVICE,
    GATE_CPU,
    GATE_GPU,
    GRAPH_CAPTURE,
    HYBRID_MANAGER_DISABLED,
    INIT_ENGINE,
    KV_BLOCK_SIZE,
    KV_BYTES_RESERVED,
    KV_CACHE_SIZE,
    KV_GROUP_SIZES,
    KV_MEMORY_SUGGESTION,
    MAMBA_CACHE_MODE,
    MAMBA_PADDING,
    MAMBA_SSM_DTYPE,
    MAX_CONCURRENCY,
    MODEL_LOADING,
    NON_DEFAULT_ARGS,
    OVERRIDE_BLOCKS,
    PADDING_LAYERS,
    PAGE_SIZES_NOT_UNIFIED,
    REQUEST_TRAFFIC,
    SSM_DTYPE_RESET,
    V0_BLOCKS,
    V0_BREAKDOWN,
    V0_BUDGET,
    V0_PROFILE_064,
    Pattern,
    number,
)

if TYPE_CHECKING:
    from launcher.check.parser import LogParser

Match: TypeAlias = "re.Match[str]"
Extractor: TypeAlias = Callable[["LogParser", Match, str], None]
# Patterns tried in turn on a text: the first that matches hands its match to its extractor.
Rule: TypeAlias = tuple[tuple[Pattern, Extractor], ...]


# --- version and configuration ---------------------------------------------------------------------------------

_CONFIG_KEYS = (
    ("model", "model", str),
    ("max_seq_len", "max_model_len", int),
    ("tensor_parallel_size", "tensor_parallel_size", int),
    ("pipeline_parallel_size", "pipeline_parallel_size", int),
    ("dtype", "dtype", str),
    ("kv_cache_dtype", "kv_cache_dtype", str),
    ("quantization", "quantization", str),
    ("enforce_eager", "enforce_eager", str),
    ("device_config", "device", str),
)


def engine_config(p: LogParser, m: Match, text: str) -> None:
    if m["engine"]:
        p.facts.engine = m["engine"].lower()
    _engine_config(p, m["config"], p.continued)


def _engine_config(p: LogParser, cfg: str, continued: bool = False) -> None:
    """`continued`: the record a wrapped line continues: it may complete the values its lines set cut."""
    f = p.facts
    if not continued:
        p.config_set = set()
    for key, attr, conv in _CONFIG_KEYS:
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
        if getattr(f, attr) is None or (continued and attr in p.config_set):
            with contextlib.suppress(ValueError):
                setattr(f, attr, conv(v))
                p.config_set.add(attr)


_SIMPLE_ARGS = (
    "model", "max_model_len", "tensor_parallel_size", "pipeline_parallel_size", "gpu_memory_utilization", "dtype",
    "kv_cache_dtype", "quantization", "enforce_eager", "max_num_batched_tokens", "max_num_seqs", "block_size",
    "kv_cache_memory_bytes",
)  # fmt: skip


def non_default_args(p: LogParser, m: Match, text: str) -> None:
    """A dict cut by a wrap does not parse: only a whole one counts."""
    f = p.facts
    try:
        args = ast.literal_eval(m["args"][: m["args"].rfind("}") + 1])
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return
    if not isinstance(args, dict):
        return
    f.non_default_args = {k: v for k, v in args.items() if isinstance(k, str)}
    for k in _SIMPLE_ARGS:
        if k in args and args[k] is not None:
            setattr(f, k, args[k])
    if f.model is None and isinstance(args.get("model_tag"), str):
        f.model = args["model_tag"]


def chunked_prefill(p: LogParser, m: Match, text: str) -> None:
    p.facts.max_num_batched_tokens = int(m["mnbt"])


# --- memory ----------------------------------------------------------------------------------------------------


def model_loading(p: LogParser, m: Match, text: str) -> None:
    f = p.facts
    v = number(m["gib"])
    if not p.continued or p.new_in_join(MODEL_LOADING):
        f.per_worker_loading_gib.append(v)
        f.model_loading_gib = max(f.per_worker_loading_gib)


def available_kv(p: LogParser, m: Match, text: str) -> None:
    f = p.facts
    if not p.continued or p.new_in_join(AVAILABLE_KV):
        f.per_worker_available_kv_gib.append(number(m["gib"]))
        f.available_kv_gib = min(f.per_worker_available_kv_gib)
    f.engine = f.engine or "v1"


def kv_bytes_reserved(p: LogParser, m: Match, text: str) -> None:
    p.facts.available_kv_gib = number(m["gib"])


def v0_budget(p: LogParser, m: Match, text: str) -> None:
    f = p.facts
    f.total_memory_gib = number(m["total"])
    f.gpu_memory_utilization = f.gpu_memory_utilization or number(m["util"])
    f.requested_memory_gib = number(m["budget"])
    f.engine = f.engine or "v0"


def v0_breakdown(p: LogParser, m: Match, text: str) -> None:
    f = p.facts
    f.weights_gib = number(m["weights"])
    f.non_torch_gib = number(m["non_torch"])
    f.activation_gib = number(m["activation"])
    f.available_kv_gib = number(m["kv"])
    f.engine = f.engine or "v0"


def v0_profile_064(p: LogParser, m: Match, text: str) -> None:
    f = p.facts
    f.total_memory_gib = number(m["total"])
    f.non_torch_gib = number(m["non_torch"])
    f.available_kv_gib = number(m["kv"])
    f.gpu_memory_utilization = f.gpu_memory_utilization or number(m["util"])
    if f.model_loading_gib is not None:
        f.activation_gib = round(number(m["peak_torch"]) - f.model_loading_gib, 2)
    f.engine = f.engine or "v0"


def free_on_device(p: LogParser, m: Match, text: str) -> None:
    f = p.facts
    f.total_memory_gib = number(m["total"])
    f.free_memory_gib = number(m["free"])


def desired_util(p: LogParser, m: Match, text: str) -> None:
    f = p.facts
    f.gpu_memory_utilization = f.gpu_memory_utilization or number(m["util"])
    f.requested_memory_gib = number(m["req"])


def actual_usage(p: LogParser, m: Match, text: str) -> None:
    f = p.facts
    f.weights_gib = number(m["weights"])
    f.activation_gib = number(m["activation"])
    f.non_torch_gib = number(m["non_torch"])
    f.cudagraph_gib = number(m["cudagraph"])


def actual_usage_027(p: LogParser, m: Match, text: str) -> None:
    f = p.facts
    f.consumed_gib = number(m["consumed"])
    f.activation_gib = number(m["activation"])
    f.cudagraph_gib = number(m["cudagraph"])


def kv_memory_suggestion(p: LogParser, m: Match, text: str) -> None:
    p.facts.kv_memory_suggestion_bytes = int(m["fit"])
    p.facts.kv_memory_full_bytes = int(m["full"])


# --- CUDA graphs -----------------------------------------------------------------------------------------------


def graph_capture(p: LogParser, m: Match, text: str) -> None:
    if m["gib"]:
        p.facts.cudagraph_gib = number(m["gib"])


def cudagraph_estimate(p: LogParser, m: Match, text: str) -> None:
    p.facts.cudagraph_estimate_gib = number(m["gib"])


def cudagraph_pool(p: LogParser, m: Match, text: str) -> None:
    p.facts.cudagraph_gib = number(m["actual"])


# --- the pool --------------------------------------------------------------------------------------------------


def kv_cache_size(p: LogParser, m: Match, text: str) -> None:
    f = p.facts
    f.kv_pool_tokens = int(number(m["tokens"]))
    dev = m["device"].lower()
    f.device = f.device or ("cuda" if dev == "gpu" else dev)
    f.engine = f.engine or "v1"


def max_concurrency(p: LogParser, m: Match, text: str) -> None:
    f = p.facts
    f.max_concurrency = number(m["x"])
    f.concurrency_max_model_len = int(number(m["max_model_len"]))
    f.max_model_len = f.max_model_len or f.concurrency_max_model_len


def v0_blocks(p: LogParser, m: Match, text: str) -> None:
    f = p.facts
    if "KV cache" not in text and f.num_blocks is None:
        # "# cuda blocks: 5519, # CPU blocks: 9362": the first count is the device's; the second is swap space.
        dev = m["device"].lower()
        f.num_blocks = int(number(m["blocks"]))
        f.device = f.device or ("cuda" if dev == "gpu" else dev)


def override_blocks(p: LogParser, m: Match, text: str) -> None:
    p.facts.num_blocks = int(m["new"])


def cpu_auto_set(p: LogParser, m: Match, text: str) -> None:
    f = p.facts
    f.available_kv_gib = number(m["kv"])
    f.total_memory_gib = number(m["total"])
    f.requested_memory_gib = number(m["requested"])
    f.cpu_non_kv_gib = number(m["non_kv"])
    f.device = "cpu"


def cpu_explicit_set(p: LogParser, m: Match, text: str) -> None:
    f = p.facts
    f.available_kv_gib = number(m["kv"])
    f.total_memory_gib = number(m["total"])
    f.device = "cpu"


def auto_fit(p: LogParser, m: Match, text: str) -> None:
    f = p.facts
    f.auto_fit_max_model_len = int(m["new"] or m["full"])
    f.max_model_len = f.auto_fit_max_model_len


# --- hybrid models: block sizes, padding, mamba state ----------------------------------------------------------


def block_size(p: LogParser, m: Match, text: str) -> None:
    p.facts.block_size = int(m["n"])  # the later line is the final size: backend choice first, hybrid alignment after


def mamba_padding(p: LogParser, m: Match, text: str) -> None:
    p.facts.mamba_page_padding_pct = number(m["pct"])


def padding_layers(p: LogParser, m: Match, text: str) -> None:
    if not p.continued or p.new_in_join(PADDING_LAYERS):
        # One line per attention kind that needs padding; the engine core and every worker (CUDA graph
        # profiling) group the layers, so each line repeats: distinct lines are the model's.
        pad = (int(m["n"]), number(m["pct"]))
        if pad not in p.facts.padding:
            p.facts.padding.append(pad)


def mamba_cache_mode(p: LogParser, m: Match, text: str) -> None:
    p.facts.mamba_cache_mode = m["mode"]


def ssm_dtype_reset(p: LogParser, m: Match, text: str) -> None:
    p.facts.ssm_cache_dtype_reset = p.facts.mamba_ssm_cache_dtype = m["dtype"]


def mamba_ssm_dtype(p: LogParser, m: Match, text: str) -> None:
    p.facts.mamba_ssm_cache_dtype = m["dtype"]


def kv_group_sizes(p: LogParser, m: Match, text: str) -> None:
    f = p.facts
    if sizes := [int(x) for x in re.findall(r"\d+", m["sizes"])]:
        f.kv_cache_group_block_sizes = sizes
        dcp = f.non_default_args.get("decode_context_parallel_size")
        if f.block_size is None and dcp in (None, 1):
            # Attention groups hold block_size tokens (× DCP); mamba groups block_size ('align') or max_model_len.
            f.block_size = min(sizes)


def page_sizes_not_unified(p: LogParser, m: Match, text: str) -> None:
    p.facts.hybrid_fallback = "page_sizes_not_unified"


def hybrid_manager_disabled(p: LogParser, m: Match, text: str) -> None:
    p.facts.hybrid_fallback = p.facts.hybrid_fallback or "hybrid_kv_cache_manager_disabled"


# --- timing and readiness --------------------------------------------------------------------------------------


def init_engine(p: LogParser, m: Match, text: str) -> None:
    p.facts.init_engine_seconds = number(m["secs"])


def api_ready(p: LogParser, m: Match, text: str) -> None:
    p.facts.api_ready = True


def request_traffic(p: LogParser, m: Match, text: str) -> None:
    p.traffic = True


# --- serving ---------------------------------------------------------------------------------------------------


def engine_throughput(p: LogParser, m: Match, text: str) -> None:
    """A statistics line: a sample (a wrapped one once, from the line its record starts on). vLLM prints it only
    while it serves."""
    if p.continued and not p.new_in_join(ENGINE_THROUGHPUT):
        return
    sample = ThroughputSample(
        prompt_tokens_per_s=number(m["prompt"]),
        generation_tokens_per_s=number(m["generation"]),
        running=int(m["running"]),
        waiting=int(m["waiting"]),
        kv_cache_usage=round(number(m["kv_usage"]) / 100, 6),
        line=p.record_line,
    )
    p.facts.throughput.append(sample)
    p.traffic = True


FACT_RULES: tuple[Rule, ...] = (
    ((ENGINE_CONFIG, engine_config),),
    ((NON_DEFAULT_ARGS, non_default_args),),
    ((CHUNKED_PREFILL, chunked_prefill),),
    ((MODEL_LOADING, model_loading),),
    ((AVAILABLE_KV, available_kv),),
    ((KV_BYTES_RESERVED, kv_bytes_reserved),),
    ((V0_BUDGET, v0_budget),),
    ((V0_BREAKDOWN, v0_breakdown),),
    ((V0_PROFILE_064, v0_profile_064),),
    ((GATE_GPU, gate_failure), (GATE_CPU, gate_failure), (FREE_ON_DEVICE, free_on_device)),
    ((DESIRED_UTIL, desired_util),),
    ((ACTUAL_USAGE, actual_usage),),
    ((ACTUAL_USAGE_027, actual_usage_027),),
    ((KV_MEMORY_SUGGESTION, kv_memory_suggestion),),
    ((GRAPH_CAPTURE, graph_capture),),
    ((CUDAGRAPH_ESTIMATE, cudagraph_estimate),),
    ((CUDAGRAPH_POOL, cudagraph_pool),),
    ((KV_CACHE_SIZE, kv_cache_size),),
    ((MAX_CONCURRENCY, max_concurrency),),
    ((V0_BLOCKS, v0_blocks),),
    ((OVERRIDE_BLOCKS, override_blocks),),
    ((CPU_AUTO_SET, cpu_auto_set),),
    ((CPU_EXPLICIT_SET, cpu_explicit_set),),
    ((AUTO_FIT, auto_fit),),
    ((ATTN_BLOCK_SIZE, block_size), (KV_BLOCK_SIZE, block_size)),
    ((MAMBA_PADDING, mamba_padding),),
    ((PADDING_LAYERS, padding_layers),),
    ((MAMBA_CACHE_MODE, mamba_cache_mode),),
    ((SSM_DTYPE_RESET, ssm_dtype_reset), (MAMBA_SSM_DTYPE, mamba_ssm_dtype)),
    ((KV_GROUP_SIZES, kv_group_sizes),),
    ((PAGE_SIZES_NOT_UNIFIED, page_sizes_not_unified), (HYBRID_MANAGER_DISABLED, hybrid_manager_disabled)),
    ((INIT_ENGINE, init_engine),),
    ((API_READY, api_ready),),
    ((REQUEST_TRAFFIC, request_traffic),),
    ((ENGINE_THROUGHPUT, engine_throughput),),
)
