"""`vlaunch serve` against what it does not control: the directory it runs from (S3), secrets in a profile and a
command (S8), a server's /metrics labels (H4), vLLM's output lines (H6) and a run record that cannot be written
(H7). vLLM is a stand-in script, as in tests/test_orphans.py.
"""

from __future__ import annotations

import io
import itertools
import json
import os
import queue
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import launcher
from launcher.check.facts import LogFacts
from launcher.cli import main
from launcher.run import guard, launch
from launcher.run import supervise as sup
from tests.test_orphans import _port, wait_for_line

TINY = Path(__file__).parent / "fixtures" / "tiny-llama" / "config.json"
PACKAGE_ROOT = Path(launcher.__file__).resolve().parent.parent
SLEEPER = """#!/bin/sh
echo "INFO 12-01 10:00:00 [api_server.py:1] vLLM API server version 0.19.0"
exec sleep 300
"""
HF_SECRET, KEY_SECRET, ARG_SECRET = "hf_ProfileSecret1", "key_ProfileSecret2", "sk-ArgSecret3"
SECRETS = (HF_SECRET, KEY_SECRET, ARG_SECRET)


def _profile(tmp: Path, script: str, *, extra: str = "", port: int | None = None) -> Path:
    model = tmp / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(TINY.read_text())
    exe = tmp / "bin" / "vllm"
    exe.parent.mkdir(exist_ok=True)
    exe.write_text(script)
    exe.chmod(0o755)
    profile = tmp / "sec.yaml"
    profile.write_text(
        f"name: sec\nmodel: {model}\nmachine: cpu\nmax_model_len: 2048\ngpu_memory_utilization: 0.3\n"
        f'vllm:\n  version: "0.19.0"\n  launch: cli\n  executable: {exe}\n  port: {port or _port()}\n{extra}'
    )
    return profile


SECRET_EXTRA = (
    f"  env: {{HF_TOKEN: {HF_SECRET}, MY_API_KEY: {KEY_SECRET}, VLLM_PLAIN: visible-value}}\n"
    f"  extra_args: [--api-key, {ARG_SECRET}]\n"
)


@pytest.fixture
def box(tmp_path: Path) -> Iterator[dict[str, Any]]:
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(run_dir), "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(PACKAGE_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    started: list[subprocess.Popen[str]] = []
    yield {"tmp": tmp_path, "env": env, "logs": tmp_path / "logs", "started": started, "run": run_dir}
    for p in started:
        if p.poll() is None:
            p.kill()
            p.wait(10)
        for fh in (p.stdout, p.stderr):
            if fh:
                fh.close()
    for log in (tmp_path / "logs").glob("*.log"):
        sup.stop_pids(sup.run_pids(log.stem), grace=1)


def _serve(box: dict[str, Any], profile: Path, *extra: str, cwd: Path | None = None) -> subprocess.Popen[str]:
    # -P: the wrapper itself imports the package under test, whatever the directory it runs from
    argv = [sys.executable, "-P", "-m", "launcher", "serve", str(profile), "--logs-dir", str(box["logs"]),
            "--skip-preflight", *extra]  # fmt: skip
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=box["env"], cwd=cwd)
    box["started"].append(p)
    return p


def _wait_gone(run: str, timeout: float) -> list[int]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not sup.run_pids(run):
            return []
        time.sleep(0.2)
    return sup.run_pids(run)


# ---- S3: the supervisor is this install's, whatever the current directory holds ---------------------------------


