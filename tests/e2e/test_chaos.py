"""Chaos with real vLLM (CPU build): the `vlaunch serve` wrapper SIGKILLed, SIGTERMed or SIGHUPed at each boot
stage — before the model loads, while loading, while profiling, while serving — leaves no vLLM process 15 s later
and the box lock free; the run record's `stopped_by` names the signal (SIGKILL: the supervisor that stopped vLLM).
By default SIGKILL at every stage and SIGTERM / SIGHUP at two stages each; VLAUNCH_CHAOS_ROUNDS=N runs every
stage with every signal, N times."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher.run import guard
from launcher.run import supervise as sup
from tests.e2e.conftest import ROOT

VLAUNCH = [sys.executable, "-m", "launcher"]
STAGES = {  # the line vlaunch prints when the stage begins
    "before the model loads": "vLLM pid",
    "while loading": "] loading weights",
    "while profiling": "] profiling",
    "while serving": "serving; run record",
}
ROUNDS = int(os.environ.get("VLAUNCH_CHAOS_ROUNDS", "0"))
SIGNALS = [signal.SIGKILL, signal.SIGTERM, signal.SIGHUP]
_SHORT = {  # the default run: a handled signal at two stages each, so every stage sees one
    signal.SIGKILL: list(STAGES),
    signal.SIGTERM: ["while loading", "while serving"],
    signal.SIGHUP: ["before the model loads", "while profiling"],
}
CASES = [
    pytest.param(round_, stage, signum, id=f"{signum.name}-{stage}-{round_}")
    for round_ in range(max(ROUNDS, 1))
    for signum in SIGNALS
    for stage in STAGES
    if ROUNDS or stage in _SHORT[signum]
]


def _vllm_pids(before: set[int]) -> set[int]:
    return {i.pid for i in guard.scan() if i.role in ("server", "engine", "worker")} - before


def _record(path: Path, signum: signal.Signals) -> dict[str, object]:
    """The run record; after a SIGKILL the supervisor notes its clean-up a moment after the last process is gone."""
    end = time.monotonic() + 10
    while True:
        record = json.loads(path.read_text()) if path.exists() else {}
        if signum != signal.SIGKILL or "supervisor_stopped_pids" in record or time.monotonic() > end:
            return record
        time.sleep(0.2)


@pytest.mark.parametrize(("round_", "stage", "signum"), CASES)
def test_signalled_wrapper_leaves_no_vllm(
    vllm_ready: None, tmp_path: Path, stage: str, round_: int, signum: signal.Signals
) -> None:
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
        t0 = time.monotonic()
        proc.send_signal(signum)
        code = proc.wait(40)  # SIGTERM / SIGHUP: the wrapper stops vLLM itself (6 s grace) and exits
        while time.monotonic() - t0 < 15 and (sup.run_pids(run) or _vllm_pids(before)):
            time.sleep(0.25)
        took = time.monotonic() - t0
        left = sup.run_pids(run) + sorted(_vllm_pids(before))
        print(f"{stage}: {signum.name} → {len(left)} vLLM processes after {took:.1f} s, exit {code}")
        assert left == [], left
        assert took <= 15, f"{took:.1f} s"
        assert guard.read_holder() is None
        record = _record(tmp_path / f"{run}.json", signum)
        if signum == signal.SIGKILL:
            assert code == -signal.SIGKILL
            assert str(record.get("stopped_by", "")).startswith("supervisor: "), record.get("stopped_by")
        else:
            assert record["stopped_by"] == signum.name
            assert record["leftover_pids"] == []
            serving = stage == "while serving"
            assert code == record["exit"] == (0 if serving else 128 + signum), (code, record["exit"])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if proc.stdout:
            proc.stdout.close()
        for log in tmp_path.glob("*.log"):
            sup.stop_pids(sup.run_pids(log.stem), grace=2)
