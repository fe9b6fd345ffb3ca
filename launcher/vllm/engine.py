"""vLLM's engine defaults that decide the pool: block size, utilization, scheduling, state dtypes and the mamba
cache mode, per version and platform; and the cache specs of one rank's layers under those settings.
"""

from __future__ import annotations

from typing import Literal

from launcher.model.arch.model import Model
from launcher.vllm import versions as V
from launcher.vllm.specs import MambaMode

Platform = Literal["cuda", "cpu"]

# Smallest kernel block every backend takes (get_supported_kernel_block_sizes): FlashAttention / FlashInfer /
# Triton MultipleOf(16) on CUDA, the CPU attention backend MultipleOf(32).
KERNEL_BLOCK = {"cuda": 16, "cpu": 32}


def default_block_size(model: Model, platform: Platform, version: V.Version) -> int:
    """CacheConfig.block_size after the platform's and backend's preferences."""
    if platform == "cpu":
        if model.mla is not None and V.CPU_MLA_BLOCK_16.on(version):
            return 16
        return 128 if V.CPU_BLOCK_128.on(version) else 16
    if "compressed_attention" in model.mixer_kinds:
        # DeepSeek-V4: its sparse-MLA and indexer backends take kernel blocks of 256 tokens only, the smallest size
        # every backend of the model takes (Platform._preferred_block_size_for_backends; versions.DSV4_CACHE)
        return 256
    if model.mla is not None:
        return 64  # FlashMLA, the default MLA backend on Hopper
    return 16


def default_utilization(version: V.Version) -> float:
    return 0.92 if V.UTIL_092.on(version) else 0.9


def max_concurrent_batches(platform: Platform, version: V.Version, pp: int, spec_method: str | None) -> int:
    """Batches in flight at once (VllmConfig.max_concurrent_batches): PP stages; 2 with async scheduling, which
    CUDA turns on by default and the CPU platform turns off."""
    if platform == "cpu" or not V.IN_FLIGHT_TOKENS.on(version):
        return pp
    if spec_method is not None and spec_method not in ASYNC_SPEC_METHODS:
        return pp  # "Async scheduling not supported with …-based speculative decoding"
    return 2 if pp <= 1 else pp  # the V1 model runner: no async scheduling with PP


# Speculative methods that keep async scheduling (EagleModelTypes, ngram_gpu, draft_model).
ASYNC_SPEC_METHODS = frozenset({"eagle", "eagle3", "mtp", "draft_model", "ngram_gpu"})


def mamba_mode(requested: str, prefix_caching: bool, version: V.Version, supports_all: bool) -> MambaMode:
    """MambaModelConfig: with prefix caching on, 'none' becomes 'align' ('all' for models with
    SupportsMambaPrefixCaching, 0.15-0.27); without prefix caching, 'none'."""
    if requested in ("none", "align", "all"):
        return requested  # type: ignore[return-value]
    if not prefix_caching or not V.MAMBA_MODES.on(version):
        return "none"
    if supports_all and not V.MAMBA_ALIGN_ALWAYS.on(version):
        return "all"
    return "align"


# vLLM model classes with SupportsMambaPrefixCaching (0.15-0.27: 'all' mode), by model_type.
MAMBA_PREFIX_CACHING = frozenset(
    {"bamba", "falcon_h1", "granitemoehybrid", "jamba", "mamba", "mamba2", "nemotron_h", "zamba2"}
)


# SSM / recurrent state dtype defaults by vLLM architecture when --mamba-ssm-cache-dtype is auto
# (NemotronHForCausalLMConfig.DEFAULT_MAMBA_SSM_CACHE_DTYPE, unless the config names one).
SSM_FP32_ARCHITECTURES = frozenset({"NemotronHForCausalLM", "NemotronH_Nano_VL_V2", "NemotronHPuzzleForCausalLM"})


def ssm_dtype(model: Model, requested: str, platform: Platform, cpu_bf16: bool, has_gdn: bool) -> str:
    """The SSM / recurrent state dtype vLLM ends with."""
    d = requested
    if d == "auto" and model.ssm_state_dtype:
        d = model.ssm_state_dtype  # the config's mamba_ssm_dtype (Qwen3.5) / mamba_ssm_cache_dtype (Nemotron-H)
    elif d == "auto" and model.architecture in SSM_FP32_ARCHITECTURES:
        d = "float32"
    # CpuPlatform: "Reset SSM cache type to float32 for accelerated GDN mamba backend" unless a 16-bit dtype was
    # asked for a GDN model.
    if platform == "cpu" and cpu_bf16 and d != "float32" and not (d in ("float16", "bfloat16") and has_gdn):
        d = "float32"
    return d
