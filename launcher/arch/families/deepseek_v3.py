"""DeepSeek V2 / V3 (and Kimi K2): multi-head latent attention, the first `first_k_dense_replace` layers dense,
the rest a MoE of routed plus shared experts; V3 checkpoints carry `num_nextn_predict_layers` MTP layers."""

from __future__ import annotations

from typing import Any

from launcher.arch.common import Meta, build, embed_head, tied
from launcher.arch.config import Cfg
from launcher.arch.layers import MLP, DenseMLP, Layer, MLAttention, MoE, Norm, norms, shared_experts
from launcher.arch.model import Model
from launcher.arch.tensors import linear

MODEL_TYPES = ("deepseek_v3", "deepseek_v2", "kimi_k2")

_V3 = dict(vocab_size=129280, hidden_size=7168, intermediate_size=18432, num_hidden_layers=61,
           num_attention_heads=128, num_key_value_heads=128, tie_word_embeddings=False, attention_bias=False,
           first_k_dense_replace=3, kv_lora_rank=512, q_lora_rank=1536, n_routed_experts=256, n_shared_experts=1,
           qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, num_experts_per_tok=8,
           moe_intermediate_size=2048, max_position_embeddings=4096)  # fmt: skip
DEFAULTS: dict[str, dict[str, Any]] = {
    "deepseek_v2": dict(vocab_size=102400, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                        num_attention_heads=32, num_key_value_heads=None, tie_word_embeddings=False,
                        attention_bias=False, first_k_dense_replace=0, kv_lora_rank=512, q_lora_rank=1536,
                        n_routed_experts=64, n_shared_experts=2, qk_nope_head_dim=128, qk_rope_head_dim=64,
                        v_head_dim=128, num_experts_per_tok=None, moe_intermediate_size=1407,
                        max_position_embeddings=2048),
    "deepseek_v3": _V3,
    "kimi_k2": _V3,
}  # fmt: skip


def mla(c: Cfg, hidden: int, **kw: Any) -> MLAttention:
    bias = c.bool("attention_bias")
    return MLAttention(
        hidden=hidden, heads=c.int("num_attention_heads"), q_lora_rank=c.opt_int("q_lora_rank"),
        kv_lora_rank=c.int("kv_lora_rank"), qk_nope_head_dim=c.int("qk_nope_head_dim"),
        qk_rope_head_dim=c.int("qk_rope_head_dim"), v_head_dim=c.int("v_head_dim"), qkv_bias=bias, o_bias=bias,
        **kw,
    )  # fmt: skip


def mtp_layer(prefix: str, hidden: int, vocab: int, mixer: Any, mlp: MLP) -> Layer:
    """A DeepSeek next-n prediction layer as the checkpoint stores it: a decoder layer, the two input norms
    and eh_proj that merge the token embedding with the previous hidden state, and its own copies of the
    embedding and the output head."""
    extra = (
        *linear("eh_proj", "other", hidden, 2 * hidden, None),
        *linear("embed_tokens", "other", vocab, hidden, None, role="embedding"),
        *linear("shared_head.head", "other", vocab, hidden, None, role="lm_head"),
    )
    return Layer(
        prefix=prefix,
        norms=(*norms(hidden, "input_layernorm", "post_attention_layernorm"),
               Norm(name="enorm", size=hidden), Norm(name="hnorm", size=hidden),
               Norm(name="shared_head.norm", size=hidden)),  # fmt: skip
        mixers=(mixer,),
        mlps=(mlp,),
        extra=extra,
    )


def read(c: Cfg, meta: Meta) -> Model:
    vocab, hidden, inter = c.int("vocab_size"), c.int("hidden_size"), c.int("intermediate_size")
    num_layers = c.int("num_hidden_layers")
    k_dense = c.int0("first_k_dense_replace")
    moe_inter = c.int("moe_intermediate_size")
    n_shared = c.int0("n_shared_experts")
    moe = MoE(
        hidden=hidden, num_experts=c.int("n_routed_experts"), experts_per_token=c.int0("num_experts_per_tok"),
        expert_intermediate=moe_inter,
        shared=shared_experts(hidden, moe_inter * n_shared) if n_shared else None,
    )  # fmt: skip
    dense = DenseMLP(hidden=hidden, inter=inter, detail="dense_first")
    attn = mla(c, hidden)
    is_tied = tied(c, meta)

    def layer(i: int) -> Layer:
        return Layer(
            prefix=f"model.layers.{i}",
            norms=norms(hidden, "input_layernorm", "post_attention_layernorm"),
            mixers=(attn,),
            mlps=(dense if i < k_dense else moe,),
        )

    layers = [layer(i) for i in range(num_layers)]
    mtp = tuple(
        mtp_layer(f"model.layers.{num_layers + j}", hidden, vocab, attn, moe)
        for j in range(c.int0("num_nextn_predict_layers", 0))
    )
    embeddings, head = embed_head(vocab, hidden, is_tied)
    return build(c, meta, vocab=vocab, hidden=hidden, layers=layers, is_tied=is_tied, embeddings=embeddings,
                 head=head, rotary_dim=attn.qk_rope_head_dim, mtp_layers=mtp)  # fmt: skip
