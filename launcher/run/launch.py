"""Start vLLM for a plan, watch its boot, check the prediction live, and stop it cleanly.

The subprocess loop only moves lines: a reader thread queues vLLM's output, the main thread tees each line to the
run log and feeds the Watcher (a small state machine over vllm.logs), prints boot stages, compares the pool the
moment vLLM states it, and cross-checks /metrics once /health answers. Signals stop vLLM's whole process group
(terminate → wait → kill) and release the box lock on every path.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import queue
import re
import select
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import field
from pathlib import Path
from typing import IO, Any

import psutil

from launcher.check.compare import compare, render_comparison
from launcher.check.facts import LogFacts
from launcher.check.parser import LogParser
from launcher.check.stream import STREAM_LINE_CAP
from launcher.common.errors import VlaunchError
from launcher.common.files import write_atomic
from launcher.common.records import dataclass
from launcher.common.redact import Masker
from launcher.common.units import GiB
from launcher.plan import calibration, machines
from launcher.plan.planning import Plan
from launcher.plan.rowspeed import step_inputs
from launcher.run import guard
from launcher.run import preflight as pf
from launcher.run import supervise as sup
from launcher.run.watchdog import Event, MemSample, Watchdog, sample_from_meminfo
from launcher.vllm import logs
from launcher.vllm import pool as vp
from launcher.vllm import versions as V
from launcher.vllm.logs import Stage

_STAGE_TRIGGERS = logs.STAGE_TRIGGERS  # from each log pattern's stage and keywords


@dataclass
class Watcher:
    """Feed it vLLM's lines; it tracks the boot stage and everything vllm.logs extracts."""

    parser: LogParser = field(default_factory=LogParser)
    stage: Stage = Stage.STARTING
    t0: float = field(default_factory=time.monotonic)
    stages: dict[str, float] = field(default_factory=dict)
    on_stage: Callable[[Stage, float], None] | None = None
    pool_seen: bool = False

    def feed(self, line: str) -> None:
        self.parser.feed(line)
        for stage, triggers in _STAGE_TRIGGERS:
            if _order(stage) > _order(self.stage) and any(t in line for t in triggers):
                self._enter(stage)
        if self.parser.facts.failure is not None and self.stage is not Stage.FAILED:
            self._enter(Stage.FAILED)

    def _enter(self, stage: Stage) -> None:
        self.stage = stage
        elapsed = time.monotonic() - self.t0
        self.stages[stage.value] = round(elapsed, 2)
        if self.on_stage:
            self.on_stage(stage, elapsed)

    @property
    def facts(self) -> LogFacts:
        return self.parser.facts


def _order(s: Stage) -> int:
    return list(Stage).index(s)


def utc_stamp() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


def new_log_paths(profile: str, logs_dir: Path) -> tuple[Path, Path]:
    """logs/<profile>-<UTC timestamp>.log and .json, never overwriting an existing run. Both stay directly inside
    `logs_dir`: a name that would lead elsewhere (a `/`, `..`) is refused (profiles refuse such names already)."""
    from launcher.common.errors import VlaunchError

    logs_dir.mkdir(parents=True, exist_ok=True)
    stamp = utc_stamp()
    for n in range(1000):
        suffix = "" if n == 0 else f"-{n}"
        log = logs_dir / f"{profile}-{stamp}{suffix}.log"
        if any(sep in profile for sep in (os.sep, os.altsep) if sep) or log.resolve().parent != logs_dir.resolve():
            raise VlaunchError(f"profile name {profile!r} would put the run log outside {logs_dir}", field="name")
        try:
            fd = os.open(log, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)  # vLLM's output: its owner's only
        except FileExistsError:
            continue
        os.close(fd)
        return log, log.with_suffix(".json")
    raise RuntimeError("cannot create a run log")


HTTP_READ_CAP = 16 << 20
"""The most of a /health or /metrics answer read: a server that streams without end does not grow vlaunch."""


