"""A vLLM that vlaunch started never outlives it: a small supervisor process stops what the wrapper left.

`vlaunch serve` starts this module before vLLM, in a session of its own (a ^C at the terminal, or the wrapper's
process group dying, does not reach it), holding the read end of a pipe whose write end only the wrapper has. It
runs in an isolated interpreter (`python -I`) that loads the wrapper's own `launcher` package by its path, never
one from the current directory, and writes `ready` on a second pipe (`--ready-fd`) once it waits: the wrapper
starts vLLM only after that word. Every process of the launch carries the run's marker in
its environment (`VLAUNCH_RUN_ID`, and `VLAUNCH_PID`: the wrapper's pid), children included: vLLM's engine core
and workers inherit it, whatever process group they move to.

- The wrapper ends normally (its own clean-up stopped vLLM): it writes `done` and closes the pipe; the supervisor
  exits.
- The wrapper dies any other way (SIGKILL, the OOM killer, a crash): the kernel closes its end, the supervisor
  reads EOF without `done` and stops every process carrying the marker: SIGTERM to each and to its process group,
  a grace period, then SIGKILL; a container launch also gets `docker kill NAME` (the daemon, not our child, runs
  the container). It notes in the run record that the wrapper was gone.

`find_orphans()` is the other half: a vLLM process with a marker whose wrapper no longer runs (a supervisor that
was itself killed), which `vlaunch ps` shows and `vlaunch stop --orphans` stops.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from launcher.files import write_atomic

MARKER_RUN = "VLAUNCH_RUN_ID"
"""The run's id (the run log's stem) in the environment of every process of a launch."""
MARKER_PID = "VLAUNCH_PID"
"""The pid of the `vlaunch serve` that started the launch."""
DONE = b"done"
READY = b"ready"
"""What the supervisor writes on its ready pipe once it runs."""
GRACE_SECONDS = 6.0
"""SIGTERM first: vLLM stops its engine and workers on it; what still runs after this is killed."""


def start_time(pid: int) -> int | None:
    """The kernel's start time of `pid` (clock ticks since boot, /proc/PID/stat field 22): with the pid, it names
    one process for good, where a pid alone may be reused."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[-1].split()
    except OSError:
        return None
    try:
        return None if fields[0] == b"Z" else int(fields[19])  # a zombie no longer runs
    except (IndexError, ValueError):
        return None


def wrapper_marker(pid: int | None = None) -> str:
    """VLAUNCH_PID's value for the process `pid` (this one by default): `pid:start time`."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}:{start_time(pid) or 0}"


def marked(run_id: str | None = None) -> Iterator[tuple[int, str, str | None]]:
    """(pid, run id, wrapper marker) of every process whose environment carries a vlaunch marker (of `run_id`)."""
    me = os.getpid()
    run_key, pid_key = MARKER_RUN.encode() + b"=", MARKER_PID.encode() + b"="
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as fh:
                env = fh.read(1 << 20)
        except OSError:
            continue  # gone, or another user's
        run = wrapper = None
        for item in env.split(b"\0"):
            if item.startswith(run_key):
                run = item[len(run_key) :].decode(errors="replace")
            elif item.startswith(pid_key):
                wrapper = item[len(pid_key) :].decode(errors="replace")
        if run is None or (run_id is not None and run != run_id) or start_time(int(entry.name)) is None:
            continue
        yield int(entry.name), run, wrapper


def wrapper_alive(marker: str | None) -> bool:
    """The `vlaunch serve` a marker names still runs (the same process: pid and start time)."""
    pid, _, started = (marker or "").partition(":")
    if not pid.isdigit() or not started.isdigit():
        return False
    return start_time(int(pid)) == int(started)


def _alive(pid: int) -> bool:
    return start_time(pid) is not None


def find_orphans() -> dict[int, tuple[str, str | None]]:
    """pid → (run id, wrapper marker) for marked processes whose wrapper has gone, and their descendants (a
    process that renamed itself, as vLLM's engine core does with setproctitle, no longer shows its environment)."""
    found = {pid: (run, w) for pid, run, w in marked() if not wrapper_alive(w)}
    return {pid: found.get(root, ("", None)) for pid, root in _with_descendants(set(found)).items()}


def _with_descendants(roots: set[int]) -> dict[int, int]:
    """pid → the root it descends from, for `roots` and every process below them."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                ppid = int(fh.read().rsplit(b")", 1)[-1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    out: dict[int, int] = {}
    for root in roots:
        todo = [root]
        while todo:
            pid = todo.pop()
            if pid in out:
                continue
            out[pid] = root
            todo += children.get(pid, [])
    return out


def run_pids(run_id: str) -> list[int]:
    """Every process of a run: those carrying its marker and their descendants."""
    return sorted(_with_descendants({pid for pid, _, _ in marked(run_id)}))


def stop_pids(pids: list[int], *, grace: float = GRACE_SECONDS, rescan: str | None = None) -> list[int]:
    """SIGTERM each pid and its process group, wait up to `grace`, SIGKILL what is left; with `rescan` (a run
    id), processes of that run started meanwhile are included. Returns the pids still alive (none)."""

    def signal_all(sig: int, targets: set[int]) -> None:
        groups = set()
        for pid in targets:
            with contextlib.suppress(OSError):
                groups.add(os.getpgid(pid))
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        for g in groups - {os.getpgid(0)}:
            with contextlib.suppress(OSError):
                os.killpg(g, sig)

    targets = set(pids)
    signal_all(signal.SIGTERM, targets)
    end = time.monotonic() + grace
    while time.monotonic() < end:
        if rescan is not None:
            targets |= set(run_pids(rescan))
        targets = {p for p in targets if _alive(p)}
        if not targets:
            return []
        time.sleep(0.2)
    signal_all(signal.SIGKILL, targets)
    end = time.monotonic() + 5
    while time.monotonic() < end:
        if rescan is not None:
            fresh = set(run_pids(rescan)) - targets
            if fresh:
                signal_all(signal.SIGKILL, fresh)
                targets |= fresh
        targets = {p for p in targets if _alive(p)}
        if not targets:
            return []
        time.sleep(0.1)
    return sorted(targets)


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
    pids = run_pids(run_id)
    if container:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run([runtime, "kill", container], capture_output=True, timeout=30, check=False)
    if not pids and not container:
        return 0
    left = stop_pids(pids, grace=grace, rescan=run_id)
    _note_in_record(record, pids, left)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="launcher.supervise", description=__doc__.split("\n")[0])
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
