"""One vLLM per box unless the user budgets for more: an flock-held lock, and a scan for vLLM processes.

The lock lives in $XDG_RUNTIME_DIR/vlaunch (or /tmp/vlaunch-<uid>) and is held by `vlaunch serve` for the
server's whole life; the kernel drops it if the holder dies, so a crash never leaves the box locked. The scan
finds vLLM servers and engine processes started by anyone, so a server vlaunch did not start is seen too.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil

from launcher import supervise as sup
from launcher.chars import escaped
from launcher.errors import VlaunchError
from launcher.records import dataclass


class GuardError(VlaunchError):
    """Another vLLM holds the box (or what was to be stopped still runs)."""

    exit_code = 4


def lock_dir() -> Path:
    run = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(run) / "vlaunch" if run else Path(f"/tmp/vlaunch-{os.getuid()}")
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    return base


def lock_path() -> Path:
    return lock_dir() / "serve.lock"


class BoxLock:
    """An exclusive, non-blocking flock on the box's lock file; the file carries who holds it."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or lock_path()
        self._fd: int | None = None

    def acquire(self, info: dict[str, Any]) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            holder = read_holder(self.path)
            raise GuardError(refusal(holder), source=str(self.path)) from None
        self._fd = fd
        self.update(info)

    def update(self, info: dict[str, Any]) -> None:
        if self._fd is None:
            return
        data = json.dumps(info).encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)
        os.fsync(self._fd)

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> BoxLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def read_holder(path: Path | None = None) -> dict[str, Any] | None:
    """Who holds the lock (None when nobody does)."""
    path = path or lock_path()
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 1 << 16, 0).decode(errors="replace")
            try:
                data = json.loads(text)
            except json.JSONDecodeError:
                data = {}
            return data if isinstance(data, dict) else {}
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def refusal(holder: dict[str, Any] | None) -> str:
    if not holder:
        return "another vlaunch serve holds this box (starting up); wait or stop it with `vlaunch stop`"
    since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(holder.get("since", 0)))
    mem = ""
    if holder.get("vllm_pid"):
        rss = _tree_rss(int(holder["vllm_pid"]))
        if rss:
            mem = f", {rss / 2**30:.2f} GiB resident"
    profile, pid = escaped(holder.get("profile")), escaped(holder.get("pid"))
    return (
        f"a vLLM server already holds this box: profile '{profile}', vlaunch pid {pid}, "
        f"vLLM pid {escaped(holder.get('vllm_pid'))}, since {since}{mem}, log {escaped(holder.get('log'))}; "
        f"stop it with `vlaunch stop {profile}` (or `vlaunch stop {pid}`)"
    )


# --- process scan -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Instance:
    pid: int
    role: str  # server | engine | worker | vlaunch
    cmdline: str
    rss_bytes: int
    started: float
    gpu_bytes: int | None = None
    orphan_of: str | None = None
    """For a process a `vlaunch serve` started and that outlived it: that run's id (its log's name)."""

    @property
    def orphan(self) -> bool:
        return self.orphan_of is not None

    @property
    def command(self) -> str:
        """The command line with its padding folded (vLLM pads its renamed processes' titles with spaces)."""
        return " ".join(self.cmdline.split())

    def shown(self, width: int = 80) -> str:
        """`pid N (role, X GiB): command line`."""
        left = f", left behind by run {escaped(self.orphan_of)}" if self.orphan_of else ""
        shown = f"pid {self.pid} ({self.role}, {self.rss_bytes / 2**30:.2f} GiB{left})"
        return f"{shown}: {escaped(self.command)[:width]}"

    def to_json(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "role": self.role,
            "cmdline": self.cmdline,
            "rss_bytes": self.rss_bytes,
            "started": self.started,
            "gpu_bytes": self.gpu_bytes,
            "orphan": self.orphan,
            "orphan_of": self.orphan_of,
        }


