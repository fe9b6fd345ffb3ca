"""The test box with real vLLM (the CPU build): a test session killed while the vLLM its fixture started boots
leaves no vLLM process of its run, and the guard outside a test scope refuses a second vLLM beside a real one."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from launcher.plan.planning import make_plan
from launcher.plan.profiles import load_profile
from launcher.run import supervise as sup
from tests.e2e.conftest import ROOT
from tests.test_orphans import kill_a_test_session


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_test_session_killed_during_the_boot_leaves_no_vllm(vllm_ready: None, tmp_path: Path) -> None:
    """The child session's whole process group gets SIGKILL once vLLM's worker loads the model (API server,
    engine core and worker all run); 15 s later no process of that run is alive."""

    def loading(info: dict[str, Any], procs: dict[int, int]) -> bool:
        log = Path(info["log"]).read_text(errors="replace")
        assert "Application startup complete" not in log, "vLLM finished booting before the kill"
        return "Starting to load model" in log and len(procs) >= 3

    procs, took, left = kill_a_test_session(tmp_path, loading, 300, BOOT_CHILD_PORT=str(_port()))
    print(f"{len(procs)} vLLM processes of the killed session's run; none left after {took:.1f} s")
    assert len(procs) >= 3
    assert left == {}, f"still running {took:.1f} s after the test session was killed: {left}"


def test_the_guard_outside_a_test_scope_refuses_beside_a_real_vllm(
    vllm_ready: None, start_vllm, tmp_path: Path
) -> None:
    """A real vLLM runs (this session's): a serve without the session's scope counts it and refuses, exit 4, with
    the box lock free (a lock directory of the test's own)."""
    profile = load_profile(ROOT / "profiles" / "tiny-cpu.yaml").with_overrides(vllm={"port": _port()})
    server = start_vllm(list(make_plan(profile).argv), name="first")
    outside = {k: v for k, v in os.environ.items() if k != sup.SCOPE}
    r = subprocess.run(
        [sys.executable, "-m", "launcher", "serve", "profiles/tiny-cpu.yaml", "--logs-dir", str(tmp_path / "logs")],
        cwd=ROOT, env=outside, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert server.proc.poll() is None, server.text()[-3000:]
    assert r.returncode == 4, r.stdout[-3000:] + r.stderr[-2000:]
    assert "vLLM processes already run on this box" in r.stderr and f"pid {server.proc.pid} " in r.stderr, r.stderr
    assert not (tmp_path / "logs").exists()
