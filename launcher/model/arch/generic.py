"""The universal fallback for a model_type no family reads: never a silent guess.

Weights come from the checkpoint's own safetensors (or GGUF) headers, which the caller reads (a local
directory, the Hugging Face cache, or the hub's header-only metadata); each tensor is put in a part by its
name. The cache comes from the config's generic fields: `layer_types`, `num_key_value_heads`, `head_dim`,
`sliding_window`. A layer kind those fields cannot describe is a one-line error naming the field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from launcher.common.errors import ConfigError
from launcher.model.arch.common import Meta, attention, dtype_of, layer_types, tied
from launcher.model.arch.config import Cfg
from launcher.model.arch.layers import Layer
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import Part, Role, Tensor

_LAYER_INDEX = re.compile(r"(?:^|\.)(?:layers|h|blocks|blk|block|layer)\.(\d+)\.")

# First key present wins: the names configs use for the same number.
_KEYS = {
    "layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
    "hidden": ("hidden_size", "n_embd", "d_model", "dim"),
    "heads": ("num_attention_heads", "n_head", "num_heads", "n_heads"),
    "vocab": ("vocab_size", "padded_vocab_size", "n_vocab"),
}


def _first(c: Cfg, what: str) -> tuple[str, int]:
    for key in _KEYS[what]:
        if c.has(key):
            return key, c.int(key)
    raise c.error(f"the generic reader needs one of {', '.join(_KEYS[what])}", _KEYS[what][0])


def part_of(name: str) -> tuple[Part, Role]:
    """A checkpoint tensor's part and role from its name (transformers' and llama.cpp's naming)."""
    n = name.lower()
    parts = n.split(".")
    leaf = parts[-1]
    mod = parts[-2] if len(parts) >= 2 else leaf
    if n.startswith("lm_head") or ".lm_head." in n or n.startswith("output.") or mod == "output":
        return "lm_head", "lm_head"
    if "embed_tokens" in n or "wte" in parts or "token_embd" in n or "word_embeddings" in n or "embed_in" in n:
        return "embedding", "embedding"
    if "vision" in n or "visual" in n or "audio" in n or "mm_projector" in n or "multi_modal_projector" in n:
        return "vision", "linear"
    if "norm" in mod or mod in ("ln_f", "ln_1", "ln_2") or leaf.endswith("_norm"):
        return "norms", "norm"
    role: Role = "bias" if leaf == "bias" else "linear"
    if "experts" in n or "_exps" in n:
        return "experts", "expert" if role == "linear" else role
    if ".gate." in n and "mlp" in n:
        return "experts", "router"
    if "self_attn" in n or ".attn." in n or ".attention." in n or "attn_" in n:
        return "attention", role
    if ".mlp." in n or "feed_forward" in n or ".moe." in n or "ffn_" in n:
        return "mlp", role
    if "mixer" in n or "linear_attn" in n or "ssm" in n or "mamba" in n:
        return "mixer", role
    return "other", role


def header_tensors(headers: Sequence[Any]) -> tuple[Tensor, ...]:
    """Checkpoint TensorInfo records as Tensors (GGUF shapes are innermost-first: reversed to PyTorch's)."""
    out = []
    for h in headers:
        shape = tuple(int(x) for x in h.shape)
        part, role = part_of(h.name)
        if len(shape) == 1 and role in ("linear", "expert"):
            role = "bias" if h.name.endswith("bias") else "state"
        if len(shape) == 3 and role == "linear":
            role = "expert"
        m = _LAYER_INDEX.search(h.name)
        out.append(Tensor(h.name, part, role, shape, 1, int(m.group(1)) if m else None))
    return tuple(out)


def read(
    cfg: Mapping[str, Any],
    source: str | None,
    *,
    model_type: str,
    architecture: str,
    headers: Sequence[Any] | None,
) -> Model:
    from launcher.model.arch.registry import GENERIC

    top = Cfg(cfg, source=source)
    c = top.sub("text_config") if isinstance(cfg.get("text_config"), Mapping) else top
    if not headers:
        raise ConfigError(
            f"unknown model_type {model_type!r} ({architecture}): no family reads it (`vlaunch archs` lists those "
            "that do), and the generic reader takes its weights from the checkpoint's safetensors headers, which "
            "were not found (give a model directory, a repo id in the Hugging Face cache, or allow the network)",
            source=source,
            field="model_type",
        )
    meta = Meta(model_type=model_type, architecture=architecture, family="generic", torch_dtype=dtype_of(top, c),
                quantization_config=cfg.get("quantization_config"), top=top)  # fmt: skip
    _, num_layers = _first(c, "layers")
    _, hidden = _first(c, "hidden")
    layers, d = _attention_layers(c, num_layers, hidden, model_type=model_type, architecture=architecture)
    weights = header_tensors(headers)
    _, vocab = _first(c, "vocab")
    note = GENERIC.get(model_type, f"no family module reads {model_type!r}")
    return Model(
        model_type=model_type,
        family="generic",
        architecture=architecture,
        vocab_size=vocab,
        hidden_size=hidden,
        layers=layers,
        tied_embeddings=tied(c, meta) if c.has("tie_word_embeddings") or top.has("tie_word_embeddings") else False,
        embeddings=(),
        head=(),
        extra=weights,
        header_weights=True,
        max_position_embeddings=c.opt_int("max_position_embeddings"),
        rotary_dim=d,
        torch_dtype=meta.torch_dtype,
        quantization_config=meta.quantization_config,
        support="generic",
        support_note=note + "; weights from the checkpoint's headers, cache from the config's generic fields",
    )


def _attention_layers(
    c: Cfg, num_layers: int, hidden: int, *, model_type: str, architecture: str
) -> tuple[tuple[Layer, ...], int]:
    """Every layer as attention from the config's generic fields; the layers and the head size."""
    _, n = _first(c, "heads")
    kv_key = "num_key_value_heads" if c.has("num_key_value_heads") else "multi_query_group_num"
    kv = c.opt_int(kv_key) or n
    d = c.opt_int("head_dim") or c.opt_int("kv_channels") or hidden // n
    c.heads_divide(n, kv, kv_key)
    window = c.opt_int("sliding_window")
    # Without layer_types, a window (unless use_sliding_window says no) applies to every layer.
    plain = "sliding_attention" if window and c.get("use_sliding_window") is not False else "full_attention"
    hint = f"the generic reader reads attention only; no family reads {model_type!r} ({architecture})"
    kinds = layer_types(c, num_layers, lambda i: plain, hint=hint)
    chunk = c.opt_int("attention_chunk_size")
    layers = tuple(
        Layer(
            prefix=f"model.layers.{i}",
            mixers=(
                attention(kinds[i], window=window, chunk=chunk, c=c, hidden=hidden, heads=n, kv_heads=kv, head_dim=d),
            ),
        )
        for i in range(num_layers)
    )
    return layers, d
