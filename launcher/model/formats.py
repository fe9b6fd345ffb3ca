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

from launcher.common.errors import FormatError
from launcher.common.records import dataclass
from launcher.model.arch.model import Model
from launcher.model.checkpoint import GGML_TYPES
from launcher.model.params import PARTS, Part, Tensor, tensors

FormatName = Literal[
    "fp32", "bf16", "fp16", "fp8", "int8", "q8_0", "awq", "gptq", "w4a16", "q4_k_m", "nvfp4", "mxfp4", "mxfp8",
]  # fmt: skip
FORMATS: tuple[FormatName, ...] = (
    "fp32", "bf16", "fp16", "fp8", "int8", "q8_0", "awq", "gptq", "w4a16", "q4_k_m", "nvfp4", "mxfp4", "mxfp8",
)  # fmt: skip

# Names people and vLLM use for the same thing.
ALIASES: dict[str, FormatName] = {
    "float32": "fp32", "float": "fp32", "bfloat16": "bf16", "float16": "fp16", "half": "fp16",
    "fp8_e4m3": "fp8", "modelopt": "fp8", "w8a8": "int8", "w8a8_int8": "int8", "int8_w8a8": "int8",
    "awq_marlin": "awq", "gptq_marlin": "gptq", "compressed-tensors-w4a16": "w4a16", "modelopt_fp4": "nvfp4",
    "gguf_q8_0": "q8_0", "gguf_q4_k_m": "q4_k_m", "q4km": "q4_k_m", "modelopt_mxfp8": "mxfp8",
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
    per_channel: bool = False  # fp8: one fp32 scale per output row instead of one per matrix
    input_scale: bool = True  # fp8 / NVFP4: a static fp32 input_scale beside the weight's (checkpoints hold one)
    method: str | None = None  # the checkpoint's quant_method as vLLM reads it; None: unquantized weights
    # Mixed precision: (module name, exact or "re:" pattern or class name "Linear"; its format), in match order.
    # A quantizable tensor no entry matches stays 16-bit.
    layers: tuple[tuple[str, FormatSpec], ...] = ()
    # Routed experts by their container's name (`layers.3.ffn.experts`, glob patterns, "*" for any), in match order,
    # before anything else decides: DeepSeek-V4 stores the experts in another format than its linear layers.
    experts: tuple[tuple[str, FormatSpec], ...] = ()
    lm_head: bool = False  # the lm_head is quantized like a linear layer unless excluded (ModelOpt's ParallelLMHead)
    # How `not_converted` names a module: "glob" (exact, a parent, or an fnmatch pattern) or "modelopt" (also any
    # module whose name holds the entry: ModelOpt's is_layer_excluded tests `entry in prefix`).
    exclude_match: Literal["glob", "modelopt"] = "glob"
    # Why vLLM does not read the checkpoint's quantization at all ("": it does): it then builds 16-bit layers that
    # cannot load the quantized tensors. The weights are still priced as stored.
    unread: str = ""

    def describe(self) -> str:
        if self.experts:
            parts = dict.fromkeys([self._own(), *(sub.describe() for _, sub in self.experts)])
            return f"{self.method or 'mixed'} per layer: {' + '.join(parts)}"
        return self._own()

    def _own(self) -> str:
        if self.layers:
            parts = dict.fromkeys(sub.describe() for _, sub in self.layers)
            return f"{self.method or 'mixed'} per layer: {' + '.join(parts)}"
        if self.name in ("awq", "gptq", "w4a16"):
            g = "per-channel" if self.group_size == -1 else f"group {self.group_size}"
            extra = ", act-order" if self.act_order else ""
            return f"{self.name} ({self.bits}-bit, {g}{extra})"
        if self.name == "fp8" and self.block:
            return f"fp8 (block {self.block[0]}x{self.block[1]} scales)"
        if self.name == "fp8" and self.per_channel:
            return "fp8 (per-channel scales)"
        return self.name + (" (MoE experts)" if self.experts_only and self.source == "online" else "")


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


def _ct_group(group: Mapping[str, Any], fmt: str, ignore: tuple[str, ...]) -> FormatSpec:
    """One compressed-tensors config group's format (its `weights`, and whether activations are quantized)."""
    weights: Mapping[str, Any] = group.get("weights") or {}
    acts = group.get("input_activations")
    bits = _int_field(weights, "num_bits", 8)
    wtype = str(weights.get("type") or "int")
    common: dict[str, Any] = {"not_converted": ignore, "source": "config.json", "method": "compressed-tensors"}
    if "mxfp4" in fmt:  # e2m1 pairs with a uint8 (E8M0) scale per 32 along the input (mxfp4-pack-quantized)
        return FormatSpec("mxfp4", bits=4, group_size=32, **common)
    if "nvfp4" in fmt or (wtype == "float" and bits == 4):
        return FormatSpec("nvfp4", bits=4, group_size=16, **common)
    if wtype == "float" and bits == 8:
        return FormatSpec("fp8", bits=8, **common)
    if bits == 8 and acts:
        return FormatSpec("int8", bits=8, **common)
    return FormatSpec(
        "w4a16" if acts is None else "gptq",
        bits=bits,
        group_size=_int_field(weights, "group_size", 128),
        zero_point=not bool(weights.get("symmetric", True)),
        act_order=weights.get("actorder") in ("group", "weight", True),
        **common,
    )


def _compressed_tensors(q: Mapping[str, Any]) -> FormatSpec:
    """compressed-tensors: each config group quantizes the modules its `targets` name (a class name such as
    "Linear", an exact module name, or a "re:" regex); `ignore` keeps modules unquantized. One group over
    "Linear" is one format; several groups (or narrower targets) are priced layer by layer."""
    fmt = str(q.get("format") or "")
    groups = q.get("config_groups") or {}
    ignore = tuple(str(x) for x in q.get("ignore") or ())
    found: list[tuple[tuple[str, ...], FormatSpec]] = []
    if isinstance(groups, Mapping):
        for g in groups.values():
            if isinstance(g, Mapping):
                g_fmt = str(g.get("format") or fmt)  # a group may carry its own format
                targets = tuple(str(x) for x in g.get("targets") or ("Linear",))
                found.append((targets, _ct_group(g, g_fmt, ignore)))
    if not found:
        return _ct_group({}, fmt, ignore)
    if len(found) == 1 and found[0][0] == ("Linear",):
        return found[0][1]
    layers = tuple((target, spec) for targets, spec in found for target in targets)
    first = min((spec for _, spec in found), key=lambda x: x.bits)  # named after its narrowest format
    return replace(first, layers=layers)


# ModelOpt's quant_algo per layer, as vLLM's modelopt.py LINEAR_ALGOS reads it (vLLM 0.32), and the checkpoint
# layout each writes.
_MODELOPT_METHOD = {"FP8": "modelopt", "FP8_PER_CHANNEL_PER_TOKEN": "modelopt", "FP8_PB_WO": "modelopt",
                    "NVFP4": "modelopt_fp4", "W4A16_NVFP4": "modelopt_fp4", "MXFP8": "modelopt_mxfp8",
                    "MIXED_PRECISION": "modelopt_mixed"}  # fmt: skip


def _modelopt_algo(algo: str, info: Mapping[str, Any], excluded: tuple[str, ...], source: str) -> FormatSpec:
    """The layout one ModelOpt quant_algo writes (fp32 scales unless said otherwise)."""
    common: dict[str, Any] = {"not_converted": excluded, "source": source, "method": _MODELOPT_METHOD.get(algo),
                              "lm_head": True, "exclude_match": "modelopt"}  # fmt: skip
    if algo == "FP8":  # e4m3 weights, per-tensor weight_scale and static input_scale
        return FormatSpec("fp8", bits=8, **common)
    if algo == "FP8_PER_CHANNEL_PER_TOKEN":  # a weight_scale per output row; activations scaled per token
        return FormatSpec("fp8", bits=8, per_channel=True, input_scale=False, **common)
    if algo in ("FP8_PB_WO", "FP8_BLOCK_SCALES"):  # 2-D blocks of group_size (128) with one fp32 scale each
        gs = _int_field(info, "group_size", 128)
        return FormatSpec("fp8", bits=8, block=(gs, gs), input_scale=False, **common)
    if algo in ("NVFP4", "W4A16_NVFP4"):  # e2m1 pairs, an fp8 scale per group, fp32 weight_scale_2; W4A4's input_scale
        gs = _int_field(info, "group_size", 16)
        return FormatSpec("nvfp4", bits=4, group_size=gs, input_scale=algo == "NVFP4", **common)
    if algo == "MXFP8":  # e4m3 weights with one E8M0 byte per 32
        return FormatSpec("mxfp8", bits=8, group_size=32, **common)
    raise FormatError(f"unsupported ModelOpt quant_algo {algo!r}", field="quant_algo")


def _modelopt(q: Mapping[str, Any], layers: Any, excluded: tuple[str, ...], source: str) -> FormatSpec:
    """A ModelOpt export: one quant_algo for every quantized layer, or MIXED_PRECISION with `quantized_layers`
    naming each layer's own algo (the experts of a layer listed one by one, priced together)."""
    algo = str(q.get("quant_algo") or "").upper()
    if algo != "MIXED_PRECISION":
        return _modelopt_algo(algo, q, excluded, source)
    if not isinstance(layers, Mapping) or not layers:
        raise FormatError("MIXED_PRECISION needs a non-empty quantized_layers mapping", field="quantized_layers")
    per: dict[str, FormatSpec] = {}
    for name, info in layers.items():
        if not isinstance(info, Mapping):
            raise FormatError(f"must be an object, got {info!r}", field=f"quantized_layers.{name}")
        key = _EXPERT_INDEX.sub(".experts.", f".{name}.")[1:-1]
        per.setdefault(key, _modelopt_algo(str(info.get("quant_algo") or "").upper(), info, (), source))
    subs = tuple(per.items())
    first = min((spec for _, spec in subs), key=lambda x: x.bits)
    return replace(first, not_converted=excluded, method="modelopt_mixed", layers=subs, lm_head=True,
                   exclude_match="modelopt")  # fmt: skip


# The model types whose fp8 checkpoints vLLM reads with DeepseekV4FP8Config (deepseek_v41/quant_config.py
# override_quantization_method): block-fp8 linear layers, routed experts by the config's `expert_dtype`.
DEEPSEEK_V4_TYPES = frozenset({"deepseek_v4", "deepseek_v4_text", "deepseek_v41", "deepseek_v41_text"})
# Linear layers vLLM builds without the quantization config, so they load in 16 bits whatever the checkpoint's
# method (vLLM 0.32, found by scripts/quant_oracle.py): DeepSeek-V4's compressors and its indexer's head weights,
# the DSA indexer's fused wk + weights_proj of DeepSeek-V3.2 and GLM-5.
VLLM_SIXTEEN_BIT: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(DEEPSEEK_V4_TYPES, ("*.compressor.*", "*.indexer.weights_proj")),
    "deepseek_v32": ("*.indexer.wk", "*.indexer.weights_proj"),
    "glm_moe_dsa": ("*.indexer.wk", "*.indexer.weights_proj"),
}