@pytest.mark.parametrize("planted", ["package", "module"])
def test_planted_launcher_in_cwd_never_runs_and_the_supervisor_still_does(box: dict[str, Any], planted: str) -> None:
    evil = box["tmp"] / "evil"
    pwned = box["tmp"] / "PWNED"
    code = f"open({str(pwned)!r}, 'w').write('planted code ran')\n"
    if planted == "package":
        (evil / "launcher").mkdir(parents=True)
        (evil / "launcher" / "__init__.py").write_text(code)
        (evil / "launcher" / "supervise.py").write_text(code)
    else:
        evil.mkdir()
        (evil / "launcher.py").write_text(code)
    profile = _profile(box["tmp"], "#!/bin/sh\necho 'INFO starting'\nsetsid sleep 300 &\nexec sleep 300\n")
    p = _serve(box, profile, cwd=evil)
    wait_for_line(p, "vLLM pid")
    time.sleep(0.5)  # the stand-in has started its worker
    [log] = box["logs"].glob("sec-*.log")
    assert len(sup.run_pids(log.stem)) >= 2
    p.send_signal(signal.SIGKILL)
    p.wait(10)
    assert _wait_gone(log.stem, 20) == [], "the supervisor did not stop vLLM after serve was killed"
    assert not pwned.exists(), "code from the current directory ran"


def test_serve_refuses_when_the_supervisor_does_not_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started = tmp_path / "VLLM_STARTED"
    profile = _profile(tmp_path, f"#!/bin/sh\ntouch {started}\nexec sleep 300\n")
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run_dir))
    monkeypatch.setattr(launch, "_SUPERVISOR_BOOT", "import sys; sys.exit(1)")
    logs_dir = tmp_path / "logs"
    r = CliRunner().invoke(main, ["serve", str(profile), "--logs-dir", str(logs_dir), "--skip-preflight"])
    assert r.exit_code == 70, r.output
    errors = [line for line in r.stderr.splitlines() if line.startswith("vlaunch: error:")]
    assert len(errors) == 1 and "supervisor" in errors[0] and "nothing was launched" in errors[0], r.stderr
    assert not started.exists()  # vLLM never started
    [rec] = logs_dir.glob("sec-*.json")
    data = json.loads(rec.read_text())
    assert data["exit"] == 70 and "supervisor" in data["error"]
    assert guard.read_holder(run_dir / "vlaunch" / "serve.lock") is None


# ---- S8: secrets are masked in what is shown and stored, and reach vLLM -----------------------------------------


def _no_secret(text: str, where: str) -> None:
    for s in SECRETS:
        assert s not in text, f"{s} in {where}: {text[-3000:]}"


def test_secrets_masked_in_plan_dry_run_and_json(tmp_path: Path) -> None:
    profile = _profile(tmp_path, SLEEPER, extra=SECRET_EXTRA)
    run = CliRunner()
    for args in (
        ["plan", str(profile)],
        ["plan", str(profile), "--json"],
        ["serve", str(profile), "--dry-run", "--skip-preflight"],
        ["serve", str(profile), "--dry-run", "--skip-preflight", "--json"],
    ):
        r = run.invoke(main, args)
        assert r.exit_code == 0, r.output
        _no_secret(r.output, " ".join(args[:1] + args[2:]))
        assert "***" in r.stdout and "visible-value" in r.stdout
    d = json.loads(run.invoke(main, ["plan", str(profile), "--json"]).stdout)
    assert d["vllm_env"] == {"HF_TOKEN": "***", "MY_API_KEY": "***", "VLLM_PLAIN": "visible-value"}
    assert d["vllm_argv"][-2:] == ["--api-key", "***"]


