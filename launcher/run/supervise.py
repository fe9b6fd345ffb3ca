"""A vLLM that vlaunch started never outlives it: a small supervisor process stops what the wrapper left.

`vlaunch serve` starts this module before vLLM, in a session of its own (a ^C at the terminal, or the wrapper's
process group dying, does not reach it), holding the read end of a pipe whose write end only the wrapper has. It
runs in an isolated interpreter (`python -I`) that loads the wrapper's own `launcher` package by its path, never
one from the current directory, and writes `ready` on a second pipe (`--ready-fd`) once it waits: the wrapper
starts vLLM only after that word. Every process of the launch carries the run's marker in its environment
(`VLAUNCH_RUN_ID`; `VLAUNCH_PID`: the wrapper's pid, start time and pid namespace; a container launch's client also
`VLAUNCH_CONTAINER`: the runtime and the container's name), children included: vLLM's engine core and workers
inherit it, whatever process group they move to.

- The wrapper ends normally (its own clean-up stopped vLLM): it writes `done` and closes the pipe; the supervisor
  exits.
- The wrapper dies any other way (SIGKILL, the OOM killer, a crash): the kernel closes its end, the supervisor
  reads EOF without `done` and stops every process carrying the marker: SIGTERM to each and to the process group
  it leads, a grace period, then SIGKILL; a container launch also gets `docker kill NAME` (the daemon, not our
  child, runs the container). It notes in the run record that the wrapper was gone.

`find_orphans()` is the other half: a vLLM process with a marker whose wrapper no longer runs (a supervisor that
was itself killed), which `vlaunch ps` shows and `vlaunch stop --orphans` stops.

Nothing is signalled that is not proven ours: a pid above 1, of this user, named by a marker written in this pid
namespace (a pid from another namespace names another process here) or descending from such a process, and still
the process that started at the recorded time (the signal goes through a pidfd opened before the check). A process
group is signalled only when a proven process leads it, and never the group of this process or of its ancestors.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import NamedTuple

from launcher.common.files import write_atomic

MARKER_RUN = "VLAUNCH_RUN_ID"
"""The run's id (the run log's stem) in the environment of every process of a launch."""
MARKER_PID = "VLAUNCH_PID"
"""The `vlaunch serve` that started the launch: `pid:start time:pid namespace` (`wrapper_marker`)."""
MARKER_CONTAINER = "VLAUNCH_CONTAINER"
"""A container launch's `runtime:name` (`docker:vlaunch-x`): what `vlaunch stop --orphans` kills for an orphan."""
MARKERS = (MARKER_RUN, MARKER_PID, MARKER_CONTAINER)
SCOPE = "VLAUNCH_TEST_SCOPE"
"""For tests only: a test session's `pid:start time:pid namespace` (`wrapper_marker`). In the environment of a
process below that session, it narrows what the process counts as this box's processes (the guard's scan, `ps`,
orphans, a run's processes) to those carrying the same value in their environment and their descendants: a test's
private process table. It narrows nothing unless it names the reading process or a live ancestor of it (`scope`):
copied into a shell, set in a profile's env (vLLM's, not vlaunch's), left over after the session, or mistyped, it is
ignored and the guard counts every process on the box."""
DONE = b"done"
READY = b"ready"
"""What the supervisor writes on its ready pipe once it runs."""
GRACE_SECONDS = 6.0
"""SIGTERM first: vLLM stops its engine and workers on it; what still runs after this is killed."""
PID_MAX_FALLBACK = 2**22
"""The kernel's largest pid_max; the bound when /proc/sys/kernel/pid_max cannot be read."""
RUNTIMES = ("docker", "podman")
_CONTAINER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,254}")  # Docker's rule for --name


def pid_max() -> int:
    """The largest pid this kernel hands out."""
    try:
        with open("/proc/sys/kernel/pid_max", "rb") as fh:
            value = int(fh.read(32))
    except (OSError, ValueError):
        return PID_MAX_FALLBACK
    return value if 1 < value <= PID_MAX_FALLBACK else PID_MAX_FALLBACK


def plausible_pid(value: object) -> int | None:
    """`value` as a pid vlaunch may act on: an int (not a bool) above 1 and at most pid_max; else None (0 and -1
    would name a process group or every process, 1 is init)."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 1 < value <= pid_max() else None


def pid_namespace() -> int:
    """This process's pid namespace (the inode of /proc/self/ns/pid; 0 when it cannot be read): a pid means one
    process only within it."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def own_proc() -> bool:
    """/proc shows this process's pid namespace (a /proc mounted for another one lists other pids than kill takes)."""
    try:
        return os.readlink("/proc/self") == str(os.getpid())
    except OSError:
        return False


