"""Pre-flight: each refusal with its exit code and one-line message, made real on this box where it can be (a
missing executable or python, docker without a daemon, no GPU, a held port, a missing model directory, offline
and uncached), through injected probes otherwise (gated repo, too few GPUs, no NVIDIA runtime); nothing is
launched after a refusal, and a launch that cannot start its executable records the exit code vlaunch ends with.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from launcher.cli import main
from launcher.plan.machines import CATALOG
from launcher.plan.planning import make_plan
from launcher.plan.profiles import load_profile
from launcher.run import guard, launch
from launcher.run import preflight as pf

TINY = Path(__file__).parent / "fixtures" / "tiny-llama" / "config.json"


# --- helpers ----------------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def script(path: Path, body: str) -> Path:
    """An executable shell script standing in for vLLM (never the real one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return path


def model_dir(tmp_path: Path) -> Path:
    d = tmp_path / "model"
    d.mkdir(exist_ok=True)
    shutil.copy(TINY, d / "config.json")
    return d


def write_profile(
    tmp_path: Path,
    *,
    machine: str = "cpu",
    launch_mode: str = "cli",
    executable: str | None = None,
    python: str | None = None,
    image: str | None = None,
    port: int | None = None,
    model: str | None = None,
    config: str | None = None,
    extra: str = "",
) -> Path:
    """A small profile (the tiny Llama) that fits anywhere; each test breaks one thing."""
    if executable is None and launch_mode == "cli":
        executable = str(script(tmp_path / "bin" / "vllm", "exit 0"))
    lines = [
        "name: pf",
        f"model: {model or model_dir(tmp_path)}",
        f"machine: {machine}",
        "max_model_len: 2048",
        "gpu_memory_utilization: 0.3" if machine == "cpu" else "",
        *([f"config: {config}"] if config else []),
        extra,
        "vllm:",
        '  version: "0.19.0"',
        f"  launch: {launch_mode}",
        f"  port: {port or free_port()}",
        *([f"  executable: {executable}"] if executable else []),
        *([f"  python: {python}"] if python else []),
        *([f"  image: {image}"] if image else []),
    ]
    path = tmp_path / "pf.yaml"
    path.write_text("\n".join(line for line in lines if line) + "\n")
    return path


def plan_for(path: Path) -> Any:
    return make_plan(load_profile(path))


def quiet(**overrides: Any) -> pf.Probes:
    """Probes that find everything in order; a test replaces the one it is about. The hub is never asked unless
    a test says so."""

    def no_hub(repo: str, token: str | None, timeout: float) -> pf.HubAnswer:
        raise AssertionError("the hub must not be asked here")

    base: dict[str, Any] = {
        "which": lambda name: name if "/" in name else f"/usr/bin/{name}",
        "run": lambda argv, timeout, env: subprocess.CompletedProcess(list(argv), 0, "{}", ""),
        "gpus": lambda: pf.GpuState(None),
        "port": lambda host, port: None,
        "hf_cache": lambda repo, env: None,
        "hub": no_hub,
        "environ": {},
        "cdi_dirs": (),
    }
    base.update(overrides)
    return pf.Probes(**base)


def serve(tmp_path: Path, profile: Path, *args: str) -> Any:
    return CliRunner().invoke(main, ["serve", str(profile), "--logs-dir", str(tmp_path / "logs"), *args])


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("vlaunch: error:")]


