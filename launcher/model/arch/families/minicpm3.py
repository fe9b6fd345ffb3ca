"""MiniCPM3: a dense model with DeepSeek-V2-style multi-head latent attention (low-rank query, one 256-wide KV
latent plus a 32-wide rope key), a tied embedding by default, and muP-style scalars (scale_emb, scale_depth,
dim_model_base) that cost no weights. v_head_dim defaults to hidden / heads.

vLLM does not serve it as MLA: it expands the latent to a full key and value per head and caches those, the
value zero-padded to the query/key head width, so per token and layer it stores 2 * heads * (nope + rope)
elements instead of the latent's kv_lora_rank + rope.
"""

from __future__ import annotations

from typing import Any

from launcher.common.records import dataclass
from launcher.model.arch.common import Meta, decoder
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.deepseek_v3 import mla
from launcher.model.arch.layers import DenseMLP, MLAttention, kv_heads_per_rank
from launcher.model.arch.model import Model

MODEL_TYPES = ("minicpm3",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "minicpm3": dict(vocab_size=73448, hidden_size=2560, intermediate_size=6400, num_hidden_layers=62,
                     num_attention_heads=40, max_position_embeddings=32768, tie_word_embeddings=True,
                     attention_bias=False, mlp_bias=False, kv_lora_rank=256, q_lora_rank=768, qk_nope_head_dim=64,
                     qk_rope_head_dim=32, v_head_dim=None),
}  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class ExpandedMLA(MLAttention):
    """MLA weights; transformers caches the latent, vLLM an expanded key and (padded) value per head."""

    def vllm_kv_elements_per_token(self, tp: int = 1) -> int:
        # vLLM's MiniCPM3Attention: plain attention over heads / tp heads of qk_head_dim each, K and V both
        # stored (V padded from v_head_dim up to qk_head_dim), hence 2 * heads * (nope + rope).
        return 2 * kv_heads_per_rank(self.heads, tp) * (self.qk_nope_head_dim + self.qk_rope_head_dim)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "vllm_kv_elements_per_token": self.vllm_kv_elements_per_token()}


def read(c: Cfg, meta: Meta) -> Model:
    hidden, heads = c.int("hidden_size"), c.int("num_attention_heads")
    # transformers' __post_init__: v_head_dim None -> hidden_size // num_attention_heads
    attn = mla(c, hidden, cls=ExpandedMLA, v_head_dim=c.opt_int("v_head_dim") or hidden // heads)
    mlp = DenseMLP(hidden=hidden, inter=c.int("intermediate_size"), bias=c.bool("mlp_bias"))
    return decoder(c, meta, parts=lambda i: (attn, mlp), rotary_dim=attn.qk_rope_head_dim)
