"""DBRX: MPT-style names (`transformer.blocks.N`, `wte`, `norm_f`), bias-free LayerNorms, one fused `Wqkv`
projection for GQA attention, and a MoE of 16 experts (top 4) whose three expert matrices are stored fused
across experts as bare parameters, each (experts x ffn_hidden_size, d_model): `ffn.experts.mlp.w1`, `v1`
and `w2` (w2 transposed), routed by `ffn.router.layer`. Heads and experts live in `attn_config` and
`ffn_config`."""

from __future__ import annotations

from typing import Any

from launcher.common.records import dataclass
from launcher.model.arch.common import Meta, decoder
from launcher.model.arch.config import Cfg
from launcher.model.arch.layers import Attention, MoE
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import Tensor, linear

MODEL_TYPES = ("dbrx",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "dbrx": dict(d_model=2048, n_heads=16, n_layers=24, max_seq_len=2048, vocab_size=32000,
                 tie_word_embeddings=False),
}  # fmt: skip
ATTN_DEFAULTS: dict[str, Any] = dict(kv_n_heads=1)
FFN_DEFAULTS: dict[str, Any] = dict(ffn_hidden_size=3584, moe_num_experts=4, moe_top_k=1)

# transformers' attribute_map: the public name -> the name a saved config holds.
ATTRIBUTE_MAP: dict[str, dict[str, str]] = {
    "dbrx": {"num_attention_heads": "n_heads", "hidden_size": "d_model", "num_hidden_layers": "n_layers",
             "max_position_embeddings": "max_seq_len"},
}  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class DbrxMoE(MoE):
    """DBRX's MoE: the router, then w1 (gate), v1 (up) and w2 (down, stored transposed) of all experts, each
    one (experts x ffn_hidden_size, hidden) tensor without a `.weight` suffix, as the checkpoint holds them."""

    def tensors(self, prefix: str, layer: int | None) -> list[Tensor]:
        p = f"{prefix}.{self.name}"
        h, e, i = self.hidden, self.num_experts, self.expert_intermediate
        ts = linear(f"{p}.{self.router_name}", "experts", e, h, layer, gguf="ffn_gate_inp", detail="router",
                    role="router")  # fmt: skip
        for name, gguf in (("w1", "ffn_gate_exps"), ("v1", "ffn_up_exps"), ("w2", "ffn_down_exps")):
            ts.append(Tensor(f"{p}.experts.mlp.{name}", "experts", "expert", (e * i, h), 1, layer, gguf,
                             "routed_experts"))  # fmt: skip
        return ts


def read(c: Cfg, meta: Meta) -> Model:
    hidden = c.int("d_model")
    n = c.int("n_heads")
    attn_cfg, ffn_cfg = c.sub("attn_config", ATTN_DEFAULTS), c.sub("ffn_config", FFN_DEFAULTS)
    kv = attn_cfg.int("kv_n_heads")
    c.heads_divide(n, kv, "attn_config.kv_n_heads")
    d = hidden // n
    if d <= 0:
        raise c.error("d_model // n_heads is 0", "n_heads")
    if c.bool("tie_word_embeddings"):
        raise c.error("DBRX does not support tied embeddings", "tie_word_embeddings")
    attn = Attention(hidden=hidden, heads=n, kv_heads=kv, head_dim=d, fused_qkv="Wqkv",
                     names=("q_proj", "k_proj", "v_proj", "out_proj"), name="norm_attn_norm.attn")  # fmt: skip
    moe = DbrxMoE(hidden=hidden, num_experts=ffn_cfg.int("moe_num_experts"),
                  experts_per_token=ffn_cfg.int("moe_top_k"), expert_intermediate=ffn_cfg.int("ffn_hidden_size"),
                  router_name="router.layer", name="ffn")  # fmt: skip
    return decoder(c, meta, parts=lambda i: (attn, moe), rotary_dim=d, hidden=hidden, num_layers=c.int("n_layers"),
                   layer_norms=("norm_attn_norm.norm_1", "norm_attn_norm.norm_2"), prefix="transformer.blocks",
                   is_tied=False, embed="transformer.wte", final_norm="transformer.norm_f",
                   max_pos_key="max_seq_len")  # fmt: skip