def _deepseek_v4(q: Mapping[str, Any], shape: Model, linear: FormatSpec) -> FormatSpec:
    """DeepSeek-V4's fp8 checkpoints as vLLM's DeepseekV4FP8Config stores them: experts in fp8 blocks where
    `expert_dtype` is fp8, else MXFP4 (e2m1 with an E8M0 scale per 32); a ModelOpt export naming `moe_quant_algo:
    NVFP4` has NVFP4 experts (group 16) but for those its `ignore` globs name (`mtp.*`), which stay MXFP4."""
    linear = replace(linear, method="deepseek_v4_fp8")
    if (shape.expert_dtype or "fp4") == "fp8":
        return linear
    mx = FormatSpec("mxfp4", bits=4, group_size=32, source="config.json", method="deepseek_v4_fp8")
    if str(q.get("moe_quant_algo") or "").upper() != "NVFP4":
        return replace(linear, experts=(("*", mx),))
    nv = FormatSpec("nvfp4", bits=4, group_size=16, source="config.json", method="modelopt_fp4")
    ignore = tuple(str(p) for p in q.get("ignore") or () if isinstance(p, str))
    return replace(linear, experts=(*((p, mx) for p in ignore), ("*", nv)))


def _unread(q: Mapping[str, Any], where: str) -> str:
    """vLLM's reason not to read a ModelOpt config it finds without a quant_method: its normalizer
    (transformers_utils/model_arch_config_convertor.py, vLLM 0.32) names the method only for a config whose
    `producer.name` is "modelopt" and whose `quantization` block names the quant_algo; any other is no
    quantization at all."""
    if str(q.get("quant_method") or ""):
        return ""
    producer = q.get("producer")
    block = q.get("quantization")
    modelopt = isinstance(producer, Mapping) and producer.get("name") == "modelopt"
    if modelopt and isinstance(block, Mapping) and block.get("quant_algo"):
        return ""
    return (
        f"vLLM reads no quantization from {where}: it names no quant_method, and vLLM takes ModelOpt's quant_algo "
        'only with "producer": {"name": "modelopt"} and a "quantization" block; it would build 16-bit layers '
        "that cannot load this checkpoint's quantized tensors (the export's own file carries both)"
    )


