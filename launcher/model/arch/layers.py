"""The parts a decoder layer is made of: token mixers (attention and its relatives, state-space and
linear-attention mixers) and MLPs (dense, mixture of experts).

Each part is one frozen class that knows its own weight tensors (`tensors`) and what it keeps per request
(`cache`: KV bytes per token for attention, a fixed state for recurrent mixers). Families build models out of
these parts; nothing here branches on a model_type. Pure arithmetic, no I/O.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from typing import Any, Literal

from launcher.common.records import dataclass
from launcher.model.arch.tensors import Part, Tensor, conv1d, linear, norm, param

MixerKind = Literal[
    "full_attention",  # softmax attention over the whole context
    "sliding_attention",  # softmax attention over the last `window` tokens
    "chunked_attention",  # attention within fixed chunks of `chunk` tokens (Llama 4's local layers)
    "mla",  # multi-head latent attention: one compressed latent per token (DeepSeek)
    "linear_attention",  # Gated DeltaNet and other linear attention: a fixed recurrent state per request
    "mamba",  # Mamba (selective SSM): conv state + SSM state per request
    "mamba2",  # Mamba2 (SSD): conv state + per-head SSM state per request
    "short_conv",  # gated short convolution (LFM2): a conv state per request
    "kv_shared",  # attention that reads another layer's KV cache and stores none of its own (Gemma 3n)
    "compressed_attention",  # attention over a compressed KV (DeepSeek-V4 CSA/HCA)
]


_CODES: dict[str, str] = {
    "full_attention": "F", "sliding_attention": "S", "chunked_attention": "C", "mla": "A", "linear_attention": "G",
    "mamba": "m", "mamba2": "M", "short_conv": "V", "kv_shared": "f", "compressed_attention": "X",
}  # fmt: skip


def place(extra: tuple[Tensor, ...], prefix: str, layer: int | None) -> list[Tensor]:
    """Family-specific tensors given with names relative to a module: made absolute, tagged with the layer."""
    return [dataclasses.replace(t, name=f"{prefix}.{t.name}", layer=layer) for t in extra]


def kv_heads_per_rank(total_kv_heads: int, tp: int) -> int:
    """KV heads one tensor-parallel rank holds: split when tp divides them, replicated when tp > heads."""
    return max(1, total_kv_heads // tp)


# ============================================================================================ token mixers


class Mixer(ABC):
    """A token mixer. Subclasses are frozen dataclasses with at least `name` (module name in the layer)."""

    name: str

    @property
    @abstractmethod
    def kind(self) -> MixerKind: ...

    @property
    def code(self) -> str:
        """One letter for layer maps: F full, S sliding, C chunked, A MLA, I MLA with an indexer, G Gated
        DeltaNet, m Mamba, M Mamba2, V short conv, X compressed; lower case f/s/c: reads another layer's KV."""
        return _CODES[self.kind]

    @abstractmethod
    def tensors(self, prefix: str, layer: int | None) -> list[Tensor]: ...

    def kv_elements_per_token(self, tp: int = 1) -> int:
        """Elements this layer stores per token of context on one rank (0 for state mixers and shared KV)."""
        return 0

    def state_shapes(self, tp: int = 1) -> dict[str, tuple[int, ...]]:
        """Per-request state tensors (conv, ssm/recurrent) on one rank; empty for attention."""
        return {}

    def describe(self) -> dict[str, Any]:
        """The geometry `count --json` reports for this kind of layer."""
        return {}


