"""The box lock and `stop` cannot be turned against their user (issue 24: S1, S2, S9, C5, W2-W4, W6-W8, C1, C8).

Whatever may signal runs inside a private pid namespace (`unshare --pid --fork --mount-proc`, or the same in a user
namespace where that is allowed), with stand-in processes (`exec -a "vllm serve x" sleep 300`): a regression in the
code under test can then only reach the test's own processes. The cross-user cases switch to throw-away uids with
`setpriv` and need root.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from launcher import cluster, guard, serving
from launcher import supervise as sup
from launcher.cli import main

ROOT = Path(guard.__file__).resolve().parent.parent  # the tree under test, for the subprocesses too
VICTIM, ATTACKER = 4242, 4343


def _unshare() -> list[str] | None:
    if not shutil.which("unshare"):
        return None
    for prefix in (
        ["unshare", "--pid", "--fork", "--mount-proc"],
        ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc"],
    ):
        try:
            r = subprocess.run([*prefix, "true"], capture_output=True, timeout=20, check=False)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if r.returncode == 0:
            return prefix
    return None


UNSHARE = _unshare()
pidns = pytest.mark.skipif(
    UNSHARE is None, reason="needs `unshare --pid` (root, or user namespaces) so that signals stay in the test"
)
two_users = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv") or UNSHARE is None,
    reason="needs root, setpriv and unshare to act as two throw-away uids",
)


def clean_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLAUNCH_", "XDG_"))}
    run = tmp / "run"
    run.mkdir(mode=0o700, exist_ok=True)
    return env | {"PYTHONPATH": str(ROOT), "PY": sys.executable, "HOME": str(tmp), "XDG_RUNTIME_DIR": str(run),
                  "T": str(tmp), "VLAUNCH_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}  # fmt: skip


def in_pidns(script: str, tmp: Path, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
    """`script` (bash) as the init of a private pid namespace with its own /proc; `$PY -m launcher` is vlaunch."""
    assert UNSHARE is not None
    return subprocess.run(
        [*UNSHARE, "bash", "-c", "set -u\n" + script],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=clean_env(tmp) | env,
        cwd=tmp,
        check=False,
    )


def one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr and "internal error" not in stderr, stderr
    return lines[0]


HOLD = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
os.ftruncate(fd, 0)
os.write(fd, sys.argv[2].encode())
print("held", flush=True)
time.sleep(300)
"""
"""A process holding the lock with the content it was given (as an attacker, or a broken vlaunch, would)."""


@pytest.fixture
def lock_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))
    return run / "vlaunch"


@pytest.fixture
def holders() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for p in started:
        p.kill()
        p.wait(10)
        if p.stdout:
            p.stdout.close()


def hold(holders: list[subprocess.Popen[str]], path: Path, content: str) -> None:
    path.parent.mkdir(mode=0o700, exist_ok=True)
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(path), content], stdout=subprocess.PIPE, text=True)
    holders.append(p)
    assert p.stdout is not None and p.stdout.readline().strip() == "held"


# --- S9: what comes from /proc or the lock is printed escaped ----------------------------------------------------

NASTY = "\x1b]0;pwned\x07\x1b[31m\u202e\u2028\x9b"
ACTIVE = "\x1b\x07\u202e\u2028\x9b"  # what a terminal acts on


@pidns
def test_s9_ps_and_serves_refusal_escape_process_titles(tmp_path: Path) -> None:
    r = in_pidns(
        f"""
        bash -c 'exec -a "vllm serve {NASTY}" sleep 300' &
        sleep 0.5
        "$PY" -m launcher ps
        "$PY" -c 'from launcher import guard; print(guard.verdict())'
        """,
        tmp_path,
    )
    assert "vllm serve" in r.stdout and "\\x1b]0;pwned\\x07" in r.stdout, r.stdout + r.stderr
    for ch in ACTIVE:
        assert ch not in r.stdout


def test_s9_the_lock_holder_is_printed_escaped(lock_dir: Path, holders: list[subprocess.Popen[str]]) -> None:
    hold(holders, lock_dir / "serve.lock", json.dumps({"pid": 4321, "profile": f"p{NASTY}", "log": NASTY}))
    text = guard.refusal(guard.read_holder()) + CliRunner().invoke(main, ["ps"]).stdout
    assert "holds this box" in text
    for ch in ACTIVE:
        assert ch not in text
    inst = guard.Instance(7, "server", f"vllm serve {NASTY}", 0, 0.0)
    assert "\\x1b" in inst.shown() and not any(ch in inst.shown() for ch in ACTIVE)


