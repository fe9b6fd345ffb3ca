"""`count --json` speaks the layer map; plan honours text-only flags, predicts every cache kind (DeepSeek-V4's as vLLM
0.32 allocates it) and refuses what it cannot predict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from launcher.cli import main
from launcher.model.arch import read_config
from tests.conftest import CONFIGS, FIXTURES


def _count(path: Path, *args: str) -> dict[str, object]:
    r = CliRunner().invoke(main, ["count", str(path), "--json", *args])
    assert r.exit_code == 0, r.output
    data: dict[str, object] = json.loads(r.stdout)
    return data


def test_count_json_keeps_its_keys_and_adds_the_layer_map() -> None:
    data = _count(CONFIGS / "gemma-3-27b-it.json")
    for key in ("model", "config", "model_type", "architecture", "total", "text_total", "parts", "detail",
                "per_layer", "tied_embeddings", "defaults_used", "weight_bytes", "weights", "checkpoint",
                "kv_cache_dtype", "kv_bytes_per_token", "kv"):  # fmt: skip
        assert key in data, key
    assert data["arch_support"] == "exact"
    assert data["model_type"] == "gemma3_text" and data["wrapper_type"] == "gemma3"
    assert data["num_layers"] == 62
    layers = data["layers"]
    assert isinstance(layers, dict)
    # 62 layers, every 6th global: 10 full, 52 sliding over a 1024-token window (the oracle's LAYERS.tsv agrees)
    assert layers["full_attention"]["count"] == 10
    assert layers["sliding_attention"] == {"count": 52, "kv_heads": 16, "head_dim": 128, "window": 1024}
    assert data["layer_map"] == ("SSSSSF" * 11)[:62]


def test_count_mla_layers_name_their_latent() -> None:
    data = _count(CONFIGS / "DeepSeek-V3.json")
    assert data["layers"] == {"mla": {"count": 61, "kv_lora_rank": 512, "qk_rope_head_dim": 64},
                              "mtp": {"count": 1, "kinds": ["mla"]}}  # fmt: skip


def _gemma_plan(*args: str) -> dict[str, object]:
    r = CliRunner().invoke(main, ["plan", "--config", str(CONFIGS / "gemma-3-27b-it.json"), "--machine",
                                  "h100-80gb", "--max-model-len", "8192", "--vllm-version", "0.19.0", "--json",
                                  *args])  # fmt: skip
    assert r.exit_code in (0, 3), r.output
    data: dict[str, object] = json.loads(r.stdout)
    return data


def test_text_only_flags_drop_the_vision_tower() -> None:
    full = _gemma_plan()
    text = _gemma_plan("--language-model-only")
    no_images = _gemma_plan("--limit-mm-per-prompt", '{"image": 0}')
    # the vision tower and projector: 27,432,406,640 - 27,009,346,304 parameters (transformers' counts, ORACLE.tsv)
    tower = 2 * (27_432_406_640 - 27_009_346_304)
    assert isinstance(full["weights_bytes"], int) and isinstance(text["weights_bytes"], int)
    assert full["weights_bytes"] - text["weights_bytes"] == tower
    assert text["weights_bytes"] == no_images["weights_bytes"]
    assert "--language-model-only" in text["vllm_argv"]
    assert no_images["vllm_argv"][-2:] == ["--limit-mm-per-prompt", '{"image":0}']
    # an old vLLM loads the tower whatever the limits say
    old = _gemma_plan("--limit-mm-per-prompt", '{"image": 0}', "--vllm-version", "0.10.1")
    assert old["weights_bytes"] == _gemma_plan("--vllm-version", "0.10.1")["weights_bytes"]
    # and has no --language-model-only (vLLM 0.17.1 added it): the command as written would not start
    r = CliRunner().invoke(main, ["plan", "--config", str(CONFIGS / "gemma-3-27b-it.json"), "--machine", "h100-80gb",
                                  "--vllm-version", "0.10.1", "--language-model-only"])  # fmt: skip
    assert r.exit_code == 2 and "vLLM 0.10.1 has no --language-model-only" in r.stderr, r.output


def _v4_dir(tmp: Path, name: str) -> Path:
    """A model directory of a configs-2026 DeepSeek-V4 export: its config.json (+ hf_quant_config.json)."""
    src = FIXTURES / "configs-2026"
    (tmp / "config.json").write_text((src / f"{name}_config.json").read_text())
    quant = src / f"{name}_hf_quant_config.json"
    if quant.exists():
        (tmp / "hf_quant_config.json").write_text(quant.read_text())
    return tmp


V4_MODELS = ("deepseek-ai--DeepSeek-V4-Pro", "nvidia--DeepSeek-V4-Flash-NVFP4")


@pytest.mark.parametrize("name", V4_MODELS)
@pytest.mark.parametrize("machine", [["--machine", "dgx-spark"], ["--machine", "h200", "-tp", "8"]], ids=str)
def test_plan_predicts_deepseek_v4_pools(tmp_path: Path, name: str, machine: list[str]) -> None:
    """DeepSeek-V4's cache as vLLM 0.32 allocates it: 5 groups in 256-token blocks, fp8_ds_mla, and the note that no
    real boot has checked it. One Spark holds neither model's weights (exit 3, a pool of 0 blocks); 8 H200s do."""
    r = CliRunner().invoke(main, ["plan", "--model", str(_v4_dir(tmp_path, name)), *machine, "--json"])
    assert r.exit_code in (0, 3), r.output
    plan = json.loads(r.stdout)
    assert plan["block_size"] == 256 and plan["kv_cache_groups"] == 5
    assert plan["kv_layout"]["bytes_per_block"] == (1_435_968 if "Pro" in name else 1_002_240)
    assert plan["kv_request_bytes"] > 0 and plan["kv_bytes_per_token"] == (41_149 if "Pro" in name else 28_971)
    assert any("no real boot has checked it" in n for n in plan["notes"])
    if "h200" in machine:
        assert r.exit_code == 0 and plan["kv_pool_blocks"] > 0 and plan["max_concurrency"] >= 1


