"""Gemma 3n (E2B, E4B): Gemma 3's layer (four norms, per-head q/k norms, a weightless v norm) wrapped in
AltUp (the residual stream kept as `altup_num_inputs` copies, predicted and corrected around each layer),
LAuReL (a low-rank residual branch) and per-layer inputs (a second, narrow embedding table of
`hidden_size_per_layer_input` per layer, gated into each layer); the MLP width may differ per layer.

The last `num_kv_shared_layers` layers have no k/v projections: each reads the KV cache of the last earlier
layer of its own kind (sliding or full) and keeps none, as in transformers and vLLM (which gives those layers
no KV cache spec). The released checkpoints still carry k_proj / v_proj / k_norm for the shared layers;
transformers and vLLM drop them on load, and they are not counted here.

The multimodal wrapper (model_type gemma3n) is read for its language model only (named as its checkpoints
name it, under `model.language_model.`): its MobileNet-v5 vision tower is a timm model that the oracle could
not build, so neither it (about 0.3B) nor the Conformer audio tower (0.68B for the default audio config) and
the two multimodal embedders (7.8M) are counted, although vLLM loads all of them.
"""

from __future__ import annotations

from typing import Any

from launcher.common.records import dataclass
from launcher.model.arch.common import Meta, decoder, heads, layer_types, text_config
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.gemma2 import GEMMA_NORMS
from launcher.model.arch.layers import Attention, DenseMLP, Norm, SlidingWindowAttention, place
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import Tensor, linear, norm, param

MODEL_TYPES = ("gemma3n_text", "gemma3n")

# transformers' Gemma3nTextConfig defaults (gemma-3n-E4B), for the fields read here.
TEXT_DEFAULTS: dict[str, Any] = dict(
    vocab_size=262400, hidden_size=2048, intermediate_size=16384, num_hidden_layers=35, num_attention_heads=8,
    num_key_value_heads=2, head_dim=256, tie_word_embeddings=True, attention_bias=False, sliding_window=512,
    vocab_size_per_layer_input=262144, hidden_size_per_layer_input=256, altup_num_inputs=4,
    num_kv_shared_layers=15, laurel_rank=64, max_position_embeddings=32768,
)  # fmt: skip
DEFAULTS: dict[str, dict[str, Any]] = {"gemma3n_text": TEXT_DEFAULTS, "gemma3n": dict(tie_word_embeddings=True)}


@dataclass(frozen=True, kw_only=True)
class GemmaAttention(Attention):
    """Gemma 3n / 4 attention: per-head q and k norms and a weightless v norm. A layer that reads another's
    KV (`shares_kv_with`) holds only q_proj, q_norm and o_proj; with `k_eq_v` the keys serve as values and
    there is no v_proj (the cache still holds both)."""

    k_eq_v: bool = False

    def tensors(self, prefix: str, layer: int | None) -> list[Tensor]:
        p = f"{prefix}.{self.name}"
        h, n, k, d, b = self.hidden, self.heads, self.kv_heads, self.head_dim, self.qkv_bias
        ts = linear(f"{p}.q_proj", "attention", n * d, h, layer, bias=b, gguf="attn_q")
        ts += norm(f"{p}.q_norm", d, layer, part="attention", gguf="attn_q_norm", detail="attention_norms")
        if self.shares_kv_with is None:
            ts += linear(f"{p}.k_proj", "attention", k * d, h, layer, bias=b, gguf="attn_k")
            if not self.k_eq_v:
                ts += linear(f"{p}.v_proj", "attention", k * self.v_dim, h, layer, bias=b, gguf="attn_v")
            ts += norm(f"{p}.k_norm", d, layer, part="attention", gguf="attn_k_norm", detail="attention_norms")
        ts += linear(f"{p}.o_proj", "attention", h, n * self.v_dim, layer, bias=self.o_bias, gguf="attn_output")
        return ts + place(self.extra, p, layer)


@dataclass(frozen=True, kw_only=True)
class GemmaSlidingAttention(GemmaAttention, SlidingWindowAttention):
    """GemmaAttention over the last `window` tokens."""


def gemma_attention(c: Cfg, kind: str, window: int | None, **kw: Any) -> GemmaAttention:
    if kind == "sliding_attention":
        if not window:
            raise c.error("sliding-window layers need a positive window", "sliding_window")
        return GemmaSlidingAttention(window=window, **kw)
    return GemmaAttention(**kw)


