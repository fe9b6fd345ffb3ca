"""Granite 4.0 (GraniteMoeHybrid): each layer is a Mamba2 mixer or attention (per `layer_types`), then a MoE
and a shared SwiGLU MLP side by side (the MoE is left out when num_local_experts is 0: the dense "micro" models).

Checkpoints keep GraniteMoe's fused expert layout: `block_sparse_moe.input_linear.weight` is one
(experts, 2 x intermediate, hidden) tensor holding every expert's gate and up, `output_linear.weight` one
(experts, hidden, intermediate) tensor, and the router is `router.layer`. Attention uses no RoPE unless
`position_embedding_type` is "rope" (the released models say "nope").
"""

from __future__ import annotations

from typing import Any

from launcher.common.records import dataclass
from launcher.model.arch.common import Meta, build, embed_head, layer_types, tied
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.llama import llama_attention
from launcher.model.arch.families.mamba2 import mamba2_mixer
from launcher.model.arch.layers import MLP, DenseMLP, Layer, Mixer, MoE, norms
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import Tensor, linear

MODEL_TYPES = ("granitemoehybrid",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "granitemoehybrid": dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                             num_attention_heads=32, num_key_value_heads=None, tie_word_embeddings=False,
                             max_position_embeddings=2048, attention_bias=False, num_local_experts=8,
                             num_experts_per_tok=2, shared_intermediate_size=1024, position_embedding_type=None,
                             layer_types=None, mamba_n_heads=128, mamba_n_groups=1, mamba_d_state=256,
                             mamba_d_head="auto", mamba_d_conv=4, mamba_expand=2, mamba_conv_bias=True,
                             mamba_proj_bias=False),
}  # fmt: skip

ATTRIBUTE_MAP: dict[str, dict[str, str]] = {"granitemoehybrid": {"layers_block_type": "layer_types"}}

# layer_types names (and the older mamba / attention ones transformers still accepts)
KINDS = {"linear_attention": "mamba", "mamba": "mamba", "full_attention": "attention", "attention": "attention"}


@dataclass(frozen=True, kw_only=True)
class FusedExpertsMoE(MoE):
    """A MoE whose experts are stored fused, one 3-D tensor per projection for all experts of the layer
    (GraniteMoe's input_linear / output_linear); `layer_shared` is the width of the shared MLP that runs
    beside it in the same layer (for the per-token MLP width)."""

    layer_shared: int = 0

    @property
    def shared_intermediate(self) -> int:
        return self.layer_shared

    def tensors(self, prefix: str, layer: int | None) -> list[Tensor]:
        p = f"{prefix}.{self.name}"
        h, e, i = self.hidden, self.num_experts, self.expert_intermediate
        router = linear(f"{p}.{self.router_name}", "experts", e, h, layer, gguf="ffn_gate_inp", detail="router",
                        role="router")  # fmt: skip
        # input_linear: gate and up of every expert (2 * intermediate rows each); output_linear: every down.
        fused = (("input_linear", (e, 2 * i, h), "ffn_up_exps"), ("output_linear", (e, h, i), "ffn_down_exps"))
        return router + [
            Tensor(f"{p}.{name}.weight", "experts", "expert", shape, layer=layer, gguf=gguf, detail="routed_experts")
            for name, shape, gguf in fused
        ]


def read(c: Cfg, meta: Meta) -> Model:
    vocab, hidden = c.int("vocab_size"), c.int("hidden_size")
    num_layers = c.int("num_hidden_layers")
    kinds = layer_types(c, num_layers, lambda i: "mamba", names=KINDS)
    # Mamba: d_inner = mamba_expand * hidden, split into mamba_n_heads heads ("auto": evenly).
    d_inner = c.int("mamba_expand") * hidden
    m_heads = c.int("mamba_n_heads")
    m_head_dim = d_inner // m_heads if c.get("mamba_d_head") == "auto" else c.int("mamba_d_head")
    if m_heads * m_head_dim != d_inner:
        raise c.error(f"mamba_n_heads * mamba_d_head must equal mamba_expand * hidden_size ({d_inner})",
                      "mamba_d_head")  # fmt: skip
    mamba = mamba2_mixer(c, hidden, heads=m_heads, head_dim=m_head_dim, d_state="mamba_d_state",
                         n_groups="mamba_n_groups", conv_kernel="mamba_d_conv", conv_bias="mamba_conv_bias",
                         proj_bias="mamba_proj_bias", name="mamba")  # fmt: skip
    attn = llama_attention(c, hidden)
    shared_inter = c.int("shared_intermediate_size")
    # The shared MLP: one input_linear for gate and up (2 * shared_intermediate), then output_linear.
    shared = DenseMLP(hidden=hidden, inter=shared_inter, fused_gate_up="input_linear",
                      names=("input_linear", "input_linear", "output_linear"), name="shared_mlp")  # fmt: skip
    mlps: tuple[MLP, ...] = (shared,)
    if c.int0("num_local_experts") > 0:
        moe = FusedExpertsMoE(hidden=hidden, num_experts=c.int("num_local_experts"),
                              experts_per_token=c.int("num_experts_per_tok"),
                              expert_intermediate=c.int("intermediate_size"), router_name="router.layer",
                              name="block_sparse_moe", layer_shared=shared_inter)  # fmt: skip
        mlps = (moe, shared)
    layers = []
    for i in range(num_layers):
        mixer: Mixer = mamba if kinds[i] == "mamba" else attn
        layers.append(Layer(prefix=f"model.layers.{i}", norms=norms(hidden, "input_layernorm",
                            "post_attention_layernorm"), mixers=(mixer,), mlps=mlps))  # fmt: skip
    is_tied = tied(c, meta)
    embeddings, head = embed_head(vocab, hidden, is_tied)
    rope = c.str("position_embedding_type") == "rope"
    return build(c, meta, vocab=vocab, hidden=hidden, layers=layers, is_tied=is_tied, embeddings=embeddings,
                 head=head, rotary_dim=attn.head_dim if rope else 0)  # fmt: skip
