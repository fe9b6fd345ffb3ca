"""Write launcher/vllm/interface/v<version>.json: the whole `vllm serve` interface of one vLLM release, read from
vLLM's own argument parser (`make_arg_parser(FlexibleArgumentParser())`): every option's spellings, dest, action,
nargs, type, choices, default, const, deprecation and config group, plus how its FlexibleArgumentParser rewrites
a command line, found by asking the parser itself.

Run with a python that imports the vLLM to describe (the CPU build in .venv-vllm is vLLM 0.32):
    .venv-vllm/bin/python scripts/vllm_interface.py            # writes the table of the installed vLLM
    .venv-vllm/bin/python scripts/vllm_interface.py --check    # exit 1 when the committed table differs
    .venv-vllm/bin/python scripts/vllm_interface.py --stdout   # print it instead
    .venv-vllm/bin/python scripts/vllm_interface.py --release 0.10.1.1 [--release …]   # another release
    .venv-vllm/bin/python scripts/vllm_interface.py --release all   # every release in RELEASES

`--release X` downloads vLLM X's wheel from PyPI (`pip download vllm==X --no-deps --only-binary :all:`; the sdist
cannot be fetched that way: pip prepares its metadata, which needs vLLM's whole build toolchain), unpacks its
Python files under .cache/vllm-interface/src/X (compiled extensions are left out) and runs this script again with
VLLM_SOURCE pointing there: the release's own sources are imported first on sys.path, with this interpreter's
dependencies. The parser is what the release declares; nothing it declares is changed.

Stubs, used only with VLLM_SOURCE (each table's SOURCE names the ones the release consulted):
  dist-version  importlib.metadata.version("vllm") answers "<release>+cpu". An unpacked wheel has no installed
                distribution; the release reads its version through it, and its CPU platform check
                (`vllm_version_matches_substr("cpu")` in vllm/platforms/__init__.py) then selects the CPU platform,
                as the CPU build the 0.32 table comes from does. Without a platform, the parser cannot be built
                (DeviceConfig's default raises "Failed to infer device type").
  older dependencies  EXTRA_DEPS, packages the release imports that .venv-vllm lacks (pip-installed into
                .cache/vllm-interface/deps, last on sys.path).
  VLLM_PLUGINS=""  set, so that the entry-point plugins .venv-vllm's vLLM 0.32 distribution registers (its own LoRA
                resolvers, modules another release does not have) are not loaded into another release.

Actions: store, store_true, store_false, store_const, append, count, version, custom:<class>, "bool"
(argparse.BooleanOptionalAction: `--x` sets True, `--no-x` False) and "enable_disable" (vLLM's EnableDisableAction,
0.33+: `--enable-x` pairs with `--disable-x`, and the `--no-` forms stay accepted though help hides them; the row's
`const` column lists the spellings that set False, the others set True). A row's spellings are every option string
the parser maps to the option, hidden ones included.

FEATURES: what the release's FlexibleArgumentParser.parse_args does to the words of `vllm serve …` before argparse
reads them. Each is found by handing the parser a probe and capturing the words it passes on to argparse
(`_rewritten`), never from the version number:
  allow_abbrev       argparse takes unique prefixes of long options (`--max-num-s 4`).
  underscores        `--max_num_seqs 7` reads as `--max-num-seqs 7` (underscores between `--` and the first `.`).
  dotted_keys        `--x.a.b 1` is merged into `--x '{"a": {"b": 1}}'` (all dotted words of one option merged into
                     one JSON object, appended after the other words).
  dotted_list_plus   `--x.a+ p,q` gives the list `{"a": ["p", "q"]}` (values of repeated `key+` words accumulate).
  dotted_human_int   a dotted value that is not JSON but a human-readable integer (`--x.a 1k`) becomes 1000.
  o_flag             the option `-O3` sets: "optimization_level" (`--optimization-level 3`), "compilation_config"
                     (`-O '{"level": 3}'`, -O being the compilation config's short spelling), None when untouched.
  o_level_key        with o_flag "compilation_config": the key `-O3` writes into it ("level" or "mode"); else None.
  o_separate         `-O 3` (a separate digit 0-3) reads as `-O3`.
  o_dotted           the option `-O.key v` is a dotted key of ("compilation_config": `-O '{"key": v}'`, or in 0.12
                     `-cc '{"key": v}'` with a deprecation warning), None when `-O.key` is no dotted key.
  model_option       `vllm serve --model M …`: "moved" (becomes `vllm serve M …`), "rejected" (a ValueError), or
                     "kept" (left to argparse as the --model option).
  model_option_moves model_option == "moved" (kept for readers of the first tables).
  served_name_needs_positional  `vllm serve --served-model-name x …` without a positional model is a ValueError.
  config_yaml        `--config FILE.yaml` is read and its keys inserted as `--key value` words after the model.
  config_false       what a YAML `false` for a `--x/--no-x` option becomes: "no_flag" (`--no-x`), "dropped" (nothing)
                     or "string" (`--x False`).
  config_list        what a YAML list becomes: "words" (`--x a b`) or "string" (`--x "['a', 'b']"`).
  config_dict        what a YAML mapping becomes: "json" (`--x '{"a": 1}'`) or "string" (`--x "{'a': 1}"`).
  module_config_order  with `python -m vllm.entrypoints.openai.api_server` (the serve parser reading the words
                     itself), where the YAML's words go: "first" (before every command-line word, so the command
                     line wins), "after_first_word" (after the first word, which splits an `--opt value` pair that
                     starts the command), "other".
  module_config_false  config_false for that entry point (its parser holds the `--no-x` spellings itself).
  help_keyword       `--help=WORD` is read as `--help` that searches the options for WORD.

Type names (`type_name`), each standing for one vLLM argparse `type` callable and its exact behaviour:
  str, int, float          Python's own.
  json                     json.loads (also through parse_type(json.loads)).
  human_int                human_readable_int: k/m/g/t ×1000ⁿ (decimals allowed), K/M/G/T ×1024ⁿ (integers only).
  human_int_kmg            human_readable_int of releases without the t/T suffixes ('1t' and '1T' are refused).
  human_int_or_auto        human_readable_int_or_auto: '-1' or 'auto' (any case) is -1, else human_int.
  dict_or_str              union_dict_and_str: text like a JSON object is parsed ('' and 'None' are None), else kept.
  lower_underscore         `s.lower().replace("-", "_")`.
  int_or_str_list          comma-separated parts, stripped, digits read as int (--device-ids).
  port                     FlexibleArgumentParser.check_port: an int from 1024 to 65535.
  optional:<name>          optional_type: '' and 'None' are None, else <name>.
  dataclass:<Cls>          parse_dataclass: human-readable numbers outside JSON strings expanded (1k, 80G), then the
                           JSON validated as <Cls>.
  dataclass_json:<Cls>     parse_dataclass of releases that validate the JSON as <Cls> as written (no expansion).
  enum:<Name>              an Enum class called with the text.
  truthy                   `type=bool` (0.11's deprecated --guided-decoding-disable-* options): Python's bool() of
                           the text: '' is False, any other text ('False', '0' too) is True.
  none_as_empty            parse_reasoning_parser (vllm/engine/arg_utils.py, 0.33+): 'none' in any case is '' (unset),
                           any other text is kept as written.
  other / other:<name>     anything else (a new callable to name here).
"""

