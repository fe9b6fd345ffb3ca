"""Launch files rendered from templates/: a bash script, a systemd unit, a `docker run` line, vLLM's --config YAML.

Every template runs under Jinja2's StrictUndefined; each value passes through the filter its target needs
(`shq` for bash, `systemd_arg` / `systemd_env` for unit files, `oneline` for comments), so a profile value can
never break out of its quoting.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, get_args

import yaml

from launcher import __version__
from launcher.common.units import GiB
from launcher.plan.argv import (
    CONTAINER_HF_CACHE,
    DEFAULT_IMAGE,
    TEMPLATES,
    container_argv,
    container_name,
    hf_cache_mounts,
    serve_args,
)

if TYPE_CHECKING:
    from jinja2 import Environment

    from launcher.plan.planning import Plan

RenderKind = Literal["script", "systemd", "docker", "vllm-config"]
RENDER_KINDS: tuple[RenderKind, ...] = get_args(RenderKind)


def oneline(value: object) -> str:
    """Every run of characters no value may hold (chars.is_unsafe: controls and newlines, C1, format characters
    such as bidi overrides and zero-width ones, U+2028 / U+2029, surrogates, white space other than a space)
    collapsed to one space: safe inside a comment line of any rendered file."""
    from launcher.common.chars import is_unsafe

    out: list[str] = []
    for ch in str(value):
        if not is_unsafe(ch):
            out.append(ch)
        elif not out or out[-1] != " ":
            out.append(" ")
    return "".join(out).strip()


def shq(value: object) -> str:
    """A POSIX-shell-quoted word."""
    return shlex.quote(str(value))


def _systemd_escape(text: str) -> str:
    out = text.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    return out.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")


def systemd_arg(value: object) -> str:
    """One ExecStart= argument, double-quoted; `$` doubled so systemd does not expand it."""
    return '"' + _systemd_escape(str(value)).replace("$", "$$") + '"'


def systemd_env(name: str, value: object) -> str:
    """One Environment= assignment, double-quoted as a whole."""
    return '"' + _systemd_escape(f"{name}={value}") + '"'


def systemd_text(value: object) -> str:
    """A free-text value (Description=): one line, specifiers escaped."""
    return oneline(value).replace("%", "%%")


def arg_groups(argv: list[str]) -> list[list[str]]:
    """argv split into display lines: an option with the value that follows it, or a run of plain words
    (`docker run`, `IMAGE vllm serve MODEL`)."""
    out: list[list[str]] = []
    for tok in argv:
        last = out[-1] if out else None
        if last and last[0].startswith("-") and len(last) == 1 and not tok.startswith("-"):
            last.append(tok)  # the option's value
        elif last and not tok.startswith("-") and not last[0].startswith("-"):
            last.append(tok)  # another plain word: the command, its subcommand, the image, the model
        else:
            out.append([tok])
    return out


def jinja_env(*, autoescape: bool) -> Environment:
    """The template environment: templates/, StrictUndefined, the quoting filters."""
    from jinja2 import Environment, FileSystemLoader, StrictUndefined

    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        undefined=StrictUndefined,
        autoescape=autoescape,
        keep_trailing_newline=True,
    )
    env.filters.update(shq=shq, oneline=oneline, systemd_arg=systemd_arg, systemd_text=systemd_text)
    env.globals.update(systemd_env=systemd_env, groups=arg_groups)
    return env


def vllm_args(plan: Plan) -> list[str]:
    """What follows `vllm serve MODEL` for this plan."""
    return serve_args(plan.profile, plan.prediction, plan.spec, plan.stored)


def docker_argv(plan: Plan, *, hf_env: Mapping[str, str] | None = None) -> list[str]:
    """`docker run …` for the profile's vLLM image (NVIDIA's by default), whatever launch mode the profile itself
    uses; a container profile's own runtime options, entrypoint and image are kept."""
    v = plan.profile.vllm
    return container_argv(
        image=v.image or DEFAULT_IMAGE,
        mounts=hf_cache_mounts(hf_env),
        env=list(v.env),
        model=plan.served_model,
        vllm_args=vllm_args(plan),
        name=v.container_name or container_name(plan.profile.name),
        pass_env=("HF_TOKEN", *v.pass_env),
        container_args=v.container_args,
        entrypoint_serves=v.entrypoint_serves,
        runtime=v.container_runtime,
        exec_container=v.exec_container,
    )


