"""The line framer: what a line is once cleaned, where a record starts, and how the lines of a record that goes on
over several lines (a forum's or a terminal's wrap, vLLM's prefix repeated on every line of a multi-line message)
join into one."""

from __future__ import annotations

import regex as re

from launcher.check.masks import BIT, bits, mask_of
from launcher.vllm.logs import (
    ENGINE_CONFIG,
    ERROR_LINE,
    GRAPH_CAPTURE_FRAME,
    HF_UNREACHABLE,
    NON_DEFAULT_ARGS,
    PATTERNS,
    Pattern,
)

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")

# A statement lies in the first LINE_CAP characters of its line: the rest of a longer line (a progress bar
# rewritten with carriage returns, a dumped tensor, binary junk) is not read.
LINE_CAP = 64 << 10


def clean(raw: str) -> str:
    """A line as the patterns see it: cut at LINE_CAP, without carriage returns and terminal escape codes."""
    line = raw[:LINE_CAP].replace("\r", "").rstrip("\n")
    if "\x1b" in line:
        line = ANSI.sub("", line)
    return line


def _looks_like_record_start(line: str) -> bool:
    s = line.lstrip(" \t\x00")
    if not s:
        return True
    return bool(_RECORD_START.match(s))


# Every regex of the reader is linear in its input: possessive quantifiers and atomic groups where two parts could
# match the same characters (`pid=\d++[^)\n]*+`), a word boundary before `\w+` that a literal follows.
_TAG_SRC = r"\(\w[\w ]*pid=\d++[^)\n]*+\)[ \t]*+"
# (Process tags before the level need no part of their own: a line that starts with one matches `\(\w[\w ]*pid=`.)
RECORD_START_SRC = (
    r"(?:\x1b\[[0-9;]*m)?"
    r"(?:INFO|DEBUG|WARNING|ERROR|CRITICAL|Traceback|\[|\d{4}-\d\d-\d\d|"
    r"[A-Z][a-z]{2} \d+|\d\d-\d\d \d\d:|\||#|-|\*|File \"|raise |\b\w+Error|\(\w[\w ]*pid=)"
)
_RECORD_START = re.compile(RECORD_START_SRC)

# The prefix vLLM writes before each line of a record, a multi-line message's too: process tags
# ("(EngineCore_DP0 pid=123) "), then the logger's header ("ERROR 04-22 10:00:00 [core.py:700] ", "INFO 05-30
# 16:22:20 llm_engine.py:234] " before 0.6).
HEADER_SRC = (
    r"(?:INFO|DEBUG|WARNING|ERROR|CRITICAL){ansi} \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d++)? (?:\[?[\w./-]++:\d++\] ?)?"
)
PREFIX_SRC = "(?>(?:{ansi}" + _TAG_SRC + ")+){ansi}(?:" + HEADER_SRC + ")?|{ansi}" + HEADER_SRC
_PREFIX = re.compile(PREFIX_SRC.format(ansi=""))


def prefix(line: str) -> str:
    m = _PREFIX.match(line)
    return m.group(0) if m else ""


# Terminal widths a hard wrap cuts at; a continued record longer than RECORD_CAP is not continued further.
WRAP_COLUMNS = frozenset((80, 100, 120, 132, 160, 200))
RECORD_CAP = 4000
_NUMBER_END = frozenset("0123456789.,")
# How a record's break joins its two lines: with a space, as is, or either (which one on a tie).
_SOFT, _HARD, _EITHER_SOFT, _EITHER_HARD = 0, 1, 2, 3
_MAX_EITHER = 6  # the breaks that could be either, weighed together (2**6 readings)
# The pieces of a record over which readings are weighed: a statement the patterns read across breaks is a few lines
# of a terminal (the longest, vLLM's "To serve at least one request …", is 5 at 80 columns); a longer record (an
# engine config, a multi-line message, a run of full-width lines) joins its later breaks by their defaults.
_WEIGHED_PIECES = 10


def _break_kind(prev: str, before: str, piece: str) -> int:
    """How the line `prev`, which ends `before`, and the next, which adds `piece`, join. After a full-width line
    (WRAP_COLUMNS) or between digits, either way: a full-width line is a hard wrap on a tie, a number split by a
    re-wrap is not."""
    column = len(prev) in WRAP_COLUMNS
    if column or (before.rstrip()[-1:] in _NUMBER_END and piece[:1].isdigit()):
        return _EITHER_HARD if column else _EITHER_SOFT
    return _SOFT


def _read_across(text: str, breaks: list[int], m: int) -> int:
    """How much the statement patterns read across `breaks` in `text`: the breaks inside each match, summed. `m`:
    the patterns to try (a superset of those whose keywords `text` holds)."""
    score = 0
    for p in _WRAP_JUDGES:
        if m & BIT[p.name]:
            for hit in p.regex.finditer(text):
                score += sum(hit.start() < b < hit.end() for b in breaks)
    return score


