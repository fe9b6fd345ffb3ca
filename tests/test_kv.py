"""KV bytes per token and invariants of the model arithmetic."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from launcher.common.errors import ConfigError
from launcher.model.arch import read_config as shape_from_config
from launcher.model.arch.layers import Attention, MLAttention
from launcher.model.formats import spec_for, weight_bytes
from launcher.model.kv import (
    KV_CACHE_DTYPES,
    attention_head_bytes,
    boundary_layers,
    kv_element_bytes,
    kv_heads_per_rank,
    kv_per_token,
    mixer_bytes_per_token,
    mla_token_bytes,
)
from launcher.model.params import count
from tests.conftest import CONFIGS

GiB = 1 << 30


def _cfg(name: str) -> dict[str, Any]:
    return json.loads((CONFIGS / f"{name}.json").read_text())


def _shape(name: str):
    return shape_from_config(_cfg(name), name)


def test_llama8b_lesson() -> None:
    kv = kv_per_token(_shape("Llama-3.1-8B"))
    assert kv.per_token == 131_072 == 2 * 32 * 8 * 128 * 2
    assert kv.bytes_for_context(8_192) == GiB
    assert kv_per_token(_shape("Llama-3.1-8B"), "fp8").per_token == 65_536


def test_gqa_counts_only_kv_heads() -> None:
    s = _shape("Llama-3.1-70B")  # 64 query heads, 8 KV heads
    assert kv_per_token(s).per_token == 2 * 80 * 8 * 128 * 2


def test_mla_single_latent() -> None:
    kv = kv_per_token(_shape("DeepSeek-V3"))
    assert kv.mla
    assert kv.per_token == 61 * (512 + 64) * 2  # no ×2 for K and V
    # replicated on every rank, not split
    assert kv_per_token(_shape("DeepSeek-V3"), tp=8).per_token == kv.per_token


@pytest.mark.parametrize(("tp", "heads"), [(1, 8), (2, 4), (4, 2), (8, 1), (16, 1)])
def test_tensor_parallel_heads(tp: int, heads: int) -> None:
    assert kv_heads_per_rank(8, tp) == heads
    kv = kv_per_token(_shape("Llama-3.1-8B"), tp=tp)
    assert kv.per_token == 2 * 32 * heads * 128 * 2


def test_sliding_window_separate() -> None:
    kv = kv_per_token(_shape("gemma-3-27b-it"))  # 62 layers, every 6th global, window 1024
    assert kv.layers_full == 10 and kv.layers_sliding == 52
    per_layer = 2 * 16 * 128 * 2
    assert kv.full_attention == 10 * per_layer
    assert kv.sliding_attention == 52 * per_layer
    assert kv.sliding_window == 1024
    assert kv.bytes_for_context(32_768) == 10 * per_layer * 32_768 + 52 * per_layer * 1_024


def test_gpt_oss_alternates() -> None:
    kv = kv_per_token(_shape("gpt-oss-20b"))
    assert (kv.layers_full, kv.layers_sliding, kv.sliding_window) == (12, 12, 128)
    assert kv.per_token == 24 * 2 * 8 * 64 * 2


def test_gemma2_every_other_layer() -> None:
    kv = kv_per_token(_shape("gemma-2-9b"))
    assert kv.layers_sliding == kv.layers_full == 21


def test_per_token_head_scales() -> None:
    kv = kv_per_token(_shape("Llama-3.1-8B"), "fp8_per_token_head")
    assert kv.per_token == 32 * 2 * 8 * (128 + 4)


def test_unknown_kv_dtype() -> None:
    with pytest.raises(ConfigError, match="kv_cache_dtype"):
        kv_per_token(_shape("Llama-3.1-8B"), "int3")


# --- invariants -------------------------------------------------------------------------------------------

DENSE = ["Llama-3.1-8B", "Qwen2.5-7B", "Qwen3-8B", "gemma-2-9b", "Phi-3.5-mini-instruct", "Mistral-7B-v0.3"]
ALL = [p.stem for p in sorted(CONFIGS.glob("*.json")) if not p.name.endswith(".hf_quant_config.json")]


def _with_layers(cfg: dict[str, Any], n: int) -> dict[str, Any]:
    cfg = json.loads(json.dumps(cfg))
    target = cfg.get("text_config", cfg)
    target["num_hidden_layers"] = n
    target.pop("layer_types", None)
    return cfg


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(DENSE), a=st.integers(1, 64), b=st.integers(1, 64))
def test_counts_linear_in_layers(name: str, a: int, b: int) -> None:
    """total(L) = fixed + L × per_layer: the difference quotient is the same for any two depths."""
    cfg = _cfg(name)
    t1 = count(shape_from_config(_with_layers(cfg, 1))).total
    ta = count(shape_from_config(_with_layers(cfg, a))).total
    tb = count(shape_from_config(_with_layers(cfg, b))).total
    per_layer = count(shape_from_config(_with_layers(cfg, 2))).total - t1
    assert ta - t1 == (a - 1) * per_layer
    assert tb - t1 == (b - 1) * per_layer


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(ALL))
def test_tied_never_more_than_untied(name: str) -> None:
    cfg = _cfg(name)
    target = cfg.get("text_config", cfg)
    tied = dict(cfg)
    untied = dict(cfg)
    if "text_config" in cfg:
        tied["text_config"] = {**target, "tie_word_embeddings": True}
        untied["text_config"] = {**target, "tie_word_embeddings": False}
    else:
        tied["tie_word_embeddings"] = True
        untied["tie_word_embeddings"] = False
    ct, cu = count(shape_from_config(tied)), count(shape_from_config(untied))
    assert ct.total <= cu.total
    assert cu.total - ct.total == cu.parts["embedding"]


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(ALL), tp=st.sampled_from([1, 2, 4, 8]))
def test_fp8_kv_is_half_of_bf16(name: str, tp: int) -> None:
    s = shape_from_config(_cfg(name))
    assert 2 * kv_per_token(s, "fp8", tp).per_token == kv_per_token(s, "bfloat16", tp).per_token


@settings(max_examples=30, deadline=None)
@given(
    hidden=st.integers(1, 64).map(lambda x: 64 * x),
    heads=st.sampled_from([1, 2, 4, 8, 16]),
    kv_div=st.sampled_from([1, 2, 4]),
    inter=st.integers(1, 100).map(lambda x: 64 * x),
    vocab=st.integers(1, 5000),
    layers=st.integers(1, 8),
)
def test_synthetic_llama_matches_hand_formula(
    hidden: int, heads: int, kv_div: int, inter: int, vocab: int, layers: int
) -> None:
    kv_heads = max(1, heads // kv_div)
    cfg = dict(model_type="llama", hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv_heads,
               intermediate_size=inter, vocab_size=vocab, num_hidden_layers=layers)  # fmt: skip
    d = hidden // heads
    attn = hidden * heads * d * 2 + hidden * kv_heads * d * 2
    per_layer = attn + 3 * hidden * inter + 2 * hidden
    expected = 2 * vocab * hidden + layers * per_layer + hidden
    assert count(shape_from_config(cfg)).total == expected
    s = shape_from_config(cfg)
    assert weight_bytes(s, spec_for("bf16", s)).total_bytes == 2 * expected


# --- every --kv-cache-dtype, priced as vLLM 0.32 lays out its page --------------------------------------------------
#
# Bytes per token of one layer, derived by hand from vLLM 0.32's source: vllm/v1/kv_cache_interface.py
# (AttentionSpec.page_size_bytes = head slots × state_content_size_bytes), vllm/utils/torch_utils.py
# (STR_DTYPE_TO_TORCH_DTYPE: every quantized dtype is a 1-byte element; nvfp4_kv_cache_full_dim) and each backend's
# customize_spec: triton_attn.py (per-token-head: data + an fp32 scale for K and one for V), flashinfer.py (nvfp4:
# K and V in separate slots of head/2 fp4 bytes + head/16 fp8 scales), turboquant_attn.py with
# quantization/turboquant/config.py (slot_size_aligned) and ultraquant_attn.py with ops/ultraquant/format.py
# (slot_size, a scale byte per 32 values). Geometry: 8 KV heads × head_dim 128 (Llama-3.1-8B) and 2 × 256 (Qwen3.5).

ATTENTION_PAGES = [
    # dtype, 8 × 128, 2 × 256
    ("bfloat16", 8 * 256 * 2, 2 * 512 * 2),  # K + V elements, 2 bytes each
    ("float16", 8 * 256 * 2, 2 * 512 * 2),
    ("fp8", 8 * 256, 2 * 512),  # uint8 elements; the per-tensor scale lives outside the page
    ("fp8_e4m3", 8 * 256, 2 * 512),
    ("fp8_e5m2", 8 * 256, 2 * 512),
    ("fp8_inc", 8 * 256, 2 * 512),  # float8_e4m3fn: 1 byte
    ("int8_per_token_head", 8 * (256 + 2 * 4), 2 * (512 + 2 * 4)),  # + an fp32 scale for K and for V per head
    ("fp8_per_token_head", 8 * (256 + 2 * 4), 2 * (512 + 2 * 4)),
    ("int4_per_token_head", 8 * (64 + 64 + 2 * 4), 2 * (128 + 128 + 2 * 4)),  # two int4 values per byte
    ("nvfp4", 8 * 2 * (64 + 8), 2 * 2 * (128 + 16)),  # K and V slots: head/2 fp4 bytes + head/16 fp8 scales
    ("nvfp4_4over6", 8 * 2 * (64 + 8), 2 * 2 * (128 + 16)),
    # TurboQuant, one K+V slot per head: fp8 keys (head bytes) or Lloyd-Max keys (head × bits / 8 + a 2-byte
    # norm); values head × bits / 8 + 4 (fp16 scale and zero); the slot rounded up to even
    ("turboquant_k8v4", 8 * (128 + 64 + 4), 2 * (256 + 128 + 4)),
    ("turboquant_4bit_nc", 8 * (64 + 2 + 64 + 4), 2 * (128 + 2 + 128 + 4)),
    ("turboquant_k3v4_nc", 8 * (48 + 2 + 64 + 4), 2 * (96 + 2 + 128 + 4)),
    ("turboquant_3bit_nc", 8 * (48 + 2 + 48 + 4), 2 * (96 + 2 + 96 + 4)),
    ("ultraquant_4bit", 8 * 2 * (64 + 4), 2 * 2 * (128 + 8)),  # K and V: 4-bit codes + an E8M0 byte per 32
]


@pytest.mark.parametrize(("dtype", "llama", "qwen35"), ATTENTION_PAGES, ids=[r[0] for r in ATTENTION_PAGES])
def test_attention_page_per_dtype(dtype: str, llama: int, qwen35: int) -> None:
    assert 8 * attention_head_bytes(dtype, "bfloat16", 128, 128) == llama
    assert 2 * attention_head_bytes(dtype, "bfloat16", 256, 256) == qwen35


def test_the_values_vllm_printed_for_the_pages() -> None:
    """The same pages as the numbers the real vLLM 0.32 gave (tests/e2e/test_kv_pages.py, block size 1)."""
    got = [8 * attention_head_bytes(d, "bfloat16", 128, 128) for d, _, _ in ATTENTION_PAGES]
    assert got == [4096, 4096, 2048, 2048, 2048, 2048, 2112, 2112, 1088, 1152, 1152, 1568, 1072, 944, 816, 1088]


MLA_PAGES = [
    # dtype, DeepSeek-V3 (kv_lora_rank 512 + qk_rope_head_dim 64): one latent per token, no V, no head split
    ("auto", 576 * 2),
    ("bfloat16", 576 * 2),
    ("fp8", 576),
    ("fp8_e4m3", 576),
    ("fp8_ds_mla", 512 + 4 * 4 + 64 * 2),  # FlashMLA sparse: fp8 latent, 4 fp32 scales, bf16 rope = 656
    ("nvfp4_ds_mla", 352),  # mla_attention.py state_content_bytes: NVFP4 NoPE + FP8 RoPE
    ("int8_per_token_head", 576 + 2 * 4),  # MLACommonBackend.customize_spec (no MLA backend takes it: refused)
    ("int4_per_token_head", 288 + 2 * 4),
]


@pytest.mark.parametrize(("dtype", "expected"), MLA_PAGES, ids=[r[0] for r in MLA_PAGES])
def test_mla_page_per_dtype(dtype: str, expected: int) -> None:
    assert mla_token_bytes(dtype, "bfloat16", 576) == expected


def test_deepseek_v3_per_token_by_dtype() -> None:
    s = _shape("DeepSeek-V3")
    assert kv_per_token(s, "fp8_ds_mla").per_token == 61 * 656
    assert kv_per_token(s, "nvfp4_ds_mla").per_token == 61 * 352


def test_the_dtypes_are_vllm_0_32s_choices() -> None:
    """vLLM 0.32's --kv-cache-dtype choices, a superset of every earlier release's (vllm/config/cache.py
    CacheDType of 0.10 … 0.31); float32 is not one of them."""
    assert set(KV_CACHE_DTYPES) == {
        "auto", "bfloat16", "float16", "fp8", "fp8_ds_mla", "fp8_e4m3", "fp8_e5m2", "fp8_inc",
        "fp8_per_token_head", "int4_per_token_head", "int8_per_token_head", "nvfp4", "nvfp4_4over6",
        "nvfp4_ds_mla", "turboquant_3bit_nc", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_k8v4",
        "ultraquant_4bit",
    }  # fmt: skip
    with pytest.raises(ConfigError, match="kv_cache_dtype"):
        kv_per_token(_shape("Llama-3.1-8B"), "int4")


def test_auto_under_dtype_float32_is_four_bytes() -> None:
    """--dtype float32 makes "auto" float32 (budget resolves it to that name); an fp32 checkpoint alone is served
    in 16 bits."""
    assert kv_element_bytes("float32", "bfloat16") == (4, 0)
    assert kv_element_bytes("auto", "float32") == (2, 0)


def test_turboquant_keeps_the_boundary_layers_in_16_bits() -> None:
    """TurboQuantConfig.get_boundary_skip_layers: the first 2 and last 2 of Llama-3.1-8B's 32 layers stay bf16."""
    s = _shape("Llama-3.1-8B")
    assert boundary_layers("turboquant_k8v4", s) == {0, 1, 30, 31}
    assert boundary_layers("fp8", s) == frozenset()
    assert kv_per_token(s, "turboquant_k8v4").per_token == 4 * 4096 + 28 * 1568