def _scalar(text: str) -> Any:
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    if re.fullmatch(r"-?\d+\.\d+", text) and str(float(text)) == text:
        return float(text)
    return text


def config_mapping(plan: Plan) -> dict[str, Any]:
    """vLLM's `--config` mapping: `model` and the flat dashed long option names of the serve arguments.

    `--key value` → `key: value`; a bare `--key` → `key: true`; `--key v1 v2` → a list; `--key=value` is split.
    """
    out: dict[str, Any] = {"model": plan.served_model}
    args = vllm_args(plan)
    i = 0
    while i < len(args):
        tok = args[i]
        if not tok.startswith("--") or tok == "--":
            raise ValueError(f"cannot express vLLM argument {tok!r} in a --config file")
        key, eq, inline = tok[2:].partition("=")
        values: list[str] = [inline] if eq else []
        i += 1
        while not eq and i < len(args) and not args[i].startswith("--"):
            values.append(args[i])
            i += 1
        value: Any = True if not values and not eq else _scalar(values[0]) if len(values) == 1 else values
        if isinstance(value, list):
            value = [_scalar(x) for x in value]
        out[key] = value
    return out


def config_to_args(mapping: dict[str, Any]) -> list[str]:
    """What vLLM makes of a --config mapping (reference §7), `model` excluded: for tests and round trips."""
    import json

    out: list[str] = []
    for key, value in mapping.items():
        if key == "model":
            continue
        if value is True:
            out.append(f"--{key}")
        elif value is False:
            continue
        elif isinstance(value, list):
            out += [f"--{key}", *(str(x) for x in value)]
        elif isinstance(value, dict):
            out += [f"--{key}", json.dumps(value)]
        else:
            out += [f"--{key}", str(value)]
    return out


def _context(plan: Plan) -> dict[str, Any]:
    import os

    p = plan.prediction
    return {
        "version": __version__,
        "profile": plan.profile.name,
        "description": plan.profile.description,
        "model": plan.profile.model,
        "machine": plan.machine.name,
        "argv": list(plan.argv),
        "env": list(plan.env),
        "fits": plan.fits,
        "summary": (
            f"weights {p.weights_bytes / GiB:.2f} GiB, KV cache {p.kv_need_bytes / GiB:.2f} GiB, "
            f"activation {p.activation_peak_bytes / GiB:.2f} GiB, overhead {p.overhead_bytes / GiB:.2f} GiB, "
            f"OS reserve {p.os_reserve_bytes / GiB:.2f} GiB; total {p.plan_total_bytes / GiB:.2f} "
            f"of {plan.machine.total_bytes / GiB:.2f} GiB"
        ),
        "workdir": os.getcwd(),
        "container_hf_cache": CONTAINER_HF_CACHE,
    }


def render_launch(plan: Plan, kind: str) -> str:
    """One launch file for the plan: script, systemd, docker or vllm-config."""
    if kind not in RENDER_KINDS:
        raise ValueError(f"unknown render target {kind!r}; choose {', '.join(RENDER_KINDS)}")
    ctx = _context(plan)
    env = jinja_env(autoescape=False)
    if kind == "script":
        return env.get_template("launch.sh.j2").render(**ctx)
    if kind == "systemd":
        if any("\n" in a or "\r" in a for a in plan.argv):
            raise ValueError("a launch argument contains a line break")
        return env.get_template("vlaunch.service.j2").render(**ctx)
    if kind == "docker":
        return env.get_template("docker-run.sh.j2").render(**{**ctx, "argv": docker_argv(plan)})
    body = yaml.safe_dump(config_mapping(plan), sort_keys=False, allow_unicode=True, default_flow_style=False)
    return env.get_template("vllm-config.yaml.j2").render(**ctx, body=body)
