"""The vlaunch command line: parse, call the library, print. Errors become one line and an exit code."""

from __future__ import annotations

import codecs
import contextlib
import errno
import importlib
import io
import os
import sys
from typing import Any

import click

from launcher import __version__
from launcher.cli.output import EXIT_BROKEN_PIPE, EXIT_DOES_NOT_FIT, EXIT_INTERNAL, EXIT_OK, EXIT_USAGE
from launcher.common.errors import VlaunchError

__all__ = ["COMMANDS", "EXIT_BROKEN_PIPE", "EXIT_DOES_NOT_FIT", "EXIT_INTERNAL", "EXIT_OK", "EXIT_USAGE", "main"]

# Every command, each in launcher/cli/<name>.py as the function <name>. A command's module is imported when the
# command is looked up, so `vlaunch plan` reads only plan's (cold start) and `--help` reads them all.
COMMANDS = (
    "archs", "calibrate", "check", "count", "demo", "fit", "plan", "profiles", "ps", "render", "report", "serve",
    "stop",
)  # fmt: skip

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

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in COMMANDS and cmd_name not in self.commands:
            self.add_command(getattr(importlib.import_module(f"launcher.cli.{cmd_name}"), cmd_name))
        return super().get_command(ctx, cmd_name)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except click.exceptions.NoSuchCommand as e:  # "did you mean" among every command, loaded or not
            raise click.exceptions.NoSuchCommand(e.command_name, possibilities=COMMANDS, ctx=ctx) from None

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


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show full tracebacks instead of one-line errors.")
@click.version_option(__version__, prog_name="vlaunch")
def main(debug: bool) -> None:
    """Size, launch and verify vLLM servers.

    vlaunch counts a model's parameters from its config.json, predicts every memory bucket and vLLM's
    KV-cache pool before launch, and checks the prediction against what vLLM logs.
    """
