"""The machines vlaunch plans for, and detection of the local one.

Two halves. The catalog (`Machine`, `CATALOG`, `get_machine`, `catalog_name_for_gpu`) is pure data: no files, no
subprocess, safe for the math modules. The readers (`read_cpu_node`, `read_cuda`, `read_unified_available`,
`detect`, `machine_for_plan`) do I/O; each takes the roots it reads (`sys_root`, `proc_root`, `cgroup_root`)
and the subprocess runner as arguments, so tests feed them fake /proc and /sys trees.

`total_bytes` is the figure vLLM multiplies by gpu_memory_utilization: cudaMemGetInfo's *total* on a GPU, the
NUMA node's MemTotal (clamped by the cgroup limit) on the CPU backend — never the marketing size.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import KW_ONLY, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal, get_args

from launcher.common.errors import VlaunchError
from launcher.common.records import dataclass
from launcher.common.units import gib_to_bytes

Backend = Literal["cuda", "cpu"]


class MachineError(VlaunchError):
    """An unknown machine name, a missing memory figure, or memory that could not be read."""

    exit_code = 2


# ---------------------------------------------------------------------------------------------------------------
# Catalog (pure data)
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Machine:
    """A machine to plan for."""

    name: str
    """Catalog name (`h100-80gb`), or `cuda` / `cpu` for a machine described by a figure or a reading."""
    description: str
    total_bytes: int
    """What vLLM multiplies by gpu_memory_utilization: cudaMemGetInfo's total per GPU (CPU: node total)."""
    unified: bool
    """CPU and GPU share RAM: vLLM compares the budget with RAM available, not device free memory."""
    backend: Backend
    _: KW_ONLY
    gpus: int = 1
    source: str
    """Where `total_bytes` comes from, in one short sentence."""
    compute_capability: str | None = None
    bandwidth_bytes_per_s: int | None = None
    """Peak memory bandwidth per GPU (bytes/s, decimal as vendors state it): the roof of decode speed."""
    bandwidth_source: str = ""
    interconnect: Interconnect = "pcie"
    """How this box's GPUs talk to each other (tensor parallel's all-reduce): it sizes NCCL's buffers."""
    interconnect_source: str = "not stated: planned as PCIe"
    tensor_tflops: tuple[tuple[str, float], ...] = ()
    """Dense tensor-core throughput per GPU by compute dtype (bf16, fp8, fp4), TFLOPS, FP32 accumulate: the roof of
    prefill; () where no figure is known (`cuda`, `cpu`)."""
    tensor_source: str = ""

    def tflops(self, dtype: str) -> float | None:
        """Tensor throughput in `dtype`, falling back to the widest dtype the GPU has (fp4 → fp8 → bf16)."""
        table = dict(self.tensor_tflops)
        for d in {"fp4": ("fp4", "fp8", "bf16"), "fp8": ("fp8", "bf16")}.get(dtype, ("bf16",)):
            if d in table:
                return table[d]
        return None

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "description": self.description,
            "total_bytes": self.total_bytes,
            "unified": self.unified,
            "backend": self.backend,
            "gpus": self.gpus,
            "source": self.source,
            "compute_capability": self.compute_capability,
            "bandwidth_bytes_per_s": self.bandwidth_bytes_per_s,
            "bandwidth_source": self.bandwidth_source,
            "interconnect": self.interconnect,
            "interconnect_source": self.interconnect_source,
            "tensor_tflops": dict(self.tensor_tflops),
            "tensor_source": self.tensor_source,
        }


def _gpu(
    name: str,
    description: str,
    total_gib: float,
    cc: str,
    source: str,
    *,
    bandwidth_gbs: float,
    bandwidth_source: str,
    unified: bool = False,
    interconnect: tuple[Interconnect, str] = ("pcie", "consumer and PCIe cards: no NVLink between GPUs"),
    tensor: tuple[dict[str, float], str] = ({}, ""),
) -> Machine:
    return Machine(
        name,
        description,
        gib_to_bytes(total_gib),
        unified,
        "cuda",
        source=source,
        compute_capability=cc,
        bandwidth_bytes_per_s=round(bandwidth_gbs * 10**9),
        bandwidth_source=bandwidth_source,
        interconnect=interconnect[0],
        interconnect_source=interconnect[1],
        tensor_tflops=tuple(tensor[0].items()),
        tensor_source=tensor[1],
    )