def test_hybrids_have_no_boundary_layers() -> None:
    s = shape_from_config(
        json.loads((CONFIGS.parent / "configs-v2" / "extra" / "qwen3_5_moe--35b-a3b.json").read_text())
    )
    assert boundary_layers("turboquant_4bit_nc", s) == frozenset()


def test_mixers_without_a_cache_cost_nothing() -> None:
    shared = Attention(hidden=1024, heads=8, kv_heads=2, head_dim=128, shares_kv_with=3)
    assert mixer_bytes_per_token(shared, "nvfp4", "bfloat16") == 0
    mla = MLAttention(hidden=1024, heads=8, q_lora_rank=None, kv_lora_rank=512, qk_nope_head_dim=128,
                      qk_rope_head_dim=64, v_head_dim=128)  # fmt: skip
    assert mixer_bytes_per_token(mla, "fp8", "bfloat16", tp=8) == 576


# ---- 2026 families: per-layer KV heads, layers without attention, a side cache beside K and V ------------------------


def _extra(name: str) -> Any:
    from tests.arch_oracle import load_config

    return shape_from_config(load_config(name), name)


def test_nemotron_nas_counts_only_attention_layers_each_with_its_kv_heads() -> None:
    """block_configs: layers 1 and 4 have no attention (no_op); 0, 2 and 3 keep 8 // n_heads_in_group KV heads of
    head_dim 16 (128 / 8 heads)."""
    m = _extra("nemotron-nas--small-mixed-blocks")
    assert [layer.code for layer in m.layers] == ["F", "E", "F", "F", "E"]
    kv = kv_per_token(m, "auto")
    assert kv.per_token == (2 + 4 + 1) * 16 * 2 * 2  # K and V, bf16
    assert kv.layers_full == 3
    assert kv_per_token(m, "auto", tp=2).per_token == (1 + 2 + 1) * 16 * 2 * 2  # 1 KV head stays 1 per rank


