"""MiMo-V2-Flash: K heads of head_dim 192 and V heads of v_head_dim 128; full-attention layers (the first and
every sixth) and sliding-window layers (128 tokens) with twice the KV heads and a learned sink logit per query
head (`attention_sink_bias`). The first layer's MLP is dense, the rest a MoE of 256 routed experts, top 8,
routed by `mlp.gate` with a per-expert score correction (`mlp.gate.e_score_correction_bias`, a buffer in
transformers: saved, not a parameter). MTP layers (`model.mtp.layers.N`) use the sliding-window geometry and a
dense MLP."""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta, attention, decoder, layer_types
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.hy_v3 import mlp_types, nextn_layer
from launcher.model.arch.layers import Attention, DenseMLP, MoE
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import linear, param

MODEL_TYPES = ("mimo_v2_flash",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "mimo_v2_flash": dict(vocab_size=152576, hidden_size=4096, intermediate_size=16384, num_hidden_layers=48,
                          num_attention_heads=64, num_key_value_heads=4, head_dim=192, v_head_dim=128,
                          tie_word_embeddings=False, attention_bias=False, moe_intermediate_size=2048,
                          num_experts_per_tok=8, n_routed_experts=256, sliding_window=128, layer_types=None,
                          mlp_layer_types=None, max_position_embeddings=131072),
}  # fmt: skip

# transformers' attribute_map: the public name -> the name a saved config holds.
ATTRIBUTE_MAP: dict[str, dict[str, str]] = {"mimo_v2_flash": {"num_local_experts": "n_routed_experts"}}


def _rotary_dim(c: Cfg, d: int, kinds: list[str]) -> int:
    """vLLM keeps one cos/sin cache per RoPE setting in use (full and sliding layers differ in theta), each
    over partial_rotary_factor (0.334 by default) of the head."""
    rope = c.raw.get("rope_parameters")
    total = 0
    for kind in sorted(set(kinds)):
        sub = rope.get(kind) if isinstance(rope, dict) else None
        factor = sub.get("partial_rotary_factor") if isinstance(sub, dict) else None
        total += int(d * (factor if isinstance(factor, int | float) else 0.334))
    return total


def read(c: Cfg, meta: Meta) -> Model:
    vocab, hidden, inter = c.int("vocab_size"), c.int("hidden_size"), c.int("intermediate_size")
    n, kv = c.int("num_attention_heads"), c.int("num_key_value_heads")
    d, vd = c.int("head_dim"), c.int("v_head_dim")
    num_layers = c.int("num_hidden_layers")
    kinds = layer_types(c, num_layers, lambda i: "full_attention" if i == 0 or not (i + 1) % 6 else "sliding_attention")
    mlps = mlp_types(c, num_layers, ["dense"] + ["sparse"] * (num_layers - 1))
    window = c.opt_int("sliding_window")
    bias = c.bool("attention_bias")
    sinks = tuple(param("attention_sink_bias", "attention", (n,), None, role="sink", gguf="attn_sinks",
                        detail="sinks"))  # fmt: skip

    def attn(kind: str) -> Attention:
        swa = kind == "sliding_attention"
        k = 2 * kv if swa else kv  # sliding layers keep twice the KV heads of full layers
        c.heads_divide(n, k)
        return attention(kind, window=window, c=c, hidden=hidden, heads=n, kv_heads=k, head_dim=d, v_head_dim=vd,
                         qkv_bias=bias, extra=sinks if swa else ())  # fmt: skip

    attns = {k: attn(k) for k in set(kinds)}
    moe = MoE(hidden=hidden, num_experts=c.int("n_routed_experts"), experts_per_token=c.int("num_experts_per_tok"),
              expert_intermediate=c.int("moe_intermediate_size"), score_bias=True)  # fmt: skip
    dense = DenseMLP(hidden=hidden, inter=inter, detail="dense_first")
    # vLLM's MiMoV2MTP holds its own token embedding and output head (loaded from the main model's).
    own = (*linear("embed_tokens", "other", vocab, hidden, None, role="embedding"),
           *linear("lm_head", "other", vocab, hidden, None, role="lm_head"))  # fmt: skip
    mtp = tuple(
        nextn_layer(
            f"model.mtp.layers.{j}",
            hidden,
            attn("sliding_attention"),
            DenseMLP(hidden=hidden, inter=inter),
            layer_norms=("input_layernorm", "pre_mlp_layernorm"),
            extra=own,
        )
        for j in range(c.int0("num_nextn_predict_layers", 0))
    )
    return decoder(c, meta, parts=lambda i: (attns[kinds[i]], moe if mlps[i] == "sparse" else dense),
                   rotary_dim=_rotary_dim(c, d, kinds), mtp_layers=mtp)  # fmt: skip