Interconnect = Literal["nvswitch", "nvlink", "pcie", "network", "none"]
"""How tensor-parallel ranks reach each other: NVLink through NVSwitch with NVLink SHARP (HGX H100/H200), NVLink
(HGX A100), PCIe, a network between boxes (one GPU per box: the DGX Spark; any TP group spanning nodes), or none
(one device)."""
INTERCONNECTS: tuple[Interconnect, ...] = get_args(Interconnect)

_NVSWITCH: tuple[Interconnect, str] = (
    "nvswitch",
    "HGX H100/H200 boards: NVLink 4 through NVSwitch, where NCCL uses NVLink SHARP (NVLS)",
)
_NVLINK: tuple[Interconnect, str] = (
    "nvlink",
    "HGX A100 boards: NVLink 3 (PCIe cards, which have none, are planned alike)",
)

_CPU_LINK = "CPU backend: tensor-parallel ranks share the box's memory"
_NOT_MEASURED = "commonly reported cudaMemGetInfo/torch total for this card; not measured here"

CATALOG: dict[str, Machine] = {
    m.name: m
    for m in (
        _gpu(
            "dgx-spark",
            "NVIDIA DGX Spark (GB10, 128 GB LPDDR5x shared by CPU and GPU)",
            121.63,
            "12.1",
            "figure supplied for GB10's cudaMemGetInfo total (the RAM CUDA sees); not measured here",
            unified=True,
            bandwidth_gbs=273,
            bandwidth_source="NVIDIA DGX Spark specifications: 128 GB LPDDR5x, 273 GB/s",
            interconnect=("network", "one GB10 per box: tensor parallel runs between Sparks over ConnectX-7"),
            tensor=(
                {"fp4": 500, "fp8": 250, "bf16": 125},
                "NVIDIA DGX Spark specifications: 1 PFLOP FP4 with sparsity; dense FP4 is half, FP8 and BF16 half"
                " again per step (Blackwell tensor cores)",
            ),
        ),
        _gpu(
            "h100-80gb",
            "NVIDIA H100 80GB (SXM, HBM3)",
            79.19,
            "9.0",
            "from vLLM logs' 'Free memory on device (78.68/79.19 GiB)' line (shared/vllm-logs, H100 80GB runs)",
            bandwidth_gbs=3350,
            bandwidth_source="NVIDIA H100 datasheet: H100 SXM 3.35 TB/s (PCIe 2.0 TB/s)",
            interconnect=_NVSWITCH,
            tensor=(
                {"fp8": 1979, "bf16": 989},
                "NVIDIA H100 datasheet: SXM FP8 3,958 and BF16 1,979 TFLOPS with sparsity; dense is half",
            ),
        ),
        _gpu(
            "h200",
            "NVIDIA H200 (141 GB HBM3e)",
            139.81,
            "9.0",
            "placeholder, to be measured",
            bandwidth_gbs=4800,
            bandwidth_source="NVIDIA H200 datasheet: 4.8 TB/s",
            interconnect=_NVSWITCH,
            tensor=(
                {"fp8": 1979, "bf16": 989},
                "NVIDIA H200 datasheet: FP8 3,958 and BF16 1,979 TFLOPS with sparsity; dense is half",
            ),
        ),
        _gpu(
            "a100-80gb",
            "NVIDIA A100 80GB (SXM4 or PCIe)",
            79.15,
            "8.0",
            _NOT_MEASURED,
            bandwidth_gbs=2039,
            bandwidth_source="NVIDIA A100 datasheet: 80GB SXM 2,039 GB/s (PCIe 1,935 GB/s)",
            interconnect=_NVLINK,
            tensor=(
                {"bf16": 312},
                "NVIDIA A100 datasheet: BF16 312 TFLOPS dense; no FP8 tensor cores (FP8 weights run as W8A16)",
            ),
        ),
        _gpu(
            "a100-40gb",
            "NVIDIA A100 40GB (SXM4 or PCIe)",
            39.39,
            "8.0",
            "typical torch OOM message 'total capacity of 39.39 GiB' (A100 40GB); not measured here",
            bandwidth_gbs=1555,
            bandwidth_source="NVIDIA A100 datasheet: 40GB 1,555 GB/s",
            interconnect=_NVLINK,
            tensor=(
                {"bf16": 312},
                "NVIDIA A100 datasheet: BF16 312 TFLOPS dense; no FP8 tensor cores (FP8 weights run as W8A16)",
            ),
        ),
        _gpu(
            "l40s",
            "NVIDIA L40S (48 GB GDDR6)",
            44.39,
            "8.9",
            _NOT_MEASURED,
            bandwidth_gbs=864,
            bandwidth_source="NVIDIA L40S datasheet: 864 GB/s",
            tensor=({"fp8": 733, "bf16": 362}, "NVIDIA L40S datasheet: FP8 733 and BF16 362 TFLOPS dense"),
        ),
        _gpu(
            "rtx5090",
            "NVIDIA GeForce RTX 5090 (32 GB)",
            31.36,
            "12.0",
            _NOT_MEASURED,
            bandwidth_gbs=1792,
            bandwidth_source="NVIDIA GeForce RTX 5090 specifications: 1,792 GB/s",
            tensor=(
                {"fp4": 838, "fp8": 419, "bf16": 209},
                "NVIDIA RTX Blackwell GPU architecture: 3,352 AI TOPS (FP4, sparse); dense at FP32 accumulate, half"
                " per step",
            ),
        ),
        _gpu(
            "rtx4090",
            "NVIDIA GeForce RTX 4090 (24 GB)",
            23.64,
            "8.9",
            _NOT_MEASURED,
            bandwidth_gbs=1008,
            bandwidth_source="NVIDIA GeForce RTX 4090 specifications: 1,008 GB/s",
            tensor=(
                {"fp8": 330, "bf16": 165},
                "NVIDIA Ada GPU architecture whitepaper: RTX 4090 FP8 330.3 and FP16/BF16 165.2 TFLOPS dense at FP32"
                " accumulate",
            ),
        ),
        _gpu(
            "rtx4080",
            "NVIDIA GeForce RTX 4080 (16 GB)",
            15.59,
            "8.9",
            _NOT_MEASURED,
            bandwidth_gbs=716.8,
            bandwidth_source="NVIDIA GeForce RTX 4080 specifications: 716.8 GB/s",
            tensor=(
                {"fp8": 195, "bf16": 97.5},
                "NVIDIA Ada GPU architecture whitepaper: RTX 4080 FP8 194.9 and FP16/BF16 97.5 TFLOPS dense at FP32"
                " accumulate",
            ),
        ),
        _gpu(
            "rtx3090",
            "NVIDIA GeForce RTX 3090 (24 GB)",
            23.58,
            "8.6",
            "from vLLM startup log total_gpu_memory=23.58GiB (RTX 3090, vLLM issue #10517)",
            bandwidth_gbs=936.2,
            bandwidth_source="NVIDIA GeForce RTX 3090 specifications: 936.2 GB/s",
            tensor=(
                {"bf16": 71},
                "NVIDIA Ampere GA102 whitepaper: RTX 3090 FP16/BF16 71 TFLOPS dense at FP32 accumulate",
            ),
        ),
        _gpu(
            "t4",
            "NVIDIA Tesla T4 (16 GB)",
            14.56,
            "7.5",
            "from a vLLM V0 log 'total_gpu_memory (14.56GiB)' on a Colab Tesla T4",
            bandwidth_gbs=320,
            bandwidth_source="NVIDIA T4 datasheet: 320 GB/s",
            tensor=({"bf16": 65}, "NVIDIA T4 datasheet: FP16 mixed precision 65 TFLOPS (no BF16: vLLM runs FP16)"),
        ),
    )
}

