"""The architecture registry: every family file is found by name, every vLLM architecture transformers can build
is read exactly (or generically, with a reason), every family has its fixtures, and unknown model_types fall
back to the checkpoint's own headers instead of a guess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
from click.testing import CliRunner
from safetensors.numpy import save_file

from launcher.cli import main
from launcher.common.errors import ConfigError
from launcher.model.arch import read_config, registry
from tests.arch_oracle import oracle_rows, vllm_rows
from tests.conftest import FIXTURES

MODULES = registry.all_family_modules()
ORACLE_MODELS = {r["model"].split("#")[0] for r in oracle_rows()}
VLLM_MODELS = {r["model"] for r in vllm_rows()}  # vLLM's count, for families transformers has no class for
CHECKPOINTS = {p.stem for p in (FIXTURES / "checkpoints").glob("*.json")}

# Families without a tiny checkpoint, and why: scripts/tiny_checkpoint.py builds one with transformers.
NO_CHECKPOINT = {
    "kimi_k3": "transformers 5.19 has no Kimi K3 class",
    "mimo": "transformers 5.19 has no MiMo class",
    "nemotron_nas": "transformers 5.19 has no DeciLM class",
    "step3p7": "its checkpoint stacks each layer's experts in one tensor per projection under `moe.` (no 'experts' "
    "in the name), a layout test_arch_checkpoints' quantized layouts do not model",
}


@pytest.mark.parametrize("module", MODULES)
def test_family_module_contract(module: str) -> None:
    fam = registry.load_family(module)
    assert fam.MODEL_TYPES and callable(fam.read)
    for mt in fam.MODEL_TYPES:
        assert registry.module_name(mt) == module, f"{mt} does not resolve to {module}"
        assert mt in fam.DEFAULTS, f"{module}.DEFAULTS lacks {mt}"


@pytest.mark.parametrize("module", MODULES)
def test_every_family_has_an_oracle_row_and_a_checkpoint(module: str) -> None:
    types = registry.load_family(module).MODEL_TYPES
    assert any(name.split("--")[0] in types for name in ORACLE_MODELS | VLLM_MODELS), f"no oracle row for {module}"
    if module in NO_CHECKPOINT:
        assert not any(mt in CHECKPOINTS for mt in types), f"{module} has a checkpoint: drop it from NO_CHECKPOINT"
        return
    assert any(mt in CHECKPOINTS for mt in types), f"no tiny checkpoint fixture for {module}"


def test_aliases_point_at_modules() -> None:
    for alias, module in registry.ALIASES.items():
        assert module in MODULES, alias
        assert alias in registry.load_family(module).MODEL_TYPES or not alias.isidentifier(), alias


def test_vllm_architectures_transformers_builds_are_exact_or_say_why() -> None:
    """An architecture whose model_type transformers builds (an oracle row exists) is read by a family."""
    for arch, mt in registry.VLLM_ARCHITECTURES.items():
        if mt is None:
            continue
        built = any(name.split("--")[0] == mt for name in ORACLE_MODELS)
        if built:
            assert registry.module_name(mt) is not None or mt in registry.GENERIC, f"{arch} ({mt})"


def test_lookup_imports_only_the_family_it_needs() -> None:
    code = (
        "import sys, json; from launcher.model.arch import read_config; "
        "read_config({'model_type': 'llama'}); "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('launcher.model.arch.families.'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert json.loads(out) == ["launcher.model.arch.families.llama"]


def test_architecture_name_resolves_an_unknown_model_type() -> None:
    cfg = {"model_type": "internlm3", "architectures": ["InternLM3ForCausalLM"], "hidden_size": 256,
           "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 1000}  # fmt: skip
    m = read_config(cfg)
    assert (m.family, m.support) == ("llama", "exact")


def test_archs_command_lists_every_vllm_architecture() -> None:
    r = CliRunner().invoke(main, ["archs", "--json"])
    assert r.exit_code == 0
    data = json.loads(r.stdout)
    listed = {a for row in data["archs"] for a in row["architectures"]}
    assert set(registry.VLLM_ARCHITECTURES) <= listed
    exact = {row["model_type"] for row in data["archs"] if row["arch_support"] == "exact"}
    assert {"llama", "qwen3_moe", "deepseek_v3", "gemma3"} <= exact
    for row in data["archs"]:
        assert row["arch_support"] in ("exact", "generic")
        if row["arch_support"] == "generic":
            assert row["note"]
    text = CliRunner().invoke(main, ["archs"]).stdout
    assert "generic" in text and "exact" in text


# ------------------------------------------------------------------------------------------- generic fallback

UNKNOWN = {
    "model_type": "brandnew",
    "architectures": ["BrandNewForCausalLM"],
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 100,
    "layer_types": ["sliding_attention", "full_attention"],
    "sliding_window": 32,
    "torch_dtype": "bfloat16",
}


def _unknown_checkpoint(tmp_path: Path, cfg: dict[str, object]) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    arrays = {"model.embed_tokens.weight": np.zeros((100, 64), np.float16), "lm_head.weight": np.zeros((100, 64),
              np.float16)}  # fmt: skip
    for i in range(2):
        p = f"model.layers.{i}"
        arrays[f"{p}.self_attn.q_proj.weight"] = np.zeros((64, 64), np.float16)
        arrays[f"{p}.self_attn.k_proj.weight"] = np.zeros((32, 64), np.float16)
        arrays[f"{p}.mlp.up_proj.weight"] = np.zeros((128, 64), np.float16)
        arrays[f"{p}.input_layernorm.weight"] = np.zeros((64,), np.float16)
        arrays[f"{p}.block.exotic"] = np.zeros((3, 5), np.float32)
    save_file(arrays, str(tmp_path / "model.safetensors"))
    return tmp_path


def test_generic_reads_weights_from_headers_and_cache_from_generic_fields(tmp_path: Path) -> None:
    d = _unknown_checkpoint(tmp_path, UNKNOWN)
    r = CliRunner().invoke(main, ["count", str(d), "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["arch_support"] == "generic"
    assert data["weight_bytes"] == (100 * 64 * 2 * 2) + 2 * (64 * 64 + 32 * 64 + 128 * 64 + 64) * 2 + 2 * 15 * 4
    assert data["total"] == 100 * 64 * 2 + 2 * (64 * 64 + 32 * 64 + 128 * 64 + 64 + 15)
    assert data["parts"]["attention"] == 2 * (64 * 64 + 32 * 64)
    assert data["parts"]["other"] == 2 * 15
    assert data["layers"]["sliding_attention"]["window"] == 32
    # one full and one sliding layer, 2 KV heads of 16, K and V, bf16
    assert data["kv_bytes_per_token"] == 2 * (2 * 2 * 16 * 2)
    text = CliRunner().invoke(main, ["count", str(d)]).stdout
    assert "read generically" in text


def test_generic_refuses_layer_kinds_it_cannot_read(tmp_path: Path) -> None:
    d = _unknown_checkpoint(tmp_path, {**UNKNOWN, "layer_types": ["linear_attention", "full_attention"]})
    r = CliRunner().invoke(main, ["count", str(d)])
    assert r.exit_code == 2
    assert "layer_types[0]" in r.stderr and "linear_attention" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_generic_without_headers_is_an_error_not_a_guess() -> None:
    with pytest.raises(ConfigError, match="safetensors headers"):
        read_config(UNKNOWN, "config.json")


def test_generic_reads_hub_headers_when_the_network_allows(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hub's header-only metadata stands in for local files (huggingface_hub's API, not a download)."""
    import huggingface_hub

    from launcher.model import modelsource

    class Info:
        def __init__(self, dtype: str, shape: list[int], size: int) -> None:
            self.dtype, self.shape, self.data_offsets = dtype, shape, (0, size)

    class File:
        tensors: ClassVar[dict[str, Info]] = {"model.embed_tokens.weight": Info("BF16", [100, 64], 12800),
                   "model.layers.0.self_attn.q_proj.weight": Info("BF16", [64, 64], 8192)}  # fmt: skip

    class Repo:
        files_metadata: ClassVar[dict[str, File]] = {"model.safetensors": File()}

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("VLAUNCH_OFFLINE")
    monkeypatch.setattr(modelsource, "_hub_reachable", lambda timeout=3.0: True)
    monkeypatch.setattr(huggingface_hub, "get_safetensors_metadata", lambda repo_id: Repo())
    src = modelsource.ModelSource("org/brandnew", dict(UNKNOWN), "config.json", None, None, "download")
    m, ckpt = modelsource.read_model(src)
    assert ckpt is None and m.support == "generic"
    assert sum(t.numel for t in m.tensors()) == 100 * 64 + 64 * 64
