"""Predicted vs logged, term by term, on a real NVIDIA GPU: a small model booted by real vLLM at a few
utilizations and tensor-parallel sizes, and one launch that must fail on the sampler warm-up.

    python bench/gpu_terms.py [--model Qwen/Qwen3-0.6B] [--vllm vllm] [--utils 0.5,0.8] [--tp 1,2] [--out DIR]
    python bench/gpu_terms.py --dry-run        # the launches and their predictions, without starting vLLM

Each launch goes through `vlaunch serve` (its lock, supervisor and log reader) with --stop-after-ready; its log
is read back and every term the log states is set beside the plan's: weights ("Model loading took"), non-torch
memory, activation peak, CUDA-graph estimate and capture, available KV, pool tokens and concurrency. TP sizes the
box has no GPUs for are skipped. The failing launch asks for a KV cache (--kv-cache-memory-bytes) that leaves the
sampler warm-up too little room after the pool (--enforce-eager: no graphs before it, --max-num-seqs 1024); the
plan must refuse it and the log must name the warm-up. Output: a table on stdout and DIR/gpu_terms.json. On one
H100 / H200 the whole run takes about 5 minutes (model download excluded).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from launcher.check.stream import parse_stream  # noqa: E402
from launcher.common.units import GiB  # noqa: E402
from launcher.plan.planning import Plan, make_plan, profile_from_flags  # noqa: E402
from launcher.plan.profiles import profile_yaml  # noqa: E402

# (row name, the plan's figure in bytes or tokens, the log's fact, its unit)
TERMS: tuple[tuple[str, str, str, str], ...] = (
    ("weights", "weights_bytes", "model_loading_gib", "GiB"),
    ("non_torch", "non_torch_bytes", "non_torch_gib", "GiB"),
    ("activation_peak", "activation_peak_bytes", "activation_gib", "GiB"),
    ("cuda_graphs (estimate)", "cudagraph_bytes", "cudagraph_estimate_gib", "GiB"),
    ("cuda_graphs (captured)", "cudagraph_bytes", "cudagraph_gib", "GiB"),
    ("available_kv", "available_kv_bytes", "available_kv_gib", "GiB"),
    ("kv_pool_tokens", "kv_pool_tokens", "kv_pool_tokens", "tokens"),
    ("max_concurrency", "max_concurrency", "max_concurrency", "x"),
)


def gpu_count() -> int:
    """NVIDIA GPUs on this box (nvidia-smi), 0 without."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30, check=False).stdout
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def launches(args: argparse.Namespace, gpus: int) -> list[dict[str, Any]]:
    """The launches: every utilization × TP size the box has GPUs for, then the one that must fail."""
    out = []
    for tp in (int(x) for x in args.tp.split(",")):
        if tp > max(gpus, 1) and not args.dry_run:
            continue
        for util in (float(x) for x in args.utils.split(",")):
            out.append({"name": f"util{util}-tp{tp}", "gpu_memory_utilization": util, "tensor_parallel_size": tp})
    out.append({"name": "sampler-warmup-oom", "enforce_eager": True, "max_num_seqs": 1024, "must_fail": True})
    return out


def plan_of(args: argparse.Namespace, launch: dict[str, Any], machine: str) -> Plan:
    fields = {k: v for k, v in launch.items() if k not in ("name", "must_fail")}
    fields |= {"machine": machine, "max_model_len": args.max_model_len}
    if args.gpu_memory_gib:
        fields["gpu_memory_gib"] = args.gpu_memory_gib
    p = profile_from_flags(args.model, None, **fields)
    p = p.with_overrides(vllm={"executable": args.vllm, "port": args.port}, name=f"gpu-terms-{launch['name']}")
    plan = make_plan(p, detect=True)
    if launch.get("must_fail"):
        plan = make_plan(p.with_overrides(kv_cache_memory_bytes=_starving_kv(plan)), detect=True)
    return plan