def test_nemotron_super_49b_kv() -> None:
    m = _extra("nemotron-nas--llama-3_3-nemotron-super-49b-v1")
    assert sum(1 for layer in m.layers if layer.mixers) == 49
    assert kv_per_token(m, "auto").per_token == 49 * 8 * 128 * 2 * 2


def test_minimax_m3_sparse_layers_keep_bf16_index_keys_beside_kv() -> None:
    """Layers 2 and 3 are block-sparse: beside K and V (2 KV heads of 32) each caches its indexer's key (24 values in
    bf16, whatever kv_cache_dtype, the same on every rank)."""
    from launcher.vllm.specs import SpecSettings, attention_spec

    m = _extra("minimax_m3_vl_text--small-sparse-mixed")
    sparse = [mx for layer in m.layers for mx in layer.mixers if isinstance(mx, Attention)]
    assert [mx.side_cache_bytes_per_token() for mx in sparse] == [0, 0, 48, 48]
    assert kv_per_token(m, "auto").per_token == 4 * 2 * 32 * 2 * 2 + 2 * 48
    assert kv_per_token(m, "fp8").per_token == 4 * 2 * 32 * 2 + 2 * 48
    assert kv_per_token(m, "auto", tp=2).per_token == 4 * 32 * 2 * 2 + 2 * 48
    s = SpecSettings(16, "auto", "bfloat16", 1, (0, 32, 0))
    assert attention_spec(sparse[2], s).page_bytes == 16 * (2 * 32 * 2 * 2 + 48)
    assert attention_spec(sparse[0], s).page_bytes == 16 * 2 * 32 * 2 * 2


