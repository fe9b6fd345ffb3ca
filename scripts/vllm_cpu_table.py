"""Predicted vs logged pool for every real vLLM CPU boot in tests/fixtures/vllm-cpu, as a markdown table.

    .venv/bin/python scripts/vllm_cpu_table.py

Per case and run: layers by kind, KV bytes per token (attention layers), state per request, the block size
vLLM used, and predicted vs logged tokens (exact from --kv-cache-memory-bytes, at the logged total from a util).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.test_vllm_cpu_fixtures import RUNS, _case, _metric, plan_run  # noqa: E402


def main() -> None:
    print(
        "| case | run | layers by kind | KV B/token | state B/request | block (pred/logged) | groups | padding | "
        "tokens predicted | tokens logged | error |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, run in RUNS:
        _, r = _case(name, run)
        try:
            plan = plan_run(name, run)
        except Exception as e:  # a row that cannot be planned says why
            print(f"| {name} | {run} | error: {e} | | | | | | | | |")
            continue
        p = plan.prediction
        kinds: dict[str, int] = {}
        for layer in plan.shape.layers:
            for m in layer.mixers:
                kinds[m.kind] = kinds.get(m.kind, 0) + 1
        layers = ", ".join(f"{n} {k}" for k, n in kinds.items())
        logged = r["kv_cache_tokens"][-1]
        err = 100 * (p.pool.tokens - logged) / logged if logged else 0.0
        bs = _metric(r, "block_size") or "?"
        print(
            f"| {name} | {run} | {layers} | {p.kv_bytes_per_token:,} | {p.state_bytes_per_request:,} | "
            f"{p.layout.block_size}/{bs} | {p.layout.n_groups} | {sum(p.layout.padding_layers)} | "
            f"{p.pool.tokens:,} | {logged:,} | {err:+.2f}% |"
        )


if __name__ == "__main__":
    main()
