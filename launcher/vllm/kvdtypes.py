"""Which KV-cache dtypes vLLM stores for a model, and where; which one a checkpoint sets; which layers stay in the
model's dtype. By attention backend and by release: the byte arithmetic of each dtype is `launcher.model.kv`'s."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from launcher.common.records import dataclass
from launcher.model.arch.layers import Attention
from launcher.model.arch.model import Model
from launcher.model.kv import (
    DS_MLA_DTYPES,
    FP8_DTYPES,
    NVFP4_DTYPES,
    PER_TOKEN_HEAD_DTYPES,
    SERVED_DTYPES,
    TURBOQUANT_DTYPES,
    boundary_layers,
    dsv4_fp8_layout,
    is_hybrid,
    known_dtype,
)
from launcher.vllm import versions as V


def kept_layers(kv_cache_dtype: str, shape: Model, version: V.Version) -> frozenset[int]:
    """The layers this release keeps in the model's dtype under TurboQuant / UltraQuant (none in a hybrid since
    0.21)."""
    return boundary_layers(kv_cache_dtype, shape, hybrids_keep_none=V.TQ_BOUNDARY_NOT_HYBRID.on(version))


# --- what vLLM refuses ---------------------------------------------------------------------------------------------

_MLA_DTYPES = frozenset({"auto", "bfloat16", "float16", "float32", "fp8", "fp8_e4m3"})  # every CUDA MLA backend's
_CPU_DTYPES = frozenset({"auto", "bfloat16", "float16", "float32", "fp8", "fp8_e4m3", "fp8_e5m2"})  # CPU_ATTN
_FLASHINFER_HEADS = (64, 128, 256, 512)  # FlashInferBackend.get_supported_head_sizes


def _cc(compute_capability: str | None) -> int | None:
    from launcher.vllm.quant import capability

    return capability(compute_capability)


def _attention(shape: Model) -> list[Attention]:
    return [m for layer in shape.layers for m in layer.mixers if isinstance(m, Attention) and m.shares_kv_with is None]


def kv_refusal(kv_cache_dtype: str, shape: Model, *, platform: str, compute_capability: str | None) -> str | None:
    """vLLM 0.32's reason not to serve this KV cache dtype for this model here (None: a backend stores it)."""
    d = known_dtype(kv_cache_dtype)
    if "compressed_attention" in shape.mixer_kinds and not dsv4_fp8_layout(d):
        # models/deepseek_v4/attention.py _resolve_dsv4_kv_cache_dtype, the layout of every default backend
        return (
            f"DeepseekV4 fp8_ds_mla layout only supports fp8 kv-cache, got {d} (vLLM 0.32's DeepSeek-V4 attention): "
            "--kv-cache-dtype fp8 or auto"
        )
    attn, mla = _attention(shape), shape.mla
    if d in SERVED_DTYPES or d == "auto" or not (attn or mla):
        return None
    if d == "fp8_inc":
        return "kv_cache_dtype fp8_inc is Intel Gaudi's (the vllm-gaudi plugin): no CUDA or CPU backend stores it"
    if d == "ultraquant_4bit":
        return "kv_cache_dtype ultraquant_4bit runs only on ROCm (UltraQuantAttentionBackend), not on CUDA or CPU"
    if platform == "cpu":
        if mla is not None:
            return f"kv_cache_dtype {d}: the CPU MLA backend (cpu_mla.py) stores only the model's dtype"
        if d not in _CPU_DTYPES:
            return f"kv_cache_dtype {d}: the CPU attention backend stores 16-bit or fp8 KV only (cpu_attn.py)"
        if d in FP8_DTYPES and any(m.head_dim % 32 and m.head_dim % 16 == 0 for m in attn):
            return "FP8 KV cache requires head_size divisible by 32 on CPU (cpu_attn.py)"
        return None
    if mla is not None:
        return _mla_refusal(d, sparse=mla.indexer is not None, cc=_cc(compute_capability))
    if d in DS_MLA_DTYPES:
        return f"kv_cache_dtype {d} is an MLA layout (FlashMLA sparse): no attention backend stores it for this model"
    if d in NVFP4_DTYPES:
        return _nvfp4_refusal(d, attn, _cc(compute_capability))
    return None


def _mla_refusal(d: str, *, sparse: bool, cc: int | None) -> str | None:
    if d in DS_MLA_DTYPES:
        if not sparse:
            return f"kv_cache_dtype {d} is FlashMLA sparse's layout: only sparse-MLA models (DeepSeek V3.2) take it"
        if d == "nvfp4_ds_mla" and cc is not None and cc // 10 != 10:
            return "kv_cache_dtype nvfp4_ds_mla needs an SM100-class GPU (FlashMLA sparse's NVFP4 path)"
        return None
    if d in NVFP4_DTYPES:
        return "nvfp4 KV cache is not supported with MLA (Multi-head Latent Attention) backends (vllm/config/vllm.py)"
    if d not in _MLA_DTYPES:
        return f"kv_cache_dtype {d}: no MLA attention backend stores it (they take auto, float16, bfloat16, fp8)"
    return None


