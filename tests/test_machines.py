"""The machine catalog, and the memory readers fed fake /sys, /proc and cgroup trees."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from launcher.common.errors import VlaunchError
from launcher.plan.machines import (
    CATALOG,
    MACHINE_NAMES,
    Machine,
    MachineError,
    MemoryReading,
    catalog_name_for_gpu,
    count_numa_nodes,
    detect,
    get_machine,
    machine_for_plan,
    read_cpu_node,
    read_cuda,
    read_unified_available,
)

GiB = 1 << 30
MiB = 1 << 20
KiB = 1 << 10
V1_NO_LIMIT = 9223372036854771712

EXPECTED_GIB = {
    "dgx-spark": 121.63,
    "h100-80gb": 79.19,
    "h200": 139.81,
    "a100-80gb": 79.15,
    "a100-40gb": 39.39,
    "l40s": 44.39,
    "rtx5090": 31.36,
    "rtx4090": 23.64,
    "rtx4080": 15.59,
    "rtx3090": 23.58,
    "t4": 14.56,
}

# A node's meminfo as the kernel writes it (values in kB), with the lines we must skip.
NODE0_MEMINFO = """\
Node 0 MemTotal:       16777216 kB
Node 0 MemFree:         8000000 kB
Node 0 MemUsed:         8777216 kB
Node 0 Active:          1500000 kB
Node 0 Active(anon):     500000 kB
Node 0 Active(file):    1000000 kB
Node 0 Inactive(anon):   100000 kB
Node 0 Inactive(file):  2000000 kB
Node 0 KReclaimable:     600000 kB
Node 0 SReclaimable:     500000 kB
Node 0 SUnreclaim:       100000 kB
Node 0 HugePages_Total:     0
"""
# available = MemFree + Active(file) + Inactive(file) + SReclaimable, by hand:
NODE0_TOTAL = 16_777_216 * KiB
NODE0_AVAILABLE = (8_000_000 + 1_000_000 + 2_000_000 + 500_000) * KiB  # 11_500_000 kB

NODE1_MEMINFO = """\
Node 1 MemTotal:        8388608 kB
Node 1 MemFree:         4000000 kB
Node 1 Active(file):     100000 kB
Node 1 Inactive(file):   200000 kB
Node 1 SReclaimable:      50000 kB
"""

PROC_MEMINFO = """\
MemTotal:       32768000 kB
MemFree:        10000000 kB
MemAvailable:   20000000 kB
Buffers:          100000 kB
Cached:          9000000 kB
Active(file):    3000000 kB
Inactive(file):  4000000 kB
SReclaimable:     700000 kB
HugePages_Total:       0
"""
PROC_TOTAL = 32_768_000 * KiB
PROC_AVAILABLE = (10_000_000 + 3_000_000 + 4_000_000 + 700_000) * KiB  # 17_700_000 kB, not MemAvailable
PROC_MEM_AVAILABLE = 20_000_000 * KiB


class Tree:
    """Fake /sys, /proc and /sys/fs/cgroup roots under tmp_path."""

    def __init__(self, root: Path) -> None:
        self.sys = root / "sys"
        self.proc = root / "proc"
        self.cgroup = root / "cgroup"
        for d in (self.sys, self.proc, self.cgroup):
            d.mkdir()
        self.write(self.proc / "self" / "cgroup", "0::/\n")

    @staticmethod
    def write(path: Path, text: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def node(self, n: int, meminfo: str) -> None:
        self.write(self.sys / "devices" / "system" / "node" / f"node{n}" / "meminfo", meminfo)

    def paths(self) -> dict[str, Path]:
        return {"sys_root": self.sys, "proc_root": self.proc, "cgroup_root": self.cgroup}


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    return Tree(tmp_path)


# ---- catalog ---------------------------------------------------------------------------------------------------


def test_machine_names_order() -> None:
    names = ("dgx-spark", "h100-80gb", "h200", "a100-80gb", "a100-40gb", "l40s")
    names += ("rtx5090", "rtx4090", "rtx4080", "rtx3090", "t4", "cuda", "cpu", "auto")
    assert names == MACHINE_NAMES
    assert tuple(CATALOG) == tuple(EXPECTED_GIB)


@pytest.mark.parametrize(("name", "figure"), EXPECTED_GIB.items())
def test_catalog_figures_round_trip(name: str, figure: float) -> None:
    m = CATALOG[name]
    assert m.name == name
    assert m.total_bytes == round(figure * 2**30)
    assert round(m.total_bytes / 2**30, 2) == figure
    assert m.backend == "cuda"
    assert m.gpus == 1
    assert m.source and m.compute_capability


def test_catalog_flags() -> None:
    assert [n for n, m in CATALOG.items() if m.unified] == ["dgx-spark"]
    assert CATALOG["dgx-spark"].compute_capability == "12.1"
    assert "to be measured" in CATALOG["h200"].source


def test_get_machine_catalog_and_override() -> None:
    assert get_machine("h100-80gb") is CATALOG["h100-80gb"]
    m = get_machine("rtx4090", gpu_memory_gib=22.5)
    assert m.total_bytes == round(22.5 * GiB)
    assert (m.name, m.backend, m.compute_capability) == ("rtx4090", "cuda", "8.9")
    assert "22.5" in m.source
    assert CATALOG["rtx4090"].total_bytes == round(23.64 * GiB)  # the catalog is untouched


def test_get_machine_unknown_suggests() -> None:
    with pytest.raises(MachineError) as e:
        get_machine("h10")
    assert isinstance(e.value, VlaunchError)
    assert e.value.exit_code == 2
    msg = str(e.value)
    assert "unknown machine 'h10'" in msg
    assert "did you mean 'h100-80gb' or 'h200'?" in msg
    assert "dgx-spark, h100-80gb, h200" in msg and msg.endswith("cuda, cpu, auto")


def test_get_machine_unknown_without_close_match() -> None:
    with pytest.raises(MachineError, match="valid names") as e:
        get_machine("zzzzzzzz")
    assert "did you mean" not in str(e.value)


def test_cuda_needs_override() -> None:
    with pytest.raises(MachineError, match="gpu_memory_gib"):
        get_machine("cuda")
    m = get_machine("cuda", gpu_memory_gib=47.5)
    assert (m.name, m.backend, m.unified, m.total_bytes) == ("cuda", "cuda", False, round(47.5 * GiB))


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_override_must_be_positive(bad: float) -> None:
    with pytest.raises(MachineError, match="must be 1 to 1048576 GiB"):
        get_machine("cuda", gpu_memory_gib=bad)


def test_auto_and_cpu_are_not_catalog() -> None:
    with pytest.raises(MachineError, match="detect"):
        get_machine("auto")
    with pytest.raises(MachineError, match="machine_for_plan"):
        get_machine("cpu")
    m = get_machine("cpu", gpu_memory_gib=16)
    assert (m.backend, m.unified, m.total_bytes) == ("cpu", True, 16 * GiB)


@pytest.mark.parametrize(
    ("gpu", "name"),
    [
        ("NVIDIA GB10", "dgx-spark"),
        ("NVIDIA H100 80GB HBM3", "h100-80gb"),
        ("NVIDIA H100 NVL", None),
        ("NVIDIA H200", "h200"),
        ("NVIDIA H200 NVL", "h200"),
        ("NVIDIA GH200 480GB", None),
        ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
        ("NVIDIA A100 80GB PCIe", "a100-80gb"),
        ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
        ("NVIDIA A100-PCIE-40GB", "a100-40gb"),
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA L40", None),
        ("NVIDIA GeForce RTX 5090", "rtx5090"),
        ("NVIDIA GeForce RTX 4090", "rtx4090"),
        ("NVIDIA GeForce RTX 4090 Laptop GPU", None),
        ("NVIDIA GeForce RTX 4080 SUPER", "rtx4080"),
        ("NVIDIA GeForce RTX 3090", "rtx3090"),
        ("Tesla T4", "t4"),
        ("NVIDIA T400", None),
        ("NVIDIA RTX 6000 Ada Generation", None),
    ],
)
def test_catalog_name_for_gpu(gpu: str, name: str | None) -> None:
    assert catalog_name_for_gpu(gpu) == name


def test_to_json() -> None:
    j = CATALOG["dgx-spark"].to_json()
    assert j["unified"] is True and j["total_bytes"] == round(121.63 * GiB)
    r = MemoryReading(1, 1, "x", 0, None, {"MemTotal": 1})
    assert r.to_json()["detail"] == {"MemTotal": 1}


# ---- CPU memory ------------------------------------------------------------------------------------------------


def test_numa_node_meminfo(tree: Tree) -> None:
    tree.node(0, NODE0_MEMINFO)
    tree.write(tree.proc / "meminfo", PROC_MEMINFO)  # present, but the node file wins
    r = read_cpu_node(**tree.paths())
    assert r.total_bytes == NODE0_TOTAL
    assert r.available_bytes == NODE0_AVAILABLE
    assert (r.node, r.cgroup_limit_bytes) == (0, None)
    assert r.source.endswith("node0/meminfo")
    assert r.detail == {
        "MemTotal": NODE0_TOTAL,
        "MemFree": 8_000_000 * KiB,
        "Active(file)": 1_000_000 * KiB,
        "Inactive(file)": 2_000_000 * KiB,
        "SReclaimable": 500_000 * KiB,
    }


def test_second_numa_node(tree: Tree) -> None:
    tree.node(0, NODE0_MEMINFO)
    tree.node(1, NODE1_MEMINFO)
    assert count_numa_nodes(tree.sys) == 2
    r = read_cpu_node(1, **tree.paths())
    assert r.node == 1
    assert r.total_bytes == 8_388_608 * KiB
    assert r.available_bytes == (4_000_000 + 100_000 + 200_000 + 50_000) * KiB
    with pytest.raises(MachineError, match="no NUMA node 5; this machine has nodes 0, 1"):
        read_cpu_node(5, **tree.paths())


def test_no_numa_falls_back_to_proc_meminfo(tree: Tree) -> None:
    tree.write(tree.proc / "meminfo", PROC_MEMINFO)
    assert count_numa_nodes(tree.sys) == 1
    r = read_cpu_node(**tree.paths())
    assert r.total_bytes == PROC_TOTAL
    assert r.available_bytes == PROC_AVAILABLE  # the node formula, not MemAvailable
    assert r.source.endswith("proc/meminfo")
    assert r.node == 0
    with pytest.raises(MachineError, match="only node 0"):
        read_cpu_node(1, **tree.paths())


def test_meminfo_without_memtotal_is_an_error(tree: Tree) -> None:
    tree.write(tree.proc / "meminfo", "Cached: 1 kB\n")
    with pytest.raises(MachineError, match="MemTotal"):
        read_cpu_node(**tree.paths())


def test_missing_meminfo_is_an_error(tree: Tree) -> None:
    with pytest.raises(MachineError, match="cannot read"):
        read_cpu_node(**tree.paths())


def test_cgroup_v1_limit_clamps(tree: Tree) -> None:
    tree.node(0, NODE0_MEMINFO)
    tree.write(tree.cgroup / "memory" / "memory.limit_in_bytes", f"{4 * GiB}\n")
    tree.write(tree.cgroup / "memory" / "memory.usage_in_bytes", f"{GiB}\n")
    r = read_cpu_node(**tree.paths())
    assert r.total_bytes == 4 * GiB  # min(16 GiB node, 4 GiB limit)
    assert r.available_bytes == 3 * GiB  # min(~11 GiB, 4 GiB - 1 GiB used)
    assert r.cgroup_limit_bytes == 4 * GiB
    assert r.detail["cgroup_limit"] == 4 * GiB and r.detail["cgroup_usage"] == GiB
    assert r.detail["cgroup_version"] == 1
    assert "cgroup v1" in r.source


def test_cgroup_v1_huge_value_is_no_limit(tree: Tree) -> None:
    tree.node(0, NODE0_MEMINFO)
    tree.write(tree.cgroup / "memory" / "memory.limit_in_bytes", f"{V1_NO_LIMIT}\n")
    tree.write(tree.cgroup / "memory" / "memory.usage_in_bytes", f"{GiB}\n")
    r = read_cpu_node(**tree.paths())
    assert (r.total_bytes, r.available_bytes, r.cgroup_limit_bytes) == (NODE0_TOTAL, NODE0_AVAILABLE, None)
    assert "cgroup_limit" not in r.detail


def test_cgroup_v1_own_path(tree: Tree) -> None:
    tree.node(0, NODE0_MEMINFO)
    tree.write(tree.proc / "self" / "cgroup", "5:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n0::/\n")
    tree.write(tree.cgroup / "memory" / "memory.limit_in_bytes", f"{V1_NO_LIMIT}\n")
    own = tree.cgroup / "memory" / "docker" / "abc"
    tree.write(own / "memory.limit_in_bytes", f"{2 * GiB}\n")
    tree.write(own / "memory.usage_in_bytes", f"{GiB // 2}\n")
    r = read_cpu_node(**tree.paths())
    assert (r.total_bytes, r.available_bytes) == (2 * GiB, 2 * GiB - GiB // 2)
    assert "docker/abc/memory.limit_in_bytes" in r.source


def test_cgroup_v2_max_is_no_limit(tree: Tree) -> None:
    tree.node(0, NODE0_MEMINFO)
    tree.write(tree.cgroup / "memory.max", "max\n")
    tree.write(tree.cgroup / "memory.current", f"{GiB}\n")
    r = read_cpu_node(**tree.paths())
    assert (r.total_bytes, r.available_bytes, r.cgroup_limit_bytes) == (NODE0_TOTAL, NODE0_AVAILABLE, None)


def test_cgroup_v2_limit_clamps(tree: Tree) -> None:
    tree.node(0, NODE0_MEMINFO)
    tree.write(tree.cgroup / "memory.max", f"{8 * GiB}\n")
    tree.write(tree.cgroup / "memory.current", f"{6 * GiB}\n")
    r = read_cpu_node(**tree.paths())
    assert r.total_bytes == 8 * GiB
    assert r.available_bytes == 2 * GiB  # 8 GiB limit - 6 GiB used < the node's ~11 GiB
    assert r.cgroup_limit_bytes == 8 * GiB
    assert r.detail["cgroup_version"] == 2 and r.detail["cgroup_usage"] == 6 * GiB


def test_cgroup_v2_own_path_and_tightest_ancestor(tree: Tree) -> None:
    tree.node(0, NODE0_MEMINFO)
    tree.write(tree.proc / "self" / "cgroup", "0::/user.slice/app.scope\n")
    tree.write(tree.cgroup / "user.slice" / "memory.max", f"{12 * GiB}\n")
    tree.write(tree.cgroup / "user.slice" / "memory.current", f"{GiB}\n")
    tree.write(tree.cgroup / "user.slice" / "app.scope" / "memory.max", "max\n")
    r = read_cpu_node(**tree.paths())
    # total min(16, 12) GiB; available min(11_500_000 kB, 11 GiB = 11_534_336 kB) = the node figure
    assert (r.total_bytes, r.available_bytes, r.cgroup_limit_bytes) == (12 * GiB, NODE0_AVAILABLE, 12 * GiB)


def test_unified_available(tree: Tree) -> None:
    tree.write(tree.proc / "meminfo", PROC_MEMINFO)
    assert read_unified_available(tree.proc) == PROC_MEM_AVAILABLE
    tree.write(tree.proc / "meminfo", PROC_MEMINFO.replace("MemAvailable:   20000000 kB\n", ""))
    assert read_unified_available(tree.proc) == PROC_AVAILABLE


# ---- nvidia-smi ------------------------------------------------------------------------------------------------

Run = Callable[..., "subprocess.CompletedProcess[str]"]


def smi(stdout: str, returncode: int = 0, calls: list[tuple[Any, dict[str, Any]]] | None = None) -> Run:
    def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        if calls is not None:
            calls.append((argv, kwargs))
        return subprocess.CompletedProcess(argv, returncode, stdout, "")

    return run


def smi_raises(exc: BaseException) -> Run:
    def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        raise exc

    return run


def test_nvidia_smi_h100(tree: Tree) -> None:
    calls: list[tuple[Any, dict[str, Any]]] = []
    run = smi("0, NVIDIA H100 80GB HBM3, 81559, 81004\n", calls=calls)
    machine, r = detect(runner=run, **tree.paths())
    argv, kwargs = calls[0]
    assert argv == [
        "nvidia-smi",
        "--query-gpu=index,name,memory.total,memory.free",
        "--format=csv,noheader,nounits",
    ]
    assert kwargs["timeout"] == 5
    assert machine is CATALOG["h100-80gb"] or machine == CATALOG["h100-80gb"]
    assert r.total_bytes == CATALOG["h100-80gb"].total_bytes  # the catalog's cudaMemGetInfo total
    assert r.available_bytes == 81004 * MiB
    assert r.detail == {
        "index": 0,
        "nvidia_smi_total": 81559 * MiB,
        "nvidia_smi_free": 81004 * MiB,
        "catalog_total": CATALOG["h100-80gb"].total_bytes,
    }
    assert r.node is None and r.cgroup_limit_bytes is None


def test_nvidia_smi_gb10_is_spark(tree: Tree) -> None:
    tree.write(tree.proc / "meminfo", PROC_MEMINFO)
    machine, r = detect(runner=smi("0, NVIDIA GB10, [N/A], [N/A]\n"), **tree.paths())
    assert machine.name == "dgx-spark" and machine.unified
    assert r.total_bytes == CATALOG["dgx-spark"].total_bytes
    assert r.available_bytes == PROC_MEM_AVAILABLE  # psutil's available, as vLLM on unified memory
    assert "nvidia_smi_total" not in r.detail and r.detail["MemAvailable"] == PROC_MEM_AVAILABLE


def test_nvidia_smi_not_supported_fields(tree: Tree) -> None:
    tree.write(tree.proc / "meminfo", PROC_MEMINFO)
    readings = read_cuda(run=smi("0, NVIDIA GB10, Not Supported, Not Supported\n"), proc_root=tree.proc)
    assert readings is not None and len(readings) == 1
    assert readings[0].total_bytes == CATALOG["dgx-spark"].total_bytes


def test_nvidia_smi_unknown_gpu_is_cuda(tree: Tree) -> None:
    line = "0, NVIDIA RTX PRO 6000 Blackwell Workstation Edition, 97887, 97000\n"
    machine, r = detect(runner=smi(line), **tree.paths())
    assert (machine.name, machine.backend, machine.unified) == ("cuda", "cuda", False)
    assert machine.total_bytes == r.total_bytes == 97887 * MiB
    assert r.available_bytes == 97000 * MiB
    assert "RTX PRO 6000" in machine.description
    assert "catalog_total" not in r.detail


def test_nvidia_smi_unknown_integrated_gpu_uses_memtotal(tree: Tree) -> None:
    tree.write(tree.proc / "meminfo", PROC_MEMINFO)
    machine, r = detect(runner=smi("0, Orin (nvgpu), [N/A], [N/A]\n"), **tree.paths())
    assert (machine.name, machine.unified) == ("cuda", True)
    assert r.total_bytes == PROC_TOTAL and r.available_bytes == PROC_MEM_AVAILABLE


def test_nvidia_smi_name_with_wrong_memory_is_not_trusted(tree: Tree) -> None:
    machine, r = detect(runner=smi("0, NVIDIA H100 80GB HBM3, 40960, 40000\n"), **tree.paths())
    assert machine.name == "cuda" and r.total_bytes == 40960 * MiB


def test_nvidia_smi_several_gpus(tree: Tree) -> None:
    out = "0, NVIDIA A100-SXM4-40GB, 40960, 40000\n1, NVIDIA A100-SXM4-40GB, 40960, 30000\n"
    machine, r = detect(runner=smi(out), **tree.paths())
    assert (machine.name, machine.gpus) == ("a100-40gb", 2)
    assert r.available_bytes == 30000 * MiB and r.detail["index"] == 1
    readings = read_cuda(run=smi(out))
    assert readings is not None and [x.detail["index"] for x in readings] == [0, 1]


def test_nvidia_smi_missing_is_cpu(tree: Tree) -> None:
    tree.node(0, NODE0_MEMINFO)
    assert read_cuda(run=smi_raises(FileNotFoundError("nvidia-smi"))) is None
    machine, r = detect(runner=smi_raises(FileNotFoundError("nvidia-smi")), **tree.paths())
    assert (machine.name, machine.backend, machine.unified) == ("cpu", "cpu", True)
    assert machine.total_bytes == r.total_bytes == NODE0_TOTAL
    assert r.available_bytes == NODE0_AVAILABLE and r.node == 0


@pytest.mark.parametrize(
    "run",
    [
        smi("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", returncode=9),
        smi("No devices were found\n", returncode=6),
        smi(""),
        smi_raises(subprocess.TimeoutExpired("nvidia-smi", 5)),
        smi_raises(PermissionError("nvidia-smi")),
    ],
)
def test_nvidia_smi_failures_are_none(run: Run) -> None:
    assert read_cuda(run=run) is None


def test_detect_override(tree: Tree) -> None:
    machine, r = detect(gpu_memory_gib=70, runner=smi("0, NVIDIA H100 80GB HBM3, 81559, 81004\n"), **tree.paths())
    assert machine.name == "h100-80gb" and machine.total_bytes == 70 * GiB
    assert r.total_bytes == CATALOG["h100-80gb"].total_bytes


# ---- machine_for_plan ------------------------------------------------------------------------------------------


def test_machine_for_plan(tree: Tree) -> None:
    tree.node(0, NODE0_MEMINFO)
    assert machine_for_plan("t4", **tree.paths()) == (CATALOG["t4"], None)
    m, r = machine_for_plan("cpu", **tree.paths())
    assert r is not None and m.total_bytes == r.total_bytes == NODE0_TOTAL and m.backend == "cpu"
    m, r = machine_for_plan("auto", runner=smi_raises(FileNotFoundError()), **tree.paths())
    assert m.name == "cpu" and r is not None
    m, r = machine_for_plan("auto", runner=smi("0, Tesla T4, 15360, 15000\n"), **tree.paths())
    # nvidia-smi's free (15000 MiB) is above cudaMemGetInfo's total (14.56 GiB): clamped to the total
    assert m.name == "t4" and r is not None and r.available_bytes == CATALOG["t4"].total_bytes
    with pytest.raises(MachineError, match="gpu_memory_gib"):
        machine_for_plan("cuda")
    assert machine_for_plan("cuda", gpu_memory_gib=10)[0].total_bytes == 10 * GiB
    with pytest.raises(MachineError, match="live"):
        machine_for_plan("auto", live=False)
    with pytest.raises(MachineError):
        machine_for_plan("cpu", live=False)
    with pytest.raises(MachineError, match="did you mean"):
        machine_for_plan("rtx-4900")
    # the catalog's aliases name the same machine wherever a machine is named
    assert machine_for_plan("rtx-4090")[0] == get_machine("4090") == CATALOG["rtx4090"]
    assert get_machine("spark") == CATALOG["dgx-spark"] and get_machine("H100").name == "h100-80gb"


def test_machine_is_frozen() -> None:
    with pytest.raises(AttributeError):
        CATALOG["t4"].total_bytes = 1  # type: ignore[misc]
    assert isinstance(CATALOG["t4"], Machine)


# ---- this machine ----------------------------------------------------------------------------------------------


def test_read_cpu_node_on_this_machine() -> None:
    r = read_cpu_node()
    assert r.total_bytes > 0
    assert 0 < r.available_bytes <= r.total_bytes
    assert read_unified_available() > 0


@pytest.mark.parametrize("gib", [4.7e-17, 0.5, 2.0**21, float("inf"), float("nan"), 0.0, -1.0])
@pytest.mark.parametrize("name", ["h100-80gb", "cuda"])
def test_a_total_no_machine_has_is_refused(name: str, gib: float) -> None:
    """A total under 1 GiB rounds to few or no bytes (a division by zero once, exit 70); none is over a PiB."""
    with pytest.raises(VlaunchError, match="gpu_memory_gib must be 1 to 1048576 GiB"):
        get_machine(name, gpu_memory_gib=gib)
