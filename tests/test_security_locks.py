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
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from launcher.cli import main
from launcher.run import cluster, guard, serving
from launcher.run import supervise as sup

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


# --- S1 / C5: the lock directory and the lock file ---------------------------------------------------------------


def test_s1_a_symlinked_lock_file_is_refused_and_its_target_kept(lock_dir: Path, tmp_path: Path) -> None:
    precious = tmp_path / "important.txt"
    precious.write_text("precious\n")
    lock_dir.mkdir(mode=0o700)
    (lock_dir / "serve.lock").symlink_to(precious)
    lock = guard.BoxLock()
    with pytest.raises(guard.LockError, match="symbolic link"):
        lock.acquire({"pid": os.getpid(), "profile": "p1", "since": time.time()})
    lock.release()
    assert precious.read_text() == "precious\n"
    with pytest.raises(guard.LockError, match="symbolic link"):
        guard.read_holder()


def test_s1_a_fifo_lock_file_is_refused_without_hanging(lock_dir: Path, tmp_path: Path) -> None:
    lock_dir.mkdir(mode=0o700)
    os.mkfifo(lock_dir / "serve.lock")
    env = clean_env(tmp_path) | {"XDG_RUNTIME_DIR": str(lock_dir.parent)}
    for argv in (["ps"], ["stop", "--timeout", "1"]):
        try:
            r = subprocess.run([sys.executable, "-m", "launcher", *argv], capture_output=True, text=True, timeout=30,
                               env=env, check=False)  # fmt: skip
        except subprocess.TimeoutExpired:
            pytest.fail(f"`vlaunch {' '.join(argv)}` hangs on a FIFO lock file")
        assert r.returncode == 2 and "FIFO" in one_error_line(r.stderr), r.stderr
    with pytest.raises(guard.LockError, match="FIFO"):
        guard.BoxLock().acquire({"pid": os.getpid()})