def test_secrets_masked_in_a_container_command(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(TINY.read_text())
    profile = tmp_path / "box.yaml"
    profile.write_text(
        f"name: box\nmodel: {model}\nmachine: cpu\nmax_model_len: 2048\n"
        f'vllm:\n  version: "0.19.0"\n  launch: container\n  image: vllm/vllm-openai:v0.19.0\n{SECRET_EXTRA}'
    )
    r = CliRunner().invoke(main, ["serve", str(profile), "--dry-run", "--skip-preflight", "--json"])
    assert r.exit_code == 0, r.output
    _no_secret(r.stdout, "a container launch's dry run")
    argv = json.loads(r.stdout)["argv"]
    assert "HF_TOKEN=***" in argv and "MY_API_KEY=***" in argv and "VLLM_PLAIN=visible-value" in argv


def test_secrets_reach_vllm_but_not_the_lock_record_or_log(box: dict[str, Any]) -> None:
    seen = box["tmp"] / "seen"
    script = (  # prints its arguments and environment the way vLLM's `non-default args` line does
        "#!/bin/sh\n"
        f'echo "$HF_TOKEN $MY_API_KEY $*" > {seen}\n'
        'echo "INFO non-default args: $* hf_token=$HF_TOKEN key=$MY_API_KEY"\n'
        "exec sleep 300\n"
    )
    p = _serve(box, _profile(box["tmp"], script, extra=SECRET_EXTRA))
    wait_for_line(p, "vLLM pid")
    end = time.monotonic() + 30
    while not (seen.exists() and seen.read_text()) and time.monotonic() < end:
        time.sleep(0.1)
    lock = (box["run"] / "vlaunch" / "serve.lock").read_text()
    _no_secret(lock, "the box lock")
    assert "***" in lock
    time.sleep(1.0)  # the argument line reaches the log
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, out + err
    _no_secret(out + err, "serve's output")
    got = seen.read_text()
    assert HF_SECRET in got and KEY_SECRET in got and ARG_SECRET in got  # vLLM was given the real values
    [rec] = box["logs"].glob("sec-*.json")
    [log] = box["logs"].glob("sec-*.log")
    _no_secret(rec.read_text(), "the run record")
    _no_secret(log.read_text(), "the run log")
    assert "non-default args" in log.read_text()
    data = json.loads(rec.read_text())
    assert data["predicted"]["vllm_env"]["HF_TOKEN"] == "***" and "***" in data["argv"]
    for path in (rec, log):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


def test_secret_spellings_are_masked_and_nothing_else() -> None:
    from launcher.common import redact

    words = ["docker", "run", "-e", "HF_TOKEN=hf_a1", "--env=VLLM_API_KEY=key_b2", "-e", "VLLM_PORT=1", "img",
             "vllm", "serve", "m", "--api-key", "k1", "k2", "--port", "8000", "--hf_token=t3",
             "--ssl-keyfile", "/etc/k.pem", "--ssl-keyfile-password", "pw4", "--max-num-batched-tokens", "8192",
             "--tokenizer", "tok"]  # fmt: skip
    shown = redact.argv(words)
    assert shown == ["docker", "run", "-e", "HF_TOKEN=***", "--env=VLLM_API_KEY=***", "-e", "VLLM_PORT=1", "img",
                     "vllm", "serve", "m", "--api-key", "***", "***", "--port", "8000", "--hf_token=***",
                     "--ssl-keyfile", "/etc/k.pem", "--ssl-keyfile-password", "***", "--max-num-batched-tokens",
                     "8192", "--tokenizer", "tok"]  # fmt: skip
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "GITHUB_TOKEN", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY",
                 "DB_PASSWORD"):  # fmt: skip
        assert redact.secret_name(name), name
    for name in ("VLLM_PORT", "MAX_TOKENS", "TOKENIZERS_PARALLELISM", "HF_HOME"):
        assert not redact.secret_name(name), name
    mask = redact.Masker.of(words, {"HF_TOKEN": "hf_fromtheprofile"})
    assert mask.line(b"args: {'api_key': ['k1'], 'token': 'hf_fromtheprofile'}\n") == (
        b"args: {'api_key': ['k1'], 'token': '***'}\n"
    )


# ---- H4: a malformed /metrics label is "not available" -----------------------------------------------------------


@pytest.mark.parametrize(
    "labels",
    [
        'block_size="16",num_gpu_blocks="12.5",kv_cache_size_tokens="abc"',
        'block_size="x",num_gpu_blocks="-3",kv_cache_size_tokens="1e9"',
        'block_size="16",num_gpu_blocks="' + "9" * 5000 + '"',
    ],
)
def test_malformed_metrics_labels_are_not_available(labels: str) -> None:
    facts = LogFacts(num_blocks=100, kv_pool_tokens=1600)
    check = launch.metrics_check(facts, launch.cache_config_info(f"vllm:cache_config_info{{{labels}}} 1.0\n"), 16)
    assert check["available"] is False and check["malformed"]
    assert launch._metrics_line(check).startswith("not available")


