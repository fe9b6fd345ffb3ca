"""Plan step 1, the request: a profile read against its model's files, the vLLM version that runs it and the
machine, into vLLM's engine arguments as that version sets them.

This step does the plan's I/O (config, checkpoint headers, version detection, /proc readings), through the cache.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from launcher.common.errors import ConfigError, ProfileError
from launcher.common.files import expand_user
from launcher.common.records import dataclass
from launcher.model import formats
from launcher.model.arch.model import Model
from launcher.model.modelsource import ModelSource, read_model
from launcher.model.modelsource import load as _load_source
from launcher.plan import budget
from launcher.plan.cache import PlanCache
from launcher.plan.machines import Machine, MemoryReading, machine_for_plan
from launcher.plan.profiles import Profile
from launcher.vllm import pool as vp
from launcher.vllm import quant, specs
from launcher.vllm import versions as V
from launcher.vllm.detect import Detected, detect_version


@dataclass(frozen=True)
class PlanOptions:
    """How a plan is made, beside the profile."""

    live: bool = True  # read this machine (nvidia-smi, /proc) where the profile asks for it
    free_bytes: int | None = None  # free (discrete) or available (unified) memory at launch, when measured
    cpu_rss_bytes: int | None = None  # CPU backend: the worker's resident memory at KV time, when measured
    use_calibration: bool = True  # take terms calibrated from earlier runs
    max_model_len: int | None = None  # planned in place of the profile's (max_model_len auto's second pass)
    detect: bool = False  # the launch's python may be run to read its vLLM version


@dataclass(frozen=True)
class Request:
    """Step 1: what the profile asks, resolved: the model as vLLM loads it, the version, the weights' format, the
    machine, and vLLM's engine arguments."""

    profile: Profile
    options: PlanOptions
    source: ModelSource
    checkpoint: Any  # the checkpoint's tensor headers as read_model found them, or None
    shape: Model  # as vLLM loads it: the encoders the modality limits switch off left out
    detected: Detected  # the vLLM version and how it was found
    stored: formats.FormatSpec  # the format the checkpoint holds
    quant: quant.Resolved  # the format the weights are priced in, the --quantization flag, vLLM's refusal
    machine: Machine
    reading: MemoryReading | None
    speculative_method: str | None  # as the profile names it ("draft_model" for a drafter model alone)
    args: budget.EngineArgs

    @property
    def version(self) -> V.Version:
        return self.detected.version

    @property
    def spec(self) -> formats.FormatSpec:
        return self.quant.spec

    @property
    def platform(self) -> vp.Platform:
        return "cpu" if self.machine.backend == "cpu" else "cuda"


def resolve_request(profile: Profile, options: PlanOptions, cache: PlanCache) -> Request:
    """Step 1: read the model, find the vLLM version and the machine, apply vLLM's defaults."""
    src, whole, found = cache.get(("model", profile.model, profile.config), lambda: _read(profile))
    check_parallel_sizes(whole, profile)
    detected = cache.get(
        ("version", profile.vllm, options.detect), lambda: detect_version(profile.vllm, ask=options.detect)
    )
    version = detected.version
    towers_key = ("towers", id(whole), profile.language_model_only, profile.limit_mm_per_prompt, version)
    shape = cache.get(towers_key, lambda: loaded_towers(whole, profile, version), whole)
    stored = stored_format(shape, src, cache)
    # the weights as the plan prices them, the --quantization the command carries, and vLLM's reason not to
    # start that way (a format the checkpoint does not hold and vLLM does not make while loading it)
    resolved = quant.resolve(profile.quantization, stored, shape, version, dtype=profile.dtype)
    method = speculative_method(profile)
    machine, reading = cache.get(
        ("machine", profile.machine, profile.gpu_memory_gib, options.live),
        lambda: machine_for_plan(profile.machine, gpu_memory_gib=profile.gpu_memory_gib, live=options.live),
    )
    ask = engine_ask(profile, options, shape, machine, version, src, method, cache)
    args = budget.engine_args(shape, ask)
    _pool_modelled(shape, src.config_path, args)
    if args.speculative_method == "mtp" and not shape.mtp_layers and not profile.speculative.get("model"):
        raise ConfigError(
            f"speculative method {method!r} needs MTP layers, and this model's config declares none "
            "(num_nextn_predict_layers / mtp_num_hidden_layers)",
            source=src.config_path,
            field="speculative_config.method",
        )
    return Request(profile, options, src, found, shape, detected, stored, resolved, machine, reading, method, args)


