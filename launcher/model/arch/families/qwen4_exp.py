"""Qwen4-Exp: Qwen3.5-MoE's hybrid (split-projection Gated DeltaNet, gated full attention, a sparse MoE with a
gated shared expert in every layer) with three additions. Hyper-connections: the residual stream is
`hc_count` streams wide, and each layer has no RMSNorm of its own but two gated residuals (before the mixer
and before the MoE: a grouped RMSNorm over the streams, a low-rank mixer, a per-stream inject weight); a final
mixer collapses the streams for the head, in place of the final norm. QSA: with `indexer_*` set, every
attention layer carries a token indexer (one projection for its query heads and single key head, q/k norms).
PLE: the `ple_layer_ids` (one-based, linear-attention) layers add hashed n-gram embeddings (prime-sized tables,
saved as `split_ngram_parts` shards) through key/value projections and a dilated depthwise conv.

transformers' class defaults do not build (every attention layer is indexed but the indexer fields are unset);
vLLM then serves the attention layers without an indexer, as read here.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from launcher.common.records import dataclass
from launcher.model.arch.common import Meta, build, embed_head, text_config, tied
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.qwen3_next import (
    gated_attention,
    gated_delta_net,
    hybrid_kinds,
    mtp_block,
    rotary_dim,
    sparse_moe,
)
from launcher.model.arch.families.qwen3_vl import VISION_DEFAULTS, vision, wrapper_tied
from launcher.model.arch.layers import MLP, Attention, Layer, Mixer, MixerKind
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import Tensor, conv1d, linear, norm
from launcher.model.arch.towers import Tower

MODEL_TYPES = ("qwen4_exp", "qwen4_exp_text")

DEFAULTS: dict[str, dict[str, Any]] = {
    "qwen4_exp": dict(tie_word_embeddings=False),
    "qwen4_exp_text": dict(vocab_size=248320, hidden_size=2048, num_hidden_layers=40, num_attention_heads=16,
                           num_key_value_heads=2, head_dim=256, tie_word_embeddings=False, attention_bias=False,
                           linear_conv_kernel_dim=4, linear_key_head_dim=128, linear_value_head_dim=128,
                           linear_num_key_heads=16, linear_num_value_heads=32, moe_intermediate_size=512,
                           shared_expert_intermediate_size=512, num_experts_per_tok=10, num_experts=512,
                           layer_types=None, hc_count=4, hc_lowrank=320, ple_layer_ids=None, ple_embed_dim=None,
                           ple_conv_kernel_size=4, ngram_size=3, heads_per_ngram=8, ngram_vocab_size_base=20000000,
                           make_ngram_vocab_size_divisible_by=128, split_ngram_parts=512, indexer_n_heads=None,
                           indexer_kv_heads=None, indexer_head_dim=None, indexer_budget=None,
                           indexer_compress_ratio=None, max_position_embeddings=32768),
}  # fmt: skip

# Saved configs may say full_attention; transformers turns every attention layer into an indexed one.
LAYER_NAMES = {
    "linear_attention": "linear_attention",
    "indexed_attention": "full_attention",
    "full_attention": "full_attention",
}


def hyper_connection(name: str, hidden: int, hc: int, rank: int, *, inject: bool = True) -> tuple[Tensor, ...]:
    """A gated residual over hc streams of `hidden`: its RMSNorm over the streams (one weight per stream
    channel, normalised per stream), the low-rank input mixer down and up, and (inside layers) the weight
    that injects the block's output into each stream."""
    wide = hc * hidden
    return (
        *norm(f"{name}.hc_norm", wide, None),
        *linear(f"{name}.input_mix_weight_down", "other", rank, wide, None),
        *linear(f"{name}.input_mix_weight_up", "other", wide, rank, None),
        *(linear(f"{name}.block_inject_weight", "other", hc, wide, None) if inject else ()),
    )


def layer_hyper_connections(hidden: int, hc: int, rank: int) -> tuple[Tensor, ...]:
    """A decoder layer's two gated residuals, before its mixer and before its MoE (it has no other norms)."""
    return (
        *hyper_connection("attn_hyper_connection", hidden, hc, rank),
        *hyper_connection("mlp_hyper_connection", hidden, hc, rank),
    )