def test_a_malformed_label_leaves_the_others() -> None:
    facts = LogFacts(num_blocks=100, kv_pool_tokens=1600)
    text = 'vllm:cache_config_info{block_size="16",num_gpu_blocks="100",kv_cache_size_tokens="n/a"} 1.0'
    check = launch.metrics_check(facts, launch.cache_config_info(text), 16)
    assert check["available"] is True and check["num_gpu_blocks"] == 100 and check["blocks_agree"] is True
    assert check["malformed"] == ["kv_cache_size_tokens"] and "kv_cache_size_tokens" not in check


FAKE_SERVER = """#!{python}
import http.server, sys
print("INFO:     Application startup complete.", flush=True)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"ok" if self.path == "/health" else (
            b'vllm:cache_config_info{{block_size="16",num_gpu_blocks="12.5",kv_cache_size_tokens="abc"}} 1.0\\n')
        self.send_response(200); self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", {port}), H).serve_forever()
"""


def test_serve_keeps_a_server_whose_metrics_labels_are_malformed(box: dict[str, Any]) -> None:
    port = _port()
    profile = _profile(box["tmp"], FAKE_SERVER.format(python=sys.executable, port=port), port=port)
    p = _serve(box, profile, "--stop-after-ready")
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, out + err
    assert "/metrics cache_config_info: not available" in out and "internal error" not in err
    [rec] = box["logs"].glob("sec-*.json")
    data = json.loads(rec.read_text())
    assert data["exit"] == 0 and data["metrics_check"]["available"] is False


# ---- H6: vLLM's lines are read with a bound ----------------------------------------------------------------------


def test_pump_caps_an_over_long_line() -> None:
    cap = 4096
    stream = io.BytesIO(b"a" * (10 * cap + 7) + b"\nnext\n" + b"b" * cap + b"\n" + b"tail")
    q: queue.Queue[bytes | None] = queue.Queue()
    launch._pump(stream, q, cap)
    got = []
    while (item := q.get_nowait()) is not None:
        got.append(item)
    assert got == [b"a" * cap + b"\n", b"next\n", b"b" * cap + b"\n", b"tail"]


def test_pump_reads_a_pipe_without_holding_a_line_whole() -> None:
    r, w = os.pipe()
    q: queue.Queue[bytes | None] = queue.Queue()
    with os.fdopen(r, "rb") as stream:
        writer = subprocess.Popen(
            [sys.executable, "-c", "import sys; sys.stdout.buffer.write(b'x' * (8 << 20) + b'\\nok\\n')"], stdout=w
        )
        os.close(w)
        launch._pump(stream, q)
        writer.wait(30)
    first, second, end = q.get_nowait(), q.get_nowait(), q.get_nowait()
    assert len(first) == launch.LINE_CAP + 1 and second == b"ok\n" and end is None


def _readline_cut(data: bytes, cap: int) -> list[bytes]:
    """The cut as `readline(cap)` makes it: the first `cap` bytes of a longer line and a newline; the rest dropped."""
    stream, out = io.BytesIO(data), []
    while line := stream.readline(cap):
        if len(line) >= cap and not line.endswith(b"\n"):
            while (rest := stream.readline(cap)) and not rest.endswith(b"\n"):
                pass
            line += b"\n"
        out.append(line)
    return out


