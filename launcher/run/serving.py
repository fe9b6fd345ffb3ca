"""The serve policy: what `vlaunch serve` refuses, in which order, and how it runs vLLM on one box or a Ray cluster.

The command line parses and prints; everything it decides lives here: the plan-and-guard refusal and its text, the
pre-flight order, the cluster's start → check → run → tear-down, and stopping the server a lock names.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from launcher.common.errors import VlaunchError
from launcher.plan.planning import Plan
from launcher.run import cluster, guard
from launcher.run import preflight as pf
from launcher.run import supervise as sup

EXIT_DOES_NOT_FIT = 3
EXIT_BOX_HELD = 4
EXIT_USAGE = 2
EXIT_WATCHDOG = pf.EXIT_WATCHDOG

Echo = Callable[[str], None]


@dataclass(frozen=True)
class ServeOptions:
    """How one `serve` runs, beyond its plan."""

    logs_dir: Path = Path("logs")
    force: bool = False  # launch even when the plan does not fit
    verbose: bool = False  # echo every vLLM line
    stop_after_ready: bool = False  # stop once /health answers (tests, smoke checks)
    skip_preflight: bool = False
    stop_below_bytes: int | None = None  # the watchdog stops vLLM when MemAvailable falls below this
    ready_timeout: float = 1800.0


@dataclass(frozen=True)
class Refusal:
    """Why a launch does not happen: the exit code and one line for stderr."""

    code: int
    line: str


def refusal(plan: Plan, verdict: str, *, force: bool, dry_run: bool) -> Refusal | None:
    """The plan-and-guard decision, in order: a plan that does not fit (unless forced), then a box another vLLM
    holds (a dry run starts nothing, so only the plan can refuse it)."""
    if not plan.fits and not force:
        return Refusal(EXIT_DOES_NOT_FIT, "refusing to launch: the plan does not fit (--force to launch anyway)")
    if verdict != "free" and not dry_run:
        return Refusal(EXIT_BOX_HELD, f"refusing to launch: {verdict}")
    if plan.profile.vllm.exec_container and not dry_run:
        return Refusal(
            EXIT_USAGE,
            f"refusing to launch: vLLM inside the running container {plan.profile.vllm.exec_container} (docker exec) "
            "outlives any stop vlaunch can send it; start it there from `vlaunch render --as script`, or give "
            "the container's own `docker run`",
        )
    return None


def preflight_here(plan: Plan, options: ServeOptions) -> bool:
    """Whether pre-flight runs on this machine: not when skipped, and for several nodes only on the head
    (`cluster.preflight` checks every node before Ray starts)."""
    p = plan.profile
    return not options.skip_preflight and (not p.nodes or cluster.is_local(cluster.head(p)))


def preflight_lines(findings: list[pf.Refusal] | None, skipped: str) -> list[str]:
    """`pre-flight: ok`, or a line per finding (`refused (CODE):` / `warning:`); `skipped` when none ran."""
    if findings is None:
        return [f"pre-flight: {skipped}"]
    lines = [f"pre-flight: {'refused (' + str(f.code) + ')' if f.refuse else 'warning'}: {f.line()}" for f in findings]
    return lines if pf.refusals(findings) else [*lines, "pre-flight: ok"]


def cluster_dry_run_lines(plan: Plan) -> list[str]:
    """What a multi-node serve would run on every node, in order, without running it."""
    p = plan.profile
    h = cluster.head(p)
    lines = ["pre-flight on every node:"]
    lines += [f"  [{what}] {cmd.shown()}" for what, cmd in cluster.preflight_commands(p)]
    lines += ["Ray cluster:", *(f"  {cmd.shown()}" for cmd in cluster.start_commands(p))]
    lines.append(f"  check: {cluster.resources_command(p).shown()}")
    lines.append(f"vLLM on the head ({h.host}) with RAY_ADDRESS={ray_address(plan)}")
    lines += ["tear-down:", *(f"  {cmd.shown()}" for cmd in cluster.stop_commands(p))]
    return lines


def ray_address(plan: Plan) -> str:
    """The address vLLM's Ray executor joins: the head node's Ray port."""
    return f"{cluster.head(plan.profile).host}:{cluster.RAY_PORT}"


@dataclass(frozen=True)
class Served:
    """How a launch ended: the exit code, the run record's path, and the one-line error when vLLM never started."""

    exit_code: int
    record_path: Path | None  # None: the record could not be written (`warning` says why)
    error: str | None = None
    warning: str | None = None