def detect(shape: Model, hf_quant_config: Mapping[str, Any] | None = None) -> FormatSpec:
    """The format a checkpoint is stored in, from quantization_config (or ModelOpt's hf_quant_config.json). A
    quantization config of the wrong shape (a flag where a list belongs, a block of 0) is an error naming it."""
    try:
        spec = _detect(shape, hf_quant_config)
        if spec.method is not None and shape.model_type in VLLM_SIXTEEN_BIT:
            spec = replace(spec, not_converted=(*spec.not_converted, *VLLM_SIXTEEN_BIT[shape.model_type]))
    except (TypeError, ValueError, AttributeError, IndexError, KeyError, OverflowError) as e:
        if isinstance(e, FormatError):
            raise
        raise FormatError(f"malformed: {' '.join(str(e).split())[:200]}", field="quantization_config") from e
    if spec.block is not None and not all(isinstance(b, int) and 0 < b <= 2**20 for b in spec.block):
        raise FormatError(f"must be two positive integers, got {list(spec.block)}", field="weight_block_size")
    return spec


def _detect(shape: Model, hf_quant_config: Mapping[str, Any] | None = None) -> FormatSpec:
    q = shape.quantization_config
    hfq = (hf_quant_config or {}).get("quantization") if hf_quant_config is not None else None
    hfq = hfq if isinstance(hfq, Mapping) else {}
    if q is None and hf_quant_config is not None:
        excl = tuple(str(x) for x in hfq.get("exclude_modules") or ())
        spec = _modelopt(hfq, hfq.get("quantized_layers"), excl, "hf_quant_config.json")
        return replace(spec, unread=_unread(hf_quant_config, "hf_quant_config.json"))
    if q is None:
        dt = (shape.torch_dtype or "bfloat16").lower()
        name = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}.get(dt, "bf16")
        return FormatSpec(name, source="config.json" if shape.torch_dtype else "default")  # type: ignore[arg-type]
    method = str(q.get("quant_method") or "").lower()
    not_conv = tuple(str(x) for x in (q.get("modules_to_not_convert") or ()))
    if method == "fp8":
        wb = q.get("weight_block_size")
        block = (int(wb[0]), int(wb[1])) if isinstance(wb, list) and len(wb) == 2 else None
        spec = FormatSpec("fp8", bits=8, block=block, not_converted=not_conv, source="config.json", method="fp8")
        return _deepseek_v4(q, shape, spec) if shape.model_type in DEEPSEEK_V4_TYPES else spec
    if method == "awq":
        return FormatSpec(
            "awq",
            bits=_int_field(q, "bits", _int_field(q, "w_bit", 4)),
            group_size=_int_field(q, "group_size", _int_field(q, "q_group_size", 128)),
            zero_point=bool(q.get("zero_point", True)),
            # vLLM skips a module whose name contains an entry (auto_awq.py is_layer_skipped, match_mode substring)
            not_converted=tuple(f"*{p}*" for p in not_conv),
            source="config.json",
            method="awq",
        )
    if method == "gptq":
        return FormatSpec(
            "gptq",
            bits=_int_field(q, "bits", 4),
            group_size=_int_field(q, "group_size", 128),
            act_order=bool(q.get("desc_act", False)),
            not_converted=not_conv,
            source="config.json",
            method="gptq",
        )
    if method == "mxfp4":
        return FormatSpec("mxfp4", bits=4, group_size=32, experts_only=shape.is_moe, not_converted=not_conv,
                          source="config.json", method="mxfp4")  # fmt: skip
    if method == "compressed-tensors":
        return _compressed_tensors(q)
    if not method and q.get("quant_algo"):  # ModelOpt's fields without the quant_method vLLM dispatches on
        excluded = tuple(str(x) for x in (q.get("ignore") or q.get("exclude_modules") or ()))
        spec = _modelopt(q, q.get("quantized_layers"), excluded, "config.json")
        return replace(spec, unread=_unread(q, "config.json's quantization_config"))
    if method.startswith("modelopt"):
        # ModelOpt's export names what it left unquantized in `ignore` (older exports: `exclude_modules`).
        excluded = tuple(str(x) for x in (q.get("ignore") or q.get("exclude_modules") or ())) + not_conv
        # MIXED_PRECISION: the per-layer map in config.json, else in hf_quant_config.json (older exports).
        layers = q.get("quantized_layers") or hfq.get("quantized_layers")
        return _modelopt(q, layers, excluded, "config.json")
    raise FormatError(
        f"unsupported quant_method {method!r}; pass the format explicitly ({', '.join(FORMATS)})",
        field="quantization_config.quant_method",
    )


