"""Weight bytes against real checkpoint layouts, for every family with a tiny checkpoint fixture.

Each fixture (tests/fixtures/checkpoints/*.json, written by scripts/tiny_checkpoint.py) is the header of a tiny
random model that transformers built and saved: every tensor's on-disk name, dtype and shape. The tests write
that checkpoint (zeros) and, from it, the same checkpoint in the published quantized layouts (block-fp8 as
DeepSeek/Qwen ship it, ModelOpt NVFP4, AutoAWQ GEMM), then require the format arithmetic to equal the bytes
on disk. Which tensors a quantizer converts is decided here from the names alone: 2-D `.weight`s of linear
modules, not embeddings, the output head, norms or MoE routers; anything else a checkpoint would keep is
listed in modules_to_not_convert, as the quantizers write it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors

from launcher.model.arch import read_config
from launcher.model.counting import count_model
from tests.conftest import FIXTURES

CKPTS = sorted((FIXTURES / "checkpoints").glob("*.json"))
Layout = dict[str, tuple[str, tuple[int, ...]]]
ST_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "I32": 4, "F8_E4M3": 1, "U8": 1, "I64": 8}
ST_SERIALIZE = {"BF16": "bfloat16", "F16": "float16", "F32": "float32", "I32": "int32",
                "F8_E4M3": "float8_e4m3fn", "U8": "uint8", "I64": "int64"}  # fmt: skip
_ROUTER = re.compile(r"\.(gate|router|router\.layer|router\.classifier|shared_expert_gate|gate\.wg)$")
_KEEP = re.compile(r"((?<!un)embed|lm_head|norm[^.]*$|wte|wpe|ln_|shared_head\.head|(^|\.)head$)")
# Encoders and their projectors: the published quantized multimodal checkpoints leave them in 16 bits.
_TOWER = re.compile(r"(vision|visual|audio|multi_modal_projector|mm_projector)")


def _fixture(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _numel(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _write(directory: Path, config: dict[str, Any], layout: Layout) -> int:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config))
    buffers = {n: np.zeros(_numel(s) * ST_BYTES[dt], dtype=np.uint8) for n, (dt, s) in layout.items()}
    specs = {
        n: safetensors.TensorSpec(
            dtype=ST_SERIALIZE[dt], shape=list(s), data_ptr=buffers[n].ctypes.data, data_len=buffers[n].nbytes
        )
        for n, (dt, s) in layout.items()
    }
    safetensors.serialize_file(specs, str(directory / "model.safetensors"))
    return sum(_numel(s) * ST_BYTES[dt] for dt, s in layout.values())


def _linear_modules(layout: Layout) -> list[str]:
    """Modules a weight-only quantizer converts: 2-D `.weight` of a linear, not embeddings/head/norms/routers."""
    out = []
    for name, (_, shape) in layout.items():
        if not name.endswith(".weight") or len(shape) != 2:
            continue
        module = name.removesuffix(".weight")
        if _KEEP.search(module) or _ROUTER.search(module) or _TOWER.search(module):
            continue
        out.append(module)
    return out


# Linear layers vLLM 0.32 builds with quant_config=None, so a checkpoint it loads keeps them in 16 bits: the DSA
# indexer's wk and weights_proj (deepseek_v2.py Indexer.wk_weights_proj), DeepSeek-V4's compressors and indexer head.
SIXTEEN_BIT_IN_VLLM = {
    "deepseek_v32": (".indexer.wk", ".indexer.weights_proj"),
    "glm_moe_dsa": (".indexer.wk", ".indexer.weights_proj"),
    "deepseek_v4": (".compressor.", ".indexer.weights_proj"),
}


HEADS = ("lm_head", "embed_out")  # the output head's module: GPT-NeoX names it embed_out


def _quantized(layout: Layout, fmt: str, model_type: str = "") -> tuple[Layout, dict[str, Any]]:
    """The checkpoint in a published quantized layout, and the quantization_config its config.json carries."""
    out: Layout = {}
    linears = set(_linear_modules(layout))
    kept: list[str] = []
    vllm_16 = SIXTEEN_BIT_IN_VLLM.get(model_type, ())
    for name, (dt, shape) in layout.items():
        module = name.removesuffix(".weight")
        if module in linears and any(m in module + "." for m in vllm_16):
            out[name] = (dt, shape)
            continue
        if module not in linears:
            out[name] = (dt, shape)
            continue
        o, i = shape
        if fmt == "fp8":
            # DeepSeek-V3 / Qwen3-FP8: e4m3 weight, one fp32 weight_scale_inv per 128 x 128 block (ceil)
            out[name] = ("F8_E4M3", (o, i))
            out[f"{module}.weight_scale_inv"] = ("F32", (-(-o // 128), -(-i // 128)))
        elif fmt == "nvfp4" and i % 16 == 0:
            # ModelOpt NVFP4: two e2m1 values per byte, an e4m3 scale per 16 weights, fp32 global scales
            out[name] = ("U8", (o, i // 2))
            out[f"{module}.weight_scale"] = ("F8_E4M3", (o, i // 16))
            out[f"{module}.weight_scale_2"] = ("F32", ())
            out[f"{module}.input_scale"] = ("F32", ())
        elif fmt == "awq" and i % 128 == 0 and o % 8 == 0:
            # AutoAWQ GEMM, 4-bit, group 128: 8 values per int32 along the output dimension
            out[f"{module}.qweight"] = ("I32", (i, o // 8))
            out[f"{module}.qzeros"] = ("I32", (i // 128, o // 8))
            out[f"{module}.scales"] = ("F16", (i // 128, o))
        else:
            out[name] = (dt, shape)  # the quantizer cannot convert this shape: it stays 16-bit, and says so
            kept.append(module)
    if fmt == "fp8":
        q: dict[str, Any] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                             "weight_block_size": [128, 128], "modules_to_not_convert": kept}  # fmt: skip
    elif fmt == "nvfp4":  # ModelOpt lists the output head it keeps in 16 bits (vLLM quantizes a ParallelLMHead else)
        q = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16, "ignore": [*kept, *HEADS],
             "modules_to_not_convert": kept}  # fmt: skip
    else:
        q = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm",
             "modules_to_not_convert": kept}  # fmt: skip
    return out, q


def _bf16_layout(fx: dict[str, Any]) -> Layout:
    return {n: (dt, tuple(shape)) for n, (dt, shape) in fx["tensors"].items()}


@pytest.mark.parametrize("path", CKPTS, ids=[p.stem for p in CKPTS])
def test_bf16_checkpoint_bytes_equal_arithmetic(tmp_path: Path, path: Path) -> None:
    fx = _fixture(path)
    layout = _bf16_layout(fx)
    on_disk = _write(tmp_path / "m", fx["config"], layout)
    r = count_model(str(tmp_path / "m"))
    assert r.checkpoint is not None and r.checkpoint.total_bytes == on_disk
    assert r.weights.total_bytes == on_disk
    if _fused_experts(layout):
        # each layer's experts as one 3-D tensor: compare element counts instead of shapes
        assert sum(t.numel for t in r.shape.tensors() if t.in_checkpoint) == sum(_numel(s) for _, s in layout.values())
        return
    # Every tensor the checkpoint holds, by shape, is one the arithmetic prices (experts unfused).
    ours = sorted(t.shape for t in r.shape.tensors() if t.in_checkpoint for _ in range(t.copies))
    assert ours == sorted(shape for _, shape in layout.values())


def _fused_experts(layout: Layout) -> bool:
    """Experts stacked in one tensor per layer (gpt-oss, Llama 4, Granite MoE; DBRX's flat w1/v1/w2)."""
    for name, (_, shape) in layout.items():
        if len(shape) == 3 and ("experts" in name or "input_linear" in name or "output_linear" in name):
            return True
        if ".experts." in name and not name.endswith((".weight", ".bias")):
            return True
    return False


@pytest.mark.parametrize("fmt", ["fp8", "nvfp4", "awq"])
@pytest.mark.parametrize("path", CKPTS, ids=[p.stem for p in CKPTS])
def test_quantized_checkpoint_bytes_equal_arithmetic(tmp_path: Path, path: Path, fmt: str) -> None:
    fx = _fixture(path)
    if _fused_experts(_bf16_layout(fx)):
        pytest.skip("experts stored as 3-D stacks: their quantized layouts are family-specific (test_formats: MXFP4)")
    layout, q = _quantized(_bf16_layout(fx), fmt, fx["config"].get("model_type", ""))
    config = {**fx["config"], "quantization_config": q}
    if fmt == "fp8" and config.get("model_type") == "deepseek_v4":
        config["expert_dtype"] = "fp8"  # fp8 block experts; vLLM reads the default (fp4) as MXFP4 experts
    if fmt == "awq":
        config["torch_dtype"] = "float16"
    on_disk = _write(tmp_path / "m", config, layout)
    r = count_model(str(tmp_path / "m"))
    assert r.checkpoint is not None and r.checkpoint.total_bytes == on_disk
    assert r.weights.total_bytes == on_disk


def test_fixture_configs_read_exactly() -> None:
    for path in CKPTS:
        assert read_config(_fixture(path)["config"], path.name).support == "exact"
