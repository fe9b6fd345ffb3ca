"""Nothing a launch starts outlives it: `vlaunch serve` killed hard (SIGKILL), stopped by SIGTERM / SIGHUP, and two
serves racing for the box, as real processes. The stand-in for vLLM is a shell script (tests/e2e does the same
with the real CPU build): it prints a line, starts a "worker" in a session of its own (outside vLLM's process
group, where a process-group kill cannot reach it) and sleeps.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from launcher.cli import main
from launcher.run import guard
from launcher.run import supervise as sup

TINY = Path(__file__).parent / "fixtures" / "tiny-llama" / "config.json"
FAKE_VLLM = """#!/bin/sh
echo "INFO 12-01 10:00:00 [api_server.py:1] vLLM API server version 0.19.0"
setsid sleep 300 &
echo "INFO worker started"
exec sleep 300
"""


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def box(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A profile whose `vllm` is the fake, a lock directory of the test's own, and a clean-up of whatever is left."""
    model = tmp_path / "model"
    model.mkdir()
    shutil.copy(TINY, model / "config.json")
    exe = tmp_path / "bin" / "vllm"
    exe.parent.mkdir()
    exe.write_text(FAKE_VLLM)
    exe.chmod(0o755)
    profile = tmp_path / "orph.yaml"
    profile.write_text(
        f"name: orph\nmodel: {model}\nmachine: cpu\nmax_model_len: 2048\ngpu_memory_utilization: 0.3\n"
        f'vllm:\n  version: "0.19.0"\n  launch: cli\n  executable: {exe}\n  port: {_port()}\n'
    )
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    # PYTHONFAULTHANDLER: a serve that hangs prints every thread's stack on SIGABRT (`stop_or_say_where`)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(run_dir), "PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1"}
    started: list[subprocess.Popen[str]] = []
    yield {"profile": profile, "env": env, "logs": tmp_path / "logs", "started": started, "tmp": tmp_path}
    for p in started:
        if p.poll() is None:
            p.kill()
            p.wait(10)
        if p.stdout:
            p.stdout.close()
    for log in (tmp_path / "logs").glob("*.log"):
        sup.stop_pids(sup.run_pids(log.stem), grace=1)


def start_serve(box: dict[str, Any], *extra: str) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "launcher", "serve", str(box["profile"]), "--logs-dir", str(box["logs"]),
            "--skip-preflight", *extra]  # fmt: skip
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=box["env"])
    box["started"].append(p)
    return p


def wait_for_line(p: subprocess.Popen[str], needle: str, timeout: float = 60) -> list[str]:
    assert p.stdout is not None
    seen: list[str] = []
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        line = p.stdout.readline()
        if not line:
            break
        seen.append(line)
        if needle in line:
            return seen
    err = p.stderr.read() if p.stderr and p.poll() is not None else ""  # stderr when it is a pipe of its own
    raise AssertionError(f"no {needle!r} in {''.join(seen)[-2000:]} {err[-2000:]}")


def stop_or_say_where(p: subprocess.Popen[str], sig: signal.Signals, timeout: float) -> str:
    """Signal `p` and wait for it; when it hangs, SIGABRT makes it print where each of its threads stands."""
    p.send_signal(sig)
    try:
        out, _ = p.communicate(timeout=timeout)
        return out
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGABRT)
        out, _ = p.communicate(timeout=10)
        raise AssertionError(f"{sig.name} did not stop serve within {timeout:.0f} s: {out[-4000:]}") from None


def run_id(box: dict[str, Any]) -> str:
    [log] = box["logs"].glob("orph-*.log")
    return log.stem


def wait_gone(run: str, timeout: float) -> tuple[float, list[int]]:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        left = sup.run_pids(run)
        if not left:
            return time.monotonic() - t0, []
        time.sleep(0.2)
    return time.monotonic() - t0, sup.run_pids(run)


def holder(box: dict[str, Any]) -> dict[str, Any] | None:
    return guard.read_holder(Path(box["env"]["XDG_RUNTIME_DIR"]) / "vlaunch" / "serve.lock")


def record(box: dict[str, Any]) -> dict[str, Any]:
    [path] = box["logs"].glob("orph-*.json")
    data: dict[str, Any] = json.loads(path.read_text())
    return data


@pytest.mark.usefixtures("quiet_box")
def test_sigkilled_wrapper_leaves_nothing(box: dict[str, Any]) -> None:
    p = start_serve(box)
    wait_for_line(p, "vLLM pid")
    time.sleep(0.5)  # the fake has started its worker
    run = run_id(box)
    assert len(sup.run_pids(run)) >= 2  # vLLM and the worker in a session of its own
    p.send_signal(signal.SIGKILL)
    p.wait(10)
    took, left = wait_gone(run, 15)
    assert left == [], f"still running {took:.1f} s after the wrapper died: {left}"
    assert holder(box) is None  # the kernel dropped the lock with the wrapper
    end = time.monotonic() + 10  # the supervisor writes its note once the last process is gone
    while not list(box["logs"].glob("orph-*.json")) and time.monotonic() < end:
        time.sleep(0.1)
    rec = record(box)
    assert rec["stopped_by"].startswith("supervisor:") and rec["leftover_pids"] == []
    assert len(rec["supervisor_stopped_pids"]) >= 2


