"""Throughput and memory of `parse_stream` on a large synthetic vLLM log.

    python bench/log_throughput.py [--size-mb 1024] [--small-mb 100] [--min-mb-per-s 100] [--dir /tmp]

The log is the real start-up lines of one fixture log, then request-log noise (vLLM's periodic stats lines, uvicorn
access lines, "Received request"/"Added request"/"Finished request") until the size is reached, written in big
chunks. Each size is parsed in a fresh interpreter so `ru_maxrss` is the parser's own peak; the two sizes show that
RSS does not grow with the file. The facts parsed from the big file must equal those of the start-up lines alone.
Prints one JSON object per size and exits 1 when a size parses slower than --min-mb-per-s or the facts differ.
Temporary files are deleted.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = (
    ROOT
    / "tests"
    / "fixtures"
    / "logs"
    / "llmd-planner-v0.19.0-meta-llama-llama-3-1-8b---h100-80gb--tp1pp1dp1--8192.log"
)
MIB = 1 << 20
BLOCK = 8 * MIB  # one write

CHILD = """
import io, json, resource, sys, time
sys.path.insert(0, sys.argv[2])
from launcher.vllm.logs import parse_stream
t0 = time.perf_counter()
with open(sys.argv[1], "rb") as fh:
    facts = parse_stream(fh)
seconds = time.perf_counter() - t0
rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
print(json.dumps({"seconds": seconds, "peak_rss_mb": rss_kib / 1024, "facts": facts.to_json()}))
"""


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


def write_log(path: Path, startup: bytes, size: int, seed: int = 0) -> int:
    rng = random.Random(seed)
    blocks = [noise_block(rng, BLOCK) for _ in range(4)]
    written = 0
    with open(path, "wb") as fh:
        fh.write(startup)
        written += len(startup)
        k = 0
        while written < size:
            block = blocks[k % len(blocks)]
            k += 1
            if written + len(block) > size:
                cut = block.rfind(b"\n", 0, size - written) + 1
                block = block[:cut] if cut > 0 else block[: size - written]
                if not block:
                    break
            fh.write(block)
            written += len(block)
    return written


def parse_in_child(path: Path) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), str(ROOT)], check=True, capture_output=True, text=True
    ).stdout
    result: dict[str, Any] = json.loads(out)
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=int, default=1024, help="full size in MiB (default 1024 = 1 GiB)")
    ap.add_argument("--small-mb", type=int, default=100, help="the smaller size, to compare RSS (default 100)")
    ap.add_argument("--min-mb-per-s", type=float, default=100.0, help="exit 1 below this throughput")
    ap.add_argument("--dir", default=None, help="where to write the temporary logs (default: the system temp dir)")
    ns = ap.parse_args()

    startup = FIXTURE.read_bytes()
    if not startup.endswith(b"\n"):
        startup += b"\n"
    sys.path.insert(0, str(ROOT))
    from launcher.vllm.logs import parse_stream

    want = parse_stream(io.BytesIO(startup)).to_json()

    ok = True
    for size_mb in dict.fromkeys([ns.small_mb, ns.size_mb]):  # de-duplicated, in order
        fd, name = tempfile.mkstemp(prefix="vlaunch-logbench-", suffix=".log", dir=ns.dir)
        os.close(fd)
        path = Path(name)
        try:
            size = write_log(path, startup, size_mb * MIB)
            res = parse_in_child(path)
        finally:
            path.unlink(missing_ok=True)
        seconds = float(res["seconds"])
        mb = size / MIB
        row = {
            "size_mb": round(mb, 1),
            "seconds": round(seconds, 3),
            "mb_per_s": round(mb / seconds, 1) if seconds else None,
            "peak_rss_mb": round(float(res["peak_rss_mb"]), 1),
        }
        print(json.dumps(row), flush=True)
        if res["facts"] != want:
            got = res["facts"]
            diff = {k: (want.get(k), got.get(k)) for k in want.keys() | got.keys() if want.get(k) != got.get(k)}
            print(f"facts differ from the start-up lines alone: {diff}", file=sys.stderr)
            ok = False
        if seconds and mb / seconds < ns.min_mb_per_s:
            print(f"{mb / seconds:.1f} MB/s is below {ns.min_mb_per_s} MB/s", file=sys.stderr)
            ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