def _starving_kv(plan: Plan) -> int:
    """A KV cache that leaves the sampler warm-up half of what it needs once the pool is allocated: the memory
    vLLM sees minus weights, non-torch, the CUDA context and half the warm-up's peak."""
    p = plan.prediction
    room = p.total_bytes - p.weights_bytes - p.non_torch_bytes - p.context_bytes
    return max(1 << 30, room - p.activation.sampler // 2)


def rows(predicted: dict[str, Any], facts: Any) -> list[dict[str, Any]]:
    """Each term: the plan's figure (from its --json), the log's, and the difference."""
    out = []
    for name, plan_key, fact_key, unit in TERMS:
        mine = predicted.get(plan_key)
        theirs = getattr(facts, fact_key, None) if facts is not None else None
        if unit == "GiB" and mine is not None:
            mine = round(mine / GiB, 3)
        delta = None if mine is None or theirs is None else round(mine - theirs, 3)
        out.append({"term": name, "predicted": mine, "logged": theirs, "delta": delta, "unit": unit})
    return out


def planned(name: str, plan: Plan, facts: Any = None) -> dict[str, Any]:
    """A launch's plan as the result reports it, its terms beside the log's facts when there is a log."""
    d = plan.to_json()
    return {"launch": name, "planned_fits": plan.fits, "planned_failure": d["failure"], "reasons": d["reasons"],
            "post_pool": d["post_pool"], "terms": rows(d, facts)}  # fmt: skip


def run_one(args: argparse.Namespace, launch: dict[str, Any], plan: Plan, logs: Path) -> dict[str, Any]:
    """Boot it through `vlaunch serve --stop-after-ready`; the log read back and set beside the plan."""
    profile = logs / f"{launch['name']}.yaml"
    profile.write_text(profile_yaml(plan.profile))
    argv = [sys.executable, "-m", "launcher", "serve", str(profile), "--stop-after-ready", "--logs-dir", str(logs),
            "--force"]  # fmt: skip
    t0 = time.monotonic()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=args.timeout, check=False)
    [log] = sorted(logs.glob(f"gpu-terms-{launch['name']}-*.log"))[-1:] or [None]
    facts = None
    if log is not None:
        with log.open("rb") as fh:
            facts = parse_stream(fh)
    failure = facts.failure.kind if facts is not None and facts.failure is not None else None
    ran = {"exit": done.returncode, "seconds": round(time.monotonic() - t0, 1), "logged_failure": failure,
           "log": str(log) if log else None}  # fmt: skip
    return planned(launch["name"], plan, facts) | ran


def show(result: dict[str, Any]) -> None:
    ran = "exit" in result
    said = (f"failed: {result['logged_failure']}" if result.get("logged_failure") else "served") if ran else "not run"
    planned = "fits" if result["planned_fits"] else result["planned_failure"]
    print(f"\n{result['launch']}: planned {planned}; vLLM {said}")
    for reason in result.get("reasons", []):
        print(f"  planned: {reason}")
    for r in result["terms"]:
        if r["predicted"] is None and r["logged"] is None:
            continue
        print(f"  {r['term']:<24} {r['predicted']!s:>12} {r['logged']!s:>12} {r['delta']!s:>10} {r['unit']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="Qwen/Qwen3-0.6B")
    ap.add_argument("--vllm", default="vllm", help="the vllm executable to launch")
    ap.add_argument("--utils", default="0.5,0.8")
    ap.add_argument("--tp", default="1,2")
    ap.add_argument("--max-model-len", type=int, default=8192)
    ap.add_argument("--port", type=int, default=8177)
    ap.add_argument("--gpu-memory-gib", type=float, default=None, help="the GPU's total, for --dry-run off a GPU")
    ap.add_argument("--machine", default="auto")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per launch")
    ap.add_argument("--out", type=Path, default=ROOT / "logs" / "gpu_terms")
    ap.add_argument("--dry-run", action="store_true", help="plan every launch; start nothing")
    args = ap.parse_args(argv)
    gpus = gpu_count()
    if not gpus and not args.dry_run:
        print("no NVIDIA GPU here (nvidia-smi -L lists none): --dry-run plans the launches without one")
        return 2
    machine = args.machine if args.machine != "auto" or gpus else "h100-80gb"  # a dry run off a GPU: an H100
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for launch in launches(args, gpus):
        plan = plan_of(args, launch, machine)
        result = planned(launch["name"], plan) if args.dry_run else run_one(args, launch, plan, args.out)
        results.append(result)
        show(result)
    (args.out / "gpu_terms.json").write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