_PYTHON = re.compile(r"(python|pypy)[0-9.]*")
_PYTHON_ARG_OPTIONS = frozenset("WXQ")  # python's options that take a value (-W ignore, -X dev)


def _program(words: list[str]) -> tuple[str, list[str]]:
    """What a command line runs and its arguments: `-m MODULE` or a script's base name for a python interpreter
    (past its own options), else the executable's base name."""
    name = os.path.basename(words[0])
    if not _PYTHON.fullmatch(name):
        return name, words[1:]
    i = 1
    while i < len(words) and words[i].startswith("-") and words[i] not in ("-", "--"):
        opt = words[i]
        if opt.startswith("-m"):
            module = opt[2:] or (words[i + 1] if i + 1 < len(words) else "")
            return f"-m {module}", words[i + (1 if opt[2:] else 2) :]
        if opt.startswith("-c"):
            return "-c", []
        i += 2 if opt[1:] in _PYTHON_ARG_OPTIONS else 1
    i += 1 if i < len(words) and words[i] == "--" else 0
    return (os.path.basename(words[i]), words[i + 1 :]) if i < len(words) else (name, [])


def _role_of(words: list[str]) -> str | None:
    if not words or not words[0]:
        return None
    if words[0][:6].lower() == "vllm::":  # the titles vLLM gives its processes (VLLM::EngineCore, VLLM::Worker_TP0)
        kind = words[0][6:].lower()
        return "engine" if kind.startswith("enginecore") else "server" if kind.startswith("apiserver") else "worker"
    program, args = _program(words)
    first = next((a for a in args if not a.startswith("-")), None)
    if program in ("vlaunch", "-m launcher", "-m launcher.cli") and first == "serve":
        return "vlaunch"
    if program.startswith("-m vllm.entrypoints") or (program == "vllm" and args[:1] == ["serve"]):
        return "server"
    return None


def _role(cmd: list[str]) -> str | None:
    """server | engine | worker | vlaunch (a `vlaunch serve`) by the program a command line runs, never by what its
    arguments mention: `vllm serve …`, `python -m vllm.entrypoints…`, vLLM's process titles (`VLLM::EngineCore`)."""
    readings = [cmd]
    if cmd and " " in cmd[0].strip():  # a process title (setproctitle, exec -a) holds a whole command line
        readings.append(cmd[0].split() + cmd[1:])
    for words in readings:
        role = _role_of([w for w in words if w])  # psutil splits a padded title into empty words too
        if role is not None:
            return role
    return None


def scan(exclude: set[int] | None = None) -> list[Instance]:
    """vLLM processes running on this box, whoever started them."""
    me = {os.getpid()} | (exclude or set())
    gpu = gpu_memory_by_pid()
    orphans = sup.find_orphans()
    out = []
    for p in psutil.process_iter(["pid", "cmdline", "create_time", "memory_info"]):
        try:
            cmd = p.info["cmdline"] or []
            role = _role(cmd)
            if role is None or p.info["pid"] in me:
                continue
            out.append(
                Instance(
                    p.info["pid"],
                    role,
                    " ".join(cmd)[:300],
                    p.info["memory_info"].rss if p.info["memory_info"] else 0,
                    p.info["create_time"] or 0.0,
                    gpu.get(p.info["pid"]),
                    orphans[p.info["pid"]].run or "?" if p.info["pid"] in orphans else None,
                )
            )
        except (psutil.Error, TypeError):
            continue
    return sorted(out, key=lambda i: i.pid)


def verdict() -> str:
    """May a new vLLM start on this box: "free", or why not (one line, with how to stop what holds it)."""
    holder = read_holder()
    if holder is not None:
        return refusal(holder)
    running = [i for i in scan() if i.role in ("server", "engine")]
    if not running:
        return "free"
    shown = "; ".join(i.shown() for i in running[:4])
    how = "stop them with `vlaunch stop PID`"
    if any(i.orphan for i in running):
        how = "they outlived the vlaunch that started them: `vlaunch stop --orphans` stops them"
    return f"vLLM processes already run on this box: {shown}; {how}"


