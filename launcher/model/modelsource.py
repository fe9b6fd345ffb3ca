"""Find and read a model's config.json: a file, a local directory, or a Hugging Face repo id.

Repo ids resolve from the local Hugging Face cache first (offline), then from the configs vlaunch ships, and only
then, when the network is allowed, by downloading config.json alone with huggingface_hub.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from launcher.common.errors import ConfigError
from launcher.common.records import dataclass

if TYPE_CHECKING:
    from launcher.model.arch.model import Model
    from launcher.model.checkpoint import CheckpointBytes

BUNDLED = Path(__file__).resolve().parent.parent / "data" / "configs"  # launcher/data/configs
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")


@dataclass(frozen=True)
class ModelSource:
    spec: str  # what the user typed
    config: dict[str, Any]
    config_path: str
    model_dir: str | None  # directory that may hold weights (safetensors / GGUF)
    hf_quant_config: dict[str, Any] | None = None
    origin: str = "file"  # file | directory | hf-cache | bundled | download


def read_json(path: Path) -> dict[str, Any]:
    from launcher.common.files import read_small

    text = read_small(path, ConfigError)
    try:
        data = json.loads(text)
    except UnicodeDecodeError:
        raise ConfigError("not UTF-8 text", source=str(path)) from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"malformed JSON at line {e.lineno} column {e.colno}: {e.msg}", source=str(path)) from None
    except ValueError as e:  # an integer of more digits than Python converts
        raise ConfigError(f"malformed JSON: {e}", source=str(path)) from None
    except RecursionError:
        raise ConfigError("malformed JSON: nested deeper than any config.json", source=str(path)) from None
    if not isinstance(data, dict):
        raise ConfigError("must be a JSON object", source=str(path))
    return data


def _hf_cache_dirs() -> list[Path]:
    dirs = []
    if os.environ.get("HF_HUB_CACHE"):
        dirs.append(Path(os.environ["HF_HUB_CACHE"]))
    if os.environ.get("HF_HOME"):
        dirs.append(Path(os.environ["HF_HOME"]) / "hub")
    xdg = os.environ.get("XDG_CACHE_HOME")
    dirs.append((Path(xdg) if xdg else Path.home() / ".cache") / "huggingface" / "hub")
    return dirs


def _from_hf_cache(repo_id: str) -> Path | None:
    folder = "models--" + repo_id.replace("/", "--")
    for cache in _hf_cache_dirs():
        root = cache / folder
        if not root.is_dir():
            continue
        ref = root / "refs" / "main"
        if ref.is_file():
            snap = root / "snapshots" / ref.read_text().strip()
            if (snap / "config.json").is_file():
                return snap
        snaps = sorted((root / "snapshots").glob("*/config.json"), key=lambda p: p.stat().st_mtime, reverse=True)
        if snaps:
            return snaps[0].parent
    return None


def bundled_path(repo_id: str) -> Path:
    return BUNDLED / (repo_id.replace("/", "--") + ".json")


def _download(repo_id: str) -> Path:
    if os.environ.get("HF_HUB_OFFLINE") not in (None, "", "0") or os.environ.get("VLAUNCH_OFFLINE"):
        raise ConfigError("not in the local Hugging Face cache and HF_HUB_OFFLINE is set", source=repo_id)
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:  # pragma: no cover - a runtime dependency
        raise ConfigError("not cached locally and huggingface_hub is not installed", source=repo_id) from None
    if not _hub_reachable():
        raise ConfigError("not in the local Hugging Face cache, and huggingface.co cannot be reached", source=repo_id)
    import logging

    logging.getLogger("huggingface_hub").setLevel(logging.ERROR)
    try:
        return Path(hf_hub_download(repo_id, "config.json", etag_timeout=10))
    except Exception as e:  # network, auth, 404: all end the same way for the user
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ConfigError(f"not cached locally and could not be downloaded ({reason})", source=repo_id) from None


def _hub_reachable(timeout: float = 3.0) -> bool:
    """A quick TCP check, so an offline machine fails in seconds rather than after the hub client's retries."""
    import socket
    from urllib.parse import urlparse

    endpoint = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host = endpoint.hostname or "huggingface.co"
    port = endpoint.port or (443 if endpoint.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _quant_sidecar(directory: Path) -> dict[str, Any] | None:
    side = directory / "hf_quant_config.json"
    return read_json(side) if side.is_file() else None


def load(spec: str) -> ModelSource:
    """Resolve MODEL (config.json path, model directory or repo id) to its parsed config."""
    path = Path(spec).expanduser()
    if path.is_file():
        side = path.with_name(path.name.removesuffix(".json") + ".hf_quant_config.json")
        hqc = read_json(side) if side.is_file() and side != path else _quant_sidecar(path.parent)
        return ModelSource(spec, read_json(path), str(path), str(path.parent), hqc, "file")
    if path.is_dir():
        cfg = path / "config.json"
        if not cfg.is_file():
            raise ConfigError("directory has no config.json", source=str(path))
        return ModelSource(spec, read_json(cfg), str(cfg), str(path), _quant_sidecar(path), "directory")
    if not _REPO_ID.match(spec):
        hint = "; `vlaunch demo` builds the tiny CPU model and a profile for it" if "tiny-llama" in spec else ""
        raise ConfigError(f"no such file or directory, and not a Hugging Face repo id (org/name){hint}", source=spec)
    snap = _from_hf_cache(spec)
    if snap is not None:
        cfg = snap / "config.json"
        return ModelSource(spec, read_json(cfg), str(cfg), str(snap), _quant_sidecar(snap), "hf-cache")
    bundled = bundled_path(spec)
    if bundled.is_file():
        return ModelSource(spec, read_json(bundled), str(bundled), None, None, "bundled")
    downloaded = _download(spec)
    return ModelSource(spec, read_json(downloaded), str(downloaded), None, None, "download")


def _hub_headers(repo_id: str) -> list[Any] | None:
    """The repo's safetensors headers from the hub (headers only, no weights), when the network allows."""
    if not _REPO_ID.match(repo_id):
        return None
    if os.environ.get("HF_HUB_OFFLINE") not in (None, "", "0") or os.environ.get("VLAUNCH_OFFLINE"):
        return None
    try:
        from huggingface_hub import get_safetensors_metadata
    except ImportError:  # pragma: no cover - a runtime dependency
        return None
    if not _hub_reachable():
        return None
    from launcher.model.checkpoint import TensorInfo

    try:
        meta = get_safetensors_metadata(repo_id)
    except Exception:  # not a safetensors repo, gated, 404: nothing to read
        return None
    out = []
    for f in meta.files_metadata.values():
        for name, t in f.tensors.items():
            begin, end = t.data_offsets  # the tensor's bytes in its file, as the header states them
            out.append(TensorInfo(name, t.dtype, tuple(int(x) for x in t.shape), end - begin))
    return out


def read_model(src: ModelSource) -> tuple[Model, CheckpointBytes | None]:
    """The model behind a source, and its checkpoint's exact bytes when its files are at hand.

    A model_type that no family reads is read generically, which needs the checkpoint's tensor headers: from
    the files beside the config, else from the hub (headers only) when the network allows.
    """
    from launcher.model.arch import read_config, resolve
    from launcher.model.checkpoint import find_checkpoint

    ckpt = None
    if src.model_dir is not None and src.origin != "file":  # a bare config.json: nothing beside it is its weights
        ckpt = find_checkpoint(src.model_dir)
    _, module = resolve(src.config, src.config_path)
    headers: list[Any] | None = None
    if module is None:
        headers = list(ckpt.tensors) if ckpt is not None and ckpt.tensors else _hub_headers(src.spec)
    return read_config(src.config, src.config_path, headers=headers), ckpt
