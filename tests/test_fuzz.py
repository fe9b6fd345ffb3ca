"""Fuzzing every command, and one regression test per root cause the fuzz and the odd environments found.

The hypothesis part draws VLAUNCH_FUZZ_EXAMPLES cases per command (default 40; bench/fuzz.py runs 20,000+),
derandomized so CI sees the same cases on every run. The invariants are tests/fuzz_cases.py's: no traceback,
never exit 70, only documented exit codes, a refusal is one line, --json is strict JSON, under 20 s a case.

The explicit tests stand for one root cause each: an anchor bomb in a profile or vLLM serve config, a serve config
that is a FIFO or not UTF-8, a damaged calibration store or run record, paths the filesystem refuses (too long,
~nosuchuser, NUL), outputs that are not regular files, click's usage errors in several lines, and the process's
streams: stdout closed, a reader that goes away, an encoding without the symbols vlaunch prints.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launcher.cli import main
from tests import fuzz_cases as F

EXAMPLES = int(os.environ.get("VLAUNCH_FUZZ_EXAMPLES", "40"))
LLAMA8B = F.LLAMA8B
TINY = F.TINY
CPU_LOG = F.CPU_LOG
LOG = F.FIXTURES / "logs" / "colab-t4-qwen2.5-1.5b-instruct-v0.7.2.log"


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[F.Sandbox]:
    yield F.make_sandbox(tmp_path_factory.mktemp("fuzz"))


@pytest.mark.parametrize("command", F.COMMANDS)
def test_fuzz_every_command(sandbox: F.Sandbox, command: str) -> None:
    @settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(st.data())
    def one(data: st.DataObject) -> None:
        case = data.draw(F.cases(sandbox, command))
        o = F.run_case(case, sandbox)
        if o.elsewhere:  # a defect in code owned elsewhere, reported there (bench/fuzz.py lists them)
            return
        assert not o.problems, (o.problems, o.where, case.kind, case.shown()[:1500], o.stderr[-1500:])

    one()


def test_only_code_owned_elsewhere_is_set_aside() -> None:
    assert F._elsewhere("launcher/model/formats.py:164 in detect")
    assert F._elsewhere("launcher/cli/stop.py:44 in stop")
    assert F._elsewhere("launcher/cli/serve.py:150 in _serve_launch")
    assert not F._elsewhere("launcher/cli/__init__.py:146 in invoke")
    assert not F._elsewhere("launcher/cli/plan.py:66 in plan")
    assert not F._elsewhere("launcher/plan/profiles.py:300 in _yaml_data")
    assert not F.Outcome(F.Case("plan", "argv", []), 70, 0.0, "", "", ["exit 70 (internal error)"]).elsewhere


def test_the_invariants_can_fail() -> None:
    case = F.Case("plan", "argv", ["plan", "--json"])
    assert F.problems_of(case, 70, "", "vlaunch: internal error: x", None) == ["exit 70 (internal error)"]
    assert F.problems_of(case, 2, "", "vlaunch: error: a\nvlaunch: error: b\n", None)
    assert F.problems_of(case, 2, "", "Usage: vlaunch plan\nError: x\n", None)
    assert F.problems_of(case, 0, '{"a": NaN}', "", None)
    assert F.problems_of(case, 0, "", "Traceback (most recent call last):\n", None)
    assert F.problems_of(case, 99, "", "", None) == ["undocumented exit code 99"]
    assert F.problems_of(case, 1, "", "", ValueError("x"))
    assert F.problems_of(case, 0, '{"a": 1}', "", None) == []


# ---- helpers -----------------------------------------------------------------------------------------------------


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def refused(r: Result, *needles: str) -> None:
    assert r.exit_code == 2, (r.exit_code, r.output[-1500:])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("vlaunch: error: "), lines
    for n in needles:
        assert n in r.stderr, r.stderr


def profile_text(extra: str = "") -> str:
    return f"model: m/x\nconfig: {LLAMA8B}\nmachine: h100\n{extra}"


BOMB = "\n".join(
    ["  l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    + [f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)]
)


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLAUNCH_", "PYTHONIO", "LC_", "HF_"))}
    env.update(HOME=str(tmp_path), XDG_CACHE_HOME=str(tmp_path / "cache"), XDG_CONFIG_HOME=str(tmp_path / "config"),
               XDG_RUNTIME_DIR=str(tmp_path / "run"), HF_HUB_OFFLINE="1", VLAUNCH_OFFLINE="1")  # fmt: skip
    env.update(extra)
    return env


# ---- anchor bombs --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["laughs", "speculative_config", "vllm"])
def test_an_anchor_bomb_in_a_profile_is_refused_at_once(tmp_path: Path, key: str) -> None:
    p = tmp_path / "bomb.yaml"
    p.write_text(profile_text(f"{key}:\n{BOMB}\n"))
    t0 = time.monotonic()
    refused(run("plan", str(p)), "expands to more than 100,000 values")
    assert time.monotonic() - t0 < 5


def test_an_anchor_bomb_in_a_serve_config_is_refused_at_once(tmp_path: Path) -> None:
    p = tmp_path / "serve.yaml"
    p.write_text(f"max-model-len: 4096\nlimit-mm-per-prompt:\n{BOMB}\n")
    t0 = time.monotonic()
    refused(run("plan", "--config", str(p), "--hf-config-path", str(LLAMA8B), "--model", "m/x"), "expands to more")
    assert time.monotonic() - t0 < 5


@pytest.mark.parametrize("where", ["profile", "serve-config"])
def test_an_alias_inside_its_own_anchor_is_refused(tmp_path: Path, where: str) -> None:
    p = tmp_path / "x.yaml"
    if where == "profile":
        p.write_text(profile_text("vllm:\n  extra_args: &a [--x, *a]\n"))
        r = run("plan", str(p))
    else:
        p.write_text("description: &a [*a]\ntensor-parallel-size: 1\n")
        r = run("plan", "--config", str(p), "--hf-config-path", str(LLAMA8B), "--model", "m/x")
    refused(r, str(p), "an alias inside its own anchor")


def test_many_aliases_of_a_small_anchor_are_fine(tmp_path: Path) -> None:
    p = tmp_path / "p.yaml"
    p.write_text(profile_text("vllm:\n  env: &e {A: '1'}\nnodes: null\n"))
    assert run("plan", str(p), "--json").exit_code in (0, 3)


# ---- vLLM's serve config (--config) ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"max-model-len: 4096\ndtype: \xff\n", "line 2: not UTF-8"),
        (b"max-model-len: \x07\n", "control character U+0007"),
        (b"max-model-len: [\n", "line 2"),
    ],
)
def test_a_serve_config_that_is_not_yaml_text(tmp_path: Path, content: bytes, needle: str) -> None:
    p = tmp_path / "serve.yaml"
    p.write_bytes(content)
    refused(run("plan", "--config", str(p), "--hf-config-path", str(LLAMA8B), "--model", "m/x"), str(p), needle)


@pytest.mark.parametrize("special", ["fifo", "/dev/zero"])
def test_a_serve_config_that_is_not_a_regular_file(tmp_path: Path, special: str) -> None:
    path = special
    if special == "fifo":
        path = str(tmp_path / "fifo")
        os.mkfifo(path)
    refused(run("plan", "--config", path, "--hf-config-path", str(LLAMA8B), "--model", "m/x"), "not a regular file")


# ---- control characters and bytes in a profile ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        (b"\x07", "line 4 column 15: control character U+0007"),
        (b"\x00", "line 4 column 15: control character U+0000"),
        (b"\x1b[31m", "control character U+001B"),
        (b"\xff", "line 4: not UTF-8 text"),
        (b"\x85", "line 4: not UTF-8 text"),  # a lone NEL byte, not U+0085 encoded
    ],
)
def test_a_control_character_in_a_profile_names_the_file_and_line(tmp_path: Path, raw: bytes, needle: str) -> None:
    p = tmp_path / "p.yaml"
    p.write_bytes(profile_text().encode() + b"description: x" + raw + b"y\n")
    refused(run("plan", str(p)), str(p), needle)


def test_nel_encoded_in_a_value_is_refused_naming_the_key(tmp_path: Path) -> None:
    p = tmp_path / "p.yaml"
    p.write_text(profile_text('description: "x\\x85--privileged"\n'))
    refused(run("plan", str(p)), "description", "U+0085")


# ---- paths the filesystem refuses --------------------------------------------------------------------------------


LONG = "a" * 5000 + ".yaml"
COMPONENT = "b" * 300 + ".yaml"


@pytest.mark.parametrize("name", [LONG, COMPONENT, "c" * 300 + "/x.yaml"])
@pytest.mark.parametrize(
    "args",
    [
        ("count", "{p}"),
        ("check", "{p}"),
        ("report", "{p}", "--html", "out.html"),
        ("render", "{p}", "--as", "script"),
        ("plan", "{p}"),
        ("plan", "--hf-config-path", "{p}", "--model", "m/x", "--machine", "h100"),
        ("plan", "--config", "{p}", "--hf-config-path", str(LLAMA8B), "--model", "m/x"),
        ("calibrate", "--dry-run", "{p}"),
        ("render", "llama8b-32k", "--as", "script", "-o", "{p}"),
        ("plan", "llama8b-32k", "--html", "{p}"),
        ("report", str(LOG), "--hf-config-path", str(LLAMA8B), "--machine", "h100", "--html", "{p}"),
    ],
    ids=[
        "count",
        "check",
        "report",
        "render",
        "plan",
        "plan-hf",
        "plan-config",
        "calibrate",
        "render-o",
        "plan-html",
        "report-html",
    ],
)
def test_a_path_too_long_for_the_filesystem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str,
                                            args: tuple[str, ...]) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    path = str(tmp_path / name)
    r = run(*(a.format(p=path) for a in args))
    refused(r)


@pytest.mark.parametrize(
    "args",
    [
        ("count", "~nosuchuser/config.json"),
        ("plan", "~nosuchuser/p.yaml"),
        ("plan", "--hf-config-path", "~nosuchuser/c.json", "--model", "m/x", "--machine", "h100"),
        ("render", "llama8b-32k", "--as", "script", "-o", "~nosuchuser/launch.sh"),
        ("plan", "llama8b-32k", "--html", "~nosuchuser/p.html"),
    ],
)
def test_a_tilde_path_naming_no_user(args: tuple[str, ...]) -> None:
    refused(run(*args), "~nosuchuser", "no such user 'nosuchuser'")


@pytest.mark.parametrize(
    "args", [("check", "~nosuchuser/vllm.log"), ("report", "~nosuchuser/run.json", "--html", "r.html")]
)
def test_a_log_under_no_user_is_no_such_file(args: tuple[str, ...]) -> None:
    refused(run(*args), "~nosuchuser")


def test_a_profile_naming_a_model_under_no_user(tmp_path: Path) -> None:
    p = tmp_path / "p.yaml"
    p.write_text("model: ~nosuchuser/model\nmachine: h100\n")
    refused(run("plan", str(p)), "no such user 'nosuchuser'")


@pytest.mark.parametrize(
    "args",
    [
        ("plan", "--hf-config-path", "c\x00.json", "--model", "m/x", "--machine", "h100"),
        ("plan", "--config", "s\x00.yaml", "--hf-config-path", str(LLAMA8B), "--model", "m/x"),
        ("render", "llama8b-32k", "--as", "script", "-o", "out\x00.sh"),
    ],
)
def test_a_nul_byte_in_a_path(args: tuple[str, ...]) -> None:
    refused(run(*args))


# ---- outputs that are not regular files --------------------------------------------------------------------------


@pytest.mark.parametrize("what", ["fifo", "dir", "link-to-fifo"])
def test_an_output_that_is_not_a_regular_file_is_never_replaced(tmp_path: Path, what: str) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    target = {"fifo": fifo, "dir": tmp_path, "link-to-fifo": tmp_path / "link"}[what]
    if what == "link-to-fifo":
        target.symlink_to(fifo)
    r = run("render", "llama8b-32k", "--as", "script", "-o", str(target), "--force")
    refused(r, "not a regular file")
    assert fifo.is_fifo() and (what != "link-to-fifo" or target.is_symlink())


# ---- the calibration store and run records ------------------------------------------------------------------------


def _store(tmp_path: Path, text: str | bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    d = tmp_path / "config" / "vlaunch"
    d.mkdir(parents=True)
    (d / "calibration.yaml").write_bytes(text if isinstance(text, bytes) else text.encode())
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


def _terms_key() -> str:
    d = json.loads(run("plan", "llama8b-32k", "--json", "--no-calibration").stdout)
    from launcher.plan.calibration import machine_key

    return f"{machine_key(d['machine'], d['machine_total_bytes'])}|vllm {d['vllm_version']}"


@pytest.mark.parametrize(
    "store",
    [
        "terms: [1, 2]\ncpu_worker: x\n",
        "terms:\n  '{key}': not a mapping\n",
        "terms:\n  '{key}': {{non_torch_bytes_tp1: lots, cudagraph_bytes: -5, activation_scale: .nan,"
        " weights_scale: 1e999, activation_scale_by_family: [1], runs: many}}\n",
        "terms:\n  '{key}': {{activation_scale_by_family: {{llama: x}}, activation_scale: 0}}\n",
        b"terms: \xff\n",
        "terms:\n" + BOMB + "\n",
        "terms: " + "9" * 5000 + "\n",
    ],
    ids=["lists", "entry-text", "terms-text", "family-text", "not-utf8", "bomb", "huge-int"],
)
def test_a_damaged_calibration_store_plans_uncalibrated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        store: str | bytes) -> None:  # fmt: skip
    key = _terms_key()
    _store(tmp_path, store.format(key=key) if isinstance(store, str) else store, monkeypatch)
    t0 = time.monotonic()
    r = run("plan", "llama8b-32k", "--json")
    assert r.exit_code in (0, 3), (r.exit_code, r.stderr)
    assert time.monotonic() - t0 < 10
    assert "calibrated from" not in json.dumps(json.loads(r.stdout).get("notes", []))


def test_calibrated_terms_that_are_valid_are_still_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = _terms_key()
    _store(tmp_path, f"terms:\n  '{key}': {{non_torch_bytes_tp1: 1073741824, runs: 2, nonsense: x}}\n", monkeypatch)
    r = run("plan", "llama8b-32k", "--json")
    assert r.exit_code in (0, 3) and "calibrated from 2 run(s)" in r.stdout


def test_calibrate_writes_over_a_store_whose_tables_are_not_mappings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _store(tmp_path, "terms: [1]\ncpu_worker: 3\n", monkeypatch)
    record = _record(tmp_path)
    r = run("calibrate", str(record), "--json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["stored"]


def _record(tmp_path: Path, **changes: object) -> Path:
    facts = json.loads(run("check", str(CPU_LOG), "--hf-config-path", str(TINY), "--json").stdout)
    record = {"profile": "x", "predicted": facts.pop("predicted"), "logged": facts, "log": str(CPU_LOG)}
    for path, value in changes.items():
        where, key = path.split("__")
        record[where][key] = value  # type: ignore[index]
    p = tmp_path / "run.json"
    p.write_text(json.dumps(record))
    return p


@pytest.mark.parametrize(
    "changes",
    [
        {"predicted__machine_total_bytes": "lots"},
        {"predicted__engine": "x"},
        {"predicted__activation_peak_bytes": "x", "logged__activation_gib": 1.0},
        {"logged__non_torch_gib": "x"},
        {"logged__cudagraph_gib": [1]},
        {"predicted__weights_bytes": 0.0, "logged__model_loading_gib": 1.0},
    ],
)
def test_calibrate_reads_a_damaged_run_record(tmp_path: Path, changes: dict[str, object]) -> None:
    r = run("calibrate", str(_record(tmp_path, **changes)), "--dry-run", "--json")
    assert r.exit_code == 0, (r.exit_code, r.stderr)
    json.loads(r.stdout)


def test_calibrate_skips_a_fifo_named_json(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "run.json")
    t0 = time.monotonic()
    r = run("calibrate", str(tmp_path / "run.json"), "--dry-run")
    assert r.exit_code == 0 and "not a regular file" in r.stdout, r.output
    assert time.monotonic() - t0 < 5


# ---- click's own errors ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("plan", "--users", "abc"), "'--users'"),
        (("plan", "--nope"), "--nope"),
        (("render", "llama8b-32k"), "'--as'"),
        (("nope",), "No such command 'nope'"),
        (("--nope",), "--nope"),
        (("count",), "MODEL"),
        (("plan", "--free-gib", "-1"), "--free-gib"),
    ],
)
def test_a_usage_error_is_one_line(args: tuple[str, ...], needle: str) -> None:
    refused(run(*args), needle, "-h` for help")


# ---- the process's streams ---------------------------------------------------------------------------------------


def test_stdout_closed_is_quiet(tmp_path: Path) -> None:
    for args in (["plan", "llama8b-32k"], ["archs"], ["count", str(LLAMA8B), "--json"]):
        r = subprocess.run(["sh", "-c", 'exec "$@" >&-', "sh", sys.executable, "-m", "launcher.cli", *args],
                           capture_output=True, text=True, env=_env(tmp_path), cwd=tmp_path)  # fmt: skip
        assert r.returncode == 0, (args, r.returncode, r.stderr)
        assert r.stderr == "", r.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["archs"],
        ["plan", "llama8b-32k"],
        ["check", str(LOG), "--json"],
        ["archs", "--json"],
        ["--help"],
        ["--version"],
        ["plan", "--help"],
    ],
    ids=["archs", "plan", "check-json", "archs-json", "help", "version", "plan-help"],
)
def test_a_reader_that_went_away_is_141_and_quiet(tmp_path: Path, args: list[str]) -> None:
    r_fd, w_fd = os.pipe()
    os.close(r_fd)  # no reader at all: the first write fails with EPIPE, whatever its size
    p = subprocess.Popen([sys.executable, "-m", "launcher.cli", *args], stdout=w_fd, stderr=subprocess.PIPE,
                         env=_env(tmp_path), cwd=tmp_path)  # fmt: skip
    os.close(w_fd)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 141, (p.returncode, err)
    assert err == b"", err


def test_head_reads_the_first_line_and_nothing_is_said(tmp_path: Path) -> None:
    cmd = f'"{sys.executable}" -m launcher.cli archs | head -1'
    r = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, env=_env(tmp_path), cwd=tmp_path)
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 1
    assert r.stderr == "", r.stderr


@pytest.mark.parametrize(
    "env",
    [{"PYTHONIOENCODING": "latin-1"}, {"PYTHONIOENCODING": "ascii"}, {"LC_ALL": "C", "LANG": "C"},
     {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}],
    ids=["latin-1", "ascii", "C", "C-no-coercion"],
)  # fmt: skip
def test_an_encoding_without_the_symbols(tmp_path: Path, env: dict[str, str]) -> None:
    for args in (["plan", "llama8b-32k"], ["check", str(LOG), "--hf-config-path", str(LLAMA8B), "--machine", "h100"],
                 ["plan", "llama8b-32k", "--compare", "h100,rtx4090"], ["nope-command"]):  # fmt: skip
        r = subprocess.run([sys.executable, "-m", "launcher.cli", *args], capture_output=True,
                           env=_env(tmp_path, **env), cwd=tmp_path)  # fmt: skip
        assert r.returncode in (0, 2, 3), (args, r.returncode, r.stderr[-500:])
        assert b"Traceback" not in r.stderr
        assert r.stdout.strip() or r.returncode == 2, r.stderr
        if env.get("PYTHONIOENCODING") == "latin-1" and args[0] == "plan":
            text = r.stdout.decode("latin-1")
            assert "->" in text and "\u2192" not in text


def test_latin1_fallback_spells_the_symbols_in_ascii() -> None:
    import codecs

    import launcher.cli as cli

    assert "a → b ≈ 3 ◀ ✓ 模".encode("latin-1", cli._FALLBACK_ERRORS) == b"a -> b ~ 3 < ok ?"
    assert codecs.lookup_error(cli._FALLBACK_ERRORS)


# ---- a damaged run record for `report`; JSON flags nested too deeply ----------------------------------------------


@pytest.mark.parametrize(
    ("where", "key", "value", "needle"),
    [
        ("predicted", "activation", 1, "predicted.activation is not a mapping"),
        ("predicted", "gpu_memory_utilization", "x", "predicted.gpu_memory_utilization is not a number"),
        ("predicted", "machine_total_bytes", 10**400, "predicted.machine_total_bytes is not a number"),
        ("predicted", "weights_bytes", float("nan"), "predicted.weights_bytes is not a number"),
        ("predicted", "reasons", "x", "predicted.reasons is not a list"),
        ("diff", "rows", "x", "diff.rows is not a mapping"),
        ("diff", "rows", {"total_memory": None}, "diff.rows.total_memory is not a mapping"),
        ("diff", "rows", {"kv": {"predicted": "x"}}, "diff.rows.kv.predicted is not a number"),
        ("logged", "failure", 1, "logged.failure is not a mapping"),
    ],
)
def test_report_refuses_a_damaged_run_record_in_one_line(
    tmp_path: Path, where: str, key: str, value: object, needle: str
) -> None:
    record = json.loads(_record(tmp_path).read_text())
    record["diff"] = {"rows": {"kv": {"predicted": 1.0, "logged": 1.0, "unit": "GiB"}}}
    record[where][key] = value
    p = tmp_path / "run.json"
    p.write_text(json.dumps(record))
    refused(run("report", str(p), "--html", str(tmp_path / "r.html")), "not a run record", needle)
    assert not (tmp_path / "r.html").exists()


@pytest.mark.parametrize("flag", ["--speculative-config", "--limit-mm-per-prompt"])
@pytest.mark.parametrize("pasted", [False, True])
def test_a_json_flag_nested_too_deeply(flag: str, pasted: bool) -> None:
    deep = '{"a":' * 5000 + "1" + "}" * 5000
    args = ["plan", "llama8b-32k", flag, deep] if not pasted else ["plan", "llama8b-32k", "--", "vllm", "serve", "m/x",
                                                                   flag, deep]  # fmt: skip
    refused(run(*args), flag, "nested too deeply")


# ---- config.json values the architecture readers took as given -----------------------------------------------------


def _checkpoint_config(tmp_path: Path, family: str, **changes: object) -> Path:
    config = json.loads((F.FIXTURES / "checkpoints" / f"{family}.json").read_text())["config"]
    config.update(changes)
    p = tmp_path / "config.json"
    p.write_text(json.dumps(config))
    return p


@pytest.mark.parametrize(
    ("family", "changes", "needle"),
    [
        ("nemotron_h", {"layers_block_type": ["mamba", ["mlp"]]}, "layers_block_type: must hold strings or numbers"),
        ("nemotron_h", {"layers_block_type": [{"a": 1}]}, "got a dict at index 0"),
        ("zamba2", {"layers_block_type": ["mamba", ["hybrid"]]}, "layers_block_type: must hold strings or numbers"),
        ("lfm2", {"layer_types": [["conv"], "conv", "full_attention", "conv"]}, "layer_types: must hold strings"),
        ("nemotron_h", {"layers_block_type": []}, "layers_block_type: lists no layers"),
        ("zamba2", {"layers_block_type": []}, "layers_block_type: lists no layers"),
        ("nemotron", {"partial_rotary_factor": 1e308}, "partial_rotary_factor: must be a finite number"),
        ("nemotron", {"partial_rotary_factor": float("nan")}, "partial_rotary_factor: must be a finite number"),
        ("nemotron", {"partial_rotary_factor": 7}, "partial rotary factor must be a number in [0, 1]"),
        ("nemotron", {"rope_parameters": {"partial_rotary_factor": float("inf")}}, "partial rotary factor"),
        ("lfm2", {"block_ffn_dim_multiplier": float("inf")}, "block_ffn_dim_multiplier: must be a finite number"),
        ("lfm2", {"block_ffn_dim_multiplier": 1e300}, "block_ffn_dim_multiplier: must be a finite number"),
    ],
)
def test_a_config_value_of_the_wrong_shape_names_its_key(
    tmp_path: Path, family: str, changes: dict[str, object], needle: str
) -> None:
    cfg = _checkpoint_config(tmp_path, family, **changes)
    refused(run("count", str(cfg)), needle)
    refused(run("plan", "--hf-config-path", str(cfg), "--model", "m/x", "--machine", "h100"), needle)


@pytest.mark.parametrize("flag", ["--gpu-memory-gib", "--overhead-gib", "--os-reserve-gib"])
@pytest.mark.parametrize("value", ["1e308", "2000000"])
def test_gib_past_a_pebibyte_is_refused(tmp_path: Path, flag: str, value: str) -> None:
    field = flag[2:].replace("-", "_")
    refused(run("plan", "--hf-config-path", str(LLAMA8B), "--model", "m/x", "--machine", "h100", flag, value), field)
    p = tmp_path / "p.yaml"
    p.write_text(profile_text(f"{field}: {value}\n"))
    refused(run("plan", str(p)), field, "at most 1,048,576 (GiB)")


def test_a_node_with_more_gpus_than_any_box_is_refused(tmp_path: Path) -> None:
    text = (F.ROOT / "profiles" / "two-sparks-70b.yaml").read_text()
    assert "gpus: 1" in text
    p = tmp_path / "p.yaml"
    p.write_text(text.replace("gpus: 1", f"gpus: {2**64}", 1))
    refused(run("plan", str(p)), "nodes[0].gpus", "at most 4,096")