def http_get(url: str, timeout: float = 2.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read(HTTP_READ_CAP).decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, ""
    except (urllib.error.URLError, OSError, TimeoutError):
        return 0, ""


_LABEL = re.compile(r'(\w+)="([^"]*)"')


def cache_config_info(metrics_text: str) -> dict[str, str] | None:
    for line in metrics_text.splitlines():
        if line.startswith("vllm:cache_config_info{"):
            return dict(_LABEL.findall(line))
    return None


_COUNT = re.compile(r"[0-9]{1,18}")


def _count_label(labels: dict[str, str], key: str, malformed: list[str]) -> int | None:
    """A count label's value; None when absent or "None" (not known yet), and when not a plain non-negative integer
    (noted in `malformed`): a label vLLM's server writes is not input vlaunch stops a running server over."""
    value = labels.get(key)
    if not value or value == "None":
        return None
    if _COUNT.fullmatch(value.strip()) is None:
        malformed.append(key)
        return None
    return int(value.strip())


def metrics_check(facts: LogFacts, labels: dict[str, str] | None, block_size: int) -> dict[str, Any]:
    """/metrics vllm:cache_config_info against the log: num_gpu_blocks, and kv_cache_size_tokens (0.28+). A label
    that is not a count is left out (listed under "malformed"); with none left the check is not available."""
    if labels is None:
        return {"available": False}
    malformed: list[str] = []
    blocks = _count_label(labels, "num_gpu_blocks", malformed)
    tokens = _count_label(labels, "kv_cache_size_tokens", malformed)
    bs = _count_label(labels, "block_size", malformed) or block_size
    out: dict[str, Any] = {"available": not malformed or blocks is not None or tokens is not None}
    if malformed:
        out["malformed"] = malformed
    if blocks is not None:
        out["num_gpu_blocks"] = blocks
        if facts.num_blocks is not None:
            out["blocks_agree"] = blocks == facts.num_blocks
        elif facts.kv_pool_tokens is not None and facts.max_concurrency is not None:
            out["blocks_agree"] = blocks * bs >= facts.kv_pool_tokens
    if tokens is not None:
        out["kv_cache_size_tokens"] = tokens
        if facts.kv_pool_tokens is not None:
            out["tokens_agree"] = tokens == facts.kv_pool_tokens
    out["agree"] = all(v for k, v in out.items() if k.endswith("_agree"))
    return out


class _NotStarted(Exception):
    """vLLM was not started: the exit code and the one line saying why."""

    def __init__(self, code: int, line: str) -> None:
        super().__init__(line)
        self.code, self.line = code, line


class _Stop(Exception):
    def __init__(self, signum: int) -> None:
        self.signum = signum


class _Trap:
    """SIGINT, SIGTERM and SIGHUP, noted by the handler; the run raises _Stop at its next safe point (`check`,
    within half a second). Raised from the handler itself, the exception could land inside a lock, a queue or a
    buffered write of this process and leave it held, with the stop never said and the box never freed."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.signum: int | None = None
        self.old: dict[signal.Signals, Any] = {}

    def arm(self) -> None:
        self.old = {s: signal.getsignal(s) for s in self.SIGNALS}
        for s in self.SIGNALS:
            signal.signal(s, self._note)

    def _note(self, signum: int, _frame: object) -> None:
        if self.signum is None:
            self.signum = signum  # the first signal names the stop

    def check(self) -> None:
        """_Stop once a signal came."""
        if self.signum is not None:
            raise _Stop(self.signum)

    def ignore(self) -> None:
        for s in self.old:
            signal.signal(s, signal.SIG_IGN)  # a second Ctrl-C must not interrupt the clean-up

    def restore(self) -> None:
        for s, handler in self.old.items():
            signal.signal(s, handler)


@dataclass
class RunResult:
    exit_code: int  # what vlaunch exits with; the record's "exit" is the same number
    record: dict[str, Any]
    log: Path
    record_path: Path
    error: str | None = None  # one line (what; fix) when vLLM could not be started at all
    warning: str | None = None  # one line when the run record could not be written


def serve(
    plan: Plan,
    *,
    logs_dir: Path,
    echo: Callable[[str], None],
    verbose: bool = False,
    ready_timeout: float = 1800.0,
    stop_after_ready: bool = False,
    stop_below_bytes: int | None = None,
    extra_env: dict[str, str] | None = None,
) -> RunResult:
    """Run vLLM under the guard until it exits or we are told to stop.

    `extra_env` is added to vLLM's environment (a Ray cluster's RAY_ADDRESS). On unified memory the watchdog
    samples the box every WATCH_EVERY seconds: below the OS reserve the plan kept it warns (once per crossing)
    with who grew; below `stop_below_bytes` (any machine) it stops vLLM.

    The exit code (and the record's "exit"): 0 after a clean stop (a signal once vLLM is ready, or
    stop_after_ready), 1 when vLLM fails or exits before it is ready, 5 when its executable cannot be started,
    11 when the watchdog stopped it, 128 + the signal's number when stopped before vLLM was ready, 70 when
    vlaunch itself fails (then re-raised).
    """
    lock = guard.BoxLock()
    info = _lock_info(plan)
    lock.acquire(info)  # first: a serve the lock refuses leaves no run log behind
    try:
        log_path, record_path = new_log_paths(plan.profile.name, logs_dir)
    except BaseException:
        lock.release()
        raise
    info["log"] = str(log_path)
    lock.update(info)
    options = _Options(verbose, ready_timeout, stop_after_ready, stop_below_bytes)
    run = _Run(plan, lock, info, (log_path, record_path), echo, options)
    trap = _Trap()
    trap.arm()
    run.begin()
    try:
        proc, mask = run.start(extra_env, trap.check)
        run.watch(proc, mask, trap.check)
        run.ended(proc)
    except _NotStarted as e:
        run.exit_code, run.error = e.code, e.line
        run.record["error"] = run.error
    except _Stop as stop:
        run.stopped(stop.signum)
    except Exception as e:
        run.exit_code = pf.EXIT_INTERNAL
        run.record["error"] = " ".join(f"internal error: {e}".split())
        raise
    finally:
        trap.ignore()
        run.clean_up()
        trap.restore()
    return RunResult(run.exit_code, run.record, log_path, record_path, run.error, warning=run.saved.failure)


@dataclass(frozen=True)
class _Options:
    """How `serve` watches vLLM, past the plan."""

    verbose: bool
    ready_timeout: float
    stop_after_ready: bool
    stop_below_bytes: int | None


def _lock_info(plan: Plan) -> dict[str, Any]:
    """What the box lock tells about this serve; the log and vLLM's pid are filled in once known."""
    profile = plan.profile
    return {
        "pid": os.getpid(),
        "profile": profile.name,
        "since": time.time(),
        "log": None,
        "port": profile.vllm.port,
        "host": profile.vllm.host,
        "vllm_pid": None,
        "argv": plan.shown_argv,  # secret values masked here, in the record and in the log; vLLM gets them
    }


