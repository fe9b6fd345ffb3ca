"""`LogParser`: the line framer, then the table of rules (which pattern hands its match to which extractor)."""

from __future__ import annotations

import contextlib
import copy
from collections import deque
from collections.abc import Iterable

import regex as re

from launcher.check.environment import ENVIRONMENT_RULES, RepoAccess
from launcher.check.extract import FACT_RULES, Rule
from launcher.check.facts import FAILURE_RANK, Failure, LogFacts
from launcher.check.failures import FAILURE_RULES, conclude
from launcher.check.framer import LINE_CAP, RECORD_CAP, Framer, clean
from launcher.check.masks import BIT, SERVING_STR, VERSION_CONTEXT, bits, mask_of, vllm_header, vllm_line_in
from launcher.check.restarts import Carried, Restart, Restarts, statement_key
from launcher.vllm.logs import API_READY, BOOT_BANNER, ENGINE_THROUGHPUT, REQUEST_TRAFFIC, VERSION, Pattern

# Lines in a row that hold keywords and match no pattern before the parser reads only what a serving log can say.
# A vLLM start-up states a fact every few lines: over the 169 real and CPU-build logs in tests/fixtures and the
# shared corpus the longest such run is 17 lines.
DRY_LINES = 500

# Every text is read by these, in order: each rule's patterns are tried in turn and the first that matches hands
# its match to its extractor (an `elif` chain); a rule whose patterns' keywords the text lacks is skipped.
RULES: tuple[Rule, ...] = (*FACT_RULES, *FAILURE_RULES, *ENVIRONMENT_RULES)
# A line a rule's pattern matches states something; what only a serving vLLM prints is no statement of its boot.
_SERVING_ONLY = (API_READY, REQUEST_TRAFFIC, ENGINE_THROUGHPUT)
_RULE_MASKS: tuple[tuple[int, Rule, bool], ...] = tuple(
    (bits(p for p, _ in rule), rule, not any(p in _SERVING_ONLY for p, _ in rule)) for rule in RULES
)


_RULES_FOR: dict[int, tuple[tuple[Rule, bool], ...]] = {}  # by the bits of a text's keywords (at most 4096 kept)


def _rules_for(m0: int) -> tuple[tuple[Rule, bool], ...]:
    """The rules a text whose keywords have the bits `m0` can match, in order, and whether each states something."""
    rules = _RULES_FOR.get(m0)
    if rules is None:
        rules = tuple((rule, states) for mask, rule, states in _RULE_MASKS if m0 & mask)
        if len(_RULES_FOR) < 4096:
            _RULES_FOR[m0] = rules
    return rules


def stated_key(line: str) -> str | None:
    """The restart key of a cleaned line (`restarts.statement_key`) when the line alone states something of a
    boot, else None: what `LogParser` takes it for, whatever it has read."""
    m0 = mask_of(line)
    if not m0:
        return None
    for rule, states in _rules_for(m0):
        if states and any(m0 & BIT[p.name] and p.search(line) for p, _ in rule):
            return statement_key(line)
    return None


def _carried(pending: dict[str, Failure], repo: RepoAccess) -> Carried:
    """What a boot starting here carries from the one before: the environment hints pending, the repo access."""
    if not pending:
        return {}, None
    return dict(pending), copy.copy(repo) if "repo_access" in pending else None


