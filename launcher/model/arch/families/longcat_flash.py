"""LongCat-Flash: every decoder layer runs two MLA blocks and two dense MLPs in sequence, plus a shortcut MoE
whose router also picks among `zero_expert_num` zero-compute (identity) experts.

Each layer therefore owns two MLA caches (codes "AA"; `num_hidden_layers` is 2 × `num_layers`, one cache slot per
MLA block). transformers sizes the experts' fused gate_up for n_routed_experts + zero_expert_num experts but
down_proj for n_routed_experts; the identity experts' gate_up slices are never used and no checkpoint holds them
(LongCat-Flash: 180.4B of transformers' 741.1B): they are "unloaded" tensors here, in transformers' count but
not in the parameters, weights or checkpoint vlaunch prices. The router (`router.classifier`) scores all
n_routed_experts + zero_expert_num; vLLM keeps it and its correction bias in fp32. Checkpoints carry one MTP
layer under `model.mtp` (vLLM's longcat_flash_mtp), which transformers does not build.
"""

from __future__ import annotations

from typing import Any

from launcher.common.records import dataclass
from launcher.model.arch.common import Meta, build, embed_head, tied
from launcher.model.arch.config import Cfg
from launcher.model.arch.layers import DenseMLP, Layer, MLAttention, MoE, Norm, place
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import Tensor, linear

MODEL_TYPES = ("longcat_flash",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "longcat_flash": dict(vocab_size=131072, hidden_size=6144, num_layers=28, num_attention_heads=64,
                          max_position_embeddings=131072, tie_word_embeddings=False, attention_bias=False,
                          ffn_hidden_size=12288, q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128,
                          qk_rope_head_dim=64, v_head_dim=128, qk_head_dim=None, moe_topk=12, n_routed_experts=512,
                          zero_expert_num=256, expert_ffn_hidden_size=2048),
}  # fmt: skip

ATTRIBUTE_MAP: dict[str, dict[str, str]] = {
    "longcat_flash": {"num_local_experts": "n_routed_experts", "num_experts_per_tok": "moe_topk",
                      "intermediate_size": "ffn_hidden_size", "moe_intermediate_size": "expert_ffn_hidden_size"},
}  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class ZeroExpertMoE(MoE):
    """A MoE whose router also scores `zero_experts` identity experts that hold no weights.

    transformers' fused gate_up exists for every routed and zero expert (down only for the routed ones); the
    zero experts' slices are "unloaded" tensors: in transformers' count, not in any checkpoint or in vLLM."""

    zero_experts: int

    def tensors(self, prefix: str, layer: int | None) -> list[Tensor]:
        p = f"{prefix}.{self.name}"
        h, e, i = self.hidden, self.num_experts, self.expert_intermediate
        gate, up, down = self.expert_names
        x = f"{p}.{self.experts_name}"
        # The router scores routed and identity experts alike.
        ts = linear(f"{p}.{self.router_name}", "experts", e + self.zero_experts, h, layer, bias=self.router_bias,
                    gguf="ffn_gate_inp", detail="router", role="router")  # fmt: skip
        # The score correction per routed and identity expert: a buffer, saved but not a parameter (fp32 in vLLM).
        router = self.router_name.rsplit(".", 1)[0]
        ts.append(Tensor(f"{p}.{router}.e_score_correction_bias", "experts", "buffer", (e + self.zero_experts,),
                         1, layer, "exp_probs_b", "router"))  # fmt: skip
        for proj, kind in ((gate, "ffn_gate_exps"), (up, "ffn_up_exps")):
            ts += linear(f"{x}.{proj}", "experts", i, h, layer, gguf=kind, detail="routed_experts", copies=e,
                         role="expert")  # fmt: skip
            if self.zero_experts:
                # transformers' fused gate_up also has rows for every identity expert: allocated in memory,
                # never saved, never loaded by vLLM.
                ts += linear(f"{x}.{proj}_identity", "experts", i, h, layer, detail="routed_experts",
                             copies=self.zero_experts, role="unloaded")  # fmt: skip
        ts += linear(f"{x}.{down}", "experts", h, i, layer, gguf="ffn_down_exps", detail="routed_experts",
                     copies=e, role="expert")  # fmt: skip
        return ts + place(self.extra, p, layer)