def test_minimax_m3_kv() -> None:
    m = _extra("minimax_m3--minimax-m3")
    # 60 layers of 4 KV heads × 128 (K and V, bf16), 57 sparse ones with a 128-wide bf16 index key
    assert kv_per_token(m, "auto").per_token == 60 * 4 * 128 * 2 * 2 + 57 * 128 * 2


def test_step3p7_flash_sliding_and_full_layers() -> None:
    m = _extra("step3p7--step-3.7-flash")
    kv = kv_per_token(m, "auto")
    assert (kv.layers_full, kv.layers_sliding, kv.sliding_window) == (12, 33, 512)
    assert kv.per_token == 45 * 8 * 128 * 2 * 2


def test_mtp_layers_keep_no_kv_in_the_count() -> None:
    """MiMo's MTP layers are counted with the draft model, not in the main model's KV bytes per token."""
    m = _extra("mimo--small-mtp2")
    assert len(m.mtp_layers) == 2
    assert kv_per_token(m, "auto").per_token == 3 * 2 * 16 * 2 * 2


def test_kimi_k3_kda_and_latent_kv() -> None:
    m = _extra("kimi_k3--kimi-k3")
    kv = kv_per_token(m, "auto")
    assert kv.per_token == 24 * (512 + 64) * 2  # 24 MLA layers; the 69 KDA layers keep a fixed state
    assert kv.layers_without_kv == {"linear_attention": 69}


