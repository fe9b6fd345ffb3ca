"""KV-cache bytes per token, by layer kind, per tensor-parallel rank. Pure arithmetic.

Standard attention stores a key and a value vector per KV head per layer for every token; MLA stores one
compressed latent (plus the decoupled rope key) per layer; sliding-window layers hold at most `window` tokens.
Each `--kv-cache-dtype` is priced as vLLM lays out its page (vllm/v1/kv_cache_interface.py AttentionSpec, after
the attention backend's `customize_spec`): the element of vllm/utils/torch_utils.py STR_DTYPE_TO_TORCH_DTYPE,
plus the scales and packing the dtype's backend stores in the page.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Any

from launcher.common.errors import ConfigError
from launcher.common.records import dataclass
from launcher.common.units import cdiv
from launcher.model.arch.layers import (
    Attention,
    ChunkedLocalAttention,
    Mixer,
    MLAttention,
    SlidingWindowAttention,
    kv_heads_per_rank,
)
from launcher.model.arch.model import Model
from launcher.vllm import versions as V

__all__ = [
    "DTYPE_BYTES",
    "KV_CACHE_DTYPES",
    "CheckpointKV",
    "KVPerToken",
    "attention_head_bytes",
    "checkpoint_kv_dtype",
    "kv_element_bytes",
    "kv_heads_per_rank",
    "kv_per_token",
    "kv_refusal",
    "mla_token_bytes",
]

# Every --kv-cache-dtype a vLLM release from 0.10 to 0.32 accepts (vllm/config/cache.py CacheDType; 0.32 holds all of
# them): bfloat16 from 0.11, fp8_ds_mla from 0.12, float16 from 0.18, the per-token-head, nvfp4 and turboquant types
# from 0.20, int4_per_token_head from 0.25, nvfp4_4over6 from 0.28, nvfp4_ds_mla from 0.30, ultraquant_4bit in 0.32.
KV_CACHE_DTYPES = (
    "auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla", "nvfp4_ds_mla",
    "int4_per_token_head", "int8_per_token_head", "fp8_per_token_head", "nvfp4", "nvfp4_4over6",
    "turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc", "ultraquant_4bit",
)  # fmt: skip

DTYPE_BYTES = {"float32": 4, "fp32": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2}

# What "auto" becomes: the dtype the model is served in (budget resolves it; float32 only under --dtype float32).
_SERVED = {"float32": 4, "bfloat16": 2, "float16": 2}
_FP8 = frozenset({"fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc"})  # one byte per element, a per-tensor scale outside
_PER_TOKEN_HEAD = frozenset({"int8_per_token_head", "fp8_per_token_head", "int4_per_token_head"})
_NVFP4 = frozenset({"nvfp4", "nvfp4_4over6"})
_DS_MLA = frozenset({"fp8_ds_mla", "nvfp4_ds_mla"})
# TurboQuant presets (model_executor/layers/quantization/turboquant/config.py TQ_PRESETS): (key bits, value bits);
# 8-bit keys are stored as fp8.
_TURBOQUANT = {"turboquant_k8v4": (8, 4), "turboquant_4bit_nc": (4, 4), "turboquant_k3v4_nc": (3, 4),
               "turboquant_3bit_nc": (3, 3)}  # fmt: skip
_SCALE = 4  # one fp32 scale (per-token-head dtypes: per token, per KV head, for K and for V)
_ULTRAQUANT_GROUP = 32  # v1/attention/ops/ultraquant/format.py GROUP_SIZE: one E8M0 scale byte per 32 values


def _known(kv_cache_dtype: str) -> str:
    d = kv_cache_dtype.lower()
    if d not in KV_CACHE_DTYPES and d not in _SERVED:
        raise ConfigError(f"unknown kv_cache_dtype {kv_cache_dtype!r}; known: {', '.join(KV_CACHE_DTYPES)}",
                          field="kv_cache_dtype")  # fmt: skip
    return d


def _served_bytes(model_dtype: str | None) -> int:
    """vLLM's "auto": the model's dtype. A missing or fp32 checkpoint dtype is served in 16 bits by default."""
    md = (model_dtype or "bfloat16").lower()
    return 2 if DTYPE_BYTES.get(md, 2) == 4 else DTYPE_BYTES.get(md, 2)


def kv_element_bytes(kv_cache_dtype: str, model_dtype: str | None) -> tuple[int, int]:
    """(bytes of the cache tensor's element, fp32 scale bytes per token per KV head for K and for V).

    The element is STR_DTYPE_TO_TORCH_DTYPE's: 1 byte (uint8 / int8 / float8) for every quantized dtype, packed
    4-bit ones included; `attention_head_bytes` and `mla_token_bytes` give what a token really takes."""
    d = _known(kv_cache_dtype)
    if d == "auto":
        return _served_bytes(model_dtype), 0
    if d in _SERVED:
        return _SERVED[d], 0
    return 1, _SCALE if d in _PER_TOKEN_HEAD else 0


def turboquant_slot_bytes(kv_cache_dtype: str, head_size: int) -> int:
    """TurboQuantConfig.slot_size_aligned: one head's key and value packed in one slot."""
    key_bits, value_bits = _TURBOQUANT[kv_cache_dtype]
    # fp8 keys: a byte per element; else Lloyd-Max indices of key_bits each plus an fp16 vector norm
    key = head_size if key_bits == 8 else cdiv(head_size * key_bits, 8) + 2
    # values: value_bits each, plus an fp16 scale and an fp16 zero point
    value = cdiv(head_size * value_bits, 8) + 4
    slot = key + value
    return slot + slot % 2  # rounded up to even (effective_head_size = slot // 2)


def ultraquant_slot_bytes(head_size: int) -> int:
    """ultraquant/format.py slot_size: K and V as 4-bit codes (2 per byte), each with an E8M0 byte per 32 values."""
    return 2 * (head_size // 2 + head_size // _ULTRAQUANT_GROUP)


def attention_head_bytes(kv_cache_dtype: str, model_dtype: str | None, head_size: int, head_size_v: int) -> int:
    """Bytes one token of one KV head takes in one attention layer's page (AttentionSpec at block size 1 and one
    KV head, as the dtype's backend packs it)."""
    d = _known(kv_cache_dtype)
    if d in _NVFP4:
        # FlashInferBackend.customize_spec: K and V in separate slots of nvfp4_kv_cache_full_dim bytes each, fp4
        # data (2 values per byte) and an fp8 block scale per 16 values
        return 2 * (head_size // 2 + head_size // 16)
    if d in _TURBOQUANT:
        return turboquant_slot_bytes(d, head_size)  # TurboQuantAttentionBackend: one packed K+V slot per head
    if d == "ultraquant_4bit":
        return ultraquant_slot_bytes(head_size)  # UltraQuantAttentionBackend: one packed K+V slot per head
    elem, scale = kv_element_bytes(d, model_dtype)
    if d == "int4_per_token_head":
        # TritonAttentionBackend.customize_spec: two int4 values per byte, then an fp32 scale for K and for V
        return head_size // 2 + head_size_v // 2 + 2 * scale
    # K and V, each element `elem` bytes; per-token-head dtypes add an inline fp32 scale for K and for V
    return (head_size + head_size_v) * elem + 2 * scale


def mla_token_bytes(kv_cache_dtype: str, model_dtype: str | None, head_size: int) -> int:
    """Bytes one token takes in one MLA layer's page (MLAAttentionSpec: one latent of `head_size` =
    kv_lora_rank + qk_rope_head_dim, no V, no head split)."""
    d = _known(kv_cache_dtype)
    if d == "fp8_ds_mla":
        # FlashMLA sparse's layout (mla_attention.py state_content_bytes): 512 fp8 latent values, 4 fp32 scales
        # (one per 128) and the 64 rope values in bf16, whatever the model's geometry
        return 512 * 1 + 4 * 4 + 64 * 2
    if d == "nvfp4_ds_mla":
        # the NVFP4 DS-MLA layout (flashmla_sparse.py): 352 bytes a token; DeepSeek V3.2's geometry only
        return 352
    elem, scale = kv_element_bytes(d, model_dtype)
    latent = head_size // 2 if d == "int4_per_token_head" else head_size * elem
    # MLACommonBackend.customize_spec: per-token-head dtypes add an fp32 scale pair after the latent
    return latent + 2 * scale


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
    d = _known(kv_cache_dtype)
    attn, mla = _attention(shape), shape.mla
    if d in _SERVED or d == "auto" or not (attn or mla):
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
        if d in _FP8 and any(m.head_dim % 32 and m.head_dim % 16 == 0 for m in attn):
            return "FP8 KV cache requires head_size divisible by 32 on CPU (cpu_attn.py)"
        return None
    if mla is not None:
        return _mla_refusal(d, sparse=mla.indexer is not None, cc=_cc(compute_capability))
    if d in _DS_MLA:
        return f"kv_cache_dtype {d} is an MLA layout (FlashMLA sparse): no attention backend stores it for this model"
    if d in _NVFP4:
        return _nvfp4_refusal(d, attn, _cc(compute_capability))
    return None


def _mla_refusal(d: str, *, sparse: bool, cc: int | None) -> str | None:
    if d in _DS_MLA:
        if not sparse:
            return f"kv_cache_dtype {d} is FlashMLA sparse's layout: only sparse-MLA models (DeepSeek V3.2) take it"
        if d == "nvfp4_ds_mla" and cc is not None and cc // 10 != 10:
            return "kv_cache_dtype nvfp4_ds_mla needs an SM100-class GPU (FlashMLA sparse's NVFP4 path)"
        return None
    if d in _NVFP4:
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
    if d in _PER_TOKEN_HEAD and shape.mla is None:
        return f"KV cache {d}: only vLLM's Triton attention backend stores it (an fp32 scale per token and KV head)"
    if d in _NVFP4:
        return f"KV cache {d}: only FlashInfer stores it (fp4 values with an fp8 scale per 16, K and V apart)"
    if d in _TURBOQUANT:
        keep = "" if _is_hybrid(shape) else "; the first and last 2 layers stay in the model's dtype"
        return f"KV cache {d}: the TurboQuant backend (FlashAttention 2) packs K and V in one slot per head{keep}"
    return None


def _is_hybrid(shape: Model) -> bool:
    return bool(shape.mixer_kinds & {"linear_attention", "mamba", "mamba2", "short_conv"})


def boundary_layers(kv_cache_dtype: str, shape: Model, version: V.Version = V.LATEST) -> frozenset[int]:
    """Layers TurboQuant and UltraQuant keep in the model's dtype (TurboQuantConfig.get_boundary_skip_layers: the
    first and last 2, at most half of them; none in a hybrid since 0.21)."""
    d = kv_cache_dtype.lower()
    if d not in _TURBOQUANT and d != "ultraquant_4bit":
        return frozenset()
    if _is_hybrid(shape) and V.TQ_BOUNDARY_NOT_HYBRID.on(version):
        return frozenset()
    n = min(2, len(shape.layers) // 2)
    return frozenset(range(n)) | frozenset(range(len(shape.layers) - n, len(shape.layers)))


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


# --- bytes per token of a model ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KVPerToken:
    """KV bytes per token of context, per rank, split by layer kind."""

    full_attention: int  # bytes/token summed over full-attention (and MLA) layers
    sliding_attention: int  # bytes/token summed over sliding-window layers (each holds ≤ window tokens)
    sliding_window: int | None
    per_layer: int  # bytes/token of one attention layer (the first)
    layers_full: int
    layers_sliding: int
    mla: bool
    tensor_parallel_size: int
    kv_heads_per_rank: int
    element_bytes: int
    chunked_attention: int = 0  # bytes/token summed over chunked-local layers (each holds ≤ chunk tokens)
    attention_chunk: int | None = None
    layers_chunked: int = 0
    layers_without_kv: dict[str, int] = field(default_factory=dict)  # state mixers and shared-KV layers

    @property
    def per_token(self) -> int:
        """Every attention layer storing every token: the textbook figure."""
        return self.full_attention + self.sliding_attention + self.chunked_attention

    def bytes_for_context(self, tokens: int) -> int:
        """Bytes one sequence of `tokens` occupies: sliding and chunked layers stop growing at their span."""
        window = tokens if self.sliding_window is None else min(tokens, self.sliding_window)
        chunk = tokens if self.attention_chunk is None else min(tokens, self.attention_chunk)
        return self.full_attention * tokens + self.sliding_attention * window + self.chunked_attention * chunk

    def to_json(self) -> dict[str, object]:
        by_kind: dict[str, int] = {
            "full_attention": self.full_attention,
            "sliding_attention": self.sliding_attention,
        }
        layers: dict[str, int] = {"full_attention": self.layers_full, "sliding_attention": self.layers_sliding}
        if self.layers_chunked:
            by_kind["chunked_attention"] = self.chunked_attention
            layers["chunked_attention"] = self.layers_chunked
        return {
            "kv_bytes_per_token": self.per_token,
            "by_layer_kind": by_kind,
            "sliding_window": self.sliding_window,
            "attention_chunk_size": self.attention_chunk,
            "layers": layers,
            "layers_without_kv": dict(self.layers_without_kv),
            "per_layer_bytes_per_token": self.per_layer,
            "mla": self.mla,
            "tensor_parallel_size": self.tensor_parallel_size,
            "kv_heads_per_rank": self.kv_heads_per_rank,
            "element_bytes": self.element_bytes,
        }


def mixer_bytes_per_token(mixer: Mixer, kv_cache_dtype: str, model_dtype: str | None, tp: int = 1) -> int:
    """Bytes per token one mixer stores on one rank (0 for state mixers and layers that share another's KV)."""
    if isinstance(mixer, MLAttention):
        # one latent plus the rope key, replicated on every rank
        return mla_token_bytes(kv_cache_dtype, model_dtype, mixer.kv_elements_per_token(tp))
    if not isinstance(mixer, Attention) or mixer.shares_kv_with is not None:
        return 0
    # GQA: only KV heads are stored, split across the tensor-parallel ranks
    heads = kv_heads_per_rank(mixer.kv_heads, tp)
    return heads * attention_head_bytes(kv_cache_dtype, model_dtype, mixer.head_dim, mixer.v_dim)


def kv_per_token(shape: Model, kv_cache_dtype: str = "auto", tp: int = 1) -> KVPerToken:
    if tp < 1:
        raise ConfigError(f"must be ≥ 1, got {tp}", field="tensor_parallel_size")
    elem, _ = kv_element_bytes(kv_cache_dtype, shape.torch_dtype)
    kept = boundary_layers(kv_cache_dtype, shape)  # TurboQuant / UltraQuant: these stay in the model's dtype
    per_layer = heads = 0  # the first attention layer's bytes per token and KV heads per rank
    full = sliding = chunked = 0
    n_full = n_sliding = n_chunked = 0
    window: int | None = None
    chunk: int | None = None
    without: dict[str, int] = {}
    for i, layer in enumerate(shape.layers):
        dtype = "auto" if i in kept else kv_cache_dtype
        for m in layer.mixers:
            b = mixer_bytes_per_token(m, dtype, shape.torch_dtype, tp)
            if b and not per_layer:
                per_layer = b
                heads = kv_heads_per_rank(m.kv_heads, tp) if isinstance(m, Attention) else 1
            if not b:
                without[m.kind] = without.get(m.kind, 0) + 1
            elif isinstance(m, SlidingWindowAttention):
                sliding += b
                n_sliding += 1
                window = m.window if window is None else max(window, m.window)
            elif isinstance(m, ChunkedLocalAttention):
                chunked += b
                n_chunked += 1
                chunk = m.chunk
            else:
                full += b
                n_full += 1
    return KVPerToken(
        full_attention=full,
        sliding_attention=sliding,
        sliding_window=window,
        per_layer=per_layer,
        layers_full=n_full,
        layers_sliding=n_sliding,
        mla=shape.mla is not None,
        tensor_parallel_size=tp,
        kv_heads_per_rank=heads,
        element_bytes=elem,
        chunked_attention=chunked,
        attention_chunk=chunk,
        layers_chunked=n_chunked,
        layers_without_kv=without,
    )


def kv_dtype_notes(
    asked: str, resolved: str, shape: Model, hf_quant_config: Mapping[str, Any] | None, version: V.Version
) -> list[str]:
    """The plan's notes on its KV cache dtype: where it came from (the checkpoint, when it says anything) and the
    one backend that stores it."""
    notes: list[str] = []
    ckpt = checkpoint_kv_dtype(shape, hf_quant_config, version, asked)
    pair = {asked.lower(), ckpt.dtype if ckpt else ""}
    # said when taken, or when overridden by a dtype of another kind (fp8 asked of an fp8 checkpoint: nothing to say)
    if ckpt is not None and (ckpt.taken or not (pair <= _FP8 or pair <= _NVFP4)):
        notes.append(ckpt.note(version))
    backend = kv_backend_note(resolved, shape)
    if backend:
        notes.append(backend)
    return notes