from __future__ import annotations

import argparse
import contextlib
import enum
import importlib
import importlib.metadata
import inspect
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = ROOT / "launcher" / "vllm" / "interface"
CACHE = ROOT / ".cache" / "vllm-interface"

# The releases whose tables are committed: every vLLM release on PyPI from 0.10.0 on (0.32.0 is the one installed
# in .venv-vllm, generated without --release).
RELEASES = (
    "0.10.0", "0.10.1", "0.10.1.1", "0.10.2", "0.11.0", "0.11.1", "0.11.2", "0.12.0", "0.13.0", "0.14.0",
    "0.14.1", "0.15.0", "0.15.1", "0.16.0", "0.17.0", "0.17.1", "0.18.0", "0.18.1", "0.19.0", "0.19.1",
    "0.20.0", "0.20.1", "0.20.2", "0.21.0", "0.22.0", "0.22.1", "0.23.0", "0.24.0", "0.25.0", "0.25.1",
    "0.26.0", "0.27.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.33.0", "0.34.0",
)  # fmt: skip

# Dependencies that older releases import and .venv-vllm (vLLM 0.32's) lacks: pip-installed, without their own
# dependencies, into CACHE/deps, which goes last on sys.path (the venv's packages win where both have one).
EXTRA_DEPS = ("diskcache==5.6.3", "gguf==0.19.0")
DEPS = CACHE / "deps"

