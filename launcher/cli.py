"""The vlaunch command line: parse, call the library, print. Errors become one line and an exit code."""

from __future__ import annotations

import codecs
import contextlib
import errno
import io
import json
import os
import sys
from typing import Any

import click

from launcher import __version__
from launcher.common.errors import VlaunchError

EXIT_OK = 0
EXIT_USAGE = 2  # bad input: unreadable file, malformed config, unknown name
EXIT_DOES_NOT_FIT = 3
EXIT_INTERNAL = 70
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what the shell reports for any tool whose reader closed the pipe early

# What a character the output's encoding cannot hold is written as (LANG=C, PYTHONIOENCODING=latin-1): the ASCII
# spelling of the symbols vlaunch prints, "?" for anything else.
_ASCII_FALLBACK = {"≈": "~", "→": "->", "←": "<-", "−": "-", "×": "x", "÷": "/", "—": "-", "–": "-", "…": "...",
                   "·": ".", "≤": "<=", "≥": ">=", "±": "+/-", "█": "#", "▓": "=", "▒": "+", "░": ".", "▞": "/",
                   "╳": "X", "◀": "<", "▶": ">", "✓": "ok", "✗": "x", "µ": "u", "’": "'", "‘": "'", "“": '"',
                   "”": '"'}  # fmt: skip
_FALLBACK_ERRORS = "vlaunch-fallback"


def _fallback(err: UnicodeError) -> tuple[str, int]:
    if not isinstance(err, UnicodeEncodeError):
        raise err
    bad = err.object[err.start : err.end]
    return "".join(_ASCII_FALLBACK.get(ch, "?") for ch in bad), err.end


codecs.register_error(_FALLBACK_ERRORS, _fallback)


def _prepare_streams() -> None:
    """stdout and stderr that never raise on a character their encoding lacks, and that exist: a closed stdout
    (`vlaunch plan P >&-`) or stderr discards what is written to it, as /dev/null would."""
    for fd, name in ((1, "stdout"), (2, "stderr")):
        stream = getattr(sys, name)
        if stream is None:
            with contextlib.suppress(OSError):
                os.fstat(fd)
                continue  # the descriptor is open; Python left the stream out for another reason
            with contextlib.suppress(OSError):
                null = os.open(os.devnull, os.O_WRONLY)
                if null != fd:  # keep the descriptor taken, so no file opened later lands on it
                    os.dup2(null, fd)
                    os.close(null)
                setattr(sys, name, open(fd, "w", encoding="utf-8", closefd=False))  # noqa: SIM115
            continue
        if isinstance(stream, io.TextIOWrapper) and stream.errors in ("strict", "backslashreplace"):
            with contextlib.suppress(AttributeError, ValueError, io.UnsupportedOperation):
                stream.reconfigure(errors=_FALLBACK_ERRORS)


def _pipe_closed() -> None:
    """The reader of stdout went away (`vlaunch archs | head -1`): what is left unwritten goes to /dev/null, so
    neither this process nor the interpreter's last flush reports the broken pipe."""
    with contextlib.suppress(Exception):
        fd = sys.stdout.fileno()
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)


def _flush_stdout() -> bool:
    """Flush stdout; False when its reader has gone."""
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except BrokenPipeError:
        _pipe_closed()
        return False
    except (OSError, ValueError):
        pass
    return True


def _os_error_line(e: OSError) -> str | None:
    """`path: reason` for an OS refusal of a path the user gave (a name too long, a loop of links, no
    permission), None for anything else."""
    if e.filename is None:
        return None
    name = os.fsdecode(e.filename) if isinstance(e.filename, bytes) else str(e.filename)
    reason = e.strerror or errno.errorcode.get(e.errno or 0) or type(e).__name__
    return " ".join(f"{name}: {reason}".split())


