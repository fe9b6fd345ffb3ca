"""The exact vLLM command line for a profile and its plan. Pure: profile + plan -> list of str, never a shell."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from launcher.formats import FormatSpec

if TYPE_CHECKING:
    from launcher.budget import Prediction
    from launcher.profiles import Profile

# Formats vLLM quantizes online from a 16-bit checkpoint when asked with --quantization.
_ONLINE = {"fp8": "fp8"}
CONTAINER_HF_CACHE = "/root/.cache/huggingface"
DEFAULT_IMAGE = "nvcr.io/nvidia/vllm:latest"


# templates/ at the repository root, reached through the package's link to it (a wheel carries the files)
TEMPLATES = Path(__file__).resolve().parent / "templates"


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


def container_argv(
    *,
    image: str,
    mounts: list[tuple[str, str]],
    env: list[tuple[str, str]],
    model: str,
    vllm_args: list[str],
    name: str,
    pass_env: tuple[str, ...] = ("HF_TOKEN",),
) -> list[str]:
    """`docker run` for NVIDIA's vLLM container, one argument per element (never a shell): GPUs, shared IPC,
    NVIDIA's recommended ulimits, host networking (vLLM's --host/--port then bind on the host), the HF cache,
    `-e NAME` for the variables passed from the caller's environment (HF_TOKEN: never written into argv), the
    profile's env, then `vllm serve MODEL …`."""
    values = [image, model, name, *vllm_args, *(f"{k}={v}" for k, v in env), *(h for h, _ in mounts)]
    if any("\n" in x or "\r" in x for x in values):
        raise ValueError("a launch argument contains a line break")
    argv = ["docker", "run", "--rm", "--name", name, "--gpus", "all", "--ipc", "host",
            "--ulimit", "memlock=-1", "--ulimit", "stack=67108864", "--network", "host"]  # fmt: skip
    for host, inside in mounts:
        argv += ["-v", f"{host}:{inside}"]
    for var in pass_env:
        argv += ["-e", var]
    for k, v in env:
        argv += ["-e", f"{k}={v}"]
    return [*argv, image, "vllm", "serve", model, *vllm_args]


def _engine_flags(profile: Profile, pred: Prediction, spec: FormatSpec, detected: FormatSpec) -> list[str]:
    a = pred.args
    flags: list[str] = []
    if profile.max_model_len is not None:
        flags += ["--max-model-len", str(profile.max_model_len)]
    flags += ["--gpu-memory-utilization", f"{pred.gpu_memory_utilization:.2f}"]
    if a.tensor_parallel_size > 1:
        flags += ["--tensor-parallel-size", str(a.tensor_parallel_size)]
    if a.pipeline_parallel_size > 1:
        flags += ["--pipeline-parallel-size", str(a.pipeline_parallel_size)]
    if profile.data_parallel_size > 1:
        flags += ["--data-parallel-size", str(profile.data_parallel_size)]
    if profile.revision:
        flags += ["--revision", profile.revision]
    if profile.dtype != "auto":
        flags += ["--dtype", profile.dtype]
    if profile.kv_cache_dtype != "auto":
        flags += ["--kv-cache-dtype", profile.kv_cache_dtype]
    if spec.name != detected.name and spec.name in _ONLINE:
        flags += ["--quantization", _ONLINE[spec.name]]
    if profile.max_num_batched_tokens is not None:
        flags += ["--max-num-batched-tokens", str(profile.max_num_batched_tokens)]
    if profile.max_num_seqs is not None:
        flags += ["--max-num-seqs", str(profile.max_num_seqs)]
    if profile.enforce_eager:
        flags.append("--enforce-eager")
    if profile.block_size is not None:
        flags += ["--block-size", str(profile.block_size)]
    if profile.kv_cache_memory_bytes is not None:
        flags += ["--kv-cache-memory-bytes", str(profile.kv_cache_memory_bytes)]
    if profile.distributed_executor_backend:
        flags += ["--distributed-executor-backend", profile.distributed_executor_backend]
    if profile.enable_expert_parallel:
        flags.append("--enable-expert-parallel")
    if profile.language_model_only:
        flags.append("--language-model-only")
    if profile.limit_mm_per_prompt:
        limits = ",".join(f'"{m}":{n}' for m, n in profile.limit_mm_per_prompt)
        flags += ["--limit-mm-per-prompt", "{" + limits + "}"]
    if profile.speculative_config:
        flags += ["--speculative-config", json.dumps(dict(profile.speculative_config), separators=(",", ":"))]
    for key in ("mamba_cache_dtype", "mamba_ssm_cache_dtype", "mamba_cache_mode"):
        if getattr(profile, key) != "auto":
            flags += ["--" + key.replace("_", "-"), getattr(profile, key)]
    if profile.enable_prefix_caching is not None:
        flags.append("--enable-prefix-caching" if profile.enable_prefix_caching else "--no-enable-prefix-caching")
    if profile.disable_hybrid_kv_cache_manager:
        flags.append("--disable-hybrid-kv-cache-manager")
    if profile.runner != "auto":
        flags += ["--runner", profile.runner]
    if profile.vllm.served_model_name:
        flags += ["--served-model-name", profile.vllm.served_model_name]
    return flags


def serve_args(profile: Profile, pred: Prediction, spec: FormatSpec, detected: FormatSpec) -> list[str]:
    """The arguments after `vllm serve MODEL`: --host, --port, the engine flags, then the profile's extra_args."""
    v = profile.vllm
    return ["--host", v.host, "--port", str(v.port), *_engine_flags(profile, pred, spec, detected), *v.extra_args]


def vllm_argv(
    profile: Profile,
    pred: Prediction,
    spec: FormatSpec,
    detected: FormatSpec,
    *,
    hf_env: Mapping[str, str] | None = None,
) -> tuple[list[str], dict[str, str]]:
    """(argv, extra environment) to start vLLM as the profile says; binds 127.0.0.1 unless told otherwise."""
    v = profile.vllm
    args = serve_args(profile, pred, spec, detected)
    net, flags = args[:4], args[4:]
    env = dict(v.env)
    if v.launch == "module":
        python = v.python or "python3"
        argv = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", profile.model, *net, *flags]
    elif v.launch == "container":
        argv = container_argv(
            image=v.image or DEFAULT_IMAGE,
            mounts=hf_cache_mounts(hf_env),
            env=list(env.items()),
            model=profile.model,
            vllm_args=[*net, *flags],
            name=v.container_name or container_name(profile.name),
        )
    else:
        argv = [v.executable, "serve", profile.model, *net, *flags]
    return argv, env
