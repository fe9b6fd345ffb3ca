"""Building blocks the family modules share: reading attention geometry and layer types from a config,
the token embedding and the output head, and assembling a Model. Pure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from launcher.common.records import dataclass
from launcher.model.arch.config import Cfg
from launcher.model.arch.layers import (
    MLP,
    Attention,
    ChunkedLocalAttention,
    Layer,
    Mixer,
    Norm,
    SlidingWindowAttention,
    norms,
)
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import Tensor, norm

# Names transformers' configs use in layer_types, mapped to vlaunch's attention kinds.
LAYER_TYPE_NAMES: dict[str, str] = {
    "full_attention": "full_attention",
    "attention": "full_attention",
    "global": "full_attention",
    "sliding_attention": "sliding_attention",
    "sliding_window": "sliding_attention",
    "local": "sliding_attention",
    "chunked_attention": "chunked_attention",
}


@dataclass(frozen=True)
class Meta:
    """What the reader knows before the family runs: the names, dtype and quantization of the checkpoint."""

    model_type: str  # the language model's type (after wrapper and alias resolution)
    architecture: str
    family: str
    torch_dtype: str | None
    quantization_config: Mapping[str, Any] | None
    top: Cfg  # the whole config.json (the wrapper, for multimodal models)
    wrapper_type: str | None = None


def heads(c: Cfg, *, heads_key: str = "num_attention_heads", kv_key: str = "num_key_value_heads",
          head_dim_key: str = "head_dim", hidden: int | None = None) -> tuple[int, int, int]:  # fmt: skip
    """(query heads, KV heads, head_dim): KV heads default to the query heads, head_dim to hidden / heads."""
    n = c.int(heads_key)
    kv = c.opt_int(kv_key) or n
    h = hidden if hidden is not None else c.int("hidden_size")
    d = c.opt_int(head_dim_key) or h // n
    if d <= 0:
        raise c.error("hidden_size // num_attention_heads is 0", head_dim_key)
    c.heads_divide(n, kv, kv_key)
    return n, kv, d


def layer_types(c: Cfg, n: int, default: Callable[[int], str] | None = None, *, key: str = "layer_types",
                names: Mapping[str, str] | None = None, hint: str = "") -> list[str]:  # fmt: skip
    """The kind of each of n layers: the config's `layer_types` when present, else default(i) (or full).
    An unknown type is an error naming `layer_types[i]`, with `hint` saying what the reader can do instead."""
    names = LAYER_TYPE_NAMES if names is None else names
    raw = c.list(key)
    if raw:
        if len(raw) < n:
            raise c.error(f"has {len(raw)} entries for {n} layers", key)
        out = []
        for i, t in enumerate(raw[:n]):
            if not isinstance(t, str) or t not in names:
                known = ", ".join(sorted(set(names)))
                raise c.error(
                    f"unknown layer type {t!r}; known: {known}" + (f"; {hint}" if hint else ""), f"{key}[{i}]"
                )
            out.append(names[t])
        return out
    return [default(i) if default else "full_attention" for i in range(n)]


def attention(kind: str, *, window: int | None = None, chunk: int | None = None, c: Cfg | None = None,
              **kw: Any) -> Attention:  # fmt: skip
    """An attention mixer of the given kind: full, sliding (needs a window) or chunked (needs a chunk)."""
    if kind == "sliding_attention":
        if not window or window <= 0:
            if c is not None:
                raise c.error("sliding-window layers need a positive window", "sliding_window")
            raise ValueError("sliding-window layers need a positive window")
        return SlidingWindowAttention(window=window, **kw)
    if kind == "chunked_attention":
        if not chunk or chunk <= 0:
            if c is not None:
                raise c.error("chunked layers need a positive chunk size", "attention_chunk_size")
            raise ValueError("chunked layers need a positive chunk size")
        return ChunkedLocalAttention(chunk=chunk, **kw)
    return Attention(**kw)


def tied(c: Cfg, meta: Meta, key: str = "tie_word_embeddings") -> bool:
    """tie_word_embeddings of the language model; a wrapper's top-level value counts when the text config
    does not set it (transformers reads the top-level flag for the whole model)."""
    if key in c.raw and c.raw[key] is not None:
        return c.bool(key)
    if meta.top is not c and key in meta.top.raw and meta.top.raw[key] is not None:
        return meta.top.bool(key)
    return c.bool(key)


def embed_head(vocab: int, hidden: int, is_tied: bool, *, embed: str = "model.embed_tokens",
               final_norm: str | None = "model.norm", head: str = "lm_head", norm_bias: bool = False,
               embed_dim: int | None = None) -> tuple[tuple[Tensor, ...], tuple[Tensor, ...]]:  # fmt: skip
    """The token embedding, the final norm and (unless tied to the embedding) the output projection."""
    e = embed_dim if embed_dim is not None else hidden
    embeddings = (Tensor(f"{embed}.weight", "embedding", "embedding", (vocab, e), gguf="token_embd"),)
    out: list[Tensor] = []
    if final_norm:
        out += norm(final_norm, hidden, None, bias=norm_bias, gguf="output_norm")
    if not is_tied:
        out.append(Tensor(f"{head}.weight", "lm_head", "lm_head", (vocab, hidden), gguf="output"))
    return embeddings, tuple(out)


def dtype_of(top: Cfg, c: Cfg) -> str | None:
    for cfg in (top, c):
        for key in ("torch_dtype", "dtype"):
            v = cfg.raw.get(key)
            if isinstance(v, str):
                return v
    return None


def build(c: Cfg, meta: Meta, *, vocab: int, hidden: int, layers: Sequence[Any], is_tied: bool,
          embeddings: tuple[Tensor, ...], head: tuple[Tensor, ...], rotary_dim: int,
          max_pos_key: str = "max_position_embeddings", **kw: Any) -> Model:  # fmt: skip
    """Assemble a Model with the bookkeeping every family repeats."""
    max_pos = c.opt_int(max_pos_key) if max_pos_key else None
    return Model(
        model_type=meta.model_type,
        family=meta.family,
        architecture=meta.architecture,
        vocab_size=vocab,
        hidden_size=hidden,
        layers=tuple(layers),
        tied_embeddings=is_tied,
        embeddings=embeddings,
        head=head,
        max_position_embeddings=max_pos,
        rotary_dim=rotary_dim,
        torch_dtype=meta.torch_dtype,
        quantization_config=meta.quantization_config,
        defaults_used=tuple(sorted(c.used)),
        wrapper_type=meta.wrapper_type,
        ssm_state_dtype=_ssm_dtype(c),
        mamba_chunk_size=_chunk(c),
        **kw,
    )


def _chunk(c: Cfg) -> int | None:
    """The SSM scan's chunk size vLLM reads (ModelConfig.get_mamba_chunk_size): `mamba_chunk_size`, else
    `chunk_size`."""
    for key in ("mamba_chunk_size", "chunk_size"):
        v = c.raw.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def _ssm_dtype(c: Cfg) -> str | None:
    """The SSM / recurrent state dtype a config names (Qwen3.5 `mamba_ssm_dtype`, Nemotron-H
    `mamba_ssm_cache_dtype`); vLLM keeps the state in it when --mamba-ssm-cache-dtype is auto."""
    for key in ("mamba_ssm_dtype", "mamba_ssm_cache_dtype"):
        v = c.raw.get(key)
        if isinstance(v, str) and v:
            return v
    return None


def text_config(c: Cfg, meta: Meta, text_type: str, defaults: Mapping[str, Any] | None,
                key: str = "text_config", aliases: Mapping[str, str] | None = None) -> tuple[Cfg, Meta]:  # fmt: skip
    """A multimodal wrapper's language model: its sub-config with the text model's defaults, and the Meta
    that names the text model_type (the wrapper's type kept as wrapper_type)."""
    t = c.sub(key, defaults, aliases)
    inner = t.raw.get("model_type")
    if inner is not None and not isinstance(inner, str):
        raise t.error("must be a string", "model_type")
    from dataclasses import replace

    return t, replace(meta, model_type=text_type, wrapper_type=meta.model_type, torch_dtype=dtype_of(c, t))


def layer_prefix(i: int, base: str = "model.layers") -> str:
    return f"{base}.{i}"


def decoder(
    c: Cfg,
    meta: Meta,
    *,
    parts: Callable[[int], tuple[Mixer, MLP]],
    rotary_dim: int,
    layer_norms: Sequence[str | Norm] = ("input_layernorm", "post_attention_layernorm"),
    norm_bias: bool = False,
    prefix: str = "model.layers",
    is_tied: bool | None = None,
    embed: str = "model.embed_tokens",
    final_norm: str | None = "model.norm",
    head: str = "lm_head",
    hidden: int | None = None,
    num_layers: int | None = None,
    layer_extra: tuple[Tensor, ...] = (),
    embed_extra: Sequence[Tensor] = (),
    head_extra: Sequence[Tensor] = (),
    **kw: Any,
) -> Model:
    """The common decoder-only model: num_hidden_layers layers of one token mixer and one MLP (`parts(i)`) with
    the named norms of the hidden size (or the Norms given), the token embedding, a final norm and the output
    head (unless tied). `hidden` and `num_layers` stand in for configs that name those fields otherwise;
    `layer_extra` goes into every layer, `embed_extra` and `head_extra` after the embedding and the head."""
    vocab = c.int("vocab_size")
    hidden = c.int("hidden_size") if hidden is None else hidden
    tie = tied(c, meta) if is_tied is None else is_tied
    named = norms(hidden, *(n if isinstance(n, str) else n.name for n in layer_norms), bias=norm_bias)
    ln = tuple(n if isinstance(n, Norm) else m for n, m in zip(layer_norms, named, strict=True))
    layers = []
    for i in range(c.int("num_hidden_layers") if num_layers is None else num_layers):
        mixer, mlp = parts(i)
        layers.append(Layer(prefix=f"{prefix}.{i}", norms=ln, mixers=(mixer,), mlps=(mlp,), extra=layer_extra))
    embeddings, out = embed_head(vocab, hidden, tie, embed=embed, final_norm=final_norm, head=head,
                                 norm_bias=norm_bias)  # fmt: skip
    return build(c, meta, vocab=vocab, hidden=hidden, layers=layers, is_tied=tie,
                 embeddings=(*embeddings, *embed_extra), head=(*out, *head_extra), rotary_dim=rotary_dim,
                 **kw)  # fmt: skip


def under(model: Model, base: str) -> Model:
    """The language model's tensors renamed as a multimodal wrapper's checkpoint stores them (`base` prepended,
    e.g. `language_model.`)."""

    def name(ts: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        return tuple(dataclasses.replace(t, name=base + t.name) for t in ts)

    return dataclasses.replace(
        model,
        layers=tuple(dataclasses.replace(layer, prefix=base + layer.prefix) for layer in model.layers),
        mtp_layers=tuple(dataclasses.replace(layer, prefix=base + layer.prefix) for layer in model.mtp_layers),
        embeddings=name(model.embeddings),
        head=name(model.head),
        extra=name(model.extra),
    )