def test_plan_refuses_what_it_does_not_predict_of_deepseek_v4(tmp_path: Path) -> None:
    model = str(_v4_dir(tmp_path, "nvidia--DeepSeek-V4-Flash-NVFP4"))

    def plan(*args: str) -> tuple[int, str, str]:
        r = CliRunner().invoke(main, ["plan", "--model", model, "--json", *args])
        return r.exit_code, r.stdout, r.stderr

    # another release's cache, or the CPU backend's own DeepSeek-V4 model: not predicted, one line
    code, _, err = plan("--machine", "h200", "-tp", "8", "--vllm-version", "0.31.0")
    assert code == 2 and "compressed_attention layers is not predicted for vLLM 0.31.0" in err
    assert len(err.strip().splitlines()) == 1
    code, _, err = plan("--machine", "cpu", "--gpu-memory-gib", "512")
    assert code == 2 and "not predicted on vLLM's CPU backend" in err
    # what vLLM 0.32 itself refuses: a KV dtype its fp8_ds_mla layout does not store, a block no kernel takes
    code, out, _ = plan("--machine", "h200", "-tp", "8", "--kv-cache-dtype", "bfloat16")
    assert code == 3 and any("only supports fp8 kv-cache" in x for x in json.loads(out)["reasons"])
    code, out, _ = plan("--machine", "h200", "-tp", "8", "--block-size", "128")
    assert code == 3 and any("No common block size for 128" in x for x in json.loads(out)["reasons"])
    # fp8 is stored as fp8_ds_mla, the same cache as auto
    fp8 = json.loads(plan("--machine", "h200", "-tp", "8", "--kv-cache-dtype", "fp8")[1])
    assert fp8["kv_pool_blocks"] == json.loads(plan("--machine", "h200", "-tp", "8")[1])["kv_pool_blocks"]


