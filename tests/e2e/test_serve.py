"""`vlaunch serve` for real: boot, prediction, completion, /metrics, the guard, and a clean stop."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil

from launcher.run import guard
from tests.e2e.conftest import ROOT

VLAUNCH = [sys.executable, "-m", "launcher"]


def _wait_line(proc: subprocess.Popen[str], needle: str, out: list[str], timeout: float = 300) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        line = proc.stdout.readline() if proc.stdout else ""
        if line:
            out.append(line)
            if needle in line:
                return True
        elif proc.poll() is not None:
            return False
    return False


def test_serve_end_to_end(vllm_ready: None, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    proc = subprocess.Popen(
        [*VLAUNCH, "serve", "profiles/tiny-cpu.yaml", "--logs-dir", str(logs)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    out: list[str] = []
    try:
        assert _wait_line(proc, "serving; run record", out), "".join(out)[-4000:]
        holder = guard.read_holder()
        assert holder is not None and holder["profile"] == "tiny-cpu"
        vllm_pid = int(holder["vllm_pid"])
        tree = [psutil.Process(vllm_pid), *psutil.Process(vllm_pid).children(recursive=True)]
        assert len(tree) >= 2  # API server, engine core, worker

        # the wrapper's own memory while serving
        wrapper_rss = psutil.Process(proc.pid).memory_info().rss
        print(f"wrapper RSS while serving: {wrapper_rss / 2**20:.1f} MiB")
        assert wrapper_rss <= 60 * 2**20

        # the prediction, the log and /metrics agree
        record = json.loads(next(logs.glob("tiny-cpu-*.json")).read_text())
        predicted, logged = record["predicted"]["kv_pool_tokens"], record["logged"]["kv_pool_tokens"]
        print(f"pool: predicted {predicted:,}, logged {logged:,} ({100 * (predicted - logged) / logged:+.2f}%)")
        moved = record["diff"]["at_logged_total"]
        if moved is not None:  # this VM's memory moved between the plan and the launch: the model's error is there
            print(f"total moved {moved['drift_bytes'] / 2**30:+.2f} GiB: raw {100 * moved['raw_error']:+.2f}%, "
                  f"at vLLM's total {100 * moved['error']:+.2f}%")  # fmt: skip
            predicted = moved["kv_pool_tokens"]
        assert abs(predicted - logged) / logged <= 0.01
        assert record["metrics_check"]["agree"] is True
        assert record["metrics_check"]["kv_cache_size_tokens"] == logged

        # a completion is answered
        body = json.dumps({"model": record["predicted"]["model"], "prompt": "hello world", "max_tokens": 4}).encode()
        req = urllib.request.Request("http://127.0.0.1:8123/v1/completions", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            answer = json.loads(r.read())
        assert answer["choices"][0]["text"]
        # vLLM's statistics line for that interval (every 10 s while not idle) reaches the run log
        log_file = next(logs.glob("tiny-cpu-*.log"))
        deadline = time.monotonic() + 30
        while "Avg generation throughput" not in log_file.read_text(errors="replace") and time.monotonic() < deadline:
            time.sleep(0.5)
        assert "Avg generation throughput" in log_file.read_text(errors="replace")

        # a second serve is refused at once, naming who holds the box
        t0 = time.monotonic()
        second = subprocess.run(
            [*VLAUNCH, "serve", "profiles/tiny-cpu.yaml", "--logs-dir", str(logs)],
            cwd=ROOT, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert second.returncode == 4, second.stderr
        assert "already holds this box" in second.stderr and f"vlaunch pid {proc.pid}" in second.stderr
        assert time.monotonic() - t0 < 10

        # `vlaunch ps` sees it
        ps = subprocess.run([*VLAUNCH, "ps", "--json"], cwd=ROOT, capture_output=True, text=True, timeout=30)
        assert vllm_pid in {i["pid"] for i in json.loads(ps.stdout)["instances"]}

        # SIGINT: every process gone, the lock free
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
        _, alive = psutil.wait_procs(tree, timeout=10)
        assert not alive, [p.pid for p in alive]
        assert guard.read_holder() is None
        final = json.loads(next(logs.glob("tiny-cpu-*.json")).read_text())
        assert final["stopped_by"] == "SIGINT" and final["leftover_pids"] == []
        # the record keeps the statistics lines for `vlaunch calibrate` (the CPU machine has no bandwidth figure,
        # so no decode step to price them with)
        assert any(s["generation_tokens_per_s"] > 0 for s in final["logged"]["throughput"])
        assert final["speed_inputs"] is None
        assert next(logs.glob("tiny-cpu-*.log")).stat().st_size > 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if proc.stdout:
            proc.stdout.close()
        holder = guard.read_holder()
        if holder and holder.get("vllm_pid"):
            guard.stop_tree(int(holder["vllm_pid"]))


def test_boot_failure_is_classified_and_leaves_nothing(vllm_ready: None, tmp_path: Path) -> None:
    """--force past the plan's refusal: vLLM's own start-up check fails; the reason and fix come from check."""
    before = {i.pid for i in guard.scan()}
    r = subprocess.run(
        [*VLAUNCH, "serve", "profiles/tiny-cpu.yaml", "--gpu-memory-utilization", "0.99", "--force",
         "--logs-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 1, r.stdout[-3000:]
    assert "insufficient_free_memory" in r.stdout and "--gpu-memory-utilization" in r.stdout
    assert {i.pid for i in guard.scan()} <= before
    assert guard.read_holder() is None
    record = json.loads(next(tmp_path.glob("tiny-cpu-*.json")).read_text())
    assert record["exit"] == 1 and record["logged"]["failure"]["kind"] == "insufficient_free_memory"


def test_total_that_moved_is_told_apart_from_the_error(vllm_ready: None, tmp_path: Path) -> None:
    """The host's memory grows between the plan and the launch (simulated: the plan reads 2 GiB less than the
    node has); vLLM boots for real. The raw error is the drift's; planned again at vLLM's total, the model is
    within 1 %."""
    from launcher.plan.machines import detect

    total = detect()[0].total_bytes / 2**30
    r = subprocess.run(
        [*VLAUNCH, "serve", "profiles/tiny-cpu.yaml", "--gpu-memory-gib", f"{total - 2:.2f}", "--stop-after-ready",
         "--logs-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    record = json.loads(next(tmp_path.glob("tiny-cpu-*.json")).read_text())
    moved = record["diff"]["at_logged_total"]
    assert moved is not None, record["diff"]
    planned, seen = moved["planned_total_bytes"] / 2**30, moved["logged_total_bytes"] / 2**30
    print(f"planned at {planned:.2f} GiB, vLLM saw {seen:.2f} GiB: raw error {100 * moved['raw_error']:+.2f}%, "
          f"at vLLM's total {100 * moved['error']:+.2f}%")  # fmt: skip
    assert moved["drift_bytes"] > 1.5 * 2**30
    assert abs(moved["error"]) <= 0.01 < abs(moved["raw_error"])
    assert "the total moved" in r.stdout and "a DGX Spark's total does not move" in r.stdout


def test_watchdog_warns_below_the_reserve_and_stops_below_the_line(vllm_ready: None, tmp_path: Path) -> None:
    """Unified memory (the CPU backend shares RAM like a Spark): with an OS reserve and a stop line set just under
    what is available before the launch, vLLM's own growth crosses both. The watchdog warns once per crossing,
    naming vLLM's RSS as what grew, then stops vLLM cleanly: exit 11, `stopped_by: watchdog: …`, no process left,
    the lock free."""
    from launcher.plan.machines import read_meminfo

    before = {i.pid for i in guard.scan()}
    avail = read_meminfo()["MemAvailable"] / 2**30
    reserve, line = avail - 0.25, avail - 0.8
    r = subprocess.run(
        [*VLAUNCH, "serve", "profiles/tiny-cpu.yaml", "--os-reserve-gib", f"{reserve:.2f}", "--force",
         "--stop-below-gib", f"{line:.2f}", "--stop-after-ready", "--logs-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    record = json.loads(next(tmp_path.glob("tiny-cpu-*.json")).read_text())
    events = record.get("watchdog", [])
    for e in events:
        print(f"{e['kind']} at {e['seconds']} s: available {e['available_bytes'] / 2**30:.2f} GiB, grew "
              + ", ".join(f"{k} {v / 2**30:+.2f} GiB" for k, v in e["grew_bytes"].items()))  # fmt: skip
    assert r.returncode == 11, r.stdout[-3000:] + r.stderr[-2000:]
    # One warning per crossing: on a live box other processes can free memory while vLLM boots (seen in CI:
    # "other processes -1.84 GiB"), lifting MemAvailable back above the re-arm line, so a second crossing may warn
    # again. Whatever the box does, the warnings come first, then exactly one stop, and the terminal shows each.
    kinds = [e["kind"] for e in events]
    assert kinds[-1] == "stop" and kinds[:-1] and set(kinds[:-1]) == {"below_reserve"}, events
    warned = [ln for ln in r.stdout.splitlines() if ln.startswith("watchdog: ")]
    assert len(warned) == len(events) and all("the OS reserve the plan kept" in w for w in warned[:-1])
    assert warned[-1].endswith("stopping vLLM")
    assert max(events[-1]["grew_bytes"], key=events[-1]["grew_bytes"].get) == "vLLM RSS"
    assert str(record["stopped_by"]).startswith("watchdog: MemAvailable ")
    assert record["exit"] == 11 and record["leftover_pids"] == []
    assert {i.pid for i in guard.scan()} <= before
    assert guard.read_holder() is None
