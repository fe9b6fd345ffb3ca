"""launcher.vllm.quant.resolve and the layouts it prices: which --quantization a checkpoint and a vLLM release take,
what vLLM makes while loading a 16-bit checkpoint, and mixed-precision checkpoints priced layer by layer.

Expected bytes are derived by hand below from each layout (vLLM 0.32's online methods, ModelOpt's and
compressed-tensors' on-disk tensors) and the tiny models' dimensions; expected verdicts from vLLM's own rules
(ModelConfig._verify_quantization, each override_quantization_method, weight_utils.get_quant_config), cited per row.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from launcher.common.errors import FormatError
from launcher.model.arch import Model, read_config
from launcher.model.formats import detect, spec_for, weight_bytes
from launcher.plan.profiles import profile_from_mapping
from launcher.vllm import quant
from launcher.vllm.versions import Version
from tests.conftest import CONFIGS

FIXTURES = Path(__file__).parent / "fixtures"
QWEN35_SMALL = FIXTURES / "configs-v2" / "extra" / "qwen3_5_moe_text--small-interval.json"
MIXED = FIXTURES / "quant" / "qwen3_5_moe_text-small-mixed.hf_quant_config.json"

# A Llama: hidden 256, 2 layers, 4 heads x 64 (2 KV heads: k/v 128 rows), MLP 512, vocabulary 1024, untied.
TINY_DENSE: dict[str, Any] = {
    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 256, "intermediate_size": 512,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
    "vocab_size": 1024, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "max_position_embeddings": 4096,
}  # fmt: skip
# A Qwen3 MoE: hidden 256, 2 layers, 4 heads x 64 (2 KV heads), 4 experts of 128, vocabulary 1024, untied.
TINY_MOE: dict[str, Any] = {
    "model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 256,
    "intermediate_size": 512, "moe_intermediate_size": 128, "num_experts": 4, "num_experts_per_tok": 2,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
    "vocab_size": 1024, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "max_position_embeddings": 4096,
    "decoder_sparse_step": 1, "mlp_only_layers": [],
}  # fmt: skip

# Dense, per layer: q 256x256, k 128x256, v 128x256, o 256x256, gate 512x256, up 512x256, down 256x512 =
# 589,824 weights; 2 layers: 1,179,648 linear weights. 16-bit rest: embedding + lm_head 2 x 262,144 and norms
# (2 x 256 per layer + 256) 1,280 weights: 1,051,136 bytes.
DENSE_REST = (2 * 1024 * 256 + 2 * 2 * 256 + 256) * 2
DENSE_LINEAR = 2 * (256 * 256 + 128 * 256 + 128 * 256 + 256 * 256 + 512 * 256 + 512 * 256 + 256 * 512)
# fp8 per tensor: 1 byte per weight + one fp32 scale per vLLM module (qkv_proj, o_proj, gate_up_proj, down_proj).
FP8_PER_TENSOR = DENSE_LINEAR + 2 * 4 * 4 + DENSE_REST
# 128x128 blocks: q 2x2, k 1x2, v 1x2, o 2x2, gate 4x2, up 4x2, down 2x4 = 36 fp32 scales per layer.
FP8_PER_BLOCK = DENSE_LINEAR + 2 * 36 * 4 + DENSE_REST
# one fp32 scale per output row: 256 + 128 + 128 + 256 + 512 + 512 + 256 = 2,048 rows per layer.
FP8_PER_CHANNEL = DENSE_LINEAR + 2 * 2048 * 4 + DENSE_REST
# one E8M0 byte per 32 inputs of each row: q 256x8, k 128x8, v 128x8, o 256x8, gate 512x8, up 512x8, down 256x16.
MX_SCALES = 2 * (256 * 8 + 128 * 8 + 128 * 8 + 256 * 8 + 512 * 8 + 512 * 8 + 256 * 16)
MXFP8 = DENSE_LINEAR + MX_SCALES + DENSE_REST
MXFP4 = DENSE_LINEAR // 2 + MX_SCALES + DENSE_REST  # two e2m1 values per byte

# MoE, per layer: attention q/k/v/o 196,608 weights, the router 4x256, q_norm + k_norm 128, norms 2 x 256; experts
# 4 x (gate 128x256, up 128x256, down 256x128). 16-bit all but the experts:
MOE_REST = (2 * (196_608 + 4 * 256 + 128 + 512) + 256 + 2 * 1024 * 256) * 2
EXPERT_W = 128 * 256  # weights of each expert matrix
# int8 experts: 1 byte per weight + an fp32 scale per output row (gate 128, up 128, down 256 rows).
INT8_EXPERTS = 2 * 4 * (3 * EXPERT_W + (128 + 128 + 256) * 4) + MOE_REST
# NVFP4 experts: half a byte per weight + an fp8 scale per 16 inputs of each row (gate 128x16, up 128x16, down
# 256x8 = 2,048 each) + per expert an fp32 weight_scale_2 and input_scale for w13 (gate+up fused) and for w2.
NVFP4_EXPERTS = 2 * 4 * (3 * EXPERT_W // 2 + 3 * 2048 + 2 * 8) + MOE_REST
# fp8 per tensor on the MoE: attention (qkv, o) and every expert's w13 and w2 one fp32 scale each.
FP8_MOE = 2 * (196_608 + 2 * 4 + 4 * (3 * EXPERT_W + 2 * 4)) + MOE_REST - 2 * 196_608 * 2


def _model(cfg: dict[str, Any]) -> Model:
    return read_config(cfg, "tiny")


@pytest.mark.parametrize(
    ("cfg", "flag", "expected"),
    [
        (TINY_DENSE, "fp8", FP8_PER_TENSOR),
        (TINY_DENSE, "fp8_per_tensor", FP8_PER_TENSOR),
        (TINY_DENSE, "fp8_per_block", FP8_PER_BLOCK),
        (TINY_DENSE, "fp8_per_channel", FP8_PER_CHANNEL),
        (TINY_DENSE, "mxfp8", MXFP8),
        (TINY_DENSE, "mxfp4", MXFP4),
        (TINY_DENSE, "int8_per_channel_weight_only", (DENSE_LINEAR * 2 + DENSE_REST)),  # no experts: all 16-bit
        (TINY_MOE, "int8_per_channel_weight_only", INT8_EXPERTS),
        (TINY_MOE, "experts_int8", INT8_EXPERTS),
        (TINY_MOE, "nvfp4_per_token", NVFP4_EXPERTS),
        (TINY_MOE, "fp8_per_tensor", FP8_MOE),
    ],
)
def test_online_layouts_bytes(cfg: dict[str, Any], flag: str, expected: int) -> None:
    m = _model(cfg)
    r = quant.resolve(flag, detect(m), m, (0, 32, 0))
    assert (r.flag, r.refusal) == (flag, None)
    assert weight_bytes(m, r.spec).total_bytes == expected


def test_online_keeps_embedding_lm_head_router_16_bit() -> None:
    m = _model(TINY_MOE)
    wb = weight_bytes(m, quant.resolve("fp8_per_block", detect(m), m, (0, 32, 0)).spec)
    assert {"embedding", "lm_head", "router", "norms"} <= set(wb.kept_16bit)
    assert wb.bytes_by_part["lm_head"] == 1024 * 256 * 2


# (version, config, --quantization) -> (flag carried, a piece of the refusal or None, the format priced)
V32: Version = (0, 32, 0)


def _awq(cfg: dict[str, Any]) -> dict[str, Any]:
    return {**cfg, "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}}


def _gptq(cfg: dict[str, Any]) -> dict[str, Any]:
    return {**cfg, "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False}}


def _fp8(cfg: dict[str, Any]) -> dict[str, Any]:
    q = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
    return {**cfg, "quantization_config": q}


RESOLVE_CASES: list[tuple[Version, dict[str, Any], str | None, str | None, str | None, str]] = [
    # a 16-bit checkpoint: only what vLLM makes while loading it (weight_utils.get_quant_config)
    (V32, TINY_DENSE, None, None, None, "bf16"),
    (V32, TINY_DENSE, "fp8", "fp8", None, "fp8"),  # Fp8Config online (0.32: as fp8_per_tensor)
    (V32, TINY_DENSE, "fp8_e4m3", "fp8", None, "fp8"),  # vlaunch's alias: the command carries vLLM's name
    (V32, TINY_DENSE, "bfloat16", None, None, "bf16"),
    ((0, 19, 0), TINY_DENSE, "fp8_per_block", None, "Unknown quantization method", "fp8"),
    ((0, 20, 0), TINY_DENSE, "fp8_per_block", "fp8_per_block", None, "fp8"),  # OnlineQuantScheme, 0.20
    ((0, 23, 0), TINY_DENSE, "fp8_per_channel", None, "Unknown quantization method", "fp8"),
    ((0, 24, 0), TINY_DENSE, "fp8_per_channel", "fp8_per_channel", None, "fp8"),
    ((0, 19, 0), TINY_DENSE, "mxfp8", "mxfp8", None, "mxfp8"),  # 0.19's online Mxfp8Config
    ((0, 27, 0), TINY_DENSE, "mxfp4", "mxfp4", "cannot make mxfp4", "mxfp4"),  # Mxfp4Config needs mxfp4 weights
    ((0, 28, 0), TINY_DENSE, "mxfp4", "mxfp4", None, "mxfp4"),  # _DEFERRED_ONLINE_SHORTHANDS, 0.28
    ((0, 25, 0), TINY_MOE, "nvfp4_per_token", None, "Unknown quantization method", "nvfp4"),
    ((0, 26, 0), TINY_MOE, "nvfp4_per_token", "nvfp4_per_token", None, "nvfp4"),
    (V32, TINY_DENSE, "awq", "awq", "Cannot find the config file for awq", "awq"),
    (V32, TINY_DENSE, "gptq_marlin", "gptq_marlin", "Cannot find the config file for gptq_marlin", "gptq"),
    (V32, TINY_DENSE, "compressed-tensors", "compressed-tensors", "cannot make compressed-tensors", "bf16"),
    (V32, TINY_DENSE, "modelopt", "modelopt", "Cannot find the config file for modelopt", "fp8"),
    (V32, TINY_DENSE, "nvfp4", None, "cannot make nvfp4", "nvfp4"),  # vlaunch's name: never passed
    (V32, TINY_MOE, "nvfp4", None, "--quantization nvfp4_per_token quantizes the MoE experts", "nvfp4"),
    (V32, TINY_DENSE, "w4a16", None, "cannot make w4a16", "w4a16"),
    (V32, TINY_DENSE, "online", "online", "--quantization-config", "bf16"),
    ((0, 27, 0), TINY_DENSE, "bitsandbytes", "bitsandbytes", "does not price", "bf16"),
    ((0, 28, 0), TINY_DENSE, "bitsandbytes", None, "Unknown quantization method", "bf16"),  # removed in 0.28
    ((0, 23, 0), TINY_DENSE, "q4_k_m", None, "only from a .gguf file", "q4_k_m"),
    # a quantized checkpoint: the names its method's override accepts, else vLLM's mismatch
    (V32, _awq(TINY_DENSE), None, None, None, "awq"),
    (V32, _awq(TINY_DENSE), "awq_marlin", "awq_marlin", None, "awq"),  # AutoAWQConfig override
    (V32, _awq(TINY_DENSE), "awq", "awq", None, "awq"),
    (V32, _awq(TINY_DENSE), "gptq", "gptq", "(awq) does not match the quantization method specified", "awq"),
    (V32, _awq(TINY_DENSE), "moe_wna16", "moe_wna16", "does not match", "awq"),  # not a MoE
    (V32, _awq(TINY_MOE), "moe_wna16", "moe_wna16", None, "awq"),  # MoeWNA16Config: 4-bit AWQ MoE
    (V32, _awq(TINY_DENSE), "bf16", None, "drop --quantization bf16", "bf16"),
    (V32, _awq(TINY_DENSE), "nvfp4", None, "cannot make nvfp4", "nvfp4"),
    (V32, _gptq(TINY_DENSE), "gptq_marlin", "gptq_marlin", None, "gptq"),
    ((0, 10, 0), _gptq(TINY_DENSE), "marlin", "marlin", None, "gptq"),
    (V32, _fp8(TINY_DENSE), "fp8", "fp8", None, "fp8"),
    (V32, _fp8(TINY_DENSE), "fp8_per_block", "fp8_per_block", "(fp8) does not match", "fp8"),
    (V32, _fp8(TINY_DENSE), "awq", "awq", "does not match", "fp8"),
]


@pytest.mark.parametrize(
    ("version", "cfg", "requested", "flag", "refusal", "priced"), RESOLVE_CASES, ids=[str(i) for i in range(37)]
)
def test_resolve(
    version: Version, cfg: dict[str, Any], requested: str | None, flag: str | None, refusal: str | None, priced: str
) -> None:
    m = _model(cfg)
    r = quant.resolve(requested, detect(m), m, version)
    assert r.flag == flag
    if refusal is None:
        assert r.refusal is None
    else:
        assert r.refusal is not None and refusal in r.refusal and "\n" not in r.refusal
    assert r.spec.name == priced


def test_methods_per_release() -> None:
    """Read from each release's quantization/__init__.py."""
    assert "gguf" in quant.methods((0, 23, 0)) and "gguf" not in quant.methods((0, 24, 0))
    assert "modelopt_mixed" not in quant.methods((0, 16, 0)) and "modelopt_mixed" in quant.methods((0, 17, 0))
    assert "bitsandbytes" in quant.methods((0, 27, 0)) and "bitsandbytes" not in quant.methods((0, 28, 0))
    assert quant.online((0, 32, 0)) == (
        "fp8", "experts_int8", "mxfp8", "fp8_per_tensor", "fp8_per_block", "int8_per_channel_weight_only",
        "fp8_per_channel", "nvfp4_per_token", "mxfp4",
    )  # fmt: skip
    assert quant.online((0, 18, 0)) == ("fp8", "experts_int8")


