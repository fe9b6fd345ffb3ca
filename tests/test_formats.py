"""launcher.model.formats: the lesson's published sizes, detection from config.json, and exact bytes against real
checkpoints written here in each format's published on-disk layout.

Every expected number is either a published figure (hard-coded) or the size of a file this test writes
itself, tensor by tensor, with the names, shapes and dtypes the quantizers write (AutoAWQ, AutoGPTQ,
ModelOpt, DeepSeek/Qwen FP8, gpt-oss MXFP4, llama.cpp GGUF). Nothing expected is computed by
launcher.model.formats.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest
import safetensors
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import quantize
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.numpy import save_file

from launcher.common.errors import FormatError
from launcher.model.arch import Model
from launcher.model.arch import read_config as shape_from_config
from launcher.model.checkpoint import find_checkpoint
from launcher.model.formats import FORMATS, FormatSpec, detect, normalize_name, spec_for, weight_bytes
from launcher.model.formats import tensor_bytes as formats_tensor_bytes
from launcher.model.params import tensors
from tests.conftest import CONFIGS

GB = 10**9
GiB = 2**30


def _cfg(name: str) -> dict[str, Any]:
    cfg: dict[str, Any] = json.loads((CONFIGS / f"{name}.json").read_text())
    return cfg


def _shape(name: str) -> Model:
    return shape_from_config(_cfg(name), name)


def _bytes(name: str, fmt: str) -> int:
    s = _shape(name)
    return weight_bytes(s, spec_for(fmt, s)).total_bytes


# ------------------------------------------------------------------------------- 1. the lesson's figures


def test_llama_8b_bf16_is_exact() -> None:
    wb = weight_bytes(_shape("Llama-3.1-8B"), detect(_shape("Llama-3.1-8B")))
    assert wb.total_bytes == 16_060_522_496
    assert round(wb.total_bytes / GB, 2) == 16.06
    assert round(wb.total_bytes / GiB, 2) == 14.96
    assert wb.bits_per_weight == 16.0
    assert wb.kept_16bit == ()
    # embedding and lm_head: 128256 x 4096 each, two bytes a weight
    assert wb.bytes_by_part["embedding"] == wb.bytes_by_part["lm_head"] == 128_256 * 4096 * 2


def test_llama_8b_fp8_keeps_embedding_and_lm_head() -> None:
    s = _shape("Llama-3.1-8B")
    wb = weight_bytes(s, spec_for("fp8", s))
    assert round(wb.total_bytes / GB, 1) == 9.1
    assert {"embedding", "lm_head"} <= set(wb.kept_16bit)
    assert wb.bytes_by_part["embedding"] == wb.bytes_by_part["lm_head"] == 128_256 * 4096 * 2


def test_llama_8b_awq() -> None:
    assert round(_bytes("Llama-3.1-8B", "awq") / GB, 1) == 5.7


def test_llama_8b_q4_k_m() -> None:
    s = _shape("Llama-3.1-8B")
    wb = weight_bytes(s, spec_for("q4_k_m", s))
    assert round(wb.total_bytes / GB, 1) == 4.9
    assert 4.8 <= wb.bits_per_weight <= 4.9
    assert set(wb.gguf_types) == {"Q4_K", "Q6_K", "F32"}


def test_q8_0_is_8_5_bits_on_2d_tensors() -> None:
    s = _shape("Llama-3.1-8B")
    two_d = [t for t in tensors(s) if len(t.shape) == 2]
    wb = weight_bytes(s, spec_for("q8_0", s), two_d)
    assert wb.bits_per_weight == 8.5  # 32 weights in 34 bytes: int8 values + one fp16 scale
    assert wb.gguf_types == {"Q8_0": wb.params}


@pytest.mark.parametrize(("name", "gib"), [("Llama-3.1-70B", 131), ("Qwen3-30B-A3B", 57)])
def test_bf16_gib(name: str, gib: int) -> None:
    s = _shape(name)
    assert round(weight_bytes(s, detect(s)).total_bytes / GiB) == gib


@pytest.mark.parametrize(("name", "low_gb", "high_gb"), [("gpt-oss-20b", 13.76, 13.76), ("gpt-oss-120b", 65.2, 65.3)])
def test_gpt_oss_native_mxfp4_matches_published_repo_size(name: str, low_gb: float, high_gb: float) -> None:
    s = _shape(name)
    total = weight_bytes(s, detect(s)).total_bytes
    assert low_gb * GB * 0.99 <= total <= high_gb * GB * 1.01


# ------------------------------------------------------------------------------ 2. detection from configs


def test_detect_awq() -> None:
    spec = detect(_shape("Qwen2.5-72B-Instruct-ko-AWQ-LDCC"))
    assert (spec.name, spec.bits, spec.group_size, spec.zero_point) == ("awq", 4, 128, True)
    assert spec.source == "config.json"
    assert spec.describe() == "awq (4-bit, group 128)"


def test_detect_gptq_8bit_per_channel_act_order() -> None:
    spec = detect(_shape("Trurl-2-7B-GPTQ-TheBloke"))
    assert (spec.name, spec.bits, spec.group_size, spec.act_order) == ("gptq", 8, -1, True)
    assert spec.describe() == "gptq (8-bit, per-channel, act-order)"


@pytest.mark.parametrize(
    ("name", "moe_layers", "experts", "hidden", "vocab"),
    [("DeepSeek-V3", 58, 256, 7168, 129_280), ("Qwen3-30B-A3B-FP8", 48, 128, 2048, 151_936)],
)
def test_detect_fp8_block_keeps_router_and_lm_head(
    name: str, moe_layers: int, experts: int, hidden: int, vocab: int
) -> None:
    s = _shape(name)
    spec = detect(s)
    assert (spec.name, spec.block) == ("fp8", (128, 128))
    assert spec.describe() == "fp8 (block 128x128 scales)"
    wb = weight_bytes(s, spec)
    assert {"router", "lm_head", "embedding"} <= set(wb.kept_16bit)
    assert wb.bytes_by_part["lm_head"] == vocab * hidden * 2
    routers = [t for t in tensors(s) if t.role == "router"]
    assert weight_bytes(s, spec, routers).total_bytes == moe_layers * experts * hidden * 2


def test_detect_qwen3_fp8_reads_modules_to_not_convert() -> None:
    spec = detect(_shape("Qwen3-30B-A3B-FP8"))
    assert "lm_head" in spec.not_converted
    assert "model.layers.47.mlp.gate" in spec.not_converted


@pytest.mark.parametrize("name", ["gpt-oss-20b", "gpt-oss-120b"])
def test_detect_mxfp4_quantizes_experts_only(name: str) -> None:
    s = _shape(name)
    spec = detect(s)
    assert (spec.name, spec.experts_only, spec.group_size) == ("mxfp4", True, 32)
    wb = weight_bytes(s, spec)
    assert {"attention", "router", "embedding", "lm_head"} <= set(wb.kept_16bit)
    bf16 = weight_bytes(s, spec_for("bf16", s))
    for part in ("embedding", "lm_head", "attention", "norms"):
        assert wb.bytes_by_part[part] == bf16.bytes_by_part[part]
    # 4.25 bits instead of 16 for the experts
    assert wb.bytes_by_part["experts"] < bf16.bytes_by_part["experts"] * 0.3


def test_detect_modelopt_fp8_from_hf_quant_config() -> None:
    s = _shape("Llama-3.1-70B-Instruct-FP8-nvidia")
    assert s.quantization_config is None
    hfq = json.loads((CONFIGS / "Llama-3.1-70B-Instruct-FP8-nvidia.hf_quant_config.json").read_text())
    spec = detect(s, hfq)
    assert (spec.name, spec.block, spec.source) == ("fp8", None, "hf_quant_config.json")
    assert spec.not_converted == ("lm_head",)
    assert detect(s).name == "bf16"  # without the ModelOpt file it is just the bf16 config


@pytest.mark.parametrize(
    ("name", "fmt"), [("Llama-3.1-8B", "bf16"), ("Llama-2-7b-hf", "fp16"), ("gpt-oss-20b", "mxfp4")]
)
def test_detect_plain_dtype(name: str, fmt: str) -> None:
    assert detect(_shape(name)).name == fmt


def test_unknown_quant_method_raises() -> None:
    cfg = _cfg("Llama-3.1-8B")
    cfg["quantization_config"] = {"quant_method": "bitsandbytes", "load_in_4bit": True}
    with pytest.raises(FormatError, match="bitsandbytes"):
        detect(shape_from_config(cfg, "bnb"))


def test_unknown_modelopt_algo_raises() -> None:
    with pytest.raises(FormatError):
        detect(_shape("Llama-3.1-8B"), {"quantization": {"quant_algo": "W4A8_AWQ"}})


def test_normalize_unknown_name_raises() -> None:
    with pytest.raises(FormatError, match="nope"):
        normalize_name("nope")
    with pytest.raises(FormatError):
        spec_for("nope", _shape("Llama-3.1-8B"))


@pytest.mark.parametrize(
    ("alias", "name"),
    [
        ("bfloat16", "bf16"),
        ("w8a8", "int8"),
        ("float16", "fp16"),
        ("float32", "fp32"),
        ("awq_marlin", "awq"),
        ("gptq_marlin", "gptq"),
        ("q4km", "q4_k_m"),
        (" BF16 ", "bf16"),
        ("Q8_0", "q8_0"),
    ],
)
def test_aliases(alias: str, name: str) -> None:
    assert normalize_name(alias) == name


def test_spec_for_reuses_the_detected_layout() -> None:
    s = _shape("Trurl-2-7B-GPTQ-TheBloke")
    detected = detect(s)
    assert spec_for("gptq_marlin", s, detected) is detected
    flag = spec_for("awq", s, detected)
    assert (flag.name, flag.bits, flag.group_size, flag.zero_point, flag.source) == ("awq", 4, 128, True, "flag")


# ------------------------------------------------------------------ 3. real checkpoints, published layouts

# A Llama-like model small enough to write in every format; every dimension a multiple of 256 so that the
# K-quants apply without llama.cpp's fallback.
TINY: dict[str, Any] = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "vocab_size": 1024,
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "tie_word_embeddings": False,
    "attention_bias": False,
    "mlp_bias": False,
    "torch_dtype": "bfloat16",
}
TINY_TIED = {**TINY, "tie_word_embeddings": True}
# Rows that are not whole 128-blocks (fp8) or 256-super-blocks (K-quants): 320 = 2.5 x 128, 704 = 5.5 x 128.
ODD = {**TINY, "hidden_size": 320, "num_attention_heads": 5, "num_key_value_heads": 1,
       "intermediate_size": 704, "vocab_size": 1000}  # fmt: skip
TINY_MOE: dict[str, Any] = {
    "model_type": "qwen3_moe",
    "architectures": ["Qwen3MoeForCausalLM"],
    "vocab_size": 1024,
    "hidden_size": 256,
    "intermediate_size": 512,
    "moe_intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "tie_word_embeddings": False,
    "attention_bias": False,
    "torch_dtype": "bfloat16",
}
TINY_GPT_OSS: dict[str, Any] = {
    "model_type": "gpt_oss",
    "architectures": ["GptOssForCausalLM"],
    "vocab_size": 1024,
    "hidden_size": 256,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "sliding_window": 128,
    "layer_types": ["sliding_attention", "full_attention"],
    "tie_word_embeddings": False,
    "attention_bias": True,
    "quantization_config": {
        "quant_method": "mxfp4",
        "modules_to_not_convert": [
            "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head",
        ],
    },
}  # fmt: skip

Layout = dict[str, tuple[str, tuple[int, ...]]]  # tensor name -> (safetensors dtype, shape)

ST_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "I32": 4, "F8_E4M3": 1, "U8": 1}
# safetensors dtype -> the name serialize_file takes, and the numpy dtype where numpy has one
ST_SERIALIZE = {"BF16": "bfloat16", "F16": "float16", "F32": "float32", "I32": "int32",
                "F8_E4M3": "float8_e4m3fn", "U8": "uint8"}  # fmt: skip
ST_NUMPY = {"F16": np.float16, "F32": np.float32, "I32": np.int32, "U8": np.uint8}


def _dims(c: Mapping[str, Any]) -> tuple[int, int, int, int, int, int]:
    h, heads = c["hidden_size"], c["num_attention_heads"]
    d = c.get("head_dim") or h // heads
    return h, c["intermediate_size"], c["num_hidden_layers"], heads * d, c["num_key_value_heads"] * d, d


def _hf_llama(c: Mapping[str, Any]) -> tuple[list[tuple[str, int, int]], list[tuple[str, tuple[int, ...]]]]:
    """transformers' LlamaForCausalLM parameter names: (linear module, out, in) and the other tensors."""
    h, inter, n_layers, q, kv, _ = _dims(c)
    linears: list[tuple[str, int, int]] = []
    others: list[tuple[str, tuple[int, ...]]] = [("model.embed_tokens.weight", (c["vocab_size"], h))]
    for i in range(n_layers):
        p = f"model.layers.{i}"
        others += [(f"{p}.input_layernorm.weight", (h,)), (f"{p}.post_attention_layernorm.weight", (h,))]
        linears += [
            (f"{p}.self_attn.q_proj", q, h),
            (f"{p}.self_attn.k_proj", kv, h),
            (f"{p}.self_attn.v_proj", kv, h),
            (f"{p}.self_attn.o_proj", h, q),
            (f"{p}.mlp.gate_proj", inter, h),
            (f"{p}.mlp.up_proj", inter, h),
            (f"{p}.mlp.down_proj", h, inter),
        ]
    others.append(("model.norm.weight", (h,)))
    if not c["tie_word_embeddings"]:
        others.append(("lm_head.weight", (c["vocab_size"], h)))
    return linears, others