@dataclass(frozen=True, kw_only=True)
class QSAttention(Attention):
    """Gated full attention with the QSA token indexer: index_qk_proj emits the indexer's query heads and its one
    key head; q/k RMSNorms over index_head_dim. vLLM keeps the indexer's keys in a side cache (a circular buffer
    of raw keys and one compressed key per `compress_ratio` tokens, fp8 or bf16), outside the K/V counted here."""

    index_heads: int
    index_kv_heads: int
    index_head_dim: int
    compress_ratio: int
    budget: int

    def tensors(self, prefix: str, layer: int | None) -> list[Tensor]:
        p = f"{prefix}.{self.name}.indexer"
        d = self.index_head_dim
        return [
            *super().tensors(prefix, layer),
            *linear(
                f"{p}.index_qk_proj",
                "attention",
                (self.index_heads + self.index_kv_heads) * d,
                self.hidden,
                layer,
                detail="indexer",
            ),
            *norm(f"{p}.q_layernorm", d, layer, part="attention", detail="attention_norms"),
            *norm(f"{p}.k_layernorm", d, layer, part="attention", detail="attention_norms"),
        ]

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "indexer_head_dim": self.index_head_dim,
            "indexer_compress_ratio": self.compress_ratio,
            "indexer_budget": self.budget,
        }