# ---- DeepSeek-V4: a compressed KV that grows and a sliding window, as vLLM 0.32 stores them ------------------------


def _v4(name: str) -> Any:
    from tests.conftest import FIXTURES

    return shape_from_config(json.loads((FIXTURES / "configs-2026" / f"{name}_config.json").read_text()), name)


def test_deepseek_v4_flash_bytes_per_token() -> None:
    """DeepSeek-V4-Flash (NVIDIA's NVFP4 export): compress_ratios 0, 0, then 4 / 128 alternating: 2 window-only
    layers, 21 CSA (ratio 4, with an indexer) and 20 HCA (ratio 128). vLLM 0.32's fp8_ds_mla state of a 512-wide
    K=V vector is 448 B of fp8 NoPE values + 64 bf16 RoPE values (128 B) + 8 B of scales = 584 B
    (models/deepseek_v4/attention.py DeepseekV4Attention.get_kv_cache_spec state_content_bytes); an indexer key is
    128 fp8 values + one fp32 scale per 128 = 132 B (DeepseekV4Indexer.__init__ k_cache_head_dim). One of each per
    compress-ratio tokens, rounded up to whole bytes per token; every layer's window holds 584 B per token."""
    from launcher.model.kv import compressed_bytes_per_token

    m = _v4("nvidia--DeepSeek-V4-Flash-NVFP4")
    csa = (584 + 132 + 3) // 4  # 179: exact
    hca = (584 + 127) // 128  # 5: 4.5625 rounded up
    kv = kv_per_token(m, "auto")
    assert kv.full_attention == 21 * csa + 20 * hca == 3_859
    assert kv.sliding_attention == 43 * 584 and kv.sliding_window == 128
    assert (kv.layers_full, kv.layers_sliding) == (41, 43)
    assert kv.per_token == 3_859 + 25_112
    # every fp8 dtype is stored as fp8_ds_mla; the cache is replicated on every rank (one KV head, max_tp_shards 1)
    assert kv_per_token(m, "fp8").per_token == kv_per_token(m, "auto", tp=8).per_token == kv.per_token
    # a growth of 179 B per token is what a long context costs: 100,000 tokens ≈ 100,000 × 3,859 + the windows
    assert kv.bytes_for_context(100_000) == 100_000 * 3_859 + 128 * 25_112
    # a plain bf16 row (FlashInfer's DeepSeek-V4 backend when asked for it): 512 × 2 B per state
    window_only, hca_layer = m.layers[0].mixers[0], m.layers[3].mixers[0]
    assert compressed_bytes_per_token(window_only, "bfloat16", "bfloat16") == (0, 1024)  # type: ignore[arg-type]
    assert compressed_bytes_per_token(hca_layer, "bfloat16", "bfloat16") == (8, 1024)  # type: ignore[arg-type]


def test_deepseek_v4_pro_bytes_per_token() -> None:
    """DeepSeek-V4-Pro: compress_ratios 128, 128, then 4 / 128 alternating over 61 layers: 30 CSA, 31 HCA."""
    kv = kv_per_token(_v4("deepseek-ai--DeepSeek-V4-Pro"), "auto")
    assert kv.full_attention == 30 * 179 + 31 * 5 == 5_525
    assert kv.sliding_attention == 61 * 584 == 35_624
    assert kv.per_token == 41_149