@pytest.mark.usefixtures("quiet_box")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_signalled_wrapper_stops_everything_and_says_why(box: dict[str, Any], sig: signal.Signals) -> None:
    p = start_serve(box)
    wait_for_line(p, "vLLM pid")
    time.sleep(0.5)
    run = run_id(box)
    p.send_signal(sig)
    assert p.wait(30) == 128 + sig  # stopped before vLLM was ready
    assert sup.run_pids(run) == []  # the worker that left vLLM's process group too
    rec = record(box)
    assert rec["stopped_by"] == sig.name and rec["exit"] == 128 + sig and rec["leftover_pids"] == []
    assert holder(box) is None


@pytest.mark.usefixtures("quiet_box")
def test_two_serves_racing_one_launches(box: dict[str, Any]) -> None:
    for n in range(10):
        a = start_serve(box)
        time.sleep(0.02)  # within 50 ms of each other
        b = start_serve(box)
        end = time.monotonic() + 60
        while a.poll() is None and b.poll() is None and time.monotonic() < end:
            time.sleep(0.05)
        [loser] = [p for p in (a, b) if p.poll() is not None]
        [winner] = [p for p in (a, b) if p is not loser]
        out, _ = loser.communicate(timeout=10)
        assert loser.returncode == 4, out[-2000:]
        assert "holds this box" in out or "already run on this box" in out, out[-2000:]
        wait_for_line(winner, "vLLM pid")  # the other one launched
        assert winner.poll() is None
        # a stop takes about a second; the bound is for a loaded box (a full `make test` beside it)
        stop_or_say_where(winner, signal.SIGTERM, 90)
        logs = sorted(box["logs"].glob("*.log"))
        assert len(logs) == n + 1  # the refused one wrote no run log
        for log in logs:
            assert sup.run_pids(log.stem) == []
        assert holder(box) is None


ESCAPING_VLLM = """#!/bin/sh
echo "INFO 12-01 10:00:00 [api_server.py:1] vLLM API server version 0.19.0"
(env -u VLAUNCH_RUN_ID -u VLAUNCH_PID setsid sh -c 'echo $$ > "$0"; exec sleep 60' {pidfile} &)
echo "INFO escaped"
exec sleep 300
"""


@pytest.mark.usefixtures("quiet_box")
@pytest.mark.parametrize("delay", [0.0, 0.5])
def test_a_writer_that_escaped_the_launch_does_not_hold_the_stop(box: dict[str, Any], delay: float) -> None:
    """A process that left vLLM's tree without the run's marker and keeps vLLM's output open: nothing of vlaunch
    can find it, and the stop must not wait on it (nor on the reader of that output)."""
    pidfile = box["tmp"] / "escaped.pid"
    exe = box["tmp"] / "bin" / "vllm"
    exe.write_text(ESCAPING_VLLM.format(pidfile=pidfile))
    p = start_serve(box)
    try:
        wait_for_line(p, "vLLM pid")
        end = time.monotonic() + 10
        while not pidfile.exists() and time.monotonic() < end:
            time.sleep(0.05)
        time.sleep(delay)
        t0 = time.monotonic()
        stop_or_say_where(p, signal.SIGTERM, 30)
        assert p.returncode == 128 + signal.SIGTERM
        assert time.monotonic() - t0 < 15  # the supervisor's grace, not the escaped process's 60 s
        assert holder(box) is None
    finally:
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pidfile.read_text()), signal.SIGKILL)


def test_ps_marks_an_orphan_and_stop_orphans_stops_it(tmp_path: Path) -> None:
    """A vLLM whose wrapper is gone (here: a marker naming a process that no longer runs)."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    env = {**os.environ, sup.MARKER_RUN: "orph-test", sup.MARKER_PID: f"{dead.pid}:1:{sup.pid_namespace()}"}
    title = "python3 -m vllm.entrypoints.openai.api_server --model m"
    orphan = subprocess.Popen(["bash", "-c", f'exec -a "{title}" sleep 120'], env=env)
    try:
        end = time.monotonic() + 10
        while orphan.pid not in sup.find_orphans() and time.monotonic() < end:
            time.sleep(0.1)
        ps = json.loads(CliRunner().invoke(main, ["ps", "--json"]).stdout)
        [me] = [i for i in ps["instances"] if i["pid"] == orphan.pid]
        assert me["orphan"] is True and me["orphan_of"] == "orph-test"
        text = CliRunner().invoke(main, ["ps"]).stdout
        assert "orphan of run orph-test" in text and "vlaunch stop --orphans" in text
        assert "vlaunch stop --orphans" in guard.verdict()
        r = CliRunner().invoke(main, ["stop", "--orphans", "--timeout", "5"])
        assert r.exit_code == 0 and str(orphan.pid) in r.stdout
        assert orphan.wait(10) == -signal.SIGTERM
    finally:
        if orphan.poll() is None:
            orphan.kill()
            orphan.wait(5)


def test_a_running_wrapper_is_not_an_orphans_parent() -> None:
    assert sup.wrapper_alive(sup.wrapper_marker())
    assert not sup.wrapper_alive(f"{os.getpid()}:1")  # same pid, another start time: a reused pid
    assert not sup.wrapper_alive(None) and not sup.wrapper_alive("garbage")


def test_stop_orphans_with_none() -> None:
    r = CliRunner().invoke(main, ["stop", "--orphans"])
    assert r.exit_code == 0 and "no orphaned vLLM processes" in r.stdout
