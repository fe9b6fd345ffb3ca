"""DeepSeek V2 / V3 / V3.2 (and Kimi K2, GLM-5): multi-head latent attention, leading dense layers, the rest
a MoE of routed plus shared experts; V3-style checkpoints carry `num_nextn_predict_layers` MTP layers.

V3.2 (`deepseek_v32`) and GLM-5 (`glm_moe_dsa`, served by vLLM with the V3.2 code) add DeepSeek sparse
attention: a lightning indexer per layer (its own query/key projections and its own key cache) picks the top-k
tokens the MLA attends to. GLM-5 can let a layer reuse the previous indexer layer's choice: such a layer has
no indexer weights and no indexer cache. The shared builder here also serves GLM-4.x-Lite and A.X K1.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from launcher.common.records import dataclass
from launcher.model.arch.common import Meta, build, embed_head, tied
from launcher.model.arch.config import Cfg
from launcher.model.arch.layers import MLP, DenseMLP, Indexer, Layer, MLAttention, MoE, Norm, norms, shared_experts
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import linear

MODEL_TYPES = ("deepseek_v3", "deepseek_v2", "kimi_k2", "deepseek_v32", "glm_moe_dsa")

_MLA_MOE = dict(tie_word_embeddings=False, attention_bias=False)
_V3 = dict(_MLA_MOE, vocab_size=129280, hidden_size=7168, intermediate_size=18432, num_hidden_layers=61,
           num_attention_heads=128, first_k_dense_replace=3, kv_lora_rank=512, q_lora_rank=1536,
           n_routed_experts=256, n_shared_experts=1, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
           num_experts_per_tok=8, moe_intermediate_size=2048, max_position_embeddings=4096,
           num_nextn_predict_layers=1)  # fmt: skip
# V3.2's config class declares no MTP field (released configs set num_nextn_predict_layers themselves).
_V32 = dict(_V3, max_position_embeddings=163840, num_nextn_predict_layers=None, mlp_layer_types=None,
            index_n_heads=64, index_head_dim=128, index_topk=2048)  # fmt: skip
DEFAULTS: dict[str, dict[str, Any]] = {
    "deepseek_v2": dict(_MLA_MOE, vocab_size=102400, hidden_size=4096, intermediate_size=11008,
                        num_hidden_layers=32, num_attention_heads=32, first_k_dense_replace=0, kv_lora_rank=512,
                        q_lora_rank=1536, n_routed_experts=64, n_shared_experts=2, qk_nope_head_dim=128,
                        qk_rope_head_dim=64, v_head_dim=128, num_experts_per_tok=None, moe_intermediate_size=1407,
                        max_position_embeddings=2048, mlp_bias=False),
    "deepseek_v3": _V3,
    "kimi_k2": _V3,  # vLLM reads kimi_k2 with DeepseekV3Config; transformers has no kimi_k2 type
    "deepseek_v32": _V32,
    "glm_moe_dsa": dict(_V32, vocab_size=154880, hidden_size=6144, intermediate_size=12288, num_hidden_layers=78,
                        num_attention_heads=64, q_lora_rank=2048, qk_nope_head_dim=192, v_head_dim=256,
                        max_position_embeddings=202752, index_n_heads=32, indexer_types=None),
}  # fmt: skip
_ROUTED = {"num_local_experts": "n_routed_experts"}
ATTRIBUTE_MAP: dict[str, dict[str, str]] = {
    "deepseek_v2": {"num_experts": "n_routed_experts"},
    "deepseek_v3": {**_ROUTED, "num_mtp_layers": "num_nextn_predict_layers"},
    "kimi_k2": {**_ROUTED, "num_mtp_layers": "num_nextn_predict_layers"},
    "deepseek_v32": _ROUTED,
    "glm_moe_dsa": _ROUTED,
}

# vLLM quantizes indexer keys to fp8 in blocks of this many elements, each block with an fp32 scale.
INDEXER_QUANT_BLOCK = 128


@dataclass(frozen=True, kw_only=True)
class LightningIndexer(Indexer):
    """DeepSeek sparse attention's indexer: wq_b from the query latent, one shared key (wk, LayerNorm with bias),
    a weight per indexer head (weights_proj). Its key cache is separate from the MLA latent."""

    def key_cache_bytes_per_token(self) -> int:
        # vLLM's indexer cache (uint8): index_head_dim fp8 values plus a 4-byte fp32 scale per 128-value block,
        # one key per token (no heads, no V), the same on every tensor-parallel rank, whatever kv_cache_dtype is.
        return self.head_dim + self.head_dim // INDEXER_QUANT_BLOCK * 4


@dataclass(frozen=True, kw_only=True)
class SparseMLA(MLAttention):
    """MLA under DeepSeek sparse attention: code I with its own indexer, i when it reuses an earlier layer's
    top-k selection (GLM-5 shared layers: no indexer weights, no indexer cache)."""

    @property
    def code(self) -> str:
        return "I" if self.indexer is not None else "i"

    def describe(self) -> dict[str, Any]:
        out = {**super().describe(), "indexer": "own" if self.indexer is not None else "shared"}
        if isinstance(self.indexer, LightningIndexer):
            out["indexer_heads"] = self.indexer.heads
            out["indexer_cache_bytes_per_token"] = self.indexer.key_cache_bytes_per_token()
        return out


def mla(c: Cfg, hidden: int, *, cls: type[MLAttention] = MLAttention, v_head_dim: int | None = None,
        **kw: Any) -> MLAttention:  # fmt: skip
    """The MLA block as DeepSeek-style configs describe it; attention_bias covers q_a, kv_a and o_proj."""
    bias = c.bool("attention_bias")
    return cls(
        hidden=hidden, heads=c.int("num_attention_heads"), q_lora_rank=c.opt_int("q_lora_rank"),
        kv_lora_rank=c.int("kv_lora_rank"), qk_nope_head_dim=c.int("qk_nope_head_dim"),
        qk_rope_head_dim=c.int("qk_rope_head_dim"), v_head_dim=v_head_dim or c.int("v_head_dim"), qkv_bias=bias,
        o_bias=bias, **kw,
    )  # fmt: skip


def indexer(c: Cfg, hidden: int, q_lora_rank: int | None) -> LightningIndexer:
    if q_lora_rank is None:
        raise c.error("the sparse-attention indexer reads the query latent: q_lora_rank must be set", "q_lora_rank")
    return LightningIndexer(
        hidden=hidden, q_lora_rank=q_lora_rank, heads=c.int("index_n_heads"), head_dim=c.int("index_head_dim"),
        topk=c.int("index_topk"),
    )  # fmt: skip


# Routers with DeepSeek-V3's e_score_correction_bias buffer, and its bytes per element as save_pretrained writes
# it (0: the model's dtype; V3.2's and GLM's routers keep it in float32). V2 routes greedily, without one.
SCORE_BIAS_BYTES: dict[str, int] = {
    "deepseek_v3": 0, "kimi_k2": 0, "axk1": 0, "deepseek_v32": 4, "glm_moe_dsa": 4, "glm4_moe_lite": 4,
}  # fmt: skip


def moe_block(c: Cfg, hidden: int, *, shared_bias: bool = False, model_type: str = "") -> MoE:
    """Routed experts (moe_intermediate_size each) plus n_shared_experts fused into one shared MLP."""
    moe_inter = c.int("moe_intermediate_size")
    n_shared = c.int0("n_shared_experts")
    return MoE(
        hidden=hidden, num_experts=c.int("n_routed_experts"), experts_per_token=c.int0("num_experts_per_tok"),
        expert_intermediate=moe_inter, score_bias=model_type in SCORE_BIAS_BYTES,
        score_bias_bytes=SCORE_BIAS_BYTES.get(model_type, 0),
        # n_shared experts of moe_intermediate_size each, stored as one MLP n_shared times as wide; transformers
        # builds it even for n_shared = 0, where only a bias (down_proj's, hidden wide) holds parameters.
        shared=shared_experts(hidden, moe_inter * n_shared, bias=shared_bias) if n_shared > 0 or shared_bias else None,
    )  # fmt: skip


def sparse_layers(c: Cfg, n: int, *, key: str = "mlp_layer_types", first_dense: int | None = None) -> list[bool]:
    """Which layers are MoE: the config's mlp_layer_types ("dense"/"sparse") when given, else the first
    `first_dense` layers dense (first_k_dense_replace unless the family fixes it)."""
    raw = c.list(key)
    if raw:
        if len(raw) < n:
            raise c.error(f"has {len(raw)} entries for {n} layers", key)
        for i, t in enumerate(raw[:n]):
            if t not in ("dense", "sparse"):
                raise c.error(f"unknown MLP type {t!r} at index {i}; known: dense, sparse", key)
        return [t == "sparse" for t in raw[:n]]
    k = c.int0("first_k_dense_replace") if first_dense is None else first_dense
    return [i >= k for i in range(n)]


def glm5_indexer_layers(c: Cfg, n: int) -> list[bool]:
    """GLM-5 layers that run their own indexer: `indexer_types` ("full"/"shared"), else `index_topk_pattern`
    (F/S), else every `index_topk_freq`-th layer counted from `index_skip_topk_offset - 1` (all by default)."""
    raw = c.list("indexer_types")
    if raw:
        if len(raw) < n:
            raise c.error(f"has {len(raw)} entries for {n} layers", "indexer_types")
        for i, t in enumerate(raw[:n]):
            if t not in ("full", "shared"):
                raise c.error(f"unknown indexer type {t!r} at index {i}; known: full, shared", "indexer_types")
        return [t == "full" for t in raw[:n]]
    pattern = c.get("index_topk_pattern")
    if isinstance(pattern, str):
        if len(pattern) < n or set(pattern) - {"F", "S"}:
            raise c.error(f"must be {n} letters F (own indexer) or S (shared)", "index_topk_pattern")
        return [ch == "F" for ch in pattern[:n]]
    if pattern is not None:
        raise c.error("must be a string of F and S", "index_topk_pattern")
    freq = max(c.int0("index_topk_freq", 1), 1)
    offset = c.int0("index_skip_topk_offset", 2)
    return [max(i - offset + 1, 0) % freq == 0 for i in range(n)]


def mtp_layer(prefix: str, hidden: int, vocab: int, mixer: Any, mlp: MLP, *, layer_norms: Sequence[Norm] = ()) -> Layer:
    """A DeepSeek next-n prediction layer as the checkpoint stores it (vLLM's deepseek_mtp loader): a decoder
    layer, enorm/hnorm and eh_proj that merge the token embedding with the previous hidden state (2 * hidden
    in), and its own copies of the embedding and the output head (shared_head.norm, shared_head.head)."""
    extra = (
        *linear("eh_proj", "other", hidden, 2 * hidden, None),
        *linear("embed_tokens", "other", vocab, hidden, None, role="embedding"),
        *linear("shared_head.head", "other", vocab, hidden, None, role="lm_head"),
    )
    return Layer(
        prefix=prefix,
        norms=(
            *norms(hidden, "input_layernorm", "post_attention_layernorm"),
            *layer_norms,
            Norm(name="enorm", size=hidden),
            Norm(name="hnorm", size=hidden),
            Norm(name="shared_head.norm", size=hidden),
        ),
        mixers=(mixer,),
        mlps=(mlp,),
        extra=extra,
    )


def read_mla_moe(
    c: Cfg, meta: Meta, *, is_moe: Sequence[bool], attn: Sequence[MLAttention], mtp_attn: MLAttention,
    dense_bias: bool = False, moe_norms: Sequence[Norm] = (),
) -> Model:  # fmt: skip
    """Assemble a DeepSeek-style model: MLA in every layer (attn[i]), a dense MLP or the MoE (is_moe[i]),
    `moe_norms` extra norms in MoE layers, and num_nextn_predict_layers MoE MTP layers after the last layer."""
    vocab, hidden = c.int("vocab_size"), c.int("hidden_size")
    dense = DenseMLP(hidden=hidden, inter=c.int("intermediate_size"), bias=dense_bias, detail="dense_first")
    n_mtp = c.int0("num_nextn_predict_layers", 0)
    moe = moe_block(c, hidden, shared_bias=dense_bias, model_type=meta.model_type) if any(is_moe) or n_mtp else None
    is_tied = tied(c, meta)

    def layer(i: int) -> Layer:
        mlp: MLP = moe if moe is not None and is_moe[i] else dense
        return Layer(
            prefix=f"model.layers.{i}",
            norms=(*norms(hidden, "input_layernorm", "post_attention_layernorm"), *(moe_norms if mlp is moe else ())),
            mixers=(attn[i],),
            mlps=(mlp,),
        )

    n = len(is_moe)
    layers = [layer(i) for i in range(n)]
    mtp = tuple(
        mtp_layer(f"model.layers.{n + j}", hidden, vocab, mtp_attn, moe, layer_norms=moe_norms)
        for j in range(n_mtp)
        if moe is not None
    )
    embeddings, head = embed_head(vocab, hidden, is_tied)
    return build(c, meta, vocab=vocab, hidden=hidden, layers=layers, is_tied=is_tied, embeddings=embeddings,
                 head=head, rotary_dim=mtp_attn.qk_rope_head_dim, mtp_layers=mtp)  # fmt: skip


def read(c: Cfg, meta: Meta) -> Model:
    hidden, n = c.int("hidden_size"), c.int("num_hidden_layers")
    mt = meta.model_type
    if mt in ("deepseek_v32", "glm_moe_dsa"):
        q_lora = c.opt_int("q_lora_rank")
        full = mla(c, hidden, cls=SparseMLA, indexer=indexer(c, hidden, q_lora))
        shared = mla(c, hidden, cls=SparseMLA)
        own = glm5_indexer_layers(c, n) if mt == "glm_moe_dsa" else [True] * n
        # vLLM's V3.2 MTP layer always carries its own indexer.
        return read_mla_moe(c, meta, is_moe=sparse_layers(c, n), attn=[full if o else shared for o in own],
                            mtp_attn=full)  # fmt: skip
    attn = mla(c, hidden)
    # DeepSeek V2/V3 (and Kimi K2): layer i is MoE from first_k_dense_replace on; V2 has an mlp_bias switch.
    first = c.int0("first_k_dense_replace")
    bias = c.bool("mlp_bias", False) if mt == "deepseek_v2" else False
    return read_mla_moe(c, meta, is_moe=[i >= first for i in range(n)], attn=[attn] * n, mtp_attn=attn,
                        dense_bias=bias)  # fmt: skip
