"""Hy4 (HY-V4): DeepSeek-style multi-head latent attention with a sparse-attention (DSA) indexer, an output gate
and a sink logit per head, hyper-connections (`hc_mult` residual streams, DeepSeek-V4 form without the
stream-mixing matrix), one dense layer then a MoE with a shared expert.

Only the `indexer_types == "full"` layers own an indexer (and its key cache, index_head_dim per token); a "shared"
layer reuses the top-k of the last full layer and keeps only its MLA latent (codes "I" and "i"). Names follow the
released checkpoint (vLLM's loader): `self_attn.linear_gate`, `self_attn.learnable_sink_param`,
`hc_attn_layer.hc_pre.hc_fn`, `model.hc_head.hc_head_fn`. Routed experts are named per expert
(`mlp.experts.N.gate_proj`), one of the two layouts vLLM loads; transformers' save_pretrained writes them stacked
(`mlp.experts.gate_up_proj`, E × 2·I × hidden), the same bytes. The router's e_score_correction_bias is an fp32
buffer. The checkpoint's MTP layers follow the decoder layers (`model.layers.{num_hidden_layers}`).
"""

from __future__ import annotations

from typing import Any

from launcher.common.records import dataclass
from launcher.model.arch.common import Meta, decoder
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.deepseek_v4 import hyper_connection
from launcher.model.arch.layers import DenseMLP, Indexer, Layer, MLAttention, MoE, Norm, norms, shared_experts
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import Tensor, linear, param

MODEL_TYPES = ("hy_v4",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "hy_v4": dict(vocab_size=120832, hidden_size=2816, intermediate_size=6912, moe_intermediate_size=768,
                  num_hidden_layers=34, num_attention_heads=32, max_position_embeddings=262144,
                  tie_word_embeddings=False, attention_bias=False, n_routed_experts=256, n_shared_experts=1,
                  num_experts_per_tok=8, q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=192,
                  qk_rope_head_dim=64, v_head_dim=256, mlp_layer_types=None, indexer_types=None, index_topk=2048,
                  index_head_dim=128, index_n_heads=16, hc_mult=4),
}  # fmt: skip

ATTRIBUTE_MAP: dict[str, dict[str, str]] = {"hy_v4": {"num_local_experts": "n_routed_experts"}}


@dataclass(frozen=True, kw_only=True)
class SharedIndexerMLA(MLAttention):
    """An MLA layer that reuses the top-k selection of an earlier layer's indexer: no indexer weights, no
    indexer cache."""

    @property
    def code(self) -> str:
        return "i"


def _types(c: Cfg, key: str, n: int, default: list[str], known: tuple[str, ...]) -> list[str]:
    raw = c.list(key)
    if raw is None:
        return default
    if len(raw) < n:
        raise c.error(f"has {len(raw)} entries for {n} layers", key)
    for i, t in enumerate(raw[:n]):
        if t not in known:
            raise c.error(f"unknown type {t!r} at index {i}; known: {', '.join(known)}", key)
    return [str(t) for t in raw[:n]]


def read(c: Cfg, meta: Meta) -> Model:
    hidden, inter = c.int("hidden_size"), c.int("intermediate_size")
    num_layers = c.int("num_hidden_layers")
    mlp_types = _types(c, "mlp_layer_types", num_layers, ["dense"] * min(1, num_layers)
                       + ["sparse"] * max(num_layers - 1, 0), ("dense", "sparse"))  # fmt: skip
    # transformers' default: layer 0 and every fourth layer from 1 run their own indexer.
    indexers = _types(c, "indexer_types", num_layers,
                      ["full" if i == 0 or (i - 1) % 4 == 0 else "shared" for i in range(num_layers)],
                      ("full", "shared"))  # fmt: skip
    heads, v_dim, q_rank = c.int("num_attention_heads"), c.int("v_head_dim"), c.int("q_lora_rank")
    bias = c.bool("attention_bias")
    # A sigmoid output gate per head and channel (heads × v_head_dim) and a sink logit per head.
    extra: tuple[Tensor, ...] = (*linear("linear_gate", "attention", heads * v_dim, hidden, None),
                                 *param("learnable_sink_param", "attention", (heads,), None, role="sink",
                                        gguf="attn_sinks", detail="sinks"))  # fmt: skip
    mla: dict[str, Any] = dict(hidden=hidden, heads=heads, q_lora_rank=q_rank, kv_lora_rank=c.int("kv_lora_rank"),
                               qk_nope_head_dim=c.int("qk_nope_head_dim"), qk_rope_head_dim=c.int("qk_rope_head_dim"),
                               v_head_dim=v_dim, qkv_bias=bias, o_bias=bias, extra=extra)  # fmt: skip
    indexer = Indexer(hidden=hidden, q_lora_rank=q_rank, heads=c.int("index_n_heads"), head_dim=c.int("index_head_dim"),
                      topk=c.int("index_topk"))  # fmt: skip
    full, shared = MLAttention(indexer=indexer, **mla), SharedIndexerMLA(**mla)
    moe_inter = c.int("moe_intermediate_size")
    n_shared = c.int0("n_shared_experts")
    moe = MoE(hidden=hidden, num_experts=c.int("n_routed_experts"), experts_per_token=c.int("num_experts_per_tok"),
              expert_intermediate=moe_inter, score_bias=True, score_bias_bytes=4,  # an fp32 buffer in the checkpoint
              shared=shared_experts(hidden, moe_inter * n_shared) if n_shared else None)  # fmt: skip
    dense = DenseMLP(hidden=hidden, inter=inter, detail="dense_first")
    hc = c.int("hc_mult")
    mix = 2 * hc  # pre and post weights, one per stream (no stream-mixing matrix, unlike DeepSeek-V4)
    hc_tensors = tuple(
        t for sub in ("hc_attn_layer", "hc_mlp_layer")
        for t in hyper_connection((f"{sub}.hc_pre.hc_fn", f"{sub}.hc_pre.hc_base", f"{sub}.hc_pre.hc_scale"), hc,
                                  hidden, mix, 2, None)
    )  # fmt: skip
    # Next-token-prediction layers the checkpoint carries (vLLM's HYV4MTP; transformers builds none): a full
    # indexer layer with a MoE and no hyper-connections, eh_proj merging [embedding; hidden]; embedding and head
    # are the model's own. vLLM reads one layer when num_nextn_predict_layers is 1 or 2.
    n_mtp = c.int0("num_nextn_predict_layers", 0)
    mtp = tuple(
        Layer(prefix=f"model.layers.{num_layers + j}",
              norms=(*norms(hidden, "input_layernorm", "post_attention_layernorm"),
                     Norm(name="enorm", size=hidden), Norm(name="hnorm", size=hidden),
                     Norm(name="final_layernorm", size=hidden)),
              mixers=(full,), mlps=(moe,), extra=tuple(linear("eh_proj", "other", hidden, 2 * hidden, None)))
        for j in range(max(n_mtp - 1, 1) if n_mtp else 0)
    )  # fmt: skip
    head_hc = hyper_connection(("model.hc_head.hc_head_fn", "model.hc_head.hc_head_base",
                                "model.hc_head.hc_head_scale"), hc, hidden, hc, 1, None)  # fmt: skip
    return decoder(c, meta, parts=lambda i: (full if indexers[i] == "full" else shared,
                                             moe if mlp_types[i] == "sparse" else dense),
                   rotary_dim=full.qk_rope_head_dim, layer_extra=hc_tensors, extra=tuple(head_hc),
                   mtp_layers=mtp)  # fmt: skip
