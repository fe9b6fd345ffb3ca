"""DeepSeek-V4: shared-KV multi-query attention over a 128-token sliding window plus a compressed long-range KV,
hyper-connections (`hc_mult` residual streams) around every block, and a MoE in every layer.

Layer kinds (`layer_types`, or the checkpoint's `compress_ratios` 0/4/128): compressed sparse attention (CSA, one
compressed KV entry per 4 tokens, a lightning indexer with its own compressed keys picks the top-k entries) and
heavily compressed attention (HCA, one entry per 128 tokens); a bare sliding-window layer has no compressor.
Every layer caches its window of K=V vectors (one head of head_dim), so the cache is a fixed window plus a compressed
KV that grows by head_dim (+ index_head_dim for CSA) every `compress_rate` tokens. The first `num_hash_layers`
MoE layers route by a frozen token-id table (`tid2eid`, a buffer the checkpoint holds but that is no parameter).

Names follow the released checkpoint (`layers.N.attn.wq_a`, `embed.weight`, `head.weight`, `hc_head_fn`), which
vLLM maps onto its modules; the MTP layers sit under `mtp.N.` and use sliding-window attention.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from launcher.model.arch.common import Meta, decoder
from launcher.model.arch.config import Cfg
from launcher.model.arch.layers import CSA, HCA, SWA, CompressedAttention, Layer, MoE, Norm, shared_experts
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import Tensor, linear, param

# deepseek_ref: the same config under SGLang's reference name (sgl-project/DeepSeek-V4-*-FP8: the keys of
# deepseek-ai's deepseek_v4 configs, fewer of them); transformers and vLLM 0.32 know no model_type deepseek_ref.
MODEL_TYPES = ("deepseek_v4", "deepseek_ref")

DEFAULTS: dict[str, dict[str, Any]] = {
    "deepseek_v4": dict(vocab_size=129280, hidden_size=4096, moe_intermediate_size=2048, num_hidden_layers=43,
                        num_attention_heads=64, head_dim=512, q_lora_rank=1024, num_experts_per_tok=6,
                        n_routed_experts=256, max_position_embeddings=1048576, layer_types=None, compress_rates=None,
                        hc_mult=4, mlp_layer_types=None, sliding_window=128, o_groups=8, o_lora_rank=1024,
                        index_n_heads=64, index_head_dim=128, index_topk=512, num_nextn_predict_layers=1,
                        tie_word_embeddings=False, partial_rotary_factor=None, mlp_bias=False),
}  # fmt: skip
DEFAULTS["deepseek_ref"] = DEFAULTS["deepseek_v4"]

ATTRIBUTE_MAP: dict[str, dict[str, str]] = {
    "deepseek_v4": {"num_local_experts": "n_routed_experts", "intermediate_size": "moe_intermediate_size"},
}
ATTRIBUTE_MAP["deepseek_ref"] = ATTRIBUTE_MAP["deepseek_v4"]

_RATIO_TO_TYPE = {0: SWA, 4: CSA, 128: HCA}
_DEFAULT_RATES = {CSA: 4, HCA: 128}
_NUM_HASH_LAYERS = 3  # transformers' default_num_hash_layers


def hyper_connection(names: tuple[str, str, str], hc: int, hidden: int, mix: int, scales: int,
                     layer: int | None) -> list[Tensor]:  # fmt: skip
    """A hyper-connection's weights: a projection from the `hc` flattened streams to `mix` mixing logits, a bias
    per logit and `scales` scalar scales. Bare fp32 parameters in vLLM, not linear layers."""
    fn, base, scale = names
    return [
        *param(fn, "other", (mix, hc * hidden), layer, detail="hyper_connections"),
        *param(base, "other", (mix,), layer, detail="hyper_connections"),
        *param(scale, "other", (scales,), layer, detail="hyper_connections"),
    ]


def layer_types(c: Cfg, n: int) -> list[str]:
    """Attention type of each layer: `layer_types`, else the checkpoint's `compress_ratios` (which may list the
    MTP layers too), else two HCA layers then HCA / CSA alternating (transformers' default)."""
    raw = c.list("layer_types")
    if raw is None and c.has("compress_ratios"):
        ratios: list[int] = c.int_list("compress_ratios") or []
        for i, r in enumerate(ratios):
            if r not in _RATIO_TO_TYPE:
                raise c.error(f"entry {i} is {r}; known ratios: 0, 4, 128", "compress_ratios")
        raw = [_RATIO_TO_TYPE[r] for r in ratios]
    if raw is None:
        raw = [HCA] * min(n, 2) + [CSA if i % 2 else HCA for i in range(max(n - 2, 0))]
    if len(raw) < n:
        raise c.error(f"has {len(raw)} entries for {n} layers", "layer_types")
    for i, t in enumerate(raw):
        if t not in (CSA, HCA, SWA):
            raise c.error(f"unknown layer type {t!r} at index {i}; known: {CSA}, {HCA}, {SWA}", "layer_types")
    return [str(t) for t in raw[:n]]


def mlp_layer_types(c: Cfg, n: int) -> list[str]:
    """ "hash_moe" or "moe" per layer: `mlp_layer_types`, else the first `num_hash_layers` (default 3) hashed."""
    raw = c.list("mlp_layer_types")
    if raw is None:
        n_hash = c.int0("num_hash_layers") if c.has("num_hash_layers") else _NUM_HASH_LAYERS
        return ["hash_moe" if i < n_hash else "moe" for i in range(n)]
    if len(raw) < n:
        raise c.error(f"has {len(raw)} entries for {n} layers", "mlp_layer_types")
    for i, t in enumerate(raw[:n]):
        if t not in ("hash_moe", "moe"):
            raise c.error(f"unknown MLP type {t!r} at index {i}; known: hash_moe, moe", "mlp_layer_types")
    return [str(t) for t in raw[:n]]


def compress_rates(c: Cfg) -> dict[str, int]:
    rates = dict(_DEFAULT_RATES)
    given = c.get("compress_rates")
    if given is not None:
        if not isinstance(given, Mapping):
            raise c.error("must be an object", "compress_rates")
        for k in given:
            if k in rates:
                rates[k] = c.sub("compress_rates").int(k)
    for key, kind in (("compress_rate_csa", CSA), ("compress_rate_hca", HCA)):  # older configs
        if c.has(key):
            rates[kind] = c.int(key)
    return rates


def read(c: Cfg, meta: Meta) -> Model:
    vocab, hidden = c.int("vocab_size"), c.int("hidden_size")
    num_layers = c.int("num_hidden_layers")
    n_mtp = c.int0("num_nextn_predict_layers")
    kinds = layer_types(c, num_layers)
    rates = compress_rates(c)
    heads, head_dim, o_groups = c.int("num_attention_heads"), c.int("head_dim"), c.int("o_groups")
    if (heads * head_dim) % o_groups:
        raise c.error(f"does not divide num_attention_heads × head_dim = {heads * head_dim}", "o_groups")
    hc = c.int("hc_mult")

    def attention(kind: str) -> CompressedAttention:
        csa = kind == CSA
        return CompressedAttention(
            hidden=hidden, heads=heads, head_dim=head_dim, q_lora_rank=c.int("q_lora_rank"), o_groups=o_groups,
            o_lora_rank=c.int("o_lora_rank"), window=c.int("sliding_window"),
            compress_rate=rates[kind] if kind != SWA else 0, overlap=csa,
            index_heads=c.int("index_n_heads") if csa else 0, index_head_dim=c.int("index_head_dim") if csa else 0,
            index_topk=c.int("index_topk") if csa else 0,
        )  # fmt: skip

    moe, hash_moe = _moe(c, vocab, hidden)
    mlp_kinds = mlp_layer_types(c, num_layers)
    mix = (2 + hc) * hc  # pre and post weights (hc each) and the hc × hc stream-mixing matrix
    block_norms = (Norm(name="attn_norm", size=hidden, gguf="attn_norm"),
                   Norm(name="ffn_norm", size=hidden, gguf="ffn_norm"))  # fmt: skip

    def hc_pair() -> tuple[Tensor, ...]:
        return (*hyper_connection(("hc_attn_fn", "hc_attn_base", "hc_attn_scale"), hc, hidden, mix, 3, None),
                *hyper_connection(("hc_ffn_fn", "hc_ffn_base", "hc_ffn_scale"), hc, hidden, mix, 3, None))  # fmt: skip

    attn = {k: attention(k) for k in set(kinds)}
    head_hc = hyper_connection(("hc_head_fn", "hc_head_base", "hc_head_scale"), hc, hidden, hc, 1, None)
    # MTP layers (not built by transformers): vLLM runs them as sliding-window-only blocks with a top-k MoE;
    # e_proj and h_proj map the embedding and the previous hidden state before they are summed.
    mtp = tuple(
        Layer(prefix=f"mtp.{j}",
              norms=(*block_norms, Norm(name="enorm", size=hidden), Norm(name="hnorm", size=hidden),
                     Norm(name="norm", size=hidden)),
              mixers=(attention(SWA),), mlps=(moe,),
              extra=(*hc_pair(), *linear("e_proj", "other", hidden, hidden, None),
                     *linear("h_proj", "other", hidden, hidden, None), *head_hc))
        for j in range(n_mtp)
    )  # fmt: skip
    rope = _rotary_dim(c, head_dim)
    return decoder(c, meta, parts=lambda i: (attn[kinds[i]], hash_moe if mlp_kinds[i] == "hash_moe" else moe),
                   rotary_dim=rope, layer_norms=block_norms, prefix="layers", embed="embed", final_norm="norm",
                   head="head", layer_extra=hc_pair(), mtp_layers=mtp, extra=tuple(head_hc),
                   expert_dtype=c.str("expert_dtype", None))  # fmt: skip


def _moe(c: Cfg, vocab: int, hidden: int) -> tuple[MoE, MoE]:
    """The routed MoE with its shared expert, and the hash-routed one of the first layers."""
    moe_inter = c.int("moe_intermediate_size")
    n_experts, top_k = c.int("n_routed_experts"), c.int("num_experts_per_tok")
    # transformers builds one shared expert of moe_intermediate_size whatever n_shared_experts says.
    moe = MoE(
        hidden=hidden,
        num_experts=n_experts,
        experts_per_token=top_k,
        expert_intermediate=moe_inter,
        expert_names=("w1", "w3", "w2"),
        name="ffn",
        shared=shared_experts(hidden, moe_inter, names=("w1", "w3", "w2"), bias=c.bool("mlp_bias")),
        # The routers' score correction per expert: a buffer, saved (as gate.bias) but not a parameter.
        extra=(Tensor("gate.bias", "experts", "buffer", (n_experts,), gguf="exp_probs_b", detail="router"),),
    )
    # Hash-routed layers pick experts from a frozen token-id table instead (int64, vocab × top-k), no bias.
    hash_moe = replace(
        moe, extra=(Tensor("gate.tid2eid", "experts", "buffer", (vocab, top_k), detail="router", stored_bytes=8),)
    )
    return moe, hash_moe


def _rotary_dim(c: Cfg, head_dim: int) -> int:
    """The rotary width."""
    # Rotary width: partial_rotary_factor × head_dim, else an older config's qk_rope_head_dim, else 64/512 of it.
    if c.has("partial_rotary_factor"):
        return int(head_dim * c.float("partial_rotary_factor"))
    return c.int("qk_rope_head_dim") if c.has("qk_rope_head_dim") else head_dim * 64 // 512
