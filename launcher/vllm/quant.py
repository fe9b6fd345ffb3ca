"""Which weight formats vLLM serves, where: its `--quantization` methods per release, what it makes from a 16-bit
checkpoint at load time, whether a checkpoint takes the method a user names, the GPU each needs, and the
model_types its GGUF loader maps.

Pure data and rules over them. `resolve` is the one entry point: the format a plan prices its weights in, the
exact `--quantization` value the command carries, and vLLM's own reason not to start (or None).
"""

from __future__ import annotations

from functools import cache

from launcher.common.errors import FormatError
from launcher.common.records import dataclass
from launcher.model.arch.model import Model
from launcher.model.formats import FORMATS, ONLINE_LAYOUTS, FormatName, FormatSpec, normalize_name, spec_for
from launcher.vllm import versions as V

# vLLM's `--quantization` choices by release: the first list, then what each release added and removed
# (vllm/model_executor/layers/quantization/__init__.py: QUANTIZATION_METHODS up to 0.8, the QuantizationMethods
# Literal after; read from each release's wheel, 0.7.0 … 0.34.0).
METHOD_HISTORY: tuple[tuple[V.Version, tuple[str, ...], tuple[str, ...]], ...] = (
    ((0, 7, 0), ("aqlm", "awq", "deepspeedfp", "tpu_int8", "fp8", "fbgemm_fp8", "modelopt", "marlin", "gguf",
                 "gptq_marlin_24", "gptq_marlin", "awq_marlin", "gptq", "compressed-tensors", "bitsandbytes", "qqq",
                 "hqq", "experts_int8", "neuron_quant", "ipex", "quark"), ()),
    ((0, 8, 0), ("ptpc_fp8", "nvfp4", "moe_wna16"), ()),
    ((0, 9, 0), ("modelopt_fp4", "bitblas", "gptq_bitblas", "torchao", "auto-round"), ("nvfp4",)),
    ((0, 10, 0), ("rtn", "inc"), ()),
    ((0, 10, 1), ("mxfp4",), ("aqlm",)),
    ((0, 10, 2), ("petit_nvfp4",), ("marlin", "qqq", "neuron_quant")),
    ((0, 12, 0), ("fp_quant", "cpu_gptq", "cpu_awq"), ()),
    ((0, 14, 0), (), ("tpu_int8", "cpu_gptq")),
    ((0, 15, 0), (), ("deepspeedfp", "hqq", "auto-round", "rtn")),
    ((0, 16, 0), ("modelopt_mxfp8",), ("bitblas", "gptq_marlin_24", "gptq_bitblas", "ipex")),
    ((0, 17, 0), ("modelopt_mixed",), ()),
    ((0, 19, 0), ("mxfp8",), ("ptpc_fp8",)),
    ((0, 20, 0), ("humming", "gpt_oss_mxfp4", "deepseek_v4_fp8", "online", "fp8_per_tensor", "fp8_per_block",
                  "int8_per_channel_weight_only"), ("petit_nvfp4",)),
    ((0, 22, 0), ("auto_gptq",), ()),
    ((0, 23, 0), (), ("cpu_awq",)),
    ((0, 24, 0), ("auto_awq", "fp8_per_channel"), ("gguf",)),
    ((0, 26, 0), ("nvfp4_per_token",), ()),
    ((0, 28, 0), (), ("bitsandbytes",)),
    ((0, 34, 0), ("w4afp8", "lut_b_moe", "mxfp4_hadamard32"), ("fp_quant",)),
)  # fmt: skip
ALL_METHODS: frozenset[str] = frozenset(m for _, added, _ in METHOD_HISTORY for m in added)


@cache
def methods(version: V.Version) -> frozenset[str]:
    """vLLM's `--quantization` choices at this release."""
    out: set[str] = set()
    for since, added, removed in METHOD_HISTORY:
        if version >= since:
            out = (out | set(added)) - set(removed)
    return frozenset(out)


