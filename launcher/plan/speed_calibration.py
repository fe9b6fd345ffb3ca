"""Decode efficiencies measured on this box: vLLM's periodic "Avg generation throughput" lines in serve's run
records, each over the rate the launch's own decode step models at that many running requests and that context.

A run record holds the launch's step (`speed_inputs`, rowspeed.step_inputs) and the log's statistics lines
(`logged.throughput`). An interval counts when it decoded more tokens than it prefilled (a prefill-bound interval
says little about decode) and the KV cache usage gives the context its requests held. The store keeps the newest
SPEED_KEEP intervals per machine, vLLM version and regime; fit plans with their median, labelled `measured`.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from launcher.common.records import dataclass
from launcher.plan import speed
from launcher.plan.calibration import _load, _store, _table, calibration_path, machine_key
from launcher.plan.rowspeed import step_from_inputs

SPEED_KEEP = 64
"""Intervals kept per machine, version and regime, newest last."""
EFFICIENCY_BOUNDS = (0.02, 3.0)
"""A measured ÷ modelled rate outside these is a broken log or record, not an engine's efficiency (llama.cpp's
batched MoE points reach 1.5: batches share experts more than independent routing)."""


@dataclass(frozen=True)
class Interval:
    regime: speed.Regime
    efficiency: float
    running: int
    context: int
    generation_tokens_per_s: float


@dataclass(frozen=True)
class RunSpeed:
    """The intervals of one run record, keyed as its memory terms are."""

    machine: str
    version: str
    model: str
    source: str
    intervals: tuple[Interval, ...]


def _num(v: object) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def intervals(inputs: dict[str, Any], throughput: list[Any], pool_tokens: int | None) -> list[Interval]:
    """Each decode-bound interval's efficiency: logged generation tokens/s over the modelled aggregate rate at the
    interval's running requests, each holding kv_cache_usage × pool tokens ÷ running of context."""
    out: list[Interval] = []
    bandwidth = inputs.get("bandwidth_bytes_per_s")
    if not isinstance(bandwidth, int) or bandwidth <= 0 or not pool_tokens:
        return out
    unit = speed.Efficiency(1.0, "default", "unit")
    for s in throughput:
        if not isinstance(s, dict):
            continue
        gen, prompt = _num(s.get("generation_tokens_per_s")), _num(s.get("prompt_tokens_per_s")) or 0.0
        running, usage = s.get("running"), _num(s.get("kv_cache_usage"))
        if gen is None or gen <= 0 or not isinstance(running, int) or running < 1 or usage is None or prompt > gen:
            continue
        context = max(1, round(usage * pool_tokens / running))
        try:
            step = step_from_inputs(inputs, running, context, speed.DEFAULT_MTP_ACCEPTANCE)
        except (KeyError, TypeError, ValueError):
            return []
        regime = speed.regime(users=running, moe=bool(inputs.get("moe")), hybrid=bool(inputs.get("hybrid")),
                              nodes=step.nodes)  # fmt: skip
        modelled = speed.expected_decode(step, bandwidth_bytes_per_s=bandwidth, eff=unit, regime_=regime)
        eff = gen / modelled.aggregate_tokens_per_s if modelled.aggregate_tokens_per_s else 0.0
        if EFFICIENCY_BOUNDS[0] <= eff <= EFFICIENCY_BOUNDS[1]:
            out.append(Interval(regime, round(eff, 4), running, context, gen))
    return out


def run_speed(record: dict[str, Any], source: str) -> RunSpeed | None:
    """The run's measured intervals; None when the record holds no step or no statistics lines."""
    inputs, pred, logged = record.get("speed_inputs"), record.get("predicted"), record.get("logged")
    if not isinstance(inputs, dict) or not isinstance(pred, dict) or not isinstance(logged, dict):
        return None
    throughput = logged.get("throughput")
    if not isinstance(throughput, list) or not throughput:
        return None
    pool = logged.get("kv_pool_tokens") or pred.get("kv_pool_tokens")
    found = intervals(inputs, throughput, pool if isinstance(pool, int) and pool > 0 else None)
    total = pred.get("machine_total_bytes")
    if not found or not isinstance(total, int):
        return None
    machine = machine_key(str(pred.get("machine")), total)
    return RunSpeed(machine, str(pred.get("vllm_version")), str(pred.get("model")), source, tuple(found))


def save_speed(runs: list[RunSpeed], path: Path | None = None) -> Path:
    """Add the runs' intervals to the store (the newest SPEED_KEEP per machine, version and regime)."""
    path = path or calibration_path()
    data = _load(path)
    table = data["speed"] = _table(data, "speed")
    for run in runs:
        entry = table.setdefault(f"{run.machine}|vllm {run.version}", {})
        for i in run.intervals:
            kept = entry.setdefault(i.regime, [])
            if not isinstance(kept, list):
                kept = entry[i.regime] = []
            kept.append({"efficiency": i.efficiency, "running": i.running, "context": i.context,
                         "model": run.model, "source": run.source})  # fmt: skip
            del kept[:-SPEED_KEEP]
        entry["updated"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    _store(path, data)
    return path


def lookup_speed(machine: str, version: str, path: Path | None = None) -> dict[str, speed.Efficiency]:
    """The measured efficiency per regime for this machine and vLLM version: the median of the stored intervals
    within EFFICIENCY_BOUNDS (a hand-edited store's others are left out)."""
    entry = _table(_load(path or calibration_path()), "speed").get(f"{machine}|vllm {version}")
    out: dict[str, speed.Efficiency] = {}
    if not isinstance(entry, dict):
        return out
    for regime in speed.REGIMES:
        kept = entry.get(regime)
        if not isinstance(kept, list):
            continue
        effs = [e for s in kept if isinstance(s, dict) and (e := _num(s.get("efficiency"))) is not None
                and EFFICIENCY_BOUNDS[0] <= e <= EFFICIENCY_BOUNDS[1]]  # fmt: skip
        if not effs:
            continue
        models = sorted({str(s.get("model")) for s in kept if isinstance(s, dict)})
        basis = (f"median of {len(effs)} interval(s) of this box's runs ({', '.join(models[:3])}"
                 f"{' …' if len(models) > 3 else ''}; calibration.yaml {machine}|vllm {version})")  # fmt: skip
        out[regime] = speed.Efficiency(round(statistics.median(effs), 4), "measured", basis)
    return out