@pytest.mark.parametrize("mode", [0o755, 0o777, 0o750])
def test_s1_a_lock_directory_not_0700_is_refused(lock_dir: Path, mode: int) -> None:
    lock_dir.mkdir()
    lock_dir.chmod(mode)
    with pytest.raises(guard.LockError, match=f"mode {mode:04o}, not 0700"):
        guard.BoxLock().acquire({"pid": os.getpid()})
    r = CliRunner().invoke(main, ["ps"])
    assert r.exit_code == 2 and "not 0700" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_s1_a_symlinked_lock_directory_is_refused(lock_dir: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    lock_dir.symlink_to(elsewhere)
    with pytest.raises(guard.LockError, match="symbolic link, not a directory"):
        guard.BoxLock().acquire({"pid": os.getpid()})
    assert list(elsewhere.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the directory to another uid")
def test_s1_a_lock_directory_of_another_user_is_refused_naming_the_owner(lock_dir: Path) -> None:
    lock_dir.mkdir(mode=0o700)
    os.chown(lock_dir, ATTACKER, ATTACKER)
    with pytest.raises(guard.LockError, match=f"belongs to uid {ATTACKER}"):
        guard.BoxLock().acquire({"pid": os.getpid()})
    with pytest.raises(guard.LockError, match=f"belongs to uid {ATTACKER}"):
        guard.read_holder()


def test_s1_the_lock_directory_is_created_0700_whatever_the_umask(lock_dir: Path) -> None:
    old = os.umask(0o077 ^ 0o077 | 0o100)  # a umask that would leave the owner without x
    try:
        with guard.BoxLock() as lock:
            lock.acquire({"pid": os.getpid()})
    finally:
        os.umask(old)
    st = os.lstat(lock_dir)
    assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.geteuid()
    assert stat.S_IMODE(os.lstat(lock_dir / "serve.lock").st_mode) & 0o077 == 0


@two_users
def test_s1_another_users_squat_in_tmp_cannot_truncate_the_victims_file() -> None:
    """The report's reproducer: the attacker makes /tmp/vlaunch-<victim> first, a symlink inside it to the victim's
    file; the victim (no XDG_RUNTIME_DIR) takes and releases the box lock, as `serve` does."""
    squat = Path(f"/tmp/vlaunch-{VICTIM}")
    shutil.rmtree(squat, ignore_errors=True)
    home = Path(tempfile.mkdtemp(prefix="vlaunch-victim-"))
    try:
        home.chmod(0o755)
        os.chown(home, VICTIM, VICTIM)
        precious = home / "important.txt"
        precious.write_text("precious\n")
        os.chown(precious, VICTIM, VICTIM)
        as_user = ["setpriv", "--reuid", str(ATTACKER), "--regid", str(ATTACKER), "--clear-groups"]
        subprocess.run([*as_user, "mkdir", "-m", "0755", str(squat)], check=True)
        subprocess.run([*as_user, "ln", "-s", str(precious), str(squat / "serve.lock")], check=True)
        code = (
            "import os; from launcher.run.guard import BoxLock; lock = BoxLock(); "
            "lock.acquire({'pid': os.getpid(), 'profile': 'p1'}); lock.release()"
        )
        env = {k: v for k, v in clean_env(home).items() if k != "XDG_RUNTIME_DIR"}
        as_victim = ["setpriv", "--reuid", str(VICTIM), "--regid", str(VICTIM), "--clear-groups"]
        r = subprocess.run([*as_victim, sys.executable, "-c", code], capture_output=True, text=True, env=env,
                           cwd=home, timeout=60, check=False)  # fmt: skip
        assert precious.read_text() == "precious\n"
        assert r.returncode != 0 and f"belongs to uid {ATTACKER}" in r.stderr, r.stderr
        r = subprocess.run([*as_victim, sys.executable, "-m", "launcher", "ps"], capture_output=True, text=True,
                           env=env, cwd=home, timeout=60, check=False)  # fmt: skip
        assert r.returncode == 2 and f"belongs to uid {ATTACKER}" in one_error_line(r.stderr)
    finally:
        shutil.rmtree(squat, ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)


def test_c5_a_relative_xdg_runtime_dir_is_ignored_and_ps_creates_nothing(tmp_path: Path) -> None:
    env = clean_env(tmp_path) | {"XDG_RUNTIME_DIR": "a\nb"}
    before = sorted(tmp_path.iterdir())
    r = subprocess.run([sys.executable, "-m", "launcher", "ps"], capture_output=True, text=True, env=env,
                       cwd=tmp_path, timeout=60, check=False)  # fmt: skip
    assert sorted(tmp_path.iterdir()) == before, r.stdout + r.stderr
    env["XDG_RUNTIME_DIR"] = str(tmp_path / "run")
    for argv in (["ps"], ["stop", "--timeout", "1"]):
        subprocess.run([sys.executable, "-m", "launcher", *argv], capture_output=True, env=env, timeout=60,
                       check=False)  # fmt: skip
        assert not (tmp_path / "run" / "vlaunch").exists()  # reading the lock creates no directory


def test_c5_lock_dir_rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", "relative/run")
    assert guard.lock_dir() == Path(f"/tmp/vlaunch-{os.getuid()}")
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(mine))
    assert guard.lock_dir() == mine / "vlaunch"
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "not-yet"))  # made by the first serve
    assert guard.lock_dir() == tmp_path / "not-yet" / "vlaunch"
    (tmp_path / "link").symlink_to(mine)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "link"))  # a link is not the user's directory
    assert guard.lock_dir() == Path(f"/tmp/vlaunch-{os.getuid()}")


