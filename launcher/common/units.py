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


def vllm_int(text: str) -> int:
    """vLLM's own human_readable_int, exactly (vllm/utils/argparse_utils.py): '32k' -> 32,000, '32K' -> 32,768,
    '25.6k' -> 25,600; a binary suffix takes whole numbers only; anything else is Python's int() of the text
    ('+5', '1_000' included). Raises ValueError with vLLM's wording."""
    t = text.strip()
    m = _HUMAN_INT.match(t)
    if m:
        number, suffix = m.groups()
        if suffix in _DECIMAL:
            return int(float(number) * _DECIMAL[suffix])
        if "." in number:
            raise ValueError(
                f"Decimals are not allowed with binary suffixes like {suffix}. Did you mean to use "
                f"{number}{suffix.lower()} instead?"
            )
        return int(number) * _BINARY[suffix]
    return int(t)


def human_readable_int(text: str) -> int:
    """A size as a profile takes it: vLLM's forms ('32k' -> 32,000, '32K' -> 32,768, '1M', '8192'), digits only
    (no '+5' or '1_000'). Raises ValueError."""
    t = text.strip()
    if not _HUMAN_INT.match(t) and not re.fullmatch(r"[0-9]+", t):
        raise ValueError(f"not a whole number or a size like 32k, 32K or 1M: {text!r}")
    try:
        return vllm_int(t)
    except ValueError:
        number, suffix = t[:-1], t[-1]
        raise ValueError(
            f"vLLM takes no decimals with {suffix!r} (binary); write e.g. {number}{suffix.lower()}"
        ) from None


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