def engine_ask(
    profile: Profile,
    options: PlanOptions,
    shape: Model,
    machine: Machine,
    version: V.Version,
    src: ModelSource,
    method: str | None,
    cache: PlanCache,
) -> budget.EngineAsk:
    """What the profile asks of vLLM's engine on this machine (vLLM's names)."""
    platform: vp.Platform = "cpu" if machine.backend == "cpu" else "cuda"
    env = dict(profile.vllm.env)
    chunked_default = "1" if V.CHUNKED_WITH_HYBRID.on(version) else "0"
    return budget.EngineAsk(
        version=version,
        platform=platform,
        unified=machine.unified,
        total_bytes=machine.total_bytes,
        gpu_name=machine.name,
        max_model_len=options.max_model_len or (None if profile.max_model_len == "auto" else profile.max_model_len),
        dtype=profile.dtype,
        kv_cache_dtype=profile.kv_cache_dtype,
        tensor_parallel_size=profile.tensor_parallel_size,
        pipeline_parallel_size=profile.pipeline_parallel_size,
        max_num_batched_tokens=profile.max_num_batched_tokens,
        max_num_seqs=profile.max_num_seqs,
        enforce_eager=profile.enforce_eager,
        block_size=profile.block_size,
        kv_cache_memory_bytes=profile.kv_cache_memory_bytes,
        force_v0=env.get("VLLM_USE_V1") == "0",
        force_v1=env.get("VLLM_USE_V1") == "1",
        prefix_caching=profile.enable_prefix_caching,
        mamba_cache_mode=profile.mamba_cache_mode,
        mamba_cache_dtype=profile.mamba_cache_dtype,
        mamba_ssm_cache_dtype=profile.mamba_ssm_cache_dtype,
        num_speculative_tokens=int(profile.speculative.get("num_speculative_tokens") or 0),
        speculative_method="mtp" if is_mtp(method) else method,
        pooling=profile.runner == "pooling",
        decode_context_parallel_size=profile.decode_context_parallel_size,
        cpu_bf16=platform == "cpu"
        and (profile.cpu_bf16 if profile.cpu_bf16 is not None else cache.get("avx512_bf16", cpu_has_avx512_bf16)),
        disable_hybrid_manager=profile.disable_hybrid_kv_cache_manager,
        chunked_with_hybrid=env.get("VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE", chunked_default) != "0",
        hf_quant_config=src.hf_quant_config,
    )


def speculative_method(profile: Profile) -> str | None:
    """The speculative method the profile names; "draft_model" when it names only a drafter model."""
    method = profile.speculative.get("method")
    if method is None and profile.speculative.get("model"):
        method = "draft_model"
    return method


def is_mtp(method: str | None) -> bool:
    """vLLM's MTP methods: "mtp" and the per-family "<family>_mtp" names."""
    return method is not None and (method == "mtp" or method.endswith("_mtp"))