class LogParser:
    """Feed it lines; read `.facts`. Never raises on any input.

    A pattern is tried on a line only when the line holds one of its keywords (what the stream pre-filter looks
    for, so `parse_text` and `parse_stream` read the same). A line that does not start a record (see
    `Framer.continues`) continues the one before: the record they make is matched too, so a statement wrapped by a
    terminal or a forum is read. A boot banner starts a new boot: a log holding several (a service that restarted)
    states its last. So does, in a boot without a banner, a restart: its first two statements again, in order
    (`restarts`; the lines from the first are held until the second says so, then read again in the new boot). Once
    the API server is up (`serving`), only the lines that hold one of AFTER_BOOT_KEYWORDS are
    read (a new boot, a runtime failure, the engine's statistics), each alone; the rest is request traffic. So it is
    after DRY_LINES lines in a row that hold keywords and state nothing (prose or prompts quoting vLLM's words, not a
    start-up): a real start-up states something every few lines, and a boot banner reads it again from there.

    The extractors read and write the state below that has no leading underscore."""

    def __init__(self) -> None:
        self.facts = LogFacts()
        self._framer = Framer()
        self._boots = 0  # boot banners read
        self.traffic = False  # a request-time line was read: the API server is up, whatever the log began with
        self._before = ""  # while matching a continued record: the record before this line
        self._cur = ""  # and this line alone
        self.error_in_record = False  # an error message of the current record is the last of `error_lines`
        self._m = 0  # the patterns whose keywords the text being matched holds (bits of `BIT`)
        self.continued = False  # the text being matched is a continued record
        self._found: dict[str, re.Match[str] | None] = {}  # its searches so far, by pattern
        self.config_set: set[str] = set()  # the facts the last engine-config line set
        self.recent: deque[str] = deque(maxlen=6)
        self.error_lines: list[str] = []
        self.engine_failed = False
        self.hints: dict[str, Failure] = {}  # the environment failures warnings hint at, by kind
        self.pending: dict[str, Failure] = {}  # those hinted since the last line vLLM printed: a new boot's own
        self.repo = RepoAccess()
        self._hits = 0  # pattern searches that matched
        self._dry = 0  # lines in a row that held keywords and matched no pattern
        self._junk = False  # DRY_LINES such lines: text quoting vLLM's words, not a start-up (see `serving`)
        self.line_no = 0  # the number of the line being read, from 1 (the file's, when the feeder says it)
        self._banner = False  # this boot began at a boot banner (it ends at the next)
        self._restarts = Restarts()  # else: how it restarts (`restarts`)
        self._stated: str | None = None  # the key of the line just read, when it stated something

    @property
    def serving(self) -> bool:
        """The API server is up (it said so, or requests are being served: a log that begins after the start-up)
        and nothing failed: only the lines holding an AFTER_BOOT_KEYWORDS keyword can change the facts now."""
        return (self.facts.api_ready or self.traffic or self._junk) and self.facts.failure is None

    # -- public --
    def feed(self, line: str, line_no: int | None = None) -> None:
        """`line_no`: the line's number in the file, when lines were left out before it (else the next)."""
        self.line_no = self.line_no + 1 if line_no is None else line_no
        with contextlib.suppress(Exception):  # a parser bug must not take down a launch or a check
            self._feed(line)

    def feed_many(self, lines: Iterable[str]) -> LogFacts:
        for line in lines:
            self.feed(line)
        return self.finish()

    def finish(self) -> LogFacts:
        conclude(self)
        return self.facts

    def gap(self) -> None:
        """Lines were left out here (`parse_stream` skips lines that cannot matter): the next one continues
        nothing."""
        self._framer.gap()
        self._restarts.gap(self.line_no)

    def jump(self) -> None:
        """Boots were left out here: the next line is read where the boot restarted (`parse_stream` reads the last
        restarts only)."""
        self._restarts.held = None
        self._framer.gap()

    @property
    def dry_lines(self) -> int:
        """Lines in a row that held keywords and stated nothing, up to this one (see `serving`)."""
        return self._dry

    @property
    def restart_keys(self) -> tuple[str, str] | None:
        """What a restart of this boot begins with (the keys of its first two statements): for a boot without a
        banner that restarted once at least, while it is not serving."""
        r = self._restarts
        if not r.keyed or not r.count or self.serving:
            return None
        return r.keys[0], r.keys[1]

    # -- for the extractors --
    def search(self, p: Pattern, text: str) -> re.Match[str] | None:
        """`p.search(text)`, when the text holds one of p's keywords (once per text: `_match` clears `_found`)."""
        if not self._m & BIT[p.name]:
            return None
        if p.name not in self._found:
            found = self._found[p.name] = p.regex.search(text)
            self._hits += found is not None
        return self._found[p.name]

    @property
    def record_line(self) -> int:
        """The number of the line the record being matched starts on (this line's, unless it is continued)."""
        return self.line_no - len(self._framer.pieces) + 1 if self.continued else self.line_no

    def new_in_join(self, pattern: Pattern) -> bool:
        """A continued record's match is new only when neither the record before this line nor the line alone
        matched."""
        return not pattern.search(self._before) and not pattern.search(self._cur)

    def env(self, failure: Failure, hint: bool, refine: bool = False) -> None:
        """A warning only hints (see `finish`). Once vLLM is up, a repo, disk or GPU error belongs to a request, not
        to the launch; a taken port still fails it (uvicorn binds after 'Application startup complete' before 0.6)."""
        f = self.facts
        if hint:
            self.hints.setdefault(failure.kind, failure)
            self.pending.setdefault(failure.kind, failure)
        elif failure.kind == "address_in_use" or not (f.api_ready or f.init_engine_seconds is not None):
            self.fail(failure, refine=refine)

    def fail(self, failure: Failure, refine: bool = False) -> None:
        """Keep the highest-ranked failure; `refine`: a later line of the same failure says more."""
        cur = self.facts.failure
        better = cur is not None and cur.kind == failure.kind and failure.estimated_max_model_len is not None
        if (
            cur is None
            or FAILURE_RANK[failure.kind] > FAILURE_RANK[cur.kind]
            or (better and cur.estimated_max_model_len is None)
            or (refine and cur.kind == failure.kind)
        ):
            self.facts.failure = failure

    # -- internals --
    def _feed(self, raw: str) -> None:
        self.facts.lines_read += 1
        line = clean(raw)
        if not self.facts.recognised and vllm_header(raw[:LINE_CAP]):
            self.facts.recognised = True
        self._take(line)

    def _take(self, line: str, watch: bool = True) -> None:
        """Read a cleaned line; `watch`: whether it may begin or complete a restart (not while one is read again)."""
        r = self._restarts
        if self.serving:
            r.held = None
            self._serving_line(line)
            return
        carried = _carried(self.pending, self.repo) if watch and r.keyed else None
        boots = self._boots
        self._stated = None
        self._read(line)
        if self._boots == boots and not self._banner and (watch or not r.keyed):
            held = r.read(self._stated, line, self.line_no, carried)
            if held is not None:
                self._restarted(held)

    def _serving_line(self, line: str) -> None:
        fr = self._framer
        fr.line, fr.line_prefix = line, ""
        fr.end_record()
        for k in SERVING_STR:
            if k in line:
                self._match(line)
                self.recent.append(line[-300:])
                return

    def _read(self, line: str) -> None:
        fr = self._framer
        before = fr.record
        joined = fr.take(line)
        boots = self._boots
        hits = self._hits
        if joined is None:
            self.error_in_record = False
            self._match(line)
        else:
            self._match(line)
            if self._boots == boots:  # a banner on this line starts a boot: the record before is not continued
                self._before, self._cur = before, line
                self._match(joined, continuation=True)
                if len(joined) >= RECORD_CAP:
                    fr.end_record()
        self.recent.append(line[-300:])
        if self._boots == boots and self._m:  # the line held keywords (a new boot resets the count)
            self._dry = 0 if self._hits != hits else self._dry + 1
            if self._dry >= DRY_LINES:
                self._junk = True
                fr.end_record()

    def _restarted(self, held: Restart) -> None:
        """A new boot from the held lines: read again, the last (the restart's second statement) included."""
        line_no = self.line_no
        (*lines, (last, _)) = held.lines
        self._new_boot(carried=held.carried)
        self._restarts.count += 1
        for text, no in lines:
            if text is None:
                self._framer.gap()
            else:
                self.line_no = no
                self._take(text, watch=False)
        self.line_no = line_no
        carried = _carried(self.pending, self.repo)
        self._take(str(last), watch=False)
        r = self._restarts
        if r.keyed and self._stated == r.keys[0]:  # a first statement that is also the second
            r.held = Restart(carried, str(last), line_no)

    def _new_boot(self, banner: bool = False, carried: Carried | None = None) -> None:
        """A boot banner, or a restart: what the log said before belongs to an earlier boot. The environment
        warnings printed since vLLM's last line (before the banner, or the restart's first statement) belong to this
        one."""
        old, old_boots, line_no, restarts = self.facts, self._boots, self.line_no, self._restarts.count
        pending, repo = carried if carried is not None else _carried(self.pending, self.repo)
        self.__init__()  # type: ignore[misc]
        self.line_no, self._restarts.count, self._banner = line_no, restarts, banner
        self.facts.recognised, self.facts.lines_read, self.facts.source = old.recognised, old.lines_read, old.source
        self.hints, self.repo = dict(pending), repo or RepoAccess()
        self._boots = old_boots + 1

    def _match(self, text: str, continuation: bool = False) -> None:
        self._m = m0 = mask_of(text)
        self.continued = continuation
        self._found = {}
        if not m0:
            return
        s = self.search
        if not continuation and s(BOOT_BANNER, text):
            self._new_boot(banner=True)
            self._m, self.continued, self._found = m0, continuation, {}
        f = self.facts
        if (self.pending or not f.recognised) and vllm_line_in(text, m0, s):
            self.pending = {}
            f.recognised = True
        if f.vllm_version is None and (m := s(VERSION, text)) and any(k in text for k in VERSION_CONTEXT):
            f.vllm_version = m["version"]
        stated = False
        for rule, states in _rules_for(m0):
            for p, extract in rule:
                if m := s(p, text):
                    stated = stated or states
                    extract(self, m, text)
                    break
        if stated and not continuation:
            self._stated = statement_key(text)


def parse_text(text: str) -> LogFacts:
    """Parse a whole log held in memory: the same facts as parse_stream (lines end at "\n")."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return LogParser().feed_many(lines)
