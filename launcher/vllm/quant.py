"""Which weight formats vLLM serves, where: its quantization method per format, the GPU it needs, what it makes
from a 16-bit checkpoint at load time, and the model_types its GGUF loader maps.

Pure data and rules over them; `refusal` returns vLLM's own reason for not serving a format, or None.
"""

from __future__ import annotations

from launcher.formats import FormatName
from launcher.vllm import versions as V

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
    "q8_0": ("gguf", 60, "quantization/gguf.py GGUFConfig (vLLM ≤ 0.23)"),
    "q4_k_m": ("gguf", 60, "quantization/gguf.py GGUFConfig (vLLM ≤ 0.23)"),
}

# Formats vLLM makes from a 16-bit checkpoint while loading it (`--quantization fp8`): no other checkpoint needed.
ONLINE: frozenset[FormatName] = frozenset({"fp8"})
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


def refusal(
    fmt: FormatName, *, version: V.Version, platform: str, compute_capability: str | None, model_type: str | None
) -> str | None:
    """vLLM's reason not to serve weights in `fmt` on this platform and version (None: it serves them)."""
    if fmt in SIXTEEN_BIT:
        return None
    if fmt in GGUF:
        if V.GGUF_REMOVED.on(version):
            return (
                f"vLLM {V.fmt_version(version)} has no GGUF loader (removed in "
                f"{V.fmt_version(V.GGUF_REMOVED.since)}): serve safetensors weights, or vLLM ≤ 0.23 for GGUF"
            )
        if model_type is not None and model_type not in GGUF_MODEL_TYPES:
            return f"Unknown gguf model_type: {model_type} (vLLM's GGUF loader has no llama.cpp name for it)"
    method, needed, _ = METHODS[fmt]
    cc = capability(compute_capability)
    if platform == "cuda" and cc is not None and cc < needed:
        return (
            f"The quantization method {method} is not supported for the current GPU. Minimum capability: {needed}. "
            f"Current capability: {cc}."
        )
    return None


def needs_checkpoint(fmt: FormatName, checkpoint: FormatName) -> bool:
    """Serving `fmt` takes a checkpoint stored in it: it is not this one's own format, nor one vLLM makes from a
    16-bit checkpoint while loading."""
    if fmt == checkpoint or (fmt in SIXTEEN_BIT and checkpoint in SIXTEEN_BIT):
        return False
    return not (fmt in ONLINE and checkpoint in SIXTEEN_BIT)
