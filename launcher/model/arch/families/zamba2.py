"""Zamba2: Mamba2 layers, some of them "hybrid" (per `layers_block_type`): before its Mamba2 mixer a hybrid layer
runs a shared transformer block (attention over the concatenated hidden state and input embedding, hence
2 x hidden wide, then a SwiGLU MLP) and its own `linear` projection.

The shared blocks exist `num_mem_blocks` times: hybrid layer k uses block k % num_mem_blocks, and the
checkpoint stores a block's weights once, under the first hybrid layer that uses it
(`model.layers.N.shared_transformer.*`). What is per hybrid layer: its KV cache (each hybrid layer attends
with its own cache), its `linear`, its Mamba2 mixer and norm (`mamba_decoder.*`), and its LoRA adapters, which
the checkpoint keeps inside the block at slot k (`gate_up_proj_adapter_list.k`, and the q/k/v adapter lists when
`use_shared_attention_adapter`).

transformers shares the blocks through its weight-tying mapping, which it applies only when
tie_word_embeddings is set (every released Zamba2 sets it): an untied config gets one block per hybrid layer,
each holding the adapter slots of every hybrid layer of its block id. vLLM shares them either way.
"""

from __future__ import annotations

from typing import Any

from launcher.common.records import dataclass
from launcher.model.arch.common import Meta, build, embed_head, tied
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.mamba2 import Mamba2Mixer
from launcher.model.arch.layers import Attention, DenseMLP, Layer, Mixer, Norm
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import Tensor, linear

MODEL_TYPES = ("zamba2",)

# transformers' default layout (54 layers), which it uses whatever num_hidden_layers says.
DEFAULT_BLOCKS = (["linear_attention"] + (["linear_attention"] * 5 + ["hybrid"]) * 7 + ["linear_attention"] * 4
                  + ["hybrid"] + ["linear_attention"] * 3 + ["hybrid"] + ["linear_attention"] * 2)  # fmt: skip

DEFAULTS: dict[str, dict[str, Any]] = {
    "zamba2": dict(vocab_size=32000, max_position_embeddings=4096, hidden_size=2560, layers_block_type=None,
                   mamba_d_state=64, mamba_d_conv=4, mamba_expand=2, mamba_ngroups=1, n_mamba_heads=8,
                   add_bias_linear=False, intermediate_size=None, num_attention_heads=32, num_key_value_heads=None,
                   num_mem_blocks=1, use_shared_attention_adapter=False, adapter_rank=128, use_mem_rope=False,
                   tie_word_embeddings=True),
}  # fmt: skip

ATTRIBUTE_MAP: dict[str, dict[str, str]] = {"zamba2": {"layer_types": "layers_block_type"}}

KINDS = {"linear_attention": "mamba", "mamba": "mamba", "hybrid": "hybrid"}


def adapter(path: str, part: Any, out_f: int, in_f: int, rank: int, layer: int | None) -> list[Tensor]:
    """A LoRA adapter (nn.Sequential of two bias-free linears): down to `rank`, back up to `out_f`."""
    return [*linear(f"{path}.0", part, rank, in_f, layer, detail="adapters"),
            *linear(f"{path}.1", part, out_f, rank, layer, detail="adapters")]  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class SharedBlockAttention(Attention):
    """The shared block's attention as one hybrid layer runs it: a KV cache of its own, the q/k/v/o weights only
    on the layer under which the checkpoint stores the block (`owner`), and the q/k/v adapters of `slots` in the
    block's lists (this layer's own) when the model has them. The input is 2 x hidden wide (`hidden`), the
    output `out` wide."""

    block: str  # where the checkpoint keeps the block: model.layers.N.shared_transformer
    owner: bool
    out: int
    slots: tuple[int, ...] = ()
    rank: int = 0

    def tensors(self, prefix: str, layer: int | None) -> list[Tensor]:
        p = f"{self.block}.{self.name}"
        h, n, k, d = self.hidden, self.heads, self.kv_heads, self.head_dim
        ts: list[Tensor] = []
        if self.owner:
            ts += linear(f"{p}.q_proj", "attention", n * d, h, layer, gguf="attn_q")
            ts += linear(f"{p}.k_proj", "attention", k * d, h, layer, gguf="attn_k")
            ts += linear(f"{p}.v_proj", "attention", k * d, h, layer, gguf="attn_v")
            ts += linear(f"{p}.o_proj", "attention", self.out, n * d, layer, gguf="attn_output")
        for slot in self.slots:
            for x in ("q", "k", "v"):  # each adds to its projection's output, the block's input width
                ts += adapter(f"{p}.linear_{x}_adapter_list.{slot}", "attention", h, h, self.rank, layer)
        return ts


