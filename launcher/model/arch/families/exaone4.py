"""EXAONE 4.0 and K-EXAONE (LG AI): per-head q/k RMSNorm and three sliding-window layers to one global.
EXAONE 4.0 normalises each sublayer's output (post_attention/post_feedforward norms, no input norm); the MoE
model (exaone_moe) is pre-norm, with routed plus shared experts after `first_k_dense_replace` dense layers and
an MTP block (vLLM's exaone_moe_mtp.py) in checkpoints that declare `num_nextn_predict_layers`."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from launcher.model.arch.common import Meta, attention, decoder, heads, layer_types
from launcher.model.arch.config import Cfg
from launcher.model.arch.layers import MLP, DenseMLP, Layer, Mixer, MoE, Norm, norms, shared_experts
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import Tensor, linear

MODEL_TYPES = ("exaone4", "exaone_moe")

_COMMON = dict(vocab_size=102400, hidden_size=4096, intermediate_size=16384, num_hidden_layers=32,
               num_attention_heads=32, num_key_value_heads=32, tie_word_embeddings=False, sliding_window=4096,
               sliding_window_pattern=4, layer_types=None, max_position_embeddings=2048)  # fmt: skip
DEFAULTS: dict[str, dict[str, Any]] = {
    "exaone4": _COMMON,
    "exaone_moe": dict(_COMMON, mlp_layer_types=None, first_k_dense_replace=1, moe_intermediate_size=1024,
                       num_experts=64, num_experts_per_tok=8, num_shared_experts=1),
}  # fmt: skip


def _pattern_kind(pattern: Any, i: int, num_layers: int) -> str:
    """transformers' rule without `layer_types`: an int p makes every p-th layer global; a string of L
    (local) and G (global) repeats from layer 0, and the last layer is always global."""
    if isinstance(pattern, str) and pattern:
        local = pattern[i % len(pattern)] == "L" and i != num_layers - 1
    else:
        local = isinstance(pattern, int) and pattern > 0 and (i + 1) % pattern != 0
    return "sliding_attention" if local else "full_attention"


def kinds_and_windows(c: Cfg, num_layers: int, key: str = "layer_types",
                      windows_key: str = "sliding_windows") -> list[tuple[str, int | None]]:  # fmt: skip
    """Each layer's attention kind and window. `sliding_windows` (per layer, K-EXAONE 2.0 configs) is what vLLM
    reads; otherwise the one `sliding_window`. A sliding layer without a window attends to everything."""
    window = c.opt_int("sliding_window")
    pattern = c.get("sliding_window_pattern") if window else None
    kinds = layer_types(c, num_layers, lambda i: _pattern_kind(pattern, i, num_layers), key=key)
    per_layer = c.list(windows_key, None)
    out: list[tuple[str, int | None]] = []
    for i, kind in enumerate(kinds):
        w: Any = per_layer[i] if per_layer is not None and i < len(per_layer) else window
        if w is not None and (isinstance(w, bool) or not isinstance(w, int) or w < 0):
            raise c.error(f"must hold non-negative integers, got {w!r} at index {i}", windows_key)
        out.append((kind, w) if kind == "sliding_attention" and w else ("full_attention", None))
    return out


def mtp_layers(c: Cfg, hidden: int, num_layers: int, attn: dict[str, Any]) -> tuple[Layer, ...]:
    """K-EXAONE's MTP block as the checkpoint stores it under `mtp.`: fc merges the normed embedding and hidden
    state (2 × hidden in), a final norm, and decoder layers whose MLP is dense (vLLM builds no MoE there) and
    whose attention follows `mtp_layer_types` (else the main layer with the same index)."""
    count = c.int0("num_nextn_predict_layers", 0)
    key = "mtp_layer_types" if c.has("mtp_layer_types") else "layer_types"
    if key == "layer_types" and count > num_layers:
        raise c.error(f"{count} MTP layers follow the main layers' types, but there are {num_layers}",
                      "num_nextn_predict_layers")  # fmt: skip
    wkey = "mtp_sliding_windows" if c.has("mtp_sliding_windows") else "sliding_windows"
    kinds = kinds_and_windows(c, num_layers if key == "layer_types" else count, key, wkey)
    dense = DenseMLP(hidden=hidden, inter=c.int("intermediate_size"), detail="mtp")
    # Shared by all MTP layers (stored once): fc and the norms before and after the block.
    merge = tuple(linear("fc", "other", hidden, 2 * hidden, None))
    merge_norms = tuple(Norm(name=x, size=hidden) for x in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"))
    out = []
    for j in range(count):
        kind, window = kinds[j]
        p = f"layers.{j}"
        out.append(
            Layer(
                prefix="mtp",
                norms=(
                    *norms(hidden, f"{p}.input_layernorm", f"{p}.post_attention_layernorm"),
                    *(merge_norms if j == 0 else ()),
                ),
                mixers=(attention(kind, window=window, c=c, name=f"{p}.self_attn", **attn),),
                mlps=(replace(dense, name=f"{p}.mlp"),),
                extra=merge if j == 0 else (),
            )
        )
    return tuple(out)


def read(c: Cfg, meta: Meta) -> Model:
    hidden, inter = c.int("hidden_size"), c.int("intermediate_size")
    n, kv, d = heads(c)
    num_layers = c.int("num_hidden_layers")
    kinds = kinds_and_windows(c, num_layers)
    is_moe = meta.model_type == "exaone_moe"
    attn: dict[str, Any] = dict(hidden=hidden, heads=n, kv_heads=kv, head_dim=d, qk_norm="head")
    dense = DenseMLP(hidden=hidden, inter=inter, detail="dense_first" if is_moe else "dense")
    moe: MoE | None = None
    mlp_types: list[Any] = []
    if is_moe:
        k_dense = c.int0("first_k_dense_replace")
        mlp_types = c.list("mlp_layer_types") or ["dense" if i < k_dense else "sparse" for i in range(num_layers)]
        if len(mlp_types) < num_layers or any(t not in ("dense", "sparse") for t in mlp_types[:num_layers]):
            raise c.error(f"needs 'dense' or 'sparse' for each of {num_layers} layers", "mlp_layer_types")
        moe_inter, n_shared = c.int("moe_intermediate_size"), c.int0("num_shared_experts")
        moe = MoE(
            hidden=hidden, num_experts=c.int("num_experts"), experts_per_token=c.int("num_experts_per_tok"),
            expert_intermediate=moe_inter,
            # One shared MLP as wide as all shared experts together (0 wide, no weights, without any).
            shared=shared_experts(hidden, moe_inter * n_shared) if n_shared else None,
            # noaux_tc routing's correction bias per expert: a buffer saved beside the experts.
            extra=(Tensor("e_score_correction_bias", "experts", "buffer", (c.int("num_experts"),), detail="router"),),
        )  # fmt: skip
    # EXAONE 4.0 normalises sublayer outputs; K-EXAONE normalises inputs.
    names = ("input_layernorm", "post_attention_layernorm") if is_moe else (
        "post_attention_layernorm", "post_feedforward_layernorm")  # fmt: skip
    mixers = {(kind, window): attention(kind, window=window, c=c, **attn) for kind, window in set(kinds)}

    def parts(i: int) -> tuple[Mixer, MLP]:
        return mixers[kinds[i]], moe if moe is not None and mlp_types[i] == "sparse" else dense

    mtp = mtp_layers(c, hidden, num_layers, attn) if is_moe else ()
    return decoder(c, meta, parts=parts, rotary_dim=d, layer_norms=names, mtp_layers=mtp)
