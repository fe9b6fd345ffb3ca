"""`vlaunch calibrate`: the measured terms of the memory model, fitted from runs and logs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from launcher.cli.options import build_profile, json_option
from launcher.cli.output import emit_json
from launcher.common.errors import VlaunchError


@click.command()
@click.argument("paths", nargs=-1)
@click.option("--hf-config-path", "--config", "config", metavar="FILE",
              help="config.json of the model in the LOGs (for raw logs; vLLM's --hf-config-path).")  # fmt: skip
@click.option("--model", "model", metavar="ID", help="Model of the LOGs, when they do not name one vlaunch knows.")
@click.option("--dry-run", is_flag=True, help="Fit and print, but do not store.")
@json_option
def calibrate(paths: tuple[str, ...], config: str | None, model: str | None, dry_run: bool, as_json: bool) -> None:
    """Fit the measured terms (activation, non-torch, CUDA graphs, CPU worker memory) and the decode efficiency
    from runs and logs.

    PATHS are run records (logs/*.json, the default) or vLLM logs from anywhere. Terms are grouped by machine
    and vLLM version and stored in $XDG_CONFIG_HOME/vlaunch/calibration.yaml; `plan` then uses the matching
    group and says so. A group from another machine or version is never applied. A run record of `serve` also
    holds vLLM's "Avg generation throughput" lines: each decode-bound interval over the rate its decode step
    models is a measured efficiency, which `fit` then uses for that machine and version (expected_source:
    measured).
    """
    from launcher.plan import calibration
    from launcher.plan.speed_calibration import RunSpeed, run_speed, save_speed

    skipped: list[str] = []
    samples: list[calibration.Sample] = []
    speeds: list[RunSpeed] = []
    for f in _calibration_files(paths):
        record = _read_record(f, skipped) if f.suffix == ".json" else None
        if record is not None and (rs := run_speed(record, str(f))) is not None:
            speeds.append(rs)
        s = _record_sample(f, record, skipped) if f.suffix == ".json" else _log_sample(f, config, model, skipped)
        if s is not None:
            samples.append(s)
    groups: dict[tuple[str, str], list[calibration.Sample]] = {}
    for s in samples:
        groups.setdefault((s.machine, s.version), []).append(s)
    ignored: list[str] = []  # a run's term outside its physical bounds, naming the run
    fitted = {k: calibration.fit(v, ignored) for k, v in groups.items()}
    stored = None
    if fitted and not dry_run:
        stored = calibration.save_terms(fitted)
    if speeds and not dry_run:
        stored = save_speed(speeds)
    if as_json:
        emit_json(
            {
                "groups": [{"machine": m, "vllm_version": v, **t} for (m, v), t in fitted.items()],
                "speed": [_speed_json(r) for r in speeds],
                "skipped": skipped,
                "ignored": ignored,
                "stored": str(stored) if stored else None,
            }
        )
        return
    for (m, v), t in fitted.items():
        click.echo(f"{m}, vLLM {v}: " + ", ".join(_term_parts(t)))
    for r in speeds:
        click.echo(_speed_line(r))
    for why in skipped:
        click.echo(f"skipped {why}")
    for note in ignored:
        click.echo(note)
    if not fitted and not speeds:
        click.echo("nothing to calibrate from")
    elif stored:
        click.echo(f"stored in {stored}")


def _calibration_files(paths: tuple[str, ...]) -> list[Path]:
    """The files PATHS name: a directory's run records (and, when given, its logs); logs/*.json by default."""
    files: list[Path] = []
    for p in paths or ("logs",):
        path = Path(p)
        if path.is_dir():
            files += sorted(path.glob("*.json")) + ([] if paths == () else sorted(path.glob("*.log")))
        elif path.exists():
            files.append(path)
        else:
            raise VlaunchError("no such file or directory", source=p)
    return files


def _read_record(f: Path, skipped: list[str]) -> dict[str, Any] | None:
    """A run record's data; None, with the reason added to `skipped`, when it is none."""
    from launcher.common.files import read_small

    try:
        record = json.loads(read_small(f))
    except VlaunchError as e:
        skipped.append(e.one_line())
        return None
    except (ValueError, RecursionError):  # not JSON, not UTF-8, digits past int's limit, nested too deep
        skipped.append(f"{f}: not a run record")
        return None
    if not isinstance(record, dict):
        skipped.append(f"{f}: not a run record")
        return None
    return record


def _record_sample(f: Path, record: dict[str, Any] | None, skipped: list[str]) -> Any:
    """A run record's sample; None, with the reason added to `skipped`, when it gives none."""
    from launcher.plan import calibration

    if record is None:
        return None
    s = calibration.sample_from_record(record, str(f))
    if s is None:
        skipped.append(f"{f}: not a run record")
    return s


def _speed_json(r: Any) -> dict[str, Any]:
    return {
        "machine": r.machine,
        "vllm_version": r.version,
        "model": r.model,
        "source": r.source,
        "intervals": [
            {
                "regime": i.regime,
                "efficiency": i.efficiency,
                "running": i.running,
                "context": i.context,
                "generation_tokens_per_s": i.generation_tokens_per_s,
            }
            for i in r.intervals
        ],
    }


def _speed_line(r: Any) -> str:
    by: dict[str, list[float]] = {}
    for i in r.intervals:
        by.setdefault(i.regime, []).append(i.efficiency)
    parts = [f"{k} {sorted(v)[len(v) // 2]:.2f} of the modelled rate ({len(v)} interval(s))" for k, v in by.items()]
    return f"{r.machine}, vLLM {r.version}: decode {', '.join(parts)} from {r.source}"


def _log_sample(f: Path, config: str | None, model: str | None, skipped: list[str]) -> Any:
    """A vLLM log's sample, planned from the log's own flags; None, with the reason added to `skipped`, when it
    gives none."""
    from launcher.check.compare import flags_from_log, read_log
    from launcher.plan import calibration
    from launcher.plan.planning import make_plan

    facts = read_log(str(f))
    if not facts.started:
        skipped.append(f"{f}: the launch did not start")
        return None
    merged = flags_from_log(facts)
    if facts.vllm_version:
        merged["vllm_version"] = facts.vllm_version
    if facts.total_memory_gib is not None:
        merged["machine"] = "cpu" if facts.device == "cpu" else "cuda"
        merged["gpu_memory_gib"] = facts.total_memory_gib
    if config:
        merged["config"] = config
    merged["model"] = model or facts.model
    if not merged.get("model") or not merged.get("machine"):
        skipped.append(f"{f}: the log names no model or total memory")
        return None
    try:
        plan_ = make_plan(build_profile(None, merged), live=False, use_calibration=False)
    except VlaunchError as e:
        skipped.append(f"{f}: {e.one_line()}")
        return None
    key = calibration.machine_key(plan_.machine.name, plan_.machine.total_bytes)
    return calibration.Sample(key, facts.vllm_version or "?", plan_.to_json(), facts.to_json(), str(f))


def _term_parts(t: dict[str, Any]) -> list[str]:
    """A group's fitted terms, as `calibrate` prints them."""
    parts = [f"{t['runs']} run(s)"]
    for key, label in (("activation_scale", "activation ×"), ("weights_scale", "weights ×")):
        if key in t:
            parts.append(f"{label}{t[key]}")
    gib_terms = (
        ("non_torch_bytes_tp1", "non-torch"),
        ("non_torch_bytes_tp_many", "non-torch tp>1"),
        ("cudagraph_bytes", "CUDA graphs"),
    )
    for key, label in gib_terms:
        if key in t:
            parts.append(f"{label} {t[key] / 2**30:.2f} GiB")
    return parts
