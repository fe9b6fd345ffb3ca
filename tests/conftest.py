from __future__ import annotations

from pathlib import Path

import pytest

from launcher.run.guard import scan as _REAL_SCAN

FIXTURES = Path(__file__).parent / "fixtures"
CONFIGS = FIXTURES / "configs"


@pytest.fixture(autouse=True)
def _isolate(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """No test reads the user's caches or touches the network."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("VLAUNCH_OFFLINE", "1")
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(home / "run"))
    monkeypatch.delenv("HF_HOME", raising=False)
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("VLAUNCH_DEBUG", raising=False)


def _foreign_vllm() -> str | None:
    """A vLLM server or engine running on this box that this test session did not start (a real one being
    served, another test session's stand-in), shown as `ps` shows it; None when there is none."""
    import os

    import psutil

    ours = {os.getpid()} | {p.pid for p in psutil.Process().children(recursive=True)}
    for i in _REAL_SCAN():  # not a test's stand-in for it (test_preflight's autouse fixture replaces guard.scan)
        if i.role in ("server", "engine") and i.pid not in ours:
            return i.shown()
    return None


@pytest.fixture
def quiet_box() -> None:
    """For a test that starts a real `vlaunch serve` process: serve refuses to start a vLLM beside one that runs
    (exit 4, the guard doing its job), so with another vLLM on the box the test cannot say anything; it skips,
    naming that process."""
    found = _foreign_vllm()
    if found is not None:
        pytest.skip(f"another vLLM runs on this box and serve's guard refuses a second one: {found}")
