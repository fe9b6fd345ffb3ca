"""Byte units. Integers everywhere inside; GiB/GB appear only when formatting or parsing a size."""

from __future__ import annotations

import re
from collections.abc import Callable

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
KB = 10**3
MB = 10**6
GB = 10**9

_UNITS = {
    "b": 1,
    "kb": KB, "mb": MB, "gb": GB, "tb": 10**12,
    "kib": KiB, "mib": MiB, "gib": GiB, "tib": 1 << 40,
}  # fmt: skip

_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def gib(n_bytes: int | float) -> float:
    """Bytes as GiB (2**30), for display only."""
    return n_bytes / GiB


def fmt_gib(n_bytes: int | float, digits: int = 2) -> str:
    return f"{n_bytes / GiB:.{digits}f} GiB"


def gib_to_bytes(value: float) -> int:
    """A GiB figure (from a flag or a profile) as whole bytes."""
    return round(value * GiB)


_HUMAN_INT = re.compile(r"^(\d+(?:\.\d+)?)([kKmMgGtT])$")
# vLLM's human_readable_int (vllm/engine/arg_utils.py): a lower-case suffix is decimal, an upper-case one binary.
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": KiB, "M": MiB, "G": GiB, "T": 1 << 40}


def human_readable_int(text: str) -> int:
    """vLLM's sizes for --max-model-len, --max-num-batched-tokens, --kv-cache-memory-bytes: '32k' -> 32,000,
    '32K' -> 32,768, '25.6k' -> 25,600, '1M' -> 1,048,576, '8192' -> 8,192. A binary suffix takes whole numbers
    only (vLLM refuses '1.5K'). Raises ValueError."""
    t = text.strip()
    m = _HUMAN_INT.match(t)
    if m:
        number, suffix = m.groups()
        if suffix in _DECIMAL:
            return int(float(number) * _DECIMAL[suffix])
        if "." in number:
            raise ValueError(f"vLLM takes no decimals with {suffix!r} (binary); write e.g. {number}{suffix.lower()}")
        return int(number) * _BINARY[suffix]
    if not re.fullmatch(r"[0-9]+", t):
        raise ValueError(f"not a whole number or a size like 32k, 32K or 1M: {text!r}")
    return int(t)


def parse_size(text: str) -> int:
    """'12GiB', '12 GB', '1.5gib', '4096' (bytes) -> bytes. Units are explicit, case-insensitive."""
    m = _SIZE.match(text)
    if not m:
        raise ValueError(f"not a size: {text!r} (try e.g. 12GiB or 12GB)")
    number, unit = m.group(1), m.group(2).lower() or "b"
    if unit not in _UNITS:
        raise ValueError(f"unknown unit {m.group(2)!r} in {text!r}; use B, KB, MB, GB, KiB, MiB or GiB")
    return round(float(number) * _UNITS[unit])


def cdiv(a: int, b: int) -> int:
    """Ceiling division of integers (vLLM's cdiv): how many b-sized pieces cover a."""
    return -(-a // b)


def last_true(lo: int, hi: int, ok: Callable[[int], bool]) -> int:
    """The largest n in [lo, hi] with ok(n), for ok true at lo and true up to some n, false after (a bisection)."""
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def users(n: int) -> str:
    """`1 user`, `8 users`: a count of concurrent requests as a sentence says it."""
    return f"{n:,} user" if n == 1 else f"{n:,} users"
