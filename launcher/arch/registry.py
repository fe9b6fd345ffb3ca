"""Which family reads which model_type, like vLLM's and transformers' registries.

A family module is found by its model_type's own name (launcher/arch/families/<model_type>.py), so adding a
family is adding one file. The tables below cover the rest: model_types read by a module of another name,
vLLM architectures whose config's model_type differs, and the model_types vLLM serves that vlaunch reads
generically (weights from safetensors headers, cache from the config's generic fields), each with why.
Nothing here imports a family module until it is asked for.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from types import ModuleType

FAMILY_PACKAGE = "launcher.arch.families"

# model_type -> the family module that reads it, when the names differ.
ALIASES: dict[str, str] = {
    "kimi_k2": "deepseek_v3",
    "deepseek_v2": "deepseek_v3",
    "gemma3_text": "gemma3",
    "qwen2_moe": "qwen2",
    "qwen3_moe": "qwen3",
    "mixtral": "mistral",
}

# vLLM architecture -> the model_type it is read as, for configs whose model_type vlaunch does not know.
ARCHITECTURES: dict[str, str] = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "InternLM3ForCausalLM": "llama",
    "IQuestCoderForCausalLM": "llama",
    "TeleChat3ForCausalLM": "llama",
}

# model_types vLLM serves that vlaunch reads generically, and why not exactly.
GENERIC: dict[str, str] = {}


def module_name(model_type: str) -> str | None:
    """The family module for a model_type, or None (no import of the module itself)."""
    name = ALIASES.get(model_type, model_type)
    if not name.isidentifier():
        return None
    try:
        spec = importlib.util.find_spec(f"{FAMILY_PACKAGE}.{name}")
    except (ImportError, ValueError):
        return None
    return name if spec is not None else None


def load_family(name: str) -> ModuleType:
    return importlib.import_module(f"{FAMILY_PACKAGE}.{name}")


def all_family_modules() -> list[str]:
    """Every family module on disk (imports none)."""
    pkg = importlib.import_module(FAMILY_PACKAGE)
    return sorted(m.name for m in pkgutil.iter_modules(pkg.__path__) if not m.name.startswith("_"))
