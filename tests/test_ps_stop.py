"""`vlaunch ps` and `vlaunch stop PID` against real child processes: what runs vLLM or `vlaunch serve` is listed and
may be stopped; a shell whose command line merely mentions one is neither."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner

from launcher.cli import main

INSTANCE_KEYS = {"pid", "role", "cmdline", "rss_bytes", "started", "gpu_bytes", "orphan", "orphan_of"}
SLEEPER = "import time\ntime.sleep(120)\n"


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[bytes]]]:
    """The processes a test starts; each is killed (with what it started) when the test ends."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        try:
            procs = [psutil.Process(p.pid), *psutil.Process(p.pid).children(recursive=True)]
        except psutil.Error:
            procs = []
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        if p.poll() is None:
            p.kill()
        p.wait(10)


def start(children: list[subprocess.Popen[bytes]], argv: list[str], cwd: Path | None = None,
          shows: str | None = None) -> subprocess.Popen[bytes]:  # fmt: skip
    """Start `argv` and wait until its process shows `shows` in its command line (a python has started)."""
    p = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    children.append(p)
    end = time.monotonic() + 10
    while shows and time.monotonic() < end:
        try:
            if shows in " ".join(psutil.Process(p.pid).cmdline()):
                break
        except psutil.Error:
            pass
        time.sleep(0.05)
    return p


def stand_ins(tmp_path: Path) -> Path:
    """A directory from which `python -m vllm.entrypoints.openai.api_server` and `python -m launcher serve` run a
    sleeper: a process that looks like a real vLLM API server or vlaunch serve, and does nothing heavy."""
    api = tmp_path / "vllm" / "entrypoints" / "openai"
    api.mkdir(parents=True)
    for d in (tmp_path / "vllm", tmp_path / "vllm" / "entrypoints", api):
        (d / "__init__.py").write_text("")
    (api / "api_server.py").write_text(SLEEPER)
    (tmp_path / "launcher").mkdir()
    (tmp_path / "launcher" / "__init__.py").write_text("")
    (tmp_path / "launcher" / "__main__.py").write_text(SLEEPER)
    return tmp_path


def listed() -> dict[int, dict[str, object]]:
    r = CliRunner().invoke(main, ["ps", "--json"])
    assert r.exit_code == 0, r.output
    return {i["pid"]: i for i in json.loads(r.stdout)["instances"]}


def test_a_shell_that_mentions_vlaunch_serve_is_not_listed_and_stop_refuses_it(
    children: list[subprocess.Popen[bytes]],
) -> None:
    wrappers = [
        start(children, ["sh", "-c", "sleep 100; : vlaunch serve x"], shows="vlaunch serve"),
        start(children, ["bash", "-c", "sleep 100; echo vlaunch serve tiny-cpu"], shows="vlaunch serve"),
        start(children, ["sh", "-c", "sleep 100 # vlaunch serve x"]),  # the shell may exec sleep: still no vlaunch
        start(children, ["bash", "-c", "sleep 100; : python -m vllm.entrypoints.openai.api_server"], shows="vllm"),
    ]
    time.sleep(0.2)
    found = listed()
    for w in wrappers:
        assert w.pid not in found, found[w.pid]
        r = CliRunner().invoke(main, ["stop", str(w.pid), "--timeout", "1"])
        assert r.exit_code == 2, r.output
        assert r.stderr.count("\n") == 1 and "neither a vLLM process nor a `vlaunch serve`" in r.stderr, r.stderr
        assert "nothing stopped" in r.stderr and "stopped pid" not in r.stdout
        assert w.poll() is None  # still running: nothing was signalled


def test_a_process_that_runs_vllm_or_vlaunch_serve_is_listed_under_a_header(
    children: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    here = stand_ins(tmp_path)
    api = ["-m", "vllm.entrypoints.openai.api_server", "--model", "m"]
    server = start(children, [sys.executable, *api], cwd=here, shows="api_server")
    serve = start(children, [sys.executable, "-m", "launcher", "serve", "p.yaml"], cwd=here, shows="serve")
    # a shell around a vLLM: the shell is not listed, the python it starts is
    shell = start(children, ["sh", "-c", f"{sys.executable} {' '.join(api)}; :"], cwd=here, shows="api_server")
    end = time.monotonic() + 10
    while not psutil.Process(shell.pid).children() and time.monotonic() < end:
        time.sleep(0.05)
    [inner] = psutil.Process(shell.pid).children()
    time.sleep(0.3)  # the inner python has exec'd
    found = listed()
    assert found[server.pid]["role"] == "server" and found[inner.pid]["role"] == "server"
    assert found[serve.pid]["role"] == "vlaunch"
    assert shell.pid not in found
    assert all(set(i) == INSTANCE_KEYS for i in found.values())  # --json keeps its keys
    text = CliRunner().invoke(main, ["ps"]).stdout.splitlines()
    assert text[0].split() == ["PID", "ROLE", "RSS", "COMMAND"], text
    rows = {int(line.split()[0]): line for line in text[1:]}
    assert {server.pid, inner.pid, serve.pid} <= set(rows) and shell.pid not in rows
    assert rows[server.pid].split()[1:4] == ["server", rows[server.pid].split()[2], "GiB"]
    assert text[0].index("COMMAND") == rows[server.pid].index(sys.executable)  # the command column lines up
    r = CliRunner().invoke(main, ["stop", str(server.pid), "--timeout", "5"])
    assert r.exit_code == 0 and f"stopped pid {server.pid}" in r.stdout, r.output
    assert server.wait(10) != 0 and serve.poll() is None and shell.poll() is None
    r = CliRunner().invoke(main, ["stop", str(inner.pid), "--timeout", "5", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == {"schema": 1, "stopped": "pid", "profile": None, "pid": inner.pid}


def test_stop_refuses_a_pid_that_runs_nothing() -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    r = CliRunner().invoke(main, ["stop", str(dead.pid)])
    assert r.exit_code == 2 and "(no such process)" in r.stderr, r.output


def test_the_gpu_column_shows_when_nvidia_smi_names_a_process() -> None:
    from launcher.cli.ps import _table
    from launcher.run.guard import Instance

    rows = _table([Instance(123, "server", "python -m vllm.entrypoints.openai.api_server", 2**31, 0.0, 70 * 2**30),
                   Instance(4567, "vlaunch", "python vlaunch serve p", 2**27, 0.0, None, "run-1")])  # fmt: skip
    assert rows[0].split() == ["PID", "ROLE", "RSS", "GPU", "COMMAND"]
    assert rows[1].split()[:6] == ["123", "server", "2.00", "GiB", "70.00", "GiB"]
    assert rows[2].split()[:5] == ["4567", "vlaunch", "0.12", "GiB", "-"] and "[orphan of run run-1]" in rows[2]
    assert {r.index("python") for r in rows[1:]} == {rows[0].index("COMMAND")}
