"""Byte units. Integers everywhere inside; GiB/GB appear only when formatting or parsing a size."""

from __future__ import annotations

import re

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
