"""`parse_stream`: a whole log read from a file in constant memory, handing the parser only the lines that can
matter, found with bytes searches over large chunks."""

from __future__ import annotations

import re as std_re
from collections.abc import Generator, Iterator
from typing import IO

from launcher.check.facts import MAX_THROUGHPUT_SAMPLES, LogFacts
from launcher.check.framer import LINE_CAP, PREFIX_SRC, RECORD_START_SRC, clean
from launcher.check.masks import SERVING_NO_BANNER, VLLM_HEADER_SRC
from launcher.check.parser import DRY_LINES, LogParser, stated_key
from launcher.check.restarts import RESTART_SPAN, key_message
from launcher.vllm.logs import API_READY, BOOT_BANNER, ENGINE_THROUGHPUT, KEYWORDS, REQUEST_TRAFFIC, keywords_of

# parse_stream reads CHUNK bytes at a time and hands the parser only the lines that can change its facts: before
# the API server is up, the lines holding a keyword and every record that continues over lines (and the line
# before it); once it is up, the lines holding one of AFTER_BOOT_KEYWORDS. Both are found with bytes searches over the
# chunk, not line by line. A log that restarted is read from its second-to-last boot only (the boots before are
# replaced): from its second-to-last boot banner, or, in a log without banners, from the second-to-last place its
# first two statements come again (`restarts`). The lines from there are held back, up to half a CHUNK, while more
# boots may follow: a later chunk may replace them too, so of a log that restarted a thousand times the parser reads
# the last two boots, not two in every chunk. Text that repeats line for line and holds no line to hand over is
# passed over whole (`_repeat_end`). A line keeps its first STREAM_LINE_CAP bytes (LINE_CAP characters at most); the
# rest is skipped without being held, so memory does not grow with the file or with a line.

CHUNK = 8 << 20
# Before the API server is up, the keyword search goes this far ahead of the parser, twice as far each time, up to
# WINDOW_MAX (a start-up is short; a log that never gets the server up is read in big steps).
WINDOW, WINDOW_MAX = 4 << 10, 4 << 20
STREAM_LINE_CAP = 4 * LINE_CAP  # UTF-8: LINE_CAP characters are at most this many bytes

_ANSI_RAW = rb"(?:\x1b\[[0-9;?]*[A-Za-z])*"
_RECORD_START_RAW = RECORD_START_SRC.encode()
_PREFIX_RAW = PREFIX_SRC.format(ansi=_ANSI_RAW.decode()).encode()
# A line that does not look like a record start (superset of `_continues`' first case; empty lines start one).
# These two run over whole windows of bytes: the standard library's engine is the faster one there.
_CONTINUATION_RAW = std_re.compile(rb"\n[ \t\x00]*+(?!" + _RECORD_START_RAW + rb"|\r?\n|\Z)")
# A line whose prefix (the longest, as `_prefix` takes it) repeats the previous line's before text that does not
# start a record (the second case).
_SAME_PREFIX_TAIL = rb"))[^\n]*+(?=\n\1[ \t\x00]*+(?!" + _RECORD_START_RAW + rb"|\r?\n|\Z))"
_SAME_PREFIX_RAW = std_re.compile(rb"\n((?>" + _PREFIX_RAW + _SAME_PREFIX_TAIL)
_SAME_PREFIX_AT = std_re.compile(rb"(?<![^\n])((?>" + _PREFIX_RAW + _SAME_PREFIX_TAIL)  # at a line's start only
_BANNER_KEYWORDS = keywords_of((BOOT_BANNER,))
# A line that starts with vLLM's logger header (`masks.vllm_header`): the parser checks every line it is fed, the
# stream every line of every chunk, those it skips too (the first line at, the others after a newline: a search that
# starts with a literal is the fast one).
_HEADER_AT = std_re.compile(VLLM_HEADER_SRC.encode())
_HEADER_AFTER = std_re.compile(rb"\n(?:" + VLLM_HEADER_SRC.encode() + rb")")
# What makes the parser read a log as served: a line that says the API server is up, or a request (each keyword of
# those patterns holds one of these).
# The keywords of the engine's periodic statistics, and the other keywords a serving log is read for.
_STATS_KEYWORDS = ENGINE_THROUGHPUT.keywords_bytes
_SERVING_OTHERS = tuple(k for k in SERVING_NO_BANNER if k not in _STATS_KEYWORDS)
_SERVED = tuple(k.removeprefix(b" ") for k in (*keywords_of((API_READY, ENGINE_THROUGHPUT)), b"request ", b"HTTP/1.1"))
assert all(any(s in k for s in _SERVED) for k in keywords_of((API_READY, REQUEST_TRAFFIC, ENGINE_THROUGHPUT)))


