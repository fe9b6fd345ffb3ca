"""vLLM's own parameter count of a config: the model class vLLM 0.32 builds for it, on the meta device.

usage: .venv-vllm/bin/python scripts/vllm_param_oracle.py CONFIG.json [--set KEY=JSON ...]
           [--set-text KEY=JSON ...] [--arch ARCH] [--mtp-arch ARCH] [--stub-cuda-streams] [--dump OUT.json]
           >> tests/fixtures/configs-v2/vllm/FAMILY.tsv

For families transformers has no class for, vLLM is the truth. This builds vLLM's ModelConfig, its VllmConfig and
the model class on the meta device, as scripts/quant_oracle.py does, but unquantized (quantization_config is dropped:
a packed quantized weight has fewer elements than the parameter it stands for), and sums every parameter's elements.
vLLM fuses q/k/v and gate/up and stacks experts, which changes no element count (it may pad a fused projection with
zero rows: Kimi K3's KDA in_proj to a multiple of 16; choose test sizes that need none). Parameters are grouped by
where they sit: `vision` (towers and projectors) and `text` (the rest).

`--set KEY=JSON` overrides a top-level key, `--set-text KEY=JSON` one of text_config, before vLLM reads the config: a
config whose model_type neither transformers nor vLLM's config registry knows (mimo, nemotron-nas) is read under the
model_type whose config class carries the same fields (qwen2, llama), a remote-code `auto_map` is dropped, an
activation the CPU build's MoE backends lack (Kimi K3's situ) is swapped for silu; the row's notes list every
override (none changes a shape). `--arch` replaces `architectures`. `--mtp-arch` builds the config's draft model too
(MiMoMTPModel): its parameters less the embedding and output head it shares with the main model are the row's `mtp`.
`--stub-cuda-streams` lets a model that creates CUDA streams and events while it builds (Kimi K3's NVIDIA model) build
on the CPU.

Prints one row: model (the config's stem), vLLM version, model class, total, text, vision, mtp, notes.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch
import vllm
from vllm.config import (
    CacheConfig,
    DeviceConfig,
    LoadConfig,
    ModelConfig,
    VllmConfig,
    set_current_vllm_config,
)
from vllm.distributed import init_distributed_environment, initialize_model_parallel
from vllm.model_executor.model_loader.utils import initialize_model

_VISION = re.compile(r"(^|\.)(vision|visual|vision_tower|vision_model|mm_projector|multi_modal_projector|"
                     r"vit_large_projector|patch_merger)(\.|$)", re.I)  # fmt: skip
_SHARED = re.compile(r"(^|\.)(embed_tokens|lm_head)(\.|$)")


class _NoStream:
    """A stand-in for torch.cuda.Stream / Event (a class: annotations still read `Stream | None`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass


def _objects(cfg: Any) -> None:
    """DeciLM's remote config class turns `block_configs` into objects (block.attention.no_op); a config read
    under another model_type (llama) keeps dicts, which vLLM's DeciLM code cannot read."""
    blocks = getattr(cfg, "block_configs", None)
    if isinstance(blocks, list) and blocks and isinstance(blocks[0], dict):
        cfg.block_configs = [SimpleNamespace(**{k: SimpleNamespace(**v) if isinstance(v, dict) else v
                                                for k, v in b.items()}) for b in blocks]  # fmt: skip


def build(raw: dict[str, Any]) -> torch.nn.Module:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "config.json").write_text(json.dumps(raw))
        mc = ModelConfig(model=tmp, skip_tokenizer_init=True, max_model_len=2048, trust_remote_code=False)
        _objects(mc.hf_config)
        # hybrid models (Kimi K3): a mamba block of max_model_len, the only one VllmConfig allows without prefix caching
        vc = VllmConfig(model_config=mc, load_config=LoadConfig(load_format="dummy"), device_config=DeviceConfig("cpu"),
                        cache_config=CacheConfig(mamba_block_size=2048))  # fmt: skip
        with set_current_vllm_config(vc), torch.device("meta"):
            return initialize_model(vllm_config=vc)


def groups(model: torch.nn.Module) -> dict[str, int]:
    out = {"text": 0, "vision": 0, "shared": 0}
    for name, p in model.named_parameters():
        key = "vision" if _VISION.search(name) else "shared" if _SHARED.search(name) else "text"
        out[key] += p.numel()
    return out


def parse(argv: list[str]) -> tuple[Path, dict[str, Any], str | None, str | None, Path | None, list[str]]:
    """CONFIG.json, the overrides, --arch, --mtp-arch, --dump, and the notes of what --stub-cuda-streams did."""
    path, sets, arch, mtp_arch, dump = Path(argv[0]), {}, None, None, None
    notes: list[str] = []
    it = iter(argv[1:])
    for a in it:
        if a in ("--set", "--set-text"):
            k, v = next(it).split("=", 1)
            sets[("text_config." if a == "--set-text" else "") + k] = json.loads(v)
        elif a == "--arch":
            arch = next(it)
        elif a == "--mtp-arch":
            mtp_arch = next(it)
        elif a == "--dump":
            dump = Path(next(it))
        elif a == "--stub-cuda-streams":
            # Kimi K3's NVIDIA model creates CUDA streams and events for overlapping GEMMs while it builds; the CPU
            # build has none. Stand-in objects change no parameter.
            os.environ["VLLM_KIMI_K3_GEMM_AR"] = os.environ["VLLM_ENABLE_GEMM_RS"] = "0"  # cute_dsl GEMMs: CUDA only
            torch.cuda.Stream = _NoStream  # type: ignore[assignment,misc]
            torch.cuda.Event = _NoStream  # type: ignore[assignment,misc]
            notes.append("torch.cuda.Stream and Event stubbed")
    return path, sets, arch, mtp_arch, dump, notes


def main(argv: list[str]) -> int:
    path, sets, arch, mtp_arch, dump, notes = parse(argv)
    raw: dict[str, Any] = json.loads(path.read_text())
    raw.pop("quantization_config", None)
    if isinstance(raw.get("text_config"), dict):
        raw["text_config"].pop("quantization_config", None)
    notes += [f"{k}={json.dumps(v)}" for k, v in sets.items()]
    for k, v in sets.items():
        if k.startswith("text_config."):
            raw["text_config"][k.removeprefix("text_config.")] = v
        else:
            raw[k] = v
    if arch:
        raw["architectures"] = [arch]
        notes.append(f"architectures=[{arch}]")
    with set_current_vllm_config(VllmConfig()):
        init_distributed_environment(
            world_size=1, rank=0, local_rank=0, backend="gloo",
            distributed_init_method=f"file://{tempfile.mktemp(prefix='param-oracle-')}",
        )  # fmt: skip
        initialize_model_parallel(1, 1)
    model = build(raw)
    g = groups(model)
    mtp = ""
    if mtp_arch:
        draft = build({**raw, "architectures": [mtp_arch]})
        mtp = str(groups(draft)["text"] + groups(draft)["vision"])
        notes.append(f"mtp: {type(draft).__name__} less its embedding and lm_head")
    if dump:
        dump.write_text(json.dumps({n: list(p.shape) for n, p in model.named_parameters()}, indent=0))
    total = sum(g.values())
    row = [path.stem, vllm.__version__, type(model).__name__, total, g["text"] + g["shared"], g["vision"], mtp,
           "; ".join(["read with " + ", ".join(notes)] if notes else [])]  # fmt: skip
    print("\t".join(str(x) for x in row))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