def _nvfp4_refusal(d: str, attn: list[Attention], cc: int | None) -> str | None:
    """FlashInfer is the only backend with an nvfp4 page (FlashInferBackend.supports_kv_cache_dtype and
    supports_combination)."""
    sizes = {(m.head_dim, m.v_dim) for m in attn}
    if any(k != v for k, v in sizes):
        return f"kv_cache_dtype {d}: FlashInfer's nvfp4 page needs equal K and V head sizes"
    if bad := sorted({k for k, _ in sizes} - set(_FLASHINFER_HEADS)):
        return f"kv_cache_dtype {d}: FlashInfer takes head sizes 64, 128, 256, 512, not {bad[0]}"
    if cc is None:
        return None
    if not 80 <= cc <= 121 or cc // 10 == 11:
        return f"kv_cache_dtype {d}: FlashInfer's nvfp4 KV runs on SM80-SM90, SM100 and SM120, not SM{cc}"
    if cc // 10 in (8, 9, 12):  # the FlashAttention-2 path, not TRT-LLM's
        if d == "nvfp4_4over6":
            return "kv_cache_dtype nvfp4_4over6 needs SM100 (TRT-LLM attention): FlashInfer's FA2 path has no 4over6"
        if 64 in {k for k, _ in sizes}:
            return f"kv_cache_dtype {d}: FlashInfer's FA2 prefill misreads an NVFP4 KV cache at head_size 64"
        if any(m.sinks for m in attn):
            return f"kv_cache_dtype {d}: the sink prefill wrapper cannot read an NVFP4 KV cache"
    return None


def kv_backend_note(kv_cache_dtype: str, shape: Model) -> str | None:
    """Which vLLM backend stores this dtype, for the plan's notes (None for 16-bit and fp8 KV)."""
    d = kv_cache_dtype.lower()
    if "compressed_attention" in shape.mixer_kinds:
        return (
            f"KV cache {d}: DeepSeek-V4's cache (compressed MLA, indexer keys, sliding window, compressor states) "
            "follows vLLM 0.32's source; no real boot has checked it"
        )
    if d in PER_TOKEN_HEAD_DTYPES and shape.mla is None:
        return f"KV cache {d}: only vLLM's Triton attention backend stores it (an fp32 scale per token and KV head)"
    if d in NVFP4_DTYPES:
        return f"KV cache {d}: only FlashInfer stores it (fp4 values with an fp8 scale per 16, K and V apart)"
    if d in TURBOQUANT_DTYPES:
        keep = "" if is_hybrid(shape) else "; the first and last 2 layers stay in the model's dtype"
        return f"KV cache {d}: the TurboQuant backend (FlashAttention 2) packs K and V in one slot per head{keep}"
    return None


# --- the checkpoint's KV cache ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckpointKV:
    """What a checkpoint's quantization config says of its KV cache, and what vLLM makes of it."""

    dtype: str  # the kv_cache_dtype vLLM takes from it
    key: str  # where it says so, e.g. "kv_cache_quant_algo FP8"
    rule: V.Rule  # the release that takes it
    taken: bool  # this version takes it (for the kv_cache_dtype asked)
    over_explicit: bool = False  # it wins over an explicit --kv-cache-dtype too (compressed-tensors, 0.15-0.21)
    asked: str = "auto"  # the --kv-cache-dtype asked for

    def note(self, version: V.Version) -> str:
        since = V.fmt_version(self.rule.since).removesuffix(".0")  # a release: 0.14
        if not self.taken and self.rule.on(version):
            return f"KV cache {self.asked}: --kv-cache-dtype {self.asked} wins over the checkpoint's {self.key}"
        if not self.taken:
            return (f"the checkpoint's {self.key} is not taken by vLLM {V.fmt_version(version)} (it is from {since}):"
                    " the KV cache stays as --kv-cache-dtype says")  # fmt: skip
        if self.over_explicit:  # compressed-tensors until the release an explicit choice won
            until = V.fmt_version(V.KV_SCHEME_AUTO_ONLY.since).removesuffix(".0")
            return (
                f"KV cache {self.dtype}: the checkpoint's {self.key} (vLLM {since} to before {until} takes it over"
                " any --kv-cache-dtype)"
            )
        return f"KV cache {self.dtype}: the checkpoint's {self.key} (vLLM ≥ {since} takes it for --kv-cache-dtype auto)"