def _mla(c: Cfg, hidden: int, name: str) -> MLAttention:
    bias = c.bool("attention_bias")
    nope, rope = c.int("qk_nope_head_dim"), c.int("qk_rope_head_dim")
    # q_b_proj is sized by qk_head_dim, kv_b_proj by nope + v: only the usual nope + rope split is read.
    if c.has("qk_head_dim") and c.int("qk_head_dim") != nope + rope:
        raise c.error(f"differs from qk_nope_head_dim + qk_rope_head_dim = {nope + rope}", "qk_head_dim")
    return MLAttention(hidden=hidden, heads=c.int("num_attention_heads"), q_lora_rank=c.int("q_lora_rank"),
                       kv_lora_rank=c.int("kv_lora_rank"), qk_nope_head_dim=nope, qk_rope_head_dim=rope,
                       v_head_dim=c.int("v_head_dim"), qkv_bias=bias, o_bias=bias, name=name)  # fmt: skip


def mtp_layer(c: Cfg, hidden: int, vocab: int, ffn: int) -> Layer:
    """The checkpoint's next-token-prediction layer (`model.mtp.*`, as vLLM's longcat_flash_mtp loads it): norms
    of the embedding and the previous hidden state, eh_proj merging the two, one MLA block and one dense MLP, a
    final norm and its own copy of the embedding."""
    return Layer(
        prefix="model.mtp",
        norms=(
            Norm(name="layers.0.enorm.m", size=hidden),
            Norm(name="layers.0.hnorm.m", size=hidden),
            Norm(name="layers.0.input_layernorm", size=hidden, gguf="attn_norm"),
            Norm(name="layers.0.post_attention_layernorm", size=hidden, gguf="ffn_norm"),
            Norm(name="norm", size=hidden),
        ),
        mixers=(_mla(c, hidden, "layers.0.self_attn"),),
        mlps=(DenseMLP(hidden=hidden, inter=ffn, name="layers.0.transformer_layer.mlp"),),
        extra=(
            *linear("layers.0.eh_proj", "other", hidden, 2 * hidden, None),  # [embedding; hidden] -> hidden
            *linear("embed_tokens", "other", vocab, hidden, None, role="embedding"),
        ),
    )


def read(c: Cfg, meta: Meta) -> Model:
    vocab, hidden = c.int("vocab_size"), c.int("hidden_size")
    # `num_hidden_layers` is a property (2 × num_layers: one per MLA block); a config may set it instead.
    if c.has("num_layers") or not c.has("num_hidden_layers"):
        num_layers = c.int("num_layers")
    else:
        num_layers = c.int("num_hidden_layers") // 2
        if num_layers == 0:
            raise c.error("must be at least 2 (two MLA blocks per layer)", "num_hidden_layers")
    ffn = c.int("ffn_hidden_size")
    moe = ZeroExpertMoE(hidden=hidden, num_experts=c.int("n_routed_experts"), experts_per_token=c.int("moe_topk"),
                        expert_intermediate=c.int("expert_ffn_hidden_size"), zero_experts=c.int0("zero_expert_num"),
                        router_name="router.classifier", router_bias=c.bool("router_bias", False))  # fmt: skip
    attn = (_mla(c, hidden, "self_attn.0"), _mla(c, hidden, "self_attn.1"))
    dense = (DenseMLP(hidden=hidden, inter=ffn, name="mlps.0"), DenseMLP(hidden=hidden, inter=ffn, name="mlps.1"))
    layer_norms = tuple(
        Norm(name=f"{n}.{j}", size=hidden, gguf="attn_norm" if n == "input_layernorm" else "ffn_norm")
        for j in (0, 1) for n in ("input_layernorm", "post_attention_layernorm")
    )  # fmt: skip
    layers = [Layer(prefix=f"model.layers.{i}", norms=layer_norms, mixers=attn, mlps=(*dense, moe))
              for i in range(num_layers)]  # fmt: skip
    # vLLM reads num_nextn_predict_layers (default 1) when it drafts with the checkpoint's MTP layer.
    mtp = tuple(mtp_layer(c, hidden, vocab, ffn) for _ in range(min(1, c.int0("num_nextn_predict_layers", 1))))
    is_tied = tied(c, meta)
    embeddings, head = embed_head(vocab, hidden, is_tied)
    return build(c, meta, vocab=vocab, hidden=hidden, layers=layers, is_tied=is_tied, embeddings=embeddings,
                 head=head, rotary_dim=attn[0].qk_rope_head_dim, mtp_layers=mtp)  # fmt: skip