@dataclass(frozen=True, kw_only=True)
class Attention(Mixer):
    """Softmax attention over the whole context: q/k/v/o projections, K and V cached per KV head."""

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    v_head_dim: int | None = None  # when V heads are narrower or wider than K heads
    qkv_bias: bool = False
    o_bias: bool = False
    qk_norm: Literal["none", "head", "full"] = "none"  # RMSNorm on q and k: per head_dim, or the full width
    qk_norm_bias: bool = False
    sinks: bool = False  # gpt-oss: one learned logit per head
    output_gate: bool = False  # Qwen3-Next: q_proj also emits a sigmoid gate per channel (twice as wide)
    fused_qkv: str | None = None  # one projection for q, k and v (Phi-3 "qkv_proj", GPT-NeoX "query_key_value")
    names: tuple[str, str, str, str] = ("q_proj", "k_proj", "v_proj", "o_proj")
    name: str = "self_attn"
    shares_kv_with: int | None = None  # reads this layer's KV cache and keeps none (Gemma 3n)
    causal: bool = True  # False: bidirectional (an encoder's: BERT), vLLM's EncoderOnlyAttention caches nothing
    part: Part = "attention"
    extra: tuple[Tensor, ...] = ()

    @property
    def attention_kind(self) -> MixerKind:
        return "full_attention"

    @property
    def kind(self) -> MixerKind:
        return "kv_shared" if self.shares_kv_with is not None else self.attention_kind

    @property
    def code(self) -> str:
        letter = _CODES[self.attention_kind]
        return letter.lower() if self.shares_kv_with is not None else letter

    @property
    def v_dim(self) -> int:
        return self.v_head_dim if self.v_head_dim is not None else self.head_dim

    def tensors(self, prefix: str, layer: int | None) -> list[Tensor]:
        p = f"{prefix}.{self.name}"
        h, n, k, d = self.hidden, self.heads, self.kv_heads, self.head_dim
        q_out = n * d * (2 if self.output_gate else 1)
        qn, kn, vn, on = self.names
        part, b = self.part, self.qkv_bias
        ts: list[Tensor] = []
        if self.fused_qkv:
            ts += linear(f"{p}.{self.fused_qkv}", part, q_out + k * d + k * self.v_dim, h, layer, bias=b,
                         gguf="attn_qkv")  # fmt: skip
        else:
            ts += linear(f"{p}.{qn}", part, q_out, h, layer, bias=b, gguf="attn_q")
            ts += linear(f"{p}.{kn}", part, k * d, h, layer, bias=b, gguf="attn_k")  # GQA: only KV heads
            ts += linear(f"{p}.{vn}", part, k * self.v_dim, h, layer, bias=b, gguf="attn_v")
        ts += linear(f"{p}.{on}", part, h, n * self.v_dim, layer, bias=self.o_bias, gguf="attn_output")
        if self.qk_norm != "none":
            # Per-head norm: one head_dim vector shared by all heads; full: one over the whole projection.
            qs, ks = (d, d) if self.qk_norm == "head" else (n * d, k * d)
            ts += norm(f"{p}.q_norm", qs, layer, part=part, bias=self.qk_norm_bias, gguf="attn_q_norm",
                       detail="attention_norms")  # fmt: skip
            ts += norm(f"{p}.k_norm", ks, layer, part=part, bias=self.qk_norm_bias, gguf="attn_k_norm",
                       detail="attention_norms")  # fmt: skip
        if self.sinks:
            ts += param(f"{p}.sinks", part, (n,), layer, role="sink", gguf="attn_sinks", detail="sinks")
        return ts + place(self.extra, p, layer)

    def side_cache_bytes_per_token(self) -> int:
        """Bytes per token the layer caches beside its K and V, whatever the KV cache dtype and the same on every
        rank (MiniMax-M3's sparse layers: their indexer's keys); 0 for plain attention."""
        return 0

    def kv_elements_per_token(self, tp: int = 1) -> int:
        if self.shares_kv_with is not None:
            return 0
        # A key and a value vector per KV head; queries are never stored.
        return kv_heads_per_rank(self.kv_heads, tp) * (self.head_dim + self.v_dim)

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kv_heads": self.kv_heads, "head_dim": self.head_dim}
        if self.v_head_dim is not None and self.v_head_dim != self.head_dim:
            out["v_head_dim"] = self.v_head_dim
        if self.shares_kv_with is not None:
            out["shares_kv_with"] = self.shares_kv_with
        if not self.causal:
            out["bidirectional"] = True
        return out


@dataclass(frozen=True, kw_only=True)
class SlidingWindowAttention(Attention):
    """Attention over the last `window` tokens: the cache of one request stops growing at the window."""

    window: int

    @property
    def attention_kind(self) -> MixerKind:
        return "sliding_attention"

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "window": self.window}


@dataclass(frozen=True, kw_only=True)
class ChunkedLocalAttention(Attention):
    """Attention inside fixed chunks of `chunk` tokens (Llama 4's local layers)."""

    chunk: int

    @property
    def attention_kind(self) -> MixerKind:
        return "chunked_attention"

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "chunk": self.chunk}