# What vLLM makes from a 16-bit checkpoint while loading it, by --quantization value, as its online methods lay the
# weights out (vLLM 0.32 model_executor/layers/quantization/online/, and fp8.py / experts_int8.py before): which
# layers (LinearBase and routed experts, or the experts alone) and their scales. The embedding, lm_head, routers
# (built without a quant_config) and norms stay 16-bit. Scales are priced per checkpoint matrix: vLLM's fused
# qkv / gate_up modules keep one per-tensor scale for the fused matrix, 4 bytes fewer per extra shard.
ONLINE_LAYOUTS: dict[str, FormatSpec] = {
    # fp8 e4m3 weights with one fp32 weight_scale per matrix; activations are scaled dynamically (no input_scale)
    "fp8": FormatSpec("fp8", bits=8, input_scale=False, source="online"),
    "fp8_per_tensor": FormatSpec("fp8", bits=8, input_scale=False, source="online"),
    # fp8 weights with one fp32 weight_scale_inv per 128x128 block (kFp8Static128BlockSym)
    "fp8_per_block": FormatSpec("fp8", bits=8, block=(128, 128), input_scale=False, source="online"),
    # fp8 weights with one fp32 weight_scale per output row (kFp8StaticChannelSym)
    "fp8_per_channel": FormatSpec("fp8", bits=8, per_channel=True, input_scale=False, source="online"),
    # e4m3 weights with one E8M0 (uint8) scale per 32 along the input (kMxfp8Dynamic)
    "mxfp8": FormatSpec("mxfp8", bits=8, group_size=32, source="online"),
    # e2m1 pairs with one E8M0 scale per 32 along the input, linear layers and experts alike (kMxfp4Static)
    "mxfp4": FormatSpec("mxfp4", bits=4, group_size=32, source="online"),
    # int8 routed experts with one fp32 scale per output row; linear layers stay 16-bit (kInt8StaticChannelSym)
    "int8_per_channel_weight_only": FormatSpec("int8", bits=8, experts_only=True, source="online"),
    "experts_int8": FormatSpec("int8", bits=8, experts_only=True, source="online"),
    # NVFP4 routed experts: e2m1 pairs, an fp8 scale per 16, fp32 weight_scale_2 and input_scale per expert matrix
    "nvfp4_per_token": FormatSpec("nvfp4", bits=4, group_size=16, experts_only=True, source="online"),
}