# What vLLM makes from a 16-bit checkpoint while loading it, by `--quantization` value, from the release it does so
# (priced by formats.ONLINE_LAYOUTS): Fp8Config and ExpertsInt8Config quantize unquantized weights (fp8.py,
# experts_int8.py); Mxfp8Config (0.19, mxfp8.py); the online shorthands (vllm/config/quantization.py
# OnlineQuantScheme in 0.20, _ONLINE_SHORTHANDS from 0.22); "mxfp4" without checkpoint metadata
# (_DEFERRED_ONLINE_SHORTHANDS, 0.28).
ONLINE_SINCE: dict[str, V.Version] = {
    "fp8": (0, 7, 0), "experts_int8": (0, 7, 0), "mxfp8": (0, 19, 0), "fp8_per_tensor": (0, 20, 0),
    "fp8_per_block": (0, 20, 0), "int8_per_channel_weight_only": (0, 20, 0), "fp8_per_channel": (0, 24, 0),
    "nvfp4_per_token": (0, 26, 0), "mxfp4": (0, 28, 0),
}  # fmt: skip
# Methods vLLM also applies to a 16-bit checkpoint at load time whose layout vlaunch does not price: in-flight
# bitsandbytes, round-to-nearest, DeepSpeed FP, ROCm's PTPC FP8, TPU int8, torchao, humming, and 0.34's new
# shorthands.
UNPRICED_ONLINE: frozenset[str] = frozenset({
    "bitsandbytes", "rtn", "deepspeedfp", "ptpc_fp8", "tpu_int8", "torchao", "humming", "mxfp4_hadamard32",
    "lut_b_moe",
})  # fmt: skip
# Methods whose config vLLM looks for in a file beside the weights (get_config_filenames): on a 16-bit checkpoint
# it stops with "Cannot find the config file for <method>" (model_loader/weight_utils.py get_quant_config).
CONFIG_FILE_METHODS: frozenset[str] = frozenset({
    "awq", "awq_marlin", "auto_awq", "gptq", "gptq_marlin", "auto_gptq", "marlin", "gptq_marlin_24", "moe_wna16",
    "modelopt", "modelopt_fp4", "modelopt_mxfp8", "modelopt_mixed", "inc", "gptq_bitblas",
})  # fmt: skip
# The --quantization values vLLM takes on an AWQ / GPTQ checkpoint (each override_quantization_method: auto_awq /
# awq_marlin, auto_gptq / gptq_marlin accept these, the plain method matches itself).
AWQ_NAMES = frozenset({"awq", "awq_marlin", "auto_awq", "marlin"})
GPTQ_NAMES = frozenset({"gptq", "gptq_marlin", "auto_gptq", "marlin", "gptq_bitblas"})
# ModelOpt checkpoints: override_quantization_method returns the checkpoint's own method whatever the user named
# (modelopt.py, vLLM 0.32), so vLLM serves them under any --quantization (quant_algo FP8, NVFP4, MXFP8, MIXED).
MODELOPT_OVERRIDES = frozenset({"modelopt", "modelopt_fp4", "modelopt_mxfp8", "modelopt_mixed"})
# vLLM's normalizer of a ModelOpt hf_quant_config.json (no quantization_config in config.json) knows FP8 and NVFP4,
# and MIXED_PRECISION from 0.33; any other algo stops it with "Unknown ModelOpt quant algo"
# (transformers_utils/model_arch_config_convertor.py _normalize_quantization_config).
HF_QUANT_FILE_MIXED = (0, 33, 0)

# vLLM's quantization method per vlaunch format, and the minimum CUDA compute capability its QuantizationConfig
# declares (get_min_capability, vLLM 0.32): vLLM refuses a GPU below it at start-up.
METHODS: dict[FormatName, tuple[str, int, str]] = {
    "fp8": ("fp8", 75, "quantization/fp8.py Fp8Config (Marlin FP8 below SM89)"),
    "int8": ("compressed-tensors", 70, "quantization/compressed_tensors/compressed_tensors.py"),
    "awq": ("awq", 75, "quantization/auto_awq.py AutoAWQConfig"),
    "gptq": ("gptq", 60, "quantization/auto_gptq.py AutoGPTQConfig"),
    "w4a16": ("compressed-tensors", 70, "quantization/compressed_tensors/compressed_tensors.py"),
    "nvfp4": ("modelopt_fp4", 75, "quantization/modelopt.py ModelOptNvFp4Config (Marlin W4A16 below SM100)"),
    "mxfp4": ("mxfp4", 80, "quantization/mxfp4.py Mxfp4Config"),
    "mxfp8": ("modelopt_mxfp8", 80, "quantization/modelopt.py ModelOptMxFp8Config"),
    "q8_0": ("gguf", 60, "quantization/gguf.py GGUFConfig (vLLM ≤ 0.23)"),
    "q4_k_m": ("gguf", 60, "quantization/gguf.py GGUFConfig (vLLM ≤ 0.23)"),
}
# The online methods' own minimum: OnlineQuantizationConfig 75 (online/base.py), ExpertsInt8Config 80, 0.19's
# Mxfp8Config 100; nvfp4_per_token runs on Blackwell SM10x alone (online/nvfp4.py is_device_capability_family).
ONLINE_CAPABILITY: dict[str, int] = {"experts_int8": 80, "mxfp8": 75, "nvfp4_per_token": 100}
SIXTEEN_BIT: frozenset[FormatName] = frozenset({"bf16", "fp16", "fp32"})
GGUF: frozenset[FormatName] = frozenset({"q8_0", "q4_k_m"})