def kv_sources(c: Cfg, kinds: list[str], shared_key: str = "num_kv_shared_layers") -> list[int | None]:
    """For each layer, the layer whose KV cache it reads (None: its own). The last `num_kv_shared_layers`
    layers read the last layer of their own kind before them; none are shared when every layer would be."""
    n = len(kinds)
    first = n - c.int0(shared_key)
    out: list[int | None] = []
    for i, kind in enumerate(kinds):
        if not 0 < first <= i:
            out.append(None)
            continue
        earlier = [j for j in range(first) if kinds[j] == kind]
        if not earlier:
            raise c.error(f"layer {i} ({kind}) shares the KV of an earlier {kind} layer, but there is none", shared_key)
        out.append(earlier[-1])
    return out


def per_layer_widths(c: Cfg, n: int, key: str = "intermediate_size") -> list[int]:
    """An MLP width per layer: the config gives one for all layers or a list with one per layer."""
    raw = c.get(key)
    if isinstance(raw, list):
        widths = c.int_list(key) or []
        if len(widths) != n:
            raise c.error(f"has {len(widths)} entries for {n} layers", key)
        if any(w <= 0 for w in widths):
            raise c.error("every entry must be a positive integer", key)
        return widths
    return [c.int(key)] * n


def per_layer_input(hidden: int, width: int) -> tuple[Tensor, ...]:
    """The gate that reads a layer's slice of the per-layer embedding and the projection back to hidden."""
    return (*linear("per_layer_input_gate", "other", width, hidden, None),
            *linear("per_layer_projection", "other", hidden, width, None))  # fmt: skip


def read(c: Cfg, meta: Meta) -> Model:
    base = "model."
    if meta.model_type == "gemma3n":
        c, meta = text_config(c, meta, "gemma3n_text", TEXT_DEFAULTS)
        base = "model.language_model."  # Gemma3nForConditionalGeneration's checkpoints
    hidden = c.int("hidden_size")
    n, kv, d = heads(c)
    num_layers = c.int("num_hidden_layers")
    inters = per_layer_widths(c, num_layers)
    # transformers' default: every fifth layer global, the others sliding.
    kinds = layer_types(c, num_layers, lambda i: "full_attention" if (i + 1) % 5 == 0 else "sliding_attention")
    sources = kv_sources(c, kinds)
    window = c.opt_int("sliding_window")
    bias = c.bool("attention_bias")
    streams, rank, width = c.int("altup_num_inputs"), c.int("laurel_rank"), c.int("hidden_size_per_layer_input")
    extra = (
        # AltUp: a learned scale on the corrected stream, the coefficient maps between the `streams` copies of
        # the residual (correction streams × streams, prediction streams² × streams), and the router that
        # weighs the copies per token.
        *param("altup.correct_output_scale", "other", (hidden,), None),
        *linear("altup.correction_coefs", "other", streams, streams, None),
        *linear("altup.prediction_coefs", "other", streams**2, streams, None),
        *linear("altup.modality_router", "other", streams, hidden, None),
        *norm("altup.router_norm", hidden, None),
        # LAuReL: hidden -> rank -> hidden, normalised, added to the residual.
        *linear("laurel.linear_left", "other", rank, hidden, None),
        *linear("laurel.linear_right", "other", hidden, rank, None),
        *norm("laurel.post_laurel_norm", hidden, None),
        *per_layer_input(hidden, width),
    )
    attn = {(kind, source): gemma_attention(c, kind, window, hidden=hidden, heads=n, kv_heads=kv, head_dim=d,
                                            qkv_bias=bias, o_bias=bias, shares_kv_with=source)
            for kind, source in set(zip(kinds, sources, strict=True))}  # fmt: skip
    mlps = {w: DenseMLP(hidden=hidden, inter=w) for w in set(inters)}
    # Per-layer inputs: a table of width × layers per token of a (smaller) vocabulary, plus the same width
    # projected from the main embedding, normalised per layer slice.
    per_layer_table = (Tensor(f"{base}embed_tokens_per_layer.weight", "embedding", "embedding",
                              (c.int("vocab_size_per_layer_input"), num_layers * width)),)  # fmt: skip
    model_extra = [
        *linear(f"{base}per_layer_model_projection", "other", num_layers * width, hidden, None),
        *norm(f"{base}per_layer_projection_norm", width, None),
    ]
    # AltUp's extra streams are made from (and folded back into) the embedding by one square map each.
    for j in range(streams - 1):
        model_extra += linear(f"{base}altup_projections.{j}", "other", hidden, hidden, None)
        model_extra += linear(f"{base}altup_unembed_projections.{j}", "other", hidden, hidden, None)
    return decoder(c, meta, parts=lambda i: (attn[kinds[i], sources[i]], mlps[inters[i]]), rotary_dim=d,
                   layer_norms=(*GEMMA_NORMS, Norm(name="post_per_layer_input_norm", size=hidden)),
                   prefix=f"{base}layers", embed=f"{base}embed_tokens", final_norm=f"{base}norm", layer_extra=extra,
                   embed_extra=per_layer_table, extra=tuple(model_extra))  # fmt: skip
