"""Expected decode speed against the published measured points (tests/fixtures/speed-points), and the efficiency
table refitted from them.

    python bench/speed_points.py

For each point: its regime, the ceiling, the modelled rate (efficiency 1), vlaunch's expected speed (the
efficiency of its machine, engine class and regime) and the measured one; then the median of measured ÷ modelled
per machine, engine class and regime, beside launcher/plan/speed.py's PUBLISHED table.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from launcher.plan import speed  # noqa: E402
from tests import speed_points as S  # noqa: E402


def main() -> int:
    points = S.all_points()
    print(f"{'point':78} {'regime':13} {'ceiling':>8} {'model':>8} {'expect':>7} {'meas':>7} {'error':>6}")
    for p in points:
        e = S.expected(p)
        print(f"{p.label[:78]:78} {p.regime:13} {p.ceiling:8.1f} {p.modelled:8.1f} {e:7.1f} {p.measured:7.1f} "
              f"{e / p.measured - 1:+6.0%}")  # fmt: skip
    for engine in ("vllm", "llama.cpp"):
        mine = [p for p in points if p.engine == engine]
        ok = sum(abs(S.expected(p) - p.measured) <= 0.3 * p.measured for p in mine)
        print(f"{engine}: {ok} of {len(mine)} within ±30 %")
    table = {(f.machine, f.engine, f.regime): f.value for f in speed.PUBLISHED}
    print("\nmachine    engine     regime         fitted  points  table")
    for (m, eng, reg), (median, n) in sorted(S.refit(points).items()):
        print(f"{m:10} {eng:10} {reg:14} {median:6.3f}  {n:6}  {table.get((m, eng, reg), float('nan')):5.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
