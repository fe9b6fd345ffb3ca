"""What the commands print and write: exit codes, strict JSON, the memory bar's style, and output files that never
overwrite a command's own inputs."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from typing import Any

import click

from launcher.common.errors import VlaunchError

EXIT_OK = 0
EXIT_USAGE = 2  # bad input: unreadable file, malformed config, unknown name
EXIT_DOES_NOT_FIT = 3
EXIT_INTERNAL = 70
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what the shell reports for any tool whose reader closed the pipe early


JSON_SCHEMA = 1
"""The version of every command's --json output, first key `schema`: keys are only ever added within a version; a
key renamed or removed, or a unit changed, raises it."""


def emit_json(data: object) -> None:
    """`data` as strict JSON, an object led by `"schema": JSON_SCHEMA`: a lone surrogate (an undecodable byte of a
    file name or process title, kept by Python as U+DC80..U+DCFF) is written as the text `\\xNN`; JSON's `\\udcNN`
    for it is refused by strict parsers."""
    if isinstance(data, dict) and "schema" not in data:
        data = {"schema": JSON_SCHEMA, **data}
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


def bar_style(ascii_bar: bool) -> Any:
    """Unicode blocks on a terminal that can show them; plain ASCII in pipes, files, CliRunner or with --ascii."""
    out = sys.stdout
    if ascii_bar or not out.isatty():
        return "ascii"
    try:
        "█▓▒░▞·╳◀".encode(getattr(out, "encoding", None) or "ascii")
    except (UnicodeEncodeError, LookupError):
        return "ascii"
    return "unicode"


def inputs_of(p: Any, *more: object, source: Any = None) -> list[str]:
    """The files a command read: the profile, the config.json, the serve YAML, a log or a run record, the model's
    files (`model_files`) and the calibration store."""
    from launcher.plan.calibration import calibration_path

    found = [getattr(p, "source", None), getattr(p, "config", None), *more, str(calibration_path())]
    found += model_files(p, source)
    return [str(x) for x in found if isinstance(x, str | os.PathLike) and str(x)]


_CHECKPOINT_FILES = (".safetensors", ".safetensors.index.json", ".gguf", "hf_quant_config.json", "config.json")
_MAX_MODEL_FILES = 10_000


def model_files(p: Any, source: Any = None) -> list[str]:
    """The model's files a plan reads: every file of a model directory (or Hugging Face snapshot) it was given
    (config.json, safetensors shards and index, GGUF, tokenizer); beside a config.json given as a file, the
    checkpoint files the plan looks for there. `source` is the plan's ModelSource, when there is one."""
    folder, whole = getattr(source, "model_dir", None), getattr(source, "origin", "") in ("directory", "hf-cache")
    if source is None:
        folder, whole = _model_folder(p)
    if not folder:
        return []
    try:
        with os.scandir(folder) as it:
            names = [e.name for _, e in zip(range(_MAX_MODEL_FILES), it, strict=False)]
    except (OSError, ValueError):
        return []
    return [os.path.join(folder, n) for n in names if whole or n.endswith(_CHECKPOINT_FILES)]


def _model_folder(p: Any) -> tuple[str | None, bool]:
    """The folder of the model a profile names (its config.json's, or the model directory's), and whether all of
    its files are the model's."""
    from launcher.common.files import expand_user

    model, config = getattr(p, "model", None), getattr(p, "config", None)
    with contextlib.suppress(VlaunchError, OSError, ValueError):
        if isinstance(config, str) and config:
            return os.path.dirname(os.path.abspath(expand_user(config))), False
        if isinstance(model, str) and os.path.isdir(expand_user(model)):
            return expand_user(model), True
        if isinstance(model, str) and os.path.isfile(expand_user(model)):
            return os.path.dirname(os.path.abspath(expand_user(model))), False
    return None, False


def output_target(path: str, inputs: tuple[str, ...] | list[str], force: bool) -> str:
    """The absolute path an output goes to, refused (one line) when it is one of the command's inputs, not a
    regular file, or an existing file without --force."""
    from launcher.common.files import expand_user

    target = os.path.abspath(expand_user(path))
    for given in inputs:
        if same_file(target, os.path.expanduser(given)):
            raise VlaunchError(f"is an input of this command ({given}); choose another output file", source=path)
    kind = _not_a_regular_file(target)
    if kind:  # /dev/null, a FIFO, a directory (or a link to one): a rename would replace it, not write to it
        raise VlaunchError(f"is {kind}, not a regular file; choose another output file", source=path)
    if os.path.lexists(target) and not force:
        what = "a symlink" if os.path.islink(target) else "an existing file"
        raise VlaunchError(f"{what}; pass --force to overwrite it", source=path)
    return target


def same_file(a: str, b: str) -> bool:
    """Whether two paths name one file: by resolved path, or by device and inode (hard links, bind mounts)."""
    if "\x00" in a or "\x00" in b:  # no file has such a name: it is nothing the other names
        return False
    same = os.path.realpath(a) == os.path.realpath(b)
    with contextlib.suppress(OSError, ValueError):
        same = same or os.path.samefile(a, b)
    return same


def distinct_outputs(outputs: list[tuple[str, str | None]]) -> None:
    """Refuse, before anything is written, two of a command's outputs (flag, path) that name one file."""
    given = [(flag, path) for flag, path in outputs if path]
    for i, (flag, path) in enumerate(given):
        for other, path2 in given[:i]:
            if same_file(os.path.abspath(os.path.expanduser(path)), os.path.abspath(os.path.expanduser(path2))):
                raise VlaunchError(f"{other} and {flag} name the same file; give each its own", source=path)


def write_text(path: str, text: str, *, inputs: tuple[str, ...] | list[str] = (), force: bool = False) -> None:
    """Write an output file: never over one of the command's inputs, over an existing file only with --force,
    and never through a symlink (the link is replaced, its target left alone); a reader sees the old file or the
    new one, never half of one."""
    from launcher.common.files import write_atomic

    target = output_target(path, inputs, force)
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