# What NVIDIA's ModelOpt leaves in 16 bits when it makes a checkpoint from a 16-bit one (its standard exclusions,
# modelopt_recipes/configs/ptq/units/default_disabled_quantizers.yaml, nvidia-modelopt 0.47), the linear layers
# among them: Gated DeltaNet's 1-wide a/b projections, the shared expert's gate, the MTP layers. Routers, lm_head,
# embeddings and vision towers stay 16-bit in every format here already. AutoAWQ (modules_to_not_convert per
# family: routers and vision towers) and llm-compressor's presets (ignore: lm_head) leave nothing more.
MODELOPT_KEEPS: tuple[str, ...] = ("*linear_attn.in_proj_a*", "*linear_attn.in_proj_b*", "*mlp.shared_expert_gate*",
                                   "mtp.*")  # fmt: skip


def spec_for(name: str, shape: Model, detected: FormatSpec | None = None) -> FormatSpec:
    """A format named on the command line or in a profile; reuses the detected layout when it is the same. A
    name of vLLM's online quantization alone (fp8_per_block, …) is priced as vLLM lays it out."""
    key = name.strip().lower()
    if key in ONLINE_LAYOUTS and key not in FORMATS:
        return ONLINE_LAYOUTS[key]
    fmt = normalize_name(name)
    if detected is not None and detected.name == fmt:
        return detected
    if fmt == "mxfp8":
        return FormatSpec("mxfp8", bits=8, group_size=32, source="flag")
    if fmt == "mxfp4":
        return FormatSpec("mxfp4", bits=4, group_size=32, experts_only=shape.is_moe, source="flag")
    if fmt == "nvfp4":  # a ModelOpt checkpoint: what it leaves in 16 bits
        return FormatSpec("nvfp4", bits=4, group_size=16, source="flag", not_converted=MODELOPT_KEEPS)
    if fmt in ("fp8", "int8", "q8_0"):
        return FormatSpec(fmt, bits=8, source="flag")
    if fmt in ("awq", "gptq", "w4a16"):
        return FormatSpec(fmt, bits=4, group_size=128, zero_point=fmt == "awq", source="flag")
    return FormatSpec(fmt, source="flag")


