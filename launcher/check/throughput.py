"""What a serving vLLM's log says about its speed: the engine's periodic statistics, as `ThroughputSample`s."""

from __future__ import annotations

import os
from collections.abc import Iterable

from launcher.check.facts import LogFacts, ThroughputSample
from launcher.check.parser import LogParser
from launcher.check.stream import parse_stream


def throughput_samples(log: str | os.PathLike[str] | Iterable[str]) -> list[ThroughputSample]:
    """The statistics lines of a log's last boot, in the order printed (the last MAX_THROUGHPUT_SAMPLES). `log`: a
    file's path (read in constant memory), or its lines (a line's number is its place among them, from 1)."""
    if isinstance(log, str | os.PathLike):
        with open(log, "rb") as fh:
            facts = parse_stream(fh)
    else:
        facts = LogParser().feed_many(line.removesuffix("\n") for line in log)
    return list(facts.throughput)


def summary(f: LogFacts) -> str | None:
    """One line for `vlaunch check`: how many samples, and the one of highest generation throughput."""
    if not f.throughput:
        return None
    peak = max(f.throughput, key=lambda s: s.generation_tokens_per_s)
    n = len(f.throughput)
    return (
        f"serving: {n} throughput sample{'s' if n != 1 else ''}, peak generation "
        f"{peak.generation_tokens_per_s:,.1f} tokens/s at {peak.running} running"
    )