# --- mixed precision ---------------------------------------------------------------------------------------------

# The fixture: NVIDIA's MIXED_PRECISION layout on the small Qwen3.5 MoE (hidden 768, 6 layers: linear attention
# in 0, 1, 3, 4 and full attention in 2, 5; 16 experts of 192; a shared expert of 384; vocabulary 32,000): the
# routed experts NVFP4 (listed expert by expert), attention, linear attention's in_proj_qkv / in_proj_z / out_proj
# and the shared expert FP8; in_proj_a / in_proj_b, the routers and lm_head excluded.
# NVFP4 matrix (gate 192x768, up 192x768, down 768x192): 73,728 packed bytes + 9,216 fp8 scales + weight_scale_2
# and input_scale (8).
NVFP4_MATRIX = 192 * 768 // 2 + 192 * 768 // 16 + 8
EXPERTS = 6 * 16 * 3 * NVFP4_MATRIX
# ModelOpt FP8 matrix: 1 byte per weight + fp32 weight_scale and input_scale.
LINEAR_ATTN = 4 * ((8192 + 4096) * 768 + 768 * 4096 + 3 * 8)
SELF_ATTN = 2 * ((1536 + 256 + 256 + 768) * 768 + 4 * 8)
SHARED = 6 * (3 * 384 * 768 + 3 * 8)
# 16-bit: embedding and lm_head, in_proj_a/b (2 x 32x768 in 4 layers), routers (16x768 and 1x768 in 6 layers),
# norms (2 x 768 per layer + 768, linear attention's 128 in 4 layers, q_norm + k_norm 256 in 2 layers), conv1d
# (8192x4 in 4 layers), dt_bias and A_log (2 x 32 in 4 layers).
REST = 2 * (
    2 * 32000 * 768 + 4 * 2 * 32 * 768 + 6 * 17 * 768 + (6 * 2 * 768 + 768 + 4 * 128 + 2 * 256) + 4 * 8192 * 4 + 4 * 64
)
MIXED_TOTAL = EXPERTS + LINEAR_ATTN + SELF_ATTN + SHARED + REST