@dataclass(frozen=True, kw_only=True)
class SharedBlockMLP(DenseMLP):
    """The shared block's SwiGLU MLP as one hybrid layer runs it: gate_up_proj and down_proj only on the owner,
    and the gate_up adapters of `slots` (every hybrid layer has one)."""

    block: str
    owner: bool
    slots: tuple[int, ...]
    rank: int

    def tensors(self, prefix: str, layer: int | None) -> list[Tensor]:
        p = f"{self.block}.{self.name}"
        h, i = self.hidden, self.inter
        ts: list[Tensor] = []
        if self.owner:
            ts += linear(f"{p}.gate_up_proj", "mlp", 2 * i, h, layer, bias=self.bias, gguf="ffn_up")  # gate and up
            ts += linear(f"{p}.down_proj", "mlp", h, i, layer, bias=self.bias, gguf="ffn_down")
        for slot in self.slots:
            ts += adapter(f"{p}.gate_up_proj_adapter_list.{slot}", "mlp", 2 * i, h, self.rank, layer)
        return ts


def block_types(c: Cfg) -> list[str]:
    raw = c.list("layers_block_type")
    names = raw if raw is not None else DEFAULT_BLOCKS
    if not names:
        raise c.error("lists no layers", "layers_block_type")
    out = []
    for i, t in enumerate(names):
        if t not in KINDS:
            raise c.error(
                f"unknown block type {t!r} at index {i}; known: linear_attention, hybrid", "layers_block_type"
            )
        out.append(KINDS[t])
    return out


def read(c: Cfg, meta: Meta) -> Model:
    vocab, hidden = c.int("vocab_size"), c.int("hidden_size")
    kinds = block_types(c)
    inter = c.opt_int("intermediate_size") or 4 * hidden  # None: 4 x hidden
    n = c.int("num_attention_heads")
    kv = c.opt_int("num_key_value_heads") or n
    c.heads_divide(n, kv)
    attn_in = 2 * hidden  # attention reads the hidden state concatenated with the input embedding
    d = attn_in // n
    # Mamba2: d_inner = mamba_expand * hidden over n_mamba_heads heads; the conv always has a bias here.
    d_inner = c.int("mamba_expand") * hidden
    m_heads = c.int("n_mamba_heads")
    if d_inner % m_heads:
        raise c.error(f"must divide mamba_expand * hidden_size ({d_inner})", "n_mamba_heads")
    bias = c.bool("add_bias_linear")

    def mamba(name: str) -> Mamba2Mixer:
        return Mamba2Mixer(hidden=hidden, heads=m_heads, head_dim=d_inner // m_heads, d_state=c.int("mamba_d_state"),
                           n_groups=c.int("mamba_ngroups"), conv_kernel=c.int("mamba_d_conv"), conv_bias=True,
                           proj_bias=bias, name=name)  # fmt: skip

    mem_blocks = c.int("num_mem_blocks")
    rank = c.int("adapter_rank")
    attn_adapters = c.bool("use_shared_attention_adapter")
    is_tied = tied(c, meta)
    hybrids = kinds.count("hybrid")
    owners: list[str] = []  # the checkpoint path of each shared block, in order of first use
    layers: list[Layer] = []
    k = 0  # hybrid layers so far
    for i, kind in enumerate(kinds):
        prefix = f"model.layers.{i}"
        if kind == "mamba":
            layers.append(Layer(prefix=prefix, norms=(Norm(name="input_layernorm", size=hidden, gguf="attn_norm"),),
                                mixers=(mamba("mamba"),)))  # fmt: skip
            continue
        # Shared (tied): the first num_mem_blocks hybrid layers own the blocks, later ones reuse them and
        # bring only their own adapter slot. Untied: every hybrid layer owns a block with all its id's slots.
        owner = k < mem_blocks or not is_tied
        if owner:
            owners.append(f"{prefix}.shared_transformer")
        block = owners[k % mem_blocks] if is_tied else owners[-1]
        slots = (k,) if is_tied else tuple(j for j in range(hybrids) if j % mem_blocks == k % mem_blocks)
        norms_ = [Norm(name="mamba_decoder.input_layernorm", size=hidden, gguf="attn_norm")]
        if owner:
            norms_ += [Norm(name="shared_transformer.input_layernorm", size=attn_in),
                       Norm(name="shared_transformer.pre_ff_layernorm", size=hidden)]  # fmt: skip
        attn = SharedBlockAttention(hidden=attn_in, heads=n, kv_heads=kv, head_dim=d, out=hidden, block=block,
                                    owner=owner, slots=slots if attn_adapters else (), rank=rank)  # fmt: skip
        mlp = SharedBlockMLP(hidden=hidden, inter=inter, bias=bias, name="feed_forward", block=block, owner=owner,
                             slots=slots, rank=rank)  # fmt: skip
        mixers: tuple[Mixer, ...] = (attn, mamba("mamba_decoder.mamba"))
        layers.append(Layer(prefix=prefix, norms=tuple(norms_), mixers=mixers, mlps=(mlp,),
                            extra=tuple(linear("linear", "other", hidden, hidden, None))))  # fmt: skip
        k += 1
    embeddings, head = embed_head(vocab, hidden, is_tied, final_norm="model.final_layernorm")
    return build(c, meta, vocab=vocab, hidden=hidden, layers=layers, is_tied=is_tied, embeddings=embeddings,
                 head=head, rotary_dim=d if c.bool("use_mem_rope") else 0)  # fmt: skip
