"""The extractors of what failed before vLLM could size anything: docker, the GPU and its driver, the port, the
model's repo, the disk. A warning that says so only hints at a failure (see `LogParser.env`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import regex as re

from launcher.check.facts import Failure
from launcher.check.failures import NOT_FATAL
from launcher.common.records import dataclass
from launcher.vllm.logs import (
    ADDRESS_IN_USE,
    DOCKER_DAEMON,
    DRIVER_TOO_OLD,
    HF_GATED,
    HF_REPO_NOT_FOUND,
    HF_UNREACHABLE,
    NO_CUDA_GPU,
    NO_GPU_RUNTIME,
    OUT_OF_DISK,
)

if TYPE_CHECKING:
    from launcher.check.extract import Match, Rule
    from launcher.check.parser import LogParser

_SOCKET = re.compile(r"(?:unix|tcp|npipe)://[^\s;:]+?(?=\.?(?:\s|$)|[:;])")


@dataclass
class RepoAccess:
    """What the log says about reaching the model's repo, line by line (huggingface_hub, transformers and vLLM each
    print their own part of one failure); `failure()` names the most specific cause."""

    repo: str | None = None
    status: int | None = None  # 401 | 403 | 404
    gated: bool = False
    unlisted: bool = False  # gated, and the token's account is not on the authorised list
    missing: bool = False
    revision: bool = False
    offline_mode: bool = False  # HF_HUB_OFFLINE is set and the files are not cached
    unreachable: bool = False
    invalid: bool = False  # vLLM's "Invalid repository ID or local directory specified"

    def failure(self) -> Failure:
        r = self.repo or "the model"
        page = f"https://huggingface.co/{self.repo}" if self.repo else "the model's page on huggingface.co"
        token = "`export HF_TOKEN=hf_…` (a token of that account; in docker `-e HF_TOKEN`)"
        if self.gated and (self.unlisted or self.status == 403):
            msg = f"{r} is a gated repo and the token's account is not on its authorised list (403)"
            return Failure("repo_access", msg, f"ask for access (accept the licence) on {page}, then {token}")
        if self.gated:
            msg = f"{r} is a gated repo and the request had no token with access to it (401)"
            return Failure("repo_access", msg, f"accept the licence on {page} and {token}")
        if self.revision:
            msg = f"the revision asked for (branch, tag or commit) does not exist in {self.repo or 'the model repo'}"
            return Failure("repo_access", msg, "check --revision against the repo's branches and tags")
        if self.missing and self.status == 404:
            msg = f"Hugging Face has no repo {self.repo} (404)" if self.repo else "Hugging Face has no such repo (404)"
            fix = "check the repo id (owner/name, as on huggingface.co), or give a local directory as the model"
            return Failure("repo_access", msg, fix)
        if self.offline_mode:
            msg = f"HF_HUB_OFFLINE is set and {r} is not in the Hugging Face cache"
            get = f"`hf download {self.repo}`" if self.repo else "`hf download REPO`"
            return Failure("repo_access", msg, f"download it first ({get}, same HF_HOME) or give a local directory")
        if self.unreachable:
            msg = f"huggingface.co could not be reached and {r} is not in the local cache (offline?)"
            fix = (
                "HF_HUB_OFFLINE=1 with the model already in the HF cache (`hf download` where there is network, "
                "same HF_HOME), or give a local directory as the model"
            )
            return Failure("repo_access", msg, fix)
        if self.missing or self.status in (401, 403):
            msg = f"Hugging Face refused {r} ({self.status or 'not found'}: no such repo, or a private or gated one "
            msg += "without a token that has access)"
            return Failure("repo_access", msg, f"check the repo id; if it is gated or private, accept the licence on "
                           f"{page} and {token}")  # fmt: skip
        msg = f"vLLM found no config.json for {r}: not a repo it could read, nor a local directory with one"
        fix = "check the repo id or the path (a local directory needs config.json); a gated repo needs " + token
        return Failure("repo_access", msg, fix)


def _hint(text: str) -> bool:
    return NOT_FATAL.search(text) is not None


def docker_daemon(p: LogParser, m: Match, text: str) -> None:
    sock = (k.group(0) if (k := _SOCKET.search(text)) else None) or "its socket"
    without = "or run vLLM without docker: `vllm.launch: cli` or `module`"
    if m["denied"]:
        msg = f"docker may not talk to the Docker daemon: permission denied on {sock}"
        fix = f"add the user to the docker group (`sudo usermod -aG docker $USER`, log in again), {without}"
    else:
        msg = f"docker could not reach the Docker daemon at {sock}: is it running?"
        fix = f"start it (`sudo systemctl start docker`), {without}"
    p.env(Failure("docker_daemon", msg, fix), _hint(text))


def no_gpu_runtime(p: LogParser, m: Match, text: str) -> None:
    flag = "`--runtime nvidia`" if "runtime name" in m.group(0) else "`--gpus`"
    p.env(
        Failure(
            "no_gpu_runtime",
            f"docker has no NVIDIA GPU runtime: {flag} needs the NVIDIA Container Toolkit",
            "install nvidia-container-toolkit, then "
            "`sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl restart docker`",
        ),
        _hint(text),
    )


def no_cuda_gpu(p: LogParser, m: Match, text: str) -> None:
    if m["infer"]:
        msg = "vLLM found no GPU platform ('Failed to infer device type'): no NVIDIA GPU or driver is visible"
    elif m["libcuda"]:
        msg = "vLLM's CUDA build cannot load libcuda.so.1: no NVIDIA driver is visible"
    elif m["toolkit"]:
        msg = "the NVIDIA container runtime found no working NVIDIA driver on the host"
    else:
        msg = f"no NVIDIA GPU is visible ({m.group(0)})"
    fix = (
        "run on a machine with an NVIDIA GPU and driver (`nvidia-smi` lists it; in docker add `--gpus all`; "
        "an empty CUDA_VISIBLE_DEVICES hides them), or plan for `--machine cpu` with vLLM's CPU build"
    )
    p.env(Failure("no_cuda_gpu", msg, fix), _hint(text))


def driver_too_old(p: LogParser, m: Match, text: str) -> None:
    fix = (
        "upgrade the NVIDIA driver (`nvidia-smi` shows the newest CUDA it supports), or use a vLLM image or "
        "wheel built for that CUDA"
    )
    if m["found"]:
        v = int(m["found"])
        msg = (
            f"the NVIDIA driver supports CUDA {v // 1000}.{v % 1000 // 10} at most (found version {v}); this "
            "PyTorch was built for a newer CUDA"
        )
    elif m["need"]:
        msg = f"the image needs CUDA >= {m['need']} and the host's NVIDIA driver supports an older one"
        fix = (
            f"upgrade the NVIDIA driver to one for CUDA {m['need']}+, or use a vLLM image built for the CUDA "
            "`nvidia-smi` shows"
        )
    elif m["mismatch"]:
        msg = "the CUDA driver library in use does not match the kernel's NVIDIA driver (error 803)"
        fix += " (or drop a forward-compat libcuda from the image / LD_LIBRARY_PATH)"
    else:
        msg = "the NVIDIA driver is older than the CUDA runtime vLLM's PyTorch was built for"
    p.env(Failure("driver_too_old", msg, fix), _hint(text))


def address_in_use(p: LogParser, m: Match, text: str) -> None:
    p.env(_address_in_use(p, m, text), _hint(text))


def _address_in_use(p: LogParser, m: Match, text: str) -> Failure:
    if not m.group(0).startswith("[Errno"):  # one of the engine's own sockets (ZMQ, torch.distributed)
        what = "ZMQ" if "ZMQError" in text else "torch.distributed"
        port = m["iport"]
        if port is None:
            return Failure(
                "address_in_use", f"a {what} socket vLLM binds is taken", "stop the earlier vLLM (`vlaunch ps`)"
            )
        return Failure(
            "address_in_use",
            f"port {port}, which vLLM's {what} binds, is already in use",
            f"stop what listens on {port} (ss -ltnp 'sport = :{port}'; an earlier vLLM? `vlaunch ps`), or set "
            "VLLM_PORT to a free port",
        )
    return _api_port_in_use(p, int(m["port"]) if m["port"] else None)


def _api_port_in_use(p: LogParser, port: int | None) -> Failure:
    args = p.facts.non_default_args
    arg = args.get("port")
    if port is None and isinstance(arg, int) and not isinstance(arg, bool):
        port = arg
    elif port is None and args:
        port = 8000  # the non-default args were logged without one: vLLM's default
    if port is None:
        return Failure(
            "address_in_use",
            "vLLM's API port is already in use: another server (an earlier vLLM?) listens on it",
            "--port with a free port, or stop what listens on vLLM's port (8000 unless --port; "
            "ss -ltnp 'sport = :8000')",
        )
    return Failure(
        "address_in_use",
        f"port {port} is already in use: another server (an earlier vLLM?) listens on it",
        f"--port {port + 1} or stop what listens on {port} (ss -ltnp 'sport = :{port}')",
    )


def repo_access(p: LogParser, m: Match, text: str) -> None:
    """The three repo patterns fold together: this reads all of them, whichever matched first."""
    if _fold_repo(p, text):
        unreachable = p.search(HF_UNREACHABLE, text)
        p.env(p.repo.failure(), _hint(text) or bool(unreachable and unreachable["hint"]), refine=True)


def _fold_repo(p: LogParser, text: str) -> bool:
    """Fold what the text says about the model's repo into `p.repo`; whether it said anything."""
    st = p.repo
    said = False
    repos: list[str] = []
    if m := p.search(HF_GATED, text):
        st.gated = said = True
        st.unlisted = st.unlisted or bool(m["unlisted"])
        repos.append(m["repo"] or "")
    if (m := p.search(HF_REPO_NOT_FOUND, text)) and "Entry Not Found" not in text and "EntryNotFound" not in text:
        said = True
        if m["status"]:
            st.status = int(m["status"])
        if m["revision"]:
            st.revision = True
        elif m["invalid"]:
            st.invalid = True
        elif not m["status"] or (st.status == 404 and "Revision" not in text):
            st.missing = True
        repos.append(m["repo"] or "")
    if m := p.search(HF_UNREACHABLE, text):
        said = True
        if m["offline"]:
            st.offline_mode = True
        else:
            st.unreachable = True
    for r in repos:
        r = r.rstrip(".")
        if r and st.repo is None:
            st.repo = r
    return said


def out_of_disk(p: LogParser, m: Match, text: str) -> None:
    path = m["path"] or (m["shm"].split()[-1] if m["shm"] else None)
    if path and path.startswith("/dev/shm"):
        msg = f"shared memory ran out ({path}): docker gives a container 64 MB of /dev/shm"
        fix = "in docker add `--ipc=host` (or `--shm-size 16g`); elsewhere free /dev/shm"
    else:
        msg = f"the disk is full (No space left on device{': ' + path if path else ''})"
        fix = "free disk (`df -h`), or point HF_HOME (where models download) at a disk with room"
    p.env(Failure("out_of_disk", msg, fix), _hint(text))


ENVIRONMENT_RULES: tuple[Rule, ...] = (
    ((DOCKER_DAEMON, docker_daemon),),
    ((NO_GPU_RUNTIME, no_gpu_runtime),),
    ((NO_CUDA_GPU, no_cuda_gpu),),
    ((DRIVER_TOO_OLD, driver_too_old),),
    ((ADDRESS_IN_USE, address_in_use),),
    ((HF_GATED, repo_access), (HF_REPO_NOT_FOUND, repo_access), (HF_UNREACHABLE, repo_access)),
    ((OUT_OF_DISK, out_of_disk),),
)