def _small() -> Model:
    return read_config(json.loads(QWEN35_SMALL.read_text()), "small")


def test_modelopt_mixed_from_hf_quant_config_priced_layer_by_layer() -> None:
    m = _small()
    spec = detect(m, json.loads(MIXED.read_text()))
    assert (spec.method, spec.source) == ("modelopt_mixed", "hf_quant_config.json")
    wb = weight_bytes(m, spec)
    assert wb.total_bytes == MIXED_TOTAL == 182_994_480
    assert {"lm_head", "router", "embedding"} <= set(wb.kept_16bit)
    assert spec.describe() == "modelopt_mixed per layer: fp8 + nvfp4"


def test_modelopt_mixed_in_config_json() -> None:
    """ModelOpt 0.31+ writes the same map into config.json's quantization_config (`ignore` for the exclusions)."""
    hq = json.loads(MIXED.read_text())["quantization"]
    cfg = json.loads(QWEN35_SMALL.read_text())
    cfg["quantization_config"] = {
        "quant_method": "modelopt", "quant_algo": "MIXED_PRECISION", "ignore": hq["exclude_modules"],
        "quantized_layers": hq["quantized_layers"], "kv_cache_scheme": {"type": "float", "num_bits": 8},
    }  # fmt: skip
    m = read_config(cfg, "small")
    assert weight_bytes(m, detect(m)).total_bytes == MIXED_TOTAL
    # older exports keep the per-layer map in hf_quant_config.json beside a config.json naming MIXED_PRECISION
    del cfg["quantization_config"]["quantized_layers"]
    m = read_config(cfg, "small")
    assert weight_bytes(m, detect(m, json.loads(MIXED.read_text()))).total_bytes == MIXED_TOTAL