# --- S2: the lock's content is input -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [
        '{"pid": "abc", "since": "x", "vllm_pid": "y"}',
        '{"pid": 1e400}',
        '{"pid": 123, "since": 1e300}',
        '{"pid": -1, "profile": "p1", "since": 0}',
        '{"pid": 0}',
        '{"pid": true, "vllm_pid": 99999999999}',
        '{"pid": 5, "since": NaN, "port": "80"}',
        "[1, 2]",
        "[" * 100000,
        "not json",
    ],
    ids=["strings", "inf", "far-future", "minus-one", "zero", "bool-huge", "nan", "list", "deep", "not-json"],
)
def test_s2_a_malformed_holder_is_one_line_never_exit_70(
    lock_dir: Path, holders: list[subprocess.Popen[str]], content: str
) -> None:
    hold(holders, lock_dir / "serve.lock", content)
    holder = guard.read_holder()
    assert holder is not None
    assert "holds this box" in guard.refusal(holder)
    assert "holds this box" in guard.verdict()
    r = CliRunner().invoke(main, ["ps"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["ps", "--json"])
    assert r.exit_code == 0 and isinstance(json.loads(r.stdout)["lock"], dict)
    r = CliRunner().invoke(main, ["stop", "--timeout", "1"])
    assert r.exit_code in (2, 4) and "nothing signalled" in r.stderr and len(r.stderr.splitlines()) == 1, r.output


def test_s2_holder_fields_are_bounded() -> None:
    h = guard.holder_fields({"pid": 2**40, "vllm_pid": 1, "since": 1e300, "port": 0, "profile": "a\x1b]0;x\x07",
                             "log": "l" * 5000, "argv": ["vllm", 3], "pidns": -1})  # fmt: skip
    assert all(h[k] is None for k in ("pid", "vllm_pid", "since", "port", "profile", "log", "argv", "pidns"))
    now = time.time()
    h = guard.holder_fields({"pid": 1234, "since": now, "port": 8000, "profile": "p1", "argv": ["vllm", "serve"]})
    assert (h["pid"], h["since"], h["port"], h["profile"], h["argv"]) == (1234, now, 8000, "p1", ["vllm", "serve"])
    assert guard.holder_fields("x")["pid"] is None


def test_s2_stop_never_signals_a_pid_the_lock_does_not_prove(
    lock_dir: Path, holders: list[subprocess.Popen[str]]
) -> None:
    """A lock naming a live process of ours without its start time (or with another one): nothing is signalled."""
    bystander = subprocess.Popen(["sleep", "300"])
    try:
        for extra in ({}, {"pid_started": 1, "pidns": sup.pid_namespace()}):
            hold(holders, lock_dir / "serve.lock", json.dumps({"pid": bystander.pid, "profile": "p1", **extra}))
            r = CliRunner().invoke(main, ["stop", "--timeout", "1"])
            assert r.exit_code == 4 and "nothing signalled" in r.stderr, r.output
            r = CliRunner().invoke(main, ["stop", "p1", "--timeout", "1"])
            assert r.exit_code == 4 and "nothing signalled" in r.stderr, r.output
            time.sleep(0.3)
            assert bystander.poll() is None
            done = holders.pop()
            done.kill()
            done.wait()
            assert done.stdout is not None
            done.stdout.close()
    finally:
        bystander.kill()
        bystander.wait()


@pidns
def test_s2_pid_minus_one_in_the_lock_signals_nobody(tmp_path: Path) -> None:
    """The report's reproducer, in a private pid namespace: `{"pid": -1}` made `stop` SIGTERM every process."""
    r = in_pidns(
        f"""
        sleep 300 & VICTIM=$!
        mkdir -m 0700 -p $XDG_RUNTIME_DIR/vlaunch
        "$PY" -c '{HOLD}' $XDG_RUNTIME_DIR/vlaunch/serve.lock '{{"pid": -1, "profile": "p1", "since": 0}}' > held &
        while [ ! -s held ]; do sleep 0.1; done
        timeout 60 "$PY" -m launcher stop --timeout 1; echo "rc=$?"
        sleep 0.5
        kill -0 $VICTIM && echo victim-alive
        """,
        tmp_path,
    )
    assert "victim-alive" in r.stdout and "rc=70" not in r.stdout, r.stdout + r.stderr
    assert "rc=4" in r.stdout or "rc=2" in r.stdout, r.stdout + r.stderr


def test_s2_a_proven_holder_is_stopped(lock_dir: Path) -> None:
    """The other half: the process that took the lock (its pid, start time and namespace in the lock) is stopped."""
    code = (
        "import os, time; from launcher.run.guard import BoxLock; l = BoxLock(); "
        "l.acquire({'pid': os.getpid(), 'profile': 'p1', 'since': time.time()}); print('held', flush=True); "
        "time.sleep(300)"
    )
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "held"
        holder = guard.read_holder()
        assert holder is not None and guard.holder_here(holder) == (p.pid, sup.start_time(p.pid))
        r = CliRunner().invoke(main, ["stop", "p1", "--timeout", "1"])
        assert r.exit_code == 0 and "stopped p1" in r.stdout, r.output
        assert p.wait(10) == -signal.SIGTERM
    finally:
        p.kill()
        p.wait()
        if p.stdout:
            p.stdout.close()


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
        "$PY" -c 'from launcher.run import guard; print(guard.verdict())'
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
        "$PY" -c 'from launcher.run import guard; print(guard.verdict())'
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
    """A serve in namespace B (its marker and its lock name B's pids); `stop --orphans` and `stop` in the parent
    namespace A stop neither its vLLM nor A's process with the lock's pid number."""
    inner = (
        "import os, subprocess, time; from launcher.run import supervise as sup; "
        "from launcher.run.guard import BoxLock; "
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
        "$PY" -m launcher stop --timeout 1; echo "stop-rc=$?"
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
    assert "stop-rc=4" in out and "another pid namespace" in out, out
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
    # leads its own group; it ignores SIGTERM, so it still runs (and proves its group) when the group is signalled
    q = subprocess.Popen(["sh", "-c", "trap '' TERM; exec sleep 300"], start_new_session=True)
    deadline = time.monotonic() + 10
    while os.getpgid(q.pid) != q.pid and time.monotonic() < deadline:  # the child calls setsid() after the fork
        time.sleep(0.01)
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
    p = subprocess.Popen(["bash", "-c", 'exec -a "vllm serve x" sleep 300'])  # a pid `vlaunch ps` lists
    try:
        time.sleep(0.3)
        r = CliRunner().invoke(main, ["stop", str(p.pid), "--timeout", "1"])
        assert r.exit_code == 4 and f"still alive after the stop: pid {p.pid}" in r.stderr, r.output
    finally:
        p.kill()
        p.wait()


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

    from launcher.plan.profiles import profile_from_mapping

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


def test_c3_json_output_holds_no_lone_surrogate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A process title or a profile file name with a byte that is not UTF-8 reaches Python as a lone surrogate;
    `--json` writes it as the text `\\xff`, not as `\\udcff`, which strict JSON parsers refuse."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    (tmp_path / "profiles").mkdir()
    bundled = Path(__file__).parent.parent / "profiles" / "tiny-cpu.yaml"
    (tmp_path / "profiles" / "bad\udcff.yaml").write_bytes(bundled.read_bytes())
    title = guard.Instance(4242, "server", "vllm serve m\udcff \U0001f600", 0, 0.0)
    monkeypatch.setattr(guard, "scan", lambda exclude=None: [title])
    for args in (["profiles", "--json"], ["ps", "--json"]):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 0, (args, r.output[-500:])
        assert "\\udc" not in r.output and "\\\\xff" in r.output, (args, r.output[-800:])
        json.loads(r.output)
        r.output.encode("utf-8")  # strict: no lone surrogate
    assert "\\ud83d\\ude00" in CliRunner().invoke(main, ["ps", "--json"]).output  # a real pair stays one character