MachineName = Literal[
    "dgx-spark", "h100-80gb", "h200", "a100-80gb", "a100-40gb", "l40s", "rtx5090", "rtx4090", "rtx4080",
    "rtx3090", "t4", "cuda", "cpu", "auto",
]  # fmt: skip
"""The names as a type, for profiles; the import-time check below keeps it equal to the catalog's."""
MACHINE_NAMES: tuple[MachineName, ...] = get_args(MachineName)
"""Every name `--machine` accepts: the catalog in order, then `cuda` (needs a figure), `cpu` and `auto` (read)."""
if (*CATALOG, "cuda", "cpu", "auto") != MACHINE_NAMES:  # pragma: no cover - a catalog edit without the type
    raise ImportError("machines.MachineName and machines.CATALOG disagree")

# nvidia-smi name → catalog name. Names are upper-cased with '-'/'_' turned into spaces first. Laptop parts share
# the model number but not the memory, so they never match; `\bH200` keeps GH200 out.
_GPU_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p), name)
    for p, name in (
        (r"\bGB10\b", "dgx-spark"),
        (r"\bH100\b.*\b80GB\b", "h100-80gb"),
        (r"\bH200\b", "h200"),
        (r"\bA100\b.*\b80GB\b", "a100-80gb"),
        (r"\bA100\b.*\b40GB\b", "a100-40gb"),
        (r"\bL40S\b", "l40s"),
        (r"\bRTX 5090\b", "rtx5090"),
        (r"\bRTX 4090\b", "rtx4090"),
        (r"\bRTX 4080\b", "rtx4080"),
        (r"\bRTX 3090\b", "rtx3090"),
        (r"\bT4\b", "t4"),
    )
)


