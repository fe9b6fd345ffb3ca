"""Per-rank plans, multi-node profiles, and the cluster commands (rendered and pre-flight)."""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from launcher.cli import main
from launcher.common.errors import ProfileError
from launcher.plan.profiles import load_profile, profile_from_mapping
from launcher.run import cluster

GiB = 1 << 30


def plan_json(*args: str) -> tuple[int, dict]:
    r = CliRunner().invoke(main, ["plan", *args, "--json"])
    assert r.exit_code in (0, 3), r.stderr
    return r.exit_code, json.loads(r.stdout)


def test_every_rank_reported_tp_pp() -> None:
    _, d = plan_json(
        "--model",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--machine",
        "h100-80gb",
        "-tp",
        "2",
        "-pp",
        "2",
        "--vllm-version",
        "0.19.0",
        "--max-model-len",
        "8192",
        "--gpu-memory-utilization",
        "0.95",
    )
    ranks = d["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3]
    assert [(r["pp_rank"], r["tp_rank"]) for r in ranks] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert ranks[0]["layers"] == [0, 16] and ranks[2]["layers"] == [16, 32]
    # the pool is the minimum over ranks, as vLLM takes it
    assert d["kv_pool_blocks"] == min(r["kv_pool_blocks"] for r in ranks)
    assert sum(r["bottleneck"] for r in ranks) == 2  # both TP peers of the bottleneck stage
    assert d["bottleneck_rank"] in (2, 3)  # the last stage holds the head and the sampler


def test_pp_dev_log_pool() -> None:
    """llmd v0.19.0, Llama 3.1 8B, pp=2 on H100: 1,075,312 tokens (the minimum over the two stages)."""
    _, d = plan_json(
        "--model",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--machine",
        "h100-80gb",
        "-pp",
        "2",
        "--vllm-version",
        "0.19.0",
        "--max-model-len",
        "8192",
        "--gpu-memory-utilization",
        "0.95",
    )
    assert abs(d["kv_pool_tokens"] - 1_075_312) / 1_075_312 < 0.005
    stage0 = next(r for r in d["ranks"] if r["pp_rank"] == 0)
    assert abs(stage0["available_kv_bytes"] / GiB - 66.54) < 0.5  # rank 0 printed 66.54 GiB


def test_two_sparks_profile_plans_each_node() -> None:
    code, d = plan_json("two-sparks-70b")
    assert code == 0
    assert {r["node"] for r in d["ranks"]} == {"192.168.100.10", "192.168.100.11"}
    assert all(r["machine"] == "dgx-spark" for r in d["ranks"])
    # 131 GiB of weights split in two, each node keeps its own OS reserve
    assert all(60 * GiB < r["weights_bytes"] < 70 * GiB for r in d["ranks"])
    assert d["os_reserve_bytes"] > 0
    assert "--distributed-executor-backend" in d["vllm_argv"]


def test_not_enough_gpus_in_the_nodes(tmp_path: Path) -> None:
    p = tmp_path / "p.yaml"
    p.write_text(
        "model: meta-llama/Llama-3.1-8B-Instruct\ntensor_parallel_size: 4\nmachine: dgx-spark\n"
        "nodes: [{host: a, role: head, gpus: 1}, {host: b, gpus: 1}]\n"
    )
    r = CliRunner().invoke(main, ["plan", str(p)])
    assert r.exit_code == 2 and "needs 4 GPUs; the nodes have 2" in r.stderr


@pytest.mark.parametrize(
    ("nodes", "message"),
    [
        ([{"host": "a", "role": "worker"}], "exactly one node with role: head"),
        ([{"host": "a", "role": "head"}, {"host": "a"}], "same host"),
        ([{"role": "head"}], "host"),
        ([{"host": "a", "role": "boss"}], "role"),
    ],
)
def test_nodes_validation(nodes: list, message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        profile_from_mapping({"model": "x/y", "nodes": nodes})


def test_commands_local_and_over_ssh() -> None:
    p = load_profile(Path("profiles/two-sparks-70b.yaml"))
    head, worker = cluster.start_commands(p)
    assert head.full_argv[:5] == ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5"]
    assert head.full_argv[5:7] == ["192.168.100.10", "--"]
    assert shlex.split(head.full_argv[-1]) == list(head.argv)  # one quoted string carries the argv exactly
    assert list(worker.argv[:4]) == ["ray", "start", "--address", "192.168.100.10:6379"]
    local = profile_from_mapping(
        {
            "model": "x/y",
            "vllm": {"python": "/opt/v/bin/python"},
            "nodes": [{"host": "127.0.0.1", "role": "head", "machine": "cpu", "gpus": 2}],
        }
    )
    (cmd,) = cluster.start_commands(local)
    assert cmd.local and cmd.full_argv[:3] == ["/opt/v/bin/ray", "start", "--head"]
    assert "--num-cpus" in cmd.full_argv
    assert [c.full_argv for c in cluster.stop_commands(local)] == [["/opt/v/bin/ray", "stop", "--force"]]


@pytest.mark.skipif(shutil.which("ssh") is None, reason="needs the ssh client")
def test_unreachable_node_reported_before_anything_starts() -> None:
    # ssh to a closed port on loopback: refused at once, nothing leaves this machine
    p = profile_from_mapping(
        {
            "model": "x/y",
            "nodes": [{"host": "127.0.0.2", "role": "head", "machine": "cpu", "ssh": "ssh://nobody@127.0.0.1:1"}],
        }
    )
    problems = cluster.preflight(p)
    assert len(problems) == 1 and problems[0].startswith("127.0.0.2: unreachable")


def test_missing_ray_reported(tmp_path: Path) -> None:
    p = profile_from_mapping(
        {
            "model": "x/y",
            "vllm": {"python": str(tmp_path / "bin" / "python")},
            "nodes": [{"host": "127.0.0.1", "role": "head", "machine": "cpu"}],
        }
    )
    problems = cluster.preflight(p)
    assert any("Ray is missing" in x for x in problems)
