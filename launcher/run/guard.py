"""One vLLM per box unless the user budgets for more: an flock-held lock, and a scan for vLLM processes.

The lock lives in $XDG_RUNTIME_DIR/vlaunch (or /tmp/vlaunch-<uid>) and is held by `vlaunch serve` for the
server's whole life; the kernel drops it if the holder dies, so a crash never leaves the box locked. The scan
finds vLLM servers and engine processes started by anyone, so a server vlaunch did not start is seen too.

Tests get a private box: a lock directory of their own (XDG_RUNTIME_DIR) and a process table of their own, the
processes of their test scope (`supervise.SCOPE`: those carrying the session's value in their environment, and their
descendants). A scope narrows the scan only below the live test session it names; anywhere else it is ignored and
the scan is box-wide, so no setting a user can make by accident hides a running vLLM from the guard.

What is on disk is not trusted: the directory must be the caller's own with mode 0700 (`lstat`: a link is
refused), the lock file a regular file of the caller's, opened without following links or blocking, and its
content is read like user input (each field within physical bounds, else left out).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil

from launcher.common.chars import escaped, unsafe_char
from launcher.common.errors import VlaunchError
from launcher.common.records import dataclass
from launcher.run import supervise as sup


class GuardError(VlaunchError):
    """Another vLLM holds the box (or what was to be stopped still runs)."""

    exit_code = 4


class LockError(VlaunchError):
    """The box lock's directory or file is not safe to use: another user's, a link, a FIFO, the wrong mode."""


LOCK_NAME = "serve.lock"


def lock_dir() -> Path:
    """$XDG_RUNTIME_DIR/vlaunch when XDG_RUNTIME_DIR is an absolute path to a directory of this user's, or to
    nothing yet (the XDG spec ignores a relative one), else /tmp/vlaunch-<uid>. Nothing is created here."""
    run = os.environ.get("XDG_RUNTIME_DIR") or ""
    if os.path.isabs(run) and "\0" not in run:
        try:
            st = os.lstat(run)
        except FileNotFoundError:
            return Path(run) / "vlaunch"
        except OSError:
            st = None
        if st is not None and stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid():
            return Path(run) / "vlaunch"
    return Path(f"/tmp/vlaunch-{os.getuid()}")


def lock_path() -> Path:
    return lock_dir() / LOCK_NAME


def _owner(uid: int) -> str:
    import pwd

    try:
        return f"uid {uid} ({escaped(pwd.getpwuid(uid).pw_name)})"
    except KeyError:
        return f"uid {uid}"


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "a FIFO" if stat.S_ISFIFO(mode) else "a regular file" if stat.S_ISREG(mode) else "a device or socket"


def _open_lock_dir(path: Path, *, create: bool) -> int | None:
    """A descriptor of the lock directory, created private when `create`; None when it does not exist (and is not
    to be created). Refused (LockError, one line) unless it is a directory of this user's with mode 0700."""
    made = False
    if create:
        try:
            os.makedirs(path.parent, mode=0o700, exist_ok=True)  # a set XDG_RUNTIME_DIR not made yet
            os.mkdir(path, 0o700)
            made = True
        except FileExistsError:
            pass
        except OSError as e:
            raise LockError(f"cannot create the lock directory: {e.strerror or e}", source=str(path)) from None
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if create:
            raise LockError("the lock directory vanished while it was created", source=str(path)) from None
        return None
    except OSError as e:
        raise LockError(f"cannot read the lock directory: {e.strerror or e}", source=str(path)) from None
    if not stat.S_ISDIR(st.st_mode):
        raise LockError(f"the lock directory is {_kind(st.st_mode)}, not a directory: refused", source=str(path))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        raise LockError(f"cannot open the lock directory: {e.strerror or e}", source=str(path)) from None
    try:
        st = os.fstat(fd)
        if made and st.st_uid == os.geteuid():
            os.fchmod(fd, 0o700)  # whatever the umask
            st = os.fstat(fd)
        if st.st_uid != os.geteuid():
            raise LockError(
                f"the lock directory belongs to {_owner(st.st_uid)}, not to you ({_owner(os.geteuid())}): refused; "
                "it is not yours to use (remove it, or set XDG_RUNTIME_DIR to a directory of your own)",
                source=str(path),
            )
        if stat.S_IMODE(st.st_mode) != 0o700:
            raise LockError(
                f"the lock directory has mode {stat.S_IMODE(st.st_mode):04o}, not 0700: refused (chmod 700 it)",
                source=str(path),
            )
        return fd
    except BaseException:
        os.close(fd)
        raise


def _open_lock_file(path: Path, flags: int, *, create_dir: bool) -> int | None:
    """The lock file opened with `flags`, never following a link nor blocking on a FIFO; None when it does not
    exist. Refused (LockError, one line) unless it is a regular file of this user's; with the default path, the
    directory is checked (and created with `create_dir`) first."""
    dir_fd = None
    if path == lock_path():
        dir_fd = _open_lock_dir(path.parent, create=create_dir)
        if dir_fd is None:
            return None
    try:
        fd = os.open(
            path.name if dir_fd is not None else path,
            flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
            0o600,
            dir_fd=dir_fd,
        )
    except FileNotFoundError:
        return None
    except OSError as e:
        why = "is a symbolic link: refused" if e.errno == errno.ELOOP else f"cannot open: {e.strerror or e}"
        raise LockError(why, source=str(path)) from None
    finally:
        if dir_fd is not None:
            os.close(dir_fd)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        os.close(fd)
        what = _kind(st.st_mode) if not stat.S_ISREG(st.st_mode) else f"owned by {_owner(st.st_uid)}"
        raise LockError(f"the lock file is {what}, not a regular file of yours: refused", source=str(path))
    os.set_blocking(fd, True)
    return fd


