"""Hypothesis strategies for `vllm serve` command lines as people write them: every field vlaunch plans with, in
vLLM's spellings and forms (canonical, aliases, underscores, unique prefixes, `=`, dotted keys, `--no-`), with
values vLLM takes and values it refuses, some flags vlaunch only passes through, and the wrappers a pasted command
comes in (environment prefixes, sudo, docker run / exec, bash -c).

Used by tests/test_serve_parse.py (vlaunch against itself) and tests/e2e/test_vllm_parser_oracle.py (vlaunch against
vLLM 0.32's own parser).
"""

from __future__ import annotations

import json
import shlex

from hypothesis import strategies as st

# dest -> (spellings people use, values as they would type them: some vLLM takes, some it refuses)
_INTS = ["1", "2", "4", "8", "16", "-1", "0", "x", "1.5", "+2"]
_TOKENS = ["8192", "32k", "32K", "1M", "25.6k", "128000", "1_000", "1.5K", "lots", "  4096 ", "0x10"]
OPTIONS: dict[str, tuple[list[str], list[str]]] = {
    "max_model_len": (["--max-model-len", "--max_model_len", "--max-model"], [*_TOKENS, "auto", "AUTO", "-1"]),
    "gpu_memory_utilization": (
        ["--gpu-memory-utilization", "--device-memory-utilization", "--gpu_memory_utilization", "--gpu-memory-util"],
        ["0.5", "0.9", ".85", "1", "0.825", "1e-1", "abc", "0.95"],
    ),
    "tensor_parallel_size": (["--tensor-parallel-size", "-tp", "--tensor_parallel_size"], _INTS),
    "pipeline_parallel_size": (["--pipeline-parallel-size", "-pp"], _INTS),
    "data_parallel_size": (["--data-parallel-size", "-dp"], _INTS),
    "max_num_batched_tokens": (["--max-num-batched-tokens", "--max_num_batched_tokens"], _TOKENS),
    "max_num_seqs": (["--max-num-seqs", "--max_num_seqs"], _INTS),
    "kv_cache_memory_bytes": (
        ["--kv-cache-memory-bytes", "--kv-cache-memory"],
        ["4G", "4g", "4294967296", "1.5G", "2T"],
    ),
    "kv_cache_dtype": (
        ["--kv-cache-dtype", "--kv_cache_dtype"],
        ["auto", "fp8", "fp8_e4m3", "fp8_e5m2", "nvfp4", "bfloat16", "float32", "int8_per_token_head", "fp16"],
    ),
    "dtype": (["--dtype"], ["auto", "bfloat16", "float16", "half", "float", "float32", "bf16"]),
    "quantization": (["--quantization", "-q"], ["fp8", "awq", "awq_marlin", "gptq", "fp8_per_block", "mxfp4", "None"]),
    "block_size": (["--block-size", "--block_size"], ["16", "32", "48", "128", "x"]),
    "distributed_executor_backend": (["--distributed-executor-backend"], ["mp", "ray", "uni", "external_launcher"]),
    "mamba_cache_dtype": (["--mamba-cache-dtype"], ["auto", "float32", "bfloat16", "float64"]),
    "mamba_ssm_cache_dtype": (["--mamba-ssm-cache-dtype", "--mamba_ssm_cache_dtype"], ["auto", "float32", "float16"]),
    "mamba_cache_mode": (["--mamba-cache-mode"], ["align", "none", "all"]),
    "runner": (["--runner"], ["auto", "generate", "pooling", "draft", "embed"]),
    "revision": (["--revision"], ["main", "refs/pr/1", "None"]),
    "hf_config_path": (["--hf-config-path"], ["/tmp/config.json", "org/other"]),
    "host": (["--host"], ["0.0.0.0", "127.0.0.1", "::"]),
    "port": (["--port"], ["8000", "9000", "80", "http"]),
    "limit_mm_per_prompt": (["--limit-mm-per-prompt"], ['{"image": 0}', '{"image": 2, "video": 1}', "{image: 0}"]),
    "speculative_config": (
        ["--speculative-config", "-sc", "--speculative_config"],
        ['{"method": "mtp", "num_speculative_tokens": 1}', '{"method":"ngram","prompt_lookup_max":4}', "mtp"],
    ),
}
# switches: dest -> spellings (a --no- form where vLLM has one)
SWITCHES: dict[str, list[str]] = {
    "enforce_eager": ["--enforce-eager", "--no-enforce-eager", "--enforce_eager"],
    "enable_prefix_caching": ["--enable-prefix-caching", "--no-enable-prefix-caching", "--enable-prefix"],
    "enable_expert_parallel": ["--enable-expert-parallel", "-ep", "--no-enable-expert-parallel"],
    "language_model_only": ["--language-model-only"],
    "disable_hybrid_kv_cache_manager": ["--disable-hybrid-kv-cache-manager", "--no-disable-hybrid-kv-cache-manager"],
}
# whole words for dotted keys, --spec-*, nargs "+" and flags vlaunch passes through (some refused by vLLM 0.32)
PHRASES: list[list[str]] = [
    ["--speculative-config.method", "mtp", "--speculative-config.num_speculative_tokens", "2"],
    ["-sc.method", "ngram"],
    ["--spec-method", "mtp"],
    ["--spec-tokens", "3"],
    ["--spec-method", "eagle3", "--spec-model", "org/drafter"],
    ["--limit-mm-per-prompt.image", "0"],
    ["--served-model-name", "a"],
    ["--served-model-name", "a", "b"],
    ["--served_model_name=solo"],
    ["--compilation-config", '{"cudagraph_mode": "PIECEWISE"}'],
    ["--compilation_config.pass_config.fuse_allreduce_rms", "true"],
    ["-cc.mode", "3"],
    ["-O3"],
    ["-O", "0"],
    ["--cudagraph-capture-sizes", "1", "2", "4"],
    ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"],
    ["--trust-remote-code"],
    ["--load-format", "fastsafetensors"],
    ["--cpu-offload-gb", "4"],
    ["--swap-space", "4"],
    ["--mxfp4-layers", "all"],
    ["--max-num-seq", "4"],
    ["--tokenizer-mode", "auto"],
    ["--reasoning_parser", "qwen3"],
]
MODELS = ["Qwen/Qwen3-8B", "meta-llama/Llama-3.1-8B-Instruct", "/models/local", "org/model-FP8"]