def _module(t: Tensor) -> str:
    return t.name.rsplit(".", 1)[0]


_EXPERT_INDEX = re.compile(r"\.experts\.\d+\.")


def _regex_match(pattern: str, t: Tensor, m: str) -> bool:
    """compressed-tensors' "re:" match (re.match on the module name); an expert stack also as its expert 0."""
    try:
        rx = re.compile(pattern)
    except re.error:
        return False
    return bool(rx.match(m) or (t.role == "expert" and rx.match(m.replace(".experts.", ".experts.0.", 1))))


def _excluded(t: Tensor, patterns: tuple[str, ...], mode: str = "glob") -> bool:
    m = _module(t)
    if mode == "modelopt" and _substring_excluded(m, patterns):
        return True
    for p in patterns:
        if p.startswith("re:") and _regex_match(p[3:], t, m):
            return True
        # One expert named (experts.7.down_proj) stands for the layer's expert tensors: they are priced together.
        p = _EXPERT_INDEX.sub(".experts.", p.removeprefix("re:"))
        if m == p or m.startswith(p + ".") or fnmatchcase(m, p) or fnmatchcase(m, p + ".*"):
            return True
        # Checkpoints name the same module with or without the leading "model.".
        if not p.startswith("model.") and (m == "model." + p or m.startswith("model." + p + ".")):
            return True
    return False


