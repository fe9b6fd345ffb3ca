"""DGX Spark vLLM commands as published (tests/fixtures/spark-recipes): every one plans, or is refused in one line
that says why; every planned one renders back to a command that reads as the same request; container wrappers keep
their own options and the image's entrypoint. tests/e2e/test_spark_recipes_oracle.py reads the rendered commands
with vLLM 0.32's own parser."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from launcher.cli import main
from launcher.vllm import interface as I
from launcher.vllm import shell
from launcher.vllm.flags import MODELLED, parse_serve_args
from launcher.vllm.versions import parse_version
from tests.serve_commands import jsonable
from tests.spark_recipes import RECIPES, plan, world

# The recipes vlaunch refuses, and why (one line each); every other recipe plans.
REFUSED: dict[str, str] = {
    # flags that only patched builds have
    "sa-exp-openai-gpt-oss-120b": "--mxfp4-backend is a flag of no vLLM release vlaunch knows",
    # a drafter (DFlash, Gemma 4's assistant) whose config.json is not on this box: the error says how to give it
    "sa-exp-qwen3.6-35b-a3b-fp8-dflash": "hf download z-lab/Qwen3.6-35B-A3B-DFlash config.json",
    "sa-exp-qwen3.6-27b-fp8-dflash-512k": "hf download z-lab/Qwen3.6-27B-DFlash config.json",
    "eugr-recipe-gemma4-31b-it-nvfp4": "hf download google/gemma-4-31B-it-assistant config.json",
    # no config.json on this box for the model (not in the Hugging Face cache, offline)
    "nv-txt2kg-vllm-nemotron-super-49b": "not in the local Hugging Face cache",
    "eugr-recipe-mistral-small-4-nvfp4": "not in the local Hugging Face cache",
    # a --quantization no vLLM release names
    "nv-nemotron-super-nvfp4": "quantization: must be a vLLM --quantization method",
    # --swap-space left vLLM in 0.18; the image's vLLM is not stated, so the newest is assumed
    "eugr-readme-gpt-oss-120b-fastsafetensors": "has no --swap-space (vLLM 0.10.0–0.17.1 has it)",
}


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return world(tmp_path_factory.mktemp("spark"))


def test_the_fixture_is_the_published_set() -> None:
    assert len(RECIPES) == 46  # 47 entries; one is a host step with no vLLM command
    assert {r["id"] for r in RECIPES} >= set(REFUSED)


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r["id"])
def test_every_recipe_plans_or_says_why(recipe: dict[str, Any], env: dict[str, str]) -> None:
    out = plan(recipe, env)
    if recipe["id"] in REFUSED:
        assert out.code == 2 and out.plan is None, out
        assert len(out.error.splitlines()) == 1 and "Traceback" not in out.error
        assert REFUSED[recipe["id"]] in out.error, out.error
        return
    assert out.code in (0, 3), out.error
    assert out.plan is not None and out.plan["vllm_argv"]
    if out.code == 3:
        assert out.plan["reasons"], "a plan that does not fit says why"


def read_back(argv: list[str], version: str) -> dict[str, Any]:
    """What the vLLM of that version reads from a launch vlaunch printed or rendered (its modelled fields)."""
    launch = shell.read(argv, {"HF_TOKEN": "x"})
    words = list(launch.args)
    if not launch.serve:  # the API server module: `--model M` first
        at = words.index("--model")
        words = [words[at + 1], *words[:at], *words[at + 2 :]]
    got = parse_serve_args(words, I.for_version(parse_version(version))).request
    return {k: v for k, v in got.items() if k in MODELLED}


def planned_request(plan_json: dict[str, Any]) -> dict[str, Any]:
    req = dict(plan_json["vllm_request"])
    if req.get("max_model_len") == "auto":
        req["max_model_len"] = -1
    if isinstance(req.get("served_model_name"), str):
        req["served_model_name"] = [req["served_model_name"]]
    return jsonable(req)  # type: ignore[return-value]


def _script_argv(text: str) -> list[str]:
    """The command of a rendered launch script (its `exec …` line, continuation lines joined)."""
    body = text.replace("\\\n", " ")
    line = next(x for x in body.splitlines() if x.startswith("exec "))
    return [w.text({}) for w in shell.split(line.removeprefix("exec ").removesuffix(' "$@"'))]


@pytest.mark.parametrize("recipe", [r for r in RECIPES if r["id"] not in REFUSED], ids=lambda r: r["id"])
def test_every_planned_recipe_renders_back_to_the_same_request(recipe: dict[str, Any], env: dict[str, str]) -> None:
    out = plan(recipe, env)
    assert out.plan is not None, out.error
    version, wanted = out.plan["vllm_version"], planned_request(out.plan)
    assert jsonable(read_back(out.plan["vllm_argv"], version)) == wanted
    r = CliRunner().invoke(main, ["render", "--as", "script", "--machine", "dgx-spark", "--", recipe["vllm_command"]],
                           env=env)  # fmt: skip
    assert r.exit_code in (0, 3), r.stderr
    assert jsonable(read_back(_script_argv(r.stdout), version)) == wanted
    r = CliRunner().invoke(main, ["render", "--as", "vllm-config", "--machine", "dgx-spark", "--",
                                  recipe["vllm_command"]], env=env)  # fmt: skip
    from launcher.report.templating import config_to_args

    mapping = yaml.safe_load(r.stdout)
    words = [str(mapping.pop("model")), *config_to_args(mapping)]
    got = parse_serve_args(words, I.for_version(parse_version(version))).request
    assert jsonable({k: v for k, v in got.items() if k in MODELLED}) == wanted


def _recipe(rid: str) -> dict[str, Any]:
    return next(r for r in RECIPES if r["id"] == rid)


def test_nvidias_image_keeps_its_entrypoint_and_the_commands_options(env: dict[str, str]) -> None:
    out = plan(_recipe("armlp-voicechatbot-mistral-7b-gptq"), env)
    assert out.plan is not None
    argv = out.plan["vllm_argv"]
    image = argv.index("nvcr.io/nvidia/vllm:26.05-py3")
    assert argv[image + 1 : image + 4] == ["vllm", "serve", "/models/mistral-7b"]  # `vllm serve` after the image
    assert "--entrypoint" not in argv  # its entrypoint turns on CUDA forward compatibility: left alone
    assert f"{Path(env['HOME'])}/models:/models" in argv  # the command's own mount, kept
    assert argv.count("--gpus") == 1
    assert out.plan["vllm_version"] == "0.20.1"  # the tag's vLLM (LATEST_VLLM_VERSION=26.05-py3)
    assert out.plan["vllm_request"]["quantization"] == "gptq"


def test_the_upstream_image_gets_the_model_after_the_image(env: dict[str, str]) -> None:
    out = plan(_recipe("nv-vllm-diffusiongemma"), env)
    assert out.plan is not None
    argv = out.plan["vllm_argv"]
    image = argv.index("vllm/vllm-openai:gemma")
    assert argv[image + 1] == "Qwen/Qwen3-8B"  # the entrypoint is `vllm serve`
    assert "--shm-size" in argv and argv[argv.index("--shm-size") + 1] == "16g"
    assert "VLLM_USE_V2_MODEL_RUNNER=1" in argv
    assert "HF_TOKEN" in argv and "hf_test_token" not in " ".join(argv)  # passed by name, never written


def test_a_gpu_pin_and_a_network_are_the_commands_own(env: dict[str, str]) -> None:
    command = ("docker run --gpus '\"device=1\"' --network bridge -p 9000:9000 --shm-size 8g -v /srv/m:/m "
               "nvcr.io/nvidia/vllm:25.11-py3 vllm serve Qwen/Qwen3-8B --port 9000")  # fmt: skip
    r = CliRunner().invoke(main, ["plan", "--machine", "dgx-spark", "--json", "--", command], env=env)
    assert r.exit_code in (0, 3), r.stderr
    import json

    argv = json.loads(r.stdout)["vllm_argv"]
    assert argv[argv.index("--gpus") + 1] == '"device=1"' and argv.count("--gpus") == 1
    assert argv[argv.index("--network") + 1] == "bridge" and argv.count("--network") == 1
    assert "9000:9000" in argv  # with its own network, its published port stays
    assert argv[argv.index("--shm-size") + 1] == "8g" and "/srv/m:/m" in argv
