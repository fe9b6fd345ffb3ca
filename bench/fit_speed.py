"""`vlaunch fit` against one `vlaunch plan` of the same model on the same machine, in the same run.

    python bench/fit_speed.py [--runs 5] [--machine dgx-spark] [--target 1.0]

For each model: the median wall time of fresh `vlaunch plan` and `vlaunch fit` processes (interleaved, so the
machine's noise falls on both), their ratio, and the search's own time inside fit (`search.seconds` in --json:
options, plans made). A full search is fit with no --users and no --context: every option, the most users at
the model's context and the longest context for 1, 4 and 16 users. Exit 1 when a full search's wall time is
above --target seconds.
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
EXTRA = ROOT / "tests" / "fixtures" / "configs-v2" / "extra"
MODELS = [
    "meta-llama/Llama-3.1-8B-Instruct",
    "meta-llama/Llama-3.1-70B-Instruct",
    "Qwen/Qwen3-30B-A3B",
    str(EXTRA / "qwen3_5_moe--35b-a3b.json"),
    str(EXTRA / "qwen3_next--80b-a3b-instruct.json"),
    "deepseek-ai/DeepSeek-V3",
]


def run(argv: list[str]) -> tuple[float, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["HF_HUB_OFFLINE"] = "1"
    t0 = time.perf_counter()
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True, check=False)
    dt = time.perf_counter() - t0
    if r.returncode not in (0, 3):
        raise SystemExit(f"{' '.join(argv)}: exit {r.returncode}")
    return dt, r.stdout


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--machine", default="dgx-spark")
    ap.add_argument("--target", type=float, default=1.0, help="seconds a full search may take (wall, one process)")
    ap.add_argument("models", nargs="*", default=MODELS)
    ns = ap.parse_args()
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "launcher")], check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    vl = [sys.executable, "-m", "launcher"]
    rows = []
    worst = 0.0
    for model in ns.models:
        plan_argv = [*vl, "plan", "--model", model, "--machine", ns.machine, "--json"]
        fit_argv = [*vl, "fit", model, "--machine", ns.machine, "--json"]
        run(plan_argv)  # warm the OS file cache
        plans: list[float] = []
        fits: list[float] = []
        out = ""
        for _ in range(ns.runs):
            plans.append(run(plan_argv)[0])
            dt, out = run(fit_argv)
            fits.append(dt)
        search = json.loads(out)["search"]
        p, f = statistics.median(plans), statistics.median(fits)
        worst = max(worst, f)
        rows.append({
            "model": Path(model).stem if model.endswith(".json") else model,
            "plan_s": round(p, 3),
            "fit_s": round(f, 3),
            "fit_over_plan": round(f / p, 2),
            "search_s": search["seconds"],
            "options": search["options"],
            "plans": search["plans"],
        })  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    print(json.dumps({"machine": ns.machine, "runs": ns.runs, "worst_fit_s": round(worst, 3), "target_s": ns.target}))
    return 0 if worst <= ns.target else 1


if __name__ == "__main__":
    raise SystemExit(main())
