"""The KV cache dtype a checkpoint sets (ModelOpt's kv_cache_quant_algo / kv_cache_scheme, compressed-tensors'
kv_cache_scheme) per vLLM release, the dtypes vLLM refuses for a model or GPU, and what both do to a plan.

The releases are read from vLLM's own source: utils/torch_utils.py resolve_kv_cache_dtype_string (0.14; nvfp4 in
MODELOPT_TO_VLLM_KV_CACHE_DTYPE_MAP from 0.20) and Attention.__init__ (compressed-tensors: fp8 over any choice in
0.15-0.21, only over "auto" from 0.22)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from launcher.model.arch import read_config
from launcher.plan.planning import Plan, make_plan, profile_from_flags
from launcher.vllm import pool as vp
from launcher.vllm import versions as V
from launcher.vllm.kvdtypes import checkpoint_kv_dtype, kv_refusal
from launcher.vllm.specs import FullAttentionSpec, MambaSpec
from tests.conftest import CONFIGS

FIXTURES = Path(__file__).parent / "fixtures"
QWEN35_NVFP4 = FIXTURES / "kv" / "qwen3_5_moe--35b-a3b-nvfp4-kv-fp8.json"  # ModelOpt NVFP4, kv_cache_quant_algo FP8
LLAMA70_FP8 = CONFIGS / "Llama-3.1-70B-Instruct-FP8-nvidia.json"  # beside its hf_quant_config.json (ModelOpt 0.23)

LLAMA = json.loads((CONFIGS / "Llama-3.1-8B.json").read_text())
DEEPSEEK = json.loads((CONFIGS / "DeepSeek-V3.json").read_text())
FP8_SCHEME = {"dynamic": False, "num_bits": 8, "type": "float"}
SIDECAR = {"producer": {"name": "modelopt", "version": "0.23.0"},
           "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}}  # fmt: skip


def _with(cfg: dict[str, Any], quant: dict[str, Any] | None) -> Any:
    return read_config({**cfg, "quantization_config": quant} if quant is not None else cfg)


CHECKPOINTS = [
    # id, config, quantization_config, hf_quant_config.json, vLLM, --kv-cache-dtype, (dtype, taken) or None
    ("modelopt-fp8", LLAMA, {"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}, None,
     (0, 14, 0), "auto", ("fp8_e4m3", True)),
    ("modelopt-fp8-0.13", LLAMA, {"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "FP8"},
     None, (0, 13, 0), "auto", ("fp8_e4m3", False)),
    ("modelopt-fp8-explicit", LLAMA, {"quant_method": "modelopt", "quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8"},
     None, (0, 32, 0), "bfloat16", ("fp8_e4m3", False)),
    ("modelopt-scheme", LLAMA, {"quant_method": "modelopt", "quant_algo": "NVFP4", "kv_cache_scheme": FP8_SCHEME},
     None, (0, 32, 0), "auto", ("fp8_e4m3", True)),
    ("modelopt-dynamic-scheme", LLAMA, {"quant_method": "modelopt", "quant_algo": "NVFP4",
     "kv_cache_scheme": {**FP8_SCHEME, "dynamic": True}}, None, (0, 32, 0), "auto", None),
    ("modelopt-nvfp4", LLAMA, {"quant_method": "modelopt", "quant_algo": "NVFP4", "kv_cache_quant_algo": "NVFP4"},
     None, (0, 20, 0), "auto", ("nvfp4", True)),
    ("modelopt-nvfp4-0.19", LLAMA, {"quant_method": "modelopt", "quant_algo": "NVFP4",
     "kv_cache_quant_algo": "NVFP4"}, None, (0, 19, 0), "auto", ("nvfp4", False)),
    ("modelopt-fp4-scheme", LLAMA, {"quant_method": "modelopt", "quant_algo": "NVFP4",
     "kv_cache_scheme": {"num_bits": 4, "type": "float"}}, None, (0, 32, 0), "auto", ("nvfp4", True)),
    ("modelopt-unknown", LLAMA, {"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "INT8"},
     None, (0, 32, 0), "auto", None),
    ("sidecar", LLAMA, None, SIDECAR, (0, 32, 0), "auto", ("fp8_e4m3", True)),
    ("sidecar-behind-config", LLAMA, {"quant_method": "fp8"}, SIDECAR, (0, 32, 0), "auto", None),
    ("ct-0.14", LLAMA, {"quant_method": "compressed-tensors", "kv_cache_scheme": FP8_SCHEME}, None, (0, 14, 0),
     "auto", ("fp8", False)),
    ("ct-0.15", LLAMA, {"quant_method": "compressed-tensors", "kv_cache_scheme": FP8_SCHEME}, None, (0, 15, 0),
     "auto", ("fp8", True)),
    ("ct-0.21-over-explicit", LLAMA, {"quant_method": "compressed-tensors", "kv_cache_scheme": FP8_SCHEME}, None,
     (0, 21, 0), "bfloat16", ("fp8", True)),
    ("ct-0.22-explicit-wins", LLAMA, {"quant_method": "compressed-tensors", "kv_cache_scheme": FP8_SCHEME}, None,
     (0, 22, 0), "bfloat16", ("fp8", False)),
    ("ct-0.22", LLAMA, {"quant_method": "compressed-tensors", "kv_cache_scheme": FP8_SCHEME}, None, (0, 22, 0),
     "auto", ("fp8", True)),
    ("ct-mla", DEEPSEEK, {"quant_method": "compressed-tensors", "kv_cache_scheme": FP8_SCHEME}, None, (0, 32, 0),
     "auto", None),  # MLAAttention reads no kv_cache_scheme
    ("fp8-weights-only", LLAMA, {"quant_method": "fp8"}, None, (0, 32, 0), "auto", None),
]  # fmt: skip


@pytest.mark.parametrize(("cfg", "quant", "sidecar", "version", "asked", "expected"), [r[1:] for r in CHECKPOINTS],
                         ids=[r[0] for r in CHECKPOINTS])  # fmt: skip
def test_checkpoint_kv_dtype(
    cfg: dict[str, Any],
    quant: dict[str, Any] | None,
    sidecar: dict[str, Any] | None,
    version: V.Version,
    asked: str,
    expected: tuple[str, bool] | None,
) -> None:
    found = checkpoint_kv_dtype(_with(cfg, quant), sidecar, version, asked)
    assert (None if found is None else (found.dtype, found.taken)) == expected


def test_rules_are_listed_by_release() -> None:
    assert V.KV_FP8_FROM_CHECKPOINT in V.changes_in((0, 14, 0))
    assert V.KV_NVFP4_FROM_CHECKPOINT in V.changes_in((0, 20, 0))
    assert V.KV_SCHEME_FP8 in V.changes_in((0, 15, 0))
    assert V.KV_SCHEME_AUTO_ONLY in V.changes_in((0, 22, 0))


GPT_OSS = json.loads((CONFIGS / "gpt-oss-20b.json").read_text())  # head_dim 64, attention sinks
V32 = json.loads((CONFIGS.parent / "configs-v2" / "extra" / "deepseek_v32--deepseek-v3.2-exp.json").read_text())

REFUSALS = [
    # dtype, config, platform, compute capability, a phrase of the refusal (None: served)
    ("fp8", LLAMA, "cuda", "9.0", None),
    ("fp8_inc", LLAMA, "cuda", "9.0", "Gaudi"),
    ("ultraquant_4bit", LLAMA, "cuda", "10.0", "ROCm"),
    ("int8_per_token_head", LLAMA, "cuda", "8.0", None),
    ("int8_per_token_head", LLAMA, "cpu", None, "CPU attention backend"),
    ("fp8_e5m2", LLAMA, "cpu", None, None),
    ("fp8", {**LLAMA, "hidden_size": 4096, "num_attention_heads": 64}, "cpu", None, None),  # head 64
    ("fp8", {**LLAMA, "hidden_size": 3072, "num_attention_heads": 64}, "cpu", None, "divisible by 32"),  # head 48
    ("turboquant_k8v4", LLAMA, "cuda", "8.0", None),
    ("nvfp4", LLAMA, "cuda", "9.0", None),
    ("nvfp4", LLAMA, "cuda", "12.1", None),
    ("nvfp4", LLAMA, "cuda", "7.5", "SM80"),
    ("nvfp4_4over6", LLAMA, "cuda", "9.0", "needs SM100"),
    ("nvfp4_4over6", LLAMA, "cuda", "10.0", None),
    ("nvfp4", GPT_OSS, "cuda", "9.0", "head_size 64"),
    ("nvfp4", GPT_OSS, "cuda", "10.0", None),
    ("fp8_ds_mla", LLAMA, "cuda", "9.0", "MLA layout"),
    ("nvfp4", DEEPSEEK, "cuda", "10.0", "not supported with MLA"),
    ("int8_per_token_head", DEEPSEEK, "cuda", "9.0", "no MLA attention backend"),
    ("fp8_e5m2", DEEPSEEK, "cuda", "9.0", "no MLA attention backend"),
    ("fp8_ds_mla", DEEPSEEK, "cuda", "9.0", "sparse-MLA"),
    ("fp8_ds_mla", V32, "cuda", "9.0", None),
    ("nvfp4_ds_mla", V32, "cuda", "9.0", "SM100"),
    ("nvfp4_ds_mla", V32, "cuda", "10.0", None),
    ("fp8", DEEPSEEK, "cpu", None, "CPU MLA backend"),
]


@pytest.mark.parametrize(("dtype", "cfg", "platform", "cc", "phrase"), REFUSALS,
                         ids=[f"{r[0]}-{r[2]}-{r[3]}-{i}" for i, r in enumerate(REFUSALS)])  # fmt: skip
def test_refusals(dtype: str, cfg: dict[str, Any], platform: str, cc: str | None, phrase: str | None) -> None:
    why = kv_refusal(dtype, read_config(cfg), platform=platform, compute_capability=cc)
    assert (why is None) if phrase is None else (why is not None and phrase in why), why


# --- plans -----------------------------------------------------------------------------------------------------------


def _plan(config: Path, version: str, **flags: Any) -> Plan:
    p = profile_from_flags(None, str(config), machine="dgx-spark", max_model_len=32768, **flags)
    return make_plan(p.with_overrides(vllm={"version": version}), live=False)


# Qwen3.5-35B-A3B's Gated DeltaNet state: conv (2·16·128 + 32·128 channels × 3 taps, bf16) + recurrent
# (32 heads × 128 × 128, float32 as mamba_ssm_dtype says) = 49,152 + 2,097,152 bytes
STATE = 8192 * 3 * 2 + 32 * 128 * 128 * 4


def test_nvfp4_checkpoint_plans_fp8_kv_and_its_hybrid_block() -> None:
    """NVIDIA's NVFP4 Qwen3.5/3.6 checkpoints say kv_cache_quant_algo FP8: vLLM 0.32 runs an fp8_e4m3 KV cache, so
    a full-attention page holds half the bytes per token (2 KV heads × (256 + 256) × 1) and the attention block
    grows until a page holds the 2,146,304-byte state: 16 × ⌈2,146,304 / (16 × 1,024)⌉ = 2,096 tokens
    (Platform._align_hybrid_block_size; 1,056 with a bf16 cache)."""
    plan = _plan(QWEN35_NVFP4, "0.32.0")
    p = plan.prediction
    assert p.args.kv_cache_dtype == "fp8_e4m3"
    assert p.kv_bytes_per_token == 10 * 2 * 512  # 10 full-attention layers, 1 byte per element
    assert p.layout.block_size == 16 * -(-STATE // (16 * 1024)) == 2096
    assert p.layout.mamba_page_bytes == STATE == 2_146_304
    assert p.layout.page_bytes == 2096 * 1024
    note = (
        "KV cache fp8_e4m3: the checkpoint's kv_cache_quant_algo FP8 (vLLM ≥ 0.14 takes it for --kv-cache-dtype auto)"
    )
    assert note in p.notes
    assert plan.invalid is None


def test_older_vllm_and_an_explicit_dtype_keep_bf16() -> None:
    old = _plan(QWEN35_NVFP4, "0.13.0").prediction
    assert old.args.kv_cache_dtype == "bfloat16" and old.layout.block_size == 16 * -(-STATE // (16 * 2048)) == 1056
    assert any("not taken by vLLM 0.13.0 (it is from 0.14)" in n for n in old.notes)
    asked = _plan(QWEN35_NVFP4, "0.32.0", kv_cache_dtype="bfloat16").prediction
    assert asked.args.kv_cache_dtype == "bfloat16" and asked.layout.block_size == 1056
    assert (
        "KV cache bfloat16: --kv-cache-dtype bfloat16 wins over the checkpoint's kv_cache_quant_algo FP8" in asked.notes
    )


def test_hf_quant_config_sidecar_sets_the_kv_dtype() -> None:
    """ModelOpt ≤ 0.29 kept its config in hf_quant_config.json; vLLM reads it when config.json has none."""
    p = _plan(LLAMA70_FP8, "0.32.0").prediction
    assert p.args.kv_cache_dtype == "fp8_e4m3"
    assert p.kv_bytes_per_token == 80 * 8 * 256  # 80 layers × 8 KV heads × (128 + 128) × 1 byte


def test_a_refused_kv_dtype_makes_the_plan_invalid() -> None:
    plan = _plan(QWEN35_NVFP4, "0.32.0", kv_cache_dtype="nvfp4_4over6")  # the Spark is SM121: no 4over6
    assert plan.invalid is not None and "nvfp4_4over6" in plan.invalid


@pytest.mark.parametrize(
    ("spec", "block"),
    [
        (FullAttentionSpec(16, 2, 256, 256, 2), 1056),  # bf16: 2,048 B a token
        (FullAttentionSpec(16, 2, 256, 256, 1), 2096),  # fp8: 1,024 B
        (FullAttentionSpec(16, 2, 256, 256, 1, 4), 2064),  # int8_per_token_head: 1,040 B, 16 × ⌈2,146,304 / 16,640⌉
        (FullAttentionSpec(16, 2, 256, 256, 1, head_bytes=2 * 144), 3728),  # nvfp4: 576 B, 16 × ⌈… / 9,216⌉
    ],
    ids=["bf16", "fp8", "int8_per_token_head", "nvfp4"],
)
def test_hybrid_block_follows_the_kv_page(spec: FullAttentionSpec, block: int) -> None:
    state = MambaSpec(((STATE // 2,),), (2,), "linear_attention", "align")
    lay = vp.layout([state, state, state, spec] * 10, block_size=16, version=(0, 32, 0), kernel_block=16)
    assert lay.block_size == block
    assert lay.page_bytes == block * spec.with_block_size(1).page_bytes


def test_turboquant_keeps_boundary_layers_and_doubles_the_block() -> None:
    """Llama-3.1-8B with turboquant_k8v4 on vLLM 0.32: layers 0, 1, 30, 31 stay bf16 (get_boundary_skip_layers);
    _align_heterogeneous_kv_block_size prices the primary page with layer 0's FlashAttention, one byte per K and V
    element, so the block becomes 16 × ⌈(2 × 16) / 16⌉ = 32; one group of 32 layers whose pages differ."""
    p = profile_from_flags(None, str(CONFIGS / "Llama-3.1-8B.json"), machine="h200", max_model_len=8192,
                           kv_cache_dtype="turboquant_k8v4")  # fmt: skip
    pred = make_plan(p.with_overrides(vllm={"version": "0.32.0"}), live=False).prediction
    assert pred.layout.block_size == 32
    # 4 bf16 pages of 32 tokens × 8 heads × 256 × 2, 28 packed pages of 32 × 8 × (128 fp8 keys + 64 + 4 values)
    assert pred.layout.bytes_per_block == 4 * 32 * 8 * 256 * 2 + 28 * 32 * 8 * 196
    assert pred.kv_bytes_per_token == 4 * 8 * 256 * 2 + 28 * 8 * 196
    old = make_plan(p.with_overrides(vllm={"version": "0.24.0"}), live=False).prediction
    assert old.layout.block_size == 16  # before 0.25 nothing raised it


def test_fit_offers_no_fp8_kv_when_the_checkpoint_sets_it() -> None:
    from launcher.plan.fit import kv_choices

    modelopt = {"quant_method": "modelopt", "quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8"}
    assert kv_choices(_with(LLAMA, modelopt), None) == ["auto"]
    scheme = {"quant_method": "compressed-tensors", "kv_cache_scheme": FP8_SCHEME}
    assert kv_choices(_with(LLAMA, scheme), None) == ["auto"]
    assert kv_choices(read_config(LLAMA), None) == ["auto", "fp8"]
