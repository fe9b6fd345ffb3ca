"""Measured terms from earlier runs on this box, stored as a small YAML the user can read.

`$XDG_CONFIG_HOME/vlaunch/calibration.yaml` (default ~/.config/vlaunch). Entries are keyed by machine, vLLM
version and the interpreter that runs vLLM, so a figure from another box or another install is never used.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

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
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def _key(machine: str, version: str, python: str | None) -> str:
    return f"{machine}|vllm {version}|{python or 'vllm'}"


def lookup_cpu_worker(machine: str, version: str, python: str | None, path: Path | None = None) -> CpuWorker | None:
    entry = _load(path or calibration_path()).get("cpu_worker", {}).get(_key(machine, version, python))
    if not isinstance(entry, dict) or not isinstance(entry.get("base_bytes"), int):
        return None
    return CpuWorker(entry["base_bytes"], int(entry.get("runs", 1)), str(entry.get("source", "")))


def record_cpu_worker(
    machine: str, version: str, python: str | None, base_bytes: int, source: str, path: Path | None = None
) -> CpuWorker:
    """Fold one measurement into the stored figure (running mean over runs)."""
    path = path or calibration_path()
    data = _load(path)
    table = data.setdefault("cpu_worker", {})
    key = _key(machine, version, python)
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
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(
        "# vlaunch calibration: terms measured from vLLM's own logs on this machine (see `vlaunch calibrate`).\n"
        + yaml.safe_dump(data, sort_keys=True)
    )
    tmp.replace(path)
    return CpuWorker(mean, runs, source)


def cpu_worker_from_log(
    total_gib: float, util: float, kv_pool_tokens: int, block_bytes_per_token: int, weights_bytes: int
) -> int:
    """Resident memory besides weights = vLLM's request (ceil(total × util)) − the KV pool it then carved."""
    requested = math.ceil(round(total_gib * GiB) * util)
    kv = kv_pool_tokens * block_bytes_per_token
    return int(requested - kv - weights_bytes)
