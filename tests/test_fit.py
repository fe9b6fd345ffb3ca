"""`vlaunch fit`: the lesson's table turned around, every row equal to `plan` with its flags, the ranking, the
written profile, the decode ceiling and the JSON contract."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launcher.cli import main
from launcher.cli.options import build_profile
from launcher.plan import decode, planning
from launcher.plan import fit as F
from launcher.plan.profiles import load_profile
from launcher.run import preflight as pf

GiB = 1 << 30
FIXTURES = Path(__file__).parent / "fixtures"
LESSON = ["--overhead-gib", "1.5", "--max-num-batched-tokens", "8192"]
SPARK = ["--machine", "dgx-spark", "--gpu-memory-gib", "128", "--os-reserve-gib", "10"]
H100 = ["--machine", "h100-80gb", "--gpu-memory-gib", "80"]
RTX4090 = ["--machine", "rtx4090", "--gpu-memory-gib", "24"]
LLAMA8B = "meta-llama/Llama-3.1-8B-Instruct"
LLAMA70B = "meta-llama/Llama-3.1-70B-Instruct"
QWEN30B = "Qwen/Qwen3-30B-A3B"
QWEN35 = str(FIXTURES / "configs-v2" / "extra" / "qwen3_5_moe--35b-a3b.json")
QWEN_NEXT = str(FIXTURES / "configs-v2" / "extra" / "qwen3_next--80b-a3b-instruct.json")

OPTION_KEYS = {
    "format", "kv_cache_dtype", "max_model_len", "tensor_parallel_size", "pipeline_parallel_size", "nodes", "users",
    "fits", "binding_bucket", "gpu_memory_utilization", "weights_bytes", "kv_bytes_per_token",
    "state_bytes_per_request", "max_users", "max_context", "decode_tokens_per_s_ceiling",
}  # fmt: skip


def fit_json(*args: str, codes: tuple[int, ...] = (0, 3)) -> dict[str, Any]:
    r = CliRunner().invoke(main, ["fit", *args, "--json"])
    assert r.exit_code in codes, r.stderr + r.stdout[-2000:]
    return json.loads(r.stdout)


def plan_json(*args: str) -> dict[str, Any]:
    r = CliRunner().invoke(main, ["plan", *args, "--json"])
    assert r.exit_code in (0, 3), r.stderr
    return json.loads(r.stdout)


def one_gpu(d: dict[str, Any], fmt: str, kv: str) -> dict[str, Any]:
    rows = [
        o
        for o in d["options"]
        if o["format"] == fmt and o["kv_cache_dtype"] == kv and o["tensor_parallel_size"] == 1
        and o["pipeline_parallel_size"] == 1 and o["speculative_config"] is None
    ]  # fmt: skip
    assert rows, f"no one-GPU {fmt}/{kv} row"
    return rows[0]


# --- 1. the lesson's table, turned around -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("machine", "auto_users", "fp8_users"), [(SPARK, 100, 201), (H100, 62, 125), (RTX4090, 6, 13)]
)  # fmt: skip
def test_lesson_llama8b_8k_users(machine: list[str], auto_users: int, fp8_users: int) -> None:
    d = fit_json(LLAMA8B, *machine, *LESSON, "--context", "8192")
    assert d["target"] == {
        "users": None,
        "context": 8192,
        "mode": "context",
        "min_tokens_per_s": None,
        "max_ttft_s": None,
    }
    assert one_gpu(d, "bf16", "auto")["max_users"] == auto_users
    assert one_gpu(d, "bf16", "fp8")["max_users"] == fp8_users


@pytest.mark.parametrize(("machine", "users"), [(SPARK, 7), (H100, 3)])
def test_lesson_70b_q4km_32k(machine: list[str], users: int) -> None:
    # the memory answer for the GGUF weights stands; the bf16 checkpoint priced is not them: vLLM (≤ 0.23) reads
    # Q4_K_M from a .gguf file alone
    for version in ("0.23.0", "0.32.0"):
        d = fit_json(LLAMA70B, *machine, *LESSON, "--context", "32768", "-q", "q4_k_m", "--vllm-version", version)
        row = one_gpu(d, "q4_k_m", "auto")
        assert row["max_users"] == users and row["fits"] is False
        assert row["checkpoint_format"] == "needed" and ".gguf file" in row["reasons"][0]


def test_lesson_70b_bf16_fits_no_single_device_but_two_sparks() -> None:
    for machine in (SPARK, H100, RTX4090):
        d = fit_json(LLAMA70B, *machine, *LESSON, "--context", "8192", "--formats", "bf16")
        singles = [o for o in d["options"] if o["nodes"] == 1 and o["tensor_parallel_size"] == 1]
        assert singles and not any(o["fits"] for o in singles)
        assert all(o["binding_bucket"] == "weights" for o in singles)
        assert round(singles[0]["weights_bytes"] / GiB) == 131
    # one box unless the user owns two: fp8 weights on one Spark
    d = fit_json(LLAMA70B, *SPARK, *LESSON, "--context", "8192")
    best = d["options"][0]
    assert best["chosen"] and best["fits"]
    assert (best["format"], best["nodes"], best["tensor_parallel_size"]) == ("fp8", 1, 1)
    assert all(o["nodes"] == 1 for o in d["options"])
    # two Sparks and the quality first: bf16 over both, tensor parallel (each token reads half the weights per box)
    # before pipeline parallel (the stages take turns on each token)
    d = fit_json(LLAMA70B, *SPARK, *LESSON, "--context", "8192", "--max-nodes", "2", "--prefer", "quality")
    best = d["options"][0]
    assert best["chosen"] and best["fits"]
    assert (best["format"], best["nodes"], best["tensor_parallel_size"], best["pipeline_parallel_size"]) == (
        "bf16", 2, 2, 1,
    )  # fmt: skip
    pp = next(o for o in d["options"] if o["format"] == "bf16" and o["pipeline_parallel_size"] == 2)
    assert pp["decode"]["expected_tokens_per_s"] < best["decode"]["expected_tokens_per_s"]


def test_decode_ceiling_lesson_spark_100_users() -> None:
    # "100 users at 8K means every decode step reads 15 GiB of weights plus 100 GiB of caches through 273 GB/s,
    # about 0.45 seconds per step, or about 2 tokens per second each."
    d = fit_json(LLAMA8B, *SPARK, *LESSON, "--users", "100", "--context", "8192", "--formats", "bf16",
                 "--kv-cache-dtype", "auto", "-tp", "1")  # fmt: skip
    row = d["options"][0]
    assert row["fits"] and row["users"] == 100
    step = row["decode"]["step_bytes"] / 273e9
    assert 0.43 <= step <= 0.47
    assert 2.0 <= row["decode_tokens_per_s_ceiling"] <= 2.4
    assert row["decode"]["bandwidth_bytes_per_s"] == 273 * 10**9
    assert "upper bound" in d["decode_note"]


def test_decode_moe_reads_a_tokens_experts() -> None:
    # Qwen3-30B-A3B: 3.3B activated parameters (the model card), 0.31B of them the input embedding it gathers
    d = fit_json(QWEN30B, *H100, "--context", "8192", "--formats", "bf16", "--kv-cache-dtype", "auto")
    weights = one_gpu(d, "bf16", "auto")["decode"]["weights_bytes"]
    assert 2 * 2.9e9 <= weights <= 2 * 3.3e9


def test_decode_ceiling_arithmetic() -> None:
    c = decode.ceiling(weights_bytes=10 * 10**9, cache_bytes_per_user=10**9, users=4, tensor_parallel_size=2,
                       bandwidth_bytes_per_s=100 * 10**9, speculative_tokens=1)  # fmt: skip
    assert c.step_bytes == 5 * 10**9 + 4 * 10**9
    assert c.tokens_per_s == pytest.approx(2 * 100 / 9)
    assert c.aggregate_tokens_per_s == pytest.approx(4 * 2 * 100 / 9)


# --- 2. every row is what `plan` says with that row's flags ------------------------------------------------------

PLAN_KEYS = ("weights_bytes", "kv_bytes_per_token", "state_bytes_per_request", "gpu_memory_utilization", "fits",
             "max_users", "max_model_len", "users", "kv_pool_tokens", "max_concurrency")  # fmt: skip

CASES = [
    (LLAMA8B, [*SPARK, *LESSON], F.Target(users=8, context=8192)),
    (QWEN35, ["--machine", "dgx-spark"], F.Target(users=4, context=131072)),
    ("Qwen/Qwen3-30B-A3B-FP8", ["--machine", "h100", "--gpus", "2"], F.Target(users=None, context=32768)),
]


def _base_flags(args: list[str]) -> dict[str, Any]:
    names = {"--machine": "machine", "--gpu-memory-gib": "gpu_memory_gib", "--os-reserve-gib": "os_reserve_gib",
             "--overhead-gib": "overhead_gib", "--max-num-batched-tokens": "max_num_batched_tokens"}  # fmt: skip
    out: dict[str, Any] = {}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        if flag in names:
            out[names[flag]] = float(value) if "gib" in flag else int(value) if flag.startswith("--max") else value
    return out


@pytest.mark.parametrize(("model", "args", "target"), CASES, ids=["llama8b-spark", "qwen3.5-moe-mtp", "qwen3-fp8-h100"])
def test_every_row_equals_plan(tmp_path: Path, model: str, args: list[str], target: F.Target) -> None:
    base = build_profile(None, {"model": model, **_base_flags(args)})
    gpus = int(args[args.index("--gpus") + 1]) if "--gpus" in args else None
    result = F.search(base, [base.machine], target, gpus=gpus)
    assert len(result.rows) >= 6
    plan_args = [a for a in args if a not in ("--gpus", "2")]
    for row in result.rows:
        mine = row.to_json()
        if row.option.nodes == 1:
            theirs = plan_json("--model", model, *plan_args, *mine["flags"])
        else:  # several nodes are a profile's: written as --write-profile writes it
            path = tmp_path / f"row{row.rank}.yaml"
            path.write_text(F.profile_text(row, f"row{row.rank}", result))
            theirs = plan_json(str(path))
        for key in PLAN_KEYS:
            assert theirs[key] == mine[key], (row.rank, key, theirs[key], mine[key])
        assert theirs["failure"] == row.plan.to_json()["failure"]
    # the longest context is confirmed on both sides: it fits, one token more does not
    for row in result.rows[:6]:
        n, longest = row.users, row.max_context
        if 0 < longest < result.model_context:
            assert row.plan.prediction.fits or longest < row.max_model_len
            at = plan_json("--model", model, *plan_args, *row.option.flags(), "--users", str(n),
                           "--max-model-len", str(longest))  # fmt: skip
            past = plan_json("--model", model, *plan_args, *row.option.flags(), "--users", str(n),
                             "--max-model-len", str(longest + 1))  # fmt: skip
            assert at["failure"] is None and past["failure"] is not None


def test_written_profile_round_trip_through_the_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    d = fit_json(LLAMA8B, *SPARK, *LESSON, "--users", "8", "--context", "32K", "--write-profile", "eight")
    assert d["written_profile"] == "profiles/eight.yaml"
    chosen = next(o for o in d["options"] if o["chosen"])
    text = Path("profiles/eight.yaml").read_text()
    assert text.startswith("# vlaunch fit, rank 1 of")
    p = plan_json("eight")  # by name, as `make serve PROFILE=eight` finds it
    for key in PLAN_KEYS:
        assert p[key] == chosen[key], key
    assert p["profile"] == "eight"
    # an existing file is kept unless --force
    r = CliRunner().invoke(
        main, ["fit", LLAMA8B, *SPARK, "--users", "8", "--context", "32K", "--write-profile", "eight"]
    )
    assert r.exit_code == 2 and "--force" in r.stderr
    # a two-Spark row: placeholder hosts, said so in the file; plan reads it unchanged
    d = fit_json(LLAMA70B, *SPARK, *LESSON, "--context", "8192", "--max-nodes", "2", "--prefer", "quality",
                 "--write-profile", "two.yaml")  # fmt: skip
    text = Path("two.yaml").read_text()
    assert "spark-1" in text and "set each host:" in text
    p = plan_json("two.yaml")
    assert p["fits"] is True and len(p["ranks"]) == 2
    # --pick writes another row; a rank that does not exist is one line
    fit_json(LLAMA8B, *SPARK, "--context", "8192", "--write-profile", "third", "--pick", "3")
    assert "rank 3 of" in Path("profiles/third.yaml").read_text()
    r = CliRunner().invoke(main, ["fit", LLAMA8B, *SPARK, "--write-profile", "x", "--pick", "999"])
    assert r.exit_code == 2 and "no row of rank 999" in r.stderr


def test_nothing_fits_exits_3_and_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(main, ["fit", LLAMA70B, *RTX4090, "--users", "64", "--context", "128K", "--json"])
    assert r.exit_code == 3
    d = json.loads(r.stdout)
    assert not d["fits"] and d["chosen"] is None and all(not o["fits"] for o in d["options"])
    r = CliRunner().invoke(main, ["fit", LLAMA70B, *RTX4090, "--users", "64", "--write-profile", "no"])
    assert r.exit_code == 3 and "no option fits" in r.stderr
    assert not Path("profiles/no.yaml").exists()


# --- 3. what is enumerated, and the ranking ------------------------------------------------------------------------


def _formats(d: dict[str, Any]) -> set[str]:
    return {o["format"] for o in d["options"]}


def test_formats_a_base_checkpoint_ships() -> None:
    d = fit_json(LLAMA8B, "--machine", "spark", "--context", "8192")
    # what vLLM makes while loading a 16-bit checkpoint (0.33: fp8 and MXFP4 for every layer); no format it does not
    assert _formats(d) == {"bf16", "fp8", "mxfp4"}
    kinds = {o["format"]: o["checkpoint_format"] for o in d["options"]}
    assert kinds == {"bf16": "own", "fp8": "online", "mxfp4": "online"}
    assert {o["kv_cache_dtype"] for o in d["options"]} == {"auto", "fp8"}
    assert {(o["tensor_parallel_size"], o["pipeline_parallel_size"], o["nodes"]) for o in d["options"]} == {
        (1, 1, 1)
    }  # one box unless --max-nodes says two
    two = fit_json(LLAMA8B, "--machine", "spark", "--context", "8192", "--max-nodes", "2")
    assert {(o["tensor_parallel_size"], o["pipeline_parallel_size"], o["nodes"]) for o in two["options"]} == {
        (1, 1, 1), (2, 1, 2), (1, 2, 2),
    }  # fmt: skip
    assert "mxfp4" not in _formats(fit_json(LLAMA8B, "--machine", "spark", "--context", "8192",
                                            "--vllm-version", "0.27.0"))  # online MXFP4 from 0.28  # fmt: skip
    assert "nvfp4_per_token" not in _formats(fit_json(QWEN30B, "--machine", "spark", "--context", "8192"))  # SM121
    assert _formats(fit_json("Qwen/Qwen3-30B-A3B-FP8", "--machine", "spark", "--context", "8192")) == {"fp8"}
    assert not _formats(fit_json(QWEN_NEXT, "--machine", "spark", "--context", "8192")) & {"q8_0", "q4_k_m"}
    one = fit_json(LLAMA8B, "--machine", "spark", "--context", "8192", "--max-nodes", "1")
    assert {o["nodes"] for o in one["options"]} == {1}


def test_pinned_flags_are_held() -> None:
    d = fit_json(LLAMA8B, "--machine", "spark", "--context", "8192", "-q", "fp8", "--kv-cache-dtype", "fp8",
                 "-tp", "2")  # fmt: skip
    assert {(o["format"], o["kv_cache_dtype"], o["tensor_parallel_size"], o["nodes"]) for o in d["options"]} == {
        ("fp8", "fp8", 2, 2)
    }


def test_mtp_on_and_off_for_a_checkpoint_with_mtp() -> None:
    d = fit_json(QWEN35, "--machine", "spark", "--users", "4", "--context", "128K", "--formats", "bf16,fp8")
    specs = {json.dumps(o["speculative_config"]) for o in d["options"]}
    assert specs == {"null", '{"method": "mtp", "num_speculative_tokens": 1}'}
    on = [o for o in d["options"] if o["speculative_config"] and o["nodes"] == 1 and o["kv_cache_dtype"] == "auto"]
    off = [o for o in d["options"] if not o["speculative_config"] and o["nodes"] == 1 and o["kv_cache_dtype"] == "auto"]
    assert on[0]["weights_bytes"] > off[0]["weights_bytes"]  # the MTP layer is loaded
    assert all(o["state_bytes_per_request"] > 0 for o in d["options"])  # Gated DeltaNet state per request


def test_users_only_gives_the_longest_context() -> None:
    d = fit_json(LLAMA8B, *SPARK, *LESSON, "--users", "16")
    row = one_gpu(d, "bf16", "auto")
    # (128 − 10 − 14.99 − 1.5 − activation) GiB of KV ÷ 16 users ÷ 128 KiB per token, in blocks of 16
    assert row["max_model_len"] == row["max_context"]
    assert 50_000 < row["max_context"] < 52_000
    assert row["fits"] is True


def test_no_target_gives_users_and_contexts() -> None:
    d = fit_json(LLAMA8B, *SPARK, *LESSON)
    assert d["target"]["mode"] == "none"
    row = one_gpu(d, "bf16", "auto")
    assert row["max_model_len"] == 131072 == d["model_context"]
    by = {int(k): v for k, v in row["max_context_by_users"].items()}
    assert set(by) == {1, 4, 16} and by[1] >= by[4] >= by[16]


def test_json_contract() -> None:
    d = fit_json(LLAMA8B, "--machine", "spark", "--users", "4", "--context", "8192")
    assert set(d["options"][0]) >= OPTION_KEYS
    assert {"model", "machine", "target", "options", "chosen", "vllm_version", "search"} <= set(d)
    assert [o["rank"] for o in d["options"]] == list(range(1, len(d["options"]) + 1))
    assert sum(o["chosen"] for o in d["options"]) == 1


def test_compare_marks_one_choice_per_machine() -> None:
    d = fit_json(LLAMA8B, "--machine", "spark", "--compare", "h100,4090", "--users", "4", "--context", "8192")
    assert [m["name"] for m in d["machines"]] == ["dgx-spark", "h100-80gb", "rtx4090"]
    chosen = [o["machine"] for o in d["options"] if o["chosen"]]
    assert chosen == ["dgx-spark", "h100-80gb", "rtx4090"]


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(
    users=st.integers(1, 300),
    context=st.sampled_from([1024, 4096, 8192, 32768, 65536, 131072]),
    machine=st.sampled_from(["dgx-spark", "h100-80gb", "rtx4090", "l40s", "t4"]),
)
def test_ranking_invariants(users: int, context: int, machine: str) -> None:
    base = build_profile(None, {"model": LLAMA8B, "machine": machine})
    result = F.search(base, [machine], F.Target(users=users, context=context))
    rows = list(result.rows)
    keys = [F.rank_key(r, "users+context") for r in rows]
    assert keys == sorted(keys)
    fitting = [r for r in rows if r.fits]
    assert rows[: len(fitting)] == fitting  # every row that fits before every row that does not
    tiers = [F.balanced_tier(r) for r in fitting]
    assert tiers == sorted(tiers)  # balanced: the weights' distance from the checkpoint first
    quality = F.search(base, [machine], F.Target(users=users, context=context), prefer="quality")
    q_fitting = [r for r in quality.rows if r.fits]
    assert [r.quality for r in q_fitting] == sorted(r.quality for r in q_fitting)
    fast = F.search(base, [machine], F.Target(users=users, context=context), prefer="speed")
    f_fitting = [r for r in fast.rows if r.fits]
    steps = [F._speed_step(r) for r in f_fitting]
    assert steps == sorted(steps)  # speed: fastest expected decode first
    for r in rows:
        assert r.fits == r.plan.fits
        if r.fits:
            assert r.max_users >= users and r.max_context >= context
        elif r.plan.invalid is None:
            assert r.max_context < context or r.max_users < users or r.plan.prediction.failure is not None
    assert (result.chosen() is not None) == bool(fitting)


# --- 4. plan and serve know what vLLM refuses ---------------------------------------------------------------------


def test_plan_refuses_gguf_after_023_and_mxfp4_below_sm80() -> None:
    d = plan_json("--model", LLAMA70B, "--machine", "spark", "-q", "q4_k_m", "--max-model-len", "32768")
    assert d["fits"] is False and "only from a .gguf file" in d["reasons"][0]  # a bf16 checkpoint, not GGUF
    d = plan_json("--model", "openai/gpt-oss-20b", "--machine", "t4", "--max-model-len", "2048")
    assert "Minimum capability: 80. Current capability: 75." in d["reasons"][0]  # an MXFP4 checkpoint


def test_serve_refuses_weights_the_checkpoint_does_not_hold(tmp_path: Path) -> None:
    base = build_profile(None, {"model": LLAMA8B, "machine": "spark", "quantization": "awq"})
    plan = planning.make_plan(base)
    assert not plan.fits and plan.invalid is not None and "cannot make awq" in plan.invalid
    probes = pf.Probes(hf_cache=lambda repo, env: str(tmp_path), environ={"HF_HUB_OFFLINE": "1"})
    out: list[pf.Refusal] = []
    pf.check_model(plan, probes, out)
    assert out and out[0].code == pf.EXIT_MODEL and "awq" in out[0].what
    fp8 = planning.make_plan(base.with_overrides(quantization="fp8"))  # vLLM quantizes fp8 while loading
    out = []
    pf.check_model(fp8, probes, out)
    assert not [f for f in out if "checkpoint" in f.what]


# --- 5. the page and the speed ---------------------------------------------------------------------------------


def test_html_bars_on_one_scale_with_the_choice_marked(tmp_path: Path) -> None:
    import re

    page = tmp_path / "fit.html"
    d = fit_json(LLAMA70B, "--machine", "spark", "--compare", "h100", "--users", "4", "--context", "32K",
                 "--html", str(page))  # fmt: skip
    html = page.read_text()
    figures = re.findall(r'<figure class="option machine[^"]*" data-rank="(\d+)" data-chosen="(yes|no)"', html)
    assert len(figures) == len(d["options"])
    assert [r for r, c in figures if c == "yes"] == [str(o["rank"]) for o in d["options"] if o["chosen"]]
    scale = int(re.search(r'data-scale-bytes="(\d+)"', html).group(1))
    for b, w in re.findall(r'data-bytes="(\d+)" style="left: [\d.]+%; width: ([\d.]+)%"', html):
        assert float(w) == pytest.approx(100 * int(b) / scale, abs=1e-5)
    assert "<script src" not in html and "http" not in html.split("<body>")[1].split("generated by")[0]


def test_search_speed_against_one_plan() -> None:
    import time

    base = build_profile(None, {"model": LLAMA8B, "machine": "dgx-spark"})
    started = time.perf_counter()
    planning.make_plan(base)
    one = time.perf_counter() - started
    fmts = ("bf16", "fp8", "mxfp4", "fp8_per_block", "nvfp4", "awq", "q4_k_m")  # refused ones are planned too
    result = F.search(base, ["dgx-spark"], F.Target(), formats_allowed=fmts, max_nodes=2)
    assert result.options >= 40
    # a generous bound for a loaded CI box; bench/fit_speed.py measures the figure
    assert result.seconds < 10.0, (result.seconds, one)


def test_profile_from_a_profile_keeps_its_launch_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    fit_json("two-sparks-70b", "--context", "8192", "--write-profile", "mine")
    p = load_profile("profiles/mine.yaml")
    assert [n.host for n in p.nodes] == ["192.168.100.10", "192.168.100.11"]  # the profile's own nodes
    assert p.vllm.version == "0.19.0"


def test_every_format_prices_scalars_and_stacked_experts() -> None:
    extra = FIXTURES / "configs-v2" / "extra"
    # apertus holds scalar parameters (xIELU's alphas): GGUF keeps them as one F32 each
    d = fit_json(str(extra / "apertus--8b.json"), "--machine", "spark", "--context", "8192", "--formats", "q8_0,q4_k_m")
    assert _formats(d) == {"q8_0", "q4_k_m"}  # priced, though a bf16 checkpoint serves neither
    # Granite 4.0-H keeps each layer's experts in one 3-D tensor: 4-bit formats quantize it like separate experts
    d = fit_json(str(extra / "granitemoehybrid--granite-4.0-h-small.json"), "--machine", "spark", "--context", "8192")
    bf16, mxfp4 = one_gpu(d, "bf16", "auto")["weights_bytes"], one_gpu(d, "mxfp4", "auto")["weights_bytes"]
    assert mxfp4 < 0.4 * bf16


# --- fit takes what plan takes --------------------------------------------------------------------------------------

# plan's options fit has no use for, each with why; every other option of plan's must be fit's too, spelt the same
PLAN_ONLY = {
    "ascii_bar": "draws plan's one memory bar",
    "explain": "prints plan's pipeline steps",
    "words": "plan's pasted `vllm serve …` command; fit reads vLLM's words after `--` (VllmCommand)",
}


def test_fit_takes_every_option_plan_takes() -> None:
    ctx = click.Context(main)
    plan_cmd, fit_cmd = main.get_command(ctx, "plan"), main.get_command(ctx, "fit")
    assert plan_cmd is not None and fit_cmd is not None
    fit_params = {p.name: p for p in fit_cmd.params}
    walked = 0
    for p in plan_cmd.params:
        if p.name in PLAN_ONLY:
            continue
        walked += 1
        assert p.name in fit_params, f"plan takes {p.opts} and fit does not"
        assert set(p.opts) | set(p.secondary_opts) == set(fit_params[p.name].opts) | set(
            fit_params[p.name].secondary_opts
        ), p.name
    assert walked > 40  # every profile field with flags, and the model, memory and output options


@pytest.mark.parametrize("free_gib", ["12", "40"])
def test_free_gib_plans_every_row_as_plan_does(free_gib: str) -> None:
    args = ["--model", LLAMA8B, *H100, "--users", "1", "--context", "8192", "--free-gib", free_gib]
    d = fit_json(*args)
    assert d["options"]
    for row in d["options"][:8]:
        theirs = plan_json("--model", LLAMA8B, *H100, "--free-gib", free_gib, *row["flags"])
        assert theirs["gpu_memory_utilization"] == row["gpu_memory_utilization"], row["flags"]
        assert (theirs["failure"] is None) == row["fits"], row["flags"]
    # the utilization keeps to vLLM's start-up check against the free memory given
    fitting = [o for o in d["options"] if o["fits"]]
    assert all(o["gpu_memory_utilization"] * 80 <= float(free_gib) for o in fitting)
    if free_gib == "12":  # 12 GiB free on an 80 GiB card: 16-bit weights of an 8B model cannot load
        assert not any(o["format"] == "bf16" and o["fits"] for o in d["options"])


def test_fit_passes_calibration_and_free_memory_to_the_search(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}
    real = F.search

    def spy(*a: Any, **k: Any) -> Any:
        seen.update(k)
        return real(*a, **k)

    monkeypatch.setattr(F, "search", spy)
    fit_json("--model", LLAMA8B, *H100, "--users", "1", "--context", "8192", "--free-gib", "30", "--no-calibration")
    assert seen["free_bytes"] == 30 * GiB and seen["use_calibration"] is False


# --- the chosen command is the chosen row: every planning flag carried ----------------------------------------------

# a value other than the default for every profile field that has flags (a field added without one fails below)
FLAG_SAMPLES: dict[str, Any] = {
    "config": str(FIXTURES / "configs" / "Llama-3.1-8B.json"), "revision": "main", "quantization": "fp8",
    "dtype": "float16", "kv_cache_dtype": "fp8", "max_model_len": 4096, "users": 3, "machine": "h100-80gb",
    "gpu_memory_gib": 70.5, "interconnect": "pcie", "cpu_bf16": False, "os_reserve_gib": 3.5,
    "gpu_memory_utilization": 0.8, "biggest_pool": True, "tensor_parallel_size": 2, "decode_context_parallel_size": 2,
    "pipeline_parallel_size": 2, "data_parallel_size": 2, "max_num_batched_tokens": 4096, "max_num_seqs": 64,
    "enforce_eager": True, "block_size": 32, "kv_cache_memory_bytes": 4 << 30, "overhead_gib": 1.5,
    "distributed_executor_backend": "ray", "enable_expert_parallel": True, "language_model_only": True,
    "limit_mm_per_prompt": {"image": 0}, "speculative_config": {"method": "mtp", "num_speculative_tokens": 1},
    "mamba_cache_dtype": "float32", "mamba_ssm_cache_dtype": "float32", "mamba_cache_mode": "align",
    "enable_prefix_caching": False, "disable_hybrid_kv_cache_manager": True, "runner": "pooling",
    "vllm.version": "0.19.0", "vllm.launch": "module", "vllm.executable": "/usr/local/bin/vllm",
    "vllm.python": "/usr/bin/python3", "vllm.image": "vllm/vllm-openai:v0.19.0", "vllm.container_name": "vl-test",
    "vllm.host": "0.0.0.0", "vllm.port": 8123, "vllm.served_model_name": "mine",
}  # fmt: skip
_NOT_PROFILE = ("words", "force", "as_json", "free_gib", "html_path", "compare", "ascii_bar", "no_calibration",
                "explain")  # fmt: skip


def _profile_of_plan_args(args: list[str]) -> Any:
    """The profile `vlaunch plan ARGS` plans, read through plan's own options."""
    from launcher.cli.options import asked

    cmd = main.get_command(click.Context(main), "plan")
    assert cmd is not None
    ctx = cmd.make_context("plan", list(args))
    flags = {k: v for k, v in ctx.params.items() if k not in _NOT_PROFILE}
    with ctx:
        return asked(None, flags, ()).profile


