"""The plan is the launch: what `plan` prints, what `render` writes in every `--as` form and what `serve` starts,
read back the way the vLLM of the plan reads a command, equal the plan's request, field by field. Here the reader
is vlaunch's own parser over that release's option table; tests/e2e/test_plan_is_launch_oracle.py asks vLLM 0.32."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings

from launcher.cli import main
from launcher.common.errors import VlaunchError
from launcher.plan.planning import make_plan
from launcher.plan.profiles import profile_from_mapping
from launcher.vllm import interface as I
from launcher.vllm.flags import MODELLED, parse_serve_args
from tests.plan_launch import every_command, launch_words, planned, profiles
from tests.serve_commands import jsonable


def read(words: list[str], version: tuple[int, int, int]) -> dict[str, Any]:
    got = parse_serve_args(words, I.for_version(version)).request
    return jsonable({k: v for k, v in got.items() if k in MODELLED})  # type: ignore[return-value]


def same_request(got: dict[str, Any], plan_request: dict[str, Any]) -> None:
    """Every field the plan sets reads back as planned; nothing else is set."""
    assert got == {k: v for k, v in plan_request.items() if k in MODELLED}


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=profiles())
def test_every_form_of_the_launch_is_the_plans_request(data: dict[str, Any]) -> None:
    try:
        plan = make_plan(profile_from_mapping(data), live=False)
    except VlaunchError:
        return  # a profile vlaunch refuses (one line) launches nothing
    version = plan.prediction.args.version
    want = planned(plan)
    for form, words in every_command(plan).items():
        assert read(words, version) == {k: v for k, v in want.items() if k in MODELLED}, form


def test_serve_starts_what_plan_prints() -> None:
    tiny = str(Path(__file__).parent / "fixtures" / "tiny-llama" / "config.json")  # no built tiny model needed
    for name, more in (("llama8b-32k", []), ("qwen3-8b-pip", []), ("tiny-cpu", ["--hf-config-path", tiny])):
        same = ["--free-gib", "100", "--json", *more]  # serve reads what is free now; both plan with the same figure
        r = CliRunner().invoke(main, ["plan", name, *same], env={"HF_HUB_OFFLINE": "1"})
        s = CliRunner().invoke(main, ["serve", name, "--dry-run", "--skip-preflight", *same],
                               env={"HF_HUB_OFFLINE": "1"})  # fmt: skip
        assert r.exit_code in (0, 3) and s.exit_code == r.exit_code, (r.output, s.output)
        plan, dry = json.loads(r.stdout), json.loads(s.stdout)
        assert dry["argv"] == plan["vllm_argv"]
        version = tuple(int(x) for x in plan["vllm_version"].split("."))
        got = read(launch_words(dry["argv"]), version)  # type: ignore[arg-type]
        want = {k: v for k, v in plan["vllm_request"].items() if k in MODELLED}
        same_request(got, jsonable(want))  # type: ignore[arg-type]