@settings(max_examples=300, deadline=None)
@given(
    data=st.lists(st.sampled_from([b"a", b"bb", b"\n", b"c" * 7, b"\r"]), max_size=60).map(b"".join),
    cap=st.integers(1, 12),
    cuts=st.lists(st.integers(0, 400), max_size=8),
)
def test_line_cutter_cuts_as_readline_does_wherever_the_chunks_break(data: bytes, cap: int, cuts: list[int]) -> None:
    edges = sorted({0, len(data), *(c for c in cuts if c < len(data))})
    cutter, got = launch._LineCutter(cap), []
    for a, b in itertools.pairwise(edges):
        got += cutter.feed(data[a:b])
    if tail := cutter.end():
        got.append(tail)
    assert got == _readline_cut(data, cap)


def test_a_signal_while_the_supervisor_starts_ends_the_wait_within_a_poll() -> None:
    r, w = os.pipe()  # a supervisor that never says it runs
    calls: list[float] = []

    def check() -> None:
        calls.append(time.monotonic())
        if len(calls) == 3:
            raise launch._Stop(signal.SIGTERM)

    t0 = time.monotonic()
    try:
        with pytest.raises(launch._Stop):
            launch._read_ready(r, 30.0, check)
    finally:
        os.close(r)
        os.close(w)
    assert time.monotonic() - t0 < 3 * launch.PUMP_POLL + 1.0


def test_serve_logs_an_over_long_line_cut(box: dict[str, Any]) -> None:
    script = "#!/bin/sh\nhead -c 3000000 /dev/zero | tr '\\0' x\necho\necho 'INFO after the long line'\nexit 3\n"
    p = _serve(box, _profile(box["tmp"], script))
    out, err = p.communicate(timeout=120)
    assert p.returncode == 1, out + err
    [log] = box["logs"].glob("sec-*.log")
    assert log.stat().st_size <= launch.LINE_CAP + 1000
    assert log.read_bytes().endswith(b"INFO after the long line\n")


def test_a_vllm_that_closes_its_output_before_it_exits_is_a_failure(box: dict[str, Any]) -> None:
    """The output ends a moment before the process: serve waits for the exit status, and an exit before ready
    is a failure (exit 1), however the two race."""
    script = "#!/bin/sh\necho 'INFO starting'\nexec 1>&- 2>&-\nsleep 1\nexit 3\n"
    p = _serve(box, _profile(box["tmp"], script))
    out, err = p.communicate(timeout=120)
    assert p.returncode == 1, out + err
    assert "vLLM exited with code 3 before it was ready" in out


# ---- H7: a record that cannot be written is a warning; the exit code stays ---------------------------------------


def test_unwritable_record_is_a_warning_and_the_exit_code_is_kept(box: dict[str, Any]) -> None:
    box["logs"].mkdir()
    now = time.time()
    for t in range(-2, 90):  # the record's name carries the second serve starts in: take every one of them
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now + t))
        (box["logs"] / f"sec-{stamp}.json").mkdir()
    p = _serve(box, _profile(box["tmp"], SLEEPER))
    wait_for_line(p, "vLLM pid")
    time.sleep(0.5)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vlaunch: warning: the run record was not written"), err
    assert ".tmp" not in err and "run record:" not in out
    [log] = box["logs"].glob("sec-*.log")
    assert sup.run_pids(log.stem) == []
    assert guard.read_holder(box["run"] / "vlaunch" / "serve.lock") is None


def test_each_line_reaches_the_run_log_as_it_comes(box: dict[str, Any]) -> None:
    """The run log is written line by line, not in blocks: `tail -f` (and a test waiting for vLLM's statistics
    line) sees a line while vLLM still runs."""
    script = "#!/bin/sh\necho 'INFO a line, then silence'\nexec sleep 300\n"
    p = _serve(box, _profile(box["tmp"], script))
    deadline = time.monotonic() + 60
    seen = ""
    while time.monotonic() < deadline and "a line, then silence" not in seen:
        logs = list(box["logs"].glob("sec-*.log"))
        seen = logs[0].read_text() if logs else ""
        time.sleep(0.2)
    assert p.poll() is None, "serve should still be waiting for vLLM"
    assert "a line, then silence" in seen
    p.send_signal(signal.SIGTERM)
    p.communicate(timeout=60)
