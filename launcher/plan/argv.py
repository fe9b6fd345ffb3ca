"""The exact vLLM command line for a profile and its plan. Pure: profile + plan -> list of str, never a shell.

Every engine option is written as the vLLM that runs spells it: its canonical long form in that release's option
table (launcher/vllm/interface), the value in a form its type reads back to the planned value, each option once.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from launcher.model.formats import FormatSpec
from launcher.vllm import interface as I

if TYPE_CHECKING:
    from launcher.plan.budget import Prediction
    from launcher.plan.profiles import Profile

CONTAINER_HF_CACHE = "/root/.cache/huggingface"
DEFAULT_IMAGE = "nvcr.io/nvidia/vllm:latest"


# templates/ at the repository root, reached through the package's link to it (a wheel carries the files)
TEMPLATES = Path(__file__).resolve().parent.parent / "templates"  # launcher/templates


def hf_cache_mounts(env: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """(host dir, container dir) for the Hugging Face cache, as huggingface_hub resolves it on this host: HF_HOME
    (default ~/.cache/huggingface, under XDG_CACHE_HOME when set) at the container's HF home, and HF_HUB_CACHE
    too when it lives outside HF_HOME."""
    if env is None:
        from huggingface_hub import constants

        home, hub = constants.HF_HOME, constants.HF_HUB_CACHE
    else:  # an explicit environment (tests, a remote node): the same rules huggingface_hub.constants applies
        xdg = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        home = os.path.expanduser(env.get("HF_HOME") or os.path.join(xdg, "huggingface"))
        hub = os.path.expanduser(env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE") or f"{home}/hub")
    mounts = [(home, CONTAINER_HF_CACHE)]
    if os.path.abspath(hub) != os.path.join(os.path.abspath(home), "hub"):
        mounts.append((hub, CONTAINER_HF_CACHE + "/hub"))
    return mounts


def container_name(profile_name: str) -> str:
    """A docker container name for a profile: vlaunch-<name>, with what docker refuses replaced."""
    return "vlaunch-" + (re.sub(r"[^A-Za-z0-9_.-]", "-", profile_name).strip("-.") or "profile")


# ---- the container runtime's command ------------------------------------------------------------------------------


def _given(args: Sequence[str], names: tuple[str, ...]) -> list[str]:
    """The values the user's own runtime options give for any of `names` (`--x v` and `--x=v`)."""
    out = []
    for i, a in enumerate(args):
        name, eq, value = a.partition("=")
        if name in names:
            out.append(value if eq else (args[i + 1] if i + 1 < len(args) else ""))
    return out


def _mount_targets(args: Sequence[str]) -> set[str]:
    """Container paths the user's -v / --volume / --mount options mount something at."""
    targets = {v.split(":")[1] for v in _given(args, ("-v", "--volume")) if v.count(":") >= 1}
    for spec in _given(args, ("--mount",)):
        for part in spec.split(","):
            key, _, value = part.partition("=")
            if key in ("target", "dst", "destination"):
                targets.add(value)
    return {t.rstrip("/") for t in targets}


def host_path(path: str, args: Sequence[str]) -> str | None:
    """The host path a container path stands for through the user's `-v HOST:INSIDE` mounts (None: not mounted)."""
    for spec in _given(args, ("-v", "--volume")):
        host, _, rest = spec.partition(":")
        inside = rest.split(":")[0].rstrip("/")
        if host and inside and (path == inside or path.startswith(inside + "/")):
            return host + path[len(inside) :]
    return None


