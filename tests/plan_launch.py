"""Profiles of every shape a user writes, and the commands a plan of one becomes: what `plan` prints, what `render`
writes in each `--as` form that holds vLLM's command (a systemd unit runs `vlaunch serve PROFILE` instead), what
`serve` starts. Shared by tests/test_plan_is_launch.py (read back with vlaunch's parser) and the e2e check with
vLLM's own."""

from __future__ import annotations

from typing import Any

import yaml
from hypothesis import strategies as st

from launcher.plan.planning import Plan
from launcher.report.templating import config_to_args, render_launch
from launcher.vllm import shell

MODEL = "meta-llama/Llama-3.1-8B-Instruct"  # its config ships with vlaunch
VERSIONS = ["0.20.1", "0.24.0", "0.32.0", "0.33.0"]


@st.composite
def profiles(draw: st.DrawFn) -> dict[str, Any]:
    """A profile mapping, as YAML would hold it."""
    p: dict[str, Any] = {
        "model": MODEL,
        "name": "prop",
        "machine": draw(st.sampled_from(["dgx-spark", "h100", "rtx4090"])),
    }
    optional: dict[str, st.SearchStrategy[Any]] = {
        "max_model_len": st.sampled_from([2048, 8192, "32k", "auto"]),
        "users": st.integers(1, 8),
        "gpu_memory_utilization": st.sampled_from(["auto", 0.5, 0.825, 0.9]),
        "kv_cache_dtype": st.sampled_from(["auto", "fp8", "fp8_e4m3"]),
        "dtype": st.sampled_from(["auto", "bfloat16", "float16"]),
        "max_num_seqs": st.sampled_from([8, 64, 256]),
        "max_num_batched_tokens": st.sampled_from([2048, 8192]),
        "enforce_eager": st.booleans(),
        "block_size": st.sampled_from([16, 32]),
        "enable_prefix_caching": st.sampled_from([True, False]),
        "quantization": st.sampled_from(["fp8"]),
        "speculative_config": st.sampled_from(
            [{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 4}]
        ),
        "limit_mm_per_prompt": st.sampled_from([{"image": 0}]),
    }
    for key in draw(st.lists(st.sampled_from(sorted(optional)), unique=True, max_size=6)):
        p[key] = draw(optional[key])
    p["vllm"] = draw(_vllm_section())
    return p


@st.composite
def _vllm_section(draw: st.DrawFn) -> dict[str, Any]:
    v: dict[str, Any] = {"version": draw(st.sampled_from(VERSIONS))}
    launch = draw(st.sampled_from(["cli", "module", "container-ngc", "container-openai"]))
    if launch == "module":
        v.update(launch="module", python="/opt/venv/bin/python")
    elif launch.startswith("container"):
        image = "nvcr.io/nvidia/vllm:26.05-py3" if launch.endswith("ngc") else "vllm/vllm-openai:v0.32.0"
        v.update(launch="container", image=image)
        if draw(st.booleans()):
            v["container_args"] = ["--gpus", '"device=1"', "--shm-size", "16g", "-v", "/srv/models:/models"]
    if draw(st.booleans()):
        v["host"], v["port"] = "0.0.0.0", draw(st.sampled_from([8000, 9001]))
    if draw(st.booleans()):
        v["served_model_name"] = draw(st.sampled_from(["llama", ["llama", "default"]]))
    if draw(st.booleans()):
        v["extra_args"] = draw(
            st.sampled_from([["--trust-remote-code"], ["--seed", "3"], ["-O3", "--load-format", "auto"]])
        )
    return v


def script_argv(text: str) -> list[str]:
    """The command of a rendered launch script (its `exec …` line, continuation lines joined)."""
    line = next(x for x in text.replace("\\\n", " ").splitlines() if x.startswith("exec "))
    return [w.text({}) for w in shell.split(line.removeprefix("exec ").removesuffix(' "$@"'))]


def systemd_argv(text: str, key: str = "ExecStart") -> list[str]:
    """`key`= of a rendered unit (ExecStart, ExecStartPre): each argument double-quoted, with `\\` `\"` escapes,
    `%%` and `$$`."""
    import re

    line = next(x for x in text.replace("\\\n", " ").splitlines() if x.startswith(key + "="))
    words = re.findall(r'"((?:[^"\\]|\\.)*)"', line)
    return [re.sub(r"\\(.)", r"\1", w).replace("%%", "%").replace("$$", "$") for w in words]


def launch_words(argv: list[str]) -> list[str]:
    """The words vLLM's serve parser reads from a launch: the model first, then the options."""
    launch = shell.read(argv, {"HF_TOKEN": "x"})
    words = list(launch.args)
    if not launch.serve:
        at = words.index("--model")
        words = [words[at + 1], *words[:at], *words[at + 2 :]]
    return words


def every_command(plan: Plan) -> dict[str, list[str]]:
    """What the plan prints, and what each `render --as` form that holds vLLM's command writes, as the words vLLM
    reads."""
    out = {"plan": launch_words(list(plan.argv))}
    out["script"] = launch_words(script_argv(render_launch(plan, "script")))
    docker = "\n".join(x for x in render_launch(plan, "docker").splitlines() if not x.startswith("#"))
    out["docker"] = launch_words(script_argv("exec " + docker.strip()))
    mapping = yaml.safe_load(render_launch(plan, "vllm-config"))
    out["vllm-config"] = [str(mapping.pop("model")), *config_to_args(mapping)]
    return out


def planned(plan: Plan) -> dict[str, Any]:
    """The plan's request as vLLM's parser leaves the same values (auto is -1; names are a list)."""
    from tests.serve_commands import jsonable

    req = dict(plan.request)
    if req.get("max_model_len") == "auto":
        req["max_model_len"] = -1
    if isinstance(req.get("served_model_name"), str):
        req["served_model_name"] = [req["served_model_name"]]
    return jsonable(req)  # type: ignore[return-value]
