"""vLLM's versions and every rule that changed between them, each once, with where vLLM does it.

A rule is on from its `since` release. `changes_in((0, 30, 0))` lists what changed in 0.30 for sizing.
Versions are (major, minor, patch); a version vlaunch has not seen is treated as the newest it models.
"""

from __future__ import annotations

import re

from launcher.errors import ConfigError
from launcher.records import dataclass

Version = tuple[int, int, int]
LATEST: Version = (0, 33, 0)


def parse_version(text: str | None) -> Version:
    """'0.19.0', 'v0.10.1.1', '0.6.4.post1', '0.11.0+582e4e37.nv25.11' -> (0, 19, 0). None -> the newest modelled."""
    if not text:
        return LATEST
    m = re.match(r"^v?(\d+)\.(\d+)(?:\.(\d+))?", str(text).strip())
    if not m:
        raise ConfigError(f"not a vLLM version: {text!r} (expected e.g. 0.19.0)", field="vllm.version")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def fmt_version(v: Version) -> str:
    return ".".join(str(x) for x in v)


@dataclass(frozen=True)
class Rule:
    """One change in how vLLM sizes memory, on from `since`."""

    name: str
    since: Version
    change: str
    source: str  # the vLLM file (or log) it comes from

    def on(self, version: Version) -> bool:
        return version >= self.since


# --- engine ------------------------------------------------------------------------------------------------------
V1_OPT_IN = Rule("v1_opt_in", (0, 7, 0), "VLLM_USE_V1=1 runs the early V1 engine", "vllm/envs.py")
V1_ENGINE = Rule("v1_engine", (0, 8, 0), "the V1 engine is the default (V0 before)", "vllm/engine/arg_utils.py")
V0_REMOVED = Rule("v0_removed", (0, 11, 0), "VLLM_USE_V1=0 no longer selects V0", "vllm/engine/arg_utils.py")
UTIL_092 = Rule("util_092", (0, 20, 0), "default gpu_memory_utilization 0.92 (0.9 before)", "vllm/config/cache.py")
CEIL_BUDGET = Rule(
    "ceil_budget", (0, 14, 0), "requested memory = ceil(total × util) (a float before)", "vllm/utils/mem_utils.py"
)
KV_FP8_FROM_CHECKPOINT = Rule(
    "kv_fp8_from_checkpoint",
    (0, 14, 0),
    "kv_cache_dtype auto takes fp8 from kv_cache_quant_algo",
    "vllm/config/cache.py",
)
TOWER_SKIP = Rule(
    "tower_skip", (0, 11, 0), "encoders whose modalities are limited to 0 are not loaded", "vllm/model_executor/models"
)

AUTO_FIT_MAX_MODEL_LEN = Rule(
    "auto_fit_max_model_len",
    (0, 14, 0),
    "--max-model-len auto (or -1): the longest length one request fits in the pool, less the null block",
    "vllm/v1/core/kv_cache_utils.py (_auto_fit_max_model_len)",
)

# --- profiling ---------------------------------------------------------------------------------------------------
NON_TORCH_025 = Rule(
    "non_torch_025", (0, 11, 0), "non-torch memory ~0.25 GiB on one GPU (~0.1 before)", "vllm/v1/worker/gpu_worker.py"
)
V1_CONTEXT_IN_BUDGET_UNTIL = Rule(
    "v1_counts_context", (0, 9, 1), "0.8.x counted the CUDA context inside the budget", "vllm/v1/worker/gpu_worker.py"
)
CUDAGRAPH_IN_BUDGET = Rule(
    "cudagraph_in_budget", (0, 20, 0), "the CUDA-graph estimate is taken out of the KV budget", "gpu_worker.py"
)