def _defaults(args: Sequence[str], mounts: list[tuple[str, str]]) -> list[str]:
    """vlaunch's own `docker run` options, each left out where the user's options set the same thing: GPUs,
    shared IPC, NVIDIA's recommended ulimits, host networking (vLLM's --host/--port then bind on the host), the
    Hugging Face cache."""
    out: list[str] = []
    if not _given(args, ("--gpus",)):
        out += ["--gpus", "all"]
    if not _given(args, ("--ipc",)):
        out += ["--ipc", "host"]
    limits = {v.partition("=")[0] for v in _given(args, ("--ulimit",))}
    for kind, value in (("memlock", "-1"), ("stack", "67108864")):
        if kind not in limits:
            out += ["--ulimit", f"{kind}={value}"]
    if not _given(args, ("--network", "--net")):
        out += ["--network", "host"]
    taken = _mount_targets(args)
    for host, inside in mounts:
        if inside.rstrip("/") not in taken:
            out += ["-v", f"{host}:{inside}"]
    return out


def container_argv(
    *,
    image: str,
    mounts: list[tuple[str, str]],
    env: list[tuple[str, str]],
    model: str,
    vllm_args: list[str],
    name: str,
    pass_env: Sequence[str] = ("HF_TOKEN",),
    container_args: Sequence[str] = (),
    entrypoint_serves: bool | None = None,
    runtime: str = "docker",
    exec_container: str | None = None,
) -> list[str]:
    """`docker run` (or `podman run`) for a vLLM image, one argument per element (never a shell): vlaunch's
    defaults where the user's own options (`container_args`) do not set the same thing, `-e NAME` for the variables
    passed from the caller's environment (HF_TOKEN: never written into argv), the profile's env, then `vllm serve
    MODEL …` after the image — or only `MODEL …` for an image whose entrypoint is `vllm serve` (vllm/vllm-openai);
    NVIDIA's image keeps its own entrypoint. `exec_container`: `docker exec NAME vllm serve …` in a running one."""
    from launcher.vllm.shell import entrypoint_serves as serves_by_image

    values = [image, model, name, *vllm_args, *(f"{k}={v}" for k, v in env), *(h for h, _ in mounts), *container_args]
    if any("\n" in x or "\r" in x for x in values):
        raise ValueError("a launch argument contains a line break")
    passed = [x for var in dict.fromkeys(pass_env) for x in ("-e", var)]
    setenv = [x for k, v in env for x in ("-e", f"{k}={v}")]
    if exec_container:
        return [runtime, "exec", *passed, *setenv, *container_args, exec_container, "vllm", "serve", model, *vllm_args]
    argv = [runtime, "run", "--rm", "--name", name, *_defaults(container_args, mounts), *passed, *setenv]
    argv += [*container_args, image]
    serves = serves_by_image(image) if entrypoint_serves is None else entrypoint_serves
    return [*argv, model, *vllm_args] if serves else [*argv, "vllm", "serve", model, *vllm_args]


# ---- vLLM's options -------------------------------------------------------------------------------------------------


def value_text(value: Any) -> str:
    """A planned value as a command-line string vLLM's type reads back to it."""
    if isinstance(value, dict | list | tuple):
        return json.dumps(value if isinstance(value, dict) else list(value), separators=(",", ":"))
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def option(iface: I.Interface, dest: str, value: Any) -> list[str]:
    """`dest` set to `value`, as release `iface` spells it (the newest table's spelling where it has none; the
    plan refuses a field the release lacks)."""
    flag = iface.by_dest.get(dest) or I.newest().by_dest[dest]
    name = flag.canonical
    if flag.switch:
        return [name if value else flag.negative]
    if not flag.takes_value:
        return [name] if value else []
    if flag.nargs in ("+", "*"):
        items = value if isinstance(value, list | tuple) else [value]
        return [name, *(value_text(v) for v in items)]
    return [name, value_text(value)]


