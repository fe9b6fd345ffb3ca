"""Fuzz every vlaunch command: tens of thousands of hostile cases (tests/fuzz_cases.py), then a summary.

    .venv/bin/python bench/fuzz.py [--examples 20000] [--seed 0] [--as-gib 2] [--json summary.json]

The cases run in a child process whose address space is capped (RLIMIT_AS, --as-gib: virtual memory, which
counts every mapping Python and its libraries make, so it is set above the resident bound); the resident peak
(ru_maxrss) must stay at or below 1 GiB. Each (command, input kind) pair gets its share of the cases; a pair
whose inputs are few (archs: only --json and --help) is topped up by the others until the total is reached.

The summary: cases per command and input kind, exit-code histogram, max seconds per case, peak RSS, and every
problem (traceback, exit 70, an undocumented exit code, a refusal of more than one line, --json output that is
not strict JSON, a case past 20 s), once per distinct problem with the argv that showed it. Exit 1 on any problem.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RSS_LIMIT_KIB = 2**20  # 1 GiB


def _save(where: Path, n: int, case: Any) -> str:
    """The case's argv and files, to run it again by hand: `cd DIR && vlaunch $(argv.json)`."""
    d = where / f"problem-{n}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "argv.json").write_text(json.dumps(case.argv, ensure_ascii=True))
    (d / "env.json").write_text(json.dumps(case.env))
    for name, data in case.files.items():
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        (d / name).write_bytes(data)
    return str(d)


