"""OLMo Hybrid: three Gated DeltaNet layers to one full-attention layer (every 4th), OLMo 2's attention layer
(full-width q/k RMSNorm, norms after the attention and the MLP) and a pre-norm linear-attention layer.

Its Gated DeltaNet keeps every projection separate (q, k, v, the output gate g, and a and b per v head) and
stores the conv over q, k and v as three convs without bias; released checkpoints run without RoPE
(rope_parameters unset).
"""

from __future__ import annotations

from typing import Any

from launcher.common.records import dataclass
from launcher.model.arch.common import Meta, build, embed_head, heads, layer_types, tied
from launcher.model.arch.config import Cfg
from launcher.model.arch.layers import Attention, DenseMLP, GatedDeltaNet, Layer, Mixer, norms
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import Tensor, conv1d, linear, norm, param

MODEL_TYPES = ("olmo_hybrid",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "olmo_hybrid": dict(vocab_size=100352, hidden_size=3840, intermediate_size=11008, num_hidden_layers=32,
                        num_attention_heads=30, num_key_value_heads=None, tie_word_embeddings=False,
                        attention_bias=False, max_position_embeddings=65536, linear_num_key_heads=None,
                        linear_num_value_heads=None, linear_key_head_dim=None, linear_value_head_dim=None,
                        linear_conv_kernel_dim=4, rope_parameters=None),
}  # fmt: skip

KINDS = {"linear_attention": "linear_attention", "full_attention": "full_attention"}


@dataclass(frozen=True, kw_only=True)
class OlmoGatedDeltaNet(GatedDeltaNet):
    """Gated DeltaNet with separate q/k/v/a/b/g projections, o_proj out and o_norm over head_v_dim."""

    def tensors(self, prefix: str, layer: int | None) -> list[Tensor]:
        p = f"{prefix}.{self.name}"
        h, kd, vd, nv = self.hidden, self.key_dim, self.value_dim, self.num_v_heads
        return [
            *linear(f"{p}.q_proj", "mixer", kd, h, layer),
            *linear(f"{p}.k_proj", "mixer", kd, h, layer),
            *linear(f"{p}.v_proj", "mixer", vd, h, layer),
            *linear(f"{p}.a_proj", "mixer", nv, h, layer),  # the decay input, per v head
            *linear(f"{p}.b_proj", "mixer", nv, h, layer),  # beta, per v head
            *linear(f"{p}.g_proj", "mixer", vd, h, layer),  # the output gate
            *linear(f"{p}.o_proj", "mixer", h, vd, layer),
            # depthwise convs over q, k and v, stored apart (vLLM concatenates them into one conv1d)
            *conv1d(f"{p}.q_conv1d", "mixer", kd, self.conv_kernel, layer, bias=self.conv_bias),
            *conv1d(f"{p}.k_conv1d", "mixer", kd, self.conv_kernel, layer, bias=self.conv_bias),
            *conv1d(f"{p}.v_conv1d", "mixer", vd, self.conv_kernel, layer, bias=self.conv_bias),
            # the decay's log, kept in float32 in the checkpoint
            Tensor(f"{p}.A_log", "mixer", "state", (nv,), 1, layer, stored_bytes=4),
            *param(f"{p}.dt_bias", "mixer", (nv,), layer),
            *norm(f"{p}.o_norm", self.head_v_dim, layer, part="mixer", detail="mixer_norms"),
        ]


def read(c: Cfg, meta: Meta) -> Model:
    vocab, hidden, inter = c.int("vocab_size"), c.int("hidden_size"), c.int("intermediate_size")
    num_layers = c.int("num_hidden_layers")
    n, kv, d = heads(c)
    # Default map: linear attention, with full attention on every 4th layer (the last one when there is none).
    kinds = layer_types(c, num_layers, lambda i: "full_attention" if i % 4 == 3 else "linear_attention", names=KINDS)
    if not c.has("layer_types") and "full_attention" not in kinds:
        kinds[-1] = "full_attention"
    if "linear_attention" not in kinds or "full_attention" not in kinds:
        raise c.error("needs at least one linear_attention and one full_attention layer", "layer_types")
    k_heads = c.opt_int("linear_num_key_heads") or n
    v_heads = c.opt_int("linear_num_value_heads") or n
    # transformers' fallbacks: key heads 3/4 of hidden split over the key heads, value heads twice as wide
    k_dim = c.opt_int("linear_key_head_dim") or int(0.75 * hidden / k_heads)
    v_dim = c.opt_int("linear_value_head_dim") or 2 * k_dim
    gdn = OlmoGatedDeltaNet(hidden=hidden, num_k_heads=k_heads, num_v_heads=v_heads, head_k_dim=k_dim,
                            head_v_dim=v_dim, conv_kernel=c.int("linear_conv_kernel_dim"))  # fmt: skip
    bias = c.bool("attention_bias")
    attn = Attention(hidden=hidden, heads=n, kv_heads=kv, head_dim=d, qkv_bias=bias, o_bias=bias, qk_norm="full")
    mlp = DenseMLP(hidden=hidden, inter=inter)
    layers = []
    for i in range(num_layers):
        mixer: Mixer = gdn if kinds[i] == "linear_attention" else attn
        # attention layers normalise the outputs of attention and MLP (OLMo 2); linear layers their inputs
        names = (
            ("input_layernorm", "post_attention_layernorm")
            if mixer is gdn
            else ("post_attention_layernorm", "post_feedforward_layernorm")
        )
        layers.append(Layer(prefix=f"model.layers.{i}", norms=norms(hidden, *names), mixers=(mixer,), mlps=(mlp,)))
    is_tied = tied(c, meta)
    embeddings, head = embed_head(vocab, hidden, is_tied)
    rope = c.get("rope_parameters")
    rotary = d if isinstance(rope, dict) and rope.get("rope_theta") is not None else 0
    return build(c, meta, vocab=vocab, hidden=hidden, layers=layers, is_tied=is_tied, embeddings=embeddings,
                 head=head, rotary_dim=rotary)  # fmt: skip