def _say(line: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        click.echo(line, err=True)


_HELP_ERRORS: tuple[type[Exception], ...] = tuple(
    x for x in (getattr(click.exceptions, "NoArgsIsHelpError", None),) if isinstance(x, type)
)


def _click_error(e: click.ClickException) -> None:
    """A bad flag, a missing argument, an unknown command: one line naming it, and where the help is. A bare
    `vlaunch` shows the help, as click does."""
    if isinstance(e, _HELP_ERRORS):
        e.show()
        return
    msg = " ".join(e.format_message().split()).rstrip(".")
    where = e.ctx.command_path if isinstance(e, click.UsageError) and e.ctx is not None else None
    _say(f"vlaunch: error: {msg}" + (f" (`{where} -h` for help)" if where else ""))


class _Group(click.Group):
    """Turns library errors into `vlaunch: error: …` on stderr; `--debug` (or VLAUNCH_DEBUG=1) shows tracebacks."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        _prepare_streams()
        try:
            rv = super().main(*args, **kwargs)
        except SystemExit:
            if not _flush_stdout():
                raise SystemExit(EXIT_BROKEN_PIPE) from None
            raise
        if not _flush_stdout():
            raise SystemExit(EXIT_BROKEN_PIPE)
        return rv

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.ClickException as e:
            _click_error(e)
            ctx.exit(e.exit_code)
        except BrokenPipeError:  # `vlaunch --help | head -1`: the help is printed while parsing
            _pipe_closed()
            ctx.exit(EXIT_BROKEN_PIPE)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except VlaunchError as e:
            if _debug(ctx):
                raise
            _say(f"vlaunch: error: {e.one_line()}")
            ctx.exit(e.exit_code)
        except click.ClickException as e:
            _click_error(e)
            ctx.exit(e.exit_code)
        except (click.exceptions.Exit, click.exceptions.Abort):
            raise
        except KeyboardInterrupt:
            _say("vlaunch: interrupted")
            ctx.exit(130)
        except BrokenPipeError:
            _pipe_closed()
            ctx.exit(EXIT_BROKEN_PIPE)
        except Exception as e:
            if _debug(ctx):
                raise
            line = _os_error_line(e) if isinstance(e, OSError) else None
            if line is not None:
                _say(f"vlaunch: error: {line}")
                ctx.exit(EXIT_USAGE)
            msg = " ".join(str(e).split()) or type(e).__name__
            _say(f"vlaunch: internal error: {msg} (run with --debug for a traceback)")
            ctx.exit(EXIT_INTERNAL)


def _debug(ctx: click.Context) -> bool:
    root = ctx.find_root()
    return bool(root.params.get("debug")) or os.environ.get("VLAUNCH_DEBUG") not in (None, "", "0")


def emit_json(data: object) -> None:
    """`data` as strict JSON: a lone surrogate (an undecodable byte of a file name or process title, kept by
    Python as U+DC80..U+DCFF) is written as the text `\\xNN`; JSON's `\\udcNN` for it is refused by strict
    parsers."""
    click.echo(json.dumps(_no_lone_surrogates(data), indent=2, sort_keys=False))


def _no_lone_surrogates(value: object) -> object:
    if isinstance(value, str):
        try:
            value.encode("utf-8")  # only a lone surrogate fails (an astral character is one code point in a str)
            return value
        except UnicodeEncodeError:
            return "".join(_surrogate_text(c) if "\ud800" <= c <= "\udfff" else c for c in value)
    if isinstance(value, dict):
        return {_no_lone_surrogates(k): _no_lone_surrogates(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_no_lone_surrogates(v) for v in value]
    return value


def _surrogate_text(c: str) -> str:
    code = ord(c)
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show full tracebacks instead of one-line errors.")
@click.version_option(__version__, prog_name="vlaunch")
def main(debug: bool) -> None:
    """Size, launch and verify vLLM servers.

    vlaunch counts a model's parameters from its config.json, predicts every memory bucket and vLLM's
    KV-cache pool before launch, and checks the prediction against what vLLM logs.
    """


@main.command()
@click.argument("model")
@click.option("--format", "--quantization", "fmt", metavar="FORMAT",
              help="Storage format (bf16, fp16, fp32, fp8, int8, q8_0, awq, gptq, w4a16, q4_k_m, nvfp4, mxfp4). "
              "Default: detected from config.json.")  # fmt: skip
@click.option("--kv-cache-dtype", default="auto", show_default=True, help="vLLM's kv_cache_dtype.")
@click.option("--tensor-parallel-size", "-tp", default=1, show_default=True, type=click.IntRange(min=1),
              help="KV heads and bytes per rank.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def count(model: str, fmt: str | None, kv_cache_dtype: str, tensor_parallel_size: int, as_json: bool) -> None:
    """Count MODEL's parameters, weight bytes and KV bytes per token.

    MODEL is a config.json, a model directory, or a Hugging Face repo id (read from the local cache; only
    config.json is downloaded when it is missing and the network allows).
    """
    from launcher.model.counting import count_model, render_count

    result = count_model(model, fmt=fmt, kv_cache_dtype=kv_cache_dtype, tp=tensor_parallel_size)
    if as_json:
        emit_json(result.to_json())
    else:
        click.echo(render_count(result))


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option(
    "--default",
    "default",
    is_flag=True,
    help="Print only the name of the bundled profile for this machine (what `make serve` starts): "
    "llama8b-32k on a DGX Spark, tiny-cpu without an NVIDIA GPU, qwen3-8b-pip on another GPU.",
)
def profiles(as_json: bool, default: bool) -> None:
    """List the profiles `plan PROFILE` and `serve PROFILE` take by name: ./profiles/*.yaml, then the bundled ones."""
    from pathlib import Path

    from launcher.plan.profiles import BUNDLED_PROFILES, available_profiles, load_profile

    if default:
        from launcher.plan.machines import detect

        here, _ = detect()
        name = _default_profile(here.name)
        if as_json:
            emit_json({"default": name, "machine": here.name})
        else:
            click.echo(name)
        return

    rows: list[dict[str, Any]] = []
    seen: dict[str, Path] = {}
    for where, d in (("local", Path.cwd() / "profiles"), ("bundled", BUNDLED_PROFILES)):
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
                         "description": desc, "shadowed": name in seen})  # fmt: skip
            seen.setdefault(name, path.resolve())
    if as_json:
        emit_json({"profiles": rows})
        return
    width = max((len(str(r["name"])) for r in rows), default=4)
    for r in rows:
        note = " (shadowed by the local one)" if r["shadowed"] else ""
        click.echo(f"{r['name']:<{width}}  {r['source']:<7}  {r['machine']:<9}  {r['model']}{note}")


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def archs(as_json: bool) -> None:
    """List every model_type vlaunch reads: its family, its layer kinds and how exactly it is counted.

    exact: a family module reproduces transformers' parameters and the layer map. generic: vLLM serves the
    architecture but no family reads it; weights come from the checkpoint's safetensors headers and the cache from
    the config's generic fields.
    """
    from launcher.model.archs import list_archs

    rows = list_archs()
    if as_json:
        emit_json(
            {
                "archs": [r.to_json() for r in rows],
                "exact": sum(1 for r in rows if r.support == "exact"),
                "generic": sum(1 for r in rows if r.support == "generic"),
            }
        )
        return
    width = max(len(r.model_type or "-") for r in rows)
    for r in rows:
        kinds = ", ".join(f"{n} {k}" for k, n in r.layer_kinds.items())
        extra = "".join([f", {r.towers} tower(s)" if r.towers else "", f", {r.mtp_layers} MTP" if r.mtp_layers else ""])
        what = kinds + extra if r.support == "exact" else ", ".join(r.architectures)
        click.echo(f"{(r.model_type or '-'):<{width}}  {r.support:<7}  {r.family:<18}  {what}")
    n_exact = sum(1 for r in rows if r.support == "exact")
    click.echo(f"\n{n_exact} model_types read exactly, {len(rows) - n_exact} vLLM architectures read generically")


def _default_profile(machine_name: str) -> str:
    from launcher.plan.profiles import default_profile_name

    return default_profile_name(machine_name)


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


def _gib_at_least_zero(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
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


def _detect() -> bool:
    """--detect-version was given to the running command."""
    ctx = click.get_current_context(silent=True)
    return bool(ctx.meta.get("vlaunch.detect_version")) if ctx is not None else False


def _plan_options(f: Any) -> Any:
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
            callback=_gib_at_least_zero,
            help="Memory free at launch (GiB), when not read from this machine.",
        ),
        click.option("--json", "as_json", is_flag=True, help="Machine-readable output."),
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


def _vllm_words() -> list[str]:
    """The vLLM options given to the running command (`--model X`, `--config serve.yaml`, `-tp 2` …)."""
    ctx = click.get_current_context(silent=True)
    return list(ctx.meta.get("vlaunch.vllm_words", [])) if ctx is not None else []


# Options of the planning commands that no vLLM takes: a command line of these alone has no vLLM word to read.
_VLAUNCH_ONLY = frozenset({
    "--json", "--html", "--compare", "--ascii", "--force", "--users", "--machine", "--gpu-memory-gib",
    "--os-reserve-gib", "--biggest-pool", "--overhead-gib", "--vllm-version", "--launch", "--vllm-executable",
    "--python", "--image", "--container-name", "--free-gib", "--no-calibration", "--dry-run", "--verbose", "-v",
    "--logs-dir", "--skip-preflight", "--stop-below-gib", "--as", "-o", "--output", "--profile", "-h", "--help",
    "--detect-version",
})  # fmt: skip


class _VllmCommand(click.Command):
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


def _bar_style(ascii_bar: bool) -> Any:
    """Unicode blocks on a terminal that can show them; plain ASCII in pipes, files, CliRunner or with --ascii."""
    out = sys.stdout
    if ascii_bar or not out.isatty():
        return "ascii"
    try:
        "█▓▒░▞·╳◀".encode(getattr(out, "encoding", None) or "ascii")
    except (UnicodeEncodeError, LookupError):
        return "ascii"
    return "unicode"


_FORCE_HELP = "Overwrite FILE when it exists (never one of the command's own inputs)."


def _inputs(p: Any, *more: object, source: Any = None) -> list[str]:
    """The files a command read: the profile, the config.json, the serve YAML, a log or a run record, the model's
    files (`_model_files`) and the calibration store."""
    from launcher.plan.calibration import calibration_path

    found = [getattr(p, "source", None), getattr(p, "config", None), *more, str(calibration_path())]
    found += _model_files(p, source)
    return [str(x) for x in found if isinstance(x, str | os.PathLike) and str(x)]


_CHECKPOINT_FILES = (".safetensors", ".safetensors.index.json", ".gguf", "hf_quant_config.json", "config.json")
_MAX_MODEL_FILES = 10_000


def _model_files(p: Any, source: Any = None) -> list[str]:
    """The model's files a plan reads: every file of a model directory (or Hugging Face snapshot) it was given
    (config.json, safetensors shards and index, GGUF, tokenizer); beside a config.json given as a file, the
    checkpoint files the plan looks for there. `source` is the plan's ModelSource, when there is one."""
    from launcher.common.files import expand_user

    folder, whole = getattr(source, "model_dir", None), getattr(source, "origin", "") in ("directory", "hf-cache")
    if source is None:
        model, config = getattr(p, "model", None), getattr(p, "config", None)
        with contextlib.suppress(VlaunchError, OSError, ValueError):
            if isinstance(config, str) and config:
                folder = os.path.dirname(os.path.abspath(expand_user(config)))
            elif isinstance(model, str) and os.path.isdir(expand_user(model)):
                folder, whole = expand_user(model), True
            elif isinstance(model, str) and os.path.isfile(expand_user(model)):
                folder = os.path.dirname(os.path.abspath(expand_user(model)))
    if not folder:
        return []
    try:
        with os.scandir(folder) as it:
            names = [e.name for _, e in zip(range(_MAX_MODEL_FILES), it, strict=False)]
    except (OSError, ValueError):
        return []
    return [os.path.join(folder, n) for n in names if whole or n.endswith(_CHECKPOINT_FILES)]


def _output_target(path: str, inputs: tuple[str, ...] | list[str], force: bool) -> str:
    """The absolute path an output goes to, refused (one line) when it is one of the command's inputs, not a
    regular file, or an existing file without --force."""
    from launcher.common.files import expand_user

    target = os.path.abspath(expand_user(path))
    for given in inputs:
        if _same_file(target, os.path.expanduser(given)):
            raise VlaunchError(f"is an input of this command ({given}); choose another output file", source=path)
    kind = _not_a_regular_file(target)
    if kind:  # /dev/null, a FIFO, a directory (or a link to one): a rename would replace it, not write to it
        raise VlaunchError(f"is {kind}, not a regular file; choose another output file", source=path)
    if os.path.lexists(target) and not force:
        what = "a symlink" if os.path.islink(target) else "an existing file"
        raise VlaunchError(f"{what}; pass --force to overwrite it", source=path)
    return target


def _same_file(a: str, b: str) -> bool:
    """Whether two paths name one file: by resolved path, or by device and inode (hard links, bind mounts)."""
    if "\x00" in a or "\x00" in b:  # no file has such a name: it is nothing the other names
        return False
    same = os.path.realpath(a) == os.path.realpath(b)
    with contextlib.suppress(OSError, ValueError):
        same = same or os.path.samefile(a, b)
    return same


def _distinct_outputs(outputs: list[tuple[str, str | None]]) -> None:
    """Refuse, before anything is written, two of a command's outputs (flag, path) that name one file."""
    given = [(flag, path) for flag, path in outputs if path]
    for i, (flag, path) in enumerate(given):
        for other, path2 in given[:i]:
            if _same_file(os.path.abspath(os.path.expanduser(path)), os.path.abspath(os.path.expanduser(path2))):
                raise VlaunchError(f"{other} and {flag} name the same file; give each its own", source=path)


def _write_text(path: str, text: str, *, inputs: tuple[str, ...] | list[str] = (), force: bool = False) -> None:
    """Write an output file: never over one of the command's inputs, over an existing file only with --force,
    and never through a symlink (the link is replaced, its target left alone); a reader sees the old file or the
    new one, never half of one."""
    from launcher.common.files import write_atomic

    target = _output_target(path, inputs, force)
    try:
        write_atomic(target, text)
    except OSError as e:
        raise VlaunchError(f"cannot write: {e.strerror or e}", source=path) from None


def _not_a_regular_file(target: str) -> str | None:
    """What `target` (or what a link there points to) is when it exists and is not a regular file."""
    import stat

    try:
        mode = os.stat(target).st_mode
    except (OSError, ValueError):
        return None  # nothing there (or a dangling link): the write says what is wrong, if anything
    if stat.S_ISREG(mode):
        return None
    return "a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a device or socket"


def _machine_names(names: str) -> list[str]:
    """--compare's comma-separated machines (aliases allowed) as catalog names."""
    from launcher.plan.machines import canonical_machine_name

    return [canonical_machine_name(n) for n in names.split(",") if n.strip()]


def _compare_plans(main_plan: Any, names: str) -> list[Any]:
    """The main plan's profile planned on each machine of a comma-separated list (aliases allowed)."""
    from launcher.plan.planning import make_plan

    wanted = _machine_names(names)
    if not wanted:
        raise VlaunchError("--compare needs machine names, e.g. --compare spark,h100,rtx4090")
    if main_plan.machine.name not in wanted:
        wanted.insert(0, main_plan.machine.name)
    plans = []
    for name in dict.fromkeys(wanted):
        if name == main_plan.machine.name:
            plans.append(main_plan)
        else:
            other = main_plan.profile.with_overrides(machine=name, gpu_memory_gib=None)
            plans.append(make_plan(other, use_calibration=main_plan.use_calibration, detect=main_plan.detect))
    return plans


def _split_command(words: tuple[str, ...]) -> tuple[str | None, tuple[str, ...]]:
    """PROFILE and/or a pasted vLLM command (after --): `plan p`, `plan -- vllm serve M …`, `plan p -- vllm …`."""
    from launcher.plan.request import split_words

    return split_words(words)


@main.command(cls=_VllmCommand, context_settings={"ignore_unknown_options": False})
@click.argument("words", metavar="[PROFILE] [-- VLLM COMMAND…]", nargs=-1, type=click.UNPROCESSED)
@_plan_options
@click.option("--html", "html_path", metavar="FILE", help="Also write the memory picture as one HTML page.")
@click.option("--compare", metavar="M1,M2,…", help="Draw the profile on these machines too (spark,h100,rtx4090).")
@click.option("--ascii", "ascii_bar", is_flag=True, help="Draw the memory bar in plain ASCII.")
@click.option("--force", is_flag=True, help=_FORCE_HELP)
def plan(
    words: tuple[str, ...],
    force: bool,
    as_json: bool,
    free_gib: float | None,
    html_path: str | None,
    compare: str | None,
    ascii_bar: bool,
    no_calibration: bool,
    **flags: Any,
) -> None:
    """Predict the four buckets, vLLM's KV pool and a safe gpu_memory_utilization.

    PROFILE is a YAML file or the name of a profile (`vlaunch profiles`). Flags are vLLM's and override the
    profile; so does a vLLM command pasted after `--` (`vlaunch plan -- vllm serve MODEL --max-model-len 32k`),
    whose flags vlaunch does not model are passed to vLLM as written. --html FILE writes a bar per machine drawn
    to its capacity; --compare a,b,c plans the same profile on other machines. Exit 3 when the plan, or any
    compared machine, does not fit (the reasons say which bucket and by how much); the HTML is written all the
    same.
    """
    from launcher.common.units import gib_to_bytes
    from launcher.plan.planning import make_plan
    from launcher.report.render import memory_bar, render_plan

    profile, command = _split_command(words)
    request = asked(profile, flags, command)
    p = request.profile
    free = None if free_gib is None else gib_to_bytes(free_gib)
    result = make_plan(p, free_bytes=free, use_calibration=not no_calibration, notes=request.notes, detect=_detect())
    plans = _compare_plans(result, compare) if compare else [result]
    style = _bar_style(ascii_bar)
    if as_json:
        data = result.to_json()
        if compare:
            data["compare"] = [x.to_json() for x in plans]
        emit_json(data)
    else:
        click.echo(render_plan(result, bar=style))
        if compare:
            click.echo("\ncompare:")
            for x in plans:
                pr = x.prediction
                buckets = [("OS reserve", pr.os_reserve_bytes), ("weights", pr.weights_bytes),
                           ("KV cache", pr.kv_need_bytes), ("activation", pr.activation_peak_bytes),
                           ("overhead", pr.overhead_bytes)]  # fmt: skip
                verdict = "fits" if x.fits else "does NOT fit"
                click.echo(f"  {x.machine.name}: {verdict}, max users {pr.max_users}")
                click.echo(memory_bar(buckets, x.machine.total_bytes, style)[0])
    if html_path:
        from launcher.report.html import page_data, render_html

        page = render_html(page_data([x.to_json() for x in plans], description=p.description))
        _write_text(html_path, page, inputs=_inputs(p, *request.inputs, source=result.source), force=force)
        if not as_json:
            click.echo(f"html: {html_path}")
    if not all(x.fits for x in plans):
        sys.exit(EXIT_DOES_NOT_FIT)


_FIT_PINNABLE = ("quantization", "kv_cache_dtype", "tensor_parallel_size", "pipeline_parallel_size",
                 "speculative_config", "max_num_seqs")  # fmt: skip


def _with_vllm_values(flags: dict[str, Any], profile: str | None) -> dict[str, Any]:
    """fit's flags with the vLLM options given to it read in: the values it holds fixed (`-q`, `-tp` …) are
    planning values; the rest stays vLLM's, passed to every row."""
    from launcher.plan.request import vllm_values

    words = _vllm_words()
    if not words:
        return flags
    parsed = vllm_values(words, flags, profile if profile and profile.endswith((".yaml", ".yml")) else None)
    ctx = click.get_current_context()
    ctx.meta["vlaunch.vllm_words"] = parsed.extra_args
    return {**parsed.values, **{k: v for k, v in flags.items() if v is not None}}


def _fit_base(model: str | None, flags: dict[str, Any]) -> Any:
    """The profile fit starts from: a profile (a .yaml file, or a name `vlaunch profiles` lists) with the flags
    over it, or MODEL (repo id, directory, config.json) with the flags; without MODEL, what --model,
    --hf-config-path or --config name."""
    from pathlib import Path

    from launcher.common.files import expand_user
    from launcher.plan.profiles import BUNDLED_PROFILES, available_profiles

    if model is None:
        return build_profile(None, flags)
    local = Path(expand_user(model, VlaunchError))
    names = set(available_profiles(Path.cwd() / "profiles")) | set(available_profiles(BUNDLED_PROFILES))
    is_dir_or_json = local.is_dir() or (local.is_file() and local.suffix == ".json")
    if not is_dir_or_json and (model.endswith((".yaml", ".yml")) or ("/" not in model and model in names)):
        return build_profile(model, flags)
    if flags.get("model") and flags["model"] != model:
        raise VlaunchError(f"MODEL is {model!r} and --model is {flags['model']!r}; give one")
    return build_profile(None, {**flags, "model": model})


def _fit_profile_path(name: str) -> str:
    """--write-profile NAME: ./profiles/NAME.yaml (what `plan NAME` finds), or NAME itself when it is a path."""
    import re

    if "/" in name or name.endswith((".yaml", ".yml")):
        return name
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", name):
        raise VlaunchError("must be a profile name of letters, digits, '.', '_' and '-' (or a path)",
                           field="--write-profile")  # fmt: skip
    return os.path.join("profiles", f"{name}.yaml")


@main.command(cls=_VllmCommand)
@click.argument("model_arg", metavar="[MODEL]", required=False)
@_plan_options
@click.option("--context", "context", metavar="TOKENS",
              help="Context each user needs (8192, 32k, 32K, 128K); default: the longest that fits.")  # fmt: skip
@click.option("--compare", metavar="M1,M2,…", help="Search these machines too (spark,h100,rtx4090).")
@click.option("--gpus", type=click.IntRange(1, 4096), help="GPUs in the box (default: read, else 1).")
@click.option(
    "--max-nodes",
    type=click.IntRange(1, 2),
    default=2,
    show_default=True,
    help="DGX Sparks a model may span (one GPU each, vLLM's Ray executor).",
)
@click.option(
    "--formats",
    "formats_",
    metavar="F1,F2,…",
    help="Weight formats to consider (default: the checkpoint's own and those its family ships).",
)
@click.option(
    "--memory-bandwidth-gbs",
    type=click.FloatRange(min=0.001, max=1e7),
    help="Memory bandwidth per GPU in GB/s for the decode ceiling (default: the machine catalog's).",
)
@click.option("--top", type=click.IntRange(min=1), default=12, show_default=True, help="Rows shown per machine.")
@click.option("--all", "show_all", is_flag=True, help="Show every row.")
@click.option("--html", "html_path", metavar="FILE", help="Also write the options as bars on one scale.")
@click.option(
    "--write-profile",
    "write_profile",
    metavar="NAME",
    help="Write the chosen row as profiles/NAME.yaml (or NAME when it is a path) for plan and serve.",
)
@click.option("--pick", type=click.IntRange(min=1), metavar="RANK",
              help="With --write-profile (required): write the row of this rank, not the chosen one.")  # fmt: skip
@click.option("--force", is_flag=True, help=_FORCE_HELP)
def fit(
    model_arg: str | None,
    context: str | None,
    compare: str | None,
    gpus: int | None,
    max_nodes: int,
    formats_: str | None,
    memory_bandwidth_gbs: float | None,
    top: int,
    show_all: bool,
    html_path: str | None,
    write_profile: str | None,
    pick: int | None,
    force: bool,
    as_json: bool,
    free_gib: float | None,
    no_calibration: bool,
    **flags: Any,
) -> None:
    """The ways to run MODEL on a machine, each planned exactly as `plan` plans it, best first.

    MODEL is a repo id, a model directory, a config.json or a profile (or leave it out and give --model,
    --hf-config-path or --config). vlaunch enumerates the weight format (the checkpoint's own; for a 16-bit
    checkpoint bf16, fp8, NVFP4, MXFP4, AWQ, GPTQ and GGUF Q8_0 / Q4_K_M), the KV cache dtype (auto, fp8), tensor
    / pipeline parallel over the box's GPUs or two DGX Sparks, MTP speculative decoding where the checkpoint has
    it, and max_num_seqs; a choice given as a flag (--quantization,
    --kv-cache-dtype, -tp, -pp, --speculative-config, --max-num-seqs) is held. With --users N and --context C the
    options that fit N users × C tokens come first: fewest quality compromises (bf16 > fp8 > NVFP4/MXFP4 > int4;
    KV auto > fp8), then fewest GPUs, then the most memory left. Without them each row gives the most users at the
    model's context and the longest context for 1, 4 and 16 users. Each row's decode speed is a ceiling
    (bandwidth ÷ bytes per step), not a benchmark. Exit 3 when no option fits.
    """
    from launcher.plan import fit as fitting
    from launcher.plan.profiles import parse_tokens
    from launcher.report.render import render_fit

    if pick is not None and not write_profile:
        raise click.UsageError("--pick RANK chooses the row --write-profile writes; give --write-profile NAME too")
    given_len = flags.get("max_model_len")
    if context is not None and given_len is not None and str(context) != str(given_len):
        raise VlaunchError("--context and --max-model-len say different things; give one")
    raw_context = context if context is not None else given_len
    if raw_context is not None and str(raw_context).strip().lower() in ("auto", "-1"):
        raw_context = None  # the longest that fits: fit's own search
    target_context = None if raw_context is None else parse_tokens(raw_context, "--context")
    flags = _with_vllm_values(flags, model_arg)
    if not (model_arg or flags.get("model") or flags.get("config") or flags.get("serve_config")):
        raise click.UsageError("Missing argument 'MODEL' (a repo id, directory, config.json or profile) or --model")
    flags = {**flags, "max_model_len": None}
    base = _fit_base(model_arg, flags)
    pinned = {k: flags.get(k) for k in _FIT_PINNABLE if flags.get(k) is not None}
    machines = [base.machine, *(_machine_names(compare) if compare else [])]
    allowed = None
    if formats_:
        from launcher.model.formats import normalize_name

        allowed = tuple(normalize_name(x) for x in formats_.split(",") if x.strip())
    target = fitting.Target(users=flags.get("users"), context=target_context)
    result = fitting.search(
        base,
        machines,
        target,
        gpus=gpus,
        max_nodes=max_nodes,
        formats_allowed=allowed,
        pinned=pinned,
        bandwidth_gbs=memory_bandwidth_gbs,
        use_calibration=not no_calibration,
        detect=_detect(),
    )
    written = None
    inputs = _inputs(base, flags.get("serve_config"), source=result.rows[0].plan.source if result.rows else None)
    path = _fit_profile_path(write_profile) if write_profile else None
    _distinct_outputs([("--write-profile", path), ("--html", html_path)])  # both refused before either is written
    for out in (path, html_path):
        if out:
            _output_target(out, inputs, force)
    if write_profile and path:
        row = _fit_pick(result, pick)
        if not os.path.isabs(path) and path.startswith("profiles" + os.sep):
            os.makedirs("profiles", exist_ok=True)  # where `plan NAME` and `serve NAME` look first
        text = fitting.profile_text(row, os.path.basename(path).rsplit(".", 1)[0], result)
        _write_text(path, text, inputs=inputs, force=force)
        written = path
    if html_path:
        from launcher.report.html import fit_page_data, render_fit_html

        page = render_fit_html(fit_page_data(result))
        _write_text(html_path, page, inputs=inputs, force=force)
    if as_json:
        data = result.to_json()
        data["written_profile"] = written
        emit_json(data)
    else:
        click.echo(render_fit(result, top=None if show_all else top))
        if written:
            click.echo(f"profile: {written} (vlaunch plan {written}; vlaunch serve {written})")
        if html_path:
            click.echo(f"html: {html_path}")
    if not result.fits:
        sys.exit(EXIT_DOES_NOT_FIT)


def _fit_pick(result: Any, pick: int | None) -> Any:
    if pick is not None:
        row = next((r for r in result.rows if r.rank == pick), None)
        if row is None:
            raise VlaunchError(f"no row of rank {pick}; the search has {len(result.rows)}", field="--pick")
        return row
    row = result.chosen()
    if row is None:
        from launcher.plan.fit import NothingFits

        raise NothingFits("no option fits, so none is chosen; --pick RANK writes a row anyway", field="--write-profile")
    return row


def _plan_for_log(
    facts: Any, profile: str | None, flags: dict[str, Any], free_gib: float | None, use_calibration: bool = True
) -> Any:
    """(plan, comparison, note) for a log: the profile / --config / --model, completed by the log's own flags.

    A file that is not a vLLM log is refused here (exit 2), for `check` and `report` alike."""
    from launcher.check.compare import compare, flags_from_log, require_vllm_log
    from launcher.common.units import gib_to_bytes
    from launcher.plan.planning import make_plan

    require_vllm_log(facts)
    if not (profile or flags.get("config") or flags.get("serve_config") or flags.get("model") or _vllm_words()):
        return None, None, None
    merged = {k: v for k, v in flags_from_log(facts).items()}
    merged.update({k: v for k, v in flags.items() if v is not None})
    if not merged.get("vllm_version") and facts.vllm_version:
        merged["vllm_version"] = facts.vllm_version
    if not merged.get("machine") and facts.total_memory_gib is not None and not profile:
        merged["machine"] = "cpu" if facts.device == "cpu" else "cuda"
        merged.setdefault("gpu_memory_gib", facts.total_memory_gib)
    if not merged.get("machine") and not profile:
        return None, None, "the log states no total memory: give --machine to compare"
    p = build_profile(profile, merged)
    free = free_gib if free_gib is not None else facts.free_memory_gib
    free_bytes = None if free is None else gib_to_bytes(free)
    plan_ = make_plan(p, free_bytes=free_bytes, use_calibration=use_calibration, detect=_detect())
    return plan_, compare(plan_, facts), None


@main.command(cls=_VllmCommand)
@click.argument("log")
@click.option("--profile", "profile", metavar="PROFILE", help="Compare against this profile's plan.")
@_plan_options
def check(
    log: str, profile: str | None, as_json: bool, free_gib: float | None, no_calibration: bool, **flags: Any
) -> None:
    """Read a vLLM startup log: the numbers it states, the failure and its fix, and predicted vs logged.

    LOG `-` (or /dev/stdin) reads the log from the standard input: `docker logs vllm 2>&1 | vlaunch check -`.

    With --profile or --config/--model the log's own flags (non-default args, engine config, version, total
    memory) complete the plan, so `vlaunch check LOG --config config.json` needs nothing else.
    Failures: memory (insufficient_free_memory, kv_too_small_for_max_model_len, no_kv_memory, cuda_oom,
    worker_killed), invalid_config, and the launch environment (docker_daemon, no_gpu_runtime, no_cuda_gpu,
    driver_too_old, address_in_use, repo_access, out_of_disk).
    Exit 0: vLLM started (or the log shows no failure), 1: the log shows a failure, 2: unreadable input or not a
    vLLM log.
    """
    from launcher.check.compare import read_log, render_comparison, render_facts, require_vllm_log

    facts = require_vllm_log(read_log(log))
    out: dict[str, Any] = facts.to_json()
    plan_, comparison, note = _plan_for_log(facts, profile, flags, free_gib, not no_calibration)
    if plan_ is not None and comparison is not None:
        out["predicted"] = plan_.to_json()
        out["diff"] = comparison.to_json()
    out.setdefault("predicted", None)
    out.setdefault("diff", None)
    if note:
        out["note"] = note
    if as_json:
        emit_json(out)
    else:
        click.echo(render_facts(facts))
        if comparison is not None:
            click.echo(render_comparison(comparison))
        if note:
            click.echo(f"note: {note}")
    if facts.failure is not None:
        sys.exit(1)


@main.command(cls=_VllmCommand)
@click.argument("words", metavar="[PROFILE] [-- VLLM COMMAND…]", nargs=-1, type=click.UNPROCESSED)
@click.option("--dry-run", is_flag=True, help="Print the plan, the guard's verdict and the command; start nothing.")
@click.option("--force", is_flag=True, help="Launch even when the plan says it does not fit.")
@click.option("--verbose", "-v", is_flag=True, help="Echo every vLLM line, not only the boot stages.")
@click.option("--logs-dir", default="logs", show_default=True, help="Where run logs and records go.")
@click.option("--stop-after-ready", is_flag=True, hidden=True)
@click.option("--skip-preflight", is_flag=True,
              help="Launch without the pre-flight checks (executable, docker, GPU, machine, port, model).")  # fmt: skip
@click.option(
    "--stop-below-gib",
    type=float,
    callback=_gib_at_least_zero,
    metavar="GIB",
    help="Stop vLLM cleanly (exit 11) when the box's MemAvailable falls below GIB, before the OOM killer acts.",
)
@_plan_options
def serve(
    words: tuple[str, ...],
    dry_run: bool,
    force: bool,
    verbose: bool,
    logs_dir: str,
    stop_after_ready: bool,
    skip_preflight: bool,
    stop_below_gib: float | None,
    as_json: bool,
    free_gib: float | None,
    no_calibration: bool,
    **flags: Any,
) -> None:
    """Plan, guard, pre-flight and launch vLLM for PROFILE, check the prediction live, stop cleanly on Ctrl-C.

    With no PROFILE, no --model and no pasted command: the bundled profile for this box (`vlaunch profiles
    --default`). A vLLM command pasted after `--` is launched as planned, like `plan -- vllm serve …`.
    On unified memory (a DGX Spark, the CPU backend) a watchdog warns when MemAvailable falls below the OS
    reserve the plan kept, naming who grew; --stop-below-gib stops vLLM instead of waiting for the OOM killer.

    Exit 0 after a clean stop, 1 when vLLM fails to boot, 3 when the plan does not fit (unless --force),
    4 when another vLLM holds the box; pre-flight refusals (one line each, nothing started): 5 missing
    executable, 6 container runtime, 7 GPU, 8 machine mismatch, 9 port in use, 10 model. 11 when the
    watchdog stopped vLLM. 130 when stopped before vLLM was ready. --dry-run prints the pre-flight result
    and starts nothing.
    """
    from pathlib import Path

    from launcher.common.units import gib_to_bytes
    from launcher.plan.planning import make_plan
    from launcher.report.render import render_plan
    from launcher.run import guard, serving
    from launcher.run import preflight as pf

    profile, command = _split_command(words)
    if not (profile or command or flags.get("model") or flags.get("config") or _vllm_words()):
        from launcher.plan.machines import detect
        from launcher.plan.profiles import default_profile_path

        bundled = default_profile_path(detect()[0].name)  # the bundled file itself, never ./profiles/NAME.yaml
        profile = str(bundled)
        if not as_json:
            click.echo(f"profile: {bundled.stem} (the bundled default for this box; `vlaunch profiles` lists others)")
    request = asked(profile, flags, command)
    p = request.profile
    free = None if free_gib is None else gib_to_bytes(free_gib)
    if free is None and not p.nodes:
        free = guard.live_free_bytes(p.machine)  # the start-up check against what is free right now
    # serve runs the launch's python anyway: it may ask it for its vLLM version
    result = make_plan(p, free_bytes=free, use_calibration=not no_calibration, notes=request.notes, detect=True)
    options = serving.ServeOptions(
        logs_dir=Path(logs_dir),
        force=force,
        verbose=verbose,
        stop_after_ready=stop_after_ready,
        skip_preflight=skip_preflight,
        stop_below_bytes=None if stop_below_gib is None else gib_to_bytes(stop_below_gib),
    )
    verdict = guard.verdict()
    checked = serving.preflight_here(result, options)
    findings = pf.preflight(result) if dry_run and checked else None
    if as_json and dry_run:
        out = {"plan": result.to_json(), "guard": verdict, "argv": result.shown_argv}
        emit_json({**out, "preflight": None if findings is None else [f.to_json() for f in findings]})
    else:
        click.echo(render_plan(result, bar=_bar_style(False)))
        click.echo(f"guard: {verdict}")
        if dry_run:
            skipped = "skipped" if skip_preflight else "skipped: run it on the head node"
            for line in serving.preflight_lines(findings, skipped):
                click.echo(line)
    if p.nodes and dry_run and not as_json:
        for line in serving.cluster_dry_run_lines(result):
            click.echo(line)
    refused = serving.refusal(result, verdict, force=force, dry_run=dry_run)
    if refused is not None:
        click.echo(f"vlaunch: {refused.line}", err=True)
        sys.exit(refused.code)
    if dry_run:
        return
    if checked:
        findings = pf.preflight(result)
        refusals = pf.refusals(findings)
        if refusals:  # one line each, in check order; the exit code is the first one's; nothing is written
            for w in pf.warnings(findings):
                click.echo(f"vlaunch: warning: {w.line()}", err=True)
            for r in refusals:
                click.echo(f"vlaunch: error: {r.line()}", err=True)
            sys.exit(refusals[0].code)
        for line in serving.preflight_lines(findings, ""):
            click.echo(line)
    run = serving.launch(result, options, echo=click.echo)
    if run.error:
        click.echo(f"vlaunch: error: {run.error}", err=True)
    if run.warning:
        click.echo(f"vlaunch: warning: {run.warning}", err=True)
    if run.record_path is not None:
        click.echo(f"run record: {run.record_path}")
    sys.exit(run.exit_code)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def ps(as_json: bool) -> None:
    """List the vLLM servers on this box, including ones vlaunch did not start."""
    from launcher.common.chars import escaped
    from launcher.run import guard

    holder = guard.read_holder()
    instances = guard.scan()
    if as_json:
        emit_json({"lock": holder, "instances": [i.to_json() for i in instances]})
        return
    if holder:
        shown = {k: "?" if holder.get(k) is None else escaped(holder[k]) for k in ("profile", "log", "host")}
        click.echo(
            f"vlaunch lock: profile '{shown['profile']}', vlaunch pid {holder.get('pid')}, "
            f"vLLM pid {holder.get('vllm_pid')}, port {holder.get('port')}, log {shown['log']}"
            + ("" if guard.holder_here(holder) else " (not proven: another pid namespace, or its pid is gone)")
        )
    if not instances:
        click.echo("no vLLM processes on this box")
    for i in instances:
        left = f"  [orphan of run {escaped(i.orphan_of)}]" if i.orphan else ""
        click.echo(f"{i.pid:>8}  {i.role:<8} {i.rss_bytes / 2**30:6.2f} GiB  {escaped(i.command)[:100]}{left}")
    if any(i.orphan for i in instances):
        click.echo("orphans: left by a vlaunch serve that is gone; `vlaunch stop --orphans` stops them")


def _stop_timeout(ctx: click.Context, param: click.Parameter, value: float) -> float:
    import math

    if not (math.isfinite(value) and 0 < value <= 3600):
        raise click.BadParameter(f"must be a number of seconds above 0 and at most 3600, got {value}")
    return value


def _still_running(alive: list[int], denied: list[int]) -> None:
    """`stop` fails (exit 4, one line) when anything it meant to stop still runs."""
    from launcher.run.guard import GuardError

    if denied:
        raise GuardError(f"cannot signal pid {denied[0]}: operation not permitted" + (
            f" (nor {', '.join(map(str, denied[1:]))})" if denied[1:] else ""))  # fmt: skip
    if alive:
        raise GuardError(f"still alive after the stop: pid {', '.join(map(str, alive))}")


@main.command()
@click.argument("target", required=False)
@click.option("--timeout", default=30.0, show_default=True, callback=_stop_timeout,
              help="Seconds to wait before killing (above 0, at most 3600).")  # fmt: skip
@click.option("--orphans", is_flag=True, help="Stop every vLLM process left by a vlaunch serve that is gone.")
def stop(target: str | None, timeout: float, orphans: bool) -> None:
    """Stop a vLLM server: by profile name, by pid, or the one vlaunch is running when none is given;
    --orphans: the vLLM processes a `vlaunch serve` that died left running (`vlaunch ps` marks them).
    Exits 4 when something it was to stop still runs or may not be signalled."""
    from launcher.common.chars import escaped
    from launcher.common.errors import VlaunchError
    from launcher.run import guard, serving

    if orphans:
        if target is not None:
            raise click.UsageError("--orphans stops every orphan; it takes no TARGET")
        done = guard.stop_orphans(timeout)
        if not done.stopped:
            click.echo("no orphaned vLLM processes on this box")
            return
        gone = [p for p in done.stopped if p not in done.alive]
        if gone:
            click.echo(f"stopped {len(gone)} orphaned process(es): {', '.join(map(str, gone))}")
        for box in done.containers:
            click.echo(f"killed container {escaped(box)}")
        _still_running(done.alive, done.denied)
        return
    holder = guard.read_holder()
    names = (holder.get("profile"), str(holder.get("pid"))) if holder and holder.get("pid") is not None else ()
    if target is None or target in names:
        if not holder:
            raise VlaunchError("no vlaunch-managed server is running; give a PID (see `vlaunch ps`)")
        left = serving.stop_holder(holder, timeout)
        _still_running(left.alive, left.denied)
        click.echo(f"stopped {escaped(holder.get('profile'))} (vlaunch pid {holder.get('pid')})")
        return
    if not (target.isascii() and target.isdigit()):  # "١٢٣".isdigit() too, and int() would read it as pid 123
        raise VlaunchError(f"no running server for profile {escaped(target)!r} (see `vlaunch ps`)")
    left = serving.stop_pid(int(target), timeout)
    _still_running(left.alive, left.denied)
    click.echo(f"stopped pid {int(target)}")


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


def _profile_description(path: object) -> str:
    import os.path
    import stat

    from launcher.common.errors import VlaunchError as _E
    from launcher.plan.profiles import load_profile

    if not isinstance(path, str) or not path:
        return ""
    try:  # a path found inside an input file: read it only when it is a regular file
        if not stat.S_ISREG(os.stat(path).st_mode):
            return ""
        return load_profile(path).description
    except (_E, OSError):
        return ""


@main.command()
@click.argument("source", metavar="RUN.json|LOG")
@click.option("--html", "html_path", metavar="FILE", required=True, help="Where to write the HTML page.")
@click.option("--profile", "profile", metavar="PROFILE", help="For a LOG: compare against this profile's plan.")
@click.option("--force", is_flag=True, help=_FORCE_HELP)
@_plan_options
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
    from launcher.report.html import page_data, render_html

    record = _read_run_record(source)
    plan_ = None
    if record is not None:
        predicted = record["predicted"]
        diff = record.get("diff") if isinstance(record.get("diff"), dict) else None
        logged = record.get("logged") if isinstance(record.get("logged"), dict) else None
        description = _profile_description(record.get("profile_path"))
        if profile:
            from pathlib import Path

            from launcher.plan.profiles import load_profile, resolve_profile_arg

            description = load_profile(resolve_profile_arg(profile, Path.cwd() / "profiles")).description
    else:
        from launcher.check.compare import read_log

        facts = read_log(source)
        plan_, comparison, note = _plan_for_log(facts, profile, flags, free_gib, not no_calibration)
        if plan_ is None or comparison is None:
            raise VlaunchError(note or "a log needs a plan to draw: give --profile, --config or --model", source=source)
        predicted, diff, logged = plan_.to_json(), comparison.to_json(), facts.to_json()
        description = plan_.profile.description
    try:
        data = page_data([predicted], description=description, diff=diff, logged=logged)
    except KeyError as e:
        raise VlaunchError(f"not a run record: the predicted plan lacks {e}", source=source) from None
    except (TypeError, ValueError, ArithmeticError) as e:
        raise VlaunchError(f"not a run record: {e}", source=source) from None
    read = [source, *(str(record[k]) for k in ("log", "profile_path") if record and isinstance(record.get(k), str))]
    read += _report_inputs(profile, flags, plan_)
    _write_text(html_path, render_html(data), inputs=read, force=force)
    if as_json:
        emit_json({"html": html_path, **data})
    else:
        click.echo(f"html: {html_path}")
    if logged and logged.get("failure"):
        sys.exit(1)


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
        found += _inputs(plan_.profile, source=plan_.source)
    return found


@main.command(cls=_VllmCommand)
@click.argument("words", metavar="[PROFILE] [-- VLLM COMMAND…]", nargs=-1, type=click.UNPROCESSED)
@click.option("--as", "kind", required=True, type=click.Choice(["script", "systemd", "docker", "vllm-config"]),
              help="script: bash launch script; systemd: a unit file; docker: `docker run` for NVIDIA's vLLM "
              "container; vllm-config: YAML for `vllm serve --config`.")  # fmt: skip
@click.option("-o", "--output", metavar="FILE", help="Write to FILE instead of stdout.")
@click.option("--force", is_flag=True, help=_FORCE_HELP)
@_plan_options
def render(
    words: tuple[str, ...],
    kind: str,
    output: str | None,
    force: bool,
    as_json: bool,
    free_gib: float | None,
    no_calibration: bool,
    **flags: Any,
) -> None:
    """Render PROFILE's planned launch as a script, a systemd unit, a docker command or a vLLM config file.

    The values come from the plan (gpu_memory_utilization included), quoted for the target. Exit 3 when the
    plan does not fit (the file is written all the same, with a warning).
    """
    from launcher.common.units import gib_to_bytes
    from launcher.plan.planning import make_plan
    from launcher.report.templating import render_launch

    profile, command = _split_command(words)
    request = asked(profile, flags, command)
    p = request.profile
    free = None if free_gib is None else gib_to_bytes(free_gib)
    result = make_plan(p, free_bytes=free, use_calibration=not no_calibration, notes=request.notes, detect=_detect())
    try:
        text = render_launch(result, kind)
    except ValueError as e:
        raise VlaunchError(str(e)) from None
    if output:
        _write_text(output, text, inputs=_inputs(p, profile, *request.inputs, source=result.source), force=force)
    if as_json:
        emit_json({"as": kind, "output": output, "fits": result.fits, "text": text})
    elif not output:
        click.echo(text, nl=False)
    if not result.fits:
        click.echo(f"vlaunch: warning: the plan does not fit on {result.machine.name}", err=True)
        sys.exit(EXIT_DOES_NOT_FIT)


@main.command()
@click.argument("paths", nargs=-1)
@click.option("--hf-config-path", "--config", "config", metavar="FILE",
              help="config.json of the model in the LOGs (for raw logs; vLLM's --hf-config-path).")  # fmt: skip
@click.option("--model", "model", metavar="ID", help="Model of the LOGs, when they do not name one vlaunch knows.")
@click.option("--dry-run", is_flag=True, help="Fit and print, but do not store.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def calibrate(paths: tuple[str, ...], config: str | None, model: str | None, dry_run: bool, as_json: bool) -> None:
    """Fit the measured terms (activation, non-torch, CUDA graphs, CPU worker memory) from runs and logs.

    PATHS are run records (logs/*.json, the default) or vLLM logs from anywhere. Terms are grouped by machine
    and vLLM version and stored in $XDG_CONFIG_HOME/vlaunch/calibration.yaml; `plan` then uses the matching
    group and says so. A group from another machine or version is never applied.
    """
    from pathlib import Path

    from launcher.check.compare import flags_from_log, read_log
    from launcher.common.errors import VlaunchError
    from launcher.plan import calibration
    from launcher.plan.planning import make_plan

    files: list[Path] = []
    for p in paths or ("logs",):
        path = Path(p)
        if path.is_dir():
            files += sorted(path.glob("*.json")) + ([] if paths == () else sorted(path.glob("*.log")))
        elif path.exists():
            files.append(path)
        else:
            raise VlaunchError("no such file or directory", source=p)
    samples: list[calibration.Sample] = []
    skipped: list[str] = []
    for f in files:
        if f.suffix == ".json":
            from launcher.common.files import read_small

            try:
                record = json.loads(read_small(f))
            except VlaunchError as e:
                skipped.append(e.one_line())
                continue
            except (ValueError, RecursionError):  # not JSON, not UTF-8, digits past int's limit, nested too deep
                skipped.append(f"{f}: not a run record")
                continue
            s = calibration.sample_from_record(record, str(f)) if isinstance(record, dict) else None
        else:
            facts = read_log(str(f))
            if not facts.started:
                skipped.append(f"{f}: the launch did not start")
                continue
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
                continue
            try:
                plan_ = make_plan(build_profile(None, merged), live=False, use_calibration=False)
            except VlaunchError as e:
                skipped.append(f"{f}: {e.one_line()}")
                continue
            s = calibration.Sample(
                calibration.machine_key(plan_.machine.name, plan_.machine.total_bytes),
                facts.vllm_version or "?",
                plan_.to_json(),
                facts.to_json(),
                str(f),
            )
        if s is None:
            skipped.append(f"{f}: not a run record")
            continue
        samples.append(s)
    groups: dict[tuple[str, str], list[calibration.Sample]] = {}
    for s in samples:
        groups.setdefault((s.machine, s.version), []).append(s)
    ignored: list[str] = []  # a run's term outside its physical bounds, naming the run
    fitted = {k: calibration.fit(v, ignored) for k, v in groups.items()}
    stored = None
    if fitted and not dry_run:
        stored = calibration.save_terms(fitted)
    if as_json:
        emit_json(
            {
                "groups": [{"machine": m, "vllm_version": v, **t} for (m, v), t in fitted.items()],
                "skipped": skipped,
                "ignored": ignored,
                "stored": str(stored) if stored else None,
            }
        )
        return
    for (m, v), t in fitted.items():
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
        click.echo(f"{m}, vLLM {v}: " + ", ".join(parts))
    for why in skipped:
        click.echo(f"skipped {why}")
    for note in ignored:
        click.echo(note)
    if not fitted:
        click.echo("nothing to calibrate from")
    elif stored:
        click.echo(f"stored in {stored}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
