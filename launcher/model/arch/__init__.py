"""Model architectures: config.json -> Model (a tuple of layers), through a registry of families.

`read_config` resolves the model_type (aliases, multimodal wrappers, vLLM architecture names), imports only the
family module it needs, and returns its Model. A model_type no family reads falls back to the generic reader:
weights from the checkpoint's safetensors headers (given by the caller, who does the I/O), cache from the
config's generic fields; anything the generic reader cannot read is a one-line error naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from launcher.common.errors import ConfigError
from launcher.model.arch import registry
from launcher.model.arch.common import Meta, dtype_of
from launcher.model.arch.config import Cfg
from launcher.model.arch.model import Model

__all__ = ["Model", "read_config", "resolve"]


def _architecture(cfg: Mapping[str, Any], model_type: str) -> str:
    archs = cfg.get("architectures")
    if isinstance(archs, list) and archs and isinstance(archs[0], str):
        return archs[0]
    return model_type


def resolve(cfg: Mapping[str, Any], source: str | None = None) -> tuple[str, str | None]:
    """(model_type, family module or None) for a parsed config.json."""
    if not isinstance(cfg, Mapping):
        raise ConfigError("config.json must be a JSON object", source=source)
    model_type = cfg.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise ConfigError("missing model_type: cannot tell the architecture", source=source, field="model_type")
    module = registry.module_name(model_type)
    if module is None:
        by_arch = registry.ARCHITECTURES.get(_architecture(cfg, model_type))
        if by_arch is not None:
            return by_arch, registry.module_name(by_arch)
    return model_type, module


def read_config(cfg: Mapping[str, Any], source: str | None = None, *, headers: Sequence[Any] | None = None) -> Model:
    """Read a parsed config.json. `headers`: the checkpoint's tensors (checkpoint.TensorInfo), which the generic
    reader needs for a model_type no family reads. Raises ConfigError naming the file and field."""
    model_type, module = resolve(cfg, source)
    architecture = _architecture(cfg, str(cfg.get("model_type")))
    quant = cfg.get("quantization_config")
    text = cfg.get("text_config")
    if quant is None and isinstance(text, Mapping) and text.get("quantization_config") is not None:
        # vLLM reads a multimodal wrapper's text_config.quantization_config when the top level has none
        # (ModelArchConfigConvertor.get_quantization_config, vLLM 0.32): Kimi-K2.5 and K3 keep it there.
        quant = text["quantization_config"]
        if not isinstance(quant, Mapping):
            raise ConfigError("must be an object", source=source, field="text_config.quantization_config")
    if quant is not None and not isinstance(quant, Mapping):
        raise ConfigError("must be an object", source=source, field="quantization_config")
    if module is None:
        from launcher.model.arch import generic

        return generic.read(cfg, source, model_type=model_type, architecture=architecture, headers=headers)
    fam = registry.load_family(module)
    aliases = getattr(fam, "ATTRIBUTE_MAP", {}).get(model_type)
    top = Cfg(cfg, fam.DEFAULTS.get(model_type), source=source, aliases=aliases)
    meta = Meta(
        model_type=model_type,
        architecture=architecture,
        family=module,
        torch_dtype=dtype_of(top, top),
        quantization_config=quant,
        top=top,
    )
    model: Model = fam.read(top, meta)
    return model
