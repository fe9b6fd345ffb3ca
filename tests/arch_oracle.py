"""Shared readers for the transformers oracle tables (tests/fixtures/configs-v2): ORACLE.tsv rows (with the
extra rows under extra/), LAYERS.tsv layer maps, and the oracle's bucket of each of our tensors."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

from launcher.model.arch.tensors import Tensor
from tests.conftest import FIXTURES

V2 = FIXTURES / "configs-v2"
COLUMNS = ("embed", "lm_head", "attn", "mlp", "norms", "other", "mixer")


def _tsv(path: Path) -> list[dict[str, str]]:
    lines = [ln for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    header = (V2 / "ORACLE.tsv").read_text().splitlines()[0]
    if not lines or lines[0].split("\t")[0] != "model":
        lines = [header, *lines]
    return list(csv.DictReader(lines, delimiter="\t"))


def oracle_rows() -> list[dict[str, str]]:
    rows = _tsv(V2 / "ORACLE.tsv")
    for extra in sorted((V2 / "extra").glob("*.tsv")):
        rows += _tsv(extra)
    return rows


def vllm_rows() -> list[dict[str, str]]:
    """Rows of the vLLM oracle (configs-v2/vllm/*.tsv, written by scripts/vllm_param_oracle.py): vLLM 0.32's own
    parameter count of a config transformers has no class for, built on the meta device (text, vision, MTP)."""
    rows: list[dict[str, str]] = []
    for path in sorted((V2 / "vllm").glob("*.tsv")):
        lines = [ln for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
        rows += list(csv.DictReader(lines, delimiter="\t"))
    return rows


def config_path(model: str) -> Path:
    base = model.split("#")[0]
    for d in (V2 / "configs", V2 / "extra"):
        if (d / f"{base}.json").is_file():
            return d / f"{base}.json"
    raise FileNotFoundError(base)


def load_config(model: str) -> dict[str, Any]:
    cfg: dict[str, Any] = json.loads(config_path(model).read_text())
    return cfg


def layer_rows() -> list[dict[str, str]]:
    return list(csv.DictReader((V2 / "LAYERS.tsv").read_text().splitlines(), delimiter="\t"))


_PART = {"embedding": "embed", "lm_head": "lm_head", "attention": "attn", "mixer": "mixer", "mlp": "mlp",
         "experts": "mlp", "norms": "norms", "other": "other"}  # fmt: skip


def oracle_buckets(ts: list[Tensor], *, full_multimodal: bool) -> dict[str, int]:
    """Our tensors in the oracle's columns: norms wherever they sit (but under lm_head, which the oracle names
    first: RoBERTa's lm_head.layer_norm); towers in `other` (full rows) or left out."""
    out = dict.fromkeys(COLUMNS, 0)
    for t in ts:
        if t.role == "buffer":
            continue  # buffers are saved in checkpoints but are not parameters (tensors only transformers builds are)
        if t.part == "vision":
            if full_multimodal:
                out["other"] += t.numel
            continue
        out["norms" if t.role == "norm" and t.part != "lm_head" else _PART[t.part]] += t.numel
    return out


def decode_pattern(pattern: str) -> list[str]:
    """LAYERS.tsv's run-length layer map ("[S*3 F*1]x8 + S*2") as one code per layer."""
    out: list[str] = []
    for m in re.finditer(r"\[([^\]]*)\]x(\d+)|(\S+)\*(\d+)", pattern):
        if m.group(1) is not None:
            out += decode_pattern(m.group(1)) * int(m.group(2))
        else:
            out += [m.group(3)] * int(m.group(4))
    return out