@pytest.fixture
def launched(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[list[Any]]:
    """Replaces the launch: records each call instead of starting anything."""
    calls: list[Any] = []

    def fake(plan: Any, **kw: Any) -> launch.RunResult:
        calls.append(plan)
        return launch.RunResult(0, {}, tmp_path / "x.log", tmp_path / "x.json")

    monkeypatch.setattr(launch, "serve", fake)
    yield calls


def assert_refused(r: Any, code: int, *needles: str, tmp_path: Path, launched: list[Any]) -> str:
    """Exit `code`, exactly one `vlaunch: error:` line holding the needles, nothing launched, no run files."""
    assert r.exit_code == code, (r.exit_code, r.stdout[-2000:], r.stderr)
    lines = error_lines(r.stderr)
    assert len(lines) == 1, r.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    assert "; " in lines[0]  # what; fix
    assert launched == []
    assert not (tmp_path / "logs").exists()
    return lines[0]


# --- 5: missing executable --------------------------------------------------------------------------------------


def test_missing_vllm_executable_path(tmp_path: Path, launched: list[Any]) -> None:
    prof = write_profile(tmp_path, executable=str(tmp_path / "nowhere" / "vllm"))
    line = assert_refused(serve(tmp_path, prof), 5, tmp_path=tmp_path, launched=launched)
    assert line == (
        f"vlaunch: error: vLLM's executable {tmp_path}/nowhere/vllm not found; install vLLM (`pip install vllm`), "
        "set vllm.executable (--vllm-executable) to it, or launch with vllm.launch: module and vllm.python"
    )


def test_missing_vllm_on_path(tmp_path: Path, launched: list[Any]) -> None:
    prof = write_profile(tmp_path, executable="vllm-not-installed-here")
    assert_refused(
        serve(tmp_path, prof), 5, "vllm-not-installed-here not found on PATH", tmp_path=tmp_path, launched=launched
    )


def test_vllm_not_executable(tmp_path: Path, launched: list[Any]) -> None:
    exe = tmp_path / "bin" / "vllm"
    exe.parent.mkdir()
    exe.write_text("not a program")
    prof = write_profile(tmp_path, executable=str(exe))
    assert_refused(serve(tmp_path, prof), 5, f"{exe} not executable", tmp_path=tmp_path, launched=launched)


def test_missing_python_for_module_launch(tmp_path: Path, launched: list[Any]) -> None:
    py = tmp_path / ".venv-vllm" / "bin" / "python"
    prof = write_profile(tmp_path, launch_mode="module", python=str(py))
    line = assert_refused(serve(tmp_path, prof), 5, tmp_path=tmp_path, launched=launched)
    assert line == (
        f"vlaunch: error: vLLM's python {py} not found; `make vllm-cpu` builds it, or set vllm.python (--python) "
        "to a python that has vLLM"
    )


@pytest.mark.skipif(
    __import__("importlib").util.find_spec("vllm") is not None, reason="this python has vLLM: nothing is missing"
)
def test_python_without_vllm(tmp_path: Path, launched: list[Any]) -> None:
    prof = write_profile(tmp_path, launch_mode="module", python=sys.executable)
    assert_refused(
        serve(tmp_path, prof), 5, f"vLLM is not installed in {sys.executable}", tmp_path=tmp_path, launched=launched
    )


def test_module_check_reads_the_pythons_answer(tmp_path: Path) -> None:
    plan = plan_for(write_profile(tmp_path, launch_mode="module", python="/opt/py/bin/python"))
    seen: list[list[str]] = []

    def run(rc: int, err: str = "") -> Any:
        def _run(argv: Any, timeout: float, env: Any) -> subprocess.CompletedProcess[str]:
            seen.append(list(argv))
            return subprocess.CompletedProcess(list(argv), rc, "", err)

        return _run

    assert pf.preflight(plan, probes=quiet(run=run(0))) == []
    assert seen[0][:2] == ["/opt/py/bin/python", "-c"] and "find_spec('vllm')" in seen[0][2]
    [f] = pf.preflight(plan, probes=quiet(run=run(1)))
    assert (f.code, f.refuse) == (5, True) and "vLLM is not installed in /opt/py/bin/python" in f.what
    [f] = pf.preflight(plan, probes=quiet(run=run(1, "Fatal Python error: init_fs_encoding\n")))
    assert f.code == 5 and "fails to start (Fatal Python error: init_fs_encoding)" in f.what

    def slow(argv: Any, timeout: float, env: Any) -> subprocess.CompletedProcess[str]:
        raise subprocess.TimeoutExpired(list(argv), timeout)

    [f] = pf.preflight(plan, probes=quiet(run=slow))
    assert (f.code, f.refuse) == (5, False)  # cannot tell: a warning


def test_docker_missing(tmp_path: Path, launched: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    prof = write_profile(tmp_path, launch_mode="container", image="example/vllm:1")
    assert_refused(
        serve(tmp_path, prof),
        5,
        "docker not found (this profile runs vLLM in a container); install Docker Engine",
        tmp_path=tmp_path,
        launched=launched,
    )


# --- 6: container runtime ---------------------------------------------------------------------------------------


def _docker_answers() -> bool:
    if shutil.which("docker") is None:
        return True
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=15, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.skipif(_docker_answers(), reason="needs docker installed without a reachable daemon (as on this box)")
def test_docker_daemon_unreachable(tmp_path: Path, launched: list[Any]) -> None:
    prof = write_profile(tmp_path, launch_mode="container", image="example/vllm:1")
    line = assert_refused(serve(tmp_path, prof), 6, "docker", tmp_path=tmp_path, launched=launched)
    assert "Is the docker daemon running?" not in line  # the fix answers it
    assert "sudo systemctl start docker" in line or "usermod -aG docker" in line


def test_docker_runtime_from_probes(tmp_path: Path) -> None:
    plan = plan_for(write_profile(tmp_path, launch_mode="container", image="example/vllm:1"))
    assert "--gpus" in plan.argv

    def info(rc: int, out: str, err: str = "") -> Any:
        return lambda argv, timeout, env: subprocess.CompletedProcess(list(argv), rc, out, err)

    def no_hooks(name: str) -> str | None:
        return "/usr/bin/docker" if name == "docker" else None

    only_runc = info(0, '{"io.containerd.runc.v2":{"path":"runc"},"runc":{"path":"runc"}}\n')
    [f] = [x for x in pf.preflight(plan, probes=quiet(run=only_runc, which=no_hooks)) if x.refuse]
    assert f.code == 6 and "no NVIDIA runtime for --gpus (runtimes: io.containerd.runc.v2, runc)" in f.what
    assert "nvidia-ctk runtime configure --runtime=docker" in f.fix
    # the nvidia runtime, the toolkit's hook on PATH, or an NVIDIA CDI spec: fine
    with_nvidia = info(0, '{"nvidia":{"path":"nvidia-container-runtime"},"runc":{"path":"runc"}}')
    assert not pf.refusals(pf.preflight(plan, probes=quiet(run=with_nvidia, which=no_hooks)))
    assert not pf.refusals(pf.preflight(plan, probes=quiet(run=only_runc)))  # the hook is on PATH
    cdi = tmp_path / "cdi"
    cdi.mkdir()
    (cdi / "nvidia.yaml").write_text("cdiVersion: 0.5.0\n")
    assert not pf.refusals(pf.preflight(plan, probes=quiet(run=only_runc, which=no_hooks, cdi_dirs=(str(cdi),))))
    # unsure (not JSON): no refusal
    assert not pf.refusals(pf.preflight(plan, probes=quiet(run=info(0, "<no value>"), which=no_hooks)))
    # the daemon refuses this user
    denied = info(1, "", "permission denied while trying to connect to the Docker daemon socket\n")
    [f] = pf.refusals(pf.preflight(plan, probes=quiet(run=denied)))
    assert f.code == 6 and "sudo usermod -aG docker $USER" in f.fix


def test_docker_not_asked_when_missing(tmp_path: Path) -> None:
    plan = plan_for(write_profile(tmp_path, launch_mode="container", image="example/vllm:1"))

    def never(argv: Any, timeout: float, env: Any) -> Any:
        raise AssertionError("docker info must not run without docker")

    found = pf.preflight(plan, probes=quiet(which=lambda name: None, run=never))
    assert [f.code for f in pf.refusals(found)] == [5]


# --- 7 and 8: GPU and machine -----------------------------------------------------------------------------------


def _has_nvidia() -> bool:
    return shutil.which("nvidia-smi") is not None


@pytest.mark.skipif(_has_nvidia(), reason="needs a box without an NVIDIA GPU (as this one)")
def test_spark_profile_on_a_box_without_gpu(tmp_path: Path, launched: list[Any]) -> None:
    prof = write_profile(tmp_path, machine="dgx-spark")
    line = assert_refused(serve(tmp_path, prof), 8, tmp_path=tmp_path, launched=launched)
    assert line == (
        "vlaunch: error: this profile is for dgx-spark but this box has no NVIDIA GPU; `vlaunch plan` or "
        "`vlaunch serve --dry-run` show the plan, `make demo` runs a tiny model on vLLM's CPU build"
    )


def test_gpu_checks_from_probes(tmp_path: Path) -> None:
    h100 = CATALOG["h100-80gb"]
    plan = plan_for(write_profile(tmp_path, machine="h100-80gb", extra="tensor_parallel_size: 2"))
    [f] = pf.preflight(plan, probes=quiet(gpus=lambda: pf.GpuState(h100, 1)))
    assert (f.code, f.refuse) == (7, True)
    assert f.what == "this plan needs 2 GPUs (tensor_parallel_size 2 x pipeline_parallel_size 1) but this box has 1"
    assert pf.preflight(plan, probes=quiet(gpus=lambda: pf.GpuState(h100, 2))) == []
    [f] = pf.preflight(plan, probes=quiet(gpus=lambda: pf.GpuState(h100, 2), environ={"CUDA_VISIBLE_DEVICES": "1"}))
    assert f.code == 7 and "has 1 visible (CUDA_VISIBLE_DEVICES=1)" in f.what
    # nvidia-smi there but failing: a GPU problem here, not another machine
    broken = pf.GpuState(None, 0, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver")
    [f] = pf.preflight(plan, probes=quiet(gpus=lambda: broken))
    assert f.code == 7 and "nvidia-smi fails: NVIDIA-SMI has failed" in f.what and "driver" in f.fix
    # no GPU at all: the profile is for another machine
    [f] = pf.preflight(plan, probes=quiet(gpus=lambda: pf.GpuState(None)))
    assert (f.code, f.what) == (8, "this profile is for h100-80gb but this box has no NVIDIA GPU")


def test_machine_mismatch_from_probes(tmp_path: Path) -> None:
    plan = plan_for(write_profile(tmp_path, machine="h100-80gb"))
    smaller = pf.preflight(plan, probes=quiet(gpus=lambda: pf.GpuState(CATALOG["rtx4090"], 1)))
    [f] = smaller
    assert (f.code, f.refuse) == (8, True)
    assert f.what == "this profile is for h100-80gb (79.19 GiB per GPU) but this box's GPU is rtx4090 (23.64 GiB)"
    assert "--machine auto" in f.fix
    [f] = pf.preflight(plan, probes=quiet(gpus=lambda: pf.GpuState(CATALOG["h200"], 1)))
    assert (f.code, f.refuse) == (8, False)  # a bigger GPU: a warning
    assert pf.preflight(plan, probes=quiet(gpus=lambda: pf.GpuState(CATALOG["h100-80gb"], 1))) == []


def test_cpu_profile_never_asks_for_gpus(tmp_path: Path) -> None:
    plan = plan_for(write_profile(tmp_path, machine="cpu"))

    def never() -> pf.GpuState:
        raise AssertionError("a cpu plan must not look for GPUs")

    assert pf.preflight(plan, probes=quiet(gpus=never)) == []


# --- 9: port ----------------------------------------------------------------------------------------------------


def test_port_in_use(tmp_path: Path, launched: list[Any]) -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    try:
        prof = write_profile(tmp_path, port=port)
        line = assert_refused(serve(tmp_path, prof), 9, tmp_path=tmp_path, launched=launched)
        assert line == (
            f"vlaunch: error: port {port} on 127.0.0.1 is in use; see who holds it with `ss -ltnp 'sport = :{port}'`, "
            "stop it, or choose another port with --port (vllm.port)"
        )
    finally:
        holder.close()
    assert pf.probe_port("127.0.0.1", port) is None  # free again


def test_port_not_bindable() -> None:
    assert pf.probe_port("192.0.2.1", 8000) == "Cannot assign requested address"  # not an address of this box
    if os.geteuid() != 0:
        assert pf.probe_port("127.0.0.1", 80) is not None


# --- 10: model --------------------------------------------------------------------------------------------------


def test_model_directory_missing(tmp_path: Path, launched: list[Any]) -> None:
    missing = tmp_path / "no-such-model"
    prof = write_profile(tmp_path, model=str(missing), config=str(TINY))
    line = assert_refused(serve(tmp_path, prof), 10, tmp_path=tmp_path, launched=launched)
    assert line.startswith(f"vlaunch: error: model directory {missing} does not exist; fix model: in the profile")


def test_model_directory_without_config(tmp_path: Path, launched: list[Any]) -> None:
    empty = tmp_path / "weights-only"
    empty.mkdir()
    prof = write_profile(tmp_path, model=str(empty), config=str(TINY))
    assert_refused(
        serve(tmp_path, prof), 10, f"model directory {empty} has no config.json", tmp_path=tmp_path, launched=launched
    )


def test_repo_not_cached_while_offline(tmp_path: Path, launched: list[Any]) -> None:
    # conftest sets HF_HUB_OFFLINE=1 and an empty cache: vLLM, started from here, could not fetch it
    prof = write_profile(tmp_path, model="someorg/tiny-model", config=str(TINY))
    line = assert_refused(serve(tmp_path, prof), 10, tmp_path=tmp_path, launched=launched)
    assert line == (
        "vlaunch: error: someorg/tiny-model is not in the Hugging Face cache and HF_HUB_OFFLINE is set; "
        "download it first (`hf download someorg/tiny-model`), or unset HF_HUB_OFFLINE"
    )


def test_repo_in_the_cache(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    snap = cache / "huggingface" / "hub" / "models--someorg--tiny-model" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    shutil.copy(TINY, snap / "config.json")
    env = {"XDG_CACHE_HOME": str(cache), "HF_HUB_OFFLINE": "1"}
    assert pf.hf_cached("someorg/tiny-model", env) == "config"
    (snap / "model.safetensors").write_bytes(b"x")
    assert pf.hf_cached("someorg/tiny-model", env) == "weights"
    plan = plan_for(write_profile(tmp_path, model="someorg/tiny-model", config=str(TINY)))
    assert pf.preflight(plan, probes=quiet(hf_cache=pf.hf_cached, environ=env)) == []


def test_repo_answers_from_the_hub(tmp_path: Path) -> None:
    plan = plan_for(write_profile(tmp_path, model="meta-llama/Llama-3.1-8B-Instruct", config=str(TINY)))

    def hub(state: str) -> Any:
        return lambda repo, token, timeout: (state, "detail")

    [f] = pf.preflight(plan, probes=quiet(hub=hub("gated")))
    assert (f.code, f.refuse) == (10, True)
    assert f.line() == (
        "meta-llama/Llama-3.1-8B-Instruct is gated; accept its licence on "
        "https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct and export HF_TOKEN=… (a token of that account)"
    )
    [f] = pf.preflight(plan, probes=quiet(hub=hub("gated"), environ={"HF_TOKEN": "hf_x"}))
    assert f.code == 10 and "HF_TOKEN has no access" in f.what
    [f] = pf.preflight(plan, probes=quiet(hub=hub("not_found")))
    assert (f.code, f.refuse, f.what) == (10, True, "meta-llama/Llama-3.1-8B-Instruct is not on huggingface.co")
    [f] = pf.preflight(plan, probes=quiet(hub=hub("unreachable")))
    assert (f.code, f.refuse) == (10, False)  # no network: vLLM may still find it
    assert pf.preflight(plan, probes=quiet(hub=hub("ok"))) == []
    # vlaunch offline, vLLM not: a warning, the hub is not asked
    [f] = pf.preflight(plan, probes=quiet(environ={"VLAUNCH_OFFLINE": "1"}))
    assert (f.code, f.refuse) == (10, False)


def test_gated_repo_through_the_cli(tmp_path: Path, launched: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    real = pf.preflight
    environ = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "VLAUNCH_OFFLINE", "HF_TOKEN")}
    probes = pf.Probes(hub=lambda repo, token, timeout: ("gated", "401"), environ=environ)
    monkeypatch.setattr(pf, "preflight", lambda plan, probes_=None: real(plan, probes=probes))
    prof = write_profile(tmp_path, model="meta-llama/Llama-3.1-8B-Instruct", config=str(TINY))
    assert_refused(
        serve(tmp_path, prof),
        10,
        "meta-llama/Llama-3.1-8B-Instruct is gated; accept its licence",
        "export HF_TOKEN=",
        tmp_path=tmp_path,
        launched=launched,
    )


def test_hub_never_hangs(monkeypatch: pytest.MonkeyPatch) -> None:
    import launcher.model.modelsource as ms

    monkeypatch.setattr(ms, "_hub_reachable", lambda timeout=3.0: True)
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "auth_check", lambda repo, token=None: time.sleep(5))
    t0 = time.monotonic()
    assert pf.hub_resolve("org/name", None, 0.5)[0] == "unreachable"
    assert time.monotonic() - t0 < 2


# --- serve: order, dry-run, skipping ----------------------------------------------------------------------------


def test_all_refusals_listed_exit_is_the_first(tmp_path: Path, launched: list[Any]) -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    try:
        prof = write_profile(
            tmp_path, executable="vllm-not-installed-here", port=holder.getsockname()[1], model=str(tmp_path / "x"),
            config=str(TINY),
        )  # fmt: skip
        r = serve(tmp_path, prof)
    finally:
        holder.close()
    assert r.exit_code == 5
    lines = error_lines(r.stderr)
    assert [line.split(":", 2)[2].split()[0] for line in lines] == ["vLLM's", "port", "model"], lines
    assert launched == []


def test_dry_run_shows_preflight_and_starts_nothing(tmp_path: Path, launched: list[Any]) -> None:
    bad = write_profile(tmp_path, executable=str(tmp_path / "nowhere" / "vllm"))
    r = serve(tmp_path, bad, "--dry-run")
    assert r.exit_code == 0, r.stderr
    assert f"pre-flight: refused (5): vLLM's executable {tmp_path}/nowhere/vllm not found; install" in r.stdout
    assert "pre-flight: ok" not in r.stdout
    r = serve(tmp_path, bad, "--dry-run", "--json")
    data = json.loads(r.stdout)
    [f] = data["preflight"]
    assert f["code"] == 5 and f["refuse"] is True and set(f) == {"code", "what", "fix", "refuse"}
    good = write_profile(tmp_path)
    r = serve(tmp_path, good, "--dry-run")
    assert r.exit_code == 0 and "pre-flight: ok" in r.stdout
    assert json.loads(serve(tmp_path, good, "--dry-run", "--json").stdout)["preflight"] == []
    r = serve(tmp_path, bad, "--dry-run", "--skip-preflight", "--json")
    assert json.loads(r.stdout)["preflight"] is None
    assert launched == [] and not (tmp_path / "logs").exists()


def test_clean_preflight_launches(tmp_path: Path, launched: list[Any]) -> None:
    r = serve(tmp_path, write_profile(tmp_path))
    assert r.exit_code == 0, r.stderr
    assert "pre-flight: ok" in r.stdout and len(launched) == 1


def test_skip_preflight_launches_anyway(tmp_path: Path, launched: list[Any]) -> None:
    prof = write_profile(tmp_path, executable=str(tmp_path / "nowhere" / "vllm"))
    r = serve(tmp_path, prof, "--skip-preflight")
    assert r.exit_code == 0 and len(launched) == 1


# --- the run record's exit is the process's -------------------------------------------------------------------


def _record(tmp_path: Path) -> dict[str, Any]:
    [path] = (tmp_path / "logs").glob("pf-*.json")
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def test_launch_with_missing_executable_records_its_exit(tmp_path: Path) -> None:
    prof = write_profile(tmp_path, executable=str(tmp_path / "nowhere" / "vllm"))
    r = serve(tmp_path, prof, "--skip-preflight")
    assert r.exit_code == 5, (r.stdout[-2000:], r.stderr)
    [line] = error_lines(r.stderr)
    assert f"vLLM's executable {tmp_path}/nowhere/vllm not found" in line
    record = _record(tmp_path)
    assert record["exit"] == r.exit_code == 5
    assert record["error"] == line.removeprefix("vlaunch: error: ")
    assert "vllm_exit" not in record
    assert guard.read_holder() is None  # the box lock is released


def test_launch_with_unexecutable_file_records_its_exit(tmp_path: Path) -> None:
    exe = tmp_path / "bin" / "vllm"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\nexit 0\n")  # not chmod +x
    r = serve(tmp_path, write_profile(tmp_path, executable=str(exe)), "--skip-preflight")
    assert r.exit_code == 5 and _record(tmp_path)["exit"] == 5
    assert "not executable" in _record(tmp_path)["error"]


def test_vllm_exiting_before_ready_records_both_codes(tmp_path: Path) -> None:
    exe = script(tmp_path / "bin" / "vllm", "echo 'INFO starting'\necho 'RuntimeError: no such platform'\nexit 3")
    r = serve(tmp_path, write_profile(tmp_path, executable=str(exe)))
    assert r.exit_code == 1, (r.stdout[-2000:], r.stderr)
    record = _record(tmp_path)
    assert record["exit"] == 1 and record["vllm_exit"] == 3
    assert "vLLM exited with code 3 before it was ready" in r.stdout
    assert "vLLM failed: other: no such platform" in r.stdout
    assert record["logged"]["failure"]["message"] == "no such platform"


def test_interrupted_before_ready_records_130(tmp_path: Path) -> None:
    exe = script(tmp_path / "bin" / "vllm", "echo 'INFO starting'\nexec sleep 60")
    prof = write_profile(tmp_path, executable=str(exe))
    proc = subprocess.Popen(
        [sys.executable, "-m", "launcher", "serve", str(prof), "--logs-dir", str(tmp_path / "logs")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        end = time.monotonic() + 60
        while time.monotonic() < end:
            line = proc.stdout.readline()
            if "vLLM pid" in line or not line:
                break
        assert "vLLM pid" in line
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if proc.stdout:
            proc.stdout.close()
    record = _record(tmp_path)
    assert record["exit"] == 130 and record["stopped_by"] == "SIGINT"
    assert record["vllm_exit"] is None  # vlaunch stopped it


def test_container_sees_only_what_docker_gives_it(tmp_path: Path) -> None:
    argv = ["docker", "run", "--rm", "-v", f"{tmp_path}/hf:/root/.cache/huggingface", "-e", "HF_TOKEN", "-e",
            "A=1", "img:1", "vllm", "serve", "m", "-e", "B=2"]  # fmt: skip
    assert pf._mounted(tmp_path / "hf" / "hub" / "m", argv)
    assert not pf._mounted(tmp_path / "model", argv)
    plan = plan_for(write_profile(tmp_path, launch_mode="container", image="example/vllm:1"))
    [f] = pf.preflight(plan, probes=quiet(which=lambda n: "/usr/bin/docker" if n == "docker" else "/x/hook"))
    assert (f.code, f.refuse) == (10, False) and "the container sees only the Hugging Face cache" in f.what
    # a gated repo in a container: HF_TOKEN reaches it only through `-e HF_TOKEN`
    plan = plan_for(
        write_profile(tmp_path, launch_mode="container", image="example/vllm:1", model="org/gated", config=str(TINY))
    )
    env = pf.vllm_env(plan, {"HF_TOKEN": "hf_x", "HF_HUB_OFFLINE": "1", "OTHER": "y"})
    assert env.get("HF_TOKEN") == ("hf_x" if "HF_TOKEN" in plan.argv else None) and "OTHER" not in env
    [f] = pf.preflight(plan, probes=quiet(hub=lambda repo, token, timeout: ("gated", ""), environ={}))
    assert (f.code, f.what) == (10, "org/gated is gated")