# --- W3 / C8: what is a vLLM --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cmd", "role"),
    [
        (["tail", "-f", "EngineCore-notes.txt"], None),
        (["grep", "vLLM pid", "serve.log"], None),
        (["bash", "driver.sh", "vllm", "serve"], None),
        (["ssh", "gpu2", "vllm", "serve", "m"], None),
        (["less", "vllm.entrypoints.openai.api_server.py"], None),
        (["python3", "-c", "print('vllm serve')"], None),
        (["vim", "vlaunch-serve-notes"], None),
        (["vllm", "serve", "in-container-vlaunch-pdock"], "server"),
        (["/opt/venv/bin/vllm", "serve", "m"], "server"),
        (["/v/bin/python3.12", "/v/bin/vllm", "serve", "m"], "server"),
        (["/x/python", "-u", "-X", "dev", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"], "server"),
        (["python", "-mvllm.entrypoints.cli.main", "serve", "m"], "server"),
        (["vllm serve x", "300"], "server"),  # exec -a "vllm serve x": a title holding the command line
        (["VLLM::EngineCore", "", "", ""], "engine"),
        (["VLLM::EngineCore_DP0"], "engine"),
        (["VLLM::Worker_TP1"], "worker"),
        (["VLLM::APIServer"], "server"),
        (["/x/python", "/x/vlaunch", "serve", "p.yaml"], "vlaunch"),
        (["/x/python", "-m", "launcher", "serve", "p.yaml"], "vlaunch"),
        (["/x/python", "/x/vlaunch", "ps"], None),
        (["python", "-m", "pytest"], None),
        ([], None),
    ],
)
def test_w3_c8_roles_by_program_not_by_mention(cmd: list[str], role: str | None) -> None:
    assert guard._role(cmd) == role


@pidns
def test_w3_a_file_named_enginecore_blocks_nothing(tmp_path: Path) -> None:
    r = in_pidns(
        """
        bash -c 'exec -a "tail -f EngineCore-notes.txt" sleep 300' &
        bash -c 'exec -a "ssh gpu2 vllm serve m" sleep 300' &
        sleep 0.5
        "$PY" -c 'from launcher import guard; print(guard.verdict())'
        "$PY" -m launcher ps
        """,
        tmp_path,
    )
    assert r.stdout.splitlines()[0] == "free", r.stdout + r.stderr
    assert "no vLLM processes on this box" in r.stdout


# --- W2 / W4 / W7: orphans and process groups --------------------------------------------------------------------

DEAD_MARKER = "true & DEAD=$!; wait $DEAD; NS=$(stat -L -c %i /proc/self/ns/pid); export VLAUNCH_RUN_ID=orph-x"


@pidns
def test_w2_a_vllm_in_a_child_pid_namespace_is_not_an_orphan_here(tmp_path: Path) -> None:
    """A serve in namespace B (its marker names B's pids); `stop --orphans` in the parent namespace A does not
    stop its vLLM."""
    inner = (
        "import os, subprocess, time; from launcher import supervise as sup; from launcher.guard import BoxLock; "
        "env = {**os.environ, sup.MARKER_RUN: 'inner', sup.MARKER_PID: sup.wrapper_marker()}; "
        "p = subprocess.Popen(['bash', '-c', 'exec -a \"vllm serve inner\" sleep 300'], env=env); "
        "l = BoxLock(); l.acquire({'pid': os.getpid(), 'profile': 'inner', 'since': time.time(), 'vllm_pid': p.pid}); "
        "print('ready', os.getpid(), flush=True); time.sleep(300)"
    )
    r = in_pidns(
        """
        sleep 300 & VICTIM=$!   # pid 2 here; the inner vlaunch is pid 2 in its namespace
        unshare --pid --fork --mount-proc bash -c '"$PY" -c "$INNER"; exit' > inner.out &
        for i in $(seq 100); do grep -q ready inner.out && break; sleep 0.1; done
        cat inner.out
        STANDIN=$(pgrep -f "^vllm serve inner")
        "$PY" -m launcher ps --json > ps.json
        "$PY" -m launcher stop --orphans --timeout 2; echo "orphans-rc=$?"
        sleep 0.5
        kill -0 $STANDIN && echo standin-alive
        kill -0 $VICTIM && echo victim-alive
        """,
        tmp_path,
        INNER=inner,
    )
    out = r.stdout + r.stderr
    assert "ready 2" in out and "standin-alive" in out and "victim-alive" in out, out
    assert "orphans-rc=0" in out and "no orphaned vLLM processes" in out, out
    ps = json.loads((tmp_path / "ps.json").read_text())
    assert [i["orphan"] for i in ps["instances"] if "inner" in i["cmdline"]] == [False], ps


@pidns
def test_w4_a_group_leader_outside_the_namespace_is_never_killpg_0(tmp_path: Path) -> None:
    """In a pid namespace whose process group leader is outside, getpgid gives 0: `stop --orphans` must not
    signal its own group (it killed itself and its shell)."""
    r = in_pidns(
        f"""
        {DEAD_MARKER}
        VLAUNCH_PID="$DEAD:1:$NS" bash -c 'trap "" TERM; exec -a "vllm serve stubborn" sleep 300' &
        ORPHAN=$!
        sleep 0.5
        timeout 30 "$PY" -m launcher stop --orphans --timeout 2; echo "rc=$?"
        sleep 0.5
        kill -0 $ORPHAN 2>/dev/null && echo orphan-alive
        echo shell-alive
        """,
        tmp_path,
    )
    out = r.stdout + r.stderr
    assert "rc=0" in out and "stopped 1 orphaned process(es)" in out and "shell-alive" in out, out
    assert "orphan-alive" not in out, out


def test_w4_no_group_is_signalled_unless_a_proven_process_leads_it(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(os, "killpg", lambda g, s: sent.append((g, s)))
    # a child in our own process group: its group is ours, never signalled
    p = subprocess.Popen(["sleep", "300"])
    q = subprocess.Popen(["sleep", "300"], start_new_session=True)  # leads its own group
    try:
        assert sup.stop_procs({p.pid: sup.start_time(p.pid) or 0}, grace=2).alive == []
        assert sent == []
        assert sup.stop_procs({q.pid: sup.start_time(q.pid) or 0}, grace=2).alive == []
        assert sent and {g for g, _ in sent} == {q.pid}
        assert sup.stop_procs({0: 1, -1: 1, 1: 1, os.getpid(): sup.start_time(os.getpid()) or 0}, grace=0.1) == (
            sup.Stopped([], [])
        )
    finally:
        for x in (p, q):
            x.kill()
            x.wait()


def test_w2_a_pid_is_signalled_only_while_it_is_the_same_process() -> None:
    p = subprocess.Popen(["sleep", "300"])
    try:
        started = sup.start_time(p.pid)
        assert started is not None
        assert sup.send(p.pid, started + 1, signal.SIGTERM) is False  # another start time: a reused pid
        assert p.poll() is None
        assert sup.send(p.pid, started, signal.SIGTERM) is True
        assert p.wait(10) == -signal.SIGTERM
    finally:
        p.kill()
        p.wait()


@pidns
def test_w7_stop_orphans_kills_an_orphaned_clients_container(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text('#!/bin/sh\necho "$@" >> "$T/docker.calls"\n')
    (bin_dir / "docker").chmod(0o755)
    r = in_pidns(
        f"""
        export PATH="$T/bin:$PATH"
        {DEAD_MARKER}
        VLAUNCH_PID="$DEAD:1:$NS" VLAUNCH_CONTAINER=docker:vlaunch-p1-x \
            bash -c 'exec -a "docker run --rm --name vlaunch-p1-x img vllm serve m" sleep 300' &
        VLAUNCH_PID="$DEAD:1:$NS" VLAUNCH_CONTAINER='docker:--rm -v /:/x' bash -c 'exec -a "vllm serve y" sleep 300' &
        sleep 0.5
        "$PY" -m launcher stop --orphans --timeout 2; echo "rc=$?"
        """,
        tmp_path,
    )
    out = r.stdout + r.stderr
    assert "rc=0" in out and "killed container docker:vlaunch-p1-x" in out, out
    assert (tmp_path / "docker.calls").read_text() == "kill vlaunch-p1-x\n"  # the malformed name is not run


# --- W6 / C1: `stop`'s exit code and --timeout ---------------------------------------------------------------------


def test_w6_stop_pid_that_cannot_be_signalled_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    p = subprocess.Popen(["bash", "-c", 'exec -a "vllm serve x" sleep 300'])
    try:
        time.sleep(0.3)

        def denied(pid: int, started: int, sig: int) -> bool:
            raise PermissionError(1, "Operation not permitted")

        monkeypatch.setattr(sup, "send", denied)
        r = CliRunner().invoke(main, ["stop", str(p.pid), "--timeout", "1"])
        assert r.exit_code == 4 and f"cannot signal pid {p.pid}: operation not permitted" in r.stderr, r.output
        assert "stopped" not in r.stdout and p.poll() is None
    finally:
        p.kill()
        p.wait()


def test_w6_stop_reports_what_still_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(serving, "stop_pid", lambda pid, t: sup.Stopped([pid], []))
    r = CliRunner().invoke(main, ["stop", "12345", "--timeout", "1"])
    assert r.exit_code == 4 and "still alive after the stop: pid 12345" in r.stderr


@two_users
def test_w6_stop_pid_of_another_user(tmp_path: Path) -> None:
    """The report's case: uid 4242 runs `vlaunch stop PID` on uid 4343's "vllm serve": exit 4, one line."""
    tmp_path.chmod(0o755)
    r = in_pidns(
        f"""
        setpriv --reuid {ATTACKER} --regid {ATTACKER} --clear-groups bash -c 'exec -a "vllm serve x" sleep 300' &
        OTHER=$!
        sleep 0.5
        HOME=/nonexistent XDG_RUNTIME_DIR= setpriv --reuid {VICTIM} --regid {VICTIM} --clear-groups \
            "$PY" -m launcher stop $OTHER --timeout 1; echo "rc=$?"
        kill -0 $OTHER && echo other-alive
        echo "pid=$OTHER"
        """,
        tmp_path,
    )
    out = r.stdout + r.stderr
    pid = r.stdout.split("pid=")[-1].strip()
    assert "rc=4" in out and f"cannot signal pid {pid}: operation not permitted" in out, out
    assert "other-alive" in out and "stopped pid" not in out, out


@pytest.mark.parametrize("value", ["inf", "nan", "-5", "0", "3601", "-inf"])
def test_c1_stop_timeout_must_be_finite_and_sane(value: str) -> None:
    for argv in (["stop", "--orphans", "--timeout", value], ["stop", "--timeout", value]):
        r = CliRunner().invoke(main, argv)
        assert r.exit_code == 2 and "--timeout" in r.stderr, r.output


# --- W8: the multi-node guard ------------------------------------------------------------------------------------


@pidns
def test_w8_the_remote_pgrep_does_not_match_its_own_shell(tmp_path: Path) -> None:
    import shlex

    from launcher.profiles import profile_from_mapping

    profile = profile_from_mapping(
        {"model": "x/y", "nodes": [{"host": "127.0.0.1", "role": "head", "machine": "cpu", "gpus": 1}]}
    )
    [guard_cmd] = [c for what, c in cluster.preflight_commands(profile) if what == "guard"]
    remote = shlex.quote(shlex.join(guard_cmd.argv) + "; exit $?")  # sh stays the parent, as dash over ssh does
    r = in_pidns(f"sh -c {remote}; echo rc=$?", tmp_path)
    assert "rc=1" in r.stdout, r.stdout  # nothing runs: not even the shell carrying the pattern
    titles = ["vllm serve m", "/v/bin/python3 -m vllm.entrypoints.openai.api_server --model m", "VLLM::EngineCore",
              "tail -f EngineCore-notes.txt", "ssh gpu2 vllm serve m"]  # fmt: skip
    starts = "".join(f"bash -c 'exec -a \"{t}\" sleep 300' &\n" for t in titles)
    r = in_pidns(f"{starts}sleep 0.5\nsh -c {remote}", tmp_path)
    found = sorted(line.split(" ", 1)[1].rsplit(" ", 1)[0] for line in r.stdout.splitlines())
    assert found == sorted(titles[:3]), r.stdout