# --- the pool ----------------------------------------------------------------------------------------------------
HYBRID_MANAGER = Rule(
    "hybrid_manager", (0, 9, 1), "layers grouped by cache kind; concurrency counts blocks per request over groups",
    "vllm/v1/core/kv_cache_utils.py",
)  # fmt: skip
TOKENS_FROM_CONCURRENCY = Rule(
    "tokens_from_concurrency", (0, 21, 0), "logged tokens = int(concurrency × max_model_len)",
    "kv_cache_utils.get_kv_cache_capacity",
)  # fmt: skip
PER_GROUP_BLOCKS = Rule(
    "per_group_blocks", (0, 27, 0), "blocks per request = Σ over groups of cdiv(group bytes, page)",
    "kv_cache_utils.get_max_concurrency_for_kv_cache_config",
)  # fmt: skip
IN_FLIGHT_TOKENS = Rule(
    "in_flight_tokens", (0, 26, 0),
    "sliding and chunked layers keep max_concurrent_batches × max_num_batched_tokens in flight",
    "vllm/config/vllm.py max_in_flight_tokens (before: max_num_batched_tokens)",
)  # fmt: skip
GROUP_SIZE_125 = Rule(
    "group_size_125", (0, 12, 0), "group size = the largest kind's count when it is < 1.25 × the smallest",
    "kv_cache_utils._get_kv_cache_groups_uniform_page_size (the smallest count before)",
)  # fmt: skip
GROUP_SIZE_CLOSE = Rule(
    "group_size_close", (0, 18, 0), "group size = the largest kind's count when it is < 1.5 × the smallest",
    "kv_cache_utils._get_kv_cache_groups_uniform_page_size",
)  # fmt: skip
MAMBA_MODES = Rule(
    "mamba_modes", (0, 15, 0),
    "with prefix caching a mamba layer keeps 2 state blocks (align) or one per block of context (all, models with "
    "SupportsMambaPrefixCaching); without, 1 + one per speculative token (1 before)",
    "vllm/model_executor/models/config.py MambaModelConfig; v1/kv_cache_interface.py MambaSpec",
)  # fmt: skip
HYBRID_PREFIX_CACHING = Rule(
    "hybrid_prefix_caching", (0, 26, 0), "prefix caching on by default for hybrid models (off before)",
    "vllm/config/model.py is_prefix_caching_supported",
)  # fmt: skip
MAMBA_ALIGN_ALWAYS = Rule(
    "mamba_align_always", (0, 28, 0), "align mode for every mamba model with prefix caching (no 'all' mode)",
    "vllm/model_executor/models/config.py MambaModelConfig",
)  # fmt: skip
CHUNKED_WITH_HYBRID = Rule(
    "chunked_with_hybrid", (0, 14, 0),
    "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE defaults to 1 (0 from 0.10.1: chunked local attention "
    "turned the hybrid manager off)", "vllm/envs.py",
)  # fmt: skip
HYBRID_ALIGN_BACKEND = Rule(
    "hybrid_align_backend", (0, 20, 0),
    "the hybrid block-size multiple is max(the backend's smallest kernel block, the block size) (16 before; 64 "
    "for MLA)", "Platform._align_hybrid_block_size",
)  # fmt: skip
HYBRID_BLOCK_ALIGN = Rule(
    "hybrid_block_align", (0, 10, 2), "attention block size raised until a page holds a mamba state",
    "Platform._align_hybrid_block_size (model_executor/models/config.py up to 0.19)",
)  # fmt: skip

# --- platforms ---------------------------------------------------------------------------------------------------
CPU_BLOCK_128 = Rule(
    "cpu_block_128", (0, 11, 1), "CPU block size 128 (16 before, unless IPEX was installed)", "vllm/platforms/cpu.py"
)
CPU_MLA_BLOCK_16 = Rule("cpu_mla_block_16", (0, 28, 0), "CPU MLA backend needs block size 16", "vllm/platforms/cpu.py")
CPU_DEVICE_NAME = Rule(
    "cpu_device_name",
    (0, 30, 0),
    'the pool line says "CPU KV cache size" on CPU',
    "kv_cache_utils.update_kv_cache_capacity",
)
V08_POOL_LINE = Rule(
    "v08_pool_line",
    (0, 8, 0),
    '"GPU KV cache size: N tokens" (V0: "# GPU blocks: N")',
    "vllm/v1/core/kv_cache_utils.py",
)

GGUF_REMOVED = Rule(
    "gguf_removed",
    (0, 24, 0),
    "no GGUF loader: `gguf` left QUANTIZATION_METHODS (0.23 was the last release to load .gguf files)",
    "vllm/model_executor/layers/quantization/__init__.py, vllm/model_executor/model_loader/gguf_loader.py",
)

RULES: tuple[Rule, ...] = (
    V1_OPT_IN, V1_ENGINE, V0_REMOVED, UTIL_092, CEIL_BUDGET, KV_FP8_FROM_CHECKPOINT, TOWER_SKIP, NON_TORCH_025,
    V1_CONTEXT_IN_BUDGET_UNTIL, CUDAGRAPH_IN_BUDGET, HYBRID_MANAGER, TOKENS_FROM_CONCURRENCY, PER_GROUP_BLOCKS,
    IN_FLIGHT_TOKENS, GROUP_SIZE_125, GROUP_SIZE_CLOSE, MAMBA_MODES, HYBRID_PREFIX_CACHING, MAMBA_ALIGN_ALWAYS,
    CHUNKED_WITH_HYBRID, HYBRID_BLOCK_ALIGN, HYBRID_ALIGN_BACKEND, CPU_BLOCK_128, CPU_MLA_BLOCK_16, CPU_DEVICE_NAME,
    V08_POOL_LINE, AUTO_FIT_MAX_MODEL_LEN, GGUF_REMOVED,
)  # fmt: skip


def changes_in(version: Version) -> tuple[Rule, ...]:
    """The rules that start at this release (patch ignored: 0.30 means 0.30.x)."""
    return tuple(r for r in RULES if r.since[:2] == version[:2])
