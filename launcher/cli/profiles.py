"""`vlaunch profiles`: the profiles `plan` and `serve` take by name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from launcher.cli.options import json_option
from launcher.cli.output import emit_json
from launcher.common.errors import VlaunchError


@click.command()
@json_option
@click.option(
    "--default",
    "default",
    is_flag=True,
    help="Print only the name of the bundled profile for this machine (what `make serve` starts): "
    "llama8b-32k on a DGX Spark, tiny-cpu without an NVIDIA GPU, qwen3-8b-pip on another GPU.",
)
def profiles(as_json: bool, default: bool) -> None:
    """List the profiles `plan PROFILE` and `serve PROFILE` take by name: ./profiles/*.yaml, then yours
    ($XDG_CONFIG_HOME/vlaunch/profiles, where `vlaunch demo` writes), then the bundled ones."""
    if default:
        _show_default(as_json)
        return
    rows = _profile_rows()
    if as_json:
        emit_json({"profiles": rows})
        return
    width = max((len(str(r["name"])) for r in rows), default=4)
    for r in rows:
        note = f" (shadowed by the {r['shadowed_by']} one)" if r["shadowed"] else ""
        click.echo(f"{r['name']:<{width}}  {r['source']:<7}  {r['machine']:<9}  {r['model']}{note}")


def _show_default(as_json: bool) -> None:
    """The name of the bundled profile for this machine."""
    from launcher.plan.machines import detect
    from launcher.plan.profiles import default_profile_name

    here, _ = detect()
    name = default_profile_name(here.name)
    if as_json:
        emit_json({"default": name, "machine": here.name})
    else:
        click.echo(name)


def _profile_rows() -> list[dict[str, Any]]:
    """./profiles/*.yaml, the user's, then the bundled ones: a profile shadows one of its name further down."""
    from launcher.plan.profiles import BUNDLED_PROFILES, available_profiles, load_profile, user_profiles_dir

    rows: list[dict[str, Any]] = []
    seen: dict[str, Path] = {}
    by: dict[str, str] = {}
    for where, d in (("local", Path.cwd() / "profiles"), ("user", user_profiles_dir()), ("bundled", BUNDLED_PROFILES)):
        for name in available_profiles(d):
            path = d / f"{name}.yaml"
            if seen.get(name) == path.resolve():
                continue  # run from the repository: ./profiles is the bundled directory itself
            model, machine, desc = "", "", ""
            try:
                p = load_profile(path)
                model, machine, desc = p.model, str(p.machine), p.description
            except VlaunchError as e:
                desc = f"invalid: {e.one_line()}"
            rows.append({"name": name, "source": where, "path": str(path), "model": model, "machine": machine,
                         "description": desc, "shadowed": name in seen, "shadowed_by": by.get(name)})  # fmt: skip
            seen.setdefault(name, path.resolve())
            by.setdefault(name, where)
    return rows
