from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.run import supervise as sup

FIXTURES = Path(__file__).parent / "fixtures"
CONFIGS = FIXTURES / "configs"


@pytest.fixture(autouse=True)
def _isolate(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """No test reads the user's caches or touches the network, and each takes the box lock in a directory of its
    own (XDG_RUNTIME_DIR)."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("VLAUNCH_OFFLINE", "1")
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(home / "run"))
    monkeypatch.delenv("HF_HOME", raising=False)
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("VLAUNCH_DEBUG", raising=False)


class Session:
    """This test session's hold on the processes its tests start: the test scope and the run markers every one of
    them carries in its environment."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.markers = {sup.MARKER_RUN: run_id, sup.MARKER_PID: sup.wrapper_marker()}
        self.scope = sup.scope() or sup.wrapper_marker()  # a session a test starts shares that test's box

    @property
    def env(self) -> dict[str, str]:
        """What a process this session starts carries: its scope and its run markers."""
        return {sup.SCOPE: self.scope, **self.markers}


@pytest.fixture(scope="session", autouse=True)
def session_box(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    """Every test of the session on a box of its own, beside whatever else runs on this one (a served vLLM):

    - the process table: the session's test scope (`supervise.SCOPE`) is in the environment every process a test
      starts inherits, so the guard, `ps` and `stop --orphans`, in this process or in a `vlaunch serve` it starts,
      count only the session's processes (a session a test starts keeps that test's scope);
    - the run markers (VLAUNCH_RUN_ID, VLAUNCH_PID naming this process) are too, read by a supervisor of the
      session (vlaunch serve's own, `launch.Supervisor`): when this process dies without saying `done` (even by
      SIGKILL), it stops every process carrying them and what descends from them (the grace, then SIGKILL).
    """
    from launcher.run import launch

    session = Session(f"pytest-{os.getpid()}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
    record = tmp_path_factory.mktemp("session") / f"{session.run_id}.json"
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv(sup.MARKER_CONTAINER, raising=False)
        for key, value in session.env.items():
            mp.setenv(key, value)
        supervisor = launch.Supervisor.start(session.run_id, container=None, record=record)
        try:
            yield session
        finally:
            supervisor.done()