def catalog_name_for_gpu(gpu_name: str) -> str | None:
    """The catalog entry for an nvidia-smi GPU name ('NVIDIA H100 80GB HBM3' → 'h100-80gb'), or None."""
    norm = re.sub(r"[-_\s]+", " ", gpu_name.upper()).strip()
    if "LAPTOP" in norm or "MOBILE" in norm:
        return None
    for pattern, name in _GPU_PATTERNS:
        if pattern.search(norm):
            return name
    return None


MIN_GIB = 1.0
MAX_GIB = float(2**20)


def _check_gib(gpu_memory_gib: float) -> int:
    # bounded by what is physical: no accelerator or box vLLM runs on has under 1 GiB; none has a PiB
    if not math.isfinite(gpu_memory_gib) or not MIN_GIB <= gpu_memory_gib <= MAX_GIB:
        raise MachineError(f"gpu_memory_gib must be {MIN_GIB:g} to {MAX_GIB:.0f} GiB, got {gpu_memory_gib!r}")
    return gib_to_bytes(gpu_memory_gib)


def _override(machine: Machine, gpu_memory_gib: float) -> Machine:
    return replace(
        machine,
        total_bytes=_check_gib(gpu_memory_gib),
        source=f"given as gpu_memory_gib={gpu_memory_gib:g}",
    )


def _cuda_machine(
    total_bytes: int, source: str, description: str = "a discrete NVIDIA GPU", *, unified: bool = False
) -> Machine:
    return Machine("cuda", description, total_bytes, unified, "cuda", source=source)


MACHINE_ALIASES: dict[str, str] = {
    "spark": "dgx-spark", "dgx": "dgx-spark", "gb10": "dgx-spark",
    "h100": "h100-80gb", "h100-80": "h100-80gb",
    "a100": "a100-80gb", "a100-80": "a100-80gb", "a100-40": "a100-40gb",
    "5090": "rtx5090", "4090": "rtx4090", "4080": "rtx4080", "3090": "rtx3090",
    "rtx-5090": "rtx5090", "rtx-4090": "rtx4090", "rtx-4080": "rtx4080", "rtx-3090": "rtx3090",
}  # fmt: skip
"""Short names accepted wherever a machine is named: `--machine`, `--compare spark,h100,4090`, profiles."""


def canonical_machine_name(name: str) -> str:
    """A machine name or alias ('spark', 'h100', '4090') → its catalog name; MachineError for an unknown one."""
    key = name.strip().lower()
    key = MACHINE_ALIASES.get(key, key)
    if key in MACHINE_NAMES:
        return key
    get_machine(key)  # raises the unknown-machine error with suggestions
    raise MachineError(f"unknown machine {name!r}")  # pragma: no cover