def cpu_has_avx512_bf16() -> bool:
    """vLLM's CPU build keeps SSM state in fp32 on CPUs with AVX512-BF16 (torch.cpu._is_avx512_bf16_supported)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return "avx512_bf16" in line.split()
    except OSError:
        pass
    return False


def load(spec: str) -> ModelSource:
    """modelsource.load, with a `~user/…` naming no user refused as a bad path."""
    expand_user(spec, ConfigError)
    return _load_source(spec)


def _read(profile: Profile) -> tuple[ModelSource, Model, Any]:
    src = _config_source(profile)
    shape, found = read_model(src)
    return src, shape, found


def _config_source(profile: Profile) -> ModelSource:
    if profile.config:
        path = Path(profile.config)
        src = load(str(path))
        return ModelSource(profile.model, src.config, src.config_path, src.model_dir, src.hf_quant_config, "file")
    v = profile.vllm
    if v.launch == "container" and profile.model.startswith("/") and not Path(profile.model).exists():
        from launcher.plan.argv import host_path

        mounted = host_path(profile.model, v.container_args)  # a path inside the container: count it on the host
        if mounted and Path(mounted).exists():
            src = load(mounted)
            return ModelSource(profile.model, src.config, src.config_path, src.model_dir, src.hf_quant_config, "file")
    return load(profile.model)


def stored_format(shape: Model, src: ModelSource, cache: PlanCache | None = None) -> formats.FormatSpec:
    """formats.detect, once per model in a cache (a mixed-precision map lists every layer's experts)."""
    hfq = src.hf_quant_config
    if cache is None:
        return formats.detect(shape, hfq)
    return cache.get(("stored", id(shape), id(hfq)), lambda: formats.detect(shape, hfq), shape, hfq)


# vLLM leaves out an encoder whose modalities are all limited to 0 (--language-model-only, or
# --limit-mm-per-prompt '{"image": 0}'): SupportsMultiModal._mark_tower_model builds it as a StageMissingLayer.
# (versions.TOWER_SKIP)
def loaded_towers(shape: Model, profile: Profile, version: V.Version) -> Model:
    """The model as vLLM loads it: without the encoders the profile's modality limits switch off."""
    if not shape.towers or not V.TOWER_SKIP.on(version):
        return shape
    kept = tuple(t for t in shape.towers if not all(profile.modality_limit(m) == 0 for m in t.modalities))
    return shape if kept == shape.towers else dataclasses.replace(shape, towers=kept)


def _pool_modelled(shape: Model, source: str, args: budget.EngineArgs) -> None:
    """vLLM's pool is predicted for every cache kind its specs know; say so rather than guess for the rest.
    DeepSeek-V4's is vLLM 0.32's on CUDA (versions.DSV4_CACHE): not an earlier release's, nor the CPU backend's
    (its own DeepSeek-V4 model, x86 AMX only)."""
    other = sorted({m.kind for layer in shape.layers for m in layer.mixers if specs.has_unmodelled(m)})
    where = ""
    if "compressed_attention" in shape.mixer_kinds and args.platform == "cpu":
        other, where = ["compressed_attention"], " on vLLM's CPU backend"
    elif "compressed_attention" in shape.mixer_kinds and not V.DSV4_CACHE.on(args.version):
        other, where = ["compressed_attention"], f" for vLLM {V.fmt_version(args.version)} (it is vLLM 0.32's)"
    if other:
        raise ConfigError(
            f"vLLM's KV/state pool for {', '.join(other)} layers is not predicted{where or ' yet'}; `vlaunch count` "
            "gives this model's weights and cache geometry",
            source=source,
            field="layers",
        )


def check_parallel_sizes(shape: Model, profile: Profile) -> None:
    """Refuse (one line, before any planning) a parallel size past what the model can be split into: more pipeline
    stages than layers (a stage holds at least one), more tensor-parallel ranks than attention heads (each rank
    holds at least one), more expert-parallel ranks (tensor × data parallel with expert parallel on) than experts.
    Work per rank is then bounded by the model, not by the number given."""
    tp, pp, dp = profile.tensor_parallel_size, profile.pipeline_parallel_size, profile.data_parallel_size
    layers, heads = shape.num_layers, shape.num_heads
    if layers and pp > layers:
        raise ProfileError(
            f"{pp} pipeline stages for the model's {layers} layers: each stage holds at least one layer "
            f"(at most {layers})",
            field="pipeline_parallel_size",
        )
    if heads and tp > heads:
        raise ProfileError(
            f"{tp} tensor-parallel ranks for the model's {heads} attention heads: each rank holds at least one "
            f"(at most {heads}, and a divisor of it)",
            field="tensor_parallel_size",
        )
    experts = shape.moe.num_experts if shape.moe is not None else 0
    if profile.enable_expert_parallel and experts and tp * dp > experts:
        raise ProfileError(
            f"expert parallel over {tp * dp} ranks (tensor × data parallel) for the model's {experts} experts: "
            f"each rank holds at least one (at most {experts})",
            field="enable_expert_parallel",
        )