@dataclass(frozen=True)
class OrphansStopped:
    """What `stop_orphans` did: the pids it meant to stop, those still alive, those it may not signal, and the
    containers it killed (runtime:name)."""

    stopped: list[int]
    alive: list[int]
    denied: list[int]
    containers: list[str]


def stop_orphans(timeout: float = 20.0) -> OrphansStopped:
    """Stop every process a gone `vlaunch serve` left behind, and `docker kill` the containers of the container
    launches among them (the daemon runs a container, not the orphaned client)."""
    _require_own_proc()
    orphans = sup.find_orphans()
    boxes = sorted({o.container for o in orphans.values() if o.container and sup.parse_container(o.container)})
    killed = []
    for box in boxes:
        runtime, name = sup.parse_container(box) or ("", "")
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            if subprocess.run([runtime, "kill", name], capture_output=True, timeout=30, check=False).returncode == 0:
                killed.append(box)
    left = sup.stop_procs({pid: o.started for pid, o in orphans.items()}, grace=timeout) if orphans else None
    return OrphansStopped(sorted(orphans), left.alive if left else [], left.denied if left else [], killed)


def _require_own_proc() -> None:
    if not sup.own_proc():
        raise GuardError(
            "/proc does not show this process's pid namespace (mounted for another one): its pids are not the ones "
            "this process would signal; nothing signalled"
        )


def _tree_rss(pid: int) -> int:
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            total += p.memory_info().rss
    return total


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def tree_procs(pid: int, started: int | None = None, known: list[psutil.Process] | None = None) -> dict[int, int]:
    """pid → start time of `pid` (when it is still the process that started at `started`; read now when None)
    and its descendants, and of the `known` processes that still run."""
    started = sup.start_time(pid) if started is None else started
    procs = {p: s for p, (_, s) in sup.with_descendants({pid: started}).items()} if started is not None else {}
    for p in known or []:
        with contextlib.suppress(psutil.Error):
            if p.pid not in procs and p.is_running() and (s := sup.start_time(p.pid)) is not None:
                procs[p.pid] = s
    return procs


def stop_tree_checked(
    pid: int, *, timeout: float = 20.0, started: int | None = None, known: list[psutil.Process] | None = None
) -> sup.Stopped:
    """terminate → wait → kill `pid`, every descendant and the process group `pid` leads (`tree_procs`)."""
    return sup.stop_procs(tree_procs(pid, started, known), grace=timeout)


def stop_tree(pid: int, *, timeout: float = 20.0, known: list[psutil.Process] | None = None) -> list[int]:
    """`stop_tree_checked` for a pid the caller vouches for now; returns pids still alive (none)."""
    return stop_tree_checked(pid, timeout=timeout, known=known).alive


def live_free_bytes(machine_name: str) -> int | None:
    """What is free on this box now for the machine a profile names (the least free GPU, or available RAM on
    unified memory); None when this box is not that machine, i.e. the plan is for another one."""
    from launcher import machines

    if machine_name in ("cpu", "auto"):
        return None  # the plan reads this box itself
    try:
        here, reading = machines.detect()
    except machines.MachineError:
        return None
    if here.backend == "cuda" and (machine_name == here.name or machine_name == "cuda"):
        return reading.available_bytes
    return None


def gpu_memory_by_pid() -> dict[int, int]:
    """GPU memory per process from nvidia-smi (empty where there is none, or on unified memory)."""
    try:
        r = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (FileNotFoundError, OSError, subprocess.TimeoutExpired):
        return {}
    out: dict[int, int] = {}
    for line in r.stdout.splitlines():
        parts = [x.strip() for x in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
            out[int(parts[0])] = out.get(int(parts[0]), 0) + int(parts[1]) * 2**20
    return out