def _quant_config(shape: Model, hf_quant_config: Mapping[str, Any] | None) -> tuple[Mapping[str, Any], str] | None:
    """The quantization config vLLM reads (config.json's, else ModelOpt's hf_quant_config.json) and its method, as
    ModelArchConfigConvertor._normalize_quantization_config names it."""
    q = shape.quantization_config if shape.quantization_config is not None else hf_quant_config
    if not isinstance(q, Mapping):
        return None
    inner = q.get("quantization")
    producer = q.get("producer")
    modelopt = (isinstance(producer, Mapping) and producer.get("name") == "modelopt") or (
        isinstance(inner, Mapping) and "modelopt_quant_config" in inner
    )
    if modelopt and isinstance(inner, Mapping) and inner.get("quant_algo") is not None:
        return q, "modelopt"  # modelopt or modelopt_fp4: both start with "modelopt"
    return q, str(q.get("quant_method") or "").lower().replace("compressed_tensors", "compressed-tensors")


def checkpoint_kv_dtype(
    shape: Model, hf_quant_config: Mapping[str, Any] | None, version: V.Version, asked: str = "auto"
) -> CheckpointKV | None:
    """The KV cache dtype the checkpoint sets, as vLLM reads it: ModelOpt's kv_cache_quant_algo / kv_cache_scheme
    (utils/torch_utils.py get_kv_cache_quant_algo_string) or compressed-tensors' kv_cache_scheme (Attention.__init__).
    None when it sets none (or one vLLM maps to "auto")."""
    found = _quant_config(shape, hf_quant_config)
    if found is None:
        return None
    q, method = found
    if method.startswith("modelopt"):
        return _modelopt_kv(q, version, asked)
    scheme = q.get("kv_cache_scheme")
    if method != "compressed-tensors" or scheme is None or not _attention(shape):
        return None  # MLA layers do not read kv_cache_scheme
    key = f"kv_cache_scheme ({_scheme_text(scheme)})"
    if V.KV_SCHEME_AUTO_ONLY.on(version):
        return CheckpointKV("fp8", key, V.KV_SCHEME_FP8, asked == "auto", asked=asked)  # an explicit choice wins
    # 0.15-0.21: the scheme wins over any --kv-cache-dtype
    return CheckpointKV("fp8", key, V.KV_SCHEME_FP8, V.KV_SCHEME_FP8.on(version), True, asked)


def _scheme_text(scheme: Any) -> str:
    if isinstance(scheme, Mapping):
        return ", ".join(f"{k} {scheme[k]}" for k in ("type", "num_bits", "dynamic") if k in scheme)
    return str(scheme)


def _modelopt_kv(q: Mapping[str, Any], version: V.Version, asked: str) -> CheckpointKV | None:
    inner = q.get("quantization")
    inner = inner if isinstance(inner, Mapping) else q
    # the first that is set, in vLLM's order
    names = (("kv_cache_scheme", inner), ("kv_cache_scheme", q), ("kv_cache_quant_algo", inner),
             ("kv_cache_quant_algo", q))  # fmt: skip
    name, algo = next(((n, src[n]) for n, src in names if src.get(n)), ("", None))
    dtype: str | None = None
    if isinstance(algo, Mapping):
        key = f"{name} ({_scheme_text(algo)})"
        if algo.get("dynamic") is False and algo.get("num_bits") == 8 and algo.get("type") == "float":
            dtype = "fp8"
        elif algo.get("num_bits") == 4 and algo.get("type") == "float":
            dtype = "nvfp4"
    elif isinstance(algo, str):
        key = f"{name} {algo}"
        dtype = algo.lower()
    # MODELOPT_TO_VLLM_KV_CACHE_DTYPE_MAP; anything else vLLM warns about and keeps "auto"
    if dtype == "fp8":
        return _taken("fp8_e4m3", key, V.KV_FP8_FROM_CHECKPOINT, version, asked)
    if dtype == "nvfp4":
        return _taken("nvfp4", key, V.KV_NVFP4_FROM_CHECKPOINT, version, asked)
    return None


def _taken(dtype: str, key: str, rule: V.Rule, version: V.Version, asked: str) -> CheckpointKV:
    """resolve_kv_cache_dtype_string: only "auto" is resolved from the checkpoint."""
    return CheckpointKV(dtype, key, rule, rule.on(version) and asked == "auto", asked=asked)


def kv_dtype_notes(
    asked: str, resolved: str, shape: Model, hf_quant_config: Mapping[str, Any] | None, version: V.Version
) -> list[str]:
    """The plan's notes on its KV cache dtype: where it came from (the checkpoint, when it says anything) and the
    one backend that stores it."""
    notes: list[str] = []
    ckpt = checkpoint_kv_dtype(shape, hf_quant_config, version, asked)
    pair = {asked.lower(), ckpt.dtype if ckpt else ""}
    # said when taken, or when overridden by a dtype of another kind (fp8 asked of an fp8 checkpoint: nothing to say)
    if ckpt is not None and (ckpt.taken or not (pair <= FP8_DTYPES or pair <= NVFP4_DTYPES)):
        notes.append(ckpt.note(version))
    backend = kv_backend_note(resolved, shape)
    if backend:
        notes.append(backend)
    return notes
