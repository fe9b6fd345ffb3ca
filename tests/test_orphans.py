"""Nothing a launch starts outlives it: `vlaunch serve` killed hard (SIGKILL), stopped by SIGTERM / SIGHUP, and two
serves racing for the box, as real processes; nor does anything a test session starts outlive the session. The
stand-in for vLLM is a shell script (tests/e2e does the same with the real CPU build): it prints a line, starts a
"worker" in a session of its own (outside vLLM's process group, where a process-group kill cannot reach it) and
sleeps.

These tests run beside whatever else runs on the box (a served vLLM): each has a lock directory of its own and the
session's process table (`tests/conftest.py`); the last ones show that the guard outside a test scope still counts
every vLLM on the box.
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
from collections.abc import Callable, Iterator
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


# --- the test box: a test's process table is its session's; the guard anywhere else is box-wide -------------------

STANDIN_TITLE = "python3 -m vllm.entrypoints.openai.api_server --model m"
SCAN = "from launcher.run import guard; print(sorted(i.pid for i in guard.scan()))"


def _outside_the_scope(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k != sup.SCOPE}


def _standin(env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A process that reads as a vLLM server (its title), started with `env`."""
    p = subprocess.Popen(["bash", "-c", f'exec -a "{STANDIN_TITLE}" sleep 120'], env=env)
    end = time.monotonic() + 10
    while guard._role(Path(f"/proc/{p.pid}/cmdline").read_bytes().decode().split("\0")) != "server":
        assert time.monotonic() < end, "the stand-in never took its title"
        time.sleep(0.05)
    return p


def test_outside_a_test_scope_serve_refuses_beside_any_vllm(box: dict[str, Any]) -> None:
    """A vLLM outside this session's scope (as a served one is): the session does not count it, and the guard of a
    serve without the scope, or with a scope that names no live ancestor of it, refuses a second vLLM."""
    outside = _outside_the_scope(box["env"])
    other = _standin(outside)
    try:
        assert other.pid not in {i.pid for i in guard.scan()}  # this session's table
        r = subprocess.run([sys.executable, "-c", SCAN], env=box["env"], capture_output=True, text=True, timeout=60)
        assert other.pid not in json.loads(r.stdout), r.stdout + r.stderr  # a child of the session: the same table
        for scope in (None, "1:1:1", sup.wrapper_marker(other.pid), f"{os.getpid()}:1:{sup.pid_namespace()}"):
            env = outside | ({sup.SCOPE: scope} if scope else {})
            r = subprocess.run([sys.executable, "-c", SCAN], env=env, capture_output=True, text=True, timeout=60)
            assert other.pid in json.loads(r.stdout), (scope, r.stdout + r.stderr)
        argv = [sys.executable, "-m", "launcher", "serve", str(box["profile"]), "--logs-dir", str(box["logs"]),
                "--skip-preflight"]  # fmt: skip
        r = subprocess.run(argv, env=outside, capture_output=True, text=True, timeout=120)
        assert r.returncode == 4, r.stdout[-2000:] + r.stderr[-2000:]
        assert "vLLM processes already run on this box" in r.stderr, r.stderr
        assert not box["logs"].exists() or not list(box["logs"].glob("*.log"))  # nothing launched
    finally:
        other.kill()
        other.wait(10)


def test_stop_orphans_in_a_test_scope_leaves_an_orphan_outside_it(tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    marker = {sup.MARKER_RUN: "orph-outside", sup.MARKER_PID: f"{dead.pid}:1:{sup.pid_namespace()}"}
    orphan = _standin(_outside_the_scope(dict(os.environ)) | marker)
    try:
        r = subprocess.run(
            [sys.executable, "-c", "from launcher.run import supervise as sup; print(sorted(sup.find_orphans()))"],
            env=_outside_the_scope(dict(os.environ)), capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert orphan.pid in json.loads(r.stdout), r.stdout + r.stderr  # the box-wide view sees it
        assert orphan.pid not in sup.find_orphans()
        r = CliRunner().invoke(main, ["stop", "--orphans", "--timeout", "1"])
        assert r.exit_code == 0 and "no orphaned vLLM processes" in r.stdout, r.output
        assert orphan.poll() is None
    finally:
        orphan.kill()
        orphan.wait(10)


ROOT = Path(__file__).resolve().parent.parent
BOOT_CHILD = Path(__file__).parent / "e2e" / "boot_child.py"
Booted = Callable[[dict[str, Any], dict[int, int]], bool]


def _alive(procs: dict[int, int], run: str) -> dict[int, int]:
    return {p: s for p, s in procs.items() if sup.start_time(p) == s} | sup.run_procs(run)


def kill_a_test_session(
    tmp: Path, booted: Booted, timeout: float, **env: str
) -> tuple[dict[int, int], float, dict[int, int]]:
    """Run tests/e2e/boot_child.py as a child pytest session (a session of its own), wait until `booted(info, the
    run's processes)`, SIGKILL its whole process group and wait up to 15 s for its run's processes to go: returns
    those processes, the seconds they took to go and what still runs."""
    out, output = tmp / "child.json", tmp / "child.out"
    child_env = {**os.environ, "BOOT_CHILD_OUT": str(out), **env}
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(BOOT_CHILD)]
    procs: dict[int, int] = {}
    run = ""
    with output.open("wb") as fh:
        child = subprocess.Popen(argv, cwd=ROOT, env=child_env, stdout=fh, stderr=subprocess.STDOUT,
                                 start_new_session=True)  # fmt: skip
    try:
        end = time.monotonic() + timeout
        while child.poll() is None and time.monotonic() < end:
            info = json.loads(out.read_text()) if out.exists() and out.read_text() else None
            if info is not None:
                run = info["run"]
                procs |= sup.run_procs(run)
                if booted(info, procs):
                    break
            time.sleep(0.2)
        assert run and child.poll() is None and time.monotonic() < end, output.read_text()[-3000:]
        procs |= sup.run_procs(run)
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(10)
        t0 = time.monotonic()
        while _alive(procs, run) and time.monotonic() - t0 < 15:
            time.sleep(0.2)
        return procs, time.monotonic() - t0, _alive(procs, run)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait(10)
        sup.stop_procs(_alive(procs, run) if run else procs, grace=1)


STANDIN_WITH_WORKER = """#!/bin/sh
setsid sleep 300 &
exec sleep 300
"""


def test_a_killed_test_session_leaves_nothing_it_started(tmp_path: Path) -> None:
    """A test session SIGKILLed with its whole process group (a timeout's kill): what its e2e fixture started, in a
    session of its own, is stopped by the session's supervisor within the grace."""
    exe = tmp_path / "standin"
    exe.write_text(STANDIN_WITH_WORKER)
    exe.chmod(0o755)
    procs, took, left = kill_a_test_session(
        tmp_path, lambda info, procs: len(procs) >= 2, 60, BOOT_CHILD_ARGV=json.dumps([str(exe)])
    )
    assert len(procs) >= 2  # the stand-in and its worker in a session of its own
    assert left == {}, f"still running {took:.1f} s after the test session was killed: {left}"