STUBS_USED: list[str] = []


def _install_stubs(source: str) -> None:
    """The stubs the module docstring lists, for a release imported from its unpacked sources."""
    sys.path.insert(0, str(Path(source).resolve()))
    sys.path.append(str(DEPS))
    os.environ["VLLM_PLUGINS"] = ""
    real_version = importlib.metadata.version
    release = _source_version(Path(source))

    def version(name: str) -> str:
        if name == "vllm":
            if "dist-version" not in STUBS_USED:
                STUBS_USED.append("dist-version")
            return release + "+cpu"
        return real_version(name)

    importlib.metadata.version = version


def _source_version(source: Path) -> str:
    """The release an unpacked source is, from its vllm/_version.py (setuptools-scm writes it into the wheel)."""
    text = (source / "vllm" / "_version.py").read_text(encoding="utf-8")
    m = re.search(r"""__version__\s*=\s*version\s*=\s*['"]([^'"]+)['"]""", text)
    if not m:
        raise SystemExit(f"{source}: no version in vllm/_version.py")
    return m.group(1).split("+")[0]


def _deps_used() -> list[str]:
    """The EXTRA_DEPS this run imported from CACHE/deps."""
    names = [d.split("==")[0] for d in EXTRA_DEPS]
    return [
        d
        for d, n in zip(EXTRA_DEPS, names, strict=True)
        if str(DEPS) in str(getattr(sys.modules.get(n), "__file__", ""))
    ]


def _parser() -> tuple[Any, Any]:
    """(the `serve` subparser, the top-level `vllm` parser that holds it), built as vLLM's CLI main builds them."""
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # releases before the module existed
        from vllm.utils import FlexibleArgumentParser  # type: ignore[attr-defined,no-redef]

    make = importlib.import_module(_make_arg_parser_module()).make_arg_parser
    top = FlexibleArgumentParser(description="vLLM CLI")
    subparsers = top.add_subparsers(required=False, dest="subparser")
    serve = make(subparsers.add_parser("serve", usage="vllm serve [model_tag] [options]"))
    return serve, top


