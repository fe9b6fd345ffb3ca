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

# vLLM's logger header, at the start of every line its logger writes, after the process tags of a worker or of the
# API server ("(APIServer pid=1) ", "(VllmWorker rank=0 pid=42) ", "(EngineCore_DP0 pid=7) "): the level, the date
# and time, then the file and line, "INFO 12-13 19:54:18 worker.py:243] " before 0.6.5 (vllm/logger.py's format
# "%(levelname)s %(asctime)s %(filename)s:%(lineno)d] %(message)s"), "INFO 12-13 19:54:18 [worker.py:243] " since,
# "[v1/worker/gpu_worker.py:276]" with the path from 0.11. A line that starts so is vLLM's, whatever it says. Terminal
# colours may stand between the parts; the raw line is read (bytes in `parse_stream`, the same source).
_ANSI_SRC = r"(?:\x1b\[[0-9;?]*+[A-Za-z]|\x1b\][^\x07\x1b\n]*+(?:\x07|\x1b\\))*+"
TAG_SRC = r"\([A-Za-z0-9_][A-Za-z0-9_ =-]*pid=[0-9]++[^)\n]*+\)[ \t]*+"
VLLM_HEADER_SRC = (
    f"(?:{_ANSI_SRC}{TAG_SRC}(?:{_ANSI_SRC}[ \\t]++)?)*+{_ANSI_SRC}(?:DEBUG|INFO|WARNING|ERROR|CRITICAL){_ANSI_SRC} "
    r"[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]++)? \[?[A-Za-z0-9_./-]++:[0-9]++\]"
)
_VLLM_HEADER = re.compile(VLLM_HEADER_SRC)


def vllm_header(raw: str) -> bool:
    """Whether a line (as read, colours and all) starts with vLLM's logger header: vLLM printed it."""
    return _VLLM_HEADER.match(raw) is not None


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
# A keyword without digits is in a text where it is in the text with its digits made zeros: the lines of a serving
# log (statistics, requests) differ in their figures only, and their keywords are looked for once (`mask_of`). The
# texts remembered are short, and at most _SEEN_MAX of them.
_NO_DIGITS: tuple[tuple[bytes, int], ...] = tuple(
    (k.encode(), bits) for k, bits in _KW_MASKS if not any(c.isdigit() for c in k)
)
_DIGITS: tuple[tuple[str, int], ...] = tuple((k, bits) for k, bits in _KW_MASKS if any(c.isdigit() for c in k))
_ZEROS = bytes.maketrans(b"123456789", b"000000000")
_SEEN: dict[bytes, int] = {}
_SEEN_MAX, _SEEN_LEN = 4096, 512


def mask_of(text: str) -> int:
    """The bits of the patterns whose keywords `text` holds."""
    zeroed = text.encode("utf-8", "surrogatepass").translate(_ZEROS)
    m = _SEEN.get(zeroed)
    if m is None:
        m = 0
        for k, bits in _NO_DIGITS:
            if k in zeroed:
                m |= bits
        if len(zeroed) <= _SEEN_LEN:
            if len(_SEEN) >= _SEEN_MAX:
                _SEEN.clear()
            _SEEN[zeroed] = m
    for d, bits in _DIGITS:
        if d in text:
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
