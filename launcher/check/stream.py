"""`parse_stream`: a whole log read from a file in constant memory, handing the parser only the lines that can
matter, found with bytes searches over large chunks."""

from __future__ import annotations

import re as std_re
from collections.abc import Iterator
from typing import IO

from launcher.check.facts import LogFacts
from launcher.check.framer import LINE_CAP, PREFIX_SRC, RECORD_START_SRC, clean
from launcher.check.masks import SERVING_NO_BANNER
from launcher.check.parser import LogParser
from launcher.vllm.logs import BOOT_BANNER, KEYWORDS, keywords_of

# parse_stream reads CHUNK bytes at a time and hands the parser only the lines that can change its facts: before
# the API server is up, the lines holding a keyword and every record that continues over lines (and the line
# before it); once it is up, the lines holding one of AFTER_BOOT_KEYWORDS. Both are found with bytes searches over the
# chunk, not line by line. A chunk that holds two boot banners or more is read from the second-to-last: the boots
# before are replaced. A line keeps its first STREAM_LINE_CAP bytes (LINE_CAP characters at most); the rest is
# skipped without being held, so memory does not grow with the file or with a line.

CHUNK = 8 << 20
# Before the API server is up, the keyword search goes this far ahead of the parser, twice as far each time, up to
# WINDOW_MAX (a start-up is short; a log that never gets the server up is read in big steps).
WINDOW, WINDOW_MAX = 64 << 10, 4 << 20
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


def _read_into(fh: IO[bytes], view: memoryview) -> int:
    readinto = getattr(fh, "readinto", None)
    if readinto is not None:
        n: int = readinto(view)
        return n
    chunk = fh.read(len(view))
    view[: len(chunk)] = chunk
    return len(chunk)


def _blocks(fh: IO[bytes]) -> Iterator[tuple[bytearray, int, int]]:
    """The file as (buf, begin, end), one read at a time: buf[begin:end] are the next complete lines, each ending in
    b"\n"; buf[:begin] is the line before them (to tell whether the first continues it). A line longer than
    STREAM_LINE_CAP keeps its first STREAM_LINE_CAP bytes. One buffer, reused: nothing of it outlives the step."""
    cap = STREAM_LINE_CAP
    buf = bytearray(CHUNK + 2 * cap + 2)
    view = memoryview(buf)
    before = 0  # buf[:before]: the line before, with its newline
    keep = 0  # buf[before:keep]: the start of the line the last read ended in (at most cap bytes)
    long = False  # that line is longer than cap: its rest, up to its newline, is dropped
    while n := _read_into(fh, view[keep : keep + CHUNK]):
        end = keep + n
        if long:
            first = buf.find(b"\n", keep, end)
            if first < 0:
                continue
            view[keep : keep + end - first] = view[first:end]  # the head, then its newline and what follows
            end = keep + end - first
            long = False
        nl = buf.rfind(b"\n", keep, end)
        if nl < 0:
            keep = end if end - before <= cap else before + cap
            long = end - before > cap
            continue
        yield buf, before, nl + 1
        last = buf.rfind(b"\n", 0, nl) + 1  # the last complete line
        line = min(nl + 1 - last, cap)
        rest = min(end - nl - 1, cap)
        long = end - nl - 1 > cap
        view[:line] = view[last : last + line]
        buf[line - 1] = 0x0A
        view[line : line + rest] = view[nl + 1 : nl + 1 + rest]
        before, keep = line, line + rest
    if keep > before:
        buf[keep] = 0x0A
        yield buf, before, keep + 1


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
    the banner's, only `banners`: those `_boot_skip` found in data)."""
    starts: set[int] = set()
    _keyword_lines(data, a, b, banners + SERVING_NO_BANNER, starts)
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
        e = data.find(b"\n", s, b)
        if BOOT_BANNER.search(clean(data[s : min(e, s + STREAM_LINE_CAP)].decode("utf-8", errors="replace"))):
            banners += 1
            if banners == 2:
                return s, tuple(held)
    return a, tuple(held)


def _line_end(data: bytearray, i: int, b: int) -> int:
    """The first line boundary at or after i (data[b - 1] is a newline)."""
    if i >= b:
        return b
    return data.find(b"\n", i - 1, b) + 1


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

    def end(self, data: bytearray, n: int) -> None:
        self.base += self.count + data.count(b"\n", self.at, n)


def _parse_block(
    p: LogParser, data: bytearray, begin: int, n: int, before: tuple[bool, bool], numbers: _LineNumbers
) -> tuple[bool, bool]:
    """Hand the parser the lines of data[begin:n] that can matter. `before`, and what it returns for the next block:
    whether the last line was handed over, and whether it continues a record."""
    numbers.block(begin)
    fed = begin if before[0] else -1  # the end of the last line handed over (-1: not the line before begin)
    pos, banners = _boot_skip(data, begin, n)
    follows = before[1] and pos == begin
    window = WINDOW
    while pos < n:
        serving = p.serving
        if serving:
            starts, nxt = _serving_lines(data, pos, n, banners), n
            window = WINDOW
        else:
            nxt = _line_end(data, min(n, pos + window), n)
            starts = _full_lines(data, pos, nxt, fed, follows)
            window = min(2 * window, WINDOW_MAX)
        follows = False
        for s in starts:
            e = data.find(b"\n", s, n)
            if s != fed:
                p.gap()
            p.feed(data[s : min(e, s + STREAM_LINE_CAP)].decode("utf-8", errors="replace"), numbers.of(data, s))
            fed = e + 1
            if p.serving != serving:
                nxt = fed
                break
        pos = nxt
    numbers.end(data, n)
    last = data.rfind(b"\n", 0, n - 1) + 1
    return fed == n, last > 0 and begin <= last and _CONTINUATION_RAW.match(data, last - 1, n) is not None


def _candidate_lines(fh: IO[bytes]) -> Iterator[bytes]:
    """The lines parse_stream hands a parser that is not serving yet, in file order."""
    for data, begin, n in _blocks(fh):
        for s in _full_lines(data, begin, n, begin):
            yield bytes(data[s : data.find(b"\n", s, n)])


def parse_stream(fh: IO[bytes]) -> LogFacts:
    """Parse a whole log from a binary file object, in constant memory."""
    p = LogParser()
    before = (False, False)
    numbers = _LineNumbers()
    for data, begin, n in _blocks(fh):
        before = _parse_block(p, data, begin, n, before, numbers)
    return p.finish()
