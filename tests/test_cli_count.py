"""`vlaunch count` through click's CliRunner: keys, exit codes, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from launcher.cli import main
from tests.conftest import CONFIGS

LLAMA8B = str(CONFIGS / "Llama-3.1-8B.json")


def run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.stdout, r.stderr


def test_json_keys() -> None:
    code, out, _ = run("count", LLAMA8B, "--json")
    assert code == 0
    data = json.loads(out)
    assert data["total"] == 8_030_261_248
    assert data["text_total"] == data["total"]
    assert set(data["parts"]) >= {
        "embedding",
        "lm_head",
        "attention",
        "mlp",
        "experts",
        "norms",
        "vision",
        "other",
    }
    assert sum(data["parts"].values()) == data["total"]
    assert data["kv_bytes_per_token"] == 131_072
    assert data["weight_bytes"] == 16_060_522_496
    assert data["weights"]["format"] == "bf16"
    assert data["kv"]["by_layer_kind"] == {"full_attention": 131_072, "sliding_attention": 0}


def test_multimodal_json() -> None:
    data = json.loads(run("count", str(CONFIGS / "gemma-3-12b-pt.json"), "--json")[1])
    assert data["text_total"] == 11_766_034_176
    assert data["total"] == 12_187_325_040
    assert data["parts"]["vision"] == 421_290_864


def test_format_override_and_tp() -> None:
    data = json.loads(run("count", LLAMA8B, "--format", "fp8", "--kv-cache-dtype", "fp8", "-tp", "2", "--json")[1])
    assert data["weights"]["format"] == "fp8"
    assert "embedding" in data["weights"]["kept_16bit"]
    assert data["kv_bytes_per_token"] == 131_072 // 2 // 2


def test_human_output() -> None:
    code, out, _ = run("count", LLAMA8B)
    assert code == 0
    assert "8,030,261,248" in out
    assert "14.96 GiB" in out
    assert "131,072 B/token" in out


def test_model_directory_with_safetensors(tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    from safetensors.numpy import save_file

    cfg = dict(model_type="llama", hidden_size=64, intermediate_size=128, num_hidden_layers=1,
               num_attention_heads=4, num_key_value_heads=2, vocab_size=100, torch_dtype="float16")  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    arrays = {
        "model.embed_tokens.weight": np.zeros((100, 64), np.float16),
        "extra": np.zeros((3,), np.float32),
    }
    save_file(arrays, str(tmp_path / "model.safetensors"))
    data = json.loads(run("count", str(tmp_path), "--json")[1])
    assert data["weights"]["source"] == "safetensors"
    assert data["weight_bytes"] == 100 * 64 * 2 + 3 * 4
    assert data["checkpoint"]["tensor_count"] == 2


def test_repo_id_from_hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "hub"
    snap = cache / "models--meta-llama--Llama-3.1-8B" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(Path(LLAMA8B).read_text())
    (cache / "models--meta-llama--Llama-3.1-8B" / "refs").mkdir()
    (cache / "models--meta-llama--Llama-3.1-8B" / "refs" / "main").write_text("abc123")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    data = json.loads(run("count", "meta-llama/Llama-3.1-8B", "--json")[1])
    assert data["total"] == 8_030_261_248


def test_repo_id_offline_not_cached() -> None:
    code, out, err = run("count", "someorg/not-a-model")
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and "someorg/not-a-model" in err and "Traceback" not in err


def _bad(tmp_path: Path, text: str) -> tuple[int, str]:
    p = tmp_path / "config.json"
    p.write_text(text)
    code, _, err = run("count", str(p))
    return code, err


BASE = json.loads(Path(LLAMA8B).read_text())


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda c: c.pop("hidden_size") and c.update(hidden_size=None), "hidden_size"),
        (lambda c: c.update(num_hidden_layers=0), "num_hidden_layers"),
        (lambda c: c.update(vocab_size=-5), "vocab_size"),
        (lambda c: c.update(intermediate_size="big"), "intermediate_size"),
        (lambda c: c.update(num_key_value_heads=7), "num_key_value_heads"),
        (lambda c: c.update(model_type="mamba9000", architectures=["Mamba9000ForCausalLM"]), "model_type"),
        (lambda c: c.pop("model_type"), "model_type"),
        (lambda c: c.update(tie_word_embeddings="yes"), "tie_word_embeddings"),
        (lambda c: c.update(quantization_config={"quant_method": "zzz"}), "quant_method"),
    ],
)
def test_bad_config_one_line(tmp_path: Path, mutate, field: str) -> None:
    cfg = json.loads(json.dumps(BASE))
    mutate(cfg)
    code, err = _bad(tmp_path, json.dumps(cfg))
    assert code == 2
    assert err.startswith("vlaunch: error: ") and err.count("\n") == 1
    assert str(tmp_path / "config.json") in err or field == "quant_method"
    assert field in err
    assert "Traceback" not in err


@pytest.mark.parametrize("text", ["{", "[1, 2]", "", "\xff\xfe", "null"])
def test_malformed_json(tmp_path: Path, text: str) -> None:
    code, err = _bad(tmp_path, text)
    assert code == 2 and err.count("\n") == 1 and "config.json" in err


def test_missing_file() -> None:
    code, _, err = run("count", "/nonexistent/config.json")
    assert code == 2 and err.count("\n") == 1


def test_unknown_format_name() -> None:
    code, _, err = run("count", LLAMA8B, "--format", "int3")
    assert code == 2 and "unknown format 'int3'" in err and err.count("\n") == 1


def test_unknown_architecture_names_what_is_missing(tmp_path: Path) -> None:
    code, err = _bad(tmp_path, json.dumps({"model_type": "rwkv", "hidden_size": 8}))
    assert code == 2
    assert "unknown model_type 'rwkv'" in err and "vlaunch archs" in err and "safetensors headers" in err


def test_debug_shows_traceback(tmp_path: Path) -> None:
    p = tmp_path / "config.json"
    p.write_text("{")
    r = subprocess.run([sys.executable, "-m", "launcher", "--debug", "count", str(p)], capture_output=True, text=True)
    assert r.returncode != 0 and "Traceback" in r.stderr


def test_every_command_has_help() -> None:
    import click

    ctx = click.Context(main)
    names = main.list_commands(ctx)
    assert len(names) == 13 and {"plan", "serve", "check", "fit", "demo"} <= set(names)
    for name in names:
        cmd = main.get_command(ctx, name)
        assert cmd is not None and cmd.help, name
        assert run(name, "--help")[0] == 0


def test_planning_imports_nothing_heavy() -> None:
    code = (
        "import sys, runpy\n"
        "from launcher.cli import main\n"
        f"try:\n    main(['count', {LLAMA8B!r}, '--json'])\nexcept SystemExit as e:\n    assert e.code == 0, e.code\n"
        "heavy = [m for m in ('torch', 'vllm', 'transformers', 'numpy') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