def test_modelopt_mixed_served_where_vllm_reads_it() -> None:
    m = _small()
    hf_only = detect(m, json.loads(MIXED.read_text()))
    why = quant.resolve(None, hf_only, m, (0, 32, 0)).refusal
    assert why is not None and why.startswith("Unknown ModelOpt quant algo: MIXED_PRECISION")
    assert quant.resolve(None, hf_only, m, (0, 33, 0)).refusal is None  # 0.33 normalizes it
    # any --quantization: ModelOptMixedPrecisionConfig's override takes the checkpoint (vLLM 0.32)
    assert quant.resolve("fp8", hf_only, m, (0, 33, 0)) == quant.Resolved(hf_only, "fp8", None)
    cfg = json.loads(QWEN35_SMALL.read_text())
    hq = json.loads(MIXED.read_text())["quantization"]
    cfg["quantization_config"] = {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION", **hq}
    m = read_config(cfg, "small")
    why = quant.resolve(None, detect(m), m, (0, 16, 0)).refusal
    assert why is not None and "no modelopt_mixed" in why and "0.17.0+" in why
    assert quant.resolve(None, detect(m), m, (0, 17, 0)).refusal is None


def test_compressed_tensors_config_groups_by_targets() -> None:
    """Two groups: the routed experts NVFP4 (regex target), attention and the shared expert FP8; linear attention
    matches no target and stays 16-bit; `ignore` keeps the routers."""
    cfg = json.loads(QWEN35_SMALL.read_text())
    cfg["quantization_config"] = {
        "quant_method": "compressed-tensors", "format": "mixed-precision",
        "config_groups": {
            "group_0": {"targets": ["re:.*mlp\\.experts\\..*"], "format": "nvfp4-pack-quantized",
                        "weights": {"num_bits": 4, "type": "float", "group_size": 16},
                        "input_activations": {"num_bits": 4, "type": "float", "group_size": 16}},
            "group_1": {"targets": ["re:.*self_attn\\..*", "re:.*shared_expert\\.(gate|up|down)_proj"],
                        "format": "float-quantized", "weights": {"num_bits": 8, "type": "float"},
                        "input_activations": {"num_bits": 8, "type": "float"}},
        },
        "ignore": ["lm_head", "re:.*mlp\\.gate$", "re:.*shared_expert_gate$"],
    }  # fmt: skip
    m = read_config(cfg, "small")
    spec = detect(m)
    assert spec.method == "compressed-tensors" and spec.layers
    linear_attn_16 = 4 * 2 * ((8192 + 4096 + 32 + 32) * 768 + 768 * 4096)
    rest = REST - 4 * 2 * 2 * 32 * 768  # in_proj_a/b now counted with linear attention
    assert weight_bytes(m, spec).total_bytes == EXPERTS + SELF_ATTN + SHARED + linear_attn_16 + rest == 233_326_032


def test_awq_modules_to_not_convert() -> None:
    """AWQ keeps the modules named in modules_to_not_convert in 16 bits (auto_awq.py is_layer_skipped)."""
    cfg = _awq(TINY_DENSE)
    cfg["quantization_config"]["modules_to_not_convert"] = ["mlp.down_proj"]
    m = _model(cfg)
    down_16 = 2 * 256 * 512 * 2
    # AWQ matrix: 4-bit packed + fp16 scale and 4-bit zero per 128 inputs of each row
    awq = sum(o * i // 2 + o * (i // 128) * 2 + o * (i // 128) // 2 for o, i in
              [(256, 256), (128, 256), (128, 256), (256, 256), (512, 256), (512, 256)])  # fmt: skip
    assert weight_bytes(m, detect(m)).total_bytes == 2 * awq + down_16 + DENSE_REST


def test_mixed_precision_malformed() -> None:
    with pytest.raises(FormatError, match="quantized_layers"):
        detect(_small(), {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "MIXED_PRECISION"}})
    bad = copy.deepcopy(json.loads(MIXED.read_text()))
    next(iter(bad["quantization"]["quantized_layers"].values()))["quant_algo"] = "W4A8_AWQ"
    with pytest.raises(FormatError, match="W4A8_AWQ"):
        detect(_small(), bad)


