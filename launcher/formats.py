"""Storage formats: bytes per weight tensor, scales and zero points included.

Pure arithmetic over params.Tensor. Each format says which tensors it quantizes (the big linear layers, or
only the experts) and which it keeps in 16 bits (embedding, lm_head, norms, biases, routers), and prices the
quantized ones with their real layout: packed integers plus the per-group scales the kernels read.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import field, replace
from fnmatch import fnmatchcase
from typing import Any, Literal

from launcher.arch.model import Model
from launcher.checkpoint import GGML_TYPES
from launcher.errors import FormatError
from launcher.params import PARTS, Part, Tensor, tensors
from launcher.records import dataclass

FormatName = Literal[
    "fp32", "bf16", "fp16", "fp8", "int8", "q8_0", "awq", "gptq", "w4a16", "q4_k_m", "nvfp4", "mxfp4",
]  # fmt: skip
FORMATS: tuple[FormatName, ...] = (
    "fp32", "bf16", "fp16", "fp8", "int8", "q8_0", "awq", "gptq", "w4a16", "q4_k_m", "nvfp4", "mxfp4",
)  # fmt: skip

# Names people and vLLM use for the same thing.
ALIASES: dict[str, FormatName] = {
    "float32": "fp32", "float": "fp32", "bfloat16": "bf16", "float16": "fp16", "half": "fp16",
    "fp8_e4m3": "fp8", "modelopt": "fp8", "w8a8": "int8", "w8a8_int8": "int8", "int8_w8a8": "int8",
    "awq_marlin": "awq", "gptq_marlin": "gptq", "compressed-tensors-w4a16": "w4a16", "modelopt_fp4": "nvfp4",
    "gguf_q8_0": "q8_0", "gguf_q4_k_m": "q4_k_m", "q4km": "q4_k_m",
}  # fmt: skip

# ggml block layouts by type name: (weights per block, bytes per block).
GGML_BLOCKS: dict[str, tuple[int, int]] = {name: (block, size) for name, block, size in GGML_TYPES.values()}
# llama.cpp falls back to a 32-block type when a row is not a multiple of the 256-weight K-quant super-block.
_K_FALLBACK = {"Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}


@dataclass(frozen=True)
class FormatSpec:
    """A storage format with the parameters that change its size."""

    name: FormatName
    bits: int = 16  # integer formats: bits per quantized weight
    group_size: int = 128  # weights sharing one scale along the input dimension (-1: one per output row)
    zero_point: bool = True  # asymmetric integer formats store a zero per group
    act_order: bool = False  # GPTQ desc_act: a g_idx row permutation is stored
    block: tuple[int, int] | None = None  # fp8 block-wise scales (DeepSeek, Qwen3-FP8): one fp32 per block
    not_converted: tuple[str, ...] = ()  # module name patterns the checkpoint keeps unquantized
    experts_only: bool = False  # MXFP4 in gpt-oss: only the routed experts are quantized
    source: str = "default"  # where the format came from: config.json, flag, default

    def describe(self) -> str:
        if self.name in ("awq", "gptq", "w4a16"):
            g = "per-channel" if self.group_size == -1 else f"group {self.group_size}"
            extra = ", act-order" if self.act_order else ""
            return f"{self.name} ({self.bits}-bit, {g}{extra})"
        if self.name == "fp8" and self.block:
            return f"fp8 (block {self.block[0]}x{self.block[1]} scales)"
        return self.name


@dataclass(frozen=True)
class WeightBytes:
    format: str
    total_bytes: int
    params: int
    quantized_params: int
    bytes_by_part: dict[Part, int]
    kept_16bit: tuple[str, ...]
    gguf_types: dict[str, int] = field(default_factory=dict)  # GGUF mixes: params per ggml type
    kept_f32: tuple[str, ...] = ()  # GGUF keeps 1-D tensors (norms, biases) and routers in F32

    @property
    def bits_per_weight(self) -> float:
        return self.total_bytes * 8 / self.params if self.params else 0.0

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "format": self.format,
            "bytes": self.total_bytes,
            "bits_per_weight": round(self.bits_per_weight, 4),
            "params": self.params,
            "quantized_params": self.quantized_params,
            "bytes_by_part": {k: v for k, v in self.bytes_by_part.items() if v},
            "kept_16bit": list(self.kept_16bit),
            "source": "estimate",
        }
        if self.gguf_types:
            out["gguf_types"] = dict(self.gguf_types)
            out["kept_f32"] = list(self.kept_f32)
        return out


def normalize_name(name: str) -> FormatName:
    key = name.strip().lower()
    if key in FORMATS:
        return key
    if key in ALIASES:
        return ALIASES[key]
    raise FormatError(f"unknown format {name!r}; known: {', '.join(FORMATS)}", field="format")


def _int_field(q: Mapping[str, Any], key: str, default: int) -> int:
    v = q.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise FormatError(f"must be an integer, got {v!r}", field=f"quantization_config.{key}")
    return v


def _compressed_tensors(q: Mapping[str, Any]) -> FormatSpec:
    fmt = str(q.get("format") or "")
    groups = q.get("config_groups") or {}
    weights: Mapping[str, Any] = {}
    acts: Any = None
    if isinstance(groups, Mapping) and groups:
        first = next(iter(groups.values()))
        if isinstance(first, Mapping):
            weights = first.get("weights") or {}
            acts = first.get("input_activations")
    ignore = tuple(str(x) for x in q.get("ignore") or ())
    bits = _int_field(weights, "num_bits", 8)
    wtype = str(weights.get("type") or "int")
    if "nvfp4" in fmt or (wtype == "float" and bits == 4):
        return FormatSpec("nvfp4", bits=4, group_size=16, not_converted=ignore, source="config.json")
    if wtype == "float" and bits == 8:
        return FormatSpec("fp8", bits=8, not_converted=ignore, source="config.json")
    if bits == 8 and acts:
        return FormatSpec("int8", bits=8, not_converted=ignore, source="config.json")
    gs = _int_field(weights, "group_size", 128)
    return FormatSpec(
        "w4a16" if acts is None else "gptq",
        bits=bits,
        group_size=gs,
        zero_point=not bool(weights.get("symmetric", True)),
        act_order=weights.get("actorder") in ("group", "weight", True),
        not_converted=ignore,
        source="config.json",
    )


def detect(shape: Model, hf_quant_config: Mapping[str, Any] | None = None) -> FormatSpec:
    """The format a checkpoint is stored in, from quantization_config (or ModelOpt's hf_quant_config.json). A
    quantization config of the wrong shape (a flag where a list belongs, a block of 0) is an error naming it."""
    try:
        spec = _detect(shape, hf_quant_config)
    except (TypeError, ValueError, AttributeError, IndexError, KeyError, OverflowError) as e:
        if isinstance(e, FormatError):
            raise
        raise FormatError(f"malformed: {' '.join(str(e).split())[:200]}", field="quantization_config") from e
    if spec.block is not None and not all(isinstance(b, int) and 0 < b <= 2**20 for b in spec.block):
        raise FormatError(f"must be two positive integers, got {list(spec.block)}", field="weight_block_size")
    return spec


def _detect(shape: Model, hf_quant_config: Mapping[str, Any] | None = None) -> FormatSpec:
    q = shape.quantization_config
    if q is None and hf_quant_config is not None:
        algo = str((hf_quant_config.get("quantization") or {}).get("quant_algo") or "").upper()
        excl = tuple((hf_quant_config.get("quantization") or {}).get("exclude_modules") or ())
        if algo == "FP8":
            return FormatSpec("fp8", bits=8, not_converted=excl, source="hf_quant_config.json")
        if algo == "NVFP4":
            return FormatSpec("nvfp4", bits=4, group_size=16, not_converted=excl, source="hf_quant_config.json")
        raise FormatError(f"unsupported ModelOpt quant_algo {algo!r}", field="quantization.quant_algo")
    if q is None:
        dt = (shape.torch_dtype or "bfloat16").lower()
        name = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}.get(dt, "bf16")
        return FormatSpec(name, source="config.json" if shape.torch_dtype else "default")  # type: ignore[arg-type]
    method = str(q.get("quant_method") or "").lower()
    not_conv = tuple(str(x) for x in (q.get("modules_to_not_convert") or ()))
    if method == "fp8":
        wb = q.get("weight_block_size")
        block = (int(wb[0]), int(wb[1])) if isinstance(wb, list) and len(wb) == 2 else None
        return FormatSpec("fp8", bits=8, block=block, not_converted=not_conv, source="config.json")
    if method == "awq":
        return FormatSpec(
            "awq",
            bits=_int_field(q, "bits", _int_field(q, "w_bit", 4)),
            group_size=_int_field(q, "group_size", _int_field(q, "q_group_size", 128)),
            zero_point=bool(q.get("zero_point", True)),
            not_converted=not_conv,
            source="config.json",
        )
    if method == "gptq":
        return FormatSpec(
            "gptq",
            bits=_int_field(q, "bits", 4),
            group_size=_int_field(q, "group_size", 128),
            act_order=bool(q.get("desc_act", False)),
            not_converted=not_conv,
            source="config.json",
        )
    if method == "mxfp4":
        return FormatSpec("mxfp4", bits=4, group_size=32, experts_only=shape.is_moe, not_converted=not_conv,
                          source="config.json")  # fmt: skip
    if method == "compressed-tensors":
        return _compressed_tensors(q)
    if method in ("modelopt", "modelopt_fp4"):
        algo = str(q.get("quant_algo") or "").upper()
        # ModelOpt's export names what it left unquantized in `ignore` (older exports: `exclude_modules`).
        excluded = tuple(str(x) for x in (q.get("ignore") or q.get("exclude_modules") or ())) + not_conv
        return FormatSpec("nvfp4" if "FP4" in algo else "fp8", bits=4 if "FP4" in algo else 8,
                          group_size=16, not_converted=excluded, source="config.json")  # fmt: skip
    raise FormatError(
        f"unsupported quant_method {method!r}; pass the format explicitly ({', '.join(FORMATS)})",
        field="quantization_config.quant_method",
    )


def spec_for(name: str, shape: Model, detected: FormatSpec | None = None) -> FormatSpec:
    """A format named on the command line or in a profile; reuses the detected layout when it is the same."""
    fmt = normalize_name(name)
    if detected is not None and detected.name == fmt:
        return detected
    if fmt == "mxfp4":
        return FormatSpec("mxfp4", bits=4, group_size=32, experts_only=shape.is_moe, source="flag")
    if fmt == "nvfp4":
        return FormatSpec("nvfp4", bits=4, group_size=16, source="flag")
    if fmt in ("fp8", "int8", "q8_0"):
        return FormatSpec(fmt, bits=8, source="flag")
    if fmt in ("awq", "gptq", "w4a16"):
        return FormatSpec(fmt, bits=4, group_size=128, zero_point=fmt == "awq", source="flag")
    return FormatSpec(fmt, source="flag")


def _module(t: Tensor) -> str:
    return t.name.rsplit(".", 1)[0]


_EXPERT_INDEX = re.compile(r"\.experts\.\d+\.")


def _excluded(t: Tensor, patterns: tuple[str, ...]) -> bool:
    m = _module(t)
    for p in patterns:
        # One expert named (experts.7.down_proj) stands for the layer's expert tensors: they are priced together.
        p = _EXPERT_INDEX.sub(".experts.", p.removeprefix("re:"))
        if m == p or m.startswith(p + ".") or fnmatchcase(m, p) or fnmatchcase(m, p + ".*"):
            return True
        # Checkpoints name the same module with or without the leading "model.".
        if not p.startswith("model.") and (m == "model." + p or m.startswith("model." + p + ".")):
            return True
    return False


def _quantizable(t: Tensor, spec: FormatSpec) -> bool:
    """Does this format quantize this tensor? Only 2-D linear weights, and not what the checkpoint excludes."""
    matrix = len(t.shape) == 2 or (t.role == "expert" and len(t.shape) == 3)  # experts may be one 3-D stack
    if t.role not in ("linear", "expert") or not matrix:
        return False
    if spec.experts_only and t.role != "expert":
        return False
    if t.part == "vision":
        return False  # vision towers ship unquantized in the common quantized checkpoints
    return not _excluded(t, spec.not_converted)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _quantized_bytes(t: Tensor, spec: FormatSpec) -> int:
    """Bytes of one quantized linear weight (all `copies`), packed values plus its scales."""
    *stack, out_f, in_f = t.shape
    if stack:  # experts stacked in one tensor: each quantized as its own matrix
        t = replace(t, shape=(out_f, in_f), copies=t.copies * stack[0])
    n = out_f * in_f
    g = in_f if spec.group_size == -1 else spec.group_size
    groups = _cdiv(in_f, g) * out_f  # scale groups run along the input dimension, one set per output row
    name = spec.name
    if name == "fp8":
        if spec.block:
            bo, bi = spec.block
            scales = _cdiv(out_f, bo) * _cdiv(in_f, bi) * 4  # one fp32 weight_scale_inv per block
            return (n + scales) * t.copies
        return (n + 4 + 4) * t.copies  # 1 B per weight + fp32 per-tensor weight_scale and input_scale
    if name == "int8":
        return (n + out_f * 4) * t.copies  # 1 B per weight + one fp32 scale per output channel
    if name in ("awq", "gptq"):
        packed = n * spec.bits // 8  # ints packed into int32 words
        scales = groups * 2  # fp16 scale per group
        zeros = groups * spec.bits // 8 if spec.zero_point or name == "gptq" else 0  # packed zero per group
        g_idx = in_f * 4 if name == "gptq" else 0  # GPTQ stores an int32 group index per input row
        return (packed + scales + zeros + g_idx) * t.copies
    if name == "w4a16":
        packed = n * spec.bits // 8
        scales = groups * 2  # bf16 weight_scale per group
        zeros = groups * spec.bits // 8 if spec.zero_point else 0
        g_idx = in_f * 4 if spec.act_order else 0
        return (packed + scales + zeros + g_idx + 16) * t.copies  # + int64[2] weight_shape
    if name == "nvfp4":
        # 4-bit e2m1 values, one fp8 scale per 16 weights, fp32 global weight_scale_2 and input_scale.
        return (n // 2 + _cdiv(in_f, 16) * out_f + 4 + 4) * t.copies
    if name == "mxfp4":
        # 4-bit values in 32-weight blocks, each with one 8-bit power-of-two (E8M0) scale.
        return (n // 2 + _cdiv(in_f, 32) * out_f) * t.copies
    raise AssertionError(name)


def _use_more_bits(i: int, n: int) -> bool:
    """llama.cpp's rule for which layers of a _M mix get the bigger type."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def _ggml_bytes(numel: int, row: int, ggml_type: str) -> tuple[str, int]:
    if ggml_type in _K_FALLBACK and row % 256:
        ggml_type = _K_FALLBACK[ggml_type]
    per, size = GGML_BLOCKS[ggml_type]
    return ggml_type, numel // per * size


def _gguf_type(t: Tensor, fmt: FormatName, shape: Model) -> str:
    if len(t.shape) == 1 or t.role in ("norm", "bias", "sink", "router"):
        return "F32"  # llama.cpp keeps 1-D tensors, and the MoE router (ffn_gate_inp), in F32
    if fmt == "q8_0":
        return "Q8_0"
    # Q4_K_M, as llama.cpp's llama_tensor_get_type assigns it.
    kind = t.gguf or ""
    eight_experts = shape.moe is not None and shape.moe.num_experts == 8
    if kind == "output" or (kind == "token_embd" and shape.tied_embeddings):
        return "Q6_K"  # with no output tensor, llama.cpp gives token_embd the output's type
    if kind == "attn_v":
        if eight_experts:
            return "Q8_0"
        return "Q6_K" if _use_more_bits(t.layer or 0, shape.num_layers) else "Q4_K"
    if kind.startswith("ffn_down"):
        return "Q6_K" if _use_more_bits(t.layer or 0, shape.num_layers) else "Q4_K"
    if kind == "attn_k" and eight_experts:
        return "Q8_0"
    if kind == "attn_output" and eight_experts:
        return "Q5_K"
    if kind == "attn_qkv":
        return "Q5_K"
    return "Q4_K"


def _gguf_bytes(ts: list[Tensor], fmt: FormatName, shape: Model) -> tuple[list[int], dict[str, int]]:
    sizes: list[int] = []
    types: dict[str, int] = {}
    for t in ts:
        if not t.in_checkpoint:
            sizes.append(0)
            continue
        if t.part == "vision":
            sizes.append(t.numel * 2)  # llama.cpp ships the vision tower as a separate mmproj file, 16-bit
            continue
        row = t.shape[-1] if t.shape else 1  # a scalar parameter (apertus' xIELU alphas) is one F32 value
        gt, b = _ggml_bytes(t.numel, row, _gguf_type(t, fmt, shape))
        sizes.append(b)
        types[gt] = types.get(gt, 0) + t.numel
    return sizes, types


def tensor_bytes(shape: Model, spec: FormatSpec, ts: list[Tensor]) -> list[int]:
    """Bytes of each tensor in this format, in the order of `ts`."""
    if spec.name in ("q8_0", "q4_k_m"):
        return _gguf_bytes(ts, spec.name, shape)[0]
    full = {"fp32": 4, "bf16": 2, "fp16": 2}.get(spec.name)
    if full is not None:
        return [t.numel * (t.stored_bytes or full) if t.in_checkpoint else 0 for t in ts]
    return [
        0
        if not t.in_checkpoint
        else _quantized_bytes(t, spec)
        if _quantizable(t, spec)
        else t.numel * (t.stored_bytes or 2)
        for t in ts
    ]


def weight_bytes(shape: Model, spec: FormatSpec, ts: list[Tensor] | None = None) -> WeightBytes:
    """Bytes of every weight in this format, by part, with the tensors the format keeps in 16 bits."""
    ts = tensors(shape) if ts is None else ts
    by_part: dict[Part, int] = dict.fromkeys(PARTS, 0)
    kept: set[str] = set()
    kept_f32: set[str] = set()
    quantized = 0
    gguf_types: dict[str, int] = {}
    gguf = spec.name in ("q8_0", "q4_k_m")
    if gguf:
        sizes, gguf_types = _gguf_bytes(ts, spec.name, shape)
    else:
        sizes = tensor_bytes(shape, spec, ts)
    plain = spec.name in ("fp32", "bf16", "fp16")
    for t, b in zip(ts, sizes, strict=True):
        by_part[t.part] += b
        if gguf:
            if t.part == "vision":
                kept.add("vision tower")
            elif t.role in ("linear", "expert", "embedding", "lm_head"):
                quantized += t.numel
            else:
                kept_f32.add(_kept_label(t))
        elif not plain:
            if _quantizable(t, spec):
                quantized += t.numel
            else:
                kept.add(_kept_label(t))
    return WeightBytes(
        format=spec.describe(),
        total_bytes=sum(by_part.values()),
        params=sum(t.numel for t in ts if t.is_parameter),
        quantized_params=quantized,
        bytes_by_part=by_part,
        kept_16bit=tuple(sorted(kept)),
        gguf_types=gguf_types,
        kept_f32=tuple(sorted(kept_f32)),
    )


_KEPT_LABELS = {
    "norm": "norms", "bias": "biases", "sink": "attention sinks", "conv": "conv weights", "state": "SSM parameters",
    "position": "position tables", "buffer": "buffers",
}  # fmt: skip


def _kept_label(t: Tensor) -> str:
    if t.part == "vision":
        return "vision tower"
    if t.role in ("embedding", "lm_head", "router"):
        return t.role
    return _KEPT_LABELS.get(t.role, t.part)
