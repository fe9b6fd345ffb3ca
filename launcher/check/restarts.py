"""A boot without a banner, started again.

A service that restarts prints its boot banner again, and the parser starts a new boot there. A log without banners
(an offline `LLM(...)` run, a V0 start-up, a fragment pasted from an issue, a script run again and again into one
file) restarts too: its first two statements come again, in the same order, and then the rest of the boot. The
parser starts a new boot at the first of the two (`LogParser` holds the lines between them until it knows the
second follows); `parse_stream` finds the places with bytes searches and reads only the last ones.

A statement's key is the line as a restart prints it again: without the times (vLLM's logger header, a docker or
journald prefix) and the pids (process tags, journald's) a restart changes, with the rest of the prefix (level,
file:line, worker rank or name) and the message. Two workers of one boot print the same message behind different
tags; a restart of a worker prints it behind the same tag.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

import regex as re

from launcher.check.framer import HEADER_SRC
from launcher.check.masks import TAG_SRC

if TYPE_CHECKING:
    from launcher.check.environment import RepoAccess
    from launcher.check.facts import Failure

# What a boot carries from the one before (`LogParser._new_boot`): the environment hints pending since vLLM's last
# line, and what the log said about reaching the model's repo when one of them concerns it.
Carried: TypeAlias = "tuple[dict[str, Failure], RepoAccess | None]"

# The first two statements of a restart are at most RESTART_SPAN lines apart (4 at most in the real logs without a
# banner); further apart, the second is not taken as the restart's.
RESTART_SPAN = 200

# What may stand before a message: journald's and docker's prefixes, process tags, vLLM's logger header.
_JOURNALD = r"(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d [^\s:]++ [^\s:\[]++(?:\[\d++\])?: )?"
_DOCKER = r"(?:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d++)?(?:Z|[+-]\d\d:?\d\d) )?"
# The process tags are those `masks` knows a vLLM line by; the header is the framer's (ANSI colours are gone from a
# cleaned line).
_PREFIX = re.compile(_JOURNALD + _DOCKER + "(?:" + TAG_SRC + ")*+(?:" + HEADER_SRC.format(ansi="") + ")?")
# What of a prefix a restart changes: pids, times.
_CHANGES = re.compile(
    r"pid=\d++|\[\d++\]: |\d{4}-\d\d-\d\dT\S++ |[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d "
    r"|\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d++)?"
)
GAP = None  # in `Restart.lines`: lines were left out here (`LogParser.gap`)


def statement_key(line: str) -> str:
    """The key of a statement line (a cleaned line): its prefix without times and pids, then its message."""
    m = _PREFIX.match(line)
    pre = m.group(0) if m else ""
    return _CHANGES.sub("", pre) + "\x00" + line[len(pre) :]


def key_message(key: str) -> str:
    """The message part of a key: what a restart prints verbatim."""
    return key[key.index("\x00") + 1 :]


class Restart:
    """A line that repeats the boot's first statement: what the parser holds until the next statement says whether
    the boot restarted there. `carried`: what a new boot would carry from this one had it started before that line
    (the environment hints pending, the repo access they concern); `lines`: the lines read since, with it, and where
    lines were left out (GAP)."""

    __slots__ = ("carried", "line_no", "lines")

    def __init__(self, carried: Carried, line: str, line_no: int) -> None:
        self.carried = carried
        self.line_no = line_no
        self.lines: list[tuple[str | None, int]] = [(line, line_no)]

    def hold(self, line: str | None, line_no: int) -> bool:
        """Keep a line read after the first statement; False when the restart's second statement can no longer
        follow (RESTART_SPAN)."""
        if line_no - self.line_no > RESTART_SPAN:
            return False
        self.lines.append((line, line_no))
        return True


class Restarts:
    """How a boot without a banner restarts: the keys of its first two statements (`keys`), the line that may begin
    its restart (`held`), and how many boots began so over the log (`count`)."""

    __slots__ = ("count", "held", "keys")

    def __init__(self, count: int = 0) -> None:
        self.keys: list[str] = []
        self.held: Restart | None = None
        self.count = count

    @property
    def keyed(self) -> bool:
        return len(self.keys) == 2

    def gap(self, line_no: int) -> None:
        if self.held is not None and not self.held.hold(GAP, line_no):
            self.held = None

    def read(self, key: str | None, line: str, line_no: int, carried: Carried | None) -> Restart | None:
        """A line was read (`key`: its statement key, None when it states nothing; `carried`: what a boot starting
        before it would carry, None while the boot's keys are not both known): the held lines of the restart that
        begins a new boot at this line (the second statement of the restart), else None."""
        if not self.keyed:
            if key is not None:
                self.keys.append(key)
            return None
        held = self.held
        if held is not None:
            if key is None:
                if not held.hold(line, line_no):
                    self.held = None
                return None
            self.held = None
            if key == self.keys[1] and held.hold(line, line_no):
                return held
        if key is not None and key == self.keys[0] and carried is not None:
            self.held = Restart(carried, line, line_no)
        return None
