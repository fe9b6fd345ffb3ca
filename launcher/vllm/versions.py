"""vLLM's versions and every rule that changed between them, each once, with where vLLM does it.

A rule is on from its `since` release. `changes_in((0, 30, 0))` lists what changed in 0.30 for sizing.
Versions are (major, minor, patch), read with packaging.version; a version vlaunch has not seen is treated as the
newest it models.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from launcher.common.errors import ConfigError
from launcher.common.records import dataclass

if TYPE_CHECKING:
    from collections.abc import Iterable

    from packaging.version import Version as Pep440

Version = tuple[int, int, int]
LATEST: Version = (0, 33, 0)

_EXAMPLES = "expected e.g. 0.19.0, v0.11.0 or 0.6.4.post1"
# NVIDIA's container tags (25.11-py3, 25.12.post1-py3, or a bare 26.01) look like versions but are release months.
_PLAIN = re.compile(r"v?(\d{1,9})\.(\d{1,9})(?:\.(\d{1,9}))?")
_LONG_NUMBER = re.compile(r"\d{20}")
_NGC_TAG = re.compile(r"^(?:\d\d\.\d\d(?:\.post\d+)?-py3|2\d\.\d\d(?:\.post\d+)?)$")


def _padded(parts: Iterable[int]) -> Version:
    major, minor, patch = (*parts, 0, 0, 0)[:3]
    return major, minor, patch


def read_version(text: str) -> Pep440:
    """A vLLM version as packaging reads it, from a version ('v0.11.0', '0.11.0+582e4e37.nv25.11', '0.10.1.1',
    '0.6.4.post1', '0.16.0rc2', '0.11.1.dev12+g1b86bd8'), a wheel's file name
    ('vllm-0.11.0+cu130-cp38-abi3-manylinux_2_31_aarch64.whl') or an image tag the version leads
    ('v0.17.0-aarch64-cu130', '0.16.0-t4'). At least major.minor; an NGC tag is refused with the vLLM it ships."""
    from packaging.version import InvalidVersion
    from packaging.version import Version as Pep440  # imported when a version is read, not with every rule

    t = str(text).strip()
    if len(t) > 256 or _LONG_NUMBER.search(t):  # no release has such numbers; int() of 4,300 digits raises
        raise ConfigError(f"not a vLLM version: {t[:40]!r}… ({_EXAMPLES})", field="vllm.version")
    if t.endswith(".whl"):
        return _wheel_version(t)
    if _NGC_TAG.match(t):
        raise ConfigError(_ngc_tag_hint(t), field="vllm.version")
    for candidate in dict.fromkeys((t, t.split("-", 1)[0])):
        try:
            v = Pep440(candidate)
        except InvalidVersion:
            continue
        if len(v.release) >= 2:
            return v
    raise ConfigError(f"not a vLLM version: {t!r} ({_EXAMPLES})", field="vllm.version")


def _wheel_version(path: str) -> Pep440:
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename  # only for a wheel: it imports more

    name = path.rsplit("/", 1)[-1]
    try:
        dist, version, _, _ = parse_wheel_filename(name)
    except InvalidWheelFilename:
        raise ConfigError(f"not a wheel file name: {name!r}", field="vllm.version") from None
    if not dist.startswith("vllm"):
        raise ConfigError(f"{name!r} is a {dist} wheel, not vLLM's", field="vllm.version")
    return version


def _ngc_tag_hint(tag: str) -> str:
    from launcher.vllm.images import NGC_TAGS

    known = NGC_TAGS.get(tag if tag.endswith("-py3") else f"{tag}-py3")
    head = f"{tag!r} is an NVIDIA image tag, not a vLLM version"
    if known and known.vllm:
        return f"{head}: nvcr.io/nvidia/vllm:{known.tag} ships vLLM {known.vllm}"
    return f"{head} (name the image with --image / vllm.image)"


def parse_version(text: str | None) -> Version:
    """'0.19.0', 'v0.10.1.1', '0.6.4.post1', '0.11.0+582e4e37.nv25.11', '0.16.0rc2', a vLLM wheel's name -> its
    release (0, 19, 0), a pre-release or dev build as the release it leads to. None -> the newest modelled."""
    if not text:
        return LATEST
    plain = _PLAIN.fullmatch(str(text).strip())
    if plain and not _NGC_TAG.match(str(text).strip()):  # a bare release: the same with packaging, without its import
        return _padded(int(x) for x in plain.groups(default="0"))
    return _padded(read_version(text).release)


def fmt_version(v: Version) -> str:
    return ".".join(str(x) for x in v)


def newest_modelled() -> Version:
    """The newest vLLM vlaunch models: LATEST's rules, or the newest release a flag table was generated for."""
    from launcher.vllm import interface

    tables = interface.available()
    return max(LATEST, _padded(tables[-1])) if tables else LATEST


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
    "kv_fp8_from_checkpoint", (0, 14, 0),
    "--kv-cache-dtype auto becomes fp8_e4m3 for a ModelOpt checkpoint whose kv_cache_quant_algo is FP8 (or whose "
    "kv_cache_scheme is a static 8-bit float), whatever --dtype says (the model's dtype before: the scales alone "
    "were loaded)", "vllm/utils/torch_utils.py resolve_kv_cache_dtype_string (engine/arg_utils.py)",
)  # fmt: skip
KV_NVFP4_FROM_CHECKPOINT = Rule(
    "kv_nvfp4_from_checkpoint", (0, 20, 0),
    "--kv-cache-dtype auto becomes nvfp4 for a ModelOpt kv_cache_quant_algo NVFP4 (or a 4-bit float kv_cache_scheme)",
    "vllm/utils/torch_utils.py MODELOPT_TO_VLLM_KV_CACHE_DTYPE_MAP",
)  # fmt: skip
KV_SCHEME_FP8 = Rule(
    "kv_scheme_fp8", (0, 15, 0),
    "a compressed-tensors kv_cache_scheme makes every standard attention layer's KV cache fp8, over any "
    "--kv-cache-dtype (MLA layers keep theirs)",
    "vllm/attention/layer.py Attention.__init__ (model_executor/layers/attention/attention.py from 0.16)",
)  # fmt: skip
TQ_BOUNDARY_NOT_HYBRID = Rule(
    "tq_boundary_not_hybrid", (0, 21, 0),
    "TurboQuant keeps the first and last 2 layers in the model's dtype only in non-hybrid models (in all before)",
    "model_executor/layers/quantization/turboquant/config.py get_boundary_skip_layers",
)  # fmt: skip
KV_SKIP_LAYERS_ALIGN = Rule(
    "kv_skip_layers_align", (0, 25, 0),
    "layers kept out of a quantized KV cache raise the block size until the primary page, priced one byte per K "
    "and V element, covers theirs at the smallest kernel block (32 tokens for a 16-bit model)",
    "Platform._align_heterogeneous_kv_block_size",
)  # fmt: skip
KV_SCHEME_AUTO_ONLY = Rule(
    "kv_scheme_auto_only", (0, 22, 0),
    "a compressed-tensors kv_cache_scheme sets fp8 only for --kv-cache-dtype auto: an explicit choice wins",
    "model_executor/layers/attention/attention.py Attention.__init__",
)  # fmt: skip
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
MOE_WORKSPACE_KEPT = Rule(
    "moe_workspace_kept",
    (0, 13, 0),
    "fused MoE's workspace lives in the worker's WorkspaceManager: allocated by the profile's forward, kept through "
    "its sampler run",
    "vllm/v1/worker/workspace.py, vllm/model_executor/layers/fused_moe/modular_kernel.py",
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
    "tokens_from_concurrency", (0, 20, 1), "logged tokens = int(concurrency × max_model_len)",
    "kv_cache_utils.get_kv_cache_capacity (the 0.20.1 wheel's vllm/v1/core/kv_cache_utils.py: `num_tokens = "
    "int(max_concurrency * max_model_len)`; 0.20.0's logs num_blocks // groups × block_size)",
)  # fmt: skip
MAMBA_BLOCKS_FOR_FULL_GRAPHS = Rule(
    "mamba_blocks_for_full_graphs", (0, 20, 0),
    "with FULL decode CUDA graphs and state (Mamba / linear-attention) layers, max_num_seqs above the pool's blocks "
    "is refused: each decoding sequence holds one state block",
    "vllm/config/compilation.py (in the 0.20.0 wheel, not in 0.19.0's): `max_num_seqs (N) exceeds available Mamba "
    "cache blocks (M)`",
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
DSV4_CACHE = Rule(
    "dsv4_cache", (0, 32, 0),
    "DeepSeek-V4's cache as read in vLLM 0.32's source (no earlier release read): per layer a 64-token sliding-window "
    "cache, and per compressed layer a KV of one 584-byte fp8_ds_mla state per compress ratio of tokens (CSA also "
    "indexer keys) in 256-token blocks and an fp32 compressor state; pages padded to 576 bytes and packed side by "
    "side in one block (BLHNC) rather than unified",
    "vllm/models/deepseek_v4/attention.py, compressor.py, v1/attention/backends/mla/sparse_swa.py, "
    "v1/core/kv_cache_utils.py _get_packed_kv_cache_groups",
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
    V1_OPT_IN, V1_ENGINE, V0_REMOVED, UTIL_092, CEIL_BUDGET, KV_FP8_FROM_CHECKPOINT, KV_NVFP4_FROM_CHECKPOINT,
    KV_SCHEME_FP8, KV_SCHEME_AUTO_ONLY, TQ_BOUNDARY_NOT_HYBRID, KV_SKIP_LAYERS_ALIGN, TOWER_SKIP, NON_TORCH_025,
    V1_CONTEXT_IN_BUDGET_UNTIL, MOE_WORKSPACE_KEPT, CUDAGRAPH_IN_BUDGET, HYBRID_MANAGER, TOKENS_FROM_CONCURRENCY,
    PER_GROUP_BLOCKS, IN_FLIGHT_TOKENS, GROUP_SIZE_125, GROUP_SIZE_CLOSE, MAMBA_MODES, HYBRID_PREFIX_CACHING,
    MAMBA_ALIGN_ALWAYS, CHUNKED_WITH_HYBRID, HYBRID_BLOCK_ALIGN, HYBRID_ALIGN_BACKEND, CPU_BLOCK_128,
    CPU_MLA_BLOCK_16, CPU_DEVICE_NAME, V08_POOL_LINE, AUTO_FIT_MAX_MODEL_LEN, GGUF_REMOVED, DSV4_CACHE,
)  # fmt: skip


def changes_in(version: Version) -> tuple[Rule, ...]:
    """The rules that start at this release (patch ignored: 0.30 means 0.30.x)."""
    return tuple(r for r in RULES if r.since[:2] == version[:2])
