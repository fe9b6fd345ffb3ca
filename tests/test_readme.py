"""The README's examples, run: every ```console block's commands print what the block shows, and every `vlaunch`
line of the ```sh blocks runs with the files it names (exit 0, or 3 where the example says it does not fit).

In a console block a line `$ CMD` (continued by a trailing `\\`) is run from the repository root with the
project's vlaunch; the lines up to the next `$` are its output. `…` in a shown line stands for any text, and a
line that is only `…` for any number of lines. Commands that serve vLLM, or that `make` runs, are not run here
(the e2e suite starts vLLM).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCK = re.compile(r"```(console|sh)\n(.*?)```", re.S)
NOT_RUN = ("vlaunch serve", "make ", "vlaunch calibrate  ", "vlaunch stop")


def _console_examples() -> list[tuple[str, list[str]]]:
    out: list[tuple[str, list[str]]] = []
    for lang, body in BLOCK.findall(README):
        if lang != "console":
            continue
        cmd: str | None = None
        shown: list[str] = []
        pending = ""
        for line in body.splitlines():
            if line.startswith("$ ") or pending:
                text = line[2:] if line.startswith("$ ") and not pending else line
                if cmd is not None and not pending:
                    out.append((cmd, shown))
                    shown = []
                pending += text.rstrip("\\").rstrip() + " " if text.endswith("\\") else ""
                if not text.endswith("\\"):
                    cmd, pending = (pending + text).strip(), ""
                continue
            shown.append(line)
        if cmd is not None:
            out.append((cmd, shown))
    return out


def _sh_lines() -> list[str]:
    out: list[str] = []
    for lang, body in BLOCK.findall(README):
        if lang != "sh":
            continue
        for line in body.splitlines():
            cmd = line.split("  #", 1)[0].strip()
            if cmd.startswith("vlaunch ") and not cmd.startswith(NOT_RUN):
                out.append(cmd)
    return out


def _run(cmd: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    """CMD in a folder that sees the checkout's files (tests/, profiles/, .cache/) but keeps what it writes."""
    words = shlex.split(cmd)
    if words[0] in (".venv/bin/vlaunch", "vlaunch"):
        words = [sys.executable, "-m", "launcher", *words[1:]]
    work = tmp / "work"
    work.mkdir()
    for name in ("tests", "profiles", ".cache", "templates"):
        if (ROOT / name).exists():
            (work / name).symlink_to(ROOT / name)
    (work / "logs").mkdir()  # `vlaunch calibrate` alone reads logs/: here, no run yet
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp / "config"), "COLUMNS": "200", "NO_COLOR": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    return subprocess.run(words, cwd=work, env=env, capture_output=True, text=True, timeout=300)


def _pattern(shown: list[str]) -> re.Pattern[str]:
    """The shown lines as one regex: `…` any text within a line, a line of `…` alone any lines."""
    parts: list[str] = []
    for line in shown:
        if line.strip() == "…":
            parts.append(r"(?:[^\n]*\n)*?")
            continue
        pieces = [re.escape(p) for p in line.rstrip().split("…")]
        parts.append(r"[^\n]*?".join(pieces) + r"[ \t]*\n")
    return re.compile("".join(parts), re.S)


CONSOLE = _console_examples()
SH = _sh_lines()


def test_the_readme_has_examples() -> None:
    assert len(CONSOLE) >= 8 and len(SH) >= 10


@pytest.mark.parametrize(("cmd", "shown"), CONSOLE, ids=[c[:60] for c, _ in CONSOLE])
def test_console_example_prints_what_the_readme_shows(cmd: str, shown: list[str], tmp_path: Path) -> None:
    r = _run(cmd, tmp_path)
    assert r.returncode in (0, 1, 3), r.stderr[-2000:]
    text = "\n".join(line.rstrip() for line in r.stdout.splitlines()) + "\n"
    assert _pattern(shown).match(text), "README shows:\n" + "\n".join(shown) + f"\n\nvlaunch printed:\n{text}"


@pytest.mark.parametrize("cmd", SH, ids=[c[:60] for c in SH])
def test_sh_example_runs(cmd: str, tmp_path: Path) -> None:
    r = _run(cmd, tmp_path)
    assert r.returncode in (0, 3), f"{cmd}\n{r.stderr[-2000:]}"
