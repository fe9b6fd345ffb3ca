"""`vlaunch plan`: profile + flags + machine -> resolved request -> budget.predict -> a Plan to print or launch.

This module does the I/O (config, checkpoint headers, /proc readings); the arithmetic lives in budget and
vllm_pool.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Callable, Hashable, Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Any, TypeVar

from launcher.common.errors import ConfigError, ProfileError
from launcher.common.files import expand_user
from launcher.common.records import dataclass
from launcher.common.redact import Masker
from launcher.common.units import GiB, gib_to_bytes
from launcher.model import formats
from launcher.model.arch.model import Model
from launcher.model.kv import KVPerToken, kv_dtype_notes, kv_per_token, kv_refusal
from launcher.model.modelsource import ModelSource, read_model
from launcher.model.modelsource import load as _load_source
from launcher.plan import budget
from launcher.plan.argv import vllm_argv
from launcher.plan.calibration import lookup_cpu_worker, lookup_terms, machine_key
from launcher.plan.machines import Machine, MemoryReading, machine_for_plan
from launcher.plan.profiles import Profile
from launcher.vllm import pool as vp
from launcher.vllm import quant, specs
from launcher.vllm import versions as V
from launcher.vllm.detect import Detected, detect_version

OS_RESERVE_FLOOR = 6 * GiB  # never plan a unified machine with less left to the OS and page cache
OS_RESERVE_DEFAULT = 10 * GiB  # the lesson's assumption for a Spark planned from the catalog
OS_RESERVE_HEADROOM = 2 * GiB  # on top of what the OS uses now, for page cache and a browser

# A search (`vlaunch fit`) plans one model hundreds of times with a few flags changed. Inside `reusing()` what
# does not change between those plans is worked out once: the model read from its files, the vLLM version, the
# machine's reading, the tensors and their bytes per format, each rank's weights and cache layout, the
# calibration store. Each entry is keyed by every input of what it caches, so a plan made inside is the plan
# made outside. Outside `reusing()` nothing is kept.
_REUSE: ContextVar[dict[Hashable, tuple[tuple[object, ...], Any]] | None] = ContextVar("vlaunch_reuse", default=None)
_T = TypeVar("_T")


@contextlib.contextmanager
def reusing() -> Iterator[None]:
    """Plans made inside share the work their inputs have in common (see _REUSE)."""
    token = _REUSE.set({})
    try:
        yield
    finally:
        _REUSE.reset(token)


def _memo(key: Hashable, compute: Callable[[], _T], *objects: object) -> _T:
    """compute(), kept under `key` inside `reusing()`. `objects` are inputs the key names by id(): the entry holds
    them, so no other object can take their id while it lives, and a hit requires the very same objects."""
    cache = _REUSE.get()
    if cache is None:
        return compute()
    hit = cache.get(key)
    if hit is not None and len(hit[0]) == len(objects) and all(a is b for a, b in zip(hit[0], objects, strict=True)):
        return hit[1]  # type: ignore[no-any-return]
    value = compute()
    cache[key] = (objects, value)
    return value


@dataclass(frozen=True)
class Plan:
    profile: Profile
    source: ModelSource
    shape: Model
    spec: formats.FormatSpec
    machine: Machine
    reading: MemoryReading | None
    prediction: budget.Prediction
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    invalid: str | None = None  # vLLM's own refusal text for impossible settings
    ranks: tuple[dict[str, Any], ...] = ()  # every rank: its stage, node, buckets and blocks
    version_found: Detected | None = None  # how the vLLM version was found (stated, python, image, assumed)
    use_calibration: bool = True  # False: planned without terms calibrated from earlier runs (--no-calibration)
    served_model: str = ""  # what vLLM is told to serve (the profile's model, unless that is a config.json)
    detect: bool = False  # True: the launch's python could be run to read its vLLM version (serve, --detect-version)

    @property
    def fits(self) -> bool:
        return self.invalid is None and self.prediction.fits

    @property
    def request(self) -> dict[str, Any]:
        """What the launch asks of vLLM: every vLLM field the plan sets (vLLM's names) and its value; any other
        field is left to vLLM's default."""
        from launcher.plan.argv import engine_values

        v = self.profile.vllm
        out: dict[str, Any] = {"model": self.served_model or self.profile.model, "host": v.host, "port": v.port}
        out.update(engine_values(self.profile, self.prediction, self.spec, self.stored))
        return out

    @property
    def shown_argv(self) -> list[str]:
        """The launch command as vlaunch prints and records it: secret values (`--api-key`, `-e HF_TOKEN=…`)
        masked. `argv` is what runs."""
        return Masker.of(self.argv, self.env).argv(self.argv)

    @property
    def shown_env(self) -> dict[str, str]:
        """The profile's environment for vLLM as printed and recorded: secret-named variables masked."""
        return Masker.of(self.argv, self.env).env(self.env)

    @property
    def stored(self) -> formats.FormatSpec:
        """The format the checkpoint's weights are stored in (what its quantization_config says)."""
        return stored_format(self.shape, self.source)

    def to_json(self) -> dict[str, Any]:
        p = self.prediction
        reasons = ([self.invalid] if self.invalid else []) + list(p.reasons)
        return {
            "profile": self.profile.name,
            "model": self.profile.model,
            "model_type": self.shape.model_type,
            "config": self.source.config_path,
            "machine": self.machine.name,
            "machine_total_bytes": self.machine.total_bytes,
            "machine_total_source": self.machine.source,
            "vllm_version": V.fmt_version(p.args.version),
            "vllm_version_source": self.version_found.source if self.version_found else "stated",
            "vllm_version_detail": self.version_found.detail if self.version_found else "",
            "vllm_version_warnings": list(self.version_found.warnings) if self.version_found else [],
            "format": self.spec.describe(),
            "weights_bytes": p.weights_bytes,
            "kv_bytes_per_token": p.kv_bytes_per_token,
            "kv_request_bytes": p.kv_need_bytes // max(self.profile.users, 1),
            "kv_need_bytes": p.kv_need_bytes,
            "state_bytes_per_request": p.state_bytes_per_request,
            "state_request_bytes": p.state_request_bytes,
            "state_need_bytes": p.state_need_bytes,
            "block_size": p.layout.block_size,
            "mamba_block_size": _mamba_block_size(p),
            "padding_layers": sum(p.layout.padding_layers),
            "kv_cache_groups": len(p.layout.groups),
            "activation_peak_bytes": p.activation_peak_bytes,
            "non_torch_bytes": p.non_torch_bytes,
            "cudagraph_bytes": p.cudagraph_bytes,
            "cuda_context_bytes": p.context_bytes,
            "os_reserve_bytes": p.os_reserve_bytes,
            "overhead_bytes": p.overhead_bytes,
            "total_bytes": p.plan_total_bytes,
            "requested_bytes": p.requested_bytes,
            "available_kv_bytes": p.available_kv_bytes,
            "kv_pool_bytes": p.pool.pool_bytes,
            "kv_pool_blocks": p.pool.num_blocks,
            "kv_pool_tokens": p.pool.tokens,
            "max_concurrency": round(p.pool.max_concurrency, 2),
            "users": self.profile.users,
            "max_users": p.max_users,
            "max_model_len": p.args.max_model_len,
            "gpu_memory_utilization": p.gpu_memory_utilization,
            "gpu_memory_utilization_reason": p.util_reason,
            "biggest_bucket": p.biggest_bucket,
            "fits": self.fits,
            "failure": "invalid_config" if self.invalid else p.failure,
            "reasons": reasons,
            "fixes": list(p.fixes),
            "notes": list(p.notes),
            "engine": p.args.to_json(),
            "kv_layout": p.layout.to_json(),
            "activation": p.activation.to_json(),
            "reading": self.reading.to_json() if self.reading else None,
            "ranks": list(self.ranks),
            "bottleneck_rank": next((r["rank"] for r in self.ranks if r["bottleneck"]), 0),
            "vllm_argv": self.shown_argv,
            "vllm_request": {k: list(v) if isinstance(v, tuple) else v for k, v in self.request.items()},
            "vllm_env": self.shown_env,
            "predicted_log_line": vp.format_tokens_line(p.pool, p.args.max_model_len, p.args.version, p.args.platform),
        }


def _mamba_block_size(p: budget.Prediction) -> int | None:
    """Tokens one state block stands for (MambaModelConfig): the attention block with prefix caching, the
    whole max_model_len without."""
    if not p.layout.mamba_page_bytes:
        return None
    return p.layout.block_size if p.args.mamba_cache_mode in ("align", "all") else p.args.max_model_len


def load(spec: str) -> ModelSource:
    """modelsource.load, with a `~user/…` naming no user refused as a bad path."""
    expand_user(spec, ConfigError)
    return _load_source(spec)


def _read(profile: Profile) -> tuple[ModelSource, Model, Any]:
    src = _config_source(profile)
    shape, found = read_model(src)
    return src, shape, found


def _modelled_bytes(ckpt: Any, shape: Model, ts: list[Any], per_tensor: list[int]) -> int:
    """What the format arithmetic gives for the tensors a checkpoint holds: MTP layers only when it carries them."""
    if _ckpt_has_mtp(ckpt, shape):
        return sum(per_tensor)
    return sum(b for t, b in zip(ts, per_tensor, strict=True) if not budget.is_mtp_tensor(t, shape))


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


def stored_format(shape: Model, src: ModelSource) -> formats.FormatSpec:
    """formats.detect, once per model inside `reusing()` (a mixed-precision map lists every layer's experts)."""
    hfq = src.hf_quant_config
    return _memo(("stored", id(shape), id(hfq)), lambda: formats.detect(shape, hfq), shape, hfq)


def _format(profile: Profile, shape: Model, stored: formats.FormatSpec, version: V.Version) -> quant.Resolved:
    """The weights as the plan prices them, the --quantization the command carries, and vLLM's reason not to
    start that way (a format the checkpoint does not hold and vLLM does not make while loading it)."""
    return quant.resolve(profile.quantization, stored, shape, version, dtype=profile.dtype)


# vLLM leaves out an encoder whose modalities are all limited to 0 (--language-model-only, or
# --limit-mm-per-prompt '{"image": 0}'): SupportsMultiModal._mark_tower_model builds it as a StageMissingLayer.
# (versions.TOWER_SKIP)
def loaded_towers(shape: Model, profile: Profile, version: V.Version) -> Model:
    """The model as vLLM loads it: without the encoders the profile's modality limits switch off."""
    if not shape.towers or not V.TOWER_SKIP.on(version):
        return shape
    kept = tuple(t for t in shape.towers if not all(profile.modality_limit(m) == 0 for m in t.modalities))
    return shape if kept == shape.towers else dataclasses.replace(shape, towers=kept)


def _pool_modelled(shape: Model, source: str) -> None:
    """vLLM's pool is predicted for every cache kind its specs know; say so rather than guess for the rest."""
    other = sorted({m.kind for layer in shape.layers for m in layer.mixers if specs.has_unmodelled(m)})
    if other:
        raise ConfigError(
            f"vLLM's KV/state pool for {', '.join(other)} layers is not predicted yet; `vlaunch count` gives this "
            "model's weights and cache geometry",
            source=source,
            field="layers",
        )


_LAYER_INDEX = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def _ckpt_has_mtp(ckpt: Any, shape: Model) -> bool:
    """The checkpoint holds next-token-prediction weights (`mtp.*`, or layers past the decoder's)."""
    if not shape.mtp_layers:
        return False
    for t in ckpt.tensors:
        if t.name.startswith("mtp.") or ".mtp." in t.name:
            return True
        m = _LAYER_INDEX.search(t.name)
        if m and int(m.group(1)) >= shape.num_layers:
            return True
    return False


# Speculative methods that load no weights and add no layers (their num_speculative_tokens still widens
# Mamba states), and those that load a drafter model (its weights, and its attention layers join the pool).
NO_DRAFTER = frozenset({"ngram", "ngram_gpu", "suffix"})
DRAFTER_METHODS = frozenset({"draft_model", "eagle", "eagle3"})


def _drafter(
    speculative: dict[str, Any], resolved: str | None, method: str | None, target_tp: int
) -> tuple[Model | None, int]:
    """The drafter vLLM loads for `--speculative-config` with a model: its layers, and its weights per rank."""
    if resolved in (None, "mtp") or resolved in NO_DRAFTER:
        return None, 0
    if resolved not in DRAFTER_METHODS:
        raise ConfigError(
            f"speculative method {method!r}: its drafter is not planned (MTP, EAGLE, EAGLE-3, draft models and "
            "n-gram are); plan without it for the target model alone",
            field="speculative_config.method",
        )
    name = speculative.get("model")
    if not name:
        raise ConfigError(f"speculative method {method!r} needs a drafter model", field="speculative_config.model")
    dsrc = load(str(name))
    dshape, dckpt = read_model(dsrc)
    dspec = formats.detect(dshape, dsrc.hf_quant_config)
    dts = dshape.tensors()
    if dckpt is not None and dckpt.total_bytes:
        total = dckpt.total_bytes  # exactly what the drafter's files hold
    else:
        total = sum(formats.tensor_bytes(dshape, dspec, dts))
    # draft_tensor_parallel_size defaults to the target's (SpeculativeConfig._verify_and_get_draft_tp)
    tp = int(speculative.get("draft_tensor_parallel_size") or speculative.get("tensor_parallel_size") or target_tp)
    return dshape, -(-total // tp)


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


def _tensor_bytes(shape: Model, spec: formats.FormatSpec) -> tuple[list[Any], list[int]]:
    """The model's tensors (MTP layers included) and their bytes in `spec`."""
    ts = _memo(("tensors", id(shape)), lambda: shape.tensors(mtp=True), shape)
    return ts, _memo(("bytes", id(shape), spec), lambda: formats.tensor_bytes(shape, spec, ts), shape)


def _kv_per_token(shape: Model, kv_cache_dtype: str, tp: int) -> KVPerToken:
    return _memo(("kv", id(shape), kv_cache_dtype, tp), lambda: kv_per_token(shape, kv_cache_dtype, tp), shape)


def tensor_bytes_of(plan: Plan) -> tuple[list[Any], list[int]]:
    """The plan's tensors (MTP layers included) and their bytes in its format."""
    return _tensor_bytes(plan.shape, plan.spec)


def kv_geometry(plan: Plan) -> KVPerToken:
    """The KV bytes per token of the plan's model, KV cache dtype and tensor-parallel size (per rank)."""
    a = plan.prediction.args
    return _kv_per_token(plan.shape, a.kv_cache_dtype, a.tensor_parallel_size)


def reused(key: Hashable, compute: Callable[[], _T], *objects: object) -> _T:
    """What another module computes from a plan, kept like the plan's own steps inside `reusing()`."""
    return _memo(key, compute, *objects)


def _max_len_error(shape: Model, profile: Profile, env: dict[str, str]) -> str | None:
    limit = shape.max_position_embeddings
    mml = profile.max_model_len
    if (
        limit
        and isinstance(mml, int)
        and mml > limit
        and env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN") not in ("1", "true", "True")
    ):
        return (
            f"User-specified max_model_len ({mml}) is greater than the derived max_model_len "
            f"(max_position_embeddings={limit} or model_max_length=None in model's config.json). To allow "
            "overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1."
        )
    return None


def known_gpus(machine: Machine, reading: MemoryReading | None) -> int | None:
    """GPUs the box has, where that is known: a unified machine (a Spark: one GB10) or a box read by nvidia-smi.
    A catalog discrete card names one GPU of a box whose count it does not know."""
    if machine.backend != "cuda":
        return None
    if machine.unified or reading is not None:
        return machine.gpus
    return None


def _gpu_count_error(profile: Profile, machine: Machine, reading: MemoryReading | None) -> str | None:
    if profile.nodes:
        return None  # the nodes' GPUs are counted by _placements
    world = profile.tensor_parallel_size * profile.pipeline_parallel_size * profile.data_parallel_size
    have = known_gpus(machine, reading)
    if have is None or world <= have:
        return None
    parts = f"tensor_parallel_size {profile.tensor_parallel_size} × pipeline_parallel_size " + (
        f"{profile.pipeline_parallel_size}"
    )
    if profile.data_parallel_size > 1:
        parts += f" × data_parallel_size {profile.data_parallel_size}"
    more = " (several Sparks: a profile with nodes:, see profiles/two-sparks-70b.yaml)" if machine.unified else ""
    return f"{machine.name} has {have} GPU{'s' if have > 1 else ''}; {parts} needs {world}{more}"


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


def _tp_error(shape: Model, tp: int) -> str | None:
    if shape.num_heads % tp:
        return f"Total number of attention heads ({shape.num_heads}) must be divisible by tensor parallel size ({tp})."
    return None


def make_plan(
    profile: Profile,
    *,
    live: bool = True,
    free_bytes: int | None = None,
    cpu_rss_bytes: int | None = None,
    use_calibration: bool = True,
    notes: tuple[str, ...] = (),
    detect: bool = False,
) -> Plan:
    """Resolve everything a prediction needs and run it. `max_model_len: auto` is planned at the model's length,
    then, where one request of that does not fit the pool, at the length vLLM's auto-fit settles on. `notes`: what
    reading the request noticed (a wrapper not repeated), said first. `detect`: the launch's python may be run to
    read its vLLM version when its files do not say it (serve, --detect-version); planning alone runs nothing."""
    kw: dict[str, Any] = {"live": live, "free_bytes": free_bytes, "cpu_rss_bytes": cpu_rss_bytes,
                          "use_calibration": use_calibration, "detect": detect}  # fmt: skip
    with contextlib.ExitStack() as stack:
        if _REUSE.get() is None:  # one plan's ranks share their work too (each rank's layout, its weights)
            stack.enter_context(reusing())
        plan = _noted(_auto_fit(profile, _make_plan(profile, **kw), kw), notes)
    return plan


def _noted(plan: Plan, notes: tuple[str, ...]) -> Plan:
    if not notes:
        return plan
    p = plan.prediction
    return dataclasses.replace(plan, prediction=dataclasses.replace(p, notes=(*notes, *p.notes)))


def _auto_fit(profile: Profile, plan: Plan, kw: dict[str, Any]) -> Plan:
    """`max_model_len: auto`: the plan again at the length vLLM's auto-fit settles on, where the model's does not
    fit."""
    if profile.max_model_len != "auto":
        return plan
    p = plan.prediction
    if not V.AUTO_FIT_MAX_MODEL_LEN.on(p.args.version):
        since = V.fmt_version(V.AUTO_FIT_MAX_MODEL_LEN.since)
        why = f"vLLM {V.fmt_version(p.args.version)} takes no --max-model-len auto (vLLM {since}+)"
        return dataclasses.replace(plan, invalid=plan.invalid or why)
    fitted = vp.auto_fit_max_model_len(p.layout, p.args.context(), p.available_kv_bytes)
    if fitted <= 0:
        return plan  # not one token fits: the plan's reasons say why
    if fitted >= p.args.max_model_len:
        note = f"max_model_len auto: the model's {p.args.max_model_len:,} tokens fit the pool"
        return dataclasses.replace(plan, prediction=dataclasses.replace(p, notes=(*p.notes, note)))
    again = _make_plan(profile, mml=fitted, **kw)
    q = again.prediction
    note = f"max_model_len auto: vLLM reduces {p.args.max_model_len:,} to {fitted:,} tokens to fit the pool"
    return dataclasses.replace(again, prediction=dataclasses.replace(q, notes=(*q.notes, note)))


def _make_plan(
    profile: Profile,
    *,
    live: bool = True,
    free_bytes: int | None = None,
    cpu_rss_bytes: int | None = None,
    use_calibration: bool = True,
    mml: int | None = None,
    detect: bool = False,
) -> Plan:
    src, shape, found = _memo(("model", profile.model, profile.config), lambda: _read(profile))
    check_parallel_sizes(shape, profile)
    detected = _memo(("version", profile.vllm, detect), lambda: detect_version(profile.vllm, ask=detect))
    version = detected.version
    whole = shape
    towers_key = ("towers", id(whole), profile.language_model_only, profile.limit_mm_per_prompt, version)
    shape = _memo(towers_key, lambda: loaded_towers(whole, profile, version), whole)
    _memo(("pool_modelled", id(shape)), lambda: _pool_modelled(shape, src.config_path), shape)
    stored = stored_format(shape, src)
    resolved = _format(profile, shape, stored, version)
    spec = resolved.spec
    speculative = profile.speculative
    method = speculative.get("method")
    if method is None and speculative.get("model"):
        method = "draft_model"
    # MTP layers are counted apart: vLLM loads them only when it speculates with them.
    ts, per_tensor = _tensor_bytes(shape, spec)

    machine, reading = _memo(
        ("machine", profile.machine, profile.gpu_memory_gib, live),
        lambda: machine_for_plan(profile.machine, gpu_memory_gib=profile.gpu_memory_gib, live=live),
    )
    platform: vp.Platform = "cpu" if machine.backend == "cpu" else "cuda"
    env = dict(profile.vllm.env)
    args = budget.resolve_engine_args(
        shape,
        version=version,
        platform=platform,
        unified=machine.unified,
        total_bytes=machine.total_bytes,
        gpu_name=machine.name,
        max_model_len=mml or (None if profile.max_model_len == "auto" else profile.max_model_len),
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
        num_speculative_tokens=int(speculative.get("num_speculative_tokens") or 0),
        speculative_method="mtp" if is_mtp(method) else method,
        pooling=profile.runner == "pooling",
        cpu_bf16=platform == "cpu" and _memo("avx512_bf16", cpu_has_avx512_bf16),
        disable_hybrid_manager=profile.disable_hybrid_kv_cache_manager,
        chunked_with_hybrid=env.get(
            "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE", "1" if V.CHUNKED_WITH_HYBRID.on(version) else "0"
        )
        != "0",
        hf_quant_config=src.hf_quant_config,
    )
    if args.speculative_method == "mtp" and not shape.mtp_layers:
        raise ConfigError(
            f"speculative method {method!r} needs MTP layers, and this model's config declares none "
            "(num_nextn_predict_layers / mtp_num_hidden_layers)",
            source=src.config_path,
            field="speculative_config.method",
        )
    drafter, drafter_bytes = _memo(
        ("drafter", profile.speculative_config, args.speculative_method, args.tensor_parallel_size),
        lambda: _drafter(speculative, args.speculative_method, method, args.tensor_parallel_size),
    )

    kv = _kv_per_token(shape, args.kv_cache_dtype, args.tensor_parallel_size)
    exact_extra = 0
    if args.tensor_parallel_size == 1 and args.pipeline_parallel_size == 1 and src.model_dir:
        ckpt = found if src.origin in ("directory", "hf-cache") else None
        if ckpt is not None and ckpt.total_bytes and spec == stored:
            exact_extra = ckpt.total_bytes - _memo(
                ("modelled", id(shape), spec), lambda: _modelled_bytes(ckpt, shape, ts, per_tensor), shape
            )
    calibrated = None
    calibration_notes: tuple[str, ...] = ()  # stored terms left out: outside their physical bounds
    if platform == "cpu" and cpu_rss_bytes is None and use_calibration:
        calibrated, calibration_notes = _memo(
            ("cpu_worker", version, profile.vllm.python, shape.family, machine.total_bytes),
            lambda: lookup_cpu_worker(
                "cpu", V.fmt_version(version), profile.vllm.python, family=shape.family, total_bytes=machine.total_bytes
            ),
        )
    gpu_terms = None
    if platform == "cuda" and use_calibration and profile.overhead_gib is None:
        key = machine_key(machine.name, machine.total_bytes)
        terms, calibration_notes = _memo(
            ("terms", key, version, machine.total_bytes),
            lambda: lookup_terms(key, V.fmt_version(version), total_bytes=machine.total_bytes),
        )
        if terms:
            nt_key = "non_torch_bytes_tp1" if args.tensor_parallel_size == 1 else "non_torch_bytes_tp_many"
            gpu_terms = budget.Calibrated(
                non_torch_bytes=terms.get(nt_key) if args.pipeline_parallel_size == 1 else None,
                cudagraph_bytes=terms.get("cudagraph_bytes"),
                activation_scale=(terms.get("activation_scale_by_family") or {}).get(
                    shape.model_type, terms.get("activation_scale")
                ),
                weights_scale=terms.get("weights_scale"),
                note=f"calibrated from {terms.get('runs', 0)} run(s) of vLLM {V.fmt_version(version)} on this {key}",
            )
    util = None if profile.gpu_memory_utilization == "auto" else float(profile.gpu_memory_utilization)
    overhead = None if profile.overhead_gib is None else gib_to_bytes(profile.overhead_gib)

    # Every pipeline stage on every node it runs on: TP peers on one machine are identical.
    slots = _placements(profile, machine, reading, args, free_bytes)

    def request(slot: _Slot, util_: float | None) -> budget.PlanRequest:
        weights = exact_extra + _memo(
            ("rank_weights", id(shape), spec, budget.rank_weight_inputs(shape, args), slot.pp_rank),
            lambda: budget.rank_weight_bytes(shape, ts, per_tensor, spec, args, slot.pp_rank),
            shape,
        )
        if slot.pp_rank == args.pipeline_parallel_size - 1:
            weights += drafter_bytes  # the drafter runs on the last stage
        rss = cpu_rss_bytes
        if rss is None and calibrated is not None:
            rss = calibrated.base_bytes + weights
        return budget.PlanRequest(
            shape=shape,
            weights_bytes=weights,
            kv_bytes_per_token=kv.per_token,
            args=args,
            total_bytes=slot.machine.total_bytes,
            unified=slot.machine.unified,
            users=profile.users,
            gpu_memory_utilization=util_,
            os_reserve_bytes=slot.reserve,
            free_bytes=slot.free,
            overhead_bytes=overhead,
            biggest_pool=profile.biggest_pool,
            gpus=slot.machine.gpus,
            pp_rank=slot.pp_rank,
            cpu_rss_bytes=rss,
            drafter=drafter,
            calibration=gpu_terms,
            kv_layout=_memo(
                ("layout", id(shape), id(drafter), budget.layout_inputs(shape, args), slot.pp_rank),
                lambda: budget.rank_layout(shape, args, slot.pp_rank, drafter)[0],
                shape,
                drafter,
            ),
        )

    # One gpu_memory_utilization for all ranks: what the hungriest rank needs, never above what any allows.
    firsts: list[budget.Prediction] = []
    if util is None and len(slots) > 1:
        firsts = [budget.predict(request(sl, None)) for sl in slots]
        util = max(p.gpu_memory_utilization for p in firsts)
        if profile.biggest_pool or not all(sl.machine.unified for sl in slots):
            util = min(p.gpu_memory_utilization for p in firsts)
    preds = [budget.predict(request(sl, util)) for sl in slots]
    worst = min(range(len(slots)), key=lambda i: (preds[i].pool.num_blocks, -slots[i].pp_rank))
    pred = preds[worst]
    if profile.gpu_memory_utilization == "auto" and len(slots) > 1:
        pred = dataclasses.replace(pred, util_reason=firsts[worst].util_reason + " (one value for every rank)")
    if not all(p.fits for p in preds):
        bad = [(sl, p) for sl, p in zip(slots, preds, strict=True) if not p.fits]
        reasons = tuple(f"rank {sl.ranks[0]} ({sl.node}): {r}" for sl, p in bad for r in p.reasons)
        pred = dataclasses.replace(
            pred, fits=False, reasons=reasons or pred.reasons, failure=bad[0][1].failure, fixes=bad[0][1].fixes
        )
    ranks = _rank_table(slots, preds, worst, shape, args)
    notes: list[str] = []
    launch_notes, unlaunchable = _launch_check(profile, pred, spec, stored, version)  # read back by that vLLM
    notes += launch_notes
    notes += calibration_notes
    if calibrated is not None:
        notes.append(
            f"CPU worker memory calibrated from {calibrated.runs} run(s) of vLLM {V.fmt_version(version)} here"
        )
    notes += detected.warnings  # the version assumed, or unlike the image's or python's, or newer than modelled
    if profile.machine == "auto" and machine.backend == "cpu":
        notes.append(
            "machine auto: no NVIDIA GPU on this box, so this plans vLLM's CPU backend here; --machine dgx-spark, "
            "h100, rtx4090, … plans for another machine"
        )
    notes += kv_dtype_notes(profile.kv_cache_dtype, args.kv_cache_dtype, shape, src.hf_quant_config, version)
    if notes:
        pred = dataclasses.replace(pred, notes=(*pred.notes, *notes))
    invalid = (
        unlaunchable
        or _gpu_count_error(profile, machine, reading)
        or _tp_error(shape, args.tensor_parallel_size)
        or _max_len_error(shape, profile, env)
        or resolved.refusal
        or quant.refusal(
            spec.name,
            version=version,
            platform=platform,
            compute_capability=machine.compute_capability,
            model_type=shape.model_type,
            method=resolved.flag,
        )
        or kv_refusal(args.kv_cache_dtype, shape, platform=platform, compute_capability=machine.compute_capability)
    )
    served, served_note = _memo(("served", profile.model), lambda: served_model(profile.model))
    if served_note:
        pred = dataclasses.replace(pred, notes=(*pred.notes, served_note))
    argv, launch_env = vllm_argv(profile, pred, spec, stored, model=served)
    return Plan(
        profile,
        src,
        shape,
        spec,
        machine,
        reading,
        pred,
        tuple(argv),
        tuple(launch_env.items()),
        invalid,
        ranks,
        detected,
        use_calibration,
        served,
        detect,
    )


def _launch_check(
    profile: Profile, pred: budget.Prediction, spec: formats.FormatSpec, stored: formats.FormatSpec, version: V.Version
) -> tuple[list[str], str | None]:
    """The serve arguments the plan writes, read back with the option table of the vLLM that runs: refused (one
    line) when that vLLM lacks an option the plan sets or reads one otherwise; notes for pass-through flags that
    change memory."""
    from launcher.plan.argv import engine_values, serve_args
    from launcher.vllm import interface
    from launcher.vllm.flags import check_launch

    planned = [("host", profile.vllm.host), ("port", profile.vllm.port), *engine_values(profile, pred, spec, stored)]
    words = serve_args(profile, pred, spec, stored)
    return check_launch(words, planned, interface.for_version(version), profile.vllm.extra_args)


def served_model(model: str) -> tuple[str, str | None]:
    """(what vLLM is told to serve, a note): a model's config.json is no model vLLM can serve, so the command names
    the repo its `_name_or_path` gives where it gives one."""
    if not model.endswith(".json") or not Path(model).is_file():
        return model, None
    import json

    try:
        with open(model, encoding="utf-8") as fh:
            name = json.load(fh).get("_name_or_path")
    except (OSError, ValueError, AttributeError):
        name = None
    if isinstance(name, str) and re.fullmatch(r"[\w.-]+/[\w.-]+", name):
        return name, f"model {name}: the config's _name_or_path (a config.json is counted, not served)"
    return model, (
        "a config.json is counted, not served: the command names it as vLLM's model, which vLLM cannot serve; give "
        "the model vLLM serves (a repo id or a directory) with --model and count from --hf-config-path"
    )


@dataclass(frozen=True)
class _Slot:
    pp_rank: int
    ranks: tuple[int, ...]  # global ranks (tp-major within a stage: rank = pp * tp + tp_rank)
    node: str
    machine: Machine
    reserve: int
    free: int | None


def _placements(
    profile: Profile, machine: Machine, reading: MemoryReading | None, args: budget.EngineArgs, free: int | None
) -> list[_Slot]:
    """Which machine each pipeline stage's ranks run on. One node: all of them; several: GPUs in node order."""
    tp, pp = args.tensor_parallel_size, args.pipeline_parallel_size
    if free is None and reading is not None:
        free = reading.available_bytes
    if not profile.nodes:
        reserve = _os_reserve(profile, machine, reading)
        return [_Slot(r, tuple(range(r * tp, (r + 1) * tp)), "local", machine, reserve, free) for r in range(pp)]
    from launcher.plan.machines import get_machine

    order = sorted(profile.nodes, key=lambda n: n.role != "head")
    gpu_owner: list[tuple[str, Machine, int]] = []
    for n in order:
        if len(gpu_owner) >= tp * pp:
            break  # the GPUs past those the ranks take are not planned
        m = get_machine(n.machine, gpu_memory_gib=n.gpu_memory_gib)
        reserve = _os_reserve(dataclasses.replace(profile, os_reserve_gib=n.os_reserve_gib), m, None)
        gpu_owner += [(n.host, m, reserve)] * min(n.gpus, tp * pp - len(gpu_owner))
    if len(gpu_owner) < tp * pp:
        raise ConfigError(
            f"tensor_parallel_size {tp} × pipeline_parallel_size {pp} needs {tp * pp} GPUs; the nodes have "
            f"{len(gpu_owner)}",
            field="nodes",
        )
    slots: dict[tuple[int, str], list[int]] = {}
    owners: dict[str, tuple[Machine, int]] = {}
    for rank in range(tp * pp):
        host, m, reserve = gpu_owner[rank]
        slots.setdefault((rank // tp, host), []).append(rank)
        owners[host] = (m, reserve)
    return [_Slot(pp_r, tuple(rs), host, *owners[host], None) for (pp_r, host), rs in sorted(slots.items())]


def _rank_table(
    slots: list[_Slot], preds: list[budget.Prediction], worst: int, shape: Model, args: budget.EngineArgs
) -> tuple[dict[str, Any], ...]:
    out = []
    stages = budget.pp_layer_ranges(shape.num_layers, args.pipeline_parallel_size)
    for i, (sl, p) in enumerate(zip(slots, preds, strict=True)):
        for rank in sl.ranks:
            out.append(
                {
                    "rank": rank,
                    "pp_rank": sl.pp_rank,
                    "tp_rank": rank % args.tensor_parallel_size,
                    "node": sl.node,
                    "machine": sl.machine.name,
                    "layers": [stages[sl.pp_rank].start, stages[sl.pp_rank].stop],
                    "weights_bytes": p.weights_bytes,
                    "activation_peak_bytes": p.activation_peak_bytes,
                    "non_torch_bytes": p.non_torch_bytes,
                    "requested_bytes": p.requested_bytes,
                    "available_kv_bytes": p.available_kv_bytes,
                    "kv_pool_blocks": p.pool.num_blocks,
                    "fits": p.fits,
                    "bottleneck": i == worst,
                }
            )
    return tuple(sorted(out, key=lambda r: r["rank"]))


def _os_reserve(profile: Profile, machine: Machine, reading: MemoryReading | None) -> int:
    if not machine.unified:
        return 0 if profile.os_reserve_gib == "auto" else gib_to_bytes(float(profile.os_reserve_gib))
    if profile.os_reserve_gib != "auto":
        return gib_to_bytes(float(profile.os_reserve_gib))
    if reading is not None:
        in_use = reading.total_bytes - reading.available_bytes
        floor = min(OS_RESERVE_FLOOR, reading.total_bytes * 15 // 100)  # small machines: 15 % of the memory
        return max(floor, in_use + OS_RESERVE_HEADROOM)
    return OS_RESERVE_DEFAULT


def profile_from_flags(model: str | None, config: str | None, **fields: Any) -> Profile:
    """A profile built from command-line flags alone (`vlaunch plan --model … --machine …`)."""
    from launcher.plan.profiles import profile_from_mapping

    if not model and not config:
        raise ProfileError("give a PROFILE, or --model / --config", field="model")
    data: dict[str, Any] = {"model": model or config, "name": "command-line"}
    if config:
        data["config"] = config
        try:
            found = Path(expand_user(config, ConfigError)).exists()
        except (OSError, ValueError) as e:  # a name too long for the filesystem, a NUL byte
            raise ConfigError(f"cannot read: {getattr(e, 'strerror', None) or e}", source=config) from None
        if not found:
            raise ConfigError("no such file", source=config)
    data.update({k: v for k, v in fields.items() if v is not None})
    return profile_from_mapping(data, source=None, base_dir=Path.cwd())
