"""The live watchdog of a serve on unified memory (a DGX Spark; vLLM's CPU backend): pure decisions over samples.

On unified memory vLLM's budget is a claim on the whole computer. The plan promised the OS a reserve; while vLLM
runs, the watchdog compares what the kernel says is available (MemAvailable) with that reserve. Below it, it warns
once (again only after memory came back clearly above the reserve) and names who grew since vLLM started: vLLM's own
resident memory, the page cache, or everything else. Below `--stop-below-gib` it asks for a clean stop, before the
kernel's OOM killer chooses a victim. Reading the samples is the caller's (`launcher.run.launch`); nothing here does
I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

GiB = 2**30
REARM_BYTES = 256 * 2**20  # back this far above the reserve before a new warning: a box hovering at it warns once


@dataclass(frozen=True)
class MemSample:
    """One look at the box's memory while vLLM runs (bytes, from /proc/meminfo and vLLM's processes)."""

    seconds: float  # since the launch
    available_bytes: int  # MemAvailable: what the kernel can hand out without swapping or OOM-killing
    page_cache_bytes: int  # Cached + Buffers: file pages, mostly reclaimable (a model's safetensors read in)
    used_bytes: int  # MemTotal - MemFree - Cached - Buffers: anonymous memory and the kernel's own
    vllm_rss_bytes: int  # resident set of every process of the launch (API server, engine core, workers)

    @property
    def others_bytes(self) -> int:
        """Anonymous memory that is not vLLM's: other processes (a desktop, a browser, a second server)."""
        return max(0, self.used_bytes - self.vllm_rss_bytes)


@dataclass(frozen=True)
class Event:
    """What the watchdog saw: MemAvailable below the OS reserve (a warning), or below the stop line (a stop)."""

    kind: Literal["below_reserve", "stop"]
    sample: MemSample
    threshold_bytes: int  # the reserve or the stop line that was crossed
    grew: tuple[tuple[str, int], ...]  # (who, bytes grown since the first sample), largest first

    def line(self) -> str:
        """One line for the terminal: how low, against what, and who grew."""
        s = self.sample
        what = "the OS reserve the plan kept" if self.kind == "below_reserve" else "--stop-below-gib"
        head = (
            f"watchdog: MemAvailable {s.available_bytes / GiB:.2f} GiB is below {what} "
            f"({self.threshold_bytes / GiB:.2f} GiB) at {s.seconds:.0f} s"
        )
        grown = ", ".join(f"{who} {'+' if b >= 0 else '-'}{abs(b) / GiB:.2f} GiB" for who, b in self.grew)
        tail = "; stopping vLLM" if self.kind == "stop" else ""
        return f"{head}; since launch: {grown}{tail}"

    def to_json(self) -> dict[str, Any]:
        s = self.sample
        return {
            "kind": self.kind,
            "seconds": round(s.seconds, 1),
            "available_bytes": s.available_bytes,
            "threshold_bytes": self.threshold_bytes,
            "vllm_rss_bytes": s.vllm_rss_bytes,
            "page_cache_bytes": s.page_cache_bytes,
            "others_bytes": s.others_bytes,
            "grew_bytes": dict(self.grew),
        }


def growth(base: MemSample, now: MemSample) -> tuple[tuple[str, int], ...]:
    """Who grew between two samples, largest growth first: vLLM's RSS, the page cache, other processes."""
    grew = [
        ("vLLM RSS", now.vllm_rss_bytes - base.vllm_rss_bytes),
        ("page cache", now.page_cache_bytes - base.page_cache_bytes),
        ("other processes", now.others_bytes - base.others_bytes),
    ]
    return tuple(sorted(grew, key=lambda g: -g[1]))


@dataclass
class Watchdog:
    """Decides on each sample. `reserve_bytes`: the OS reserve the plan promised (0: none, no warnings);
    `stop_below_bytes`: the stop line (None: never stop). The first sample is the baseline for "who grew"."""

    reserve_bytes: int
    stop_below_bytes: int | None = None
    base: MemSample | None = None
    _warned: bool = False

    def observe(self, s: MemSample) -> Event | None:
        if self.base is None:
            self.base = s
        if self.stop_below_bytes is not None and s.available_bytes < self.stop_below_bytes:
            return Event("stop", s, self.stop_below_bytes, growth(self.base, s))
        if self.reserve_bytes <= 0:
            return None
        if s.available_bytes >= self.reserve_bytes:
            if s.available_bytes >= self.reserve_bytes + REARM_BYTES:
                self._warned = False  # clearly back above the reserve: warn again next time it falls below
            return None
        if self._warned:
            return None  # one warning per crossing, not one per sample
        self._warned = True
        return Event("below_reserve", s, self.reserve_bytes, growth(self.base, s))


def sample_from_meminfo(seconds: float, meminfo: dict[str, int], vllm_rss_bytes: int) -> MemSample:
    """A sample from parsed /proc/meminfo fields (bytes) and the launch's resident memory."""
    cache = meminfo.get("Cached", 0) + meminfo.get("Buffers", 0)  # file pages: the kernel drops them under pressure
    free = meminfo.get("MemFree", 0)
    available = meminfo.get("MemAvailable", free + cache)  # kernels before 3.14 have no MemAvailable
    used = max(0, meminfo.get("MemTotal", 0) - free - cache)  # what is neither free nor file cache
    return MemSample(seconds, available, cache, used, vllm_rss_bytes)
