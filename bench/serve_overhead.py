"""Boot time of `vlaunch serve` against starting the same vLLM command by hand, and the wrapper's memory.

    python bench/serve_overhead.py [--rounds 2] [--profile profiles/tiny-cpu.yaml]

Both are timed the same way: from process start until GET /health answers 200, polled every 0.1 s from here.
Rounds alternate (hand, vlaunch, hand, vlaunch, …) so drift in the machine affects both alike.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from launcher.plan.planning import make_plan  # noqa: E402
from launcher.plan.profiles import load_profile  # noqa: E402


def _health(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            return r.status == 200
    except OSError:
        return False


def _boot(argv: list[str], env: dict[str, str], url: str, timeout: float = 600) -> tuple[float, int]:
    t0 = time.monotonic()
    p = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)  # fmt: skip
    peak_rss = 0
    try:
        while time.monotonic() - t0 < timeout:
            if _health(url):
                elapsed = time.monotonic() - t0
                peak_rss = psutil.Process(p.pid).memory_info().rss
                return elapsed, peak_rss
            if p.poll() is not None:
                raise RuntimeError(f"{argv[:3]} exited with {p.returncode}")
            time.sleep(0.1)
        raise RuntimeError("no /health")
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGINT)
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        time.sleep(2)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--profile", default="profiles/tiny-cpu.yaml")
    ns = ap.parse_args()
    profile = load_profile(ROOT / ns.profile)
    plan = make_plan(profile)
    url = f"http://127.0.0.1:{profile.vllm.port}/health"
    env = {**os.environ, **dict(plan.env)}
    hand, wrapped, rss = [], [], []
    for _ in range(ns.rounds):
        hand.append(_boot(list(plan.argv), env, url)[0])
        t, r = _boot([sys.executable, "-m", "launcher", "serve", ns.profile, "--logs-dir", "/tmp/vlaunch-bench-logs"],
                     dict(os.environ), url)  # fmt: skip
        wrapped.append(t)
        rss.append(r)
    out = {
        "rounds": ns.rounds,
        "by_hand_s": [round(x, 2) for x in hand],
        "vlaunch_s": [round(x, 2) for x in wrapped],
        "median_by_hand_s": round(statistics.median(hand), 2),
        "median_vlaunch_s": round(statistics.median(wrapped), 2),
        "added_boot_pct": round(100 * (statistics.median(wrapped) / statistics.median(hand) - 1), 2),
        "wrapper_rss_mib": [round(x / 2**20, 1) for x in rss],
    }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
