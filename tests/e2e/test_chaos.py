"""Chaos with real vLLM (CPU build): the `vlaunch serve` wrapper SIGKILLed at each boot stage — before the model
loads, while loading, while profiling, while serving — leaves no vLLM process 15 s later and the box lock free.
VLAUNCH_CHAOS_ROUNDS (default 1) repeats the four stages."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher import guard
from launcher import supervise as sup
from tests.e2e.conftest import ROOT

VLAUNCH = [sys.executable, "-m", "launcher"]
STAGES = {  # the line vlaunch prints when the stage begins
    "before the model loads": "vLLM pid",
    "while loading": "] loading weights",
    "while profiling": "] profiling",
    "while serving": "serving; run record",
}
ROUNDS = int(os.environ.get("VLAUNCH_CHAOS_ROUNDS", "1"))


def _vllm_pids(before: set[int]) -> set[int]:
    return {i.pid for i in guard.scan() if i.role in ("server", "engine", "worker")} - before


@pytest.mark.parametrize("round_", range(ROUNDS))
@pytest.mark.parametrize("stage", list(STAGES))
def test_sigkilled_wrapper_leaves_no_vllm(vllm_ready: None, tmp_path: Path, stage: str, round_: int) -> None:
    before = {i.pid for i in guard.scan()}
    proc = subprocess.Popen(
        [*VLAUNCH, "serve", "profiles/tiny-cpu.yaml", "--logs-dir", str(tmp_path)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        # a calibration store of its own: these boots are killed at random points, not measurements for later tests
        env={**os.environ, "PYTHONUNBUFFERED": "1", "XDG_CONFIG_HOME": str(tmp_path / "config")},
        start_new_session=True,
    )  # fmt: skip
    seen: list[str] = []
    try:
        assert proc.stdout is not None
        end = time.monotonic() + 400
        while time.monotonic() < end:
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(line)
            if STAGES[stage] in line:
                break
        assert seen and STAGES[stage] in seen[-1], "".join(seen)[-3000:]
        run = next(tmp_path.glob("tiny-cpu-*.log")).stem
        assert sup.run_pids(run)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 15 and (sup.run_pids(run) or _vllm_pids(before)):
            time.sleep(0.25)
        took = time.monotonic() - t0
        left = sup.run_pids(run) + sorted(_vllm_pids(before))
        print(f"{stage}: SIGKILL → {len(left)} vLLM processes after {took:.1f} s")
        assert left == [], left
        assert guard.read_holder() is None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if proc.stdout:
            proc.stdout.close()
        for log in tmp_path.glob("*.log"):
            sup.stop_pids(sup.run_pids(log.stem), grace=2)
