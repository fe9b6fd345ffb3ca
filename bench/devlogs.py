"""Print predicted vs logged KV pool tokens for every dev log vlaunch can plan (tiers a and b)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.devlogs_eval import cases, plan_for, summary, tier_a, tier_b


def main() -> int:
    for name, rows in (
        ("a: logged available KV as --kv-cache-memory-bytes", tier_a()),
        ("b: machine + flags", tier_b()),
    ):
        print(f"tier {name}")
        for r in rows:
            print(f"  {r.id[:70]:<70} {r.predicted_tokens:>10,} {r.logged_tokens:>10,} {100 * r.error:+7.2f}%")
        s = summary(rows)
        print(
            f"  n={s['n']} median |err| {100 * s['median']:.2f}%  p90 {100 * s['p90']:.2f}%  max {100 * s['max']:.2f}%"
        )
    print("failures")
    for c in cases()["failure"]:
        plan = plan_for(c)
        print(f"  {c['id'][:70]:<70} fits={plan.fits} failure={plan.to_json()['failure']} (log: {c['failure']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
