"""`vlaunch render --as systemd`: a unit that runs `vlaunch serve PROFILE` (absolute paths, secrets from an
environment file, a container's stale namesake removed, restarts that respect serve's exit codes), that
`systemd-analyze verify` accepts and whose `vlaunch serve` plans what render planned."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from launcher.cli import main
from launcher.plan.planning import make_plan
from launcher.plan.profiles import BUNDLED_PROFILES, load_profile
from launcher.report import templating
from launcher.report.templating import NO_RESTART, RESTART_STEPS_SINCE, render_launch, unit_for, vlaunch_command
from tests.conftest import CONFIGS
from tests.plan_launch import systemd_argv

LLAMA8B = str(CONFIGS / "Llama-3.1-8B.json")
SECRET = "hf_unit_secret_value_123"
VLAUNCH = str(Path(sys.executable).parent / "vlaunch")  # the dev venv's own script: a real file for verify
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
needs_systemd_analyze = pytest.mark.skipif(
    SYSTEMD_ANALYZE is None, reason="systemd-analyze is not installed (Debian: apt-get install systemd)"
)


def _profile(where: Path, name: str, vllm: dict[str, Any]) -> Path:
    data = {
        "name": name,
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "config": LLAMA8B,
        "machine": "h100-80gb",
        "max_model_len": 8192,
        "users": 2,
        "vllm": {"version": "0.32.0", "env": {"HF_TOKEN": SECRET, "FOO": "bar"}, **vllm},
    }
    path = where / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def box(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory, and a PATH holding only a stand-in `vllm`, `python3`, `docker` and `podman`."""
    bin_dir = tmp_path / "bin"
    for program in ("vllm", "python3", "docker", "podman"):
        _executable(bin_dir / program)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("PATH", str(bin_dir))
    return work


def _render(*args: str) -> Result:
    return CliRunner().invoke(main, ["render", "--as", "systemd", *args])


def _unit(*args: str) -> str:
    r = _render(*args)
    assert r.exit_code in (0, 3), r.output
    return r.stdout


def _lines(unit: str, key: str) -> list[str]:
    return [line.partition("=")[2] for line in unit.splitlines() if line.startswith(key + "=")]


def _common(unit: str, work: Path, name: str) -> None:
    """What every unit holds: serve's restart, stop and secret policy."""
    assert _lines(unit, "WorkingDirectory") == [str(work)]
    assert _lines(unit, "EnvironmentFile") == [f"-/etc/vlaunch/{name}.env"]
    assert _lines(unit, "Restart") == ["on-failure"] and _lines(unit, "RestartSec") == ["15s"]
    assert _lines(unit, "RestartPreventExitStatus") == ["2 3 4 5 8 10"]
    assert _lines(unit, "StartLimitIntervalSec") == ["30min"] and _lines(unit, "StartLimitBurst") == ["5"]
    assert _lines(unit, "KillMode") == ["mixed"] and _lines(unit, "KillSignal") == ["SIGTERM"]
    assert _lines(unit, "TimeoutStopSec") == ["90s"] and _lines(unit, "SuccessExitStatus") == ["143"]
    assert _lines(unit, "Type") == ["exec"] and _lines(unit, "WantedBy") == ["multi-user.target"]
    assert "HF_TOKEN=" in unit and SECRET not in unit  # what to put in the file, never the value
    assert not _lines(unit, "Environment") and not _lines(unit, "User") and not _lines(unit, "Group")


def test_a_venv_launch_runs_serve_with_its_python(box: Path) -> None:
    profile = _profile(box, "venv-8b", {"launch": "module"})
    unit = _unit(str(profile), "--vlaunch", VLAUNCH)
    assert systemd_argv(unit) == [
        VLAUNCH, "serve", str(profile), "--python", str(box.parent / "bin" / "python3"), "--logs-dir", str(box / "logs")
    ]  # fmt: skip
    _common(unit, box, "venv-8b")
    assert not _lines(unit, "ExecStartPre") and _lines(unit, "After") == ["network-online.target"]


def test_a_cli_launch_gets_the_vllm_on_path_here(box: Path) -> None:
    profile = _profile(box, "cli-8b", {"launch": "cli"})
    words = systemd_argv(_unit(str(profile), "--vlaunch", VLAUNCH))
    assert words[words.index("--vllm-executable") + 1] == str(box.parent / "bin" / "vllm")
    os.unlink(box.parent / "bin" / "vllm")
    r = _render(str(profile), "--vlaunch", VLAUNCH)
    assert r.exit_code == 0 and "--vllm-executable" not in systemd_argv(r.stdout)
    assert "`vllm` is not on PATH here" in r.stderr and "--vllm-executable" in r.stderr


def test_a_container_launch_removes_its_stale_container_first(box: Path) -> None:
    profile = _profile(box, "box-8b", {"launch": "container", "image": "vllm/vllm-openai:v0.32.0"})
    unit = _unit(str(profile), "--vlaunch", VLAUNCH)
    docker = str(box.parent / "bin" / "docker")
    assert systemd_argv(unit, "ExecStartPre") == [docker, "rm", "-f", "vlaunch-box-8b"]
    assert "ExecStartPre=-" in unit  # a container that is not there is no failure
    assert _lines(unit, "After") == ["network-online.target docker.service"]
    assert systemd_argv(unit) == [VLAUNCH, "serve", str(profile), "--logs-dir", str(box / "logs")]
    assert "vLLM in its container gets HF_TOKEN from this file" in unit
    _common(unit, box, "box-8b")