def get_machine(name: str, *, gpu_memory_gib: float | None = None) -> Machine:
    """A catalog machine, its total replaced by `gpu_memory_gib` when given.

    `cuda` and `cpu` need `gpu_memory_gib` here (to read this machine's CPU memory use `machine_for_plan`);
    `auto` is only known by `detect`.
    """
    key = name.strip().lower()
    key = MACHINE_ALIASES.get(key, key)
    if key in CATALOG:
        machine = CATALOG[key]
        return machine if gpu_memory_gib is None else _override(machine, gpu_memory_gib)
    if key == "cuda":
        if gpu_memory_gib is None:
            raise MachineError(
                "machine 'cuda' needs the GPU's total memory: give gpu_memory_gib "
                "(cudaMemGetInfo's total, e.g. the '/79.19 GiB' in vLLM's 'Free memory on device' line)"
            )
        return _cuda_machine(_check_gib(gpu_memory_gib), f"given as gpu_memory_gib={gpu_memory_gib:g}")
    if key == "cpu":
        if gpu_memory_gib is None:
            raise MachineError("machine 'cpu' is read from this machine (machine_for_plan), or give gpu_memory_gib")
        total = _check_gib(gpu_memory_gib)
        return Machine("cpu", "CPU backend", total, True, "cpu", source=f"given as gpu_memory_gib={gpu_memory_gib:g}",
                       interconnect="none", interconnect_source=_CPU_LINK)  # fmt: skip
    if key == "auto":
        raise MachineError("machine 'auto' is detected on this machine; use detect() or machine_for_plan('auto')")
    prefixed = [n for n in MACHINE_NAMES if key and n.startswith(key)]
    import difflib  # only for a name that is not in the catalog

    close = list(dict.fromkeys(prefixed + difflib.get_close_matches(key, MACHINE_NAMES, n=3, cutoff=0.5)))[:3]
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    raise MachineError(f"unknown machine {name!r}; {hint}valid names: {', '.join(MACHINE_NAMES)}")


# ---------------------------------------------------------------------------------------------------------------
# Readers (I/O)
# ---------------------------------------------------------------------------------------------------------------

SYS_ROOT = Path("/sys")
PROC_ROOT = Path("/proc")
CGROUP_ROOT = Path("/sys/fs/cgroup")

if TYPE_CHECKING:
    import subprocess

Runner = Callable[..., "subprocess.CompletedProcess[str]"]  # subprocess.run or a fake

# cgroup v1 writes "no limit" as the largest page-aligned int64 (9223372036854771712); anything this big is none.
_NO_LIMIT = 1 << 62

_MEMINFO_LINE = re.compile(r"^(?:Node\s+\d+\s+)?([A-Za-z0-9_()]+):\s+(\d+)(\s+kB)?\s*$")
_CPU_FIELDS = ("MemTotal", "MemFree", "Active(file)", "Inactive(file)", "SReclaimable")


@dataclass(frozen=True)
class MemoryReading:
    """Memory as vLLM would see it at start-up, read from this machine."""

    total_bytes: int
    available_bytes: int
    source: str
    node: int | None
    """NUMA node for a CPU reading; None for a GPU."""
    cgroup_limit_bytes: int | None
    detail: dict[str, int]
    """Every raw number behind the reading, in bytes (counts stay counts)."""

    def to_json(self) -> dict[str, object]:
        return {
            "total_bytes": self.total_bytes,
            "available_bytes": self.available_bytes,
            "source": self.source,
            "node": self.node,
            "cgroup_limit_bytes": self.cgroup_limit_bytes,
            "detail": dict(self.detail),
        }


def _read_text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as e:
        raise MachineError(f"cannot read: {e.strerror or e}", source=str(path)) from e


def _parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo or a node's meminfo → {field: bytes} ('kB' values scaled; unitless counts as they are)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        m = _MEMINFO_LINE.match(line.strip())
        if m:
            out[m.group(1)] = int(m.group(2)) * (1024 if m.group(3) else 1)
    return out


def _node_dirs(sys_root: Path) -> list[int]:
    base = sys_root / "devices" / "system" / "node"
    if not base.is_dir():
        return []
    return sorted(int(p.name[4:]) for p in base.iterdir() if re.fullmatch(r"node\d+", p.name) and p.is_dir())


def count_numa_nodes(sys_root: Path = SYS_ROOT) -> int:
    """NUMA nodes in sysfs; 1 when there is no NUMA sysfs."""
    return max(1, len(_node_dirs(sys_root)))


