"""Build a tiny random model with transformers, save it as a checkpoint, and keep its safetensors header.

usage: .venv-vllm/bin/python scripts/tiny_checkpoint.py CONFIG.json OUT.json

The fixture holds the config and every tensor's name, dtype and shape exactly as `save_pretrained` wrote them (the
on-disk names vLLM loads, experts unfused), so tests can rebuild a checkpoint of zeros byte for byte and compare
its headers with the format arithmetic. The config should be small (a few MB of weights).
"""

from __future__ import annotations

import json
import os
import struct
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


ENCODER_TYPES = {"bert", "roberta", "xlm-roberta"}


def header(path: Path) -> dict[str, list[object]]:
    with path.open("rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        h = json.loads(f.read(n))
    return {k: [v["dtype"], v["shape"]] for k, v in h.items() if k != "__metadata__"}


def main() -> None:
    import torch
    import transformers
    from transformers import AutoConfig

    src, out = Path(sys.argv[1]), Path(sys.argv[2])
    raw = json.loads(src.read_text())
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "config.json").write_text(json.dumps(raw))
        cfg = AutoConfig.from_pretrained(tmp)
        from transformers.models.auto import modeling_auto as ma

        auto = transformers.AutoModelForCausalLM
        for names, cls in ((ma.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES, "AutoModelForImageTextToText"),):
            if cfg.model_type in names and cfg.model_type not in ma.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
                auto = getattr(transformers, cls)
        torch.manual_seed(0)
        if cfg.model_type in ENCODER_TYPES:
            # encoders vLLM serves with --runner pooling: the class their architectures name (BertModel…), not
            # transformers' causal-LM class for them
            archs = getattr(cfg, "architectures", None) or []
            cls = getattr(transformers, archs[0], None) if archs else None
            if cls is not None:
                model = cls._from_config(cfg, dtype=torch.bfloat16)
            else:
                model = transformers.AutoModel.from_config(cfg, dtype=torch.bfloat16)
        else:
            model = auto.from_config(cfg, dtype=torch.bfloat16)
        saved = Path(tmp) / "saved"
        model.save_pretrained(saved)
        tensors: dict[str, list[object]] = {}
        for f in sorted(saved.glob("*.safetensors")):
            tensors.update(header(f))
    lines = ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in sorted(tensors.items()))
    out.write_text(
        "{\n"
        f' "config": {json.dumps(raw)},\n'
        f' "class": {json.dumps(type(model).__name__)},\n'
        f' "transformers_version": {json.dumps(transformers.__version__)},\n'
        f' "tensors": {{\n{lines}\n }}\n'
        "}\n"
    )
    print(f"{out}: {len(tensors)} tensors, {type(model).__name__}")


if __name__ == "__main__":
    main()