def _substring_excluded(m: str, patterns: tuple[str, ...]) -> bool:
    """ModelOpt's is_layer_excluded: an entry that is part of the module's name (with or without the multimodal
    wrapper's `language_model.`), then each entry as an fnmatch wildcard."""
    names = (m, m.removeprefix("language_model."), m.removeprefix("model."))
    return any(p and "*" not in p and any(p in n for n in names) for p in patterns)


def _is_matrix(t: Tensor, spec: FormatSpec | None = None) -> bool:
    """A linear or expert weight matrix (experts may be one 3-D stack); the lm_head where the format quantizes it."""
    matrix = len(t.shape) == 2 or (t.role == "expert" and len(t.shape) == 3)
    roles = ("linear", "expert", "lm_head") if spec is not None and spec.lm_head else ("linear", "expert")
    return t.role in roles and matrix


# vLLM's fused modules and the checkpoint shards they are loaded from (packed_modules_mapping).
_FUSED = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}


class _Layers:
    """A mixed-precision spec's per-layer formats, looked up by a tensor's module name as vLLM's ModelOpt and
    compressed-tensors configs do: the exact name (with or without the multimodal wrapper's prefix), the
    shards of a fused module, the layer's experts by their container, then "re:" patterns and the "Linear"
    class."""

    def __init__(self, spec: FormatSpec) -> None:
        self.exact = {k: v for k, v in spec.layers if not k.startswith("re:") and k != "Linear"}
        self.patterns = [(k[3:], v) for k, v in spec.layers if k.startswith("re:")]
        self.linear = next((v for k, v in spec.layers if k == "Linear"), None)
        self.containers: dict[str, FormatSpec] = {}
        for k, v in spec.layers:
            if ".experts." in k:  # one expert's module (experts.7.w1): vLLM's prefix lookup finds it for the stack
                self.containers.setdefault(k[: k.index(".experts.") + len(".experts")], v)
            elif k.endswith(".experts"):  # the layer's experts named as one container (layers.3.ffn.experts)
                self.containers.setdefault(k, v)

    def _named(self, m: str) -> FormatSpec | None:
        for c in (
            m,
            m.removeprefix("model."),
            "model." + m,
            m.replace("model.language_model.", "language_model.model."),
        ):
            if c in self.exact:
                return self.exact[c]
        return None

    def find(self, t: Tensor) -> tuple[FormatSpec | None, bool]:
        """(the tensor's format, named explicitly) or (None, False)."""
        m = _module(t)
        hit = self._named(m)
        parent, _, leaf = m.rpartition(".")
        if hit is None and leaf in _FUSED:
            hit = next((s for s in (self._named(f"{parent}.{x}") for x in _FUSED[leaf]) if s), None)
        if hit is None and t.role == "expert" and ".experts" in m:
            box = m[: m.index(".experts") + len(".experts")]
            hit = next(
                (self.containers[c] for c in (box, "model." + box, box.removeprefix("model.")) if c in self.containers),
                None,
            )
        if hit is None:
            hit = next((v for p, v in self.patterns if _regex_match(p, t, m)), None)
        if hit is not None:
            return hit, True
        return self.linear, False


