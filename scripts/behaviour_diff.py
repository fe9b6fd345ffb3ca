"""Behaviour before and after a change: the CLI's outputs over a fixed corpus, diffed against a commit.

    python scripts/behaviour_diff.py --against COMMIT      # check out COMMIT in a temporary worktree, snapshot
                                                           # both trees, print the differences (exit 1 if any)
    python scripts/behaviour_diff.py --snapshot DIR        # only write this tree's snapshot to DIR

The corpus: `count --json` over every fixture config (tests/fixtures/configs, configs-v2/configs and
configs-v2/extra); `plan --json` over every bundled profile on four machines and over fixed flag sets;
`fit --json` over a set of models and goals; `check --json` over every fixture log; `render` of every
bundled profile in every form. Each case runs in-process through click's CliRunner (one process per tree),
with HOME, XDG and Hugging Face caches pointed at an empty directory and the network off, so that nothing of
this box (calibrations, caches) enters. Paths of the tree are written as <ROOT>, so two trees compare.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MACHINES = ("dgx-spark", "h100-80gb", "rtx4090", "a100-40gb")
LLAMA = "tests/fixtures/configs/Llama-3.1-8B.json"
V2 = "tests/fixtures/configs-v2/configs"
FLAG_SETS: tuple[tuple[str, ...], ...] = (
    ("--machine", "dgx-spark"),
    ("--machine", "dgx-spark", "--max-model-len", "131072", "--users", "4"),
    ("--machine", "h100-80gb", "-q", "fp8", "--kv-cache-dtype", "fp8"),
    ("--machine", "rtx4090", "--enforce-eager", "--max-num-seqs", "8", "--max-model-len", "8192"),
    ("--machine", "a100-80gb", "-tp", "2", "--max-num-batched-tokens", "4096"),
    ("--machine", "dgx-spark", "--gpu-memory-utilization", "0.5", "--block-size", "32"),
    ("--machine", "dgx-spark", "--kv-cache-memory", "8GiB"),
    ("--machine", "dgx-spark", "--os-reserve-gib", "20", "--biggest-pool"),
    ("--machine", "cuda", "--gpu-memory-gib", "48", "--vllm-version", "0.11.0"),
    ("--machine", "dgx-spark", "--vllm-version", "0.34.0", "--no-enable-prefix-caching"),
)
PLAN_MODELS = (
    LLAMA,
    "tests/fixtures/configs/Qwen3-30B-A3B.json",
    "tests/fixtures/configs/DeepSeek-V3.json",
    "tests/fixtures/configs/gpt-oss-120b.json",
    f"{V2}/qwen3_next--default.json",
    f"{V2}/nemotron_h--default.json",
    f"{V2}/qwen3_5_moe--default.json",
    "tests/fixtures/configs/gemma-3-27b-it.json",
    "tests/fixtures/configs/Mixtral-8x7B-v0.1.json",
)
FIT_CASES: tuple[tuple[str, ...], ...] = (
    (LLAMA, "--machine", "dgx-spark"),
    (LLAMA, "--machine", "rtx4090", "--context", "32k", "--users", "4"),
    ("tests/fixtures/configs/Qwen3-30B-A3B.json", "--machine", "dgx-spark", "--compare", "h100-80gb,rtx5090"),
    ("tests/fixtures/configs/gpt-oss-120b.json", "--machine", "dgx-spark", "--max-nodes", "2", "--all"),
    (f"{V2}/qwen3_next--default.json", "--machine", "h100-80gb", "--gpus", "4"),
    (f"{V2}/nemotron_h--default.json", "--machine", "dgx-spark", "--context", "128k"),
)
RENDER_FORMS = ("script", "systemd", "docker", "vllm-config")


def cases() -> list[tuple[str, list[str]]]:
    """(name, argv) for every case, in a fixed order."""
    out: list[tuple[str, list[str]]] = []
    configs = sorted((ROOT / "tests/fixtures/configs").glob("*.json"))
    configs += sorted((ROOT / "tests/fixtures/configs-v2/configs").glob("*.json"))
    configs += sorted((ROOT / "tests/fixtures/configs-v2/extra").glob("*.json"))
    for c in configs:
        rel = str(c.relative_to(ROOT))
        out.append((f"count {rel}", ["count", rel, "--json"]))
    profiles = sorted(p.stem for p in (ROOT / "profiles").glob("*.yaml"))
    for p in profiles:
        for m in MACHINES:
            out.append((f"plan {p} {m}", ["plan", p, "--machine", m, "--json", "--no-calibration"]))
        for form in RENDER_FORMS:
            argv = ["render", p, "--as", form, "--machine", "dgx-spark", "--no-calibration"]
            out.append((f"render {p} {form}", argv))  # a profile's own machine may be this box (cpu): not fixed
    for model in PLAN_MODELS:
        for i, flags in enumerate(FLAG_SETS):
            argv = ["plan", "--hf-config-path", model, "--model", Path(model).stem, *flags, "--json"]
            out.append((f"plan {Path(model).stem} flags{i}", [*argv, "--no-calibration"]))
    for i, (model, *flags) in enumerate(FIT_CASES):
        out.append((f"fit {i} {Path(model).stem}", ["fit", model, *flags, "--json", "--no-calibration"]))
    logs = sorted((ROOT / "tests/fixtures/logs").rglob("*.log"))
    for log in logs:
        rel = str(log.relative_to(ROOT))
        out.append((f"check {rel}", ["check", rel, "--json"]))
    return out


def snapshot(dest: Path) -> int:
    """Run every case in this tree (in-process) and write one file per case to `dest`; return the count."""
    home = Path(tempfile.mkdtemp(prefix="vlaunch-behaviour-home-"))
    os.environ.update(
        HOME=str(home), XDG_CACHE_HOME=str(home / "cache"), XDG_CONFIG_HOME=str(home / "config"),
        XDG_DATA_HOME=str(home / "data"), XDG_STATE_HOME=str(home / "state"), HF_HOME=str(home / "hf"),
        HF_HUB_OFFLINE="1", VLAUNCH_OFFLINE="1", COLUMNS="120", TZ="UTC",
    )  # fmt: skip
    for key in [k for k in os.environ if k.startswith("VLAUNCH_") and k != "VLAUNCH_OFFLINE"]:
        del os.environ[key]
    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT))
    from click.testing import CliRunner

    from launcher.cli import main

    dest.mkdir(parents=True, exist_ok=True)
    todo = cases()
    for i, (name, argv) in enumerate(todo):
        r = CliRunner().invoke(main, argv, catch_exceptions=True)
        text = f"# {name}\n$ vlaunch {' '.join(argv)}\nexit {r.exit_code}\n{r.output}"
        if r.exception is not None and not isinstance(r.exception, SystemExit):
            text += f"\nexception {type(r.exception).__name__}: {r.exception}\n"
        text = text.replace(str(ROOT), "<ROOT>").replace(str(home), "<HOME>")
        if argv[0] == "fit":  # the search's own wall time is the only figure that moves between runs
            text = re.sub(r'"seconds": [0-9.e-]+', '"seconds": <wall time>', text)
        (dest / f"{i:04d}.txt").write_text(text)
    return len(todo)


def compare(old: Path, new: Path) -> int:
    """Print a unified diff per differing case; return how many differ."""
    differ = 0
    for a in sorted(old.glob("*.txt")):
        b = new / a.name
        x, y = a.read_text(), (b.read_text() if b.exists() else "")
        if x != y:
            differ += 1
            sys.stdout.writelines(difflib.unified_diff(x.splitlines(True), y.splitlines(True), str(a), str(b), n=2))
    extra = len(list(new.glob("*.txt"))) - len(list(old.glob("*.txt")))
    if extra:
        differ += abs(extra)
        print(f"case count differs by {extra}")
    return differ


def against(commit: str) -> int:
    """Snapshot COMMIT (a temporary worktree, this script's case list) and this tree; diff them."""
    work = Path(tempfile.mkdtemp(prefix="vlaunch-behaviour-"))
    tree = work / "tree"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(tree), commit], check=True)
    try:
        script = tree / "scripts" / "behaviour_diff.py"
        script.parent.mkdir(exist_ok=True)
        script.write_text(Path(__file__).read_text())  # the same corpus on both sides
        for built in (".cache", ".venv-vllm"):  # git-ignored things profiles name (tiny-cpu's model and python)
            if (ROOT / built).exists():
                (tree / built).symlink_to(ROOT / built)
        for side, root in (("old", tree), ("new", ROOT)):
            run = [sys.executable, str(root / "scripts" / "behaviour_diff.py"), "--snapshot", str(work / side)]
            subprocess.run(run, check=True, cwd=root, env={**os.environ, "PYTHONPATH": str(root)})
        differ = compare(work / "old", work / "new")
        total = len(list((work / "old").glob("*.txt")))
        sha = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True)
        print(f"{total} cases against {sha.stdout.strip()}: {differ} differ")
        return 1 if differ else 0
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--against", metavar="COMMIT", help="diff this tree's behaviour against COMMIT's")
    g.add_argument("--snapshot", metavar="DIR", type=Path, help="write this tree's outputs to DIR")
    args = ap.parse_args()
    if args.snapshot:
        n = snapshot(args.snapshot)
        print(f"{n} cases written to {args.snapshot}", file=sys.stderr)
        return 0
    return against(args.against)


if __name__ == "__main__":
    raise SystemExit(main())
