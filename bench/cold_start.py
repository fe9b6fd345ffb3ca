"""Cold-start timing of the CLI: median wall time of fresh processes against `python -c pass`.

    python bench/cold_start.py [--runs 9] [-- extra vlaunch args]

Each run is a new interpreter, so imports are paid every time, as a user pays them. The two commands alternate,
so the machine's noise falls on both.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ["count", str(ROOT / "tests" / "fixtures" / "configs" / "Llama-3.1-8B.json"), "--json"]


def timed(argv: list[str], runs: int) -> list[float]:
    # As an installed package runs: bytecode cached (an environment that forbids writing it recompiles every run).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["HF_HUB_OFFLINE"] = "1"
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env)
        out.append(time.perf_counter() - t0)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--target", type=float, default=0.25, help="seconds; exit 1 when the median is above it")
    ap.add_argument("args", nargs="*", help="vlaunch arguments (default: count Llama-3.1-8B --json)")
    ns = ap.parse_args()
    runs = max(7, ns.runs)
    vargs = ns.args or DEFAULT
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "launcher")], check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    timed([sys.executable, "-m", "launcher", *vargs], 2)  # warm the OS file cache, not the interpreter
    base: list[float] = []
    tool: list[float] = []
    for _ in range(runs):  # interleaved: a slow spell of the machine weighs on both the same
        base += timed([sys.executable, "-c", "pass"], 1)
        tool += timed([sys.executable, "-m", "launcher", *vargs], 1)
    result = {
        "command": "vlaunch " + " ".join(vargs),
        "runs": runs,
        "python_pass_median_s": round(statistics.median(base), 4),
        "vlaunch_median_s": round(statistics.median(tool), 4),
        "vlaunch_p90_s": round(sorted(tool)[int(0.9 * (runs - 1))], 4),
        "ratio_to_python_pass": round(statistics.median(tool) / statistics.median(base), 2),
        "target_s": ns.target,
    }
    print(json.dumps(result, indent=2))
    return 0 if result["vlaunch_median_s"] <= ns.target else 1


if __name__ == "__main__":
    sys.exit(main())