# What tells a forum's re-wrap from a terminal's hard wrap: the patterns that state numbers (not the ones that
# take the rest of a line, which match either reading).
_WRAP_JUDGES: tuple[Pattern, ...] = tuple(
    p for p in PATTERNS if p not in (ERROR_LINE, ENGINE_CONFIG, NON_DEFAULT_ARGS, HF_UNREACHABLE, GRAPH_CAPTURE_FRAME)
)
_JUDGE_MASK = bits(_WRAP_JUDGES)


class Framer:
    """Takes cleaned lines one at a time and keeps the record the last one ends. A line that does not start a
    record (see `continues`) continues the one before; `take` returns the record they make."""

    def __init__(self) -> None:
        self.line = ""  # the previous line, cleaned
        self.line_prefix = ""  # its record prefix (`prefix`)
        # The record the previous line ends, as its lines (the first whole, then what each continuation adds) and
        # how each break joins (`_SOFT`, `_HARD`, or either: `_EITHER_SOFT` / `_EITHER_HARD` say which on a tie);
        # no lines when the next line cannot continue it.
        self.pieces: list[str] = []
        self.breaks: list[int] = []
        self.record = ""  # the record read so far
        self.record_prefix = ""  # the prefix of its first line
        self.hard: dict[int, bool] = {}  # how `record` reads the breaks that could be either

    def gap(self) -> None:
        """Lines were left out here: the next one continues nothing."""
        self.line = self.line_prefix = ""
        self.end_record()

    def end_record(self) -> None:
        self.pieces, self.breaks, self.record, self.hard = [], [], "", {}

    def take(self, line: str) -> str | None:
        """Read the next line: the record it continues, joined, or None when it starts one."""
        piece = self.continues(line)
        prev = self.line
        self.line, self.line_prefix = line, prefix(line)
        if piece is None:
            self.end_record()
            if len(line) < RECORD_CAP:
                self.pieces, self.record, self.record_prefix = [line], line, self.line_prefix
            return None
        self.breaks.append(_break_kind(prev, self.pieces[-1], piece))
        self.pieces.append(piece)
        self.record = self._read_record()
        return self.record

    def continues(self, line: str) -> str | None:
        """What `line` adds to the record before it, or None when it starts a record. It continues one when it does
        not look like a record start, or when it repeats the prefix (process tag, logger header) of the previous
        line or of the record's first before text that does not (vLLM prefixes every line of a multi-line message;
        a terminal's wrap leaves the lines it adds without one)."""
        if not self.pieces:
            return None
        if not _looks_like_record_start(line):
            return line
        for pre in (self.line_prefix, self.record_prefix):
            if pre and line.startswith(pre):
                rest = line[len(pre) :]
                if not _looks_like_record_start(rest):
                    return rest
        return None

    def _read_record(self) -> str:
        """The record, each break read the way that lets the patterns read most across the breaks that could be
        either (on a tie, their defaults). A forum's re-wrap put a line end where a space was: join with a space. A
        terminal's hard wrap cut at a fixed column, inside a word or a number: join as is."""
        either = [i for i, k in enumerate(self.breaks) if k >= _EITHER_SOFT]
        # the oldest keep the reading they have; past _WEIGHED_PIECES pieces every break does (a new one its
        # default): the work per record is bounded, not 2**_MAX_EITHER readings for each of its lines
        keep = max(0, len(either) - _MAX_EITHER) if len(self.pieces) <= _WEIGHED_PIECES else len(either)
        for i in either[:keep]:
            self.breaks[i] = _HARD if self.hard.get(i, self.breaks[i] == _EITHER_HARD) else _SOFT
        either = either[keep:]
        default = {i: self.breaks[i] == _EITHER_HARD for i in either}
        mask = 0
        if either:  # the judges whose keywords a reading may hold: those of every break joined as is, or spaced
            mask = mask_of(self._join(dict.fromkeys(either, True))[0]) | mask_of(self._join({})[0])
            if not mask & _JUDGE_MASK:
                either = []  # no judge can read across a break: every reading scores 0, the defaults win
        best, best_score, best_flips, best_hard = "", -1, 0, default
        for flips in range(1 << len(either)):
            hard = {i: default[i] != bool(flips >> k & 1) for k, i in enumerate(either)}
            text, at = self._join(hard if either else default)
            score = _read_across(text, [at[i] for i in either], mask) if either else 0
            n = bin(flips).count("1")
            if score > best_score or (score == best_score and n < best_flips):
                best, best_score, best_flips, best_hard = text, score, n, hard
        self.hard = best_hard
        return best

    def _join(self, hard: dict[int, bool]) -> tuple[str, dict[int, int]]:
        """The record with each break read as `hard` says (or as its kind fixes it); where each break is in it."""
        parts = [self.pieces[0]]
        n = len(parts[0])
        at: dict[int, int] = {}
        for i, (kind, piece) in enumerate(zip(self.breaks, self.pieces[1:], strict=True)):
            if hard.get(i, kind == _HARD):
                add = piece
                at[i] = n
            else:
                add = " " + piece.strip()
                at[i] = n + 1
            parts.append(add)
            n += len(add)
        return "".join(parts), at
