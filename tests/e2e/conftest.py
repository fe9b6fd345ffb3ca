"""Real vLLM (the CPU build in .venv-vllm) on a tiny local Llama. `make e2e` builds both first.

Every process a test here starts (vLLM from `start_vllm`, a `vlaunch serve`) carries the session's run markers, and
the session's supervisor stops them all if this test process dies (`tests/conftest.py`, `session_box`)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import pytest

from tests.conftest import Session

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
TINY = ROOT / ".cache" / "tiny-llama"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/e2e" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def vllm_ready() -> None:
    if not VLLM_PYTHON.exists() or not (TINY / "config.json").exists():
        pytest.fail("real vLLM is not set up: run `make e2e` (it installs .venv-vllm and builds .cache/tiny-llama)")


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    log: Path
    handle: BinaryIO | None = None

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, needle: str, timeout: float = 240) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if needle in self.text():
                return True
            if self.proc.poll() is not None:
                return needle in self.text()
            time.sleep(1)
        return False

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        if self.handle is not None:
            self.handle.close()
            self.handle = None


@pytest.fixture
def start_vllm(tmp_path: Path, session_box: Session) -> Iterator:
    """Starts vLLM in a session of its own, carrying the test session's scope and run markers: when this test
    process dies (even by SIGKILL), the session's supervisor stops it (`tests/conftest.py`, `session_box`)."""
    servers: list[Server] = []

    def start(argv: list[str], env: dict[str, str] | None = None, name: str = "vllm") -> Server:
        log = tmp_path / f"{name}.log"
        fh = log.open("wb")
        proc = subprocess.Popen(
            argv,
            stdout=fh,
            stderr=subprocess.STDOUT,
            env={**os.environ, "VLLM_TARGET_DEVICE": "cpu", **(env or {}), **session_box.env},
            cwd=ROOT,
            start_new_session=True,
        )
        s = Server(proc, log, fh)
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.stop()


@pytest.fixture(scope="session")
def _shared_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("vlaunch-config")


@pytest.fixture(autouse=True)
def _calibration_shared_across_e2e(_shared_config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Real launches calibrate the CPU worker's memory; later e2e tests plan with it, as a user's box would."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(_shared_config))