def test_spec_for_prices_online_shorthands() -> None:
    """`count --format` keeps pricing any name: the online shorthands as vLLM lays them out."""
    m = _model(TINY_DENSE)
    assert weight_bytes(m, spec_for("fp8_per_block", m)).total_bytes == FP8_PER_BLOCK


@pytest.mark.parametrize("value", ["fp8_per_block", "AWQ_Marlin", "modelopt_mixed", "nvfp4", "q4km", "experts_int8"])
def test_profile_keeps_the_value_as_written(value: str) -> None:
    assert profile_from_mapping({"model": "m", "quantization": value}).quantization == value.lower()


def test_plan_refuses_a_format_the_checkpoint_does_not_hold() -> None:
    from launcher.plan import planning

    model = str(CONFIGS / "Llama-3.1-8B.json")
    base = {"model": model, "machine": "h100", "max_model_len": 8192, "vllm": {"version": "0.32.0"}}
    plan = planning.make_plan(profile_from_mapping({**base, "quantization": "awq"}), live=False)
    assert plan.fits is False and plan.invalid is not None and "cannot make awq" in plan.invalid
    plan = planning.make_plan(profile_from_mapping({**base, "quantization": "fp8_per_block"}), live=False)
    assert plan.fits is True
    i = plan.argv.index("--quantization")
    assert plan.argv[i + 1] == "fp8_per_block"


