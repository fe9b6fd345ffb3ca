"""Several nodes: Ray's head and workers started over ssh, checked before vLLM starts, torn down after.

vLLM distributes itself (its Ray executor); vlaunch only brings up the Ray cluster the plan needs, verifies it,
and runs the guard on every node. Commands are argv lists; a remote one is handed to ssh as one quoted string.
Loopback hosts run locally, so a one-machine Ray cluster on 127.0.0.1 exercises the same code.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path

from launcher.common.chars import escaped
from launcher.common.errors import VlaunchError
from launcher.common.records import dataclass
from launcher.plan.profiles import NodeSpec, Profile

RAY_PORT = 6379
LOOPBACK = {"127.0.0.1", "localhost", "::1"}

Runner = Callable[..., "subprocess.CompletedProcess[str]"]


class ClusterError(VlaunchError):
    """A node is unreachable, lacks Ray, or the cluster does not have what the plan needs."""

    exit_code = 5


@dataclass(frozen=True)
class NodeCommand:
    node: NodeSpec
    argv: tuple[str, ...]  # what runs on the node
    local: bool

    @property
    def full_argv(self) -> list[str]:
        """The argv this machine executes: the command itself, or ssh carrying it."""
        if self.local:
            return list(self.argv)
        dest = self.node.ssh or self.node.host
        return ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", dest, "--", shlex.join(self.argv)]

    def shown(self) -> str:
        return shlex.join(self.full_argv)


def is_local(node: NodeSpec) -> bool:
    return node.host in LOOPBACK and node.ssh is None


def head(profile: Profile) -> NodeSpec:
    return next(n for n in profile.nodes if n.role == "head")


def ray_executable(profile: Profile) -> str:
    """The `ray` beside the interpreter that runs vLLM (module launch), else `ray` on PATH."""
    py = profile.vllm.python
    if py and "/" in py:
        return str(Path(py).parent / "ray")
    return "ray"


def _on(node: NodeSpec, *argv: str) -> NodeCommand:
    return NodeCommand(node, tuple(argv), is_local(node))


VLLM_PGREP = (
    r"^([^ ]*/)?(python[0-9.]* +(-[^ ]+ +)*)?([^ ]*/)?[v]llm serve( |$)"
    r"|^([^ ]*/)?python[0-9.]* +(-[^ ]+ +)*-m [v]llm\.entrypoints"
    r"|^[Vv][Ll][Ll][Mm]::"
)
"""`pgrep -f`'s pattern for a vLLM (as `guard._role` reads one: the program a command line runs, not what it
mentions). The bracket in `[v]llm` keeps it from matching itself: a remote shell that runs pgrep as a child
(dash, sh) holds the pattern's text in its own command line, which has `[v]llm` where the pattern needs `vllm`."""


def preflight_commands(profile: Profile) -> list[tuple[str, NodeCommand]]:
    ray = ray_executable(profile)
    out: list[tuple[str, NodeCommand]] = []
    for n in profile.nodes:
        out.append(("reachable", _on(n, "true")))
        out.append(("ray", _on(n, ray, "--version")))
        if n.machine not in ("cpu",):
            out.append(("gpus", _on(n, "nvidia-smi", "-L")))
        out.append(("guard", _on(n, "pgrep", "-af", VLLM_PGREP)))
    return out


def start_commands(profile: Profile, port: int = RAY_PORT) -> list[NodeCommand]:
    ray = ray_executable(profile)
    h = head(profile)
    cpu = h.machine == "cpu"
    resources = ["--num-cpus", str(h.gpus)] if cpu else ["--num-gpus", str(h.gpus)]
    cmds = [
        _on(
            h,
            ray,
            "start",
            "--head",
            "--port",
            str(port),
            "--node-ip-address",
            h.host,
            *resources,
            "--disable-usage-stats",
            "--include-dashboard=false",
        ),
    ]
    for n in profile.nodes:
        if n.role == "head":
            continue
        res = ["--num-cpus", str(n.gpus)] if n.machine == "cpu" else ["--num-gpus", str(n.gpus)]
        cmds.append(_on(n, ray, "start", "--address", f"{h.host}:{port}", "--node-ip-address", n.host, *res))
    return cmds