@pytest.mark.parametrize("key", sorted(FLAG_SAMPLES))
def test_every_planning_field_survives_the_printed_command(key: str) -> None:
    from launcher.plan.profiles import cli_words, profile_from_mapping

    data: dict[str, Any] = {"model": LLAMA8B, "name": "x"}
    if key.startswith("vllm."):
        data["vllm"] = {key[5:]: FLAG_SAMPLES[key]}
    else:
        data[key] = FLAG_SAMPLES[key]
    mine = profile_from_mapping(data)
    words = cli_words(mine)
    assert words, key
    theirs = _profile_of_plan_args(["--model", LLAMA8B, *words])
    section = (lambda p: p.vllm) if key.startswith("vllm.") else (lambda p: p)
    name = key.removeprefix("vllm.")
    assert getattr(section(theirs), name) == getattr(section(mine), name), (key, words)


def test_every_field_with_flags_has_a_sample() -> None:
    from launcher.plan.profiles import FIELDS

    assert {f.key for f in FIELDS if f.flags and f.key != "model"} == set(FLAG_SAMPLES)


@pytest.mark.parametrize(
    "base",
    [
        ["--machine", "cuda", "--gpu-memory-gib", "48"],
        ["--machine", "h100", "--vllm-version", "0.19.0", "--max-num-batched-tokens", "4096"],
        ["--machine", "a100-80gb", "--interconnect", "pcie", "--dtype", "float16", "--gpus", "2"],
        ["--machine", "spark", "--os-reserve-gib", "12", "--no-enable-prefix-caching", "--block-size", "32"],
    ],
    ids=["cuda-48", "h100-0.19", "a100-pcie", "spark"],
)
def test_the_chosen_command_plans_the_chosen_row(base: list[str]) -> None:
    """fit prints the chosen row as a `vlaunch plan` command; that command plans the same row."""
    args = ["--model", LLAMA8B, *base, "--users", "2", "--context", "8192"]
    r = CliRunner().invoke(main, ["fit", *args])
    assert r.exit_code == 0, r.stderr
    [line] = [x for x in r.stdout.splitlines() if "chosen #" in x]
    words = shlex.split(line.split(": ", 1)[1].removesuffix(" (with nodes: write it as a profile)"))
    assert words[:2] == ["vlaunch", "plan"]
    chosen = next(o for o in fit_json(*args)["options"] if o["chosen"])
    theirs = plan_json(*words[2:])
    for key in PLAN_KEYS:
        assert theirs[key] == chosen[key], (key, words)