def _own_cgroups(proc_root: Path) -> tuple[str | None, str | None]:
    """(v2 path, v1 memory-controller path) of this process, from /proc/self/cgroup."""
    try:
        text = (proc_root / "self" / "cgroup").read_text()
    except OSError:
        return None, None
    v2: str | None = None
    v1: str | None = None
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "":
            v2 = path
        elif "memory" in controllers.split(","):
            v1 = path
    return v2, v1


def _with_ancestors(base: Path, own: str | None) -> list[Path]:
    """base/own, its parents up to base, and base itself (only the ones that exist)."""
    dirs: list[Path] = []
    if own:
        parts = [p for p in own.split("/") if p and p not in (".", "..")]
        dirs = [base.joinpath(*parts[:i]) for i in range(len(parts), 0, -1)]
    dirs.append(base)
    return [d for d in dirs if d.is_dir()]


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _cgroup_limit(cgroup_root: Path, proc_root: Path) -> tuple[int, int | None, str, int] | None:
    """The tightest memory limit over this process's cgroup and its ancestors: (limit, usage, file, version)."""
    v2_own, v1_own = _own_cgroups(proc_root)
    found: list[tuple[int, int | None, str, int]] = []
    for d in _with_ancestors(cgroup_root, v2_own):
        limit = _read_int(d / "memory.max")  # "max" → None
        if limit is not None and limit < _NO_LIMIT:
            found.append((limit, _read_int(d / "memory.current"), str(d / "memory.max"), 2))
    for d in _with_ancestors(cgroup_root / "memory", v1_own):
        limit = _read_int(d / "memory.limit_in_bytes")
        if limit is not None and limit < _NO_LIMIT:
            found.append((limit, _read_int(d / "memory.usage_in_bytes"), str(d / "memory.limit_in_bytes"), 1))
    return min(found, key=lambda f: f[0]) if found else None


def read_cpu_node(
    node: int = 0,
    *,
    sys_root: Path = SYS_ROOT,
    proc_root: Path = PROC_ROOT,
    cgroup_root: Path = CGROUP_ROOT,
) -> MemoryReading:
    """NUMA node memory as vLLM's CPU backend (0.20+) sees it.

    total = MemTotal, available = MemFree + Active(file) + Inactive(file) + SReclaimable, from the node's
    meminfo (or /proc/meminfo without NUMA sysfs); then clamped by the cgroup memory limit:
    total = min(total, limit), available = min(available, limit - usage).
    """
    nodes = _node_dirs(sys_root)
    if nodes:
        if node not in nodes:
            raise MachineError(f"no NUMA node {node}; this machine has nodes {', '.join(map(str, nodes))}")
        path = sys_root / "devices" / "system" / "node" / f"node{node}" / "meminfo"
    elif node == 0:
        path = proc_root / "meminfo"
    else:
        raise MachineError(f"no NUMA node {node}: there is no NUMA information in {sys_root}, only node 0")
    info = _parse_meminfo(_read_text(path))
    if "MemTotal" not in info or "MemFree" not in info:
        raise MachineError("no MemTotal/MemFree line", source=str(path))
    detail = {k: info.get(k, 0) for k in _CPU_FIELDS}
    total = detail["MemTotal"]
    available = detail["MemFree"] + detail["Active(file)"] + detail["Inactive(file)"] + detail["SReclaimable"]
    source = str(path)
    limit: int | None = None
    cgroup = _cgroup_limit(cgroup_root, proc_root)
    if cgroup is not None:
        limit, usage, limit_file, version = cgroup
        detail["cgroup_version"] = version
        detail["cgroup_limit"] = limit
        total = min(total, limit)
        if usage is not None:
            detail["cgroup_usage"] = usage
            available = min(available, limit - usage)
        else:
            available = min(available, limit)
        source += f", clamped by cgroup v{version} {limit_file}"
    return MemoryReading(
        total_bytes=total,
        available_bytes=max(0, available),
        source=source,
        node=node,
        cgroup_limit_bytes=limit,
        detail=detail,
    )


def _cpu_machine(reading: MemoryReading, sys_root: Path) -> Machine:
    nodes = count_numa_nodes(sys_root)
    return Machine(
        "cpu",
        f"this machine's CPU backend (NUMA node {reading.node} of {nodes})",
        reading.total_bytes,
        True,
        "cpu",
        source=reading.source,
        interconnect="none",
        interconnect_source=_CPU_LINK,
    )