# ModelOpt MIXED_PRECISION names a layer's routed experts as one container (no expert index, no trailing dot), the
# form of NVIDIA's Qwen3.6 / MiniMax exports: vLLM's _resolve_quant_algo finds the experts by that key (its prefix
# lookup). A 16-bit lm_head the export lists is quantized too (ParallelLMHead takes the ModelOpt method).
def _mixed(layers: dict[str, Any]) -> dict[str, Any]:
    cfg = copy.deepcopy(TINY_MOE)
    cfg["quantization_config"] = {
        "quant_method": "modelopt",
        "quant_algo": "MIXED_PRECISION",
        "quantized_layers": layers,
    }
    return cfg


def test_mixed_precision_container_key_prices_the_experts() -> None:
    nvfp4 = {"quant_algo": "NVFP4", "group_size": 16}
    cfg = _mixed({f"model.layers.{i}.mlp.experts": nvfp4 for i in range(2)})
    model = _model(cfg)
    # as stored: each expert's gate, up and down with its fp8 group scales, and a weight_scale_2 and input_scale each
    stored = 2 * 4 * (3 * EXPERT_W // 2 + 3 * 2048 + 3 * 8) + MOE_REST
    assert weight_bytes(model, detect(model)).total_bytes == stored


def test_mixed_precision_lm_head_listed_is_quantized() -> None:
    cfg = _mixed({"lm_head": {"quant_algo": "FP8"}})
    model = _model(cfg)
    # lm_head 1024 x 256: one byte per weight, a per-tensor weight_scale and input_scale (fp32) instead of 2 bytes
    assert weight_bytes(model, detect(model)).total_bytes == MOE_REST + 2 * 4 * 3 * EXPERT_W * 2 - 1024 * 256 + 8


def test_modelopt_without_producer_is_what_vllm_reads_as_unquantized() -> None:
    model = _model(TINY_DENSE)
    side = {"quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}}  # no "producer"
    refused = quant.resolve(None, detect(model, side), model, Version((0, 32, 0))).refusal
    assert refused is not None and "producer" in refused
    side["producer"] = {"name": "modelopt", "version": "0.23.0"}
    assert quant.resolve(None, detect(model, side), model, Version((0, 32, 0))).refusal is None


def test_qwen3_5_export_with_expert_containers_is_priced_at_four_bits() -> None:
    """A ModelOpt MIXED_PRECISION export of Qwen3.5-35B-A3B naming each layer's experts as one container
    (`model.language_model.layers.N.mlp.experts`, the form of NVIDIA's Qwen3.6 exports): the experts are NVFP4, the
    rest stays 16-bit. Priced per expert before, the experts stayed bf16 (65.4 GiB instead of 22.3)."""
    cfg = json.loads((FIXTURES / "configs-2026" / "Qwen--Qwen3.5-35B-A3B_config.json").read_text())
    plain = _model(cfg)
    nvfp4 = {"quant_algo": "NVFP4", "group_size": 16}
    layers = {f"model.language_model.layers.{i}.mlp.experts": nvfp4 for i in range(40)}
    cfg["quantization_config"] = {
        "quant_method": "modelopt",
        "quant_algo": "MIXED_PRECISION",
        "quantized_layers": layers,
    }
    model = _model(cfg)
    # 40 layers x 256 experts, each gate and up 512 x 2048 and down 2048 x 512: half a byte per weight, an fp8 scale
    # per 16 inputs of each row (512 x 128, 512 x 128, 2048 x 32) and a weight_scale_2 + input_scale per matrix
    per_expert = 3 * 512 * 2048 // 2 + 3 * 65_536 + 3 * 8
    expert_weights = 40 * 256 * 3 * 512 * 2048
    sixteen_bit = weight_bytes(plain, detect(plain)).total_bytes - 2 * expert_weights
    assert weight_bytes(model, detect(model)).total_bytes == sixteen_bit + 40 * 256 * per_expert
