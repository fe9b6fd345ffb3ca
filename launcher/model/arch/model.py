"""A model as vlaunch sees it: a tuple of layers plus the tensors outside them, read from one config.json.

Everything else (parameter counts, weight bytes in every format, KV and state bytes, vLLM's pool) is computed
from this object; the convenience properties at the end summarise it for the activation and pool arithmetic.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Any, Literal

from launcher.common.records import dataclass
from launcher.model.arch.layers import (
    Attention,
    Layer,
    MixerKind,
    MLAttention,
    MoE,
    SlidingWindowAttention,
)
from launcher.model.arch.tensors import Tensor
from launcher.model.arch.towers import Tower

Support = Literal["exact", "generic"]


@dataclass(frozen=True, kw_only=True)
class Model:
    """Everything the arithmetic needs, read from one config.json."""

    model_type: str  # canonical (aliases resolved; the language model's type for multimodal wrappers)
    family: str  # the registry's family module
    architecture: str  # the config's `architectures[0]`, or the model_type
    vocab_size: int
    hidden_size: int
    layers: tuple[Layer, ...]
    tied_embeddings: bool
    embeddings: tuple[Tensor, ...]  # token embedding (and learned positions, embedding norms)
    head: tuple[Tensor, ...]  # final norm and, when not tied, lm_head
    towers: tuple[Tower, ...] = ()  # vision / audio encoders the wrapper loads
    mtp_layers: tuple[Layer, ...] = ()  # next-token-prediction layers the checkpoint carries (not in transformers)
    extra: tuple[Tensor, ...] = ()  # anything else transformers builds (shared blocks, hyper-connections)
    max_position_embeddings: int | None = None
    rotary_dim: int = 0  # width of vLLM's cos/sin cache
    # rows of vLLM's cos/sin caches per position of max_position_embeddings, summed over the distinct ropes it builds
    # (Gemma 3: a local one and a global one with linear scaling, whose cache is max_position × factor rows)
    rotary_rows: int = 1
    torch_dtype: str | None = None
    quantization_config: Mapping[str, Any] | None = field(default=None, hash=False, compare=False)
    defaults_used: tuple[str, ...] = ()
    support: Support = "exact"
    support_note: str = ""
    wrapper_type: str | None = None  # the multimodal wrapper's model_type, when the config is one
    causal: bool = True  # False: an encoder (BERT-like); vLLM's pooling runner keeps no KV cache for it
    ssm_state_dtype: str | None = None  # the config's SSM state dtype (mamba_ssm_dtype / mamba_ssm_cache_dtype)
    mamba_chunk_size: int | None = None  # the SSM scan's chunk (config `mamba_chunk_size` / `chunk_size`)
    header_weights: bool = False  # generic: `extra` is the checkpoint's own tensor list; layers carry no weights
    expert_dtype: str | None = None  # DeepSeek-V4's `expert_dtype` (fp4 / fp8): how its routed experts are stored

    # ---- tensors --------------------------------------------------------------------------------------------
    def tensors(self, *, towers: bool = True, mtp: bool = False) -> list[Tensor]:
        """Every weight tensor as transformers builds it (tied lm_head omitted); MTP layers only when asked."""
        ts = list(self.embeddings)
        if self.header_weights:
            return ts + list(self.extra)
        for i, layer in enumerate(self.layers):
            ts += layer.tensors(i)
        ts += self.head
        ts += self.extra
        if mtp:
            for j, layer in enumerate(self.mtp_layers):
                ts += layer.tensors(len(self.layers) + j)
        if towers:
            for t in self.towers:
                ts += t.tensors()
        return ts

    # ---- the layer map ----------------------------------------------------------------------------------------
    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def layer_kinds(self) -> tuple[MixerKind | Literal["none"], ...]:
        return tuple(layer.kind for layer in self.layers)

    def layer_summary(self) -> dict[str, dict[str, Any]]:
        """Layers per mixer kind, with the geometry of that kind (window, chunk, state shapes)."""
        out: dict[str, dict[str, Any]] = {}
        for layer in self.layers:
            if not layer.mixers:
                entry = out.setdefault("none", {"count": 0})
                entry["count"] += 1
                continue
            for m in layer.mixers:
                entry = out.setdefault(m.kind, {"count": 0, **m.describe()})
                entry["count"] += 1
                for k, v in m.describe().items():
                    if entry.get(k) != v and k != "shares_kv_with":
                        # layers of one kind with different geometry: list every distinct value
                        seen = entry.setdefault(k + "s", [entry[k]] if k in entry else [])
                        if v not in seen:
                            seen.append(v)
                entry.pop("shares_kv_with", None)
        if self.mtp_layers:
            out["mtp"] = {"count": len(self.mtp_layers), "kinds": sorted({k for m in self.mtp_layers for k in m.kinds})}
        return out

    # ---- summaries for the activation and pool arithmetic -----------------------------------------------------
    def _first(self, cls: type[Any]) -> Any:
        # A model never changes (frozen): what a scan of its layers found is kept beside its fields (`_scans`).
        found: dict[Any, Any] = self.__dict__.setdefault("_scans", {})
        if cls not in found:
            found[cls] = next(
                (m for layer in self.layers for m in (*layer.mixers, *layer.mlps) if isinstance(m, cls)), None
            )
        return found[cls]

    @property
    def attention(self) -> Attention | None:
        """The first softmax-attention mixer (its heads and head_dim speak for the model's attention)."""
        for layer in self.layers:
            for m in layer.mixers:
                if isinstance(m, Attention) and m.shares_kv_with is None:
                    return m
        return None

    @property
    def mla(self) -> MLAttention | None:
        mla: MLAttention | None = self._first(MLAttention)
        return mla

    @property
    def moe(self) -> MoE | None:
        moe: MoE | None = self._first(MoE)
        return moe

    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    @property
    def num_heads(self) -> int:
        a = self.attention
        if a is not None:
            return a.heads
        mla = self.mla
        if mla is not None:
            return mla.heads
        for layer in self.layers:
            for m in layer.mixers:
                heads = getattr(m, "heads", None) or getattr(m, "num_v_heads", None)
                if isinstance(heads, int):
                    return heads
        return 1

    @property
    def num_kv_heads(self) -> int:
        a = self.attention
        return a.kv_heads if a is not None else 1

    @property
    def head_dim(self) -> int:
        a = self.attention
        if a is not None:
            return a.head_dim
        mla = self.mla
        if mla is not None:
            return mla.qk_nope_head_dim + mla.qk_rope_head_dim
        return self.hidden_size // max(self.num_heads, 1)

    @property
    def intermediate_size(self) -> int:
        """The MLP width one token passes through: the experts it is routed to for MoE, else the widest dense."""
        kept: dict[str, Any] = self.__dict__.setdefault("_scans", {})
        if "intermediate_size" not in kept:
            moe = self.moe
            widths = [f.active_intermediate() for layer in self.layers for f in layer.mlps]
            kept["intermediate_size"] = moe.active_intermediate() if moe is not None else max(widths, default=0)
        width: int = kept["intermediate_size"]
        return width

    @property
    def mixer_kinds(self) -> frozenset[str]:
        """The kinds of token mixer the decoder's layers hold (full_attention, linear_attention, mamba2, …)."""
        kept: dict[str, Any] = self.__dict__.setdefault("_scans", {})
        if "mixer_kinds" not in kept:
            kept["mixer_kinds"] = frozenset(m.kind for layer in self.layers for m in layer.mixers)
        kinds: frozenset[str] = kept["mixer_kinds"]
        return kinds

    @property
    def sliding_window(self) -> int | None:
        sw: SlidingWindowAttention | None = self._first(SlidingWindowAttention)
        return sw.window if sw is not None else None

    @property
    def vision(self) -> Tower | None:
        return self.towers[0] if self.towers else None
