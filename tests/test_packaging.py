"""The package's metadata as a wheel carries it: the Apache-2.0 licence as an SPDX expression with its text, and a
build that warns of nothing deprecated."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_wheel_carries_the_licence_and_builds_without_deprecation(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", str(ROOT), "-w", str(tmp_path)],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    log = r.stdout + r.stderr
    assert "SetuptoolsDeprecationWarning" not in log, log[-3000:]
    wheel = next(tmp_path.glob("vlaunch-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        licence = next(n for n in names if n.endswith("licenses/LICENSE"))
        text = z.read(licence).decode()
    assert "License-Expression: Apache-2.0" in meta.splitlines()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert (ROOT / "LICENSE").read_text() == text
