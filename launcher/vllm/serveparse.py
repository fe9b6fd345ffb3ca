"""How `vllm serve` reads the words after `serve`: its FlexibleArgumentParser's rewrites, then argparse over the
option table of the release that runs (launcher/vllm/interface), as vLLM's CLI does it.

`rewrite` is FlexibleArgumentParser.parse_args before argparse (vllm/utils/argparse_utils.py): `--model X` moved
to the positional, underscores in option names read as dashes, `-O3` as `--optimization-level 3`, dotted keys
(`--speculative-config.method mtp`) merged into one JSON argument. `parse` then lets Python's argparse read the
result with the release's own options — every spelling and alias, unique prefixes (argparse's allow_abbrev),
nargs, `--x / --no-x` — and converts each value with vLLM's type (launcher/vllm/convert.py). What vLLM's parser
refuses is refused here, in one line.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from launcher.common.errors import VlaunchError
from launcher.common.records import dataclass
from launcher.vllm import convert
from launcher.vllm.interface import Flag, Interface


class ServeArgError(VlaunchError):
    """`vllm serve` would refuse these arguments (argparse's error, or a value its type refuses)."""


@dataclass(frozen=True)
class Given:
    """One option as the command gives it, in order."""

    flag: Flag
    spelling: str  # the option string argparse matched (a prefix is expanded to it)
    raw: tuple[str, ...] | None  # the strings it took; None for a switch, or `?` given no value
    value: Any  # what vLLM's type made of them

    @property
    def dest(self) -> str:
        return self.flag.dest


@dataclass(frozen=True)
class ServeArgs:
    """What `vllm serve` reads from a command line: the options given, in order, and their values."""

    interface: Interface
    given: tuple[Given, ...]
    unknown: tuple[str, ...]  # words no option of this release takes (vLLM refuses them)

    @property
    def values(self) -> dict[str, Any]:
        """dest -> value as argparse leaves it: the last occurrence wins; `append` options accumulate."""
        out: dict[str, Any] = {}
        for g in self.given:
            if g.flag.action == "append":
                out[g.dest] = [*out.get(g.dest, []), g.value]
            else:
                out[g.dest] = g.value
        return out

    @property
    def model(self) -> str | None:
        """The model vLLM serves: the positional, else --model (vLLM's default model when neither is given)."""
        v = self.values
        return v.get("model_tag") or v.get("model")


# ---- FlexibleArgumentParser's rewrites -------------------------------------------------------------------------


def _move_model(args: list[str]) -> list[str]:
    """`vllm serve … --model X …` -> `vllm serve X …` (the first --model only)."""
    for i, arg in enumerate(args):
        if arg == "--model" or arg.startswith("--model="):
            if arg == "--model":
                if i + 1 >= len(args):
                    return args  # argparse says "expected one argument"
                tag, rest = args[i + 1], i + 2
            else:
                tag, rest = arg[len("--model=") :], i + 1
            return [tag, *args[:i], *args[rest:]]
    return args


def _dashes(arg: str) -> str:
    """`--max_model_len=8k` -> `--max-model-len=8k`: underscores between `--` and the first `.` of the name."""
    key, eq, value = arg.partition("=")
    head, dot, tail = key[2:].partition(".")
    return "--" + head.replace("_", "-") + dot + tail + eq + value


def _o_levels(args: list[str], features: Mapping[str, Any]) -> list[str]:
    """`-O3`, `-O=3`, `-O 3`: `--optimization-level 3` (vLLM ≥ 0.12), or a key of the compilation config whose short
    spelling `-O` was (`-O.level=3` in 0.10, `-O.mode=3` in 0.11); `-O.x` is `-cc.x` in 0.12."""
    flag, key = features.get("o_flag"), features.get("o_level_key")
    if flag is None:
        return args
    out: list[str] = []
    for i, arg in enumerate(args):
        digit_next = arg == "-O" and i + 1 < len(args) and args[i + 1] in ("0", "1", "2", "3")
        if arg.startswith("-O.") and features.get("o_dotted") == "compilation_config" and flag == "optimization_level":
            out.append("-cc." + arg[3:])
        elif arg.startswith("-O") and arg != "-O" and not arg.startswith("--") and not arg.startswith("-O."):
            level = arg[3:] if arg[2] == "=" else arg[2:]
            out += ["--optimization-level", level] if flag == "optimization_level" else [f"-O.{key}={level}"]
        elif digit_next and features.get("o_separate", True):
            out.append("--optimization-level" if flag == "optimization_level" else f"-O.{key}")
        elif flag == "optimization_level" and arg.startswith("-O") and arg != "-O" and not arg.startswith("--"):
            out += ["--optimization-level", arg[2:]]  # `-O.mode` in 0.13+: a level named ".mode"
        else:
            out.append(arg)
    return out


def _nested(keys: list[str], value: Any) -> Any:
    for key in reversed(keys):
        value = {key: value}
    return value


def _update(original: dict[str, Any], update: Mapping[str, Any]) -> None:
    """vLLM's recursive_dict_update: dicts merge, lists extend, anything else is replaced."""
    for k, v in update.items():
        if isinstance(v, dict) and isinstance(original.get(k), dict):
            _update(original[k], v)
        elif isinstance(v, list) and isinstance(original.get(k), list):
            original[k] += v
        else:
            original[k] = v


def _dotted_value(text: str, human: bool) -> Any:
    """A dotted key's value: JSON, else (vLLM ≥ 0.20) a human-readable integer, else the text."""
    try:
        return json.loads(text)
    except ValueError:
        if not human:
            return text
        try:
            return convert.human_int(text)
        except ValueError:
            return text


def _merge_dotted(args: list[str], human: bool) -> list[str]:
    """`--x.a 1 --x.b.c=2` -> `--x '{"a": 1, "b": {"c": 2}}'` (appended at the end, as vLLM does); `--x.l+ a,b`
    appends list items."""
    drop: set[int] = set()
    merged: dict[str, dict[str, Any]] = {}
    for i, arg in enumerate(args):
        if i in drop or not arg.startswith("-") or "." not in arg or (arg.startswith("--") and "." not in arg):
            continue
        if "=" in arg:
            name, text = arg.split("=", 1)
            if "." not in name:
                continue  # the dot was in the value
        else:
            if i + 1 >= len(args):
                raise ServeArgError(f"{arg} needs a value")
            name, text = arg, args[i + 1]
            drop.add(i + 1)
        if name.endswith("+"):
            name, text = name[:-1], json.dumps(text.split(","))
        key, *keys = name.split(".")
        _update(merged.setdefault(key, {}), _nested(keys, _dotted_value(text, human)))
        drop.add(i)
    out = [a for i, a in enumerate(args) if i not in drop]
    for key, value in merged.items():
        out += [key, json.dumps(value)]
    return out


def _served_name_without_model(args: list[str]) -> bool:
    """vLLM refuses `vllm serve --served-model-name X …` whose first word is an option (no --config)."""
    if not args or not args[0].startswith("-"):
        return False
    if any(a == "--config" or a.startswith("--config=") for a in args):
        return False
    return any(re.match(r"^--served[-_]model[-_]name(=.+|$)", a) for a in args)


def rewrite(args: Sequence[str], features: Mapping[str, Any], *, serve: bool = True, pasted: bool = True) -> list[str]:
    """The words after `vllm serve` as FlexibleArgumentParser hands them to argparse. `pasted`: a whole command,
    whose first word is the model (False for vLLM options given to vlaunch itself)."""
    out = list(args)
    if serve and pasted and features.get("model_option") == "rejected" and "--model" in out:
        raise ServeArgError(
            "With `vllm serve`, you should provide the model as a positional argument instead of via the `--model` "
            "option."
        )
    if serve and features.get("model_option_moves"):
        out = _move_model(out)
    if serve and pasted and features.get("served_name_needs_positional") and _served_name_without_model(out):
        raise ServeArgError(
            "`model` should be provided as the first positional argument when using `vllm serve`. i.e. "
            "`vllm serve <model> --<arg> <value>`."
        )
    if features.get("underscores"):
        out = [_dashes(a) if a.startswith("--") else a for a in out]
    out = _o_levels(out, features)
    if features.get("dotted_keys"):
        out = _merge_dotted(out, bool(features.get("dotted_human_int", True)))
    return out


# ---- argparse over the release's table --------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise ServeArgError(message)


class _Formatter(argparse.HelpFormatter):
    """A fixed width: argparse's default asks the terminal (importing shutil) for every option added."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, width=100)


class _Record(argparse.Action):
    """Keeps what argparse matched, in order; values are converted afterwards with vLLM's types."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        seen = namespace.__dict__.setdefault("_seen", [])
        seen.append((self.dest, option_string, values))


_PARSERS: dict[tuple[int, ...], tuple[_Parser, dict[str, Flag]]] = {}


def _argparser(iface: Interface) -> tuple[_Parser, dict[str, Flag]]:
    """argparse built from the table: each option recorded raw (vLLM's types and choices applied afterwards)."""
    key = iface.version
    if key in _PARSERS:
        return _PARSERS[key]
    abbrev = bool(iface.features.get("allow_abbrev", True))
    p = _Parser(prog="vllm serve", add_help=False, allow_abbrev=abbrev, formatter_class=_Formatter)
    slots: dict[str, Flag] = {}
    for i, flag in enumerate(iface.flags):
        slot = f"f{i}"
        slots[slot] = flag
        nargs = 0 if not flag.takes_value else flag.nargs
        if not flag.spellings:
            p.add_argument(slot, nargs=nargs or "?", action=_Record, default=argparse.SUPPRESS)
        else:
            p.add_argument(*flag.spellings, dest=slot, nargs=nargs, action=_Record, default=argparse.SUPPRESS)
    _PARSERS[key] = (p, slots)
    return p, slots


def _typed(flag: Flag, spelling: str, raw: Any) -> tuple[tuple[str, ...] | None, Any]:
    """(the strings given, vLLM's value) for one occurrence."""
    if flag.switch:
        return None, not flag.is_negative(spelling)
    if flag.action in ("store_true", "store_false", "store_const") or not flag.takes_value:
        return None, {"store_true": True, "store_false": False}.get(flag.action, flag.const)
    if raw is None:  # nargs="?" given without a value
        return None, flag.const
    strings = tuple(raw) if isinstance(raw, list) else (raw,)
    values = []
    for s in strings:
        try:
            v = convert.convert(flag.type, s)
        except ValueError as e:
            raise ServeArgError(f"argument {spelling}: {e}") from None
        if flag.choices is not None and v is not None and v not in flag.choices:
            shown = ", ".join(map(repr, flag.choices))
            raise ServeArgError(f"argument {spelling}: invalid choice: {v!r} (choose from {shown})")
        values.append(v)
    return strings, values if isinstance(raw, list) else values[0]


def parse(args: Sequence[str], iface: Interface, *, serve: bool = True, pasted: bool = True) -> ServeArgs:
    """The words after `vllm serve` (or after `python -m vllm.entrypoints.openai.api_server`, `serve=False`) as vLLM
    `iface.version` reads them. Raises ServeArgError for what its parser refuses; words no option of this release
    takes are returned in `unknown` for the caller to place."""
    words = rewrite(args, iface.features, serve=serve, pasted=pasted)
    parser, slots = _argparser(iface)
    try:
        ns, unknown = parser.parse_known_args(words)
    except argparse.ArgumentError as e:
        raise ServeArgError(str(e)) from None
    given = []
    for slot, spelling, raw in getattr(ns, "_seen", []):
        flag = slots[slot]
        strings, value = _typed(flag, spelling or "", raw)
        given.append(Given(flag, spelling or flag.dest, strings, value))
    return ServeArgs(iface, tuple(given), tuple(unknown))
