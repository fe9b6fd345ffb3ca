"""The exact vLLM command line for a profile and its plan. Pure: profile + plan -> list of str, never a shell."""

from __future__ import annotations

import json
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


def container_argv(
    *, image: str, hf_cache_dir: str, env: list[tuple[str, str]], model: str, vllm_args: list[str]
) -> list[str]:
    """Render templates/docker-run.j2 (one argument per line) into an argv list."""
    from jinja2 import Environment, FileSystemLoader, StrictUndefined

    values = [image, hf_cache_dir, model, *vllm_args, *(f"{k}={v}" for k, v in env)]
    if any("\n" in x or "\r" in x for x in values):
        raise ValueError("a launch argument contains a line break")
    jenv = Environment(loader=FileSystemLoader(TEMPLATES), undefined=StrictUndefined, autoescape=False)
    text = jenv.get_template("docker-run.j2").render(
        image=image,
        hf_cache_dir=hf_cache_dir,
        container_hf_cache=CONTAINER_HF_CACHE,
        env=env,
        model=model,
        vllm_args=vllm_args,
    )
    return [line for line in text.splitlines() if line.strip()]


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
    hf_cache_dir: str = "/root/.cache/huggingface",
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
            hf_cache_dir=hf_cache_dir,
            env=list(env.items()),
            model=profile.model,
            vllm_args=[*net, *flags],
        )
    else:
        argv = [v.executable, "serve", profile.model, *net, *flags]
    return argv, env