# model_types vLLM 0.23's GGUF loader maps to a llama.cpp architecture (gguf_loader._get_gguf_weights_map: the
# names of gguf-py's MODEL_ARCH_NAMES, after its renames cohere→command-r, gemma3_text→gemma3,
# deepseek_v2/v3→deepseek2, qwen2_moe/qwen3_moe→qwen2moe/qwen3moe, minimax_m2→minimax-m2), among the families
# vlaunch reads. Any other model_type: "Unknown gguf model_type".
GGUF_MODEL_TYPES: frozenset[str] = frozenset({
    "afmoe", "apertus", "arcee", "bloom", "cohere", "cohere2", "dbrx", "deepseek_v2", "deepseek_v3", "ernie4_5",
    "exaone4", "falcon", "gemma", "gemma2", "gemma3", "gemma3_text", "gemma3n", "gemma4", "glm4", "gpt2", "gptj",
    "granite", "granitemoe", "jais2", "jamba", "lfm2", "llama", "llama4", "mamba", "mamba2", "minicpm3",
    "minimax_m2", "mistral3", "nemotron", "nemotron_h", "olmo", "olmo2", "olmoe", "phi3", "phimoe", "qwen2",
    "qwen2_moe", "qwen3", "qwen3_moe", "seed_oss", "smollm3", "stablelm", "starcoder2",
})  # fmt: skip


def capability(cc: str | None) -> int | None:
    """'9.0' -> 90, as vLLM compares capabilities."""
    if not cc:
        return None
    major, _, minor = cc.partition(".")
    return int(major) * 10 + int(minor or 0)


def online(version: V.Version) -> tuple[str, ...]:
    """The --quantization values vLLM makes from a 16-bit checkpoint at this release, in ONLINE_SINCE's order."""
    have = methods(version)
    return tuple(m for m, since in ONLINE_SINCE.items() if version >= since and m in have)


def online_capability(method: str, version: V.Version) -> int | None:
    if method == "mxfp8" and version < (0, 20, 0):
        return 100  # 0.19's Mxfp8Config
    return ONLINE_CAPABILITY.get(method, 75 if method in ONLINE_SINCE and method != "fp8" else None)


def refusal(
    fmt: FormatName,
    *,
    version: V.Version,
    platform: str,
    compute_capability: str | None,
    model_type: str | None,
    method: str | None = None,
) -> str | None:
    """vLLM's reason not to serve weights in `fmt` (made by `method`, a --quantization value, when given) on this
    platform and version (None: it serves them)."""
    online_need = online_capability(method, version) if method else None
    if fmt in SIXTEEN_BIT and online_need is None:
        return None
    if fmt in GGUF:
        if V.GGUF_REMOVED.on(version):
            return (
                f"vLLM {V.fmt_version(version)} has no GGUF loader (removed in "
                f"{V.fmt_version(V.GGUF_REMOVED.since)}): serve safetensors weights, or vLLM ≤ 0.23 for GGUF"
            )
        if model_type is not None and model_type not in GGUF_MODEL_TYPES:
            return f"Unknown gguf model_type: {model_type} (vLLM's GGUF loader has no llama.cpp name for it)"
    name, needed, _ = METHODS.get(fmt, (fmt, 0, ""))
    if method is not None and online_need is not None:
        name, needed = method, online_need
    cc = capability(compute_capability)
    if platform != "cuda" or cc is None:
        return None
    if name == "nvfp4_per_token" and cc // 10 != 10:
        return "nvfp4_per_token online quantization requires a Blackwell (SM100) GPU."
    if cc < needed:
        return (
            f"The quantization method {name} is not supported for the current GPU. Minimum capability: {needed}. "
            f"Current capability: {cc}."
        )
    return None


@dataclass(frozen=True)
class Resolved:
    """What a `--quantization` request (or none) comes to on this checkpoint and vLLM release."""

    spec: FormatSpec  # the format the weights are priced in (what vLLM holds after loading)
    flag: str | None  # the exact --quantization value the command carries; None: vLLM reads it from the checkpoint
    refusal: str | None = None  # one line: why vLLM will not start this way; None: it will


