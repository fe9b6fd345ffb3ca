"""Predicted vs logged pools for the dev logs (tests/fixtures/devlogs.yaml). Used by tests and bench/devlogs.py."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from launcher.common.units import GiB
from launcher.plan.planning import Plan, make_plan, profile_from_flags

DEVLOGS = Path(__file__).parent / "fixtures" / "devlogs.yaml"


def cases() -> dict[str, list[dict[str, Any]]]:
    data: dict[str, list[dict[str, Any]]] = yaml.safe_load(DEVLOGS.read_text())
    return data


def plan_for(case: dict[str, Any], **extra: Any) -> Plan:
    flags = dict(case["plan"])
    free_gib = flags.pop("free_gib", None)
    version = flags.pop("vllm_version", None)
    env: dict[str, str] = {}
    if flags.pop("env_v0", False):
        env["VLLM_USE_V1"] = "0"
    if flags.pop("env_v1", False):
        env["VLLM_USE_V1"] = "1"
    flags.update(extra)
    p = profile_from_flags(flags.pop("model"), None, **flags)
    p = p.with_overrides(vllm={"version": str(version) if version else None, "env": env})
    return make_plan(p, live=False, free_bytes=None if free_gib is None else round(free_gib * GiB))


@dataclass(frozen=True)
class Row:
    id: str
    predicted_tokens: int
    logged_tokens: int
    predicted_concurrency: float
    logged_concurrency: float | None

    @property
    def error(self) -> float:
        return (self.predicted_tokens - self.logged_tokens) / self.logged_tokens


def tier_a() -> list[Row]:
    """Pool tokens with the logged available KV memory passed as --kv-cache-memory-bytes."""
    rows = []
    for c in cases()["success"]:
        if "available_kv_gib" not in c:
            continue
        plan = plan_for(c, kv_cache_memory_bytes=round(c["available_kv_gib"] * GiB))
        p = plan.prediction.pool
        rows.append(Row(c["id"], p.tokens, c["tokens"], p.max_concurrency, c.get("concurrency")))
    return rows


def tier_b() -> list[Row]:
    """Pool tokens from machine + flags alone."""
    rows = []
    for c in cases()["success"]:
        plan = plan_for(c)
        p = plan.prediction.pool
        rows.append(Row(c["id"], p.tokens, c["tokens"], p.max_concurrency, c.get("concurrency")))
    return rows


def summary(rows: list[Row]) -> dict[str, float]:
    errs = sorted(abs(r.error) for r in rows)
    p90 = errs[min(len(errs) - 1, round(0.9 * (len(errs) - 1)))]
    return {"n": len(errs), "median": statistics.median(errs), "p90": p90, "max": errs[-1]}