def test_fit_of_a_profile_takes_its_users_and_context() -> None:
    """`fit PROFILE` searches for what the profile asks (llama8b-32k: 8 users × 32,768 tokens) unless flags say
    otherwise."""
    profile = str(Path(__file__).resolve().parent.parent / "profiles" / "llama8b-32k.yaml")
    d = fit_json(profile)
    assert d["target"] == {
        "users": 8,
        "context": 32768,
        "mode": "users+context",
        "min_tokens_per_s": None,
        "max_ttft_s": None,
    }
    assert all(o["users"] == 8 and o["max_model_len"] == 32768 for o in d["options"])
    flagged = fit_json(profile, "--users", "2", "--context", "8192")
    assert (flagged["target"]["users"], flagged["target"]["context"]) == (2, 8192)


def test_a_pooling_model_gets_no_kv_dtype_rows_and_no_decode() -> None:
    """An encoder under --runner pooling keeps no KV cache and decodes nothing: no fp8-KV variants, no decode speed."""
    bge = str(FIXTURES / "configs-v2" / "extra" / "xlm-roberta--bge-m3.json")
    d = fit_json(bge, *H100, "--runner", "pooling")
    assert d["options"]
    assert {o["kv_cache_dtype"] for o in d["options"]} == {"auto"}
    assert all(o["decode"] is None and o["decode_tokens_per_s_ceiling"] is None for o in d["options"])


def test_every_option_of_plan_is_a_field_fit_carries_or_one_it_handles() -> None:
    """The list is plan's own options: each is a profile field with flags (carried into every row, the printed
    command and the written profile: the tests above), or one fit takes as its own (--free-gib, --no-calibration,
    …), or an output option."""
    from launcher.plan.profiles import FIELDS

    plan_cmd = main.get_command(click.Context(main), "plan")
    fit_cmd = main.get_command(click.Context(main), "fit")
    assert plan_cmd is not None and fit_cmd is not None
    fields = {f.key.replace(".", "_").removeprefix("vllm_") for f in FIELDS if f.flags}
    fields |= {f.key.removeprefix("vllm.") for f in FIELDS if f.flags}
    fit_own = {p.name for p in fit_cmd.params}
    outputs = {"as_json", "html_path", "ascii_bar", "explain", "force", "words", "compare"}
    for p in plan_cmd.params:
        name = p.name or ""
        assert name in fields or name in fit_own or name in outputs, f"plan's {name} reaches no fit row"
