"""`vllm serve` words read as vLLM 0.32 reads them (FlexibleArgumentParser's rewrites, argparse over the release's own
option table), and the fields vlaunch plans with taken from them. Expected values come from vLLM's source
(vllm/utils/argparse_utils.py, vllm/engine/arg_utils.py); tests/e2e/test_vllm_parser_oracle.py checks thousands of
command lines against the real parser."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from launcher.common.errors import VlaunchError
from launcher.plan.argv import option
from launcher.vllm import interface as I
from launcher.vllm.flags import FlagError, parse_serve_args
from tests.serve_commands import jsonable, serve_words

V032 = I.load((0, 32, 0))


def request(*words: str) -> dict[str, Any]:
    return parse_serve_args(list(words), V032).request


def passed(*words: str) -> list[str]:
    return parse_serve_args(list(words), V032).extra_args


@pytest.mark.parametrize(
    ("words", "dest", "value"),
    [
        (["m", "--device-memory-utilization", "0.5"], "gpu_memory_utilization", 0.5),  # vLLM's alias
        (["m", "--gpu-memory-util", "0.5"], "gpu_memory_utilization", 0.5),  # argparse's unique prefix
        (["m", "--gpu_memory_utilization=0.7"], "gpu_memory_utilization", 0.7),
        (["m", "--max_model_len", "32k"], "max_model_len", 32_000),  # k is 1000, K is 1024
        (["m", "--max-model-len", "32K"], "max_model_len", 32_768),
        (["m", "--max-model-len", "auto"], "max_model_len", -1),
        (["m", "-tp", "2"], "tensor_parallel_size", 2),
        (["m", "--tensor_parallel_size=4"], "tensor_parallel_size", 4),
        (["m", "--kv-cache-memory", "4G"], "kv_cache_memory_bytes", 4 * 2**30),
        (["m", "--kv-cache-dtype", "nvfp4"], "kv_cache_dtype", "nvfp4"),
        (["m", "-q", "fp8_per_block"], "quantization", "fp8_per_block"),
        (["m", "--distributed-executor-backend", "uni"], "distributed_executor_backend", "uni"),
        (["m", "--block-size", "48"], "block_size", 48),
        (["m", "--no-enable-prefix-caching"], "enable_prefix_caching", False),
        (["m", "-ep"], "enable_expert_parallel", True),
        (["m", "--served-model-name", "a", "b"], "served_model_name", ["a", "b"]),
        (["--model", "m", "--served-model-name", "x"], "served_model_name", ["x"]),
        (["--model=m", "-tp", "2"], "model", "m"),
        (["m", "--limit-mm-per-prompt.image", "0"], "limit_mm_per_prompt", {"image": 0}),
    ],
)
def test_a_field_in_vllms_spellings_and_forms(words: list[str], dest: str, value: Any) -> None:
    assert request(*words)[dest] == value


def test_dotted_keys_merge_into_one_json_value() -> None:
    got = request("m", "--speculative-config.method", "mtp", "--speculative_config.num_speculative_tokens", "2")
    assert got["speculative_config"] == {"method": "mtp", "num_speculative_tokens": 2}
    assert request("m", "-sc.method", "ngram")["speculative_config"] == {"method": "ngram"}


def test_spec_flags_join_the_speculative_config() -> None:
    got = request("m", "--spec-method", "mtp", "--spec-tokens", "3")
    assert got["speculative_config"] == {"method": "mtp", "num_speculative_tokens": 3}
    with pytest.raises(FlagError, match="mutually exclusive"):
        request("m", "-sc", '{"method": "mtp"}', "--spec-method", "eagle")


def test_options_vlaunch_passes_on_are_canonical_and_once() -> None:
    assert passed("m", "-O3", "--enable-auto-tool-choice", "--tool-call-parser", "hermes") == [
        "--optimization-level", "3", "--enable-auto-tool-choice", "--tool-call-parser", "hermes"
    ]  # fmt: skip
    assert passed("m", "--compilation_config.pass_config.fuse_allreduce_rms", "true") == [
        "--compilation-config", '{"pass_config": {"fuse_allreduce_rms": true}}'
    ]  # fmt: skip
    assert passed("m", "--seed", "1", "--seed", "2") == ["--seed", "2"]  # the last one is the one vLLM keeps
    assert passed("m", "--cudagraph-capture-sizes", "1", "2", "4") == ["--cudagraph-capture-sizes", "1", "2", "4"]


@pytest.mark.parametrize(
    ("words", "needle"),
    [
        (["m", "--swap-space", "4"], "vLLM 0.32.0 has no --swap-space (vLLM 0.10.0–0.17.1 has it)"),
        (["m", "--mxfp4-layers", "all"], "fork-only"),
        (["m", "--max-modle-len", "4096"], "did you mean --max-model-len?"),
        (["m", "--kv-cache-dtype", "float32"], "invalid choice: 'float32'"),
        (["m", "--max-model-len", "1.5K"], "Decimals are not allowed"),
        (["--served-model-name", "x"], "`model` should be provided as the first positional argument"),
        (["m", "--enforce-eager=1"], "ignored explicit argument"),
        (["m", "extra-word"], "unexpected argument 'extra-word'"),
    ],
)
def test_what_vllm_refuses_is_refused_in_one_line(words: list[str], needle: str) -> None:
    with pytest.raises(VlaunchError) as e:
        request(*words)
    line = e.value.one_line()
    assert needle in line and "\n" not in line


def test_a_value_another_release_takes_says_which() -> None:
    with pytest.raises(FlagError, match=r"vLLM 0.11.0 refuses it: argument --max-model-len.*take it"):
        parse_serve_args(["m", "--max-model-len", "auto"], I.for_version((0, 11, 0)))


def _render(req: dict[str, Any]) -> list[str]:
    words = [str(req.get("model", "m"))]
    for dest, value in req.items():
        if dest != "model" and value is not None:
            words += option(V032, dest, value)
    return words


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(words=serve_words())
def test_what_vlaunch_reads_it_writes_back_the_same(words: list[str]) -> None:
    try:
        got = request(*words)
    except VlaunchError:
        return
    again = request(*_render(got))
    assert jsonable({k: v for k, v in again.items() if k != "model"}) == jsonable(
        {k: v for k, v in got.items() if k != "model" and v is not None}
    )


@pytest.mark.parametrize("value", ["1", "-1", "936.2", "5.4e+16", '"mtp"', "[1, 2]", "true"])
@pytest.mark.parametrize("flag", ["--speculative-config", "--limit-mm-per-prompt"])
def test_a_config_flag_takes_a_json_object(flag: str, value: str) -> None:
    """vLLM parses any JSON here and then builds its config from the object's fields: anything else is refused in
    one line (it was an internal error, exit 70)."""
    with pytest.raises(FlagError, match=rf"{flag} takes a JSON object"):
        request("m", flag, value)