def _new_record(plan: Plan, log_path: Path) -> dict[str, Any]:
    """The run record as it starts: the profile, the command, the log and the prediction."""
    return {
        "profile": plan.profile.name,
        "profile_path": plan.profile.source,
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "argv": plan.shown_argv,
        "log": str(log_path),
        "predicted": plan.to_json(),
        "speed_inputs": step_inputs(plan),  # the decode step `vlaunch calibrate` prices the logged intervals with
    }


def _vllm_env(
    plan: Plan, extra_env: dict[str, str] | None, run_id: str, runtime: str, container: str | None
) -> dict[str, str]:
    """vLLM's environment: ours, the plan's, `extra_env`, and the markers that name the run's processes."""
    env = {**os.environ, **dict(plan.env), **(extra_env or {})}
    env |= {sup.MARKER_RUN: run_id, sup.MARKER_PID: sup.wrapper_marker()}
    if container:  # an orphaned client names its container to `vlaunch stop --orphans`
        env[sup.MARKER_CONTAINER] = sup.container_marker(runtime, container)
    return env


def _spawn(plan: Plan, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start vLLM, its output on a pipe; _NotStarted when its executable cannot be started."""
    try:
        return subprocess.Popen(
            list(plan.argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # its own process group: we stop all of it, it never gets our terminal's ^C
        )
    except OSError as e:  # FileNotFoundError, PermissionError: the same refusal pre-flight gives
        reason = "not executable" if isinstance(e, PermissionError) else "not found"
        if not isinstance(e, FileNotFoundError | PermissionError):
            reason = f"cannot be started ({e.strerror or e})"
        refusal = pf.missing_executable(plan, plan.argv[0], reason)
        raise _NotStarted(refusal.code, refusal.line()) from e


EXIT_WAIT = 5.0
"""How long (seconds) serve waits for vLLM to exit once its output has ended, before it reads the exit status."""


def _await_exit(proc: subprocess.Popen[bytes], check: Callable[[], None]) -> None:
    """Wait up to EXIT_WAIT seconds for `proc` to exit (the output closes a moment before the process is gone);
    `check` still stops the wait."""
    end = time.monotonic() + EXIT_WAIT
    while proc.poll() is None and time.monotonic() < end:
        check()
        time.sleep(0.02)


def _next_line(lines: queue.Queue[bytes | None]) -> bytes | None:
    """The next line of vLLM's output; b"" when none came within half a second, None at its end."""
    try:
        return lines.get(timeout=0.5)
    except queue.Empty:
        return b""


class _Run:
    """One serve from the lock to the clean-up: vLLM's process, the run record and what its log said so far."""

    def __init__(
        self,
        plan: Plan,
        lock: guard.BoxLock,
        info: dict[str, Any],
        paths: tuple[Path, Path],
        echo: Callable[[str], None],
        options: _Options,
    ) -> None:
        self.plan, self.lock, self.info, self.echo, self.options = plan, lock, info, echo, options
        self.log_path, self.record_path = paths
        self.record = _new_record(plan, self.log_path)
        self.proc: subprocess.Popen[bytes] | None = None
        self.vllm_started: int | None = None  # vLLM's start time (None: read at the clean-up)
        self.known: list[psutil.Process] = []
        self.watcher = Watcher(on_stage=lambda s, t: echo(f"[{t:7.1f}s] {s.value}"))
        self.exit_code = 0
        self.error: str | None = None
        self.ready_at: float | None = None
        self.vllm_rc: int | None = None  # vLLM's own exit status, when it ended by itself
        self.t_start = 0.0
        self.log_fh: IO[bytes]
        self.run_id = self.log_path.stem
        launched: tuple[str, str | None] = _launched_container(plan.argv) or ("docker", None)
        self.runtime, self.container = launched
        self.supervisor: Supervisor | None = None
        self.saved = _RecordWriter(self.record_path)
        self.reader: threading.Thread | None = None  # moves vLLM's output into the watch's queue
        self.done = threading.Event()  # tells the reader to stop
        # the watch loop's progress
        self.base = ""
        self.dog: Watchdog | None = None
        self.compared = False
        self.metrics_done = False
        self.last_health = 0.0
        self.last_watch = -WATCH_EVERY

    def begin(self) -> None:
        """The run's clock starts and its log opens."""
        self.t_start = time.monotonic()
        self.log_fh = self.log_path.open("ab", buffering=0)  # each line on disk as it comes: a tail -f sees it

    def start(
        self, extra_env: dict[str, str] | None, check: Callable[[], None]
    ) -> tuple[subprocess.Popen[bytes], Masker]:
        """The supervisor, then vLLM; _NotStarted when either cannot be started, _Stop (from `check`) when a
        signal came first."""
        # the supervisor first: from here on, whatever way this process ends, nothing of the launch outlives it
        try:
            self.supervisor = Supervisor.start(
                self.run_id, container=self.container, runtime=self.runtime, record=self.record_path, check=check
            )
        except SupervisorError as e:  # nothing is started without it
            raise _NotStarted(pf.EXIT_INTERNAL, e.one_line()) from e
        check()  # stopped while the supervisor started: vLLM is not started at all
        env = _vllm_env(self.plan, extra_env, self.run_id, self.runtime, self.container)
        mask = Masker.of(self.plan.argv, env)  # vLLM prints its arguments (`non-default args`): not into our log
        self.proc = proc = _spawn(self.plan, env)
        self.info["vllm_pid"] = proc.pid
        self.vllm_started = sup.start_time(proc.pid)  # with the pid, names vLLM for the clean-up even once it is reaped
        self.lock.update(self.info)
        self.echo(f"vLLM pid {proc.pid}; log {self.log_path}")
        return proc, mask

    def watch(self, proc: subprocess.Popen[bytes], mask: Masker, check: Callable[[], None]) -> None:
        """Move vLLM's lines until it ends, fails, times out, is ready (with stop_after_ready) or the watchdog
        stops it; _Stop (from `check`, called at least every half second) when a signal came."""
        lines: queue.Queue[bytes | None] = queue.Queue(maxsize=10000)
        self.reader = reader = threading.Thread(
            target=_pump, args=(proc.stdout, lines, LINE_CAP, self.done), daemon=True
        )
        reader.start()
        vllm = self.plan.profile.vllm
        self.base = f"http://{_connect_host(vllm.host)}:{vllm.port}"
        reserve = self.plan.prediction.os_reserve_bytes if self.plan.machine.unified else 0
        stop_below = self.options.stop_below_bytes
        self.dog = Watchdog(reserve, stop_below) if reserve or stop_below is not None else None
        while True:
            check()
            raw = _next_line(lines)
            if raw is None:  # its output ended: vLLM is exiting; its status decides the run
                _await_exit(proc, check)
                break
            if raw:
                self._take(mask.line(raw), proc.pid)
            if self._step(proc.pid):
                break
            if proc.poll() is not None and lines.empty() and not reader.is_alive():
                break

    def _take(self, raw: bytes, pid: int) -> None:
        """One (masked) line: into the run log, to the screen when verbose, and to the watcher."""
        self.log_fh.write(raw)
        text = raw.decode("utf-8", errors="replace")
        if self.options.verbose:
            self.echo(text.rstrip("\n"))
        self.watcher.feed(text)
        if len(self.known) < 64 and self.watcher.stage in (Stage.LOADING, Stage.PROFILING, Stage.KV):
            self.known = _merge(self.known, guard.descendants(pid))

    def _step(self, pid: int) -> bool:
        """What is due after a line (or half a second without one); True when the watch ends."""
        f = self.watcher.facts
        if not self.compared and (f.kv_pool_tokens is not None or f.num_blocks is not None):
            self.compared = True
            _compare_pool(self.plan, f, self.record, self.echo)
        if f.failure is not None and self.exit_code == 0:
            self.exit_code = 1
            self.echo(f"vLLM failed: {f.failure.kind}: {f.failure.message}")
            self.echo(f"  fix: {f.failure.fix}")
            return True
        now = time.monotonic()
        if self.dog is not None and now - self.last_watch >= WATCH_EVERY:
            self.last_watch = now
            if self._watchdog(self.dog, now, pid):
                return True
        if self.ready_at is None and now - self.last_health > 1.0 and self.watcher.stage in (Stage.GRAPHS, Stage.READY):
            self.last_health = now
            self._health(now)
        if self.ready_at is not None and not self.metrics_done:
            self.metrics_done = True
            self._serving(f)
            if self.options.stop_after_ready:
                return True
        if self.ready_at is None and now - self.t_start > self.options.ready_timeout:
            self.exit_code = 1
            self.echo(f"vLLM did not come up within {self.options.ready_timeout:.0f} s")
            return True
        return False

    def _watchdog(self, dog: Watchdog, now: float, pid: int) -> bool:
        """The watchdog's look at the box; True when it stops vLLM."""
        event = dog.observe(_sample(now - self.t_start, pid, self.known))
        if event is None:
            return False
        _note_watchdog(self.record, event, self.echo)
        if event.kind != "stop":
            return False
        self.record["stopped_by"] = event.line()  # "watchdog: MemAvailable …"
        self.exit_code = pf.EXIT_WATCHDOG
        return True

    def _health(self, now: float) -> None:
        """vLLM is ready once /health answers 200."""
        status, _ = http_get(self.base + "/health")
        if status == 200:
            self.ready_at = now
            self.record["boot_seconds"] = round(now - self.t_start, 2)
            self.echo(f"[{now - self.t_start:7.1f}s] /health answers: {self.base}")

    def _serving(self, f: LogFacts) -> None:
        """Once ready: /metrics against the log, and the run record written."""
        _, text_m = http_get(self.base + "/metrics", timeout=5)
        check = metrics_check(f, cache_config_info(text_m), self.plan.prediction.layout.block_size)
        self.record["metrics_check"] = check
        self.echo(f"/metrics cache_config_info: {_metrics_line(check)}")
        self.saved.write(_finish(self.record, self.watcher, None))
        self.echo(f"serving; run record {self.record_path}; Ctrl-C stops it")

    def ended(self, proc: subprocess.Popen[bytes]) -> None:
        """After the watch: vLLM that exited before it was ready failed; the end of its log may say why."""
        self.vllm_rc = proc.poll()
        if self.vllm_rc is not None and self.exit_code == 0 and self.ready_at is None:
            self.exit_code = 1
            self.echo(f"vLLM exited with code {self.vllm_rc} before it was ready")
            failure = self.watcher.parser.finish().failure  # the end of the log may name what went wrong
            if failure is not None:
                self.echo(f"vLLM failed: {failure.kind}: {failure.message}")
                self.echo(f"  fix: {failure.fix}")

    def stopped(self, signum: int) -> None:
        """A signal stops the run; before vLLM is ready, the exit code is 128 + its number."""
        name = signal.Signals(signum).name
        self.echo(f"received {name}: stopping vLLM")
        self.record["stopped_by"] = name
        if self.ready_at is None and self.exit_code == 0:
            self.exit_code = 128 + signum  # interrupted before vLLM served anything

    def clean_up(self) -> None:
        """Stop what is left of the launch, write the record, let the supervisor go and release the lock."""
        leftover: list[int] = []
        if self.proc is not None:
            leftover = self._stop_vllm(self.proc)
        self.record["leftover_pids"] = leftover
        self.record["exit"] = self.exit_code
        with contextlib.suppress(OSError):
            self.log_fh.close()
        self.saved.write(_finish(self.record, self.watcher, time.monotonic() - self.t_start))
        if self.supervisor is not None:
            self.supervisor.done()  # vLLM is stopped: the supervisor has nothing to do
        self.lock.release()

    def _stop_vllm(self, proc: subprocess.Popen[bytes]) -> list[int]:
        """Stop vLLM and what the launch left; the pids still alive."""
        if self.vllm_rc is None:
            self.vllm_rc = proc.poll()  # before stop_tree reaps it: afterwards Popen cannot read the status
        self.known = _merge(self.known, guard.descendants(proc.pid))
        leftover = _stop_launch(proc.pid, self.vllm_started, self.known, self.run_id, (self.runtime, self.container))
        self.record["vllm_exit"] = self.vllm_rc  # None: vLLM was running and vlaunch stopped it
        self.done.set()
        if self.reader is not None:
            self.reader.join(timeout=2.0)  # it looks at `done` every PUMP_POLL seconds
        if proc.stdout is not None and (self.reader is None or not self.reader.is_alive()):
            with contextlib.suppress(OSError):
                proc.stdout.close()
        return leftover


def _compare_pool(plan: Plan, f: LogFacts, record: dict[str, Any], echo: Callable[[str], None]) -> None:
    """The pool vLLM states, against the prediction (and a CPU run's calibration)."""
    _calibrate_cpu(plan, f, record, echo)
    comparison = compare(plan, f)
    record["diff"] = comparison.to_json()
    echo("predicted vs logged:" + render_comparison(comparison))


def _stop_launch(
    pid: int, started: int | None, known: list[psutil.Process], run_id: str, container: tuple[str, str | None]
) -> list[int]:
    """Stop vLLM's process group (terminate → wait → kill), the run's strays and its container; the pids still
    alive."""
    # the same grace as the supervisor's: a vLLM busy loading ignores SIGTERM, and the box must be free
    # within seconds, not whenever a safetensors read returns
    stopped = guard.stop_tree_checked(pid, timeout=sup.GRACE_SECONDS, started=started, known=known)
    leftover = stopped.alive
    # what left vLLM's process tree (daemonised, reparented) still carries the run's marker
    stray = sup.run_procs(run_id)
    leftover = sorted(set(leftover) | set(sup.stop_pids(stray, grace=5.0) if stray else ()))
    runtime, name = container
    if name:
        stop_container(name, runtime)
    return leftover


class _RecordWriter:
    """Writes a run's record; a failed write (a full disk, a directory at the path) is kept as one line for a
    warning, never a reason to stop vLLM or to change the run's exit code."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.failure: str | None = None

    def write(self, record: dict[str, Any]) -> None:
        try:
            write_record(self.path, record)
        except OSError as e:
            self.failure = f"the run record was not written: {self.path}: {e.strerror or e}"
        else:
            self.failure = None


class SupervisorError(VlaunchError):
    """The supervisor did not start: nothing of the launch may run without it."""

    exit_code = pf.EXIT_INTERNAL


SUPERVISOR_READY_SECONDS = 30.0
"""How long the supervisor may take to say it runs (an interpreter's start on a busy box) before serve gives up."""

# The supervisor's interpreter runs isolated (-I: no current directory, PYTHONPATH or user site on sys.path) and
# loads this very `launcher` package from its directory, so nothing in the directory `serve` runs from (a
# `launcher/` package, a `launcher.py`) can stand in for it.
_SUPERVISOR_BOOT = (
    "import importlib.util, sys\n"
    "pkg = sys.argv.pop(1)\n"
    "init = pkg + '/__init__.py'\n"
    "spec = importlib.util.spec_from_file_location('launcher', init, submodule_search_locations=[pkg])\n"
    "mod = importlib.util.module_from_spec(spec); sys.modules['launcher'] = mod; spec.loader.exec_module(mod)\n"
    "from launcher.run.supervise import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


@dataclass
class Supervisor:
    """The `launcher.run.supervise` process of one launch and the write end of its pipe."""

    proc: subprocess.Popen[bytes]
    fd: int

    @classmethod
    def start(
        cls,
        run_id: str,
        *,
        container: str | None,
        record: Path,
        runtime: str = "docker",
        check: Callable[[], None] = lambda: None,
    ) -> Supervisor:
        """Start it and wait until it says it runs (on a pipe of its own); SupervisorError when it does not.
        `check` is called while it waits (a signal's _Stop)."""
        r, w = os.pipe()  # both ends close-on-exec: only the supervisor gets `r` (pass_fds), vLLM neither
        ready_r, ready_w = os.pipe()
        package = Path(sup.__file__).resolve().parent.parent  # launcher/, which the boot loads as `launcher`
        argv = [sys.executable, "-I", "-c", _SUPERVISOR_BOOT, str(package)]
        argv += ["--fd", str(r), "--ready-fd", str(ready_w), "--run-id", run_id, "--record", str(record)]
        argv += ["--container", container, "--runtime", runtime] if container else []
        env = {k: v for k, v in os.environ.items() if k not in sup.MARKERS}
        proc: subprocess.Popen[bytes] | None = None
        try:
            try:
                proc = subprocess.Popen(
                    argv,
                    pass_fds=(r, ready_w),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    env=env,
                    start_new_session=True,  # outside our process group: what kills ours does not kill it
                )
            finally:
                os.close(r)
                os.close(ready_w)
            said = _read_ready(ready_r, SUPERVISOR_READY_SECONDS, check)
            if said != sup.READY:
                why = "it exited" if proc.poll() is not None else f"no word within {SUPERVISOR_READY_SECONDS:.0f} s"
                raise SupervisorError(f"the supervisor process did not start ({why}); nothing was launched")
            return cls(proc, w)
        except OSError as e:
            _abandon(proc, w)
            why = e.strerror or str(e)
            raise SupervisorError(f"the supervisor process did not start ({why}); nothing was launched") from None
        except BaseException:
            _abandon(proc, w)
            raise
        finally:
            os.close(ready_r)

    def done(self) -> None:
        """vLLM is stopped: tell the supervisor, which then exits."""
        with contextlib.suppress(OSError):
            os.write(self.fd, sup.DONE)
        with contextlib.suppress(OSError):
            os.close(self.fd)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


def _read_ready(fd: int, timeout: float, check: Callable[[], None]) -> bytes:
    """What the supervisor writes on its ready pipe before it closes it (or dies), read for up to `timeout` s;
    `check` is called every PUMP_POLL seconds (it raises to stop the wait)."""
    got = b""
    end = time.monotonic() + timeout
    while got != sup.READY and len(got) < 64 and (left := end - time.monotonic()) > 0:
        check()
        readable, _, _ = select.select([fd], [], [], min(left, PUMP_POLL))
        if not readable:
            continue
        chunk = os.read(fd, 64)
        if not chunk:
            break
        got += chunk
    return got


def _abandon(proc: subprocess.Popen[bytes] | None, fd: int) -> None:
    """A supervisor that did not start: close its pipe and make sure it is gone."""
    with contextlib.suppress(OSError):
        os.close(fd)
    if proc is not None:
        with contextlib.suppress(OSError):
            proc.kill()
        with contextlib.suppress(subprocess.SubprocessError):
            proc.wait(5)


def _launched_container(argv: tuple[str, ...] | list[str]) -> tuple[str, str] | None:
    """(the runtime, the --name) of a `docker run` / `podman run` launch (vlaunch gives every container one)."""
    runtime = Path(argv[0]).name if argv else ""
    if runtime not in ("docker", "podman") or list(argv[1:2]) != ["run"] or "--name" not in argv:
        return None
    i = list(argv).index("--name")
    return (runtime, argv[i + 1]) if i + 1 < len(argv) else None


def stop_container(name: str, runtime: str = "docker") -> None:
    """`docker stop NAME`, for a container that outlived its `docker run` client (SIGKILL is not proxied)."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run([runtime, "stop", "-t", "10", name], capture_output=True, timeout=30, check=False)


WATCH_EVERY = 2.0  # seconds between the watchdog's looks at /proc/meminfo and vLLM's resident memory
_MAX_EVENTS = 100  # a run record keeps the first watchdog events; a flapping box does not grow it without end


def _sample(seconds: float, root: int, known: list[psutil.Process]) -> MemSample:
    """MemAvailable, the page cache, used memory and the launch's resident set, now."""
    try:
        meminfo = machines.read_meminfo()
    except (OSError, machines.MachineError):
        meminfo = {}
    try:
        tree = [psutil.Process(root), *guard.descendants(root)]
    except psutil.Error:
        tree = []
    rss = 0
    for p in _merge(tree, known):
        with contextlib.suppress(psutil.Error):
            rss += p.memory_info().rss
    return sample_from_meminfo(seconds, meminfo, rss)


def _note_watchdog(record: dict[str, Any], event: Event, echo: Callable[[str], None]) -> None:
    """Print the watchdog's line and keep the event in the run record."""
    echo(event.line())
    events = record.setdefault("watchdog", [])
    if len(events) < _MAX_EVENTS:
        events.append(event.to_json())


def write_record(path: Path, record: dict[str, Any]) -> None:
    """Write a run record atomically: a reader sees the old record or the new one, never half of one. Mode 0600:
    it holds the launch's command and environment. Raises OSError."""
    write_atomic(path, json.dumps(record, indent=2), mode=0o600)


def _calibrate_cpu(plan: Plan, f: LogFacts, record: dict[str, Any], echo: Callable[[str], None]) -> None:
    """A CPU run measures the worker's resident memory: keep it for the next plan on this box."""
    p = plan.prediction
    if p.args.platform != "cpu" or f.kv_pool_tokens is None or f.total_memory_gib is None:
        return
    if f.gpu_memory_utilization is None or f.requested_memory_gib is None or p.args.kv_cache_memory_bytes:
        return
    pool_bytes = vp.pool_bytes_from_tokens(p.layout, p.args.context(), f.kv_pool_tokens)
    base = calibration.cpu_worker_from_log(
        f.total_memory_gib, float(f.gpu_memory_utilization), pool_bytes, p.weights_bytes
    )
    total = round(f.total_memory_gib * GiB)
    source = f"serve {plan.profile.name} ({record.get('log') or 'this run'})"
    if (problem := calibration.cpu_worker_problem(base, total, source)) is not None:
        record["calibration"] = {"ignored": problem}  # a worker of negative size or more than the box: no measurement
        echo(problem)
        return
    with contextlib.suppress(OSError):
        entry = calibration.record_cpu_worker(
            "cpu",
            V.fmt_version(p.args.version),
            plan.profile.vllm.python,
            base,
            source,
            family=plan.shape.family,
            total_bytes=total,
            budget_bytes=math.ceil(total * float(f.gpu_memory_utilization)),
        )
        record["calibration"] = {"cpu_worker_base_bytes": entry.base_bytes, "runs": entry.runs,
                                 "measured_bytes": base}  # fmt: skip


def _finish(record: dict[str, Any], watcher: Watcher, wall: float | None) -> dict[str, Any]:
    record["logged"] = watcher.facts.to_json()
    record["timings"] = {"stages": dict(watcher.stages), **({"wall_seconds": round(wall, 2)} if wall else {})}
    return record


def _metrics_line(check: dict[str, Any]) -> str:
    odd = f" (malformed: {', '.join(check['malformed'])})" if check.get("malformed") else ""
    if not check.get("available"):
        return "not available" + odd
    parts = []
    if "num_gpu_blocks" in check:
        parts.append(f"num_gpu_blocks {check['num_gpu_blocks']:,}")
    if "kv_cache_size_tokens" in check:
        parts.append(f"kv_cache_size_tokens {check['kv_cache_size_tokens']:,}")
    if not parts:
        return "not available" + odd
    agrees = " — agrees with the log" if check.get("agree") else " — DISAGREES with the log"
    return ", ".join(parts) + agrees + odd


LINE_CAP = STREAM_LINE_CAP
"""The most of one line of vLLM's output read, logged and parsed; the rest of a longer line is dropped unread."""


PUMP_POLL = 0.2
"""How often (seconds) the reader of vLLM's output looks whether the run is done, when vLLM says nothing."""


def _pump(
    stream: IO[bytes] | None, q: queue.Queue[bytes | None], cap: int = LINE_CAP, done: threading.Event | None = None
) -> None:
    """Queue vLLM's output a line at a time, each line cut at `cap` bytes (and ended with a newline): a process
    that writes without newlines cannot grow this one. Ends (with None queued) at the end of the output, or within
    PUMP_POLL seconds once `done` is set: a process that kept the pipe open (a daemonised child) cannot keep it."""
    cutter = _LineCutter(cap)
    with contextlib.suppress(ValueError, OSError):
        for chunk in _chunks(stream, done or threading.Event()):
            for line in cutter.feed(chunk):
                if not _put(q, line, done):
                    return
    tail = cutter.end()
    if tail and not _put(q, tail, done):
        return
    _put(q, None, done)


def _chunks(stream: IO[bytes] | None, done: threading.Event) -> Iterator[bytes]:
    """What `stream` says, as it comes: a pipe read unbuffered, with a look at `done` every PUMP_POLL seconds."""
    if stream is None:
        return
    try:
        fd = stream.fileno()
    except (OSError, AttributeError):  # a stream without a descriptor (io.UnsupportedOperation is an OSError)
        yield from iter(lambda: stream.read(1 << 16), b"")
        return
    while not done.is_set():
        ready, _, _ = select.select([fd], [], [], PUMP_POLL)
        if ready:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return
            yield chunk


def _put(q: queue.Queue[bytes | None], item: bytes | None, done: threading.Event | None) -> bool:
    """Queue `item`, waiting while the queue is full; False when the run is done first."""
    while True:
        try:
            q.put(item, timeout=PUMP_POLL)
            return True
        except queue.Full:
            if done is not None and done.is_set():
                return False


class _LineCutter:
    """Bytes into lines of at most `cap` bytes with their newline; the rest of a longer line is dropped as it
    comes, never held whole."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.buf = bytearray()
        self.dropping = False  # inside the rest of an over-long line

    def feed(self, chunk: bytes) -> list[bytes]:
        out: list[bytes] = []
        parts = chunk.split(b"\n")
        for i, part in enumerate(parts):
            ended = i < len(parts) - 1  # a newline followed this part
            if self.dropping:
                self.dropping = not ended
                continue
            self.buf += part
            if ended and len(self.buf) < self.cap:  # a whole line, its newline within the cap
                out.append(bytes(self.buf) + b"\n")
            elif len(self.buf) >= self.cap:  # cut: the first `cap` bytes, the rest dropped up to the newline
                out.append(bytes(self.buf[: self.cap]) + b"\n")
                self.dropping = not ended
            else:
                continue
            self.buf.clear()
        return out

    def end(self) -> bytes:
        """What is left without a newline when the output ends."""
        return bytes(self.buf)


def _merge(a: list[psutil.Process], b: list[psutil.Process]) -> list[psutil.Process]:
    seen = {p.pid for p in a}
    return a + [p for p in b if p.pid not in seen]


def _connect_host(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
