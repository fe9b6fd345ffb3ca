"""`vlaunch report`: the memory picture of a run record or a vLLM log as one HTML page."""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Any

import click

from launcher.cli.check import plan_for_log
from launcher.cli.options import FORCE_HELP, plan_options
from launcher.cli.output import emit_json, inputs_of, write_text
from launcher.common.errors import VlaunchError


@click.command()
@click.argument("source", metavar="RUN.json|LOG")
@click.option("--html", "html_path", metavar="FILE", required=True, help="Where to write the HTML page.")
@click.option("--profile", "profile", metavar="PROFILE", help="For a LOG: compare against this profile's plan.")
@click.option("--force", is_flag=True, help=FORCE_HELP)
@plan_options
def report(
    source: str,
    html_path: str,
    profile: str | None,
    force: bool,
    as_json: bool,
    free_gib: float | None,
    no_calibration: bool,
    **flags: Any,
) -> None:
    """Write the memory picture for a run record or a vLLM log as one self-contained HTML page.

    RUN.json (written by `vlaunch serve` in logs/): the predicted bar and predicted vs logged per bucket.
    LOG: read like `vlaunch check LOG`; --profile or --config/--model give the plan, the log's own flags the
    rest. Exit 0 written, 1 the log shows a failure (the page is written all the same), 2 bad input.
    """
    from launcher.report.html import render_html

    record = _read_run_record(source)
    plan_ = None
    if record is not None:
        predicted, diff, logged, description = _from_record(record, profile)
    else:
        plan_, predicted, diff, logged = _from_log(source, profile, flags, free_gib, not no_calibration)
        description = plan_.profile.description
    data = _page_data(source, predicted, description, diff, logged)
    read = [source, *(str(record[k]) for k in ("log", "profile_path") if record and isinstance(record.get(k), str))]
    read += _report_inputs(profile, flags, plan_)
    write_text(html_path, render_html(data), inputs=read, force=force)
    if as_json:
        emit_json({"html": html_path, **data})
    else:
        click.echo(f"html: {html_path}")
    if logged and logged.get("failure"):
        sys.exit(1)


def _read_run_record(path: str) -> dict[str, Any] | None:
    """The run record at PATH, or None when PATH is not JSON (then it is read as a vLLM log)."""
    from launcher.common.files import open_regular, read_small

    with open_regular(path) as fh:
        head = fh.read(4096).lstrip()
    if not path.endswith(".json") and not head.startswith(b"{"):
        return None
    try:
        data = json.loads(read_small(path))
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise VlaunchError(f"not a run record (invalid JSON: {' '.join(str(e).split())[:200]})", source=path) from None
    if not isinstance(data, dict) or not isinstance(data.get("predicted"), dict):
        raise VlaunchError("not a run record: no 'predicted' plan (written by `vlaunch serve`)", source=path)
    return data


def _from_record(record: dict[str, Any], profile: str | None) -> tuple[Any, Any, Any, str]:
    """(predicted, diff, logged, description) of a run record; --profile names the description."""
    predicted = record["predicted"]
    diff = record.get("diff") if isinstance(record.get("diff"), dict) else None
    logged = record.get("logged") if isinstance(record.get("logged"), dict) else None
    description = _profile_description(record.get("profile_path"))
    if profile:
        from pathlib import Path

        from launcher.plan.profiles import load_profile, resolve_profile_arg

        description = load_profile(resolve_profile_arg(profile, Path.cwd() / "profiles")).description
    return predicted, diff, logged, description


def _from_log(
    source: str, profile: str | None, flags: dict[str, Any], free_gib: float | None, use_calibration: bool
) -> tuple[Any, Any, Any, Any]:
    """(plan, predicted, diff, logged) of a vLLM log, planned as `check` plans it."""
    from launcher.check.compare import read_log

    facts = read_log(source)
    plan_, comparison, note = plan_for_log(facts, profile, flags, free_gib, use_calibration)
    if plan_ is None or comparison is None:
        raise VlaunchError(note or "a log needs a plan to draw: give --profile, --config or --model", source=source)
    return plan_, plan_.to_json(), comparison.to_json(), facts.to_json()


def _page_data(source: str, predicted: Any, description: str, diff: Any, logged: Any) -> dict[str, Any]:
    """The page's data; a damaged run record is refused in one line."""
    from launcher.report.html import page_data

    try:
        return page_data([predicted], description=description, diff=diff, logged=logged)
    except KeyError as e:
        raise VlaunchError(f"not a run record: the predicted plan lacks {e}", source=source) from None
    except (TypeError, ValueError, ArithmeticError) as e:
        raise VlaunchError(f"not a run record: {e}", source=source) from None


def _profile_description(path: object) -> str:
    import os.path
    import stat

    from launcher.plan.profiles import load_profile

    if not isinstance(path, str) or not path:
        return ""
    try:  # a path found inside an input file: read it only when it is a regular file
        if not stat.S_ISREG(os.stat(path).st_mode):
            return ""
        return load_profile(path).description
    except (VlaunchError, OSError):
        return ""


def _report_inputs(profile: str | None, flags: dict[str, Any], plan_: Any) -> list[str]:
    """What `report` read besides its SOURCE: --profile (the file it names), --config/--hf-config-path, the serve
    YAML and, with a plan, the model's files and the calibration store."""
    found: list[str] = [str(flags[k]) for k in ("config", "serve_config") if isinstance(flags.get(k), str)]
    if profile:
        from pathlib import Path

        from launcher.plan.profiles import resolve_profile_arg

        found.append(profile)
        with contextlib.suppress(VlaunchError, OSError):
            found.append(str(resolve_profile_arg(profile, Path.cwd() / "profiles")))
    if plan_ is not None:
        found += inputs_of(plan_.profile, source=plan_.source)
    return found