@pytest.mark.parametrize(
    ("vllm", "pre"),
    [
        ({"container_name": "mine", "container_runtime": "podman"}, ["podman", "rm", "-f", "mine"]),
        ({"exec_container": "theirs"}, None),  # `docker exec` into the user's container: not the unit's to remove
    ],
)
def test_the_clean_up_names_the_container_serve_runs(box: Path, vllm: dict[str, Any], pre: list[str] | None) -> None:
    profile = _profile(box, "named", {"launch": "container", "image": "vllm/vllm-openai:v0.32.0", **vllm})
    unit = _unit(str(profile), "--vlaunch", VLAUNCH)
    if pre is None:
        assert not _lines(unit, "ExecStartPre")
    else:
        assert systemd_argv(unit, "ExecStartPre") == [str(box.parent / "bin" / pre[0]), *pre[1:]]


def test_a_bundled_profile_by_name_and_a_multi_node_one(box: Path) -> None:
    unit = _unit("llama8b-32k")  # no ./profiles here: the bundled file, by its absolute path
    words = systemd_argv(unit)
    assert words[words.index("serve") + 1] == str(BUNDLED_PROFILES / "llama8b-32k.yaml")
    assert systemd_argv(unit, "ExecStartPre")[1:] == ["rm", "-f", "vlaunch-llama8b-32k"]
    nodes = _unit("two-sparks-70b")  # serve's 5 there also means the other nodes are not ready yet
    assert _lines(nodes, "RestartPreventExitStatus") == ["2 3 4 8 10"]


def test_the_options_given_to_render_reach_serve(box: Path) -> None:
    profile = _profile(box, "opts", {"launch": "module"})
    args = [str(profile), "--max-num-seqs", "8", "--users", "3", "--no-enforce-eager", "--no-calibration"]
    words = systemd_argv(_unit(*args, "--free-gib", "70", "--vlaunch", VLAUNCH, "--logs-dir", "/var/log/x"))
    assert words[:3] == [VLAUNCH, "serve", str(profile)]
    assert {"--users", "3", "--no-enforce-eager", "--no-calibration", "--max-num-seqs", "8"} <= set(words)
    assert "--free-gib" not in words and "--vlaunch" not in words  # render's own: serve reads what is free
    assert words[-2:] == ["--logs-dir", "/var/log/x"]


def _dry_run(words: list[str]) -> dict[str, Any]:
    """`vlaunch serve --dry-run` on `words` (serve's own words, after `serve`)."""
    head = ["--dry-run", "--skip-preflight", "--json", "--free-gib", "70"]
    r = CliRunner().invoke(main, ["serve", *head, *words])
    assert r.exit_code in (0, 3), r.output
    return json.loads(r.stdout)  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    "request_words",
    [
        ["{profile}"],
        ["{profile}", "--max-num-seqs", "8", "--users", "3", "--kv-cache-dtype", "fp8"],
        ["--machine", "h100", "--", "vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--hf-config-path", LLAMA8B,
         "--max-model-len", "4096", "--enforce-eager"],
        ["--machine", "h100", "--", "docker", "run", "--gpus", "all", "--name", "pasted", "vllm/vllm-openai:v0.32.0",
         "meta-llama/Llama-3.1-8B-Instruct", "--hf-config-path", LLAMA8B, "--max-model-len", "4096"],
    ],
)  # fmt: skip
def test_the_units_serve_plans_what_render_planned(box: Path, request_words: list[str]) -> None:
    profile = _profile(box, "same", {"launch": "cli"})
    given = [w.replace("{profile}", str(profile)) for w in request_words]
    split = given.index("--") if "--" in given else len(given)
    unit = _unit(*given[:split], "--vlaunch", VLAUNCH, *given[split:])
    words = systemd_argv(unit)[2:]
    vllm = str(box.parent / "bin" / "vllm")
    assert ("--vllm-executable" in words) is ("docker" not in given)
    if "docker" not in given:
        assert words[words.index("--vllm-executable") + 1] == vllm  # as found on PATH here
    ran, direct = _dry_run(words), _dry_run(given)
    assert json.loads(json.dumps(ran).replace(json.dumps(vllm)[1:-1], "vllm")) == direct
    if "docker" in given:
        assert systemd_argv(unit, "ExecStartPre")[1:] == ["rm", "-f", "pasted"]