def read_meminfo(proc_root: Path = PROC_ROOT) -> dict[str, int]:
    """/proc/meminfo as {field: bytes}."""
    return _parse_meminfo(_read_text(proc_root / "meminfo"))


def read_unified_available(proc_root: Path = PROC_ROOT) -> int:
    """RAM available as psutil.virtual_memory().available reports it: /proc/meminfo MemAvailable.

    This is what vLLM compares its budget with on unified-memory GPUs (DGX Spark, Jetson; reference §1.8).
    Kernels older than 3.14 have no MemAvailable; then the kernel's own estimate without watermarks is used.
    """
    path = proc_root / "meminfo"
    info = _parse_meminfo(_read_text(path))
    if "MemAvailable" in info:
        return info["MemAvailable"]
    if "MemFree" not in info:
        raise MachineError("no MemAvailable/MemFree line", source=str(path))
    return sum(info.get(k, 0) for k in ("MemFree", "Active(file)", "Inactive(file)", "SReclaimable"))


@dataclass(frozen=True)
class _SmiGpu:
    index: int
    name: str
    total_mib: int | None
    free_mib: int | None


_SMI_QUERY = ["nvidia-smi", "--query-gpu=index,name,memory.total,memory.free", "--format=csv,noheader,nounits"]


def _smi_number(text: str) -> int | None:
    """A MiB field; '[N/A]' or 'Not Supported' (DGX Spark reports no framebuffer) → None."""
    text = text.strip()
    try:
        return int(float(text))
    except ValueError:
        return None


def _query_nvidia_smi(run: Runner | None) -> list[_SmiGpu] | None:
    import subprocess  # a plan for a named machine never asks nvidia-smi

    run = run or subprocess.run
    try:
        proc = run(_SMI_QUERY, capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    gpus: list[_SmiGpu] = []
    for line in (proc.stdout or "").splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) < 4 or not fields[0].isdigit():
            continue
        name = ", ".join(fields[1:-2])  # a name with a comma in it stays whole
        gpus.append(_SmiGpu(int(fields[0]), name, _smi_number(fields[-2]), _smi_number(fields[-1])))
    return gpus or None


# nvidia-smi's memory.total is NVML's figure and runs a little above cudaMemGetInfo's total (H100 80GB: 81559 MiB
# = 79.65 GiB vs 79.19 GiB), which is the one vLLM multiplies. For a catalog GPU the catalog total is used and both
# are kept in `detail`. A name match whose nvidia-smi total is off by more than this is not trusted.
_MATCH_TOLERANCE = 0.06


def _close(smi_total: int, catalog_total: int) -> bool:
    return abs(smi_total - catalog_total) <= _MATCH_TOLERANCE * catalog_total


def _reading_for(gpu: _SmiGpu, proc_root: Path) -> tuple[Machine | None, MemoryReading]:
    """The catalog machine this GPU is (None if unknown) and its reading."""
    detail: dict[str, int] = {"index": gpu.index}
    smi_total = gpu.total_mib * (1 << 20) if gpu.total_mib is not None else None
    smi_free = gpu.free_mib * (1 << 20) if gpu.free_mib is not None else None
    if smi_total is not None:
        detail["nvidia_smi_total"] = smi_total
    if smi_free is not None:
        detail["nvidia_smi_free"] = smi_free
    label = f"nvidia-smi GPU {gpu.index} {gpu.name!r}"
    machine = CATALOG.get(catalog_name_for_gpu(gpu.name) or "")
    if machine is not None and smi_total is not None and not _close(smi_total, machine.total_bytes):
        machine = None
    unified = machine.unified if machine is not None else smi_total is None
    if machine is not None:
        detail["catalog_total"] = machine.total_bytes
        total = machine.total_bytes
        source = f"{label}: total from catalog {machine.name!r} (cudaMemGetInfo)"
    elif smi_total is not None:
        total = smi_total
        source = f"{label}: nvidia-smi memory.total (a little above cudaMemGetInfo's total)"
    else:
        # No framebuffer figure: an integrated GPU; CUDA sees the system RAM.
        info = _parse_meminfo(_read_text(proc_root / "meminfo"))
        total = detail["MemTotal"] = info.get("MemTotal", 0)
        source = f"{label}: no memory.total; using /proc/meminfo MemTotal (integrated GPU)"
    if unified:
        available = detail["MemAvailable"] = read_unified_available(proc_root)
        source += ", available = /proc/meminfo MemAvailable (as vLLM on unified memory)"
    elif smi_free is not None:
        available = min(smi_free, total)
        source += ", available = nvidia-smi memory.free"
    else:
        available = total
        source += ", free memory unknown"
    return machine, MemoryReading(total, available, source, None, None, detail)