@st.composite
def option_words(draw: st.DrawFn) -> list[str]:
    """One option in a spelling and form people use."""
    kind = draw(st.sampled_from(["value", "switch", "phrase"]))
    if kind == "switch":
        return [draw(st.sampled_from(SWITCHES[draw(st.sampled_from(sorted(SWITCHES)))]))]
    if kind == "phrase":
        return list(draw(st.sampled_from(PHRASES)))
    dest = draw(st.sampled_from(sorted(OPTIONS)))
    spellings, values = OPTIONS[dest]
    name, value = draw(st.sampled_from(spellings)), draw(st.sampled_from(values))
    if name.startswith("--") and draw(st.booleans()):
        return [f"{name}={value}"]
    return [name, value]


@st.composite
def serve_words(draw: st.DrawFn) -> list[str]:
    """The words after `vllm serve`: a model (first, as --model, or none) and options."""
    options = [w for group in draw(st.lists(option_words(), max_size=7)) for w in group]
    model = draw(st.sampled_from(MODELS))
    where = draw(st.sampled_from(["first", "first", "first", "option", "option=", "none"]))
    if where == "first":
        return [model, *options]
    if where == "none":
        return options
    at = draw(st.integers(0, len(options)))
    while at and options[at - 1].startswith("-") and "=" not in options[at - 1]:
        at -= 1  # not between an option and its value
    inserted = ["--model", model] if where == "option" else [f"--model={model}"]
    return [*options[:at], *inserted, *options[at:]]


@st.composite
def wrapped(draw: st.DrawFn, words: list[str]) -> tuple[list[str], str]:
    """(a pasted command around `vllm serve WORDS`, the wrapper's name): how the same words reach vLLM."""
    form = draw(st.sampled_from(["plain", "env", "sudo", "docker-ngc", "docker-openai", "exec-bash", "bash"]))
    serve = ["vllm", "serve", *words]
    if form == "plain":
        return serve, form
    if form == "env":
        return ["CUDA_VISIBLE_DEVICES=0", "HF_HUB_OFFLINE=1", *serve], form
    if form == "sudo":
        return ["sudo", "-E", *serve], form
    run = ["docker", "run", "-it", "--rm", "--gpus", '"device=1"', "-v", "/data/hf:/root/.cache/huggingface",
           "--shm-size=16g", "-e", "VLLM_LOGGING_LEVEL=DEBUG", "-e", "HF_TOKEN=$HF_TOKEN"]  # fmt: skip
    if form == "docker-ngc":
        return [*run, "nvcr.io/nvidia/vllm:26.05-py3", *serve], form
    if form == "docker-openai":
        if words and not words[0].startswith("-"):
            return [*run, "vllm/vllm-openai:v0.32.0", *words], form
        return [*run, "nvcr.io/nvidia/vllm:26.05-py3", *serve], form
    if form == "exec-bash":
        return ["docker", "exec", "-it", "vllm-node", "/bin/bash", "-c", shlex.join(serve)], form
    return ["bash", "-c", shlex.join(serve)], form


def jsonable(value: object) -> object:
    """A value as JSON carries it (tuples as lists), for comparing across processes."""
    return json.loads(json.dumps(value))
