"""vlaunch's format for each layer against vLLM's own decision for it (scripts/quant_oracle.py's record).

vLLM decides per module it builds, by its own prefix (`model.layers.3.self_attn.qkv_proj`, `…mlp.experts`); vlaunch
prices the checkpoint's tensors (`model.layers.3.self_attn.q_proj.weight`, `…experts.7.down_proj.weight`). A vLLM
prefix is matched to the tensors it loads: the same module name once the multimodal wrapper's prefixes are set aside,
a fused module (vLLM's packed_modules_mapping, recorded by the oracle) to its shards, the routed experts to every
tensor under them. Both sides are reduced to one label per layer: None (kept in its own dtype), fp8-block,
fp8-tensor, fp8-channel, nvfp4, mxfp4, mxfp8, int8, w4a16, awq, gptq.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launcher.model import formats
from launcher.model.arch import read_config
from launcher.model.arch.model import Model
from launcher.model.params import Tensor, tensors

# vLLM's method classes and what they store (vLLM 0.32 model_executor/layers/quantization/).
_UNQUANTIZED = {
    "None",
    "NoneType",
    "UnquantizedLinearMethod",
    "UnquantizedFusedMoEMethod",
    "UnquantizedEmbeddingMethod",
}
_BY_CLASS = {
    "ModelOptNvFp4FusedMoE": "nvfp4", "ModelOptMxFp8FusedMoE": "mxfp8", "Mxfp4MoEMethod": "mxfp4",
    "GptOssMxfp4MoEMethod": "mxfp4", "ModelOptFp8MoEMethod": "fp8-tensor",
}  # fmt: skip
_MODELOPT_ALGO = {
    "NVFP4": "nvfp4", "W4A16_NVFP4": "nvfp4", "MXFP8": "mxfp8", "FP8": "fp8-tensor",
    "FP8_PER_CHANNEL_PER_TOKEN": "fp8-channel", "FP8_PB_WO": "fp8-block", "FP8_BLOCK_SCALES": "fp8-block",
}  # fmt: skip


def oracle_label(method: str, detail: str) -> str | None:
    """The format vLLM's method class stores a layer in."""
    if method in _UNQUANTIZED:
        return None
    if method in _BY_CLASS:
        return _BY_CLASS[method]
    if method in ("Fp8LinearMethod", "Fp8MoEMethod"):
        return "fp8-block" if "[" in detail else "fp8-tensor"
    if method.startswith("CompressedTensors"):
        return _compressed_tensors_label(method, detail)
    if method == "ModelOptLinearMethod":
        return _MODELOPT_ALGO.get(detail.upper(), f"modelopt:{detail}")
    return f"vllm:{method}"


# compressed-tensors: the linear method's scheme (recorded as the detail) or the MoE method's class
_CT = (("WNA16", "w4a16"), ("W4A16Fp4", "nvfp4"), ("W4A4Fp4", "nvfp4"), ("W4A4Nvfp4", "nvfp4"), ("Mxfp4", "mxfp4"),
       ("W8A8Fp8", "fp8-tensor"), ("W8A8Int8", "int8"), ("W8A16Fp8", "fp8-tensor"))  # fmt: skip


def _compressed_tensors_label(method: str, detail: str) -> str:
    name = detail if method == "CompressedTensorsLinearMethod" else method
    return next((label for key, label in _CT if key in name), f"vllm:{method}:{detail}")


def vlaunch_label(spec: formats.FormatSpec | None) -> str | None:
    if spec is None or spec.name in ("bf16", "fp16", "fp32"):
        return None
    if spec.name == "fp8":
        return "fp8-block" if spec.block else "fp8-channel" if spec.per_channel else "fp8-tensor"
    return spec.name


# Modules vLLM loads under another name than vlaunch's tensors carry (each model's load_weights / hf_to_vllm_mapper):
# Mixtral's and MiniMax's sparse MoE block, DeepSeek-V4's w2 (down_proj) and its compressor's fused wkv + wgate.
_RENAMES = (
    (".block_sparse_moe.", ".mlp."), (".shared_experts.w2", ".shared_experts.down_proj"), (".self_attn.", ".attn."),
    # MiniMax-M3's vision tower: vLLM holds the projector and patch merger under vision_tower., its MLP's fc1 / fc2
    # in the encoder layer itself
    ("vision_tower.multi_modal_projector.", "multi_modal_projector."),
    ("vision_tower.patch_merge_mlp.", "patch_merge_mlp."),
    (".mlp.fc1", ".fc1"), (".mlp.fc2", ".fc2"),
    # Kimi-K2.5's projector: the checkpoint's proj.0 / proj.2 are vLLM's linear_1 / linear_2
    ("mm_projector.proj.0", "mm_projector.linear_1"), ("mm_projector.proj.2", "mm_projector.linear_2"),
)  # fmt: skip
_FUSED = {
    "qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"],  # vLLM's common packing
    "fused_wkv_wgate": ["wkv", "wgate"], "wk_weights_proj": ["wk", "weights_proj"],
    "fused_qkv_a_proj": ["q_a_proj", "kv_a_proj_with_mqa"],
}  # fmt: skip