def _tensor_spec(t: Tensor, spec: FormatSpec, index: _Layers | None) -> FormatSpec | None:
    """The format that quantizes this tensor, or None when it stays in its own dtype."""
    if spec.experts and t.role == "expert":
        return _expert_rule(t, spec) if _is_matrix(t) and not _excluded(t, spec.not_converted) else None
    if index is None:
        return spec if _quantizable(t, spec) else None
    if not _is_matrix(t, spec) or _excluded(t, spec.not_converted, spec.exclude_match):
        return None
    sub, named = index.find(t)
    if sub is None or (sub.experts_only and t.role != "expert"):
        return None
    return sub if named or t.part != "vision" else None  # a layer named explicitly is quantized wherever it is


def _expert_rule(t: Tensor, spec: FormatSpec) -> FormatSpec:
    """A routed expert's format by its container's name (`layers.3.ffn.experts`), the first rule that matches."""
    m = _module(t)
    box = m[: m.index(".experts") + len(".experts")] if ".experts" in m else m
    return next((sub for p, sub in spec.experts if p == "*" or fnmatchcase(box, p)), spec)


def _quantizable(t: Tensor, spec: FormatSpec) -> bool:
    """Does this format quantize this tensor? Only 2-D linear weights, and not what the checkpoint excludes."""
    if not _is_matrix(t, spec):
        return False
    if spec.experts_only and t.role != "expert":
        return False
    if t.part == "vision":
        return False  # vision towers ship unquantized in the common quantized checkpoints
    return not _excluded(t, spec.not_converted, spec.exclude_match)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _quantized_bytes(t: Tensor, spec: FormatSpec, shard: bool = False) -> int:
    """Bytes of one quantized linear weight (all `copies`), packed values plus its scales. `shard`: a later shard of
    a module vLLM fuses while quantizing it online, whose per-matrix scalars the first shard's matrix holds."""
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
        if spec.per_channel:
            return (n + out_f * 4) * t.copies  # 1 B per weight + one fp32 weight_scale per output row
        # 1 B per weight + an fp32 per-tensor weight_scale (+ a static fp32 input_scale where the checkpoint has one)
        return (n + (0 if shard else 4 + (4 if spec.input_scale else 0))) * t.copies
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
        # 4-bit e2m1 values, one fp8 scale per group (16) of weights, an fp32 global weight_scale_2, and (W4A4)
        # an fp32 input_scale.
        scalars = 0 if shard else 4 + (4 if spec.input_scale else 0)
        return (n // 2 + _cdiv(in_f, g) * out_f + scalars) * t.copies
    if name == "mxfp8":
        return (n + _cdiv(in_f, 32) * out_f) * t.copies  # 1 B per e4m3 weight + one E8M0 byte per 32 weights
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
    if full is not None and not spec.layers:
        return [t.numel * (t.stored_bytes or full) if t.in_checkpoint else 0 for t in ts]
    index = _Layers(spec) if spec.layers else None
    shards = _fused_shards(ts) if spec.source == "online" else frozenset()
    out: list[int] = []
    for t in ts:
        sub = _tensor_spec(t, spec, index) if t.in_checkpoint else None
        size = _quantized_bytes(t, sub, t.name in shards) if sub else t.numel * (t.stored_bytes or 2)
        out.append(size if t.in_checkpoint else 0)
    return out


def _fused_shards(ts: list[Tensor]) -> frozenset[str]:
    """Tensors vLLM loads into the module of an earlier shard (k/v into qkv_proj, up into gate_up_proj, an expert's
    up into its w13): online quantization scales the fused matrix as one."""
    names = {t.name for t in ts}
    out = set()
    for t in ts:
        parent, _, leaf = t.name.removesuffix(".weight").rpartition(".")
        for fused, first in (("k_proj", "q_proj"), ("v_proj", "q_proj"), ("up_proj", "gate_proj")):
            if leaf == fused and f"{parent}.{first}.weight" in names:
                out.add(t.name)
    return frozenset(out)


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
    plain = spec.name in ("fp32", "bf16", "fp16") and not spec.layers
    index = _Layers(spec) if spec.layers else None
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
            if _tensor_spec(t, spec, index):
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
