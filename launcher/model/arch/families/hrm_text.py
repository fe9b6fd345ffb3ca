"""HRM-Text (hierarchical reasoning model): two stacks of `num_layers_per_stack` decoder layers, a fast L stack
and a slow H stack, run recurrently: for each of H_cycles the L stack runs L_cycles times, then the H stack once.

Every invocation of a layer is a separate attention call with its own KV cache (transformers' `cycle_offset`,
vLLM's per-step attention layers), so the cache holds per_stack × H_cycles × (L_cycles + 1) full-attention slots
(128 for the default 16 layers per stack), while the weights exist once per stack. vlaunch models each KV slot as
a layer, in transformers' slot order (step × per_stack + layer, step = h × (L_cycles + 1) + l, the H stack at
l = L_cycles); the first step of each stack holds that stack's weights and the later steps are weightless slots.
Attention is MHA with a sigmoid output gate, stored fused as `attn.gqkv_proj` ([gate | q | k | v]), and the MLP as
`mlp.gate_up_proj`; norms carry no weights.
"""

from __future__ import annotations

from typing import Any

from launcher.common.records import dataclass
from launcher.model.arch.common import Meta, build, embed_head, tied
from launcher.model.arch.config import MAX_LAYERS, Cfg
from launcher.model.arch.layers import Attention, DenseMLP, Layer
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import Tensor, param

MODEL_TYPES = ("hrm_text",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "hrm_text": dict(vocab_size=151808, hidden_size=1536, intermediate_size=4096, num_hidden_layers=16,
                     num_attention_heads=12, head_dim=128, H_cycles=2, L_cycles=3, max_position_embeddings=2048,
                     tie_word_embeddings=False, attention_bias=False, mlp_bias=False, num_layers_per_stack=None),
}  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class CycleSlotAttention(Attention):
    """One invocation of a stack layer's attention: its own KV cache; the weights only where `holds_weights`
    (the stack's first invocation), so they count once."""

    holds_weights: bool = True

    def tensors(self, prefix: str, layer: int | None) -> list[Tensor]:
        return super().tensors(prefix, layer) if self.holds_weights else []


def read(c: Cfg, meta: Meta) -> Model:
    vocab, hidden, inter = c.int("vocab_size"), c.int("hidden_size"), c.int("intermediate_size")
    # A saved config keeps the real per-stack count in num_layers_per_stack and num_hidden_layers = slots.
    per_stack = c.int("num_layers_per_stack") if c.has("num_layers_per_stack") else c.int("num_hidden_layers")
    h_cycles, l_cycles = c.int("H_cycles"), c.int("L_cycles")
    slots = per_stack * h_cycles * (l_cycles + 1)
    if slots > MAX_LAYERS:
        raise c.error(f"{per_stack} layers × {h_cycles} × ({l_cycles} + 1) = {slots} KV slots, beyond any real model",
                      "H_cycles")  # fmt: skip
    heads = c.int("num_attention_heads")
    head_dim = c.opt_int("head_dim") or hidden // heads
    if head_dim <= 0:
        raise c.error("hidden_size // num_attention_heads is 0", "head_dim")
    bias = c.bool("attention_bias")
    is_tied = tied(c, meta)

    def attention(holds_weights: bool) -> CycleSlotAttention:
        # MHA (as many KV heads as heads); the fused projection also emits the sigmoid gate (output_gate).
        return CycleSlotAttention(hidden=hidden, heads=heads, kv_heads=heads, head_dim=head_dim, qkv_bias=bias,
                                  o_bias=bias, output_gate=True, fused_qkv="gqkv_proj", name="attn",
                                  holds_weights=holds_weights)  # fmt: skip

    mlp = DenseMLP(hidden=hidden, inter=inter, bias=c.bool("mlp_bias"), fused_gate_up="gate_up_proj")
    layers: list[Layer] = []
    for step in range(h_cycles * (l_cycles + 1)):
        # Steps h·(L+1) + l run the L stack (l < L_cycles), h·(L+1) + L_cycles the H stack.
        stack = "H_module" if step % (l_cycles + 1) == l_cycles else "L_module"
        first = step == (l_cycles if stack == "H_module" else 0)
        for j in range(per_stack):
            layers.append(Layer(prefix=f"model.{stack}.layers.{j}", mixers=(attention(first),),
                                mlps=(mlp,) if first else ()))  # fmt: skip
    embeddings, head = embed_head(vocab, hidden, is_tied, final_norm=None)
    # z_L_init: the L stack's initial state, a frozen parameter transformers counts.
    z_init = param("model.z_L_init", "other", (hidden,), None)
    return build(c, meta, vocab=vocab, hidden=hidden, layers=layers, is_tied=is_tied, embeddings=embeddings,
                 head=head, rotary_dim=head_dim, extra=tuple(z_init))  # fmt: skip
