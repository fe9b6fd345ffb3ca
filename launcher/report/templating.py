"""Launch files rendered from templates/: a bash script, a systemd unit, a `docker run` line, vLLM's --config YAML.

Every template runs under Jinja2's StrictUndefined; each value passes through the filter its target needs
(`shq` for bash, `systemd_arg` / `systemd_path` for unit files, `oneline` for comments), so a profile value can
never break out of its quoting.

The systemd unit runs `vlaunch serve PROFILE` (`Unit`, built by `unit_for`), never vLLM itself: the box lock,
the pre-flight, the supervisor and the watchdog hold under systemd as they do at a terminal.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, get_args

import yaml

from launcher import __version__
from launcher.common.errors import VlaunchError
from launcher.common.records import dataclass
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


def systemd_text(value: object) -> str:
    """A free-text value (Description=): one line, specifiers escaped."""
    return oneline(value).replace("%", "%%")


def systemd_path(value: object) -> str:
    """A path value (WorkingDirectory=, EnvironmentFile=): specifiers escaped; `unit_for` refuses what else could
    break the line."""
    return str(value).replace("%", "%%")


def systemd_command(argv: Sequence[str]) -> str:
    """An Exec*= command line: every argument double-quoted (systemd_arg)."""
    return " ".join(systemd_arg(a) for a in argv)


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
    env.filters.update(
        shq=shq, oneline=oneline, systemd_arg=systemd_arg, systemd_text=systemd_text, systemd_path=systemd_path
    )
    env.globals.update(systemd_command=systemd_command, groups=arg_groups)
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


# ---- the systemd unit ---------------------------------------------------------------------------------------------

NO_RESTART: dict[int, str] = {
    2: "bad input", 3: "does not fit", 4: "another vLLM holds the box", 5: "missing executable",
    8: "machine mismatch", 10: "model refused",
}  # fmt: skip
"""`vlaunch serve`'s exit codes a restart cannot change (the README's exit codes). A multi-node profile's 5 is left
out: there it also means the other nodes are not ready yet."""
RESTART_STEPS_SINCE = 254
"""The systemd release that reads RestartSteps= and RestartMaxDelaySec= (older ones warn and ignore them)."""
ENV_DIR = "/etc/vlaunch"
"""Where a unit's environment file is by default: ENV_DIR/<profile>.env."""
_UNIT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}|\d{1,10}")  # User= / Group=: a name or a numeric id


@dataclass(frozen=True, kw_only=True)
class Unit:
    """What a systemd unit runs and how; every path in it is absolute."""

    serve: tuple[str, ...]  # ExecStart=: the vlaunch command, `serve` and its words
    workdir: str
    env_file: str  # EnvironmentFile=: secrets (HF_TOKEN) the unit never holds itself
    clean_up: tuple[str, ...] = ()  # ExecStartPre=: removes the container a killed run left (`docker rm -f NAME`)
    after: tuple[str, ...] = ()  # units started before it besides network-online.target (docker.service)
    no_restart: tuple[int, ...] = tuple(NO_RESTART)  # RestartPreventExitStatus=
    steps: bool = True  # RestartSteps= and RestartMaxDelaySec= are written (the systemd it is for reads them)
    passes: tuple[str, ...] | None = None  # a container launch: the variables it passes on; None: vLLM gets all
    user: str | None = None
    group: str | None = None
    notes: tuple[str, ...] = ()  # warnings: what the unit could not make absolute


def vlaunch_command(given: str | None = None) -> list[str]:
    """The command that starts this vlaunch, absolute: `given`; else the `vlaunch` script this process runs as;
    this python with `-m launcher` when it runs so; else `vlaunch` on PATH; else this python with `-m launcher`."""
    import launcher

    module = [os.path.abspath(sys.executable), "-m", "launcher"]
    if given:
        return [os.path.abspath(os.path.expanduser(given))]
    argv0 = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if os.path.basename(argv0) == "vlaunch" and os.path.isfile(argv0):
        return [argv0]
    package = os.path.dirname(os.path.abspath(launcher.__file__))
    if os.path.basename(argv0) == "__main__.py" and os.path.commonpath([package, argv0]) == package:
        return module
    found = shutil.which("vlaunch")
    return [os.path.abspath(found)] if found else module


def systemd_version() -> int | None:
    """The release of the systemd on this box (`systemctl --version`); None when there is none."""
    for tool in ("systemctl", "systemd-analyze"):
        exe = shutil.which(tool)
        if exe is None:
            continue
        try:
            out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=5, check=False).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        if m := re.match(r"systemd (\d+)", out):
            return int(m[1])
    return None


def _launch_program(plan: Plan) -> tuple[list[str], list[str]]:
    """(`--vllm-executable PATH` or `--python PATH` for a launch program given by a bare name, as found on PATH
    here: systemd's PATH is not the user's; the notes when it is not found)."""
    v = plan.profile.vllm
    if v.launch == "cli":
        flag, program = "--vllm-executable", v.executable
    elif v.launch == "module":
        flag, program = "--python", v.python or "python3"
    else:
        return [], []
    if "/" in program:
        return [], []  # a path: absolute, or relative to the unit's WorkingDirectory as it is to this one
    found = shutil.which(program)
    if found is None:
        return [], [f"`{program}` is not on PATH here: the unit's serve looks for it on systemd's PATH ({flag} PATH)"]
    return [flag, os.path.abspath(found)], []