@dataclass(frozen=True, kw_only=True)
class Indexer:
    """DeepSeek V3.2's lightning indexer (sparse attention): its own key cache of index_head_dim per token."""

    hidden: int
    q_lora_rank: int
    heads: int
    head_dim: int
    topk: int
    name: str = "indexer"
    k_norm_bias: bool = True

    def tensors(self, prefix: str, layer: int | None) -> list[Tensor]:
        p = f"{prefix}.{self.name}"
        return [
            *linear(f"{p}.wq_b", "attention", self.heads * self.head_dim, self.q_lora_rank, layer, detail="indexer"),
            *linear(f"{p}.wk", "attention", self.head_dim, self.hidden, layer, detail="indexer"),
            *norm(
                f"{p}.k_norm", self.head_dim, layer, part="attention", bias=self.k_norm_bias, detail="attention_norms"
            ),
            *linear(f"{p}.weights_proj", "attention", self.heads, self.hidden, layer, detail="indexer"),
        ]


@dataclass(frozen=True, kw_only=True)
class MLAttention(Mixer):
    """Multi-head latent attention: queries (optionally low-rank), one shared KV latent plus a rope key.

    The cache holds kv_lora_rank + qk_rope_head_dim elements per token per layer, the same on every rank.
    """

    hidden: int
    heads: int
    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    qkv_bias: bool = False  # bias on the down projections (q_a, kv_a)
    o_bias: bool = False
    indexer: Indexer | None = None
    name: str = "self_attn"
    extra: tuple[Tensor, ...] = ()

    @property
    def kind(self) -> MixerKind:
        return "mla"

    @property
    def code(self) -> str:
        return "I" if self.indexer is not None else "A"

    def tensors(self, prefix: str, layer: int | None) -> list[Tensor]:
        p = f"{prefix}.{self.name}"
        h, n = self.hidden, self.heads
        qk_head = self.qk_nope_head_dim + self.qk_rope_head_dim
        ts: list[Tensor] = []
        if self.q_lora_rank is None:
            ts += linear(f"{p}.q_proj", "attention", n * qk_head, h, layer, gguf="attn_q")
        else:
            # Low-rank query: down to q_lora_rank, normalised, up to every head.
            r = self.q_lora_rank
            ts += linear(f"{p}.q_a_proj", "attention", r, h, layer, bias=self.qkv_bias, gguf="attn_q_a",
                         detail="mla_low_rank")  # fmt: skip
            ts += norm(f"{p}.q_a_layernorm", r, layer, part="attention", gguf="attn_q_a_norm",
                       detail="attention_norms")  # fmt: skip
            ts += linear(f"{p}.q_b_proj", "attention", n * qk_head, r, layer, gguf="attn_q_b", detail="mla_low_rank")
        # One shared latent (kv_lora_rank) plus the decoupled rope key, then expanded per head to k_nope and v.
        ts += linear(f"{p}.kv_a_proj_with_mqa", "attention", self.kv_lora_rank + self.qk_rope_head_dim, h, layer,
                     bias=self.qkv_bias, gguf="attn_kv_a_mqa", detail="mla_low_rank")  # fmt: skip
        ts += norm(f"{p}.kv_a_layernorm", self.kv_lora_rank, layer, part="attention", gguf="attn_kv_a_norm",
                   detail="attention_norms")  # fmt: skip
        ts += linear(f"{p}.kv_b_proj", "attention", n * (self.qk_nope_head_dim + self.v_head_dim), self.kv_lora_rank,
                     layer, gguf="attn_kv_b", detail="mla_low_rank")  # fmt: skip
        ts += linear(f"{p}.o_proj", "attention", h, n * self.v_head_dim, layer, bias=self.o_bias, gguf="attn_output")
        if self.indexer is not None:
            ts += self.indexer.tensors(p, layer)
        return ts + place(self.extra, p, layer)

    def kv_elements_per_token(self, tp: int = 1) -> int:
        # One latent of kv_lora_rank plus the shared rope key, replicated on every rank: no ×2, no head split.
        return self.kv_lora_rank + self.qk_rope_head_dim

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kv_lora_rank": self.kv_lora_rank, "qk_rope_head_dim": self.qk_rope_head_dim}
        if self.indexer is not None:
            out["indexer_head_dim"] = self.indexer.head_dim
            out["indexer_topk"] = self.indexer.topk
        return out


# DeepSeek-V4's attention types (config layer_types; compress_ratios 0 / 4 / 128)
CSA, HCA, SWA = "compressed_sparse_attention", "heavily_compressed_attention", "sliding_attention"


