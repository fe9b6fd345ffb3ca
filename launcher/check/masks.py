"""Which patterns a text can match, from the keywords it holds (one bit per pattern), and what is derived from the
table for the reader: the lines only vLLM prints, and the keywords a serving log is read for."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import regex as re

from launcher.vllm.logs import (
    ADDRESS_IN_USE,
    BOOT_BANNER,
    CUDA_OOM,
    DOCKER_DAEMON,
    DRIVER_TOO_OLD,
    ENGINE_THROUGHPUT,
    ERROR_LINE,
    GRAPH_CAPTURE_FRAME,
    HF_GATED,
    HF_REPO_NOT_FOUND,
    HF_UNREACHABLE,
    INVALID_CONFIG,
    NO_CUDA_GPU,
    NO_GPU_RUNTIME,
    OUT_OF_DISK,
    PATTERNS,
    REQUEST_TRAFFIC,
    VERSION,
    Pattern,
)

VERSION_CONTEXT = ("vLLM", "LLM engine", "█", "▀", "api_server")

# The lines that make a file a vLLM log: every pattern but the ones any program may print (a Python exception, a
# version number, a traceback frame, torch's out-of-memory, the launch environment's failures).
_NOT_VLLM_ONLY = (
    VERSION, ERROR_LINE, GRAPH_CAPTURE_FRAME, INVALID_CONFIG, CUDA_OOM, DOCKER_DAEMON, NO_GPU_RUNTIME, NO_CUDA_GPU,
    DRIVER_TOO_OLD, ADDRESS_IN_USE, HF_GATED, HF_REPO_NOT_FOUND, HF_UNREACHABLE, OUT_OF_DISK, REQUEST_TRAFFIC,
)  # fmt: skip
VLLM_ONLY: tuple[Pattern, ...] = tuple(p for p in PATTERNS if p not in _NOT_VLLM_ONLY)

# Once the API server is up, a log is request traffic: only a new boot (its banner), a runtime failure (CUDA out of
# memory, a worker that died, the port taken: uvicorn binds after start-up before 0.6) or the engine's periodic
# statistics can change what it states. A line is read then only when it holds one of these: the boot banner's
# keywords, CUDA's out of memory, a dead worker, uvicorn's bind error, the statistics' keyword (few and long: each is
# one search of every chunk).
AFTER_BOOT_KEYWORDS: tuple[bytes, ...] = (
    *BOOT_BANNER.keywords_bytes, b"out of memory", b"died unexpectedly (exit code: ",
    b"error while attempting to bind on address", *ENGINE_THROUGHPUT.keywords_bytes,
)  # fmt: skip
SERVING_STR: tuple[str, ...] = tuple(k.decode() for k in AFTER_BOOT_KEYWORDS)
SERVING_NO_BANNER: tuple[bytes, ...] = tuple(k for k in AFTER_BOOT_KEYWORDS if k not in BOOT_BANNER.keywords_bytes)

# Which patterns a text can match, from the keywords it holds: one bit per pattern.
BIT: dict[str, int] = {p.name: 1 << i for i, p in enumerate(PATTERNS)}
_KW_MASKS: tuple[tuple[str, int], ...] = tuple(
    (k, sum(BIT[p.name] for p in PATTERNS if k in p.keywords))
    for k in dict.fromkeys(k for p in PATTERNS for k in p.keywords)
)


def mask_of(text: str) -> int:
    """The bits of the patterns whose keywords `text` holds."""
    m = 0
    for k, bits in _KW_MASKS:
        if k in text:
            m |= bits
    return m


def bits(patterns: Iterable[Pattern]) -> int:
    return sum(BIT[p.name] for p in patterns)


_VLLM_ONLY_MASK = bits(VLLM_ONLY)
_BY_BIT: dict[int, Pattern] = {BIT[p.name]: p for p in PATTERNS}


def vllm_line_in(
    line: str, mask: int, search: Callable[[Pattern, str], re.Match[str] | None] = lambda p, line: p.search(line)
) -> bool:
    """`vllm_line`, for a line whose `mask_of` is `mask`, searching with `search`."""
    hits = mask & _VLLM_ONLY_MASK
    while hits:
        low = hits & -hits
        if search(_BY_BIT[low], line):
            return True
        hits ^= low
    return (
        bool(mask & BIT[VERSION.name]) and search(VERSION, line) is not None and any(k in line for k in VERSION_CONTEXT)
    )


def vllm_line(line: str) -> bool:
    """Whether vLLM printed this line: a pattern only vLLM's lines match, or its version banner."""
    return vllm_line_in(line, mask_of(line))