@dataclass(frozen=True, kw_only=True)
class PerLayerEmbedding(Mixer):
    """PLE: hashed n-gram embeddings (one table of `rows` × `head_dim` per layer, saved in shards) projected to
    one key per stream and a shared value, and a depthwise conv (dilated by ngram_size) over all streams; its
    conv state is one more per-request state, kept whole on every rank."""

    hidden: int
    hc: int
    embed_dim: int
    head_dim: int
    rows: int
    shards: int
    conv_kernel: int
    dilation: int
    name: str = "ple"

    @property
    def kind(self) -> MixerKind:
        return "short_conv"

    def shard_rows(self) -> list[int]:
        """torch.chunk's split of the table into the saved shards: equal ceil-sized chunks, a shorter last one."""
        size = -(-self.rows // self.shards)
        full, rest = divmod(self.rows, size)
        return [size] * full + ([rest] if rest else [])

    def tensors(self, prefix: str, layer: int | None) -> list[Tensor]:
        p = f"{prefix}.{self.name}"
        wide = self.hc * self.hidden
        e = f"{p}.ple_embedding.ngram_embedding"
        sizes = self.shard_rows()
        # the full-size shards as one tensor with copies (like a layer's experts), the shorter last one apart
        ts = [Tensor(f"{e}.shard.weight", "embedding", "embedding", (sizes[0], self.head_dim), sizes.count(sizes[0]),
                     layer, detail="ngram_embedding")]  # fmt: skip
        if sizes[-1] != sizes[0]:
            last = f"{e}.shard_{len(sizes) - 1}.weight"
            ts.append(
                Tensor(last, "embedding", "embedding", (sizes[-1], self.head_dim), 1, layer, detail="ngram_embedding")
            )
        ts += linear(f"{p}.key_proj", "other", wide, self.embed_dim, layer)  # one key per stream
        ts += linear(f"{p}.value_proj", "other", self.hidden, self.embed_dim, layer)  # one value for all streams
        for n in ("norm_key", "norm_query", "norm_conv"):
            ts += norm(f"{p}.{n}", wide, layer)
        ts += conv1d(f"{p}.conv1d", "other", wide, self.conv_kernel, layer, bias=False)
        return ts

    def state_shapes(self, tp: int = 1) -> dict[str, tuple[int, ...]]:
        # the last (kernel - 1) × dilation inputs of every stream channel; vLLM does not split it across ranks
        return {"conv": (self.hc * self.hidden, (self.conv_kernel - 1) * self.dilation)}

    def describe(self) -> dict[str, Any]:
        return {
            "ngram_rows": self.rows,
            "conv_kernel": self.conv_kernel,
            "dilation": self.dilation,
            "state_shapes": {k: list(v) for k, v in self.state_shapes().items()},
        }


def _is_prime(n: int) -> bool:
    """Deterministic Miller-Rabin for every n below 3.3e24."""
    if n < 2:
        return False
    small = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37)
    if n in small:
        return True
    if any(n % p == 0 for p in small):
        return False
    d, s = n - 1, 0
    while d % 2 == 0:
        d, s = d // 2, s + 1
    for a in small:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(s - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def primes_from(start: int, count: int) -> list[int]:
    """The first `count` primes ≥ start (transformers sizes n-gram head k of all PLE layers as the (k+1)-th)."""
    out: list[int] = []
    n = start
    while len(out) < count:
        if _is_prime(n):
            out.append(n)
        n += 1
    return out


def ple_mixers(c: Cfg, hidden: int, hc: int, num_layers: int, kinds: list[str]) -> dict[int, PerLayerEmbedding]:
    """The PLE module of each layer index listed (one-based) in ple_layer_ids."""
    ids: list[int] = sorted(set(c.int_list("ple_layer_ids") or []))
    if not ids:
        return {}
    for i in ids:
        if not 1 <= i <= num_layers or kinds[i - 1] != "linear_attention":
            raise c.error(f"layer {i} is not a linear-attention layer in 1..{num_layers}", "ple_layer_ids")
    embed_dim = c.opt_int("ple_embed_dim") or hidden
    heads = (c.int("ngram_size") - 1) * c.int("heads_per_ngram")  # hashed heads for the 2-grams .. n-grams
    if embed_dim % heads:
        raise c.error(f"{embed_dim} is not a multiple of the {heads} n-gram heads", "ple_embed_dim")
    sizes = primes_from(c.int("ngram_vocab_size_base"), len(ids) * heads)
    div = c.int("make_ngram_vocab_size_divisible_by")
    out = {}
    for k, i in enumerate(ids):
        total = sum(sizes[k * heads : (k + 1) * heads])
        out[i - 1] = PerLayerEmbedding(
            hidden=hidden,
            hc=hc,
            embed_dim=embed_dim,
            head_dim=embed_dim // heads,
            rows=-(-total // div) * div,
            shards=c.int("split_ngram_parts"),
            conv_kernel=c.int("ple_conv_kernel_size"),
            dilation=c.int("ngram_size"),
        )
    return out


def attention_mixer(c: Cfg, hidden: int) -> Attention:
    """QSA attention when indexer_n_heads is set (transformers then needs every indexer field), else the plain
    gated attention vLLM serves."""
    base = gated_attention(c, hidden)
    if c.get("indexer_n_heads") is None:
        return base
    return QSAttention(
        **{f.name: getattr(base, f.name) for f in dataclasses.fields(base)},
        index_heads=c.int("indexer_n_heads"),
        index_kv_heads=c.int("indexer_kv_heads"),
        index_head_dim=c.int("indexer_head_dim"),
        compress_ratio=c.int("indexer_compress_ratio"),
        budget=c.int("indexer_budget"),
    )


def read(c: Cfg, meta: Meta) -> Model:
    towers: tuple[Tower, ...] = ()
    base = "model"
    if meta.model_type == "qwen4_exp":
        top = c
        c, meta = text_config(top, meta, "qwen4_exp_text", DEFAULTS["qwen4_exp_text"])
        towers = (vision(top, VISION_DEFAULTS, deepstack=False),)
        is_tied = wrapper_tied(top, c)
        base = "model.language_model"
    else:
        is_tied = tied(c, meta)
    vocab, hidden = c.int("vocab_size"), c.int("hidden_size")
    num_layers = c.int("num_hidden_layers")
    hc, rank = c.int("hc_count"), c.int("hc_lowrank")
    if hc < 2:
        raise c.error("Qwen4-Exp needs at least 2 hyper-connection streams", "hc_count")
    kinds = hybrid_kinds(c, num_layers, full="indexed_attention", names=LAYER_NAMES)
    attn = attention_mixer(c, hidden)
    gdn = gated_delta_net(c, hidden, split_proj=True)
    moe = sparse_moe(c, hidden)
    ple = ple_mixers(c, hidden, hc, num_layers, kinds)
    hcs = layer_hyper_connections(hidden, hc, rank)
    layers = []
    for i in range(num_layers):
        mixers: tuple[Mixer, ...] = (gdn,) if kinds[i] == "linear_attention" else (attn,)
        if i in ple:
            mixers += (ple[i],)
        layers.append(Layer(prefix=f"{base}.layers.{i}", mixers=mixers, mlps=(moe,), extra=hcs))
    # The final hyper-connection mixer collapses the streams for the head; there is no final norm.
    final = hyper_connection(f"{base}.hyper_connection_mixer", hidden, hc, rank, inject=False)
    embeddings, head = embed_head(vocab, hidden, is_tied, embed=f"{base}.embed_tokens", final_norm=None)
    return build(
        c,
        meta,
        vocab=vocab,
        hidden=hidden,
        layers=layers,
        is_tied=is_tied,
        embeddings=embeddings,
        head=head,
        extra=final,
        rotary_dim=rotary_dim(c, attn.head_dim, default=1.0),
        towers=towers,
        mtp_layers=mtp(c, hidden, hc, rank, attn, moe),
    )


def mtp(c: Cfg, hidden: int, hc: int, rank: int, attn: Attention, moe: MLP) -> tuple[Layer, ...]:
    """vLLM's Qwen4-Exp MTP block: fc_embedding on the normed token embedding, fc_hidden (shared by the streams)
    on the normed multi-stream hidden state, attention + MoE layers with their hyper-connections, and a final
    hyper-connection mixer (a checkpoint's block_inject_weight there is skipped)."""
    block = (
        *linear("mtp.fc_embedding", "other", hidden, hidden, None),
        *linear("mtp.fc_hidden", "other", hidden, hidden, None),
        *norm("mtp.pre_fc_norm_embedding", hidden, None),
        *norm("mtp.pre_fc_norm_hidden", hc * hidden, None),  # over all streams
        *hyper_connection("mtp.hyper_connection_mixer", hidden, hc, rank, inject=False),
    )
    return mtp_block(c, attn, lambda j: moe, block, extra=layer_hyper_connections(hidden, hc, rank))
