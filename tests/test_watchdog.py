"""The serve watchdog's decisions over memory samples, and the serve policy's refusal order."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from launcher.run import serving
from launcher.run.watchdog import REARM_BYTES, MemSample, Watchdog, growth, sample_from_meminfo

GiB = 2**30


def s(t: float, avail: float, cache: float = 1, used: float = 4, rss: float = 2) -> MemSample:
    return MemSample(t, int(avail * GiB), int(cache * GiB), int(used * GiB), int(rss * GiB))


def test_meminfo_sample_reads_the_kernels_fields() -> None:
    kib = 1024
    info = {
        "MemTotal": 24_000_000 * kib,
        "MemFree": 10_000_000 * kib,
        "MemAvailable": 15_000_000 * kib,
        "Buffers": 100_000 * kib,
        "Cached": 4_900_000 * kib,
    }
    x = sample_from_meminfo(3.0, info, 2 * GiB)
    assert x.available_bytes == 15_000_000 * kib
    assert x.page_cache_bytes == 5_000_000 * kib
    assert x.used_bytes == 9_000_000 * kib  # 24 - 10 free - 5 cache (million KiB)
    assert x.others_bytes == 9_000_000 * kib - 2 * GiB


def test_old_kernel_without_memavailable_counts_free_and_cache() -> None:
    x = sample_from_meminfo(0.0, {"MemTotal": 8 * GiB, "MemFree": 3 * GiB, "Cached": 2 * GiB}, 0)
    assert x.available_bytes == 5 * GiB


def test_below_reserve_warns_once_per_crossing_and_names_who_grew() -> None:
    dog = Watchdog(reserve_bytes=4 * GiB)
    assert dog.observe(s(0, 20, cache=1, used=4, rss=0.5)) is None  # the baseline
    ev = dog.observe(s(10, 3.5, cache=2, used=18, rss=12.5))
    assert ev is not None and ev.kind == "below_reserve"
    assert ev.grew[0] == ("vLLM RSS", 12 * GiB)  # largest first
    assert dict(ev.grew) == {"vLLM RSS": 12 * GiB, "page cache": 1 * GiB, "other processes": 2 * GiB}
    line = ev.line()
    assert "MemAvailable 3.50 GiB" in line and "OS reserve" in line and "(4.00 GiB)" in line
    assert "vLLM RSS +12.00 GiB" in line and "page cache +1.00 GiB" in line and "other processes +2.00 GiB" in line
    assert dog.observe(s(12, 3.0)) is None  # still below: no second warning
    assert dog.observe(s(13, 4.1)) is None  # back above, but hovering at the reserve
    assert dog.observe(s(13.5, 3.9)) is None  # no new warning for hovering
    assert dog.observe(s(14, 5.0)) is None  # recovered
    again = dog.observe(s(16, 3.9))
    assert again is not None and again.kind == "below_reserve"


def test_stop_line_wins_over_the_reserve_and_says_it_stops() -> None:
    dog = Watchdog(reserve_bytes=4 * GiB, stop_below_bytes=2 * GiB)
    dog.observe(s(0, 20))
    warn = dog.observe(s(5, 3))
    assert warn is not None and warn.kind == "below_reserve"
    stop = dog.observe(s(6, 1.5))
    assert stop is not None and stop.kind == "stop" and stop.threshold_bytes == 2 * GiB
    assert stop.line().endswith("; stopping vLLM") and "--stop-below-gib (2.00 GiB)" in stop.line()
    j: dict[str, Any] = stop.to_json()
    assert j["kind"] == "stop" and j["available_bytes"] == int(1.5 * GiB) and j["threshold_bytes"] == 2 * GiB
    assert set(j["grew_bytes"]) == {"vLLM RSS", "page cache", "other processes"}


def test_no_reserve_no_stop_line_never_fires() -> None:
    dog = Watchdog(reserve_bytes=0)
    assert all(dog.observe(s(t, 0.01)) is None for t in range(5))


def test_a_shrinking_page_cache_shows_as_negative_growth() -> None:
    base, now = s(0, 10, cache=8), s(1, 2, cache=3, used=14, rss=9)
    grew = dict(growth(base, now))
    assert grew["page cache"] == -5 * GiB
    assert "page cache -5.00 GiB" in Watchdog(4 * GiB, base=base).observe(now).line()  # type: ignore[union-attr]


samples = st.builds(
    MemSample,
    st.floats(0, 1e6),
    st.integers(0, 2**40),
    st.integers(0, 2**40),
    st.integers(0, 2**40),
    st.integers(0, 2**40),
)


@given(st.integers(0, 2**40), st.none() | st.integers(0, 2**40), st.lists(samples, min_size=1, max_size=30))
def test_watchdog_invariants(reserve: int, stop: int | None, seq: list[MemSample]) -> None:
    dog = Watchdog(reserve, stop)
    warned = False
    for x in seq:
        ev = dog.observe(x)
        if stop is not None and x.available_bytes < stop:
            assert ev is not None and ev.kind == "stop"  # the stop line always acts
            continue
        if x.available_bytes >= reserve or reserve == 0:
            assert ev is None
            if x.available_bytes >= reserve + REARM_BYTES:
                warned = False
        else:
            assert (ev is not None) == (not warned)  # exactly one warning per crossing
            warned = True
        if ev is not None:
            assert ev.line().startswith("watchdog: MemAvailable ")
            assert sum(b for _, b in ev.grew) == (
                (x.vllm_rss_bytes - seq[0].vllm_rss_bytes)
                + (x.page_cache_bytes - seq[0].page_cache_bytes)
                + (x.others_bytes - seq[0].others_bytes)
            )


# --- the serve policy's decision -----------------------------------------------------------------------------------


class _Plan:
    def __init__(self, fits: bool) -> None:
        from launcher.plan.profiles import Profile

        self.fits = fits
        self.profile = Profile(model="m")


@pytest.mark.parametrize(
    ("fits", "verdict", "force", "dry_run", "code"),
    [
        (True, "free", False, False, None),
        (False, "free", False, False, 3),
        (False, "free", True, False, None),
        (False, "held by pid 12", False, False, 3),  # the plan is judged first
        (True, "held by pid 12", False, False, 4),
        (True, "held by pid 12", False, True, None),  # a dry run starts nothing: the box may be held
        (False, "held by pid 12", False, True, 3),
        (False, "held by pid 12", True, False, 4),
    ],
)
def test_refusal_order(fits: bool, verdict: str, force: bool, dry_run: bool, code: int | None) -> None:
    r = serving.refusal(_Plan(fits), verdict, force=force, dry_run=dry_run)  # type: ignore[arg-type]
    assert (None if r is None else r.code) == code
    if r is not None:
        assert r.line.startswith("refusing to launch: ")
        assert ("--force" in r.line) == (code == 3)
        assert code != 4 or verdict in r.line


def test_options_are_frozen() -> None:
    o = serving.ServeOptions()
    with pytest.raises(AttributeError):
        o.force = True  # type: ignore[misc]
    assert replace(o, stop_below_bytes=GiB).stop_below_bytes == GiB


@pytest.mark.parametrize("value", ["-1", "inf", "nan", "1e300", "abc"])
def test_stop_below_gib_refuses_what_is_not_a_size(value: str) -> None:
    from click.testing import CliRunner

    from launcher.cli import main

    r = CliRunner().invoke(main, ["serve", "tiny-cpu", "--dry-run", "--stop-below-gib", value])
    assert r.exit_code == 2, r.output
    assert "--stop-below-gib" in r.stderr and len(r.stderr.strip().splitlines()) <= 3
    assert "Traceback" not in r.output
