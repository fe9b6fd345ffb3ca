"""MiniMax-M3: GQA attention with per-head (Gemma) q/k norms and partial RoPE, block-sparse on the layers
`sparse_attention_config.sparse_attention_freq` marks (a lightning indexer: index_q_proj over one index head per KV
head, index_k_proj to one shared key, their norms); the first layers a dense MLP (`dense_intermediate_size`), the
rest a MoE of `num_local_experts` experts (w1/w3/w2, top `num_experts_per_tok`) with a shared MLP
(`shared_intermediate_size`) under `block_sparse_moe`, the sigmoid router's score correction a buffer.

`minimax_m3_vl` (MiniMaxM3SparseForConditionalGeneration: nvidia/MiniMax-M3-NVFP4) wraps the same text model under
`language_model.` with a CLIP-like ViT (a 3-D patch conv without bias, pre-LayerNorm, no post norm), a two-layer
projector into the text width and a patch-merge MLP over spatial_merge_size² neighbours; `minimax_m3`
(MiniMaxM3ForCausalLM: MiniMaxAI/MiniMax-M3) is the text model alone, which vLLM 0.32 does not serve (it registers
MiniMaxM3SparseForCausalLM and MiniMaxM3SparseForConditionalGeneration; neither transformers 5.19 nor vLLM's config
registry reads model_type minimax_m3). transformers' text class is MiniMaxM3VLForCausalLM (minimax_m3_vl_text).

KV cache: every layer's K and V (KV heads × head_dim); a sparse layer also keeps its indexer's key, index_head_dim per
token in bf16 whatever the KV dtype, the same on every rank (vLLM's MiniMaxM3IndexerCache). The checkpoints carry
`num_mtp_modules` MTP layers under `model.mtp.layers.N` (sparse attention and a MoE), which vLLM loads as MiniMaxM3MTP.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from launcher.common.records import dataclass
from launcher.model.arch.common import Meta, decoder, heads, text_config, under
from launcher.model.arch.config import Cfg
from launcher.model.arch.layers import MLP, Attention, DenseMLP, Layer, Mixer, MoE, Norm, norms, shared_experts
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import Tensor, linear, norm
from launcher.model.arch.towers import Tower, siglip_encoder

MODEL_TYPES = ("minimax_m3", "minimax_m3_vl", "minimax_m3_vl_text")

_TEXT = dict(vocab_size=200064, hidden_size=6144, intermediate_size=3072, num_hidden_layers=60, num_attention_heads=64,
             num_key_value_heads=4, head_dim=128, max_position_embeddings=524288, tie_word_embeddings=False,
             num_experts_per_tok=4, num_local_experts=128, dense_intermediate_size=12288,
             shared_intermediate_size=3072, rotary_dim=64, mlp_layer_types=None, index_n_heads=4, index_head_dim=128,
             layer_types=None)  # fmt: skip
DEFAULTS: dict[str, dict[str, Any]] = {
    "minimax_m3": _TEXT,  # no transformers class: MiniMaxM3VLTextConfig's defaults
    "minimax_m3_vl_text": _TEXT,
    "minimax_m3_vl": dict(tie_word_embeddings=False, projector_hidden_size=6144),
}
ATTRIBUTE_MAP: dict[str, dict[str, str]] = {
    m: {"num_experts": "num_local_experts"} for m in ("minimax_m3", "minimax_m3_vl_text")
}
VISION_DEFAULTS: dict[str, Any] = dict(hidden_size=1280, intermediate_size=5120, num_hidden_layers=32, num_channels=3,
                                       image_size=2016, patch_size=14)  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class SparseBlockAttention(Attention):
    """A sparse layer's attention: the indexer's projections and norms beside q/k/v/o, and its key cache."""

    index_heads: int
    index_head_dim: int

    def tensors(self, prefix: str, layer: int | None) -> list[Tensor]:
        p, h, d = f"{prefix}.{self.name}", self.hidden, self.index_head_dim
        return [
            *super().tensors(prefix, layer),
            *linear(f"{p}.index_q_proj", "attention", self.index_heads * d, h, layer, detail="indexer"),
            *linear(f"{p}.index_k_proj", "attention", d, h, layer, detail="indexer"),
            *norm(f"{p}.index_q_norm", d, layer, part="attention", detail="attention_norms"),
            *norm(f"{p}.index_k_norm", d, layer, part="attention", detail="attention_norms"),
        ]

    def side_cache_bytes_per_token(self) -> int:
        return self.index_head_dim * 2  # bf16 keys (vLLM's indexer_kv_dtype default)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "indexer_head_dim": self.index_head_dim}


@dataclass(frozen=True, kw_only=True)
class MiniMaxVision(Tower):
    """The ViT, its projector and its patch-merge MLP, under the checkpoint's names."""

    modalities: ClassVar[tuple[str, ...]] = ("image", "video")
    hidden: int
    intermediate: int
    num_layers: int
    channels: int
    patch: int
    temporal: int
    image_size: int
    merge: int
    projector_hidden: int
    out_hidden: int
    projector_bias: bool = True
    merge_bias: bool = True
    prefix: str = "vision_tower.vision_model"

    @property
    def patches_per_item(self) -> int:
        return (self.image_size // self.patch) ** 2

    @property
    def tokens_per_item(self) -> int:
        return self.patches_per_item // (self.merge * self.merge)

    def tensors(self) -> list[Tensor]:
        hv, iv, p = self.hidden, self.intermediate, self.prefix
        k = (self.channels, self.temporal, self.patch, self.patch)
        ts = [Tensor(f"{p}.embeddings.patch_embedding.weight", "vision", "conv", (hv, *k))]
        ts += norm(f"{p}.pre_layrnorm", hv, None, part="vision", bias=True)
        ts += siglip_encoder(p, hv, iv, self.num_layers)
        ph, out = self.projector_hidden, self.out_hidden
        ts += linear("multi_modal_projector.linear_1", "vision", ph, hv, None, bias=self.projector_bias)
        ts += linear("multi_modal_projector.linear_2", "vision", out, ph, None, bias=self.projector_bias)
        ts += linear("patch_merge_mlp.linear_1", "vision", ph, out * self.merge**2, None, bias=self.merge_bias)
        ts += linear("patch_merge_mlp.linear_2", "vision", out, ph, None, bias=self.merge_bias)
        return ts


def flags(c: Cfg, key: str, legacy: str, n: int, on: str, off: str, default: str) -> list[str]:
    """Per-layer kinds: `key` (a list of names), else the legacy 0/1 list `legacy` (may sit in
    sparse_attention_config), else `default` everywhere."""
    raw = c.list(key) if c.has(key) else None
    if raw:
        if len(raw) < n:
            raise c.error(f"has {len(raw)} entries for {n} layers", key)
        for i, t in enumerate(raw[:n]):
            if t not in (on, off):
                raise c.error(f"unknown type {t!r} at index {i}; known: {on}, {off}", key)
        return [str(t) for t in raw[:n]]
    src = c.sub("sparse_attention_config") if legacy == "sparse_attention_freq" else c
    bits = src.get(legacy)
    if isinstance(bits, int) and not isinstance(bits, bool):
        return [on if bits else off] * n
    values = src.int_list(legacy) if bits is not None else None
    if values is None:
        return [default] * n
    if len(values) < n:
        raise src.error(f"has {len(values)} entries for {n} layers", legacy)
    return [on if v else off for v in values[:n]]


def _moe(c: Cfg, hidden: int) -> MoE:
    experts = c.int("num_local_experts")
    bias = (Tensor("e_score_correction_bias", "experts", "buffer", (experts,), gguf="exp_probs_b", detail="router"),)
    return MoE(
        hidden=hidden, num_experts=experts, experts_per_token=c.int("num_experts_per_tok"),
        expert_intermediate=c.int("intermediate_size"), name="block_sparse_moe", expert_names=("w1", "w3", "w2"),
        shared=shared_experts(hidden, c.int("shared_intermediate_size")),
        extra=bias if c.bool("use_routing_bias", True) else (),
    )  # fmt: skip


def _sparse(c: Cfg, hidden: int, dense: Attention) -> SparseBlockAttention:
    sc = c.sub("sparse_attention_config")
    index_heads = sc.int("sparse_num_index_heads") if sc.has("sparse_num_index_heads") else c.int("index_n_heads")
    index_dim = sc.int("sparse_index_dim") if sc.has("sparse_index_dim") else c.int("index_head_dim")
    return SparseBlockAttention(**{f.name: getattr(dense, f.name) for f in dataclasses.fields(dense)},
                                index_heads=index_heads, index_head_dim=index_dim)  # fmt: skip


def mtp_layer(prefix: str, hidden: int, attn: Mixer, moe: MLP) -> Layer:
    """An MTP module (vLLM's MiniMaxM3MultiTokenPredictorLayer): enorm, hnorm, eh_proj, a sparse MoE decoder layer,
    final_layernorm; the embedding and head are the main model's."""
    extra_norms = (Norm(name="enorm", size=hidden), Norm(name="hnorm", size=hidden),
                   Norm(name="final_layernorm", size=hidden))  # fmt: skip
    layer_norms = norms(hidden, "input_layernorm", "post_attention_layernorm")
    eh_proj = tuple(linear("eh_proj", "other", hidden, 2 * hidden, None))
    return Layer(prefix=prefix, norms=(*layer_norms, *extra_norms), mixers=(attn,), mlps=(moe,), extra=eh_proj)


def read_text(c: Cfg, meta: Meta) -> Model:
    hidden, num_layers = c.int("hidden_size"), c.int("num_hidden_layers")
    n, kv, d = heads(c)
    full = Attention(hidden=hidden, heads=n, kv_heads=kv, head_dim=d, qk_norm="head")
    sparse = _sparse(c, hidden, full)
    kinds = flags(c, "layer_types", "sparse_attention_freq", num_layers, "minimax_m3_sparse", "full_attention",
                  "full_attention")  # fmt: skip
    mlps = flags(c, "mlp_layer_types", "moe_layer_freq", num_layers, "sparse", "dense", "sparse")
    moe, dense = _moe(c, hidden), DenseMLP(hidden=hidden, inter=c.int("dense_intermediate_size"), detail="dense_first")

    def parts(i: int) -> tuple[Mixer, MLP]:
        return sparse if kinds[i] == "minimax_m3_sparse" else full, moe if mlps[i] == "sparse" else dense

    mtp = tuple(mtp_layer(f"model.mtp.layers.{j}", hidden, sparse, moe) for j in range(c.int0("num_mtp_modules", 0)))
    rope = c.raw.get("partial_rotary_factor")
    rotary = int(d * rope) if isinstance(rope, int | float) and not c.has("rotary_dim") else c.int("rotary_dim")
    return decoder(c, meta, parts=parts, rotary_dim=rotary, mtp_layers=mtp)


def vision(top: Cfg, out_hidden: int) -> MiniMaxVision:
    v = top.sub("vision_config", VISION_DEFAULTS)
    comp = v.sub("img_token_compression_config")

    def geometry(key: str) -> int:
        return v.int(key) if v.has(key) else comp.int(key) if comp.has(key) else 2

    return MiniMaxVision(
        hidden=v.int("hidden_size"), intermediate=v.int("intermediate_size"), num_layers=v.int("num_hidden_layers"),
        channels=v.int("num_channels"), patch=v.int("patch_size"), temporal=geometry("temporal_patch_size"),
        image_size=v.int("image_size"), merge=geometry("spatial_merge_size"),
        projector_hidden=top.int("projector_hidden_size"), out_hidden=out_hidden,
        projector_bias=v.bool("multimodal_projector_bias", top.bool("multimodal_projector_bias", True)),
        merge_bias=v.bool("patch_merge_bias", True),
    )  # fmt: skip


def read(c: Cfg, meta: Meta) -> Model:
    if meta.model_type != "minimax_m3_vl":
        return read_text(c, meta)
    top = c
    c, meta = text_config(top, meta, "minimax_m3_vl_text", DEFAULTS["minimax_m3_vl_text"],
                          aliases=ATTRIBUTE_MAP["minimax_m3_vl_text"])  # fmt: skip
    text = under(read_text(c, meta), "language_model.")
    return dataclasses.replace(text, towers=(vision(top, text.hidden_size),), defaults_used=tuple(sorted(c.used)))