def _make_arg_parser_module() -> str:
    """The module `vllm serve` (vllm/entrypoints/cli/serve.py) imports make_arg_parser from, read from its source
    (importing the CLI package would import the benchmarks and the server, which the parser does not need)."""
    import ast

    import vllm

    serve = Path(vllm.__file__).parent / "entrypoints" / "cli" / "serve.py"
    if not serve.exists():
        raise SystemExit(f"no {serve}")
    for node in ast.walk(ast.parse(serve.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and any(a.name == "make_arg_parser" for a in node.names):
            return str(node.module)
    raise SystemExit(f"{serve} imports no make_arg_parser")


# ---- type callables ---------------------------------------------------------------------------------------------

_LAMBDAS = {
    's.lower().replace("-", "_")': "lower_underscore",
    "s.lower().replace('-', '_')": "lower_underscore",
}


def _cells(fn: Any) -> dict[str, Any]:
    code, closure = getattr(fn, "__code__", None), getattr(fn, "__closure__", None) or ()
    return {k: c.cell_contents for k, c in zip(code.co_freevars if code else (), closure, strict=False)}


def _human_name(fn: Any, base: str) -> str:
    """human_int or human_int_kmg (the same with `_or_auto`): does the callable read '1T' as 2**40?"""
    try:
        tera = fn("1T")
    except (ValueError, TypeError, argparse.ArgumentTypeError):
        tera = None
    return base if tera == 2**40 else base + "_kmg"


def _lambda_name(fn: Any) -> str:
    try:
        src = inspect.getsource(fn)
    except OSError:
        src = ""
    for text, known in _LAMBDAS.items():
        if text in src:
            return known
    if "isdigit()" in src and 'split(",")' in src:
        return "int_or_str_list"
    return "other"


def _dataclass_name(fn: Any) -> str:
    cls = _cells(fn).get("cls") or (fn.__defaults__ or (None,))[0]
    expands = "_expand_json_human_readable_numbers" in fn.__code__.co_names
    return ("dataclass:" if expands else "dataclass_json:") + getattr(cls, "__name__", "?")


def type_name(fn: Any) -> str:
    """A closed name for an argparse `type` callable (the module docstring lists them)."""
    if fn is None:
        return "str"
    if fn in (int, float, str):
        return str(fn.__name__)
    name = getattr(fn, "__name__", "")
    if fn is json.loads or name == "loads":
        return "json"
    if name == "human_readable_int":
        return _human_name(fn, "human_int")
    if name == "human_readable_int_or_auto":
        return _human_name(fn, "human_int_or_auto")
    if name == "union_dict_and_str":
        return "dict_or_str"
    if name == "_optional_type":
        return "optional:" + type_name(_cells(fn).get("return_type"))
    if name == "_parse_type":
        return type_name(_cells(fn).get("return_type"))
    if name == "parse_dataclass":
        return _dataclass_name(fn)
    if name == "<lambda>":
        return _lambda_name(fn)
    if isinstance(fn, type) and issubclass(fn, enum.Enum):
        return "enum:" + fn.__name__
    if name == "check_port":
        return "port"
    if fn is bool:
        return "truthy"
    if name == "parse_reasoning_parser":
        return "none_as_empty"
    return "other:" + name


# ---- rows -------------------------------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """A default or choice as a literal the table can hold."""
    if isinstance(value, enum.Enum):
        return _plain(value.value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple | set | frozenset):
        items = [_plain(v) for v in value]
        return tuple(sorted(items, key=repr) if isinstance(value, set | frozenset) else items)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()} if len(repr(value)) < 400 else "<dict>"
    return f"<{type(value).__name__}>"


def _action_kind(action: argparse.Action) -> str:
    kind = type(action).__name__
    return {
        "_StoreAction": "store",
        "_StoreTrueAction": "store_true",
        "_StoreFalseAction": "store_false",
        "_StoreConstAction": "store_const",
        "BooleanOptionalAction": "bool",
        "EnableDisableAction": "enable_disable",
        "_AppendAction": "append",
        "_CountAction": "count",
        "_HelpAction": "help",
        "_VersionAction": "version",
    }.get(kind, "custom:" + kind)


def _spellings(parser: Any, action: argparse.Action) -> tuple[str, ...]:
    """Every option string the parser maps to `action`: the action's own, then those it registered but hides from
    help (EnableDisableAction's `--no-enable-x`)."""
    hidden = [s for s, a in parser._option_string_actions.items() if a is action and s not in action.option_strings]
    return (*action.option_strings, *hidden)


def _const(action: argparse.Action, kind: str, spellings: tuple[str, ...]) -> Any:
    """The const column: the value of a `nargs="?"` option given bare; for enable_disable, its spellings that set
    False."""
    if kind == "enable_disable":
        negative = getattr(action, "negative_option_strings", set())
        return tuple(s for s in spellings if s in negative)
    return _plain(action.const) if action.nargs == "?" else None


def rows(parser: Any) -> list[tuple[Any, ...]]:
    groups = {id(a): g.title or "" for g in parser._action_groups for a in g._group_actions}
    deprecated = getattr(parser, "_deprecated", set())
    out = []
    for a in parser._actions:
        kind = _action_kind(a)
        if kind == "help":
            continue
        choices = None
        if a.choices is not None:
            choices = tuple(_plain(c) for c in a.choices if c is not None)
        spellings = _spellings(parser, a)
        takes_value = kind in ("store", "append") or (kind.startswith("custom") and a.nargs != 0)
        out.append(
            (
                spellings,
                a.dest,
                kind,
                a.nargs,
                type_name(a.type) if takes_value else "bool",
                choices,
                _plain(a.default),
                _const(a, kind, spellings),
                bool(a in deprecated or getattr(a, "deprecated", False)),
                groups.get(id(a), ""),
            )
        )
    return out


# ---- features ---------------------------------------------------------------------------------------------------


class _Captured(Exception):
    def __init__(self, words: list[str]) -> None:
        super().__init__()
        self.words = words


def _rewritten(top: Any, words: list[str]) -> list[str] | str:
    """The words FlexibleArgumentParser.parse_args hands on to argparse for `vllm <words>`, or "error:<type>" when
    it refuses them first (argparse itself never runs)."""
    real = argparse.ArgumentParser.parse_args

    def capture(self: Any, args: Any = None, namespace: Any = None) -> Any:
        raise _Captured(list(args or []))

    argparse.ArgumentParser.parse_args = capture  # type: ignore[assignment,method-assign]
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            top.parse_args(list(words))
    except _Captured as c:
        return c.words
    except Exception as e:
        return f"error:{type(e).__name__}"
    finally:
        argparse.ArgumentParser.parse_args = real  # type: ignore[method-assign]
    return "error:not-captured"


def _parsed(top: Any, words: list[str]) -> Any:
    """The namespace vLLM's parser gives for `vllm <words>` (None when it refuses them)."""
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        try:
            return top.parse_args(list(words))
        except (SystemExit, ValueError, AssertionError, TypeError):
            return None


def _dotted_features(top: Any) -> dict[str, bool]:
    tail = ["serve", "m"]
    merged = _rewritten(top, [*tail, "--x.a.b", "1", "--x.c=2"]) == [*tail, "--x", '{"a": {"b": 1}, "c": 2}']
    ns = _parsed(top, [*tail, "--speculative-config.method", "ngram"])
    confirmed = ns is not None and "ngram" in str(getattr(ns, "speculative_config", ""))
    return {
        "dotted_keys": merged and confirmed,
        "dotted_list_plus": _rewritten(top, [*tail, "--x.a+", "p,q"]) == [*tail, "--x", '{"a": ["p", "q"]}'],
        "dotted_human_int": _rewritten(top, [*tail, "--x.a", "1k"]) == [*tail, "--x", '{"a": 1000}'],
    }


def _o_features(parser: Any, top: Any) -> dict[str, Any]:
    tail = ["serve", "m"]
    attached = _rewritten(top, [*tail, "-O3"])
    out: dict[str, Any] = {"o_flag": None, "o_level_key": None}
    if isinstance(attached, list) and attached[:2] == tail and len(attached) == 4:
        option, value = attached[2:]
        action = parser._option_string_actions.get(option)
        if action is not None and attached != [*tail, "-O3"]:
            out["o_flag"] = action.dest
            if value.startswith("{"):
                keys = [k for k, v in json.loads(value).items() if v == 3]
                out["o_level_key"] = keys[0] if len(keys) == 1 else None
    out["o_separate"] = out["o_flag"] is not None and _rewritten(top, [*tail, "-O", "3"]) == attached
    dotted = _rewritten(top, [*tail, "-O.mode", "3"])
    out["o_dotted"] = None
    if isinstance(dotted, list) and dotted[:2] == tail and dotted[3:] == ['{"mode": 3}']:
        action = parser._option_string_actions.get(dotted[2])
        out["o_dotted"] = action.dest if action is not None else None
    return out


def _model_features(top: Any) -> dict[str, Any]:
    moved = _rewritten(top, ["serve", "--model", "m", "--port", "1"])
    if moved == ["serve", "m", "--port", "1"]:
        model_option = "moved"
    elif moved == "error:ValueError":
        model_option = "rejected"
    else:
        model_option = "kept"
    served = _rewritten(top, ["serve", "--served-model-name", "x"])
    return {
        "model_option": model_option,
        "model_option_moves": model_option == "moved",
        "served_name_needs_positional": served == "error:ValueError",
    }


_CONFIG_PROBE = "max-num-seqs: 7\nenforce-eager: false\nserved-model-name: [a, b]\nhf-overrides: {a: 1}\n"


def _with_config(top: Any, before: list[str], after: list[str]) -> list[str] | str:
    """The words handed to argparse for `vllm <before> --config probe.yaml <after>`."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "probe.yaml")
        Path(path).write_text(_CONFIG_PROBE, encoding="utf-8")
        words = _rewritten(top, [*before, "--config", path, *after])
    return [w if w != path else "<probe.yaml>" for w in words] if isinstance(words, list) else words


def _config_false(words: list[str]) -> str:
    if "--no-enforce-eager" in words:
        return "no_flag"
    return "string" if "--enforce-eager" in words else "dropped"


def _config_features(top: Any) -> dict[str, Any]:
    words = _with_config(top, ["serve", "m"], [])
    if not isinstance(words, list) or "--max-num-seqs" not in words:
        return {"config_yaml": False, "config_false": None, "config_list": None, "config_dict": None}
    after = {w: words[i + 1] if i + 1 < len(words) else None for i, w in enumerate(words)}
    false = _config_false(words)
    listed = "words" if after.get("--served-model-name") == "a" else "string"
    mapping = "json" if after.get("--hf-overrides") == '{"a": 1}' else "string"
    return {"config_yaml": True, "config_false": false, "config_list": listed, "config_dict": mapping}


def _module_features(parser: Any) -> dict[str, Any]:
    """`python -m vllm.entrypoints.openai.api_server …`: the serve parser reads the words itself (no `serve`)."""
    words = _with_config(parser, ["--port", "8001"], ["--max-num-seqs", "9"])
    if not isinstance(words, list) or "7" not in words:
        return {"module_config_order": None, "module_config_false": None}
    if words[:2] == ["--max-num-seqs", "7"]:
        order = "first"
    elif words[:3] == ["--port", "--max-num-seqs", "7"]:
        order = "after_first_word"
    else:
        order = "other"
    return {"module_config_order": order, "module_config_false": _config_false(words)}


def features(parser: Any, top: Any) -> dict[str, Any]:
    """How this release's FlexibleArgumentParser rewrites a command (the module docstring explains each key)."""
    out: dict[str, Any] = {"allow_abbrev": bool(parser.allow_abbrev)}
    rewritten = _rewritten(top, ["serve", "m", "--max_num_seqs", "7"]) == ["serve", "m", "--max-num-seqs", "7"]
    ns = _parsed(top, ["serve", "m", "--max_num_seqs", "7"])
    out["underscores"] = rewritten and ns is not None and getattr(ns, "max_num_seqs", None) == 7
    out.update(_dotted_features(top))
    out.update(_o_features(parser, top))
    out.update(_model_features(top))
    out.update(_config_features(top))
    out.update(_module_features(parser))
    helped = _rewritten(top, ["serve", "--help=model"])
    out["help_keyword"] = isinstance(helped, list) and "--help" in helped
    out["serve_positional"] = _positional(parser)
    return out


def _positional(parser: Any) -> str | None:
    for a in parser._actions:
        if not a.option_strings:
            return str(a.dest)
    return None


# ---- output -----------------------------------------------------------------------------------------------------


COLUMNS = ("spellings", "dest", "action", "nargs", "type", "choices", "default", "const", "deprecated", "group")


def render(version: str, source: str, table: list[tuple[Any, ...]], feats: dict[str, Any]) -> str:
    """The table as JSON: the release, where it came from, its FEATURES, then one option per line."""
    head = json.dumps({"version": version, "source": source, "features": feats, "columns": COLUMNS}, indent=1)
    rows = ",\n".join(" " + json.dumps(list(row), ensure_ascii=False) for row in table)
    return head[: head.rindex("}")].rstrip() + ',\n "flags": [\n' + rows + "\n ]\n}\n"


def module_name(version: str) -> str:
    m = re.match(r"^v?(\d+(?:\.\d+)*)", version)
    if not m:
        raise SystemExit(f"not a version: {version}")
    return "v" + m.group(1).replace(".", "_")


# ---- other releases ---------------------------------------------------------------------------------------------


def fetch(release: str) -> tuple[Path, str]:
    """(the unpacked Python sources of vLLM `release`, the wheel they came from), downloaded once into CACHE."""
    if not DEPS.exists():
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(DEPS), *EXTRA_DEPS], check=True
        )
    src = CACHE / "src" / release
    marker = src / "ARTIFACT"
    if marker.exists():
        return src, marker.read_text(encoding="utf-8").strip()
    dl = CACHE / "dl" / release
    dl.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "download", f"vllm=={release}", "--no-deps", "--only-binary", ":all:"]
    subprocess.run([*pip, "-q", "-d", str(dl)], check=True)
    (wheel,) = dl.glob("vllm-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist() if n.startswith("vllm/") and not re.search(r"\.so(\.|$)", n)]
        z.extractall(src, names)
    marker.write_text(wheel.name + "\n", encoding="utf-8")
    shutil.rmtree(dl)
    return src, wheel.name


def generate_release(release: str, check: bool) -> int:
    """Fetch one release and run this script on its sources (a fresh interpreter per release)."""
    src, artifact = fetch(release)
    env = dict(os.environ, VLLM_SOURCE=str(src))
    cmd = [sys.executable, __file__, "--source", f"wheel {artifact} (its Python files; compiled extensions left out)"]
    return subprocess.run([*cmd, *(["--check"] if check else [])], env=env).returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when the committed table differs")
    ap.add_argument("--stdout", action="store_true", help="print the table instead of writing it")
    ap.add_argument("--source", default=None, help="where this vLLM came from (recorded in the table)")
    ap.add_argument("--release", action="append", default=[], help="describe this release from PyPI ('all': RELEASES)")
    opts = ap.parse_args()
    if opts.release:
        releases = RELEASES if opts.release == ["all"] else opts.release
        failed = [r for r in releases if generate_release(r, opts.check) != 0]
        if failed:
            print("failed: " + " ".join(failed), file=sys.stderr)
        return 1 if failed else 0
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    if os.environ.get("VLLM_SOURCE"):
        _install_stubs(os.environ["VLLM_SOURCE"])
    import vllm

    version = str(vllm.__version__).split("+")[0]
    parser, top = _parser()
    table = rows(parser)
    feats = features(parser, top)
    source = opts.source or f"vllm {version}: make_arg_parser(FlexibleArgumentParser())"
    if STUBS_USED:
        source += "; stubs: " + ", ".join(STUBS_USED)
    if _deps_used():
        source += "; older dependencies: " + ", ".join(_deps_used())
    text = render(version, source, table, feats)
    out = OUT_DIR / f"{module_name(version)}.json"
    if opts.stdout:
        sys.stdout.write(text)
        return 0
    if opts.check:
        old = out.read_text(encoding="utf-8") if out.exists() else ""
        if old != text:
            print(f"{out}: differs from what vLLM {version}'s parser gives", file=sys.stderr)
            return 1
        return 0
    out.write_text(text, encoding="utf-8")
    print(f"{out}: {len(table)} options", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