def launch_flag(requested: str | None, stored: FormatSpec, version: V.Version) -> str | None:
    """The --quantization value a command carries for `requested`: a vLLM method name as written (lowercased, as
    vLLM reads it); a vlaunch alias of fp8 on a 16-bit checkpoint as `fp8`; any other vlaunch name never."""
    if requested is None:
        return None
    name = requested.strip().lower()
    if name in methods(version) and name != "nvfp4":  # 0.8's nvfp4 method is not vlaunch's nvfp4 format
        return name
    if stored.method is None and _format_name(name) == "fp8":
        return "fp8"
    return None


def _format_name(name: str) -> FormatName | None:
    try:
        return normalize_name(name)
    except FormatError:
        return None


def own(stored: FormatSpec, shape: Model, dtype: str = "auto") -> FormatSpec:
    """The checkpoint's own format as vLLM serves it: a 16-bit checkpoint in --dtype, fp32 in 16 bits by default."""
    if stored.name in SIXTEEN_BIT and not stored.layers and dtype != "auto":
        return spec_for({"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}[dtype], shape)
    if stored.name == "fp32" and not stored.layers:
        return spec_for("bf16", shape)  # vLLM serves fp32 checkpoints in 16 bits by default
    return stored


def resolve(
    requested: str | None, stored: FormatSpec, shape: Model, version: V.Version, *, dtype: str = "auto"
) -> Resolved:
    """The plan's weights for `--quantization requested` on a checkpoint stored as `stored`, at this vLLM: vLLM's
    own rules (ModelConfig._verify_quantization, each override_quantization_method, get_quant_config)."""
    flag = launch_flag(requested, stored, version)
    checkpoint = _stored_refusal(stored, version)
    if requested is None:
        return Resolved(own(stored, shape, dtype), None, checkpoint)
    name = requested.strip().lower()
    if stored.method is None:
        spec, why = _from_sixteen_bit(name, stored, shape, version, dtype)
    else:
        spec, why = _from_quantized(name, stored, shape, version)
    return Resolved(spec, flag, why or checkpoint)


def _stored_refusal(stored: FormatSpec, version: V.Version) -> str | None:
    """vLLM's reason not to load the checkpoint's own quantization at this release."""
    m = stored.method
    v = V.fmt_version(version)
    if m is None:
        return None
    if stored.unread:
        return stored.unread
    if m == "modelopt_mixed" and stored.source == "hf_quant_config.json" and version < HF_QUANT_FILE_MIXED:
        return (
            f"Unknown ModelOpt quant algo: MIXED_PRECISION (vLLM {v} reads a MIXED_PRECISION hf_quant_config.json "
            f"only from {V.fmt_version(HF_QUANT_FILE_MIXED)}; before, it takes the per-layer map with a "
            "quantization_config in config.json)"
        )
    legacy_file = stored.source == "hf_quant_config.json" and not stored.layers
    if legacy_file and (m == "modelopt_mxfp8" or (m == "modelopt_fp4" and not stored.input_scale)):
        algo = "MXFP8" if m == "modelopt_mxfp8" else "W4A16_NVFP4"
        return f"Unknown ModelOpt quant algo: {algo} (vLLM {v} reads FP8 and NVFP4 from hf_quant_config.json alone)"
    if m not in methods(version):
        since = next((s for s, added, _ in METHOD_HISTORY if m in added), None)
        after = f" (vLLM {V.fmt_version(since)}+)" if since and since > version else ""
        return f"vLLM {v} has no {m} quantization method, which this checkpoint is stored in{after}"
    return None


def _from_sixteen_bit(
    name: str, stored: FormatSpec, shape: Model, version: V.Version, dtype: str
) -> tuple[FormatSpec, str | None]:
    """A --quantization on a checkpoint of unquantized weights: only what vLLM makes while loading is served."""
    fmt = _format_name(name)
    if fmt in SIXTEEN_BIT and name not in methods(version):
        return spec_for(fmt, shape), None  # a 16-bit dtype named: priced as it, no flag
    v = V.fmt_version(version)
    have = methods(version)
    if name in online(version) or (fmt == "fp8" and name not in have):
        return ONLINE_LAYOUTS[name if name in ONLINE_LAYOUTS else "fp8"], None
    what_if = spec_for(name, shape) if fmt is not None or name in ONLINE_LAYOUTS else own(stored, shape, dtype)
    if name not in have and fmt is None:
        return what_if, f"Unknown quantization method: {name} (not one of vLLM {v}'s --quantization values)"
    if name == "online":
        return what_if, (
            "--quantization online takes its layers from --quantization-config, which vlaunch does not price: name "
            f"one of vLLM {v}'s shorthands ({', '.join(online(version))})"
        )
    if name in UNPRICED_ONLINE:
        return what_if, (
            f"vLLM {v} quantizes a {stored.name} checkpoint with {name} while loading it, a layout vlaunch does not "
            f"price: plan with one of {', '.join(online(version))}, or serve a checkpoint stored quantized"
        )
    return what_if, _cannot_make(name, fmt, stored, shape, version)


def _cannot_make(name: str, fmt: FormatName | None, stored: FormatSpec, shape: Model, version: V.Version) -> str:
    v = V.fmt_version(version)
    label = (fmt or name).upper()
    own_text = f"Cannot find the config file for {name}: " if name in CONFIG_FILE_METHODS else ""
    if fmt in GGUF:
        return (
            f"this checkpoint is stored as {stored.name}; vLLM reads {label} weights only from a .gguf file "
            f"(vLLM ≤ 0.23), which vlaunch does not plan from: `vlaunch count --format {fmt}` prices them"
        )
    hint = ""
    shorthand = {"nvfp4": "nvfp4_per_token", "int8": "int8_per_channel_weight_only"}.get(fmt or "")
    if shorthand and shape.is_moe and shorthand in online(version):
        hint = f" (--quantization {shorthand} quantizes the MoE experts alone while loading)"
    return (
        f"{own_text}this checkpoint is stored as {stored.name} and vLLM {v} cannot make {name} while loading it: "
        f"serve a checkpoint of this model stored in {label}{hint}"
    )


def _from_quantized(name: str, stored: FormatSpec, shape: Model, version: V.Version) -> tuple[FormatSpec, str | None]:
    """A --quantization on a quantized checkpoint: vLLM serves the checkpoint's own method, under the names that
    method's override accepts; any other name stops it."""
    v = V.fmt_version(version)
    fmt = _format_name(name)
    have = methods(version)
    if name not in have:
        if fmt == stored.name:
            return stored, None  # vlaunch's name for the checkpoint's own format: nothing passed
        if fmt is None:
            return stored, f"Unknown quantization method: {name} (not one of vLLM {v}'s --quantization values)"
        if fmt in SIXTEEN_BIT:
            return spec_for(fmt, shape), (
                f"this checkpoint is stored as {stored.describe()} and vLLM serves its weights as stored "
                f"(--dtype sets the activations' dtype): drop --quantization {name}"
            )
        return spec_for(fmt, shape), (
            f"this checkpoint is stored as {stored.describe()} and vLLM {v} cannot make {fmt} from it: serve a "
            f"checkpoint of this model stored in {fmt.upper()}"
        )
    if _accepts(stored, name, shape, version):
        return stored, None
    return stored, (
        f"Quantization method specified in the model config ({stored.method}) does not match the quantization "
        f"method specified in the `quantization` argument ({name})."
    )


def _accepts(stored: FormatSpec, name: str, shape: Model, version: V.Version) -> bool:
    """Does vLLM take --quantization `name` on this checkpoint (its override_quantization_method rules)?"""
    m = stored.method or ""
    if name == m or name == "humming":  # humming overrides any checkpoint method (vLLM 0.20+)
        return True
    if m in MODELOPT_OVERRIDES and (m != "modelopt" or (stored.block is None and not stored.per_channel)):
        return True  # quant_algo FP8 / NVFP4 / MXFP8 / MIXED_PRECISION: vLLM replaces the user's value
    if m == "mxfp4" and shape.model_type == "gpt_oss" and "gpt_oss_mxfp4" in methods(version):
        return True  # GptOssMxfp4Config claims a gpt-oss MXFP4 checkpoint whatever was named
    wna16 = name == "moe_wna16" and shape.is_moe and not stored.act_order
    if m == "awq":
        return name in AWQ_NAMES or (wna16 and stored.bits == 4)
    if m == "gptq":
        return name in GPTQ_NAMES or (wna16 and stored.bits in (4, 8))
    return False


def format_names() -> tuple[str, ...]:
    """Every --quantization value a profile may hold: vLLM's methods of any release and online shorthands, and
    vlaunch's own format names."""
    return tuple(sorted(ALL_METHODS | set(ONLINE_LAYOUTS) | set(FORMATS)))