def test_plan_says_vllm_needs_compress_ratios() -> None:
    """A transformers-style DeepSeek-V4 config (layer_types, no compress_ratios): vLLM 0.32 reads only
    compress_ratios, so the plan states vLLM's refusal."""
    compressed = FIXTURES / "configs-v2" / "configs" / "deepseek_v4--default.json"
    r = CliRunner().invoke(main, ["plan", "--config", str(compressed), "--machine", "h200", "-tp", "8", "--json"])
    assert r.exit_code == 3, r.output
    assert any("compress_ratios, which this config lacks" in x for x in json.loads(r.stdout)["reasons"])


def test_plan_predicts_a_hybrid_pool() -> None:
    hybrid = FIXTURES / "configs-v2" / "configs" / "qwen3_next--default.json"
    r = CliRunner().invoke(main, ["plan", "--config", str(hybrid), "--machine", "h100-80gb", "--json"])
    assert r.exit_code == 3, r.stderr  # 160 GB of bf16 weights do not fit one H100; the pool is still planned
    plan = json.loads(r.stdout)
    # Qwen3-Next-80B-A3B: 36 Gated DeltaNet + 12 full-attention layers. A GDN state is a conv of
    # (2×16×128 + 32×128) × 3 and 32 matrices of 128×128, bf16: 1,097,728 bytes; the attention page per token
    # is 2 KV heads × 256 × 2 (K, V) × 2 bytes = 2,048: 16 × cdiv(1,097,728, 16 × 2,048) = 544 tokens.
    assert plan["block_size"] == 544
    assert plan["state_bytes_per_request"] == 36 * 1_097_728
    assert plan["kv_cache_groups"] == 4 and plan["padding_layers"] == 0


def test_a_tower_goes_only_when_all_its_modalities_are_off() -> None:
    """vLLM marks Qwen-VL's ViT for image and video, Gemma 4's audio encoder for audio alone."""
    from launcher.model.arch import read_config
    from launcher.plan.profiles import profile_from_mapping
    from launcher.plan.resolve import loaded_towers
    from tests.arch_oracle import load_config

    def kept(model: str, limits: dict[str, int]) -> list[str]:
        m = read_config(load_config(model), model)
        p = profile_from_mapping({"model": "x/y", "limit_mm_per_prompt": limits})
        return [type(t).__name__ for t in loaded_towers(m, p, (0, 32, 0)).towers]

    assert kept("qwen2_5_vl--default", {"image": 0}) == ["Qwen25Vision"]
    assert kept("qwen2_5_vl--default", {"image": 0, "video": 0}) == []
    both = kept("gemma4--shared-kv-towers", {})
    assert sorted(both) == ["Gemma4Audio", "Gemma4Vision"]
    assert kept("gemma4--shared-kv-towers", {"audio": 0}) == ["Gemma4Vision"]
    assert kept("gemma4--shared-kv-towers", {"image": 0, "video": 0}) == ["Gemma4Audio"]


def test_nemotron_nas_linear_replacement_is_counted_as_stored_and_said() -> None:
    """A DeciLM block whose attention (or MLP) is replaced by one hidden × hidden linear holds that linear, no KV cache,
    and the count says vLLM 0.32 builds no such layer."""
    from tests.arch_oracle import load_config

    cfg = load_config("nemotron-nas--small-mixed-blocks")
    cfg["block_configs"][1] = {"attention": {"no_op": False, "replace_with_linear": True, "n_heads_in_group": None},
                               "ffn": {"no_op": False, "replace_with_linear": True}}  # fmt: skip
    m = read_config(cfg, "replaced")
    layer = m.layers[1]
    assert layer.code == "E" and not layer.mlps
    assert {t.name: t.shape for t in layer.tensors(1)} == {
        "model.layers.1.self_attn.linear_attn.weight": (128, 128),
        "model.layers.1.mlp.linear_mlp.weight": (128, 128),
    }
    assert "replace_with_linear" in m.support_note