def _stat(pid: int) -> tuple[bytes, int, int] | None:
    """(state, parent pid, start time) of `pid` from one read of /proc/PID/stat."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[-1].split()
        return fields[0], int(fields[1]), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def start_time(pid: int) -> int | None:
    """The kernel's start time of `pid` (clock ticks since boot, /proc/PID/stat field 22): with the pid, it names
    one process for good, where a pid alone may be reused."""
    st = _stat(pid)
    return None if st is None or st[0] == b"Z" else st[2]  # a zombie no longer runs


def wrapper_marker(pid: int | None = None) -> str:
    """VLAUNCH_PID's value for the process `pid` (this one by default): `pid:start time:pid namespace`."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}:{start_time(pid) or 0}:{pid_namespace()}"


def _parse_marker(marker: str | None) -> tuple[int, int, int] | None:
    """(pid, start time, pid namespace) of a VLAUNCH_PID value; None when it is not one."""
    parts = (marker or "").split(":")
    if len(parts) != 3 or not all(p.isascii() and p.isdigit() and len(p) <= 20 for p in parts):
        return None
    return int(parts[0]), int(parts[1]), int(parts[2])


def container_marker(runtime: str, name: str) -> str:
    """VLAUNCH_CONTAINER's value: `runtime:name`."""
    return f"{runtime}:{name}"


def parse_container(marker: str | None) -> tuple[str, str] | None:
    """(runtime, name) of a VLAUNCH_CONTAINER value; None unless the runtime is docker or podman and the name one
    Docker accepts (nothing that reads as an option)."""
    runtime, _, name = (marker or "").partition(":")
    return (runtime, name) if runtime in RUNTIMES and _CONTAINER_NAME.fullmatch(name) else None


class Marked(NamedTuple):
    """A process whose environment carries a vlaunch marker."""

    pid: int
    started: int
    run: str
    wrapper: str | None
    container: str | None


def _environs() -> Iterator[tuple[int, int, dict[bytes, str]]]:
    """(pid, start time, its VLAUNCH_* variables) of every other process of this user whose environment can be
    read (a process that renamed itself with setproctitle shows none)."""
    me, uid = os.getpid(), os.geteuid()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        pid = int(entry.name)
        started = start_time(pid)
        try:
            if started is None or entry.stat().st_uid != uid:
                continue
            with open(f"/proc/{pid}/environ", "rb") as fh:
                env = fh.read(1 << 20)
        except OSError:
            continue  # gone
        if start_time(pid) != started:
            continue  # the pid was reused while we read it
        ours: dict[bytes, str] = {}
        for item in env.split(b"\0"):
            if item.startswith(b"VLAUNCH_"):
                key, _, value = item.partition(b"=")
                ours[key] = value.decode(errors="replace")
        yield pid, started, ours


def marked(run_id: str | None = None) -> Iterator[Marked]:
    """Every process of this user whose environment carries a vlaunch marker written in this pid namespace (of
    `run_id`): a marker written in another one names its wrapper by a pid that means another process here. Within
    a test scope (`scope`), only the scope's processes."""
    ns, within = pid_namespace(), scope()
    run_key, pid_key, box_key = (k.encode() for k in MARKERS)
    for pid, started, env in _environs():
        run, wrapper, container = env.get(run_key), env.get(pid_key), env.get(box_key)
        where = _parse_marker(wrapper)
        if run is None or (run_id is not None and run != run_id) or where is None or where[2] != ns:
            continue
        if within is not None and env.get(SCOPE.encode()) != within:
            continue
        yield Marked(pid, started, run, wrapper, container)


def scope() -> str | None:
    """This process's test scope: SCOPE's value when it names this process or a live ancestor of it (its pid, start
    time and this pid namespace), else None: the whole box."""
    value = os.environ.get(SCOPE)
    where = _parse_marker(value)
    if where is None or where[2] != pid_namespace() or plausible_pid(where[0]) is None:
        return None
    return value if where[0] in lineage() and start_time(where[0]) == where[1] else None


def scope_procs(within: str) -> dict[int, int]:
    """pid → start time of a test scope's processes: those whose environment carries SCOPE=`within`, and their
    descendants (vLLM's engine core renames itself, and no longer shows its environment)."""
    roots = {pid: started for pid, started, env in _environs() if env.get(SCOPE.encode()) == within}
    return {pid: started for pid, (_, started) in with_descendants(roots).items()}