def _layout(
    c: Mapping[str, Any], kept: str, linear: Callable[[int, int], dict[str, tuple[str, tuple[int, ...]]]]
) -> Layout:
    linears, others = _hf_llama(c)
    out: Layout = {name: (kept, shape) for name, shape in others}
    for module, o, i in linears:
        for suffix, spec in linear(o, i).items():
            out[f"{module}.{suffix}"] = spec
    return out


def _bf16(o: int, i: int) -> dict[str, tuple[str, tuple[int, ...]]]:
    return {"weight": ("BF16", (o, i))}


def _awq_gemm(bits: int, group: int) -> Callable[[int, int], dict[str, tuple[str, tuple[int, ...]]]]:
    """AutoAWQ WQLinear_GEMM: 32/bits values per int32 packed along the output dimension."""
    pack = 32 // bits

    def linear(o: int, i: int) -> dict[str, tuple[str, tuple[int, ...]]]:
        return {
            "qweight": ("I32", (i, o // pack)),
            "qzeros": ("I32", (i // group, o // pack)),
            "scales": ("F16", (i // group, o)),
        }

    return linear


def _gptq(bits: int, group: int) -> Callable[[int, int], dict[str, tuple[str, tuple[int, ...]]]]:
    """AutoGPTQ QuantLinear: weights packed along the input dimension, zeros along the output; g_idx always."""

    def linear(o: int, i: int) -> dict[str, tuple[str, tuple[int, ...]]]:
        g = i if group == -1 else group
        return {
            "qweight": ("I32", (i * bits // 32, o)),
            "qzeros": ("I32", (i // g, o * bits // 32)),
            "scales": ("F16", (i // g, o)),
            "g_idx": ("I32", (i,)),
        }

    return linear


def _fp8_per_tensor(o: int, i: int) -> dict[str, tuple[str, tuple[int, ...]]]:
    """ModelOpt / AutoFP8 static FP8: e4m3 weight plus scalar fp32 weight and input scales."""
    return {"weight": ("F8_E4M3", (o, i)), "weight_scale": ("F32", ()), "input_scale": ("F32", ())}


def _fp8_block(o: int, i: int) -> dict[str, tuple[str, tuple[int, ...]]]:
    """DeepSeek-V3 / Qwen3-FP8: e4m3 weight, one fp32 weight_scale_inv per 128 x 128 block (ceil)."""
    return {"weight": ("F8_E4M3", (o, i)), "weight_scale_inv": ("F32", (-(-o // 128), -(-i // 128)))}


def _numel(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _layout_bytes(layout: Layout) -> int:
    return sum(_numel(shape) * ST_BYTES[dt] for dt, shape in layout.values())


def _write_safetensors(path: Path, layout: Layout) -> None:
    if all(dt in ST_NUMPY for dt, _ in layout.values()):
        save_file({n: np.zeros(shape, dtype=ST_NUMPY[dt]) for n, (dt, shape) in layout.items()}, str(path))
        return
    buffers = {n: np.zeros(_numel(shape) * ST_BYTES[dt], dtype=np.uint8) for n, (dt, shape) in layout.items()}
    specs = {
        n: safetensors.TensorSpec(
            dtype=ST_SERIALIZE[dt], shape=list(shape), data_ptr=buffers[n].ctypes.data, data_len=buffers[n].nbytes
        )
        for n, (dt, shape) in layout.items()
    }
    safetensors.serialize_file(specs, str(path))


def _hf_part(name: str) -> str:
    """The bucket of a transformers parameter name (params.py's parts)."""
    if name.startswith("model.embed_tokens."):
        return "embedding"
    if name.startswith("lm_head."):
        return "lm_head"
    if ".self_attn." in name:
        return "attention"
    if "layernorm" in name or name.startswith("model.norm."):
        return "norms"
    if ".mlp.experts." in name or ".mlp.gate." in name or ".mlp.router." in name:
        return "experts"
    assert ".mlp." in name, name
    return "mlp"


def _check(tmp_path: Path, cfg: Mapping[str, Any], spec: FormatSpec, layout: Layout) -> None:
    """The estimate equals the bytes of the written checkpoint, in total and part by part."""
    _write_safetensors(tmp_path / "model.safetensors", layout)
    ckpt = find_checkpoint(tmp_path)
    assert ckpt is not None
    assert ckpt.total_bytes == _layout_bytes(layout)
    shape = shape_from_config(cfg, "tiny")
    wb = weight_bytes(shape, spec)
    by_part: dict[str, int] = {}
    for t in ckpt.tensors:
        by_part[_hf_part(t.name)] = by_part.get(_hf_part(t.name), 0) + t.nbytes
    assert {k: v for k, v in wb.bytes_by_part.items() if v} == by_part
    assert wb.total_bytes == ckpt.total_bytes


@pytest.mark.parametrize("cfg", [TINY, TINY_TIED, ODD], ids=["tiny", "tied", "odd"])
def test_bf16_checkpoint(tmp_path: Path, cfg: dict[str, Any]) -> None:
    _check(tmp_path, cfg, detect(shape_from_config(cfg, "tiny")), _layout(cfg, "BF16", _bf16))


@pytest.mark.parametrize("group", [128, 64])
def test_awq_gemm_checkpoint(tmp_path: Path, group: int) -> None:
    q = {"quant_method": "awq", "bits": 4, "group_size": group, "zero_point": True, "version": "gemm"}
    cfg = {**TINY, "torch_dtype": "float16", "quantization_config": q}
    spec = detect(shape_from_config(cfg, "tiny"))
    _check(tmp_path, cfg, spec, _layout(cfg, "F16", _awq_gemm(4, group)))


@pytest.mark.parametrize(
    ("bits", "group", "act_order"), [(4, 128, False), (4, 128, True), (8, -1, True), (8, -1, False), (3, 128, False)]
)
def test_gptq_checkpoint(tmp_path: Path, bits: int, group: int, act_order: bool) -> None:
    q = {"quant_method": "gptq", "bits": bits, "group_size": group, "desc_act": act_order, "sym": True}
    cfg = {**TINY, "torch_dtype": "float16", "quantization_config": q}
    spec = detect(shape_from_config(cfg, "tiny"))
    assert (spec.bits, spec.group_size, spec.act_order) == (bits, group, act_order)
    _check(tmp_path, cfg, spec, _layout(cfg, "F16", _gptq(bits, group)))
    # sym=True still writes qzeros (AutoGPTQ always registers the buffer): a symmetric spec prices the same
    _check(tmp_path, cfg, dataclasses.replace(spec, zero_point=False), _layout(cfg, "F16", _gptq(bits, group)))


def test_fp8_per_tensor_checkpoint(tmp_path: Path) -> None:
    hfq = {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "FP8", "exclude_modules": ["lm_head"]}}
    spec = detect(shape_from_config(TINY, "tiny"), hfq)
    _check(tmp_path, TINY, spec, _layout(TINY, "BF16", _fp8_per_tensor))


@pytest.mark.parametrize("cfg", [TINY, ODD], ids=["tiny", "odd"])
def test_fp8_block_checkpoint(tmp_path: Path, cfg: dict[str, Any]) -> None:
    q = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
    cfg = {**cfg, "quantization_config": q}
    _check(tmp_path, cfg, detect(shape_from_config(cfg, "tiny")), _layout(cfg, "BF16", _fp8_block))


def test_fp8_block_moe_checkpoint_keeps_router(tmp_path: Path) -> None:
    """Qwen3-30B-A3B-FP8's layout: per-expert fp8 linears, router (mlp.gate) and norms in bf16."""
    c = TINY_MOE
    h, _, n_layers, q, kv, d = _dims(c)
    e, mi = c["num_experts"], c["moe_intermediate_size"]
    not_convert = ["lm_head"]
    layout: Layout = {"model.embed_tokens.weight": ("BF16", (c["vocab_size"], h))}
    for i in range(n_layers):
        p = f"model.layers.{i}"
        not_convert += [f"{p}.input_layernorm", f"{p}.mlp.gate", f"{p}.post_attention_layernorm"]
        layout[f"{p}.input_layernorm.weight"] = ("BF16", (h,))
        layout[f"{p}.post_attention_layernorm.weight"] = ("BF16", (h,))
        layout[f"{p}.self_attn.q_norm.weight"] = ("BF16", (d,))
        layout[f"{p}.self_attn.k_norm.weight"] = ("BF16", (d,))
        mods = [("self_attn.q_proj", q, h), ("self_attn.k_proj", kv, h), ("self_attn.v_proj", kv, h),
                ("self_attn.o_proj", h, q)]  # fmt: skip
        for j in range(e):
            mods += [(f"mlp.experts.{j}.gate_proj", mi, h), (f"mlp.experts.{j}.up_proj", mi, h),
                     (f"mlp.experts.{j}.down_proj", h, mi)]  # fmt: skip
        for m, o, i_ in mods:
            for suffix, spec in _fp8_block(o, i_).items():
                layout[f"{p}.{m}.{suffix}"] = spec
        layout[f"{p}.mlp.gate.weight"] = ("BF16", (e, h))
    layout["model.norm.weight"] = ("BF16", (h,))
    layout["lm_head.weight"] = ("BF16", (c["vocab_size"], h))
    qc = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128],
          "modules_to_not_convert": not_convert}  # fmt: skip
    cfg = {**c, "quantization_config": qc}
    _check(tmp_path, cfg, detect(shape_from_config(cfg, "tiny")), layout)


def test_mxfp4_gpt_oss_checkpoint(tmp_path: Path) -> None:
    """openai/gpt-oss layout: experts as U8 blocks of 32 e2m1 pairs + one E8M0 U8 scale per block."""
    c = TINY_GPT_OSS
    h, inter, n_layers, q, kv, _ = _dims(c)
    e, heads = c["num_local_experts"], c["num_attention_heads"]
    layout: Layout = {"model.embed_tokens.weight": ("BF16", (c["vocab_size"], h))}
    for i in range(n_layers):
        p = f"model.layers.{i}"
        layout[f"{p}.input_layernorm.weight"] = ("BF16", (h,))
        layout[f"{p}.post_attention_layernorm.weight"] = ("BF16", (h,))
        for m, o, i_ in (("q_proj", q, h), ("k_proj", kv, h), ("v_proj", kv, h), ("o_proj", h, q)):
            layout[f"{p}.self_attn.{m}.weight"] = ("BF16", (o, i_))
            layout[f"{p}.self_attn.{m}.bias"] = ("BF16", (o,))
        layout[f"{p}.self_attn.sinks"] = ("BF16", (heads,))
        layout[f"{p}.mlp.router.weight"] = ("BF16", (e, h))
        layout[f"{p}.mlp.router.bias"] = ("BF16", (e,))
        x = f"{p}.mlp.experts"
        layout[f"{x}.gate_up_proj_blocks"] = ("U8", (e, 2 * inter, h // 32, 16))
        layout[f"{x}.gate_up_proj_scales"] = ("U8", (e, 2 * inter, h // 32))
        layout[f"{x}.gate_up_proj_bias"] = ("BF16", (e, 2 * inter))
        layout[f"{x}.down_proj_blocks"] = ("U8", (e, h, inter // 32, 16))
        layout[f"{x}.down_proj_scales"] = ("U8", (e, h, inter // 32))
        layout[f"{x}.down_proj_bias"] = ("BF16", (e, h))
    layout["model.norm.weight"] = ("BF16", (h,))
    layout["lm_head.weight"] = ("BF16", (c["vocab_size"], h))
    _check(tmp_path, c, detect(shape_from_config(c, "tiny")), layout)


# GGUF. ggml block sizes (weights per block, bytes per block) from ggml's type traits.
GGML = {"F32": (1, 4), "Q8_0": (32, 34), "Q5_0": (32, 22), "Q4_K": (256, 144), "Q6_K": (256, 210)}
GgufLayout = list[tuple[str, str, tuple[int, ...]]]  # (llama.cpp name, ggml type, shape outermost first)


def _gguf_llama(c: Mapping[str, Any], ty: Callable[[str, int], str]) -> GgufLayout:
    """llama.cpp's tensor names for a Llama; `ty(kind, layer)` picks each 2-D tensor's type."""
    h, inter, n_layers, q, kv, _ = _dims(c)
    out: GgufLayout = [("token_embd.weight", ty("token_embd", -1), (c["vocab_size"], h))]
    for i in range(n_layers):
        b = f"blk.{i}"
        out += [
            (f"{b}.attn_norm.weight", "F32", (h,)),
            (f"{b}.attn_q.weight", ty("attn_q", i), (q, h)),
            (f"{b}.attn_k.weight", ty("attn_k", i), (kv, h)),
            (f"{b}.attn_v.weight", ty("attn_v", i), (kv, h)),
            (f"{b}.attn_output.weight", ty("attn_output", i), (h, q)),
            (f"{b}.ffn_norm.weight", "F32", (h,)),
            (f"{b}.ffn_gate.weight", ty("ffn_gate", i), (inter, h)),
            (f"{b}.ffn_up.weight", ty("ffn_up", i), (inter, h)),
            (f"{b}.ffn_down.weight", ty("ffn_down", i), (h, inter)),
        ]
    out.append(("output_norm.weight", "F32", (h,)))
    if not c["tie_word_embeddings"]:
        out.append(("output.weight", ty("output", -1), (c["vocab_size"], h)))
    return out


def _gguf_bytes(layout: GgufLayout) -> int:
    total = 0
    for _, t, shape in layout:
        per, size = GGML[t]
        assert shape[-1] % per == 0
        total += _numel(shape) // per * size
    return total


def _write_gguf(path: Path, arch: str, layout: GgufLayout) -> None:
    w = gguf.GGUFWriter(path, arch)
    w.add_uint32(f"{arch}.block_count", 2)
    for name, t, shape in layout:
        if t == "F32":
            w.add_tensor(name, np.zeros(shape, dtype=np.float32))
        elif t == "Q8_0":
            w.add_tensor(name, quantize(np.zeros(shape, dtype=np.float32), GGMLQuantizationType.Q8_0),
                         raw_dtype=GGMLQuantizationType.Q8_0)  # fmt: skip
        else:
            per, size = GGML[t]
            raw = np.zeros((*shape[:-1], shape[-1] // per * size), dtype=np.uint8)
            w.add_tensor(name, raw, raw_dtype=GGMLQuantizationType[t])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _check_gguf(tmp_path: Path, cfg: Mapping[str, Any], fmt: str, arch: str, layout: GgufLayout) -> None:
    _write_gguf(tmp_path / "model.gguf", arch, layout)
    ckpt = find_checkpoint(tmp_path)
    assert ckpt is not None
    assert ckpt.kind == "gguf"
    assert ckpt.total_bytes == _gguf_bytes(layout)
    shape = shape_from_config(cfg, "tiny")
    wb = weight_bytes(shape, spec_for(fmt, shape))
    want_types: dict[str, int] = {}
    for _, t, s in layout:
        want_types[t] = want_types.get(t, 0) + _numel(s)
    assert wb.gguf_types == want_types
    assert wb.total_bytes == ckpt.total_bytes


def test_ggml_block_table_matches_gguf_library() -> None:
    for name, block in GGML.items():
        assert GGML_QUANT_SIZES[GGMLQuantizationType[name]] == block


@pytest.mark.parametrize("cfg", [TINY, TINY_TIED, ODD], ids=["tiny", "tied", "odd"])
def test_gguf_q8_0_checkpoint(tmp_path: Path, cfg: dict[str, Any]) -> None:
    """convert_hf_to_gguf --outtype q8_0: every 2-D tensor Q8_0, 1-D tensors F32."""
    _check_gguf(tmp_path, cfg, "q8_0", "llama", _gguf_llama(cfg, lambda kind, layer: "Q8_0"))


def _q4_k_m_two_layers(kind: str, layer: int, *, tied: bool = False) -> str:
    """llama.cpp's Q4_K_M choice for a 2-layer model (llama_tensor_get_type): output, and token_embd when
    there is no output tensor, Q6_K; attn_v and ffn_down Q6_K on the layers use_more_bits picks, which for
    2 layers is layer 1 only (i >= 7*2/8); everything else Q4_K."""
    if kind == "output" or (kind == "token_embd" and tied):
        return "Q6_K"
    if kind in ("attn_v", "ffn_down", "ffn_down_exps") and layer == 1:
        return "Q6_K"
    return "Q4_K"


def test_gguf_q4_k_m_checkpoint(tmp_path: Path) -> None:
    _check_gguf(tmp_path, TINY, "q4_k_m", "llama", _gguf_llama(TINY, _q4_k_m_two_layers))


def test_gguf_q4_k_m_tied_embedding_is_q6_k(tmp_path: Path) -> None:
    """With no output.weight, llama.cpp gives token_embd the output tensor's type (Q6_K)."""
    layout = _gguf_llama(TINY_TIED, lambda kind, layer: _q4_k_m_two_layers(kind, layer, tied=True))
    assert layout[0] == ("token_embd.weight", "Q6_K", (1024, 256))
    _check_gguf(tmp_path, TINY_TIED, "q4_k_m", "llama", layout)


def test_gguf_q4_k_m_falls_back_when_rows_are_not_256(tmp_path: Path) -> None:
    """Rows of 320 or 704 weights are not whole 256-weight super-blocks: llama.cpp stores Q4_K as Q5_0 and
    Q6_K as Q8_0 (and output as Q8_0)."""

    def ty(kind: str, layer: int) -> str:
        return {"Q4_K": "Q5_0", "Q6_K": "Q8_0"}[_q4_k_m_two_layers(kind, layer)]

    _check_gguf(tmp_path, ODD, "q4_k_m", "llama", _gguf_llama(ODD, ty))


def _gguf_moe(c: Mapping[str, Any], ty: Callable[[str, int], str]) -> GgufLayout:
    """llama.cpp's names for Qwen3-MoE: merged 3-D expert tensors, F32 router (ffn_gate_inp)."""
    h, _, n_layers, q, kv, d = _dims(c)
    e, mi = c["num_experts"], c["moe_intermediate_size"]
    out: GgufLayout = [("token_embd.weight", ty("token_embd", -1), (c["vocab_size"], h))]
    for i in range(n_layers):
        b = f"blk.{i}"
        out += [
            (f"{b}.attn_norm.weight", "F32", (h,)),
            (f"{b}.attn_q.weight", ty("attn_q", i), (q, h)),
            (f"{b}.attn_k.weight", ty("attn_k", i), (kv, h)),
            (f"{b}.attn_v.weight", ty("attn_v", i), (kv, h)),
            (f"{b}.attn_output.weight", ty("attn_output", i), (h, q)),
            (f"{b}.attn_q_norm.weight", "F32", (d,)),
            (f"{b}.attn_k_norm.weight", "F32", (d,)),
            (f"{b}.ffn_norm.weight", "F32", (h,)),
            # convert_hf_to_gguf writes the router in F32 and llama-quantize never quantizes ffn_gate_inp
            (f"{b}.ffn_gate_inp.weight", "F32", (e, h)),
            (f"{b}.ffn_gate_exps.weight", ty("ffn_gate_exps", i), (e, mi, h)),
            (f"{b}.ffn_up_exps.weight", ty("ffn_up_exps", i), (e, mi, h)),
            (f"{b}.ffn_down_exps.weight", ty("ffn_down_exps", i), (e, h, mi)),
        ]
    out += [("output_norm.weight", "F32", (h,)), ("output.weight", ty("output", -1), (c["vocab_size"], h))]
    return out


@pytest.mark.parametrize("fmt", ["q8_0", "q4_k_m"])
def test_gguf_moe_router_stays_f32(tmp_path: Path, fmt: str) -> None:
    ty = (lambda kind, layer: "Q8_0") if fmt == "q8_0" else _q4_k_m_two_layers
    _check_gguf(tmp_path, TINY_MOE, fmt, "qwen3moe", _gguf_moe(TINY_MOE, ty))


# ------------------------------------------------------------------------------------ 4. structure


def test_tied_model_has_no_lm_head_bytes() -> None:
    s = _shape("Llama-3.2-1B-Instruct")
    assert s.tied_embeddings
    for fmt in FORMATS:
        wb = weight_bytes(s, spec_for(fmt, s))
        assert wb.bytes_by_part["lm_head"] == 0, fmt
    assert weight_bytes(s, detect(s)).bytes_by_part["embedding"] == 128_256 * 2048 * 2


ORDER_MODELS = ["Llama-3.1-8B", "Llama-3.2-1B-Instruct", "Qwen3-30B-A3B", "Qwen2.5-7B", "gemma-2-9b",
                "Mixtral-8x7B-v0.1", "DeepSeek-V2-Lite", "Phi-3.5-mini-instruct"]  # fmt: skip


def _assert_more_bits_more_bytes(s: Model) -> None:
    b = {fmt: weight_bytes(s, spec_for(fmt, s)).total_bytes for fmt in FORMATS}
    assert all(type(v) is int for v in b.values())  # whole bytes, never floats
    assert b["fp32"] == 2 * b["bf16"]
    assert b["fp16"] == b["bf16"]
    assert b["fp32"] > b["bf16"] > b["fp8"] > b["awq"]
    assert b["bf16"] > b["int8"] > b["awq"]
    assert b["bf16"] > b["q8_0"] > b["q4_k_m"]
    assert b["fp8"] > b["nvfp4"]
    gptq = [weight_bytes(s, FormatSpec("gptq", bits=n, group_size=128)).total_bytes for n in (2, 3, 4, 8)]
    assert gptq == sorted(gptq) and len(set(gptq)) == 4


@pytest.mark.parametrize("name", ORDER_MODELS)
def test_more_bits_never_fewer_bytes(name: str) -> None:
    _assert_more_bits_more_bytes(_shape(name))


@settings(max_examples=40, deadline=None)
@given(
    hidden=st.sampled_from([256, 512, 768, 1024]),
    inter_mult=st.integers(1, 4),
    layers=st.integers(1, 4),
    vocab=st.integers(1, 16).map(lambda k: k * 256),
    tied=st.booleans(),
    kv=st.sampled_from([1, 2, 4]),
)
def test_more_bits_never_fewer_bytes_hypothesis(
    hidden: int, inter_mult: int, layers: int, vocab: int, tied: bool, kv: int
) -> None:
    cfg = {**TINY, "hidden_size": hidden, "intermediate_size": hidden * inter_mult, "num_hidden_layers": layers,
           "vocab_size": vocab, "tie_word_embeddings": tied, "num_key_value_heads": kv}  # fmt: skip
    _assert_more_bits_more_bytes(shape_from_config(cfg, "tiny"))


# --- a quantized format priced from a 16-bit config: what the quantizer leaves in 16 bits --------------------------


def test_nvfp4_from_a_16_bit_config_keeps_what_modelopt_keeps() -> None:
    """ModelOpt's standard exclusions (default_disabled_quantizers.yaml): Gated DeltaNet's in_proj_a / in_proj_b,
    the shared expert's gate and the MTP layers stay 16-bit in its NVFP4 checkpoints."""
    cfg = Path(__file__).parent / "fixtures" / "configs-v2" / "extra" / "qwen3_5_moe--35b-a3b.json"
    shape = shape_from_config(json.loads(cfg.read_text()))
    ts = shape.tensors(mtp=True)
    spec = spec_for("nvfp4", shape)
    sizes = formats_tensor_bytes(shape, spec, ts)
    kept = [
        (t, b) for t, b in zip(ts, sizes, strict=True) if t.name.startswith("mtp.") and t.role in ("linear", "expert")
    ]
    assert kept and all(b == t.numel * 2 for t, b in kept)  # bf16, unquantized
    ab = [
        (t, b)
        for t, b in zip(ts, sizes, strict=True)
        if ".linear_attn.in_proj_a" in t.name or ".linear_attn.in_proj_b" in t.name
    ]
    assert ab and all(b == t.numel * 2 for t, b in ab)
    experts = [(t, b) for t, b in zip(ts, sizes, strict=True) if t.role == "expert" and not t.name.startswith("mtp.")]
    assert experts and all(b < t.numel for t, b in experts)  # 4 bits and scales: under a byte a weight