def resources_command(profile: Profile, port: int = RAY_PORT) -> NodeCommand:
    """On the head: the cluster's alive nodes and resources, as JSON, from Ray itself."""
    h = head(profile)
    py = profile.vllm.python or "python3"
    code = (
        'import json, ray; ray.init(address="auto", logging_level="ERROR"); '
        'print(json.dumps({"resources": ray.cluster_resources(), '
        '"nodes": sum(1 for n in ray.nodes() if n["Alive"])}))'
    )
    return _on(h, py, "-c", code)


def stop_commands(profile: Profile) -> list[NodeCommand]:
    ray = ray_executable(profile)
    return [_on(n, ray, "stop", "--force") for n in profile.nodes]


def run(cmd: NodeCommand, *, runner: Runner = subprocess.run, timeout: float = 60, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    try:
        return runner(cmd.full_argv, capture_output=True, text=True, timeout=timeout, check=False, env=env)
    except FileNotFoundError as e:
        return subprocess.CompletedProcess(cmd.full_argv, 127, "", f"{e.filename}: not found")
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(cmd.full_argv, 124, "", f"timed out after {timeout:.0f} s")


def preflight(profile: Profile, *, runner: Runner = subprocess.run) -> list[str]:
    """Problems per node, found before anything starts (empty: all nodes are ready)."""
    problems: list[str] = []
    unreachable: set[str] = set()
    for what, cmd in preflight_commands(profile):
        host = cmd.node.host
        if host in unreachable:
            continue
        r = run(cmd, runner=runner, timeout=15)
        detail = (r.stderr or r.stdout).strip().splitlines()[-1:] or [f"exit {r.returncode}"]
        if what == "reachable" and r.returncode != 0:
            unreachable.add(host)
            problems.append(f"{host}: unreachable ({detail[0]})")
        elif what == "ray" and r.returncode != 0:
            problems.append(f"{host}: Ray is missing ({detail[0]}); install ray in vLLM's environment there")
        elif what == "gpus":
            found = sum(1 for line in r.stdout.splitlines() if line.startswith("GPU "))
            if r.returncode != 0 or found < cmd.node.gpus:
                problems.append(f"{host}: {found} GPU(s) visible, the plan needs {cmd.node.gpus}")
        elif what == "guard" and r.returncode == 0 and r.stdout.strip():
            first = escaped(r.stdout.strip().splitlines()[0])[:120]
            problems.append(f"{host}: a vLLM already runs there ({first})")
    return problems


def start(profile: Profile, *, runner: Runner = subprocess.run, echo: Callable[[str], None] = print) -> None:
    for cmd in start_commands(profile):
        echo(f"  {cmd.node.host}: {cmd.shown()}")
        r = run(cmd, runner=runner, timeout=120)
        if r.returncode != 0:
            tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or [f"exit {r.returncode}"]
            raise ClusterError(f"{cmd.node.host}: `ray start` failed: {tail[0]}")


def check_resources(profile: Profile, world_size: int, *, runner: Runner = subprocess.run) -> dict[str, object]:
    """Ray must see every node and, on GPU nodes, at least tp × pp GPUs."""
    r = run(resources_command(profile), runner=runner, timeout=120)
    if r.returncode != 0:
        tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or [f"exit {r.returncode}"]
        raise ClusterError(f"cannot read the Ray cluster's resources: {tail[0]}")
    try:
        data = json.loads(r.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        raise ClusterError(f"unexpected answer from Ray: {r.stdout[-200:]!r}") from None
    nodes = int(data.get("nodes", 0))
    if nodes < len(profile.nodes):
        raise ClusterError(f"Ray sees {nodes} node(s); the profile has {len(profile.nodes)}")
    gpu_nodes = [n for n in profile.nodes if n.machine != "cpu"]
    gpus = float(data.get("resources", {}).get("GPU", 0))
    if gpu_nodes and gpus < world_size:
        raise ClusterError(f"Ray sees {gpus:.0f} GPU(s); tensor × pipeline parallel needs {world_size}")
    return dict(data)


def stop(profile: Profile, *, runner: Runner = subprocess.run) -> list[str]:
    problems = []
    for cmd in stop_commands(profile):
        r = run(cmd, runner=runner, timeout=60)
        if r.returncode != 0:
            problems.append(f"{cmd.node.host}: `ray stop` exited {r.returncode}")
    return problems