@dataclass(frozen=True, kw_only=True)
class CompressedAttention(Mixer):
    """DeepSeek-V4 attention: low-rank queries over `heads` heads of head_dim, one shared K=V vector per token
    (single KV head), a grouped low-rank output projection, a sink logit per head, and, unless compress_rate is 0,
    a compressor that pools every `compress_rate` tokens into one KV entry (CSA also an indexer over its own
    compressed keys).

    Cache, per request: the last `window` K=V vectors (fixed), plus head_dim (+ index_head_dim for CSA) elements
    per `compress_rate` tokens of context; the compressor keeps a partial window of fp32 kv and gate state."""

    hidden: int
    heads: int
    head_dim: int
    q_lora_rank: int
    o_groups: int
    o_lora_rank: int
    window: int
    compress_rate: int  # 0: sliding window only
    overlap: bool = False  # CSA: two overlapping series per window, so the compressor projects 2 × head_dim
    index_heads: int = 0  # CSA's lightning indexer; 0 without one
    index_head_dim: int = 0
    index_topk: int = 0
    name: str = "attn"
    extra: tuple[Tensor, ...] = ()

    @property
    def kind(self) -> MixerKind:
        return "compressed_attention"

    @property
    def layer_type(self) -> str:
        return SWA if not self.compress_rate else CSA if self.index_heads else HCA

    def _compressor(self, p: str, dim: int, layer: int | None) -> list[Tensor]:
        """kv and gate projections (two series when overlapping), a learned bias per position in the window
        (`ape`) and an RMSNorm over the pooled entry."""
        width = dim * (2 if self.overlap else 1)
        return [
            *linear(f"{p}.wkv", "attention", width, self.hidden, layer, detail="compressor"),
            *linear(f"{p}.wgate", "attention", width, self.hidden, layer, detail="compressor"),
            *param(f"{p}.ape", "attention", (self.compress_rate, width), layer, detail="compressor"),
            *norm(f"{p}.norm", dim, layer, part="attention", detail="attention_norms"),
        ]

    def tensors(self, prefix: str, layer: int | None) -> list[Tensor]:
        p = f"{prefix}.{self.name}"
        h, n, d, r = self.hidden, self.heads, self.head_dim, self.q_lora_rank
        ts = [
            *linear(f"{p}.wq_a", "attention", r, h, layer, gguf="attn_q_a", detail="mla_low_rank"),
            *norm(f"{p}.q_norm", r, layer, part="attention", detail="attention_norms"),
            *linear(f"{p}.wq_b", "attention", n * d, r, layer, gguf="attn_q_b", detail="mla_low_rank"),
            # One vector per token serves as both key and value (a single KV head).
            *linear(f"{p}.wkv", "attention", d, h, layer, gguf="attn_kv"),
            *norm(f"{p}.norm", d, layer, part="attention", detail="attention_norms"),
            # Grouped output: each of o_groups slices of n·d/o_groups goes to o_lora_rank, then all to hidden.
            *linear(f"{p}.wo_a", "attention", self.o_groups * self.o_lora_rank, n * d // self.o_groups, layer),
            *linear(f"{p}.wo_b", "attention", h, self.o_groups * self.o_lora_rank, layer, gguf="attn_output"),
            *param(f"{p}.attn_sink", "attention", (n,), layer, role="sink", gguf="attn_sinks", detail="sinks"),
        ]
        if self.compress_rate:
            ts += self._compressor(f"{p}.compressor", d, layer)
        if self.index_heads:
            q = f"{p}.indexer"
            ts += linear(f"{q}.wq_b", "attention", self.index_heads * self.index_head_dim, r, layer, detail="indexer")
            ts += linear(f"{q}.weights_proj", "attention", self.index_heads, h, layer, detail="indexer")
            ts += self._compressor(f"{q}.compressor", self.index_head_dim, layer)
        return ts + place(self.extra, p, layer)

    def kv_elements_per_token(self, tp: int = 1) -> int:
        """The compressed KV's growth per token of context (rounded up): head_dim, plus the indexer's key for
        CSA, every compress_rate tokens; replicated on every rank. The window part is fixed (state_shapes)."""
        if not self.compress_rate:
            return 0
        return -(-(self.head_dim + self.index_head_dim) // self.compress_rate)

    def _compressor_state(self, dim: int) -> tuple[int, int]:
        # The unfinished window(s) of source tokens, each with its kv and its gate logits (2 × dim per series);
        # CSA's overlapping series keep two windows of two series. vLLM holds them in fp32.
        series = 2 if self.overlap else 1
        return series * self.compress_rate, series * 2 * dim

    def state_shapes(self, tp: int = 1) -> dict[str, tuple[int, ...]]:
        # Fixed per request: the window of K=V vectors and the compressors' partial windows.
        out: dict[str, tuple[int, ...]] = {"window_kv": (self.window, self.head_dim)}
        if self.compress_rate:
            out["compressor"] = self._compressor_state(self.head_dim)
        if self.index_heads:
            out["indexer_compressor"] = self._compressor_state(self.index_head_dim)
        return out

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"layer_type": self.layer_type, "head_dim": self.head_dim, "window": self.window,
                               "compress_rate": self.compress_rate}  # fmt: skip
        if self.index_heads:
            out["indexer_head_dim"] = self.index_head_dim
            out["indexer_topk"] = self.index_topk
        out["state_shapes"] = {k: list(v) for k, v in self.state_shapes().items()}
        return out


@dataclass(frozen=True, kw_only=True)
class GatedDeltaNet(Mixer):
    """Gated DeltaNet linear attention (Qwen3-Next, Qwen3.5): a conv state and a recurrent state per request.

    Projections: q and k (num_k_heads × head_k_dim each), v and the output gate z (num_v_heads × head_v_dim
    each), and per v head a beta and a decay input; a depthwise conv over q, k and v; A_log and dt_bias per v
    head; a gated RMSNorm over head_v_dim; out_proj back to hidden.
    """

    hidden: int
    num_k_heads: int
    num_v_heads: int
    head_k_dim: int
    head_v_dim: int
    conv_kernel: int
    split_proj: bool = False  # Qwen3.5 names in_proj_qkv / in_proj_z / in_proj_b / in_proj_a separately
    conv_bias: bool = False
    name: str = "linear_attn"
    extra: tuple[Tensor, ...] = ()

    @property
    def kind(self) -> MixerKind:
        return "linear_attention"

    @property
    def key_dim(self) -> int:
        return self.num_k_heads * self.head_k_dim

    @property
    def value_dim(self) -> int:
        return self.num_v_heads * self.head_v_dim

    @property
    def conv_dim(self) -> int:
        return 2 * self.key_dim + self.value_dim  # the conv runs over q, k and v

    def tensors(self, prefix: str, layer: int | None) -> list[Tensor]:
        p = f"{prefix}.{self.name}"
        h, kd, vd, nv = self.hidden, self.key_dim, self.value_dim, self.num_v_heads
        ts: list[Tensor] = []
        if self.split_proj:
            ts += linear(f"{p}.in_proj_qkv", "mixer", 2 * kd + vd, h, layer)
            ts += linear(f"{p}.in_proj_z", "mixer", vd, h, layer)
            ts += linear(f"{p}.in_proj_b", "mixer", nv, h, layer)
            ts += linear(f"{p}.in_proj_a", "mixer", nv, h, layer)
        else:
            ts += linear(f"{p}.in_proj_qkvz", "mixer", 2 * kd + 2 * vd, h, layer)  # q, k, v and the gate z
            ts += linear(f"{p}.in_proj_ba", "mixer", 2 * nv, h, layer)  # beta and the decay input, per v head
        ts += conv1d(f"{p}.conv1d", "mixer", self.conv_dim, self.conv_kernel, layer, bias=self.conv_bias)
        ts += param(f"{p}.dt_bias", "mixer", (nv,), layer)
        ts += param(f"{p}.A_log", "mixer", (nv,), layer)
        ts += norm(f"{p}.norm", self.head_v_dim, layer, part="mixer", detail="mixer_norms")
        ts += linear(f"{p}.out_proj", "mixer", h, vd, layer)
        return ts + place(self.extra, p, layer)

    def state_shapes(self, tp: int = 1) -> dict[str, tuple[int, ...]]:
        # conv: the last kernel-1 inputs of q, k, v; recurrent: a head_k_dim × head_v_dim matrix per v head.
        return {
            "conv": (self.conv_dim // tp, self.conv_kernel - 1),
            "recurrent": (self.num_v_heads // tp, self.head_k_dim, self.head_v_dim),
        }

    def describe(self) -> dict[str, Any]:
        return {
            "num_k_heads": self.num_k_heads, "num_v_heads": self.num_v_heads, "head_k_dim": self.head_k_dim,
            "head_v_dim": self.head_v_dim, "conv_kernel": self.conv_kernel,
            "state_shapes": {k: list(v) for k, v in self.state_shapes().items()},
        }  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class Mamba(Mixer):
    """Mamba (v1) selective SSM: a conv state (d_inner × kernel-1) and an SSM state (d_inner × d_state)."""

    hidden: int
    d_inner: int
    d_state: int
    conv_kernel: int
    dt_rank: int
    conv_bias: bool = True
    proj_bias: bool = False
    name: str = "mixer"
    extra: tuple[Tensor, ...] = ()

    @property
    def kind(self) -> MixerKind:
        return "mamba"

    def tensors(self, prefix: str, layer: int | None) -> list[Tensor]:
        p = f"{prefix}.{self.name}"
        h, di, ds, r = self.hidden, self.d_inner, self.d_state, self.dt_rank
        return [
            *linear(f"{p}.in_proj", "mixer", 2 * di, h, layer, bias=self.proj_bias),  # x and the gate
            *conv1d(f"{p}.conv1d", "mixer", di, self.conv_kernel, layer, bias=self.conv_bias),
            *linear(f"{p}.x_proj", "mixer", r + 2 * ds, di, layer),  # dt (low rank), B and C
            *linear(f"{p}.dt_proj", "mixer", di, r, layer, bias=True),
            *param(f"{p}.A_log", "mixer", (di, ds), layer),
            *param(f"{p}.D", "mixer", (di,), layer),
            *linear(f"{p}.out_proj", "mixer", h, di, layer, bias=self.proj_bias),
            *place(self.extra, p, layer),
        ]

    def state_shapes(self, tp: int = 1) -> dict[str, tuple[int, ...]]:
        return {"conv": (self.d_inner // tp, self.conv_kernel - 1), "ssm": (self.d_inner // tp, self.d_state)}

    def describe(self) -> dict[str, Any]:
        return {
            "d_inner": self.d_inner, "d_state": self.d_state, "conv_kernel": self.conv_kernel,
            "state_shapes": {k: list(v) for k, v in self.state_shapes().items()},
        }  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class Mamba2(Mixer):
    """Mamba2 (SSD): conv state over x, B and C; an SSM state of head_dim × d_state per head."""

    hidden: int
    heads: int
    head_dim: int
    d_state: int
    n_groups: int
    conv_kernel: int
    conv_bias: bool = True
    proj_bias: bool = False
    out_bias: bool | None = None  # None: same as proj_bias
    gated_norm: bool = True  # an RMSNorm over d_inner before out_proj (norm_before_gate)
    name: str = "mixer"
    extra: tuple[Tensor, ...] = ()

    @property
    def kind(self) -> MixerKind:
        return "mamba2"

    @property
    def d_inner(self) -> int:
        return self.heads * self.head_dim

    @property
    def conv_dim(self) -> int:
        return self.d_inner + 2 * self.n_groups * self.d_state  # x, B and C go through the conv

    def tensors(self, prefix: str, layer: int | None) -> list[Tensor]:
        p = f"{prefix}.{self.name}"
        h, di, nh = self.hidden, self.d_inner, self.heads
        out_bias = self.proj_bias if self.out_bias is None else self.out_bias
        ts = [
            # the gate z, then x, B, C (the conv's input), then dt per head
            *linear(f"{p}.in_proj", "mixer", di + self.conv_dim + nh, h, layer, bias=self.proj_bias),
            *conv1d(f"{p}.conv1d", "mixer", self.conv_dim, self.conv_kernel, layer, bias=self.conv_bias),
            *param(f"{p}.dt_bias", "mixer", (nh,), layer),
            *param(f"{p}.A_log", "mixer", (nh,), layer),
            *param(f"{p}.D", "mixer", (nh,), layer),
        ]
        if self.gated_norm:
            ts += norm(f"{p}.norm", di, layer, part="mixer", detail="mixer_norms")
        ts += linear(f"{p}.out_proj", "mixer", h, di, layer, bias=out_bias)
        return ts + place(self.extra, p, layer)

    def state_shapes(self, tp: int = 1) -> dict[str, tuple[int, ...]]:
        return {
            "conv": (self.conv_dim // tp, self.conv_kernel - 1),
            "ssm": (self.heads // tp, self.head_dim, self.d_state),
        }

    def describe(self) -> dict[str, Any]:
        return {
            "heads": self.heads, "head_dim": self.head_dim, "d_state": self.d_state, "n_groups": self.n_groups,
            "conv_kernel": self.conv_kernel, "state_shapes": {k: list(v) for k, v in self.state_shapes().items()},
        }  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class ShortConv(Mixer):
    """Gated short convolution (LFM2): in_proj to B, C and x, a depthwise conv of L_cache taps, out_proj."""

    hidden: int
    conv_kernel: int  # L_cache
    bias: bool = False
    name: str = "conv"
    extra: tuple[Tensor, ...] = ()

    @property
    def kind(self) -> MixerKind:
        return "short_conv"

    def tensors(self, prefix: str, layer: int | None) -> list[Tensor]:
        p = f"{prefix}.{self.name}"
        h = self.hidden
        return [
            *linear(f"{p}.in_proj", "mixer", 3 * h, h, layer, bias=self.bias),
            *conv1d(f"{p}.conv", "mixer", h, self.conv_kernel, layer, bias=self.bias),
            *linear(f"{p}.out_proj", "mixer", h, h, layer, bias=self.bias),
            *place(self.extra, p, layer),
        ]

    def state_shapes(self, tp: int = 1) -> dict[str, tuple[int, ...]]:
        return {"conv": (self.hidden // tp, self.conv_kernel - 1)}

    def describe(self) -> dict[str, Any]:
        return {"conv_kernel": self.conv_kernel, "state_shapes": {k: list(v) for k, v in self.state_shapes().items()}}


# ================================================================================================= MLPs


class MLP(ABC):
    """A feed-forward block. Subclasses are frozen dataclasses with `name`."""

    name: str

    @property
    def is_moe(self) -> bool:
        return False

    @abstractmethod
    def tensors(self, prefix: str, layer: int | None) -> list[Tensor]: ...

    @abstractmethod
    def active_intermediate(self) -> int:
        """MLP width one token passes through (experts per token × expert width + shared experts, for MoE)."""


@dataclass(frozen=True, kw_only=True)
class DenseMLP(MLP):
    """A dense feed-forward block: gated (SwiGLU: gate and up, then down) or plain (up, then down)."""

    hidden: int
    inter: int
    gated: bool = True
    bias: bool = False
    down_bias: bool | None = None  # None: same as `bias`
    fused_gate_up: str | None = None  # one projection for gate and up (Phi-3 "gate_up_proj")
    names: tuple[str, str, str] = ("gate_proj", "up_proj", "down_proj")
    name: str = "mlp"
    part: Part = "mlp"
    detail: str = "dense"
    gguf_suffix: str = ""
    extra: tuple[Tensor, ...] = ()

    def tensors(self, prefix: str, layer: int | None) -> list[Tensor]:
        p = f"{prefix}.{self.name}" if self.name else prefix
        h, i, part, d, sfx = self.hidden, self.inter, self.part, self.detail, self.gguf_suffix
        gate, up, down = self.names
        down_bias = self.bias if self.down_bias is None else self.down_bias
        ts: list[Tensor] = []
        if self.gated and self.fused_gate_up:
            ts += linear(f"{p}.{self.fused_gate_up}", part, 2 * i, h, layer, bias=self.bias, gguf="ffn_up" + sfx,
                         detail=d)  # fmt: skip
        elif self.gated:
            ts += linear(f"{p}.{gate}", part, i, h, layer, bias=self.bias, gguf="ffn_gate" + sfx, detail=d)
            ts += linear(f"{p}.{up}", part, i, h, layer, bias=self.bias, gguf="ffn_up" + sfx, detail=d)
        else:
            ts += linear(f"{p}.{up}", part, i, h, layer, bias=self.bias, gguf="ffn_up" + sfx, detail=d)
        ts += linear(f"{p}.{down}", part, h, i, layer, bias=down_bias, gguf="ffn_down" + sfx, detail=d)
        return ts + place(self.extra, p, layer)

    def active_intermediate(self) -> int:
        return self.inter


@dataclass(frozen=True, kw_only=True)
class MoE(MLP):
    """Mixture of experts: a router, `num_experts` routed experts (top-k per token), optional shared experts."""

    hidden: int
    num_experts: int
    experts_per_token: int
    expert_intermediate: int
    gated: bool = True
    expert_bias: bool = False
    router_bias: bool = False
    router_name: str = "gate"
    experts_name: str = "experts"
    expert_names: tuple[str, str, str] = ("gate_proj", "up_proj", "down_proj")
    shared: DenseMLP | None = None
    shared_gate: bool = False  # Qwen2-MoE: a 1-wide sigmoid gate on the shared expert
    shared_gate_name: str = "shared_expert_gate"
    router_bytes: int = 0  # bytes per router weight in the checkpoint when it keeps the router in float32 (4)
    score_bias: bool = False  # DeepSeek-V3-style routers: an e_score_correction_bias buffer per expert
    score_bias_bytes: int = 0  # its bytes per element in the checkpoint (4: F32); 0: the checkpoint's dtype
    name: str = "mlp"
    extra: tuple[Tensor, ...] = ()

    @property
    def is_moe(self) -> bool:
        return True

    @property
    def shared_intermediate(self) -> int:
        return self.shared.inter if self.shared is not None else 0

    def tensors(self, prefix: str, layer: int | None) -> list[Tensor]:
        p = f"{prefix}.{self.name}"
        h, e, i = self.hidden, self.num_experts, self.expert_intermediate
        gate, up, down = self.expert_names
        x = f"{p}.{self.experts_name}"
        ts = linear(f"{p}.{self.router_name}", "experts", e, h, layer, bias=self.router_bias, gguf="ffn_gate_inp",
                    detail="router", role="router")  # fmt: skip
        if self.router_bytes:
            ts = [dataclasses.replace(t, stored_bytes=self.router_bytes) for t in ts]
        if self.score_bias:
            # Added to the router's scores to balance the experts; a buffer, saved but not a parameter.
            ts.append(Tensor(f"{p}.{self.router_name}.e_score_correction_bias", "experts", "buffer", (e,), 1, layer,
                             "exp_probs_b", "router", self.score_bias_bytes))  # fmt: skip
        if self.gated:
            ts += linear(f"{x}.{gate}", "experts", i, h, layer, bias=self.expert_bias, gguf="ffn_gate_exps",
                         detail="routed_experts", copies=e, role="expert")  # fmt: skip
        ts += linear(f"{x}.{up}", "experts", i, h, layer, bias=self.expert_bias, gguf="ffn_up_exps",
                     detail="routed_experts", copies=e, role="expert")  # fmt: skip
        ts += linear(f"{x}.{down}", "experts", h, i, layer, bias=self.expert_bias, gguf="ffn_down_exps",
                     detail="routed_experts", copies=e, role="expert")  # fmt: skip
        if self.shared is not None:
            ts += self.shared.tensors(p, layer)
            if self.shared_gate:
                ts += linear(f"{p}.{self.shared_gate_name}", "experts", 1, h, layer, gguf="ffn_gate_inp_shexp",
                             detail="shared_experts", role="router")  # fmt: skip
        return ts + place(self.extra, p, layer)

    def active_intermediate(self) -> int:
        return self.experts_per_token * self.expert_intermediate + self.shared_intermediate


def shared_experts(hidden: int, inter: int, *, name: str = "shared_experts", **kw: Any) -> DenseMLP:
    """The always-on experts of a MoE layer, priced as a dense MLP in the experts part."""
    return DenseMLP(hidden=hidden, inter=inter, name=name, part="experts", detail="shared_experts",
                    gguf_suffix="_shexp", **kw)  # fmt: skip


# ================================================================================================ layers


@dataclass(frozen=True, kw_only=True)
class Norm:
    """A norm over the residual stream of a layer (input_layernorm, post_attention_layernorm…)."""

    name: str
    size: int
    bias: bool = False
    weight: bool = True
    gguf: str | None = None

    def tensors(self, prefix: str, layer: int | None) -> list[Tensor]:
        return norm(f"{prefix}.{self.name}", self.size, layer, bias=self.bias, gguf=self.gguf, weight=self.weight)


def norms(hidden: int, *names: str, bias: bool = False) -> tuple[Norm, ...]:
    """Layer norms of the hidden size by name; the first is the attention's, the others the MLP's for GGUF."""
    return tuple(
        Norm(name=n, size=hidden, bias=bias, gguf="attn_norm" if i == 0 else "ffn_norm") for i, n in enumerate(names)
    )


@dataclass(frozen=True, kw_only=True)
class Layer:
    """One decoder layer: its token mixers (usually one), its MLPs (usually one) and its norms."""

    prefix: str  # "model.layers.3"
    mixers: tuple[Mixer, ...]
    mlps: tuple[MLP, ...] = ()
    norms: tuple[Norm, ...] = ()
    extra: tuple[Tensor, ...] = ()

    @property
    def kind(self) -> MixerKind | Literal["none"]:
        """The layer's cache kind: its first mixer's (hybrid layers list all in `kinds`)."""
        return self.mixers[0].kind if self.mixers else "none"

    @property
    def kinds(self) -> tuple[MixerKind, ...]:
        return tuple(m.kind for m in self.mixers)

    @property
    def code(self) -> str:
        """The layer in a layer map: its mixers' letters, or E for a layer without a token mixer."""
        return "".join(m.code for m in self.mixers) or "E"

    def tensors(self, index: int | None) -> list[Tensor]:
        ts: list[Tensor] = []
        for n in self.norms:
            ts += n.tensors(self.prefix, index)
        for m in self.mixers:
            ts += m.tensors(self.prefix, index)
        for f in self.mlps:
            ts += f.tensors(self.prefix, index)
        return ts + place(self.extra, self.prefix, index)