def _read_into(fh: IO[bytes], view: memoryview) -> int:
    readinto = getattr(fh, "readinto", None)
    if readinto is not None:
        n: int = readinto(view)
        return n
    chunk = fh.read(len(view))
    view[: len(chunk)] = chunk
    return len(chunk)


def _blocks(fh: IO[bytes]) -> Generator[tuple[bytearray, int, int, bool], int | None, None]:
    """The file as (buf, begin, end, last), one read at a time: buf[begin:end] are the next complete lines, each
    ending in b"\\n"; buf[:begin] is the line before them (to tell whether the first continues it); `last`: the
    file ends there. The reader sends back where the lines it left unread begin (half a CHUNK at most before end;
    None: it read them all): they come first in the next block. A line longer than STREAM_LINE_CAP keeps its first
    STREAM_LINE_CAP bytes. One buffer, reused: nothing of it outlives the step."""
    cap, chunk = STREAM_LINE_CAP, CHUNK
    buf = bytearray(chunk + chunk // 2 + 3 * cap + 3)
    view = memoryview(buf)
    begin = tail = end = 0  # buf[begin:tail]: lines held back; buf[tail:end]: the line the last read ended in
    long = False  # that line is longer than cap: its rest, up to its newline, is dropped
    while n := _read_into(fh, view[end : end + chunk]):
        new, end = end, end + n
        if long:
            first = buf.find(b"\n", new, end)
            if first < 0:
                end = new
                continue
            view[new : new + end - first] = view[first:end]  # the head, then its newline and what follows
            end, long = new + end - first, False
        nl = buf.rfind(b"\n", tail, end)
        if nl < 0:
            if end - tail > cap:
                end, long = tail + cap, True
            continue
        keep = yield buf, begin, nl + 1, False
        begin, tail, end, long = _compact(buf, view, nl + 1 if keep is None else keep, nl + 1, end)
    if end > tail:
        buf[end] = 0x0A
        end += 1
    yield buf, begin, end, True


def _compact(buf: bytearray, view: memoryview, keep: int, stop: int, end: int) -> tuple[int, int, int, bool]:
    """Move to the front of the buffer the line before `keep` (its first STREAM_LINE_CAP bytes), the lines held
    back (view[keep:stop]) and the start of the line the read ended in (view[stop:end]): (begin, tail, end, long)
    of the next block."""
    cap = STREAM_LINE_CAP
    last = buf.rfind(b"\n", 0, keep - 1) + 1 if keep > 0 else 0
    line = min(keep - last, cap)
    held, rest = stop - keep, min(end - stop, cap)
    view[:line] = view[last : last + line]
    if line:
        buf[line - 1] = 0x0A
    view[line : line + held] = view[keep:stop]
    view[line + held : line + held + rest] = view[stop : stop + rest]
    return line, line + held, line + held + rest, end - stop > cap


def _line_start(data: bytearray, i: int, lo: int) -> int:
    """The start of the line holding data[i], searching back to lo (a line start); -1 when it starts more than
    STREAM_LINE_CAP bytes before i (what is that far into a line is not read)."""
    floor = max(lo, i - STREAM_LINE_CAP)
    j = data.rfind(b"\n", floor, i)
    if j >= 0:
        return j + 1
    return lo if floor == lo else -1


def _keyword_lines(data: bytearray, a: int, b: int, keywords: tuple[bytes, ...], into: set[int]) -> None:
    """Add to `into` the start of every line in data[a:b] (whole lines) that holds one of `keywords` where it is
    read."""
    for kw in keywords:
        i = data.find(kw, a, b)
        while i >= 0:
            s = _line_start(data, i, a)
            if s >= 0:
                into.add(s)
            i = data.find(kw, data.find(b"\n", i, b) + 1, b)


def _full_lines(data: bytearray, a: int, b: int, fed: int, follows: bool = False) -> list[int]:
    """Before the API server is up: the starts of the lines in data[a:b] to hand the parser (and of the line before
    a, when a continues it and it was not handed over yet: fed is the end of the last one handed over). `follows`:
    the line before a continues a record, which a may too (what data does not hold cannot tell)."""
    starts: set[int] = {a} if follows and a < b else set()
    _keyword_lines(data, a, b, KEYWORDS, starts)
    before = data.rfind(b"\n", 0, a - 1) + 1 if a > 0 else 0  # the line before a (a itself when a is 0)
    for m in _CONTINUATION_RAW.finditer(data, max(before - 1, 0), b):
        c = m.start() + 1  # a line that continues the one before
        if c >= a:
            starts.add(c)
            starts.add(data.rfind(b"\n", 0, m.start()) + 1)
        starts.add(data.find(b"\n", c) + 1)  # the next may repeat the prefix of the record's first line
    pairs = _SAME_PREFIX_RAW.finditer(data, before - 1, b) if before > 0 else _pairs_at_start(data, b)
    for m in pairs:
        starts.add(m.start() + 1 if data[m.start()] == 0x0A else m.start())
        starts.add(m.end() + 1)
    return sorted(s for s in starts if a <= s < b or (before <= s < a and s >= fed))


def _pairs_at_start(data: bytearray, b: int) -> Iterator[std_re.Match[bytes]]:
    m = _SAME_PREFIX_AT.match(data, 0, b)
    if m:
        yield m
    yield from _SAME_PREFIX_RAW.finditer(data, 0, b)


def _serving_lines(data: bytearray, a: int, b: int, banners: tuple[bytes, ...]) -> list[int]:
    """Once the API server is up: the starts of the lines in data[a:b] that hold an AFTER_BOOT_KEYWORDS keyword (of
    the banner's, only `banners`: those `_boot_skip` found in data). Of the lines that hold only the statistics'
    keyword, the last MAX_THROUGHPUT_SAMPLES: the facts keep no earlier one (each later one is later in the file, in
    the same boot or in a boot that replaces them)."""
    starts: set[int] = set()
    _keyword_lines(data, a, b, banners + _SERVING_OTHERS, starts)
    stats: set[int] = set()
    _keyword_lines(data, a, b, _STATS_KEYWORDS, stats)
    starts.update(sorted(stats - starts)[-MAX_THROUGHPUT_SAMPLES:])
    return sorted(starts)


def _boot_skip(data: bytearray, a: int, b: int) -> tuple[int, tuple[bytes, ...]]:
    """Where to start reading data[a:b]: at its second-to-last boot banner, when it holds two or more (the parser
    replaces the boots before; the last keeps the warnings printed just before it, from the boot before), else a.
    And the banner keywords data[a:b] holds."""
    found: set[int] = set()
    held: list[bytes] = []
    for kw in _BANNER_KEYWORDS:
        end = b
        for k in range(16):
            i = data.rfind(kw, a, end)
            if i < 0:
                break
            if k == 0:
                held.append(kw)
            s = _line_start(data, i, a)
            if s < 0:
                end = i
                continue
            found.add(s)
            end = s
    banners = 0
    for s in sorted(found, reverse=True):
        if BOOT_BANNER.search(_line_at(data, s, b)):
            banners += 1
            if banners == 2:
                return s, tuple(held)
    return a, tuple(held)


def _line_at(data: bytearray, s: int, b: int) -> str:
    """The line starting at data[s], as the parser reads it (cleaned; its first STREAM_LINE_CAP bytes)."""
    e = data.find(b"\n", s, b)
    return clean(data[s : min(e, s + STREAM_LINE_CAP)].decode("utf-8", errors="replace"))


def _line_end(data: bytearray, i: int, b: int) -> int:
    """The first line boundary at or after i (data[b - 1] is a newline)."""
    if i >= b:
        return b
    return data.find(b"\n", i - 1, b) + 1


def _restart_end(data: bytearray, s: int, b: int, keys: tuple[str, str]) -> int:
    """When the line at data[s] begins a restart (see `LogParser.restart_keys`): the end of the restart's second
    statement, the next line that states something; else -1."""
    if stated_key(_line_at(data, s, b)) != keys[0]:
        return -1
    i = data.find(b"\n", s, b) + 1
    for _ in range(RESTART_SPAN):
        if i <= 0 or i >= b:
            return -1
        key = stated_key(_line_at(data, i, b))
        i = data.find(b"\n", i, b) + 1
        if key is not None:
            return i if key == keys[1] else -1
    return -1


def _no_dry_run(data: bytearray, a: int, b: int, needle: bytes, run: int) -> bool:
    """data[a:b] holds no DRY_LINES lines in a row without `needle` (the first `run` of them before a): the parser
    reading it cannot take it for text quoting vLLM's words (`LogParser.serving`). In steps of bytes, halved where a
    step holds too many lines between two needles to tell."""
    step, i, over = 1 << 15, a, len(needle) - 1
    while i < b:
        w = min(b, i + step)
        j = data.find(needle, i, min(b, w + over))
        if j < 0:
            run += data.count(b"\n", i, w)
        else:
            last = data.rfind(needle, j, min(b, w + over))
            inner = data.count(b"\n", j, last)
            if inner >= DRY_LINES and step > 1024:
                step //= 2
                continue
            if inner >= DRY_LINES or run + data.count(b"\n", i, j) >= DRY_LINES:
                return False
            run = data.count(b"\n", last, w) if last < w else 0
        if run >= DRY_LINES:
            return False
        i = w
    return True


def _repeat_end(data: bytearray, a: int, b: int, n: int) -> int:
    """data[a:b] (whole lines) holds no line to hand the parser. Where the text from the line before it on repeats
    with a period no longer than b - a (a log repeated line for line), each line of the repeats is its twin a
    period before, with the same neighbours: none is handed over either. The start of the last line the repeats
    hold with the line after it; b when the text does not repeat."""
    before = data.rfind(b"\n", 0, a - 1) + 1 if a > 1 else 0  # the line before a
    e = data.find(b"\n", a, b) + 1
    if before < 1 or e <= 0:
        return b
    at = data.find(b"\n" + data[a:e], a, n) + 1  # the first line of data[a:b], next time it starts a line
    period, lo = at - a, before - 1
    if at <= 0 or period > b - a or b + period > n or not _repeats(data, lo, b, period):
        return b
    m, step = b, 1 << 20  # data[lo:m] repeats a period on
    while m + period < n and step >= 1 << 16:
        step = min(step, n - period - m)
        if _repeats(data, m, m + step, period):
            m += step
        else:
            step //= 4
    last = data.rfind(b"\n", a, m + period - 1)  # the end of the last whole line the repeats hold
    return max(b, data.rfind(b"\n", a, last) + 1)


def _repeats(data: bytearray, a: int, b: int, period: int) -> bool:
    """data[a:b] == data[a + period : b + period], compared a MiB at a time (a copy of one MiB at most)."""
    view = memoryview(data)
    return all(data.startswith(bytes(view[i : min(b, i + (1 << 20))]), i + period) for i in range(a, b, 1 << 20))


class _LineNumbers:
    """The file's line numbers of the lines handed over: `base` lines end before the block's first byte, `count`
    of them in data[begin:at]. Each byte is counted once, as the lines handed over move forward."""

    def __init__(self) -> None:
        self.base = self.begin = self.at = self.count = 0

    def block(self, begin: int) -> None:
        self.begin = self.at = begin
        self.count = 0

    def of(self, data: bytearray, s: int) -> int:
        """The number of the line starting at data[s]."""
        if s < self.begin:
            return self.base  # the block's line before, the last of the block before
        if s >= self.at:
            self.count += data.count(b"\n", self.at, s)
        else:
            self.count -= data.count(b"\n", s, self.at)
        self.at = s
        return self.base + self.count + 1

    def carry(self, data: bytearray, keep: int) -> None:
        """The next block begins at data[keep]."""
        self.base += self.of(data, keep) - 1 - self.base


class _Reading:
    """One log through one parser, block by block (`block`); what carries from a block to the next: the line
    numbers, whether the line before the next block was handed over and whether it continues a record."""

    def __init__(self, p: LogParser) -> None:
        self.p = p
        self.numbers = _LineNumbers()
        self.fed = -1  # the end of the last line handed over (-1: not the line before this block)
        self.fed_last = False  # the line before the next block was handed over
        self.follows = False  # it continues a record

    def block(self, data: bytearray, begin: int, n: int, last: bool) -> int:
        """Hand the parser the lines of data[begin:n] that can matter; where those it holds back begin."""
        p = self.p
        self.numbers.block(begin)
        self.fed = begin if self.fed_last else -1
        pos, banners = _boot_skip(data, begin, n)
        follows = self.follows and pos == begin
        window = WINDOW
        while pos < n:
            if p.serving:
                pos, window, follows = self._serve(data, pos, n, banners), WINDOW, False
                continue
            skip = self._restart_skip(data, pos, n, banners)
            if skip > pos:
                p.jump()
                pos, follows = skip, False
            if not last and n - pos <= CHUNK // 2 and self._boots_ahead(data, pos, n, banners):
                return self._hold(data, begin, pos, n)
            nxt = _line_end(data, min(n, pos + window), n)
            starts = _full_lines(data, pos, nxt, self.fed, follows)
            window, follows = min(2 * window, WINDOW_MAX), False
            pos = self._hand(data, starts, n, nxt) if starts else _repeat_end(data, pos, nxt, n)
        return self._hold(data, begin, n, n)

    def _hand(self, data: bytearray, starts: list[int], n: int, nxt: int) -> int:
        """Feed the lines starting at `starts`: where to go on (`nxt`, or the end of the line that changed whether
        the parser serves)."""
        p = self.p
        serving = p.serving
        for s in starts:
            e = data.find(b"\n", s, n)
            if s != self.fed:
                p.gap()
            p.feed(data[s : min(e, s + STREAM_LINE_CAP)].decode("utf-8", errors="replace"), self.numbers.of(data, s))
            self.fed = e + 1
            if p.serving != serving:
                return self.fed
        return nxt

    def _serve(self, data: bytearray, pos: int, n: int, banners: tuple[bytes, ...]) -> int:
        return self._hand(data, _serving_lines(data, pos, n, banners), n, n)

    def _restart_skip(self, data: bytearray, pos: int, n: int, banners: tuple[bytes, ...]) -> int:
        """Where to read data[pos:n] from, in a log without banners that restarts: its second-to-last restart, when
        the lines before it can only be boots the parser replaces (no boot banner, nothing that says the API server
        is up, no DRY_LINES lines that state nothing); else pos."""
        keys = self.p.restart_keys
        needle = key_message(keys[0]).encode() if keys else b""
        if keys is None or not needle.strip() or any(data.find(kw, pos, n) >= 0 for kw in banners):
            return pos
        found: list[tuple[int, int]] = []  # (start of the restart, end of its second statement)
        end = n
        for _ in range(16):
            i = data.rfind(needle, pos, end)
            if i < 0:
                break
            s = _line_start(data, i, pos)
            if s < 0:
                end = i
                continue
            stop = _restart_end(data, s, n, keys)
            if stop > 0:
                found.append((s, stop))
                if len(found) == 2:
                    break
            end = s
        if len(found) < 2:
            return pos
        at, stop = found[1]
        if any(data.find(kw, pos, stop) >= 0 for kw in _SERVED):
            return pos
        return at if _no_dry_run(data, pos, at, needle, self.p.dry_lines) else pos

    def _boots_ahead(self, data: bytearray, pos: int, n: int, banners: tuple[bytes, ...]) -> bool:
        """data[pos:n] holds the start of a boot (a banner, a restart's first statement): a later block may let the
        reader skip it."""
        if any(data.find(kw, pos, n) >= 0 for kw in banners):
            return True
        keys = self.p.restart_keys
        return keys is not None and data.find(key_message(keys[0]).encode(), pos, n) >= 0

    def _hold(self, data: bytearray, begin: int, keep: int, n: int) -> int:
        """The lines from data[keep] are read with the next block: carry what they need."""
        if not self.p.facts.recognised and (_HEADER_AT.match(data, begin) or _HEADER_AFTER.search(data, begin, n)):
            self.p.facts.recognised = True
        self.numbers.carry(data, keep)
        if keep > begin:
            last = data.rfind(b"\n", 0, keep - 1) + 1  # the line before keep
            self.follows = last > 0 and begin <= last and _CONTINUATION_RAW.match(data, last - 1, keep) is not None
        self.fed_last = self.fed == keep
        return keep


def _candidate_lines(fh: IO[bytes]) -> Iterator[bytes]:
    """The lines parse_stream hands a parser that is not serving yet, in file order."""
    for data, begin, n, _ in _blocks(fh):
        for s in _full_lines(data, begin, n, begin):
            yield bytes(data[s : data.find(b"\n", s, n)])


def parse_stream(fh: IO[bytes]) -> LogFacts:
    """Parse a whole log from a binary file object, in constant memory."""
    p = LogParser()
    reading = _Reading(p)
    blocks = _blocks(fh)
    keep = None
    try:
        while True:
            data, begin, n, last = blocks.send(keep)
            keep = reading.block(data, begin, n, last)
    except StopIteration:
        pass
    return p.finish()
