"""The DGX Spark vLLM launches of tests/fixtures/spark-recipes (NVIDIA's playbooks, community recipes), set up as a
user's box would have them: each recipe's model in a Hugging Face cache of its own (the checkpoint's config.json, or
a stand-in of the same architecture: stand-ins.yaml), the recipes' shell variables in the environment, the folders
their containers mount. Shared by tests/test_spark_recipes.py and the e2e check against vLLM's own parser.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from launcher.cli import main

FIXTURES = Path(__file__).resolve().parent / "fixtures"
RECIPES_DIR = FIXTURES / "spark-recipes"
RECIPES: list[dict[str, Any]] = [
    r
    for r in yaml.safe_load((RECIPES_DIR / "recipes.yaml").read_text(encoding="utf-8"))["recipes"]
    if r.get("vllm_command")
]
SETUP: dict[str, Any] = yaml.safe_load((RECIPES_DIR / "stand-ins.yaml").read_text(encoding="utf-8"))


def _install(config: Path, into: Path) -> None:
    into.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(config, into / "config.json")
    side = config.with_name(config.name.removesuffix(".json") + ".hf_quant_config.json")
    if side.is_file():
        shutil.copyfile(side, into / "hf_quant_config.json")


def world(root: Path) -> dict[str, str]:
    """The environment of a Spark that has every recipe's model: a Hugging Face cache, $HOME/models/mistral-7b
    (mounted by the Arm learning path's command at /models), $WEIGHTS (mounted by NVIDIA's Nemotron Omni at /model)."""
    hub = root / "hf" / "hub"
    for repo, rel in SETUP["stand_ins"].items():
        folder = hub / f"models--{repo.replace('/', '--')}"
        _install(FIXTURES / rel, folder / "snapshots" / "0")
        (folder / "refs").mkdir(exist_ok=True)
        (folder / "refs" / "main").write_text("0")
    _install(FIXTURES / "configs" / "Trurl-2-7B-GPTQ-TheBloke.json", root / "home" / "models" / "mistral-7b")
    _install(FIXTURES / "configs-v2" / "extra" / "nemotron_h--nemotron-3-nano-30b-a3b.json", root / "weights")
    env = {k: str(v) for k, v in SETUP["environment"].items()}
    env.update(WEIGHTS=str(root / "weights"), HOME=str(root / "home"), HF_HOME=str(root / "hf"),
               HF_HUB_CACHE=str(hub), HF_HUB_OFFLINE="1", XDG_CACHE_HOME=str(root / "cache"),
               XDG_CONFIG_HOME=str(root / "config"))  # fmt: skip
    return env


@dataclass
class Outcome:
    code: int
    plan: dict[str, Any] | None  # the plan's JSON (exit 0 or 3)
    error: str  # the one line of a refusal


def plan(recipe: dict[str, Any], env: dict[str, str], *extra: str) -> Outcome:
    """`vlaunch plan --machine dgx-spark --json -- <the recipe's command, as published>`."""
    r = CliRunner().invoke(main, ["plan", "--machine", "dgx-spark", "--json", *extra, "--", recipe["vllm_command"]],
                           env=env)  # fmt: skip
    data = json.loads(r.stdout) if r.exit_code in (0, 3) and r.stdout.strip() else None
    return Outcome(r.exit_code, data, r.stderr.strip())
