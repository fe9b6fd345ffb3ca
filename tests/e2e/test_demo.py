"""`vlaunch demo` for real, as after `pipx install`: the checkout's wheel in a fresh venv, run outside the checkout,
builds the tiny model with the CPU build's python into a cache directory; the profile it writes is found by name,
planned, passes serve's pre-flight and boots."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
from pathlib import Path

from tests.e2e.conftest import TINY, VLLM_PYTHON
from tests.test_wheel import install_wheel


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_demo_builds_a_model_and_a_profile_that_serves(vllm_ready: None, tmp_path: Path) -> None:
    venv = install_wheel(tmp_path / "wheel")
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env |= {"HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache"), "XDG_CONFIG_HOME": str(home / ".config")}

    def vlaunch(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(venv / "bin" / "vlaunch"), *args], cwd=work, env=env, capture_output=True,
                              text=True, timeout=timeout)  # fmt: skip

    r = vlaunch("demo", "--vllm-python", str(VLLM_PYTHON), "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    d = json.loads(r.stdout)
    models = home / ".cache" / "vlaunch" / "tiny-llama"
    assert d["model_built"] is True and d["model_dir"] == str(models) and d["cpu_build"] is True
    print(f"tiny model built in {d['build_seconds']} s")
    for name in ("config.json", "model.safetensors", "tokenizer.json"):  # the recipe `make e2e` built TINY with
        assert _digest(models / name) == _digest(TINY / name), name
    assert d["next"] == ["vlaunch plan tiny-cpu", "vlaunch serve tiny-cpu"]
    again = json.loads(vlaunch("demo", "--vllm-python", str(VLLM_PYTHON), "--json").stdout)
    assert again["model_built"] is False and again["profile_written"] is False

    plan = vlaunch("plan", "tiny-cpu", "--json")
    assert plan.returncode == 0, plan.stderr[-2000:]
    p = json.loads(plan.stdout)
    assert p["model"] == str(models) and p["vllm_argv"][0] == str(VLLM_PYTHON) and p["fits"] is True

    port = str(_free_port())
    dry = vlaunch("serve", "tiny-cpu", "--dry-run", "--port", port, "--json")
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert not [f for f in json.loads(dry.stdout)["preflight"] if f["refuse"]], dry.stdout[-2000:]

    served = vlaunch("serve", "tiny-cpu", "--stop-after-ready", "--port", port, "--logs-dir", str(tmp_path / "logs"),
                     timeout=600)  # fmt: skip
    assert served.returncode == 0, served.stdout[-3000:] + served.stderr[-2000:]
    record = json.loads(next((tmp_path / "logs").glob("tiny-cpu-*.json")).read_text())
    assert record["logged"]["kv_pool_tokens"], record
