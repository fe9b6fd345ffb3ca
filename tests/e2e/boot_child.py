"""A test session to be killed: run only as a child pytest session (`pytest tests/e2e/boot_child.py`, named
explicitly: the file name is not test_*.py, so neither `make test` nor `make e2e` collects it) by
tests/e2e/test_session_box.py and tests/test_orphans.py, which kill its whole process group while the process it
starts runs.

It starts vLLM through the e2e fixture `start_vllm`, as every e2e test does: the tiny Llama on the CPU build on the
port BOOT_CHILD_PORT, or the command BOOT_CHILD_ARGV (a JSON list: a stand-in) when that is set. It writes the
session's run id and the process's pid and log to BOOT_CHILD_OUT, then waits.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.conftest import Session
from tests.e2e.conftest import ROOT, TINY, VLLM_PYTHON


def _argv() -> list[str]:
    if os.environ.get("BOOT_CHILD_ARGV"):
        argv: list[str] = json.loads(os.environ["BOOT_CHILD_ARGV"])
        return argv
    if not VLLM_PYTHON.exists() or not (TINY / "config.json").exists():
        pytest.fail("real vLLM is not set up: run `make vllm-cpu`")
    from launcher.plan.planning import make_plan
    from launcher.plan.profiles import load_profile

    profile = load_profile(ROOT / "profiles" / "tiny-cpu.yaml")
    plan = make_plan(profile.with_overrides(vllm={"port": int(os.environ["BOOT_CHILD_PORT"])}))
    return list(plan.argv)


def test_start_then_wait(start_vllm, session_box: Session) -> None:
    server = start_vllm(_argv(), name="boot")
    info = {"run": session_box.run_id, "pid": server.proc.pid, "log": str(server.log)}
    Path(os.environ["BOOT_CHILD_OUT"]).write_text(json.dumps(info))
    time.sleep(900)  # until the parent kills this session
