"""The options the commands share: --json, the planning flags (one per profile field, vLLM's names), and the
request they build: PROFILE, a pasted vLLM command and the flags, as one profile."""

from __future__ import annotations

from typing import Any

import click

json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")

FORCE_HELP = "Overwrite FILE when it exists (never one of the command's own inputs)."


class _FloatOrAuto(click.ParamType):  # type: ignore[type-arg]
    name = "number|auto"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value is None or value == "auto" or not isinstance(value, str):
            return value
        try:
            return float(value)
        except ValueError:
            return value  # the profile validator names the problem


_CLI_TYPES: dict[str, Any] = {"int": int, "float": float}


def gib_at_least_zero(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    import math

    if value is not None and not (math.isfinite(value) and 0 <= value <= 2**20):
        raise click.BadParameter(f"must be a number of GiB from 0 to {2**20:,}, got {value}")
    return value


def _field_option(spec: Any) -> Any:
    """A click option for a profile field: its flags, its help and its type from the profile's field table."""
    decls = [*spec.flags, spec.dest]
    if spec.switch == "flag":
        return click.option(*decls, is_flag=True, default=None, help=spec.help)
    if spec.switch == "onoff":
        on = spec.flags[0]
        return click.option(f"{on}/--no-{on[2:]}", spec.dest, default=None, help=spec.help)
    kind = _FloatOrAuto() if spec.metavar and spec.metavar.endswith("|auto") else _CLI_TYPES.get(spec.cli_type)
    return click.option(*decls, type=kind, metavar=spec.metavar, help=spec.help)


def _remember_detect(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    ctx.meta["vlaunch.detect_version"] = bool(value)


def detect() -> bool:
    """--detect-version was given to the running command."""
    ctx = click.get_current_context(silent=True)
    return bool(ctx.meta.get("vlaunch.detect_version")) if ctx is not None else False


def plan_options(f: Any) -> Any:
    """The flags every planning command takes: one per profile field that has flags (vLLM's names), plus the
    model source, live-memory and output options."""
    from launcher.plan.profiles import FIELDS

    opts = [
        click.option(
            "--config",
            "serve_config",
            metavar="FILE",
            help="vLLM's serve config YAML (what `vllm serve --config` reads and `vlaunch render --as vllm-config` "
            "writes); its keys set the flags below. A config.json here is read as --hf-config-path.",
        ),
        click.option("--model", "model", metavar="ID", help="Hugging Face repo id or model directory."),
        *(_field_option(spec) for spec in FIELDS if spec.flags),
        click.option(
            "--free-gib",
            type=float,
            callback=gib_at_least_zero,
            help="Memory free at launch (GiB), when not read from this machine.",
        ),
        json_option,
        click.option(
            "--no-calibration",
            is_flag=True,
            help="Ignore terms calibrated from earlier runs on this machine.",
        ),
        click.option(
            "--detect-version",
            is_flag=True,
            expose_value=False,
            callback=_remember_detect,
            help="Run the launch's python to ask its vLLM version when its files do not say it (planning runs no "
            "program a profile names unless asked; serve does, it runs that python anyway).",
        ),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def build_profile(profile: str | None, flags: dict[str, Any], command: tuple[str, ...] = ()) -> Any:
    """The profile asked for (launcher.plan.request.build), with the vLLM options given to this command."""
    return asked(profile, flags, command).profile


def asked(profile: str | None, flags: dict[str, Any], command: tuple[str, ...] = ()) -> Any:
    """PROFILE, a pasted launch, vLLM's options given to the command and vlaunch's flags, as one request
    (launcher.plan.request.build): precedence flags, then the pasted command, then --config, then the profile."""
    from launcher.plan.request import build

    ctx = click.get_current_context(silent=True)
    words = ctx.meta.get("vlaunch.vllm_words", []) if ctx is not None else []
    options = ctx.meta.get("vlaunch.options", {}) if ctx is not None else {}
    request = build(profile, flags, command, words, own=_own(options) if command or words else {})
    if request.shadowing:
        click.echo(f"vlaunch: warning: {request.shadowing}", err=True)
    return request


def _own(options: dict[str, bool]) -> dict[str, bool]:
    """vlaunch's own options of a command (those no vLLM takes) -> whether each takes a value."""
    from launcher.plan.request import is_vllm_spelling

    return {name: takes for name, takes in options.items() if not is_vllm_spelling(name)}


def vllm_words() -> list[str]:
    """The vLLM options given to the running command (`--model X`, `--config serve.yaml`, `-tp 2` …)."""
    ctx = click.get_current_context(silent=True)
    return list(ctx.meta.get("vlaunch.vllm_words", [])) if ctx is not None else []


def split_command(words: tuple[str, ...]) -> tuple[str | None, tuple[str, ...]]:
    """PROFILE and/or a pasted vLLM command (after --): `plan p`, `plan -- vllm serve M …`, `plan p -- vllm …`."""
    from launcher.plan.request import split_words

    return split_words(words)


def machine_names(names: str) -> list[str]:
    """--compare's comma-separated machines (aliases allowed) as catalog names."""
    from launcher.plan.machines import canonical_machine_name

    return [canonical_machine_name(n) for n in names.split(",") if n.strip()]


# Options of the planning commands that no vLLM takes: a command line of these alone has no vLLM word to read.
_VLAUNCH_ONLY = frozenset({
    "--json", "--html", "--compare", "--ascii", "--force", "--users", "--machine", "--gpu-memory-gib",
    "--os-reserve-gib", "--biggest-pool", "--overhead-gib", "--vllm-version", "--launch", "--vllm-executable",
    "--python", "--image", "--container-name", "--free-gib", "--no-calibration", "--dry-run", "--verbose", "-v",
    "--logs-dir", "--skip-preflight", "--stop-below-gib", "--as", "-o", "--output", "--profile", "-h", "--help",
    "--detect-version",
})  # fmt: skip


class VllmCommand(click.Command):
    """A planning command: the vLLM options given to it, in any spelling or form vLLM takes (`--max_model_len`,
    `--device-memory-utilization`, `-sc.method mtp`, `-O3`), are read by vLLM's own rules with the table of the
    release the launch runs, like a pasted command's."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        options: dict[str, bool] = {}
        for param in self.get_params(ctx):
            if isinstance(param, click.Option):
                for name in (*param.opts, *param.secondary_opts):
                    options[name] = not param.is_flag and param.nargs != 0
        ctx.meta["vlaunch.options"] = options
        head = args[: args.index("--")] if "--" in args else args
        if all(a.partition("=")[0] in _VLAUNCH_ONLY for a in head if a.startswith("-") and a != "-"):
            ctx.meta["vlaunch.vllm_words"] = []
            return super().parse_args(ctx, args)
        from launcher.plan.request import split_vllm_words

        keep, vllm = split_vllm_words(args, _own(options))
        ctx.meta["vlaunch.vllm_words"] = vllm
        return super().parse_args(ctx, keep)