def _child(examples: int, seed: int, out: Path, save: Path | None) -> None:
    sys.path.insert(0, str(ROOT))
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hseed
    from hypothesis import strategies as st

    from tests import fuzz_cases as F

    root = tempfile.TemporaryDirectory(prefix="vlaunch-fuzz-")
    sandbox = F.make_sandbox(Path(root.name))
    pairs = [(c, k) for c in F.COMMANDS for k in F.KINDS[c]]
    per_pair: collections.Counter[str] = collections.Counter()
    exits: collections.Counter[str] = collections.Counter()
    by_command: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    problems: dict[str, dict[str, Any]] = {}
    slowest: list[tuple[float, str]] = []
    state: dict[str, Any] = {"total": 0, "max_seconds": 0.0, "t0": time.monotonic(), "rss_jumps": [],
                             "exit70_here": 0, "exit70_elsewhere": 0}  # fmt: skip

    def one(command: str, kind: str, data: st.DataObject) -> None:
        case = data.draw(F.cases(sandbox, command, kind))
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        o = F.run_case(case, sandbox)
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        if after - before > 100 * 1024:
            state["rss_jumps"].append({"kib": after - before, "argv": case.shown()[:400]})
        state["total"] += 1
        per_pair[f"{command} {kind}"] += 1
        exits[str(o.exit_code)] += 1
        by_command[command][str(o.exit_code)] += 1
        state["max_seconds"] = max(state["max_seconds"], o.seconds)
        if o.exit_code == 70:
            state["exit70_elsewhere" if o.elsewhere else "exit70_here"] += 1
        slowest.append((o.seconds, case.shown()[:300]))
        slowest.sort(reverse=True)
        del slowest[5:]
        for p in o.problems:
            key = f"{command}: {p[:120]}" + (f" [{o.where}]" if o.where else "")
            if key not in problems and save is not None:
                problems[key] = {"count": 0, "examples": [], "saved": _save(save, len(problems), case)}
            entry = problems.setdefault(key, {"count": 0, "examples": []})
            entry["elsewhere"] = o.elsewhere
            entry["count"] += 1
            if len(entry["examples"]) < 3:
                files = {k: v[:300].decode("utf-8", "replace") for k, v in case.files.items()}
                entry["examples"].append(
                    {"kind": kind, "argv": case.shown()[:2000], "stderr": o.stderr[-1500:], "files": files}
                )
        if state["total"] % 500 == 0:
            rate = state["total"] / (time.monotonic() - state["t0"])
            print(f"{state['total']} cases, {len(problems)} distinct problems, {rate:.0f}/s", file=sys.stderr)

    def run_pair(command: str, kind: str, n: int, pair_seed: int) -> None:
        @hseed(pair_seed)
        @settings(max_examples=n, database=None, deadline=None, suppress_health_check=list(HealthCheck))
        @given(st.data())
        def body(data: st.DataObject) -> None:
            one(command, kind, data)

        body()

    rounds = 0
    while state["total"] < examples and rounds < 20:
        left = examples - state["total"]
        share = max(1, -(-left // len(pairs)))
        for i, (command, kind) in enumerate(pairs):
            run_pair(command, kind, share, seed * 1_000_003 + rounds * 1009 + i)
        rounds += 1
    summary = {
        "cases": state["total"],
        "seconds": round(time.monotonic() - state["t0"], 1),
        "per_command_and_kind": dict(sorted(per_pair.items())),
        "exit_codes": dict(sorted(exits.items(), key=lambda kv: (len(kv[0]), kv[0]))),
        "exit_codes_by_command": {c: dict(sorted(v.items())) for c, v in sorted(by_command.items())},
        "tracebacks": sum(e["count"] for k, e in problems.items() if "traceback" in k or "exception escaped" in k),
        "exit_70": exits.get("70", 0),
        "exit_70_in_code_owned_elsewhere": state["exit70_elsewhere"],
        "max_seconds_per_case": round(float(state["max_seconds"]), 3),
        "slowest": [{"seconds": round(s, 3), "argv": a} for s, a in slowest],
        "rss_jumps_over_100_mib": state["rss_jumps"][:10],
        "problems": problems,
    }
    out.write_text(json.dumps(summary, indent=1))
    root.cleanup()


def _limit(as_bytes: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (as_bytes, as_bytes))
    os.nice(10)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=int(os.environ.get("VLAUNCH_FUZZ_EXAMPLES", "20000")))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--as-gib", type=float, default=2.0, help="RLIMIT_AS of the child, GiB (virtual memory)")
    ap.add_argument("--json", dest="json_out", help="Also write the summary here.")
    ap.add_argument("--save", help="Write the argv and files of each problem's first case under this directory.")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        _child(a.examples, a.seed, Path(a.child), Path(a.save) if a.save else None)
        return 0
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "summary.json"
        argv = [sys.executable, __file__, "--child", str(out), "--examples", str(a.examples), "--seed", str(a.seed)]
        if a.save:
            argv += ["--save", str(Path(a.save).resolve())]
        limit = int(a.as_gib * 2**30)
        rc = subprocess.run(argv, preexec_fn=lambda: _limit(limit), cwd=d).returncode
        peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        if not out.exists():
            print(f"the fuzz child exited {rc} without a summary (RLIMIT_AS {a.as_gib} GiB)", file=sys.stderr)
            return 1
        summary = json.loads(out.read_text())
    summary["peak_rss_mib"] = round(peak_kib / 1024, 1)
    summary["rlimit_as_gib"] = a.as_gib
    summary["rss_within_1_gib"] = peak_kib <= RSS_LIMIT_KIB
    if a.json_out:
        Path(a.json_out).write_text(json.dumps(summary, indent=1))
    print(f"cases: {summary['cases']} in {summary['seconds']} s")
    for key, n in summary["per_command_and_kind"].items():
        print(f"  {key:<28} {n}")
    print(f"exit codes: {summary['exit_codes']}")
    for command, hist in summary["exit_codes_by_command"].items():
        print(f"  {command:<10} {hist}")
    print(f"tracebacks: {summary['tracebacks']}   exit 70: {summary['exit_70']}")
    print(f"max seconds per case: {summary['max_seconds_per_case']}")
    print(f"peak RSS: {summary['peak_rss_mib']} MiB (limit 1024; RLIMIT_AS {a.as_gib} GiB)")
    problems: dict[str, Any] = summary["problems"]
    here = {k: e for k, e in problems.items() if not e.get("elsewhere")}
    print(f"distinct problems: {len(here)}; in code owned elsewhere (reported): {len(problems) - len(here)}")
    for key, entry in sorted(problems.items(), key=lambda kv: bool(kv[1].get("elsewhere"))):
        if entry.get("elsewhere"):
            key = f"[elsewhere] {key}"
        print(f"- {key} (x{entry['count']})")
        if entry.get("saved"):
            print(f"    saved: {entry['saved']}")
        for ex in entry["examples"][:1]:
            print(f"    argv: {ex['argv'][:500]}")
            print(f"    stderr: {ex['stderr'][-400:]!r}")
    ok = not here and summary["rss_within_1_gib"] and summary["cases"] >= a.examples and rc == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