def _canonical(name: str) -> str:
    """A module name with the wrappers vLLM and checkpoints name differently set aside."""
    for pre in ("language_model.model.", "model.language_model.", "language_model.", "model.", "backbone."):
        if name.startswith(pre):
            name = name[len(pre) :]
            break
    for a, b in _RENAMES:
        name = name.replace(a, b)
    return name


def _module(t: Tensor) -> str:
    return _canonical(t.name.rsplit(".", 1)[0])


@dataclass
class Comparison:
    agree: int = 0
    disagree: list[str] = field(default_factory=list)
    unmatched: list[str] = field(default_factory=list)  # vLLM prefixes no vlaunch tensor was found for
    skipped: int = 0  # parts of a layer that asked, built with its answer


CONFIGS_2026 = Path(__file__).parent / "fixtures" / "configs-2026"
PINNED = Path(__file__).parent / "fixtures" / "quant-oracle" / "vllm-0.32.0.json"


def pair_dirs(dest: Path, src: Path = CONFIGS_2026) -> list[Path]:
    """configs-2026's `<org>--<repo>_config.json` (+ `_hf_quant_config.json`) as model directories, the way a
    checkpoint holds them (config.json + hf_quant_config.json), under `dest`."""
    out = []
    for cfg in sorted(src.glob("*_config.json")):
        if cfg.name.endswith("_hf_quant_config.json"):
            continue
        stem = cfg.name.removesuffix("_config.json")
        d = dest / stem
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_bytes(cfg.read_bytes())
        side = src / f"{stem}_hf_quant_config.json"
        if side.exists():
            (d / "hf_quant_config.json").write_bytes(side.read_bytes())
        out.append(d)
    return out


def load_model(model_dir: Path) -> tuple[Model, formats.FormatSpec]:
    cfg = json.loads((model_dir / "config.json").read_text())
    side = model_dir / "hf_quant_config.json"
    hfq = json.loads(side.read_text()) if side.exists() else None
    model = read_config(cfg, str(model_dir / "config.json"))
    return model, formats.detect(model, hfq)


def vlaunch_layers(model: Model, spec: formats.FormatSpec) -> dict[str, tuple[Tensor, str | None]]:
    """Each weight tensor vlaunch prices (the main model, towers included) and the format it prices it in."""
    index = formats._Layers(spec) if spec.layers else None
    out: dict[str, tuple[Tensor, str | None]] = {}
    for t in tensors(model):
        if t.in_checkpoint and len(t.shape) >= 2:
            out[t.name] = (t, vlaunch_label(formats._tensor_spec(t, spec, index)))
    return out


def _shards(prefix: str, kind: str, packed: dict[str, list[str]]) -> list[str]:
    parent, _, leaf = prefix.rpartition(".")
    if kind == "experts":
        return [prefix]
    return [f"{parent}.{s}" if parent else s for s in packed.get(leaf, [leaf])]


def compare(record: dict[str, Any], model: Model, spec: formats.FormatSpec) -> Comparison:
    """Every layer vLLM decided for, against the tensors vlaunch prices for it."""
    ours = vlaunch_layers(model, spec)
    by_module: dict[str, list[tuple[Tensor, str | None]]] = {}
    for t, label in ours.values():
        by_module.setdefault(_module(t), []).append((t, label))
    packed = {**_FUSED, **(record.get("packed_modules_mapping") or {})}
    out = Comparison()
    layers = record.get("layers", {})
    asked = tuple(p + "." for p, (_, _, detail) in layers.items() if detail != "not asked")
    for prefix, (kind, method, detail) in sorted(layers.items()):
        if detail == "not asked" and (prefix.startswith(asked) or prefix.endswith(".routed_experts")):
            out.skipped += 1  # a part of a layer that asked: built with the oracle's stand-in answer
            continue
        want = oracle_label(method, detail)
        # A shared-expert MoE wraps its routed experts in a module of their own (`experts.routed_experts`).
        found = _found(_canonical(prefix).removesuffix(".routed_experts"), kind, packed, by_module)
        if not found:
            out.unmatched.append(prefix)
            continue
        got = {label for _, label in found}
        if got == {want}:
            out.agree += 1
        else:
            out.disagree.append(f"{prefix} ({kind}): vLLM {method} {detail} = {want}; vlaunch {sorted(map(str, got))}")
    return out


def _found(
    prefix: str, kind: str, packed: dict[str, list[str]], by_module: dict[str, list[tuple[Tensor, str | None]]]
) -> list[tuple[Tensor, str | None]]:
    if kind == "lm_head":  # a tied lm_head is the embedding
        heads = [x for xs in by_module.values() for x in xs if x[0].role == "lm_head"]
        return heads or [x for xs in by_module.values() for x in xs if x[0].role == "embedding"]
    if kind == "embedding":
        return [x for xs in by_module.values() for x in xs if x[0].role == "embedding"]
    if kind == "experts":
        return [x for m, xs in by_module.items() if m.startswith(prefix + ".") for x in xs if x[0].role == "expert"]
    found: list[tuple[Tensor, str | None]] = []
    for shard in _shards(prefix, kind, packed):
        found += by_module.get(shard, [])
    return found


def layer_key(prefix: str) -> str:
    return re.sub(r"\.\d+\.", ".N.", prefix)
