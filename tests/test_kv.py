"""KV bytes per token and invariants of the model arithmetic."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from launcher.arch import read_config as shape_from_config
from launcher.errors import ConfigError
from launcher.formats import spec_for, weight_bytes
from launcher.kv import kv_heads_per_rank, kv_per_token
from launcher.params import count
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