class BoxLock:
    """An exclusive, non-blocking flock on the box's lock file; the file carries who holds it."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or lock_path()
        self._fd: int | None = None

    def acquire(self, info: dict[str, Any]) -> None:
        fd = _open_lock_file(self.path, os.O_RDWR | os.O_CREAT, create_dir=True)
        assert fd is not None  # O_CREAT
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            holder = read_holder(self.path)
            raise GuardError(refusal(holder), source=str(self.path)) from None
        self._fd = fd
        self.update(info)

    def update(self, info: dict[str, Any]) -> None:
        """Write who holds the lock: `info`, with the start times of its pids and this pid namespace, which prove
        later which processes the pids named."""
        if self._fd is None:
            return
        proof: dict[str, int | None] = {"pidns": sup.pid_namespace()}
        for key in ("pid", "vllm_pid"):
            pid = sup.plausible_pid(info.get(key))
            proof[f"{key}_started"] = None if pid is None else sup.start_time(pid)
        data = json.dumps({**info, **proof}).encode()
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
    """Who holds the lock (None when nobody does, or there is no lock directory yet: nothing is created), its
    fields checked (`holder_fields`)."""
    path = path or lock_path()
    fd = _open_lock_file(path, os.O_RDONLY, create_dir=False)
    if fd is None:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 1 << 16, 0).decode(errors="replace")
            try:
                data = json.loads(text)
            except (ValueError, RecursionError):
                data = {}
            return holder_fields(data)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


_EPOCH_2000 = 946684800.0
_TEXT_FIELDS = ("profile", "log", "host")
_MAX_TEXT = 4096


def _text(value: object) -> str | None:
    if isinstance(value, str) and len(value) <= _MAX_TEXT and unsafe_char(value) is None:
        return value
    return None


def _count(value: object, low: int, high: int) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if low <= value <= high else None


def holder_fields(data: object) -> dict[str, Any]:
    """A lock's content read like user input: each field vlaunch writes, kept when within its bounds (a pid an int
    in 2..pid_max, `since` a finite time since 2000 and not in the future, text printable and short), else None."""
    raw = data if isinstance(data, dict) else {}
    out: dict[str, Any] = {key: sup.plausible_pid(raw.get(key)) for key in ("pid", "vllm_pid")}
    out |= {key: _text(raw.get(key)) for key in _TEXT_FIELDS}
    out["port"] = _count(raw.get("port"), 1, 65535)
    since = raw.get("since")
    if isinstance(since, bool) or not isinstance(since, int | float):
        since = None
    out["since"] = float(since) if since is not None and _EPOCH_2000 <= since <= time.time() + 86400 else None
    argv = raw.get("argv")
    good = isinstance(argv, list) and len(argv) <= 4096 and all(_text(a) is not None for a in argv)
    out["argv"] = argv if good else None
    out |= {key: _count(raw.get(key), 0, 2**63) for key in ("pid_started", "vllm_started", "pidns")}
    return out


def holder_here(holder: dict[str, Any], key: str = "pid") -> tuple[int, int] | None:
    """(pid, start time) of the process a holder's `key` names, when that is proven: written in this pid namespace
    and still the process that started then; None otherwise."""
    pid, started = holder.get(key), holder.get(f"{key}_started")
    if pid is None or started is None or holder.get("pidns") != sup.pid_namespace():
        return None
    return (pid, started) if sup.start_time(pid) == started else None


def _shown(value: object) -> str:
    return "?" if value is None else escaped(value)


def refusal(holder: dict[str, Any] | None) -> str:
    if not holder or holder.get("pid") is None:
        return (
            "another vlaunch serve holds this box (starting up, or its lock names no valid pid); wait or stop it "
            "with `vlaunch stop`"
        )
    since = "?" if holder["since"] is None else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(holder["since"]))
    mem = ""
    vllm = holder_here(holder, "vllm_pid")
    if vllm is not None:
        rss = _tree_rss(vllm[0])
        if rss:
            mem = f", {rss / 2**30:.2f} GiB resident"
    there = ""
    if holder.get("pidns") != sup.pid_namespace():
        there = " (from another pid namespace: its pids are not this one's)"
    return (
        f"a vLLM server already holds this box{there}: profile '{_shown(holder.get('profile'))}', "
        f"vlaunch pid {holder['pid']}, vLLM pid {_shown(holder.get('vllm_pid'))}, since {since}{mem}, "
        f"log {_shown(holder.get('log'))}; stop it with `vlaunch stop {_shown(holder.get('profile'))}` "
        f"(or `vlaunch stop {holder['pid']}`)"
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
    """vLLM processes running on this box, whoever started them; within a test scope (`supervise.SCOPE`, which
    only a test sets), the scope's only."""
    me = {os.getpid()} | (exclude or set())
    within = sup.scope()
    inside = None if within is None else sup.scope_procs(within)
    gpu = gpu_memory_by_pid()
    orphans = sup.find_orphans()
    out = []
    for p in psutil.process_iter(["pid", "cmdline", "create_time", "memory_info"]):
        try:
            cmd = p.info["cmdline"] or []
            role = _role(cmd)
            if role is None or p.info["pid"] in me or (inside is not None and p.info["pid"] not in inside):
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
    from launcher.plan import machines

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