def wrapper_alive(marker: str | None) -> bool:
    """The `vlaunch serve` a marker names still runs (the same process: pid and start time, in this namespace)."""
    where = _parse_marker(marker)
    if where is None or where[2] != pid_namespace():
        return False
    return plausible_pid(where[0]) is not None and start_time(where[0]) == where[1]


def _alive(pid: int, started: int) -> bool:
    return start_time(pid) == started


class Orphan(NamedTuple):
    """A process a gone `vlaunch serve` left: its run, its start time, and its launch's container (if any)."""

    run: str
    started: int
    container: str | None


def find_orphans() -> dict[int, Orphan]:
    """pid → Orphan for marked processes whose wrapper has gone, and their descendants (a process that renamed
    itself, as vLLM's engine core does with setproctitle, no longer shows its environment)."""
    found = {m.pid: m for m in marked() if not wrapper_alive(m.wrapper)}
    out = {}
    for pid, (root, started) in with_descendants({p: m.started for p, m in found.items()}).items():
        out[pid] = Orphan(found[root].run, started, found[root].container)
    return out


def with_descendants(roots: Mapping[int, int]) -> dict[int, tuple[int, int]]:
    """pid → (the root it descends from, its start time), for `roots` (pid → start time) still running and every
    process below them: a child started no earlier than its parent, so a reused parent pid adopts nobody."""
    table: dict[int, tuple[int, int]] = {}  # pid → (parent, start time) of every running process
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        st = _stat(int(entry.name))
        if st is None or st[0] == b"Z":
            continue
        table[int(entry.name)] = (st[1], st[2])
        children.setdefault(st[1], []).append(int(entry.name))
    out: dict[int, tuple[int, int]] = {}
    for root, started in roots.items():
        if table.get(root, (0, None))[1] != started:
            continue
        todo = [root]
        while todo:
            pid = todo.pop()
            if pid in out:
                continue
            out[pid] = (root, table[pid][1])
            todo += [c for c in children.get(pid, []) if table[c][1] >= table[pid][1]]
    return out


def run_procs(run_id: str) -> dict[int, int]:
    """pid → start time of every process of a run: those carrying its marker and their descendants."""
    roots = {m.pid: m.started for m in marked(run_id)}
    return {pid: started for pid, (_, started) in with_descendants(roots).items()}


def run_pids(run_id: str) -> list[int]:
    """Every process of a run: those carrying its marker and their descendants."""
    return sorted(run_procs(run_id))


def lineage() -> set[int]:
    """This process and its ancestors: never a target, nor any process group they are in."""
    out, pid = set(), os.getpid()
    while pid > 0 and pid not in out:
        out.add(pid)
        st = _stat(pid)
        pid = st[1] if st is not None else 0
    return out


def send(pid: int, started: int, sig: int) -> bool:
    """Signal `pid` if it is still the process that started at `started`: True when sent, False when it is gone.
    The pidfd is opened before the start time is compared, so a pid reused in between is not signalled. Raises
    PermissionError (another user's process)."""
    if plausible_pid(pid) is None or pid == os.getpid():
        return False
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    except OSError:  # no pidfds (Linux < 5.3): compare, then kill
        if start_time(pid) != started:
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
            return True
        return False
    try:
        if start_time(pid) != started:
            return False
        signal.pidfd_send_signal(fd, sig)
        return True
    except ProcessLookupError:
        return False
    finally:
        os.close(fd)


def _group_of(pid: int) -> int:
    try:
        return os.getpgid(pid)  # 0 when the group's leader is outside this pid namespace
    except OSError:
        return 0


class Stopped(NamedTuple):
    """What a stop left: pids still alive, and those among them this user may not signal."""

    alive: list[int]
    denied: list[int]


class _Signaller:
    """Signals proven processes (pid → start time) and the process groups they lead, each group once per signal."""

    def __init__(self) -> None:
        mine = lineage()
        self.shielded = mine
        self.shielded_groups = {_group_of(p) for p in mine} | {0, 1}
        self.groups: dict[int, int] = {}  # group id → the start time of the proven process that leads it
        self.sent: set[tuple[int, int]] = set()  # (group, signal) already sent
        self.denied: set[int] = set()

    def __call__(self, sig: int, targets: Mapping[int, int]) -> None:
        for pid, started in targets.items():
            if pid in self.shielded:
                continue
            if _group_of(pid) == pid and pid not in self.shielded_groups and _alive(pid, started):
                self.groups.setdefault(pid, started)
            try:
                send(pid, started, sig)
            except PermissionError:
                self.denied.add(pid)
        for group, started in self.groups.items():
            if (group, sig) in self.sent:
                continue
            # the group is still the proven one while its leader runs, or while a proven process is in it (a
            # group's id is not handed out again while the group has members)
            if _alive(group, started) or any(
                _group_of(p) == group and _alive(p, s) for p, s in targets.items() if p != group
            ):
                self.sent.add((group, sig))
                with contextlib.suppress(OSError):
                    os.killpg(group, sig)