def read_cuda(*, run: Runner | None = None, proc_root: Path = PROC_ROOT) -> list[MemoryReading] | None:
    """One reading per GPU nvidia-smi lists (no torch, no NVML bindings); None without nvidia-smi or a GPU.

    CUDA_VISIBLE_DEVICES is not applied: nvidia-smi lists every GPU of the machine.
    """
    gpus = _query_nvidia_smi(run)
    if gpus is None:
        return None
    return [_reading_for(g, proc_root)[1] for g in gpus]


def detect(
    *,
    gpu_memory_gib: float | None = None,
    runner: Runner | None = None,
    sys_root: Path = SYS_ROOT,
    proc_root: Path = PROC_ROOT,
    cgroup_root: Path = CGROUP_ROOT,
) -> tuple[Machine, MemoryReading]:
    """This machine: the catalog GPU nvidia-smi sees, an uncatalogued `cuda` GPU, or `cpu` (NUMA node 0).

    With several GPUs, `gpus` counts those of GPU 0's model and the reading is the one with the least available
    memory (vLLM's pool is the minimum over its workers). `gpu_memory_gib` replaces the machine's total.
    """
    gpus = _query_nvidia_smi(runner)
    if gpus is None:
        reading = read_cpu_node(0, sys_root=sys_root, proc_root=proc_root, cgroup_root=cgroup_root)
        machine = _cpu_machine(reading, sys_root)
    else:
        same = [g for g in gpus if g.name == gpus[0].name]
        pairs = [_reading_for(g, proc_root) for g in same]
        catalog, _ = pairs[0]
        reading = min((r for _, r in pairs), key=lambda r: r.available_bytes)
        if catalog is not None:
            machine = catalog
        else:
            unified = "nvidia_smi_total" not in reading.detail  # no framebuffer figure: integrated
            machine = _cuda_machine(reading.total_bytes, reading.source, f"{gpus[0].name} (detected)", unified=unified)
        machine = replace(machine, gpus=len(same))
    if gpu_memory_gib is not None:
        machine = _override(machine, gpu_memory_gib)
    return machine, reading


def machine_for_plan(
    name: str,
    *,
    gpu_memory_gib: float | None = None,
    live: bool = True,
    runner: Runner | None = None,
    sys_root: Path = SYS_ROOT,
    proc_root: Path = PROC_ROOT,
    cgroup_root: Path = CGROUP_ROOT,
) -> tuple[Machine, MemoryReading | None]:
    """The machine a plan is for, with a live reading where the name means "this machine".

    Catalog names and `cuda` read nothing (reading None). `cpu` reads NUMA node 0 and `auto` detects, unless
    `live` is False: then `cpu` needs `gpu_memory_gib` and `auto` is an error.
    """
    key = name.strip().lower()
    key = MACHINE_ALIASES.get(key, key)
    if key == "cpu" and live:
        reading = read_cpu_node(0, sys_root=sys_root, proc_root=proc_root, cgroup_root=cgroup_root)
        machine = _cpu_machine(reading, sys_root)
        return (machine if gpu_memory_gib is None else _override(machine, gpu_memory_gib)), reading
    if key == "auto":
        if not live:
            raise MachineError("machine 'auto' needs a live reading of this machine; name a machine instead")
        return detect(
            gpu_memory_gib=gpu_memory_gib,
            runner=runner,
            sys_root=sys_root,
            proc_root=proc_root,
            cgroup_root=cgroup_root,
        )
    return get_machine(name, gpu_memory_gib=gpu_memory_gib), None
