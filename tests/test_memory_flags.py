"""The memory, parallelism and cache flags of vLLM 0.32, each taken in vLLM's spellings and forms — pasted after
`--`, and given to vlaunch itself — planned (the plan's request carries the value) or passed on with a note, and
written once in the command."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from launcher.cli import main
from launcher.vllm.flags import MEMORY_FLAGS, MODELLED

MODEL = "meta-llama/Llama-3.1-8B-Instruct"  # its config ships with vlaunch: plans offline
# flag -> (words after the flag, the field it sets, the value vLLM 0.32 reads; None: passed on, not planned with)
CASES: dict[str, tuple[list[str], str, Any]] = {
    "--block-size": (["32"], "block_size", 32),
    "--gpu-memory-utilization": (["0.5"], "gpu_memory_utilization", 0.5),
    "--kv-cache-memory-bytes": (["4G"], "kv_cache_memory_bytes", 4 * 2**30),
    "--kv-cache-dtype": (["fp8"], "kv_cache_dtype", "fp8"),
    "--num-gpu-blocks-override": (["100"], "num_gpu_blocks_override", None),
    "--enable-prefix-caching": ([], "enable_prefix_caching", True),
    "--kv-cache-dtype-skip-layers": (["0", "1"], "kv_cache_dtype_skip_layers", None),
    "--kv-sharing-fast-prefill": ([], "kv_sharing_fast_prefill", None),
    "--mamba-cache-dtype": (["float32"], "mamba_cache_dtype", "float32"),
    "--mamba-ssm-cache-dtype": (["float32"], "mamba_ssm_cache_dtype", "float32"),
    "--mamba-block-size": (["256"], "mamba_block_size", None),
    "--mamba-cache-mode": (["align"], "mamba_cache_mode", "align"),
    "--kv-offloading-size": (["4"], "kv_offloading_size", None),
    "--kv-offloading-backend": (["native"], "kv_offloading_backend", None),
    "--tensor-parallel-size": (["2"], "tensor_parallel_size", 2),
    "--pipeline-parallel-size": (["2"], "pipeline_parallel_size", 2),
    "--data-parallel-size": (["2"], "data_parallel_size", 2),
    "--data-parallel-size-local": (["1"], "data_parallel_size_local", None),
    "--decode-context-parallel-size": (["2"], "decode_context_parallel_size", 2),
    "--prefill-context-parallel-size": (["2"], "prefill_context_parallel_size", None),
    "--enable-expert-parallel": ([], "enable_expert_parallel", True),
    "--distributed-executor-backend": (["uni"], "distributed_executor_backend", "uni"),
    "--nnodes": (["2"], "nnodes", None),
    "--enable-eplb": ([], "enable_eplb", None),
    "--max-num-batched-tokens": (["8k"], "max_num_batched_tokens", 8000),
    "--max-num-seqs": (["64"], "max_num_seqs", 64),
    "--max-num-scheduled-tokens": (["4096"], "max_num_scheduled_tokens", None),
    "--disable-hybrid-kv-cache-manager": ([], "disable_hybrid_kv_cache_manager", True),
    "--enable-chunked-prefill": ([], "enable_chunked_prefill", None),
    "--async-scheduling": ([], "async_scheduling", None),
    "--max-model-len": (["16K"], "max_model_len", 16_384),
    "--quantization": (["fp8"], "quantization", "fp8"),
    "--dtype": (["float16"], "dtype", "float16"),
    "--enforce-eager": ([], "enforce_eager", True),
    "--cpu-offload-gb": (["4"], "cpu_offload_gb", None),
    "--hf-overrides": (['{"max_position_embeddings": 8192}'], "hf_overrides", None),
    "--language-model-only": ([], "language_model_only", True),
    "--limit-mm-per-prompt": (['{"image": 0}'], "limit_mm_per_prompt", {"image": 0}),
    "--mm-processor-cache-gb": (["0"], "mm_processor_cache_gb", None),
    "--runner": (["generate"], "runner", "generate"),
    "--compilation-config": (['{"mode": 3}'], "compilation_config", None),
    "--cudagraph-capture-sizes": (["1", "2", "4"], "cudagraph_capture_sizes", None),
    "--max-cudagraph-capture-size": (["64"], "max_cudagraph_capture_size", None),
    "--optimization-level": (["2"], "optimization_level", None),
    "--speculative-config": (
        ['{"method": "ngram", "prompt_lookup_max": 4}'],
        "speculative_config",
        {"method": "ngram", "prompt_lookup_max": 4},
    ),
    "--spec-tokens": (
        ["2", "--spec-method", "ngram"],
        "speculative_config",
        {"method": "ngram", "num_speculative_tokens": 2},
    ),
}


def test_the_table_is_the_46_flags() -> None:
    assert len(MEMORY_FLAGS) == 46 and set(CASES) == set(MEMORY_FLAGS)


def _underscored(flag: str) -> str:
    return "--" + flag[2:].replace("-", "_") if flag.startswith("--") else flag


def _forms(flag: str, rest: list[str]) -> list[list[str]]:
    """The flag as written canonically, with underscores, and with `=` (for a single value)."""
    forms = [[flag, *rest], [_underscored(flag), *rest]]
    if len(rest) == 1:
        forms.append([f"{flag}={rest[0]}"])
    return forms


def _plan(*args: str) -> dict[str, Any]:
    r = CliRunner().invoke(main, ["plan", "--machine", "h100", "--gpu-memory-gib", "80", "--vllm-version", "0.32.0",
                                  "--json", *args], env={"HF_HUB_OFFLINE": "1"})  # fmt: skip
    assert r.exit_code in (0, 3), r.output
    data: dict[str, Any] = json.loads(r.stdout)
    return data


def _check(plan: dict[str, Any], flag: str, dest: str, value: Any) -> None:
    argv = plan["vllm_argv"]
    if value is not None:
        assert plan["vllm_request"][dest] == value
        assert dest in MODELLED or dest == "speculative_config"
    else:
        assert any(flag in n and "not modelled" in n for n in plan["notes"]), plan["notes"]
    canonical = "--speculative-config" if flag == "--spec-tokens" else flag
    assert argv.count(canonical) == 1, argv


@pytest.mark.parametrize("flag", MEMORY_FLAGS)
def test_pasted_in_vllms_forms(flag: str) -> None:
    rest, dest, value = CASES[flag]
    for form in _forms(flag, rest):
        _check(_plan("--", "vllm", "serve", MODEL, *form), flag, dest, value)


@pytest.mark.parametrize("flag", MEMORY_FLAGS)
def test_given_to_vlaunch_itself(flag: str) -> None:
    rest, dest, value = CASES[flag]
    for form in _forms(flag, rest):
        _check(_plan("--model", MODEL, *form), flag, dest, value)