def engine_values(profile: Profile, pred: Prediction, spec: FormatSpec, detected: FormatSpec) -> list[tuple[str, Any]]:
    """(vLLM field, value) for every engine option the plan sets, in the order they are written."""
    a = pred.args
    out: list[tuple[str, Any]] = []
    if profile.max_model_len is not None:
        out.append(("max_model_len", profile.max_model_len))
    out.append(("gpu_memory_utilization", pred.gpu_memory_utilization))
    for dest, value, default in (
        ("tensor_parallel_size", a.tensor_parallel_size, 1),
        ("pipeline_parallel_size", a.pipeline_parallel_size, 1),
        ("data_parallel_size", profile.data_parallel_size, 1),
        ("decode_context_parallel_size", profile.decode_context_parallel_size, 1),
        ("revision", profile.revision, None),
        ("hf_config_path", profile.config if profile.config != profile.model else None, None),
        ("dtype", profile.dtype, "auto"),
        ("kv_cache_dtype", profile.kv_cache_dtype, "auto"),
        ("quantization", _quantization(profile, pred, detected), None),
        ("max_num_batched_tokens", profile.max_num_batched_tokens, None),
        ("max_num_seqs", profile.max_num_seqs, None),
        ("enforce_eager", profile.enforce_eager, False),
        ("block_size", profile.block_size, None),
        ("kv_cache_memory_bytes", profile.kv_cache_memory_bytes, None),
        ("distributed_executor_backend", profile.distributed_executor_backend, None),
        ("enable_expert_parallel", profile.enable_expert_parallel, False),
        ("language_model_only", profile.language_model_only, False),
        ("limit_mm_per_prompt", dict(profile.limit_mm_per_prompt), {}),
        ("speculative_config", dict(profile.speculative_config), {}),
        ("mamba_cache_dtype", profile.mamba_cache_dtype, "auto"),
        ("mamba_ssm_cache_dtype", profile.mamba_ssm_cache_dtype, "auto"),
        ("mamba_cache_mode", profile.mamba_cache_mode, "auto"),
        ("enable_prefix_caching", profile.enable_prefix_caching, None),
        ("disable_hybrid_kv_cache_manager", profile.disable_hybrid_kv_cache_manager, False),
        ("runner", profile.runner, "auto"),
        ("served_model_name", profile.vllm.served_model_name, None),
    ):
        if value != default:
            out.append((dest, value))
    return out


def _quantization(profile: Profile, pred: Prediction, detected: FormatSpec) -> str | None:
    """The --quantization value the launch carries (quant.resolve's flag): the vLLM method the profile names, as
    written; never a name of vlaunch's own."""
    from launcher.vllm.quant import launch_flag

    return launch_flag(profile.quantization, detected, pred.args.version)


def serve_args(profile: Profile, pred: Prediction, spec: FormatSpec, detected: FormatSpec) -> list[str]:
    """The arguments after `vllm serve MODEL`: --host, --port, the engine options, then the profile's extra_args."""
    v = profile.vllm
    iface = I.for_version(pred.args.version)
    words = [*option(iface, "host", v.host), *option(iface, "port", v.port)]
    for dest, value in engine_values(profile, pred, spec, detected):
        words += option(iface, dest, value)
    return [*words, *v.extra_args]


def vllm_argv(
    profile: Profile,
    pred: Prediction,
    spec: FormatSpec,
    detected: FormatSpec,
    *,
    hf_env: Mapping[str, str] | None = None,
    model: str | None = None,
) -> tuple[list[str], dict[str, str]]:
    """(argv, extra environment) to start vLLM as the profile says; binds 127.0.0.1 unless told otherwise.
    `model`: what vLLM is told to serve, when it is not the profile's model as written."""
    v = profile.vllm
    served = model or profile.model
    args = serve_args(profile, pred, spec, detected)
    env = dict(v.env)
    if v.launch == "module":
        python = v.python or "python3"
        argv = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", served, *args]
    elif v.launch == "container":
        argv = container_argv(
            image=v.image or DEFAULT_IMAGE,
            mounts=hf_cache_mounts(hf_env),
            env=list(env.items()),
            model=served,
            vllm_args=args,
            name=v.container_name or container_name(profile.name),
            pass_env=("HF_TOKEN", *v.pass_env),
            container_args=v.container_args,
            entrypoint_serves=v.entrypoint_serves,
            runtime=v.container_runtime,
            exec_container=v.exec_container,
        )
    else:
        argv = [v.executable, "serve", served, *args]
    return argv, env