def test_no_secret_reaches_the_unit(box: Path) -> None:
    profile = _profile(box, "secret", {"launch": "cli"})
    unit = _unit(str(profile), "--vlaunch", VLAUNCH)
    assert SECRET not in unit and "FOO" not in unit  # serve reads the profile's env; the unit repeats none of it
    for args in (
        [str(profile), "--api-key", "sk-unit-secret"],
        ["--machine", "h100", "--", "HF_TOKEN=hf_pasted_secret", "vllm", "serve", "m/x", "--hf-config-path", LLAMA8B],
    ):
        split = args.index("--") if "--" in args else len(args)
        r = _render(*args[:split], "--vlaunch", VLAUNCH, *args[split:])
        assert r.exit_code == 2 and "a unit keeps none" in r.stderr and "/etc/vlaunch/" in r.stderr, r.output
        assert "secret" not in r.stdout and len(r.stderr.strip().splitlines()) == 1


def test_user_group_and_environment_file_on_request(box: Path) -> None:
    profile = _profile(box, "owned", {"launch": "module"})
    args = [str(profile), "--vlaunch", VLAUNCH, "--unit-user", "vllm", "--unit-group", "gpu", "--env-file", "x.env"]
    unit = _unit(*args)
    assert _lines(unit, "User") == ["vllm"] and _lines(unit, "Group") == ["gpu"]
    assert _lines(unit, "EnvironmentFile") == [f"-{box / 'x.env'}"]
    for bad in (["--unit-user", "a b"], ["--unit-group", "x\ny"], ["--logs-dir", "a\x1bb"], ["--env-file", "x.env "]):
        r = _render(str(profile), *bad)
        assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1, (bad, r.output)
        assert "\x1b" not in r.output and "\ny" not in r.stderr
    r = CliRunner().invoke(main, ["render", str(profile), "--as", "script", "--unit-user", "vllm"])
    assert r.exit_code == 2 and "are for --as systemd" in r.stderr


def test_the_vlaunch_a_unit_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import launcher

    script = _executable(tmp_path / "venv" / "bin" / "vlaunch")
    module = [os.path.abspath(sys.executable), "-m", "launcher"]
    monkeypatch.chdir(tmp_path)
    assert vlaunch_command("venv/bin/vlaunch") == [str(script)]
    monkeypatch.setattr(sys, "argv", [str(script), "render"])
    assert vlaunch_command() == [str(script)]
    monkeypatch.setattr(sys, "argv", [str(Path(launcher.__file__).parent / "__main__.py"), "render"])
    assert vlaunch_command() == module  # `python -m launcher`
    monkeypatch.setattr(sys, "argv", ["pytest"])
    monkeypatch.setenv("PATH", str(script.parent))
    assert vlaunch_command() == [str(script)]
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert vlaunch_command() == module


def test_restart_steps_where_systemd_reads_them(tmp_path: Path) -> None:
    plan = make_plan(load_profile(_profile(tmp_path, "steps", {"launch": "module"})))
    for version, steps in ((RESTART_STEPS_SINCE - 1, False), (RESTART_STEPS_SINCE, True), (None, True)):
        unit = render_launch(plan, "systemd", unit_for(plan, vlaunch=[VLAUNCH], systemd=version))
        assert ("RestartSteps=5" in unit and "RestartMaxDelaySec=5min" in unit) is steps
    assert set(NO_RESTART) == {2, 3, 4, 5, 8, 10}
    assert templating.ENV_DIR == "/etc/vlaunch"


def _verify(unit_text: str, where: Path) -> subprocess.CompletedProcess[str]:
    assert SYSTEMD_ANALYZE is not None
    units = where / "units"
    units.mkdir(exist_ok=True)
    path = units / "vlaunch-test.service"
    path.write_text(unit_text)
    return subprocess.run([SYSTEMD_ANALYZE, "verify", "--man=no", str(path)], capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip


@needs_systemd_analyze
@pytest.mark.parametrize(
    ("vllm", "extra"),
    [
        ({"launch": "module"}, []),
        ({"launch": "cli"}, ["--unit-user", "root", "--unit-group", "root", "--max-num-seqs", "8"]),
        ({"launch": "container", "image": "vllm/vllm-openai:v0.32.0"}, ["--env-file", "/etc/vlaunch/a b.env"]),
    ],
)
def test_systemd_analyze_verifies_the_unit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, vllm: dict[str, Any], extra: list[str]
) -> None:
    work = tmp_path / "dir%with$odd-chars"  # quoted, `%` and `$` escaped: systemd reads the same path back
    work.mkdir()
    monkeypatch.chdir(work)
    profile = _profile(work, "verify", vllm)
    unit = _unit(str(profile), "--vlaunch", VLAUNCH, *extra)
    assert systemd_argv(unit)[2] == str(profile) and _lines(unit, "WorkingDirectory") == [str(work).replace("%", "%%")]
    r = _verify(unit, tmp_path)
    assert r.returncode == 0 and not r.stdout.strip() and not r.stderr.strip(), r.stdout + r.stderr


@needs_systemd_analyze
def test_verify_refuses_a_unit_whose_vlaunch_is_not_there(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    profile = _profile(tmp_path, "missing", {"launch": "module"})
    r = _render(str(profile), "--vlaunch", str(tmp_path / "no" / "vlaunch"))
    assert r.exit_code == 0 and "is not an executable file here" in r.stderr
    assert _verify(r.stdout, tmp_path).returncode != 0  # the check above is the one verify makes