def stop_procs(procs: Mapping[int, int], *, grace: float = GRACE_SECONDS, rescan: str | None = None) -> Stopped:
    """SIGTERM each proven process (pid → start time) and the process group it leads, wait up to `grace`, SIGKILL
    what is left; with `rescan` (a run id), processes of that run started meanwhile are included."""
    signal_all = _Signaller()
    targets = {p: s for p, s in procs.items() if plausible_pid(p) is not None and p not in signal_all.shielded}
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        signal_all(sig, targets)
        end = time.monotonic() + wait
        while True:
            if rescan is not None:
                fresh = {p: s for p, s in run_procs(rescan).items() if p not in targets}
                fresh = {p: s for p, s in fresh.items() if p not in signal_all.shielded}
                signal_all(sig, fresh)
                targets |= fresh
            targets = {p: s for p, s in targets.items() if _alive(p, s)}
            if not targets:
                return Stopped([], [])
            if time.monotonic() >= end:
                break
            time.sleep(0.2 if sig == signal.SIGTERM else 0.1)
    return Stopped(sorted(targets), sorted(signal_all.denied & set(targets)))


def stop_pids(
    pids: Mapping[int, int] | Iterable[int], *, grace: float = GRACE_SECONDS, rescan: str | None = None
) -> list[int]:
    """`stop_procs` for proven processes (pid → start time) or for pids the caller vouches for now (their start
    times are read here); returns the pids still alive (none)."""
    if not isinstance(pids, Mapping):
        pids = {p: s for p in pids if (s := start_time(p)) is not None}
    return stop_procs(pids, grace=grace, rescan=rescan).alive


def _note_in_record(record: str | None, stopped: list[int], left: list[int]) -> None:
    if not record:
        return
    path = Path(record)
    data: dict[str, object] = {}
    with contextlib.suppress(OSError, ValueError):
        loaded = json.loads(path.read_text())
        if isinstance(loaded, dict):
            data = loaded
    data.update(
        stopped_by="supervisor: vlaunch serve was gone (killed) and vLLM still ran",
        supervisor_stopped_pids=stopped,
        leftover_pids=left,
    )
    data.setdefault("exit", None)
    with contextlib.suppress(OSError):
        write_atomic(path, json.dumps(data, indent=2), mode=0o600)  # a run record is its owner's only


def supervise(
    fd: int, run_id: str, *, container: str | None, record: str | None, grace: float, runtime: str = "docker"
) -> int:
    """Wait for the wrapper's end; clean up after it unless it said `done`."""
    got = b""
    while True:
        try:
            chunk = os.read(fd, 64)
        except InterruptedError:
            continue
        except OSError:
            break
        if not chunk:
            break
        got += chunk
    if got.endswith(DONE):
        return 0
    pids = run_procs(run_id)
    if container:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run([runtime, "kill", container], capture_output=True, timeout=30, check=False)
    if not pids and not container:
        return 0
    left = stop_pids(pids, grace=grace, rescan=run_id)
    _note_in_record(record, sorted(pids), left)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="launcher.run.supervise", description=__doc__.split("\n")[0])
    ap.add_argument("--fd", type=int, required=True, help="read end of the wrapper's pipe")
    ap.add_argument("--run-id", required=True)
    ap.add_argument("--container", help="container name to kill (container launches)")
    ap.add_argument("--runtime", default="docker", choices=("docker", "podman"), help="the container's runtime")
    ap.add_argument("--record", help="the run record to note a clean-up in")
    ap.add_argument("--grace", type=float, default=GRACE_SECONDS)
    ap.add_argument("--ready-fd", type=int, help="write end of a pipe to say `ready` on, then close")
    ns = ap.parse_args(argv)
    for s in (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(s, signal.SIG_IGN)  # the terminal's ^C and hang-up are the wrapper's to handle
    if ns.ready_fd is not None:
        with contextlib.suppress(OSError):
            os.write(ns.ready_fd, READY)
        with contextlib.suppress(OSError):
            os.close(ns.ready_fd)
    return supervise(ns.fd, ns.run_id, container=ns.container, record=ns.record, grace=ns.grace, runtime=ns.runtime)


if __name__ == "__main__":
    sys.exit(main())