def launch(plan: Plan, options: ServeOptions, *, echo: Echo) -> Served:
    """Run vLLM for a plan that passed the guard and pre-flight: on this box, or on the Ray cluster its nodes make."""
    if plan.profile.nodes:
        return _launch_cluster(plan, options, echo=echo)
    return _launch_local(plan, options, echo=echo)


def _launch_local(plan: Plan, options: ServeOptions, *, echo: Echo, env: dict[str, str] | None = None) -> Served:
    from launcher.run.launch import serve as run_server

    run = run_server(
        plan,
        logs_dir=options.logs_dir,
        echo=echo,
        verbose=options.verbose,
        ready_timeout=options.ready_timeout,
        stop_after_ready=options.stop_after_ready,
        stop_below_bytes=options.stop_below_bytes,
        extra_env=env or {},
    )
    return Served(run.exit_code, None if run.warning else run.record_path, run.error, run.warning)


def _launch_cluster(plan: Plan, options: ServeOptions, *, echo: Echo) -> Served:
    """Check every node, start Ray on them, check the cluster's resources, run vLLM on the head, tear Ray down
    (also after a failed start: whatever came up goes down)."""
    p = plan.profile
    h = cluster.head(p)
    if not cluster.is_local(h):
        raise cluster.ClusterError(f"run `vlaunch serve` on the head node ({h.host}); this machine is not it")
    problems = cluster.preflight(p)
    if problems:
        raise cluster.ClusterError("nodes not ready, nothing started: " + "; ".join(problems))
    echo("starting the Ray cluster:")
    try:
        cluster.start(p, echo=echo)
        res = cluster.check_resources(p, p.tensor_parallel_size * p.pipeline_parallel_size)
        echo(f"Ray cluster: {res['nodes']} node(s), resources {res['resources']}")
        return _launch_local(plan, options, echo=echo, env={"RAY_ADDRESS": ray_address(plan)})
    finally:
        left = cluster.stop(p)
        echo("Ray stopped on every node" if not left else "; ".join(left))


def stop_holder(holder: dict[str, object], timeout: float) -> sup.Stopped:
    """Stop the server the box lock names: SIGTERM to its vlaunch (which forwards it to vLLM, waits, kills, and
    releases the lock), then, when the lock is still held `timeout` + 10 s later, the whole tree by force. Only the
    process the lock proves is signalled (`guard.holder_here`); returns what of its tree still runs."""
    pid = holder.get("pid")
    if pid is None:
        raise guard.LockError("names no valid vlaunch pid: nothing signalled", source=str(guard.lock_path()))
    if holder.get("pidns") != sup.pid_namespace():
        raise guard.GuardError(
            f"the box lock was taken in another pid namespace (a container?), where its vlaunch pid {pid} is another "
            "process than here: nothing signalled; stop it where it runs"
        )
    proven = guard.holder_here(holder)
    if proven is None:
        raise guard.GuardError(
            f"vlaunch pid {pid} in the box lock is not the process that took it (gone, its pid reused, or a lock "
            "without its start time): nothing signalled"
        )
    _may_signal(*proven)
    sup.send(*proven, signal.SIGTERM)
    end = time.monotonic() + timeout + 10  # vlaunch itself waits `stop_tree`'s grace before it kills
    while time.monotonic() < end and guard.read_holder() is not None:
        time.sleep(0.2)
    if guard.read_holder() is not None:
        return guard.stop_tree_checked(proven[0], started=proven[1], timeout=5)
    return sup.Stopped([], [])


def _may_signal(pid: int, started: int) -> None:
    """Refuse (one line) a process this user may not signal, before anything is sent."""
    try:
        sup.send(pid, started, 0)
    except PermissionError:
        raise guard.GuardError(f"cannot signal pid {pid}: operation not permitted") from None


def stop_pid(pid: int, timeout: float) -> sup.Stopped:
    """Stop one vLLM process tree `vlaunch ps` lists; returns what still runs."""
    if sup.plausible_pid(pid) is None:
        raise VlaunchError(f"pid {pid}: vlaunch signals no pid below 2 (1 is init) or above pid_max")
    started = sup.start_time(pid)
    if started is None or pid not in {i.pid for i in guard.scan()} or sup.start_time(pid) != started:
        raise VlaunchError(f"pid {pid} is not a vLLM process (see `vlaunch ps`)")
    _may_signal(pid, started)
    return guard.stop_tree_checked(pid, started=started, timeout=timeout)