def _container(plan: Plan) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(`RUNTIME rm -f NAME` for a container launch's `run --name NAME`, the runtime's service to start after)."""
    argv = plan.argv
    runtime = os.path.basename(argv[0]) if argv else ""
    if runtime not in ("docker", "podman"):
        return (), ()
    after = ("docker.service",) if runtime == "docker" else ()
    if tuple(argv[1:2]) != ("run",) or "--name" not in argv[:-1]:
        return (), after  # `exec` into a container the user runs: not the unit's to remove
    name = argv[list(argv).index("--name") + 1]
    path = argv[0] if os.path.isabs(argv[0]) else shutil.which(argv[0]) or f"/usr/bin/{runtime}"
    return (os.path.abspath(path), "rm", "-f", name), after


def _check_unit(unit: Unit) -> None:
    """Refuse, in one line, a value a unit file cannot carry as it is."""
    for what, value in (("working directory", unit.workdir), ("--env-file", unit.env_file)):
        if value != value.strip():
            raise VlaunchError(f"{what} {value!r} starts or ends with white space, which systemd drops")
    from launcher.common.chars import escaped, unsafe_char

    for word in (*unit.serve, *unit.clean_up, unit.workdir, unit.env_file):
        if (ch := unsafe_char(word)) is not None:
            raise VlaunchError(f"a unit cannot carry '{escaped(word)}': it holds {ch}")
    for what, name in (("--unit-user", unit.user), ("--unit-group", unit.group)):
        if name is not None and not _UNIT_NAME.fullmatch(name):
            raise VlaunchError(f"{what}: '{escaped(name)}' is not a user or group name, nor a numeric id")


def unit_for(
    plan: Plan,
    *,
    words: Sequence[str] = (),
    pasted: Sequence[str] = (),
    vlaunch: Sequence[str] | None = None,
    logs_dir: str | None = None,
    env_file: str | None = None,
    user: str | None = None,
    group: str | None = None,
    systemd: int | None = None,
) -> Unit:
    """The unit that serves `plan`: `vlaunch serve` with `words` (PROFILE as an absolute path and the planning
    options given; default: the plan's profile file) and the `pasted` command after `--`, the launch's program as
    found here, logs in `logs_dir` (./logs), secrets from `env_file` (ENV_DIR/<profile>.env). `systemd`: the
    release the unit is for (None: unknown, the newest keys are written)."""
    from launcher.common.redact import argv_secrets

    env_path = os.path.abspath(os.path.expanduser(env_file or f"{ENV_DIR}/{plan.profile.name}.env"))
    if argv_secrets([*words, *pasted]):
        raise VlaunchError(
            f"the command holds a secret and a unit keeps none: set it in {env_path} instead (HF_TOKEN=…; "
            "VLLM_API_KEY=… for --api-key)"
        )
    if not words and not pasted:
        source = plan.profile.source
        if not source or not os.path.isfile(source):
            raise ValueError("a unit runs `vlaunch serve PROFILE`: this plan has no profile file")
        words = [os.path.abspath(source)]
    program, notes = _launch_program(plan)
    logs = os.path.abspath(os.path.expanduser(logs_dir if logs_dir is not None else "logs"))
    serve = [*(vlaunch or vlaunch_command()), "serve", *words, *program, "--logs-dir", logs]
    clean_up, after = _container(plan)
    v = plan.profile.vllm
    unit = Unit(
        serve=(*serve, *(("--", *pasted) if pasted else ())),
        workdir=os.getcwd(),
        env_file=env_path,
        clean_up=clean_up,
        after=after,
        no_restart=tuple(c for c in NO_RESTART if not (c == 5 and plan.profile.nodes)),
        steps=systemd is None or systemd >= RESTART_STEPS_SINCE,
        passes=tuple(dict.fromkeys(("HF_TOKEN", *v.pass_env))) if v.launch == "container" else None,
        user=user,
        group=group,
        notes=tuple(notes),
    )
    _check_unit(unit)
    return unit


def render_launch(plan: Plan, kind: str, unit: Unit | None = None) -> str:
    """One launch file for the plan: script, systemd (`unit`: what it runs; default `unit_for(plan)`), docker or
    vllm-config."""
    if kind not in RENDER_KINDS:
        raise ValueError(f"unknown render target {kind!r}; choose {', '.join(RENDER_KINDS)}")
    ctx = _context(plan)
    env = jinja_env(autoescape=False)
    if kind == "script":
        return env.get_template("launch.sh.j2").render(**ctx)
    if kind == "systemd":
        unit = unit or unit_for(plan)
        return env.get_template("vlaunch.service.j2").render(**ctx, unit=unit, meanings=NO_RESTART)
    if kind == "docker":
        return env.get_template("docker-run.sh.j2").render(**{**ctx, "argv": docker_argv(plan)})
    body = yaml.safe_dump(config_mapping(plan), sort_keys=False, allow_unicode=True, default_flow_style=False)
    return env.get_template("vllm-config.yaml.j2").render(**ctx, body=body)
