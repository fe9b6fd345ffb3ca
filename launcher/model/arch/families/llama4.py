"""Llama 4 (Scout, Maverick): three chunked-local attention layers (RoPE, L2-normed q/k, attention inside
`attention_chunk_size`-token chunks) to one global NoPE layer; a MoE of sigmoid-routed experts plus an
always-on shared expert on the layers in `moe_layers` (every layer for Scout, every other for Maverick), a
wider dense MLP elsewhere. The 16-bit checkpoints store each layer's experts fused, as 3-D
`experts.gate_up_proj` and `experts.down_proj`; quantized ones hold them per expert, as priced here (the
same elements). The multimodal wrapper (model_type llama4) adds a ViT with a learned class token and
positions, a pixel-shuffle MLP adapter and a bias-free projector; its language model lives under
`language_model.`.

vLLM makes only RoPE layers chunked (`no_rope_layers[i] == 1`) and gives them full attention when
`attention_chunk_size` is unset. With its hybrid KV cache manager (on by default in vLLM 0.32) a chunked
layer keeps at most `attention_chunk_size` plus the in-flight tokens of KV per request; where the manager is
off (EAGLE speculative decoding, VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=0,
--disable-hybrid-kv-cache-manager) the chunked layers are promoted to full attention for the whole context.
"""

from __future__ import annotations

from typing import Any

from launcher.common.records import dataclass
from launcher.model.arch.common import Meta, attention, decoder, heads, layer_types, text_config
from launcher.model.arch.config import Cfg
from launcher.model.arch.layers import DenseMLP, MoE, shared_experts
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import Tensor, linear, norm, param
from launcher.model.arch.towers import Tower

MODEL_TYPES = ("llama4_text", "llama4")

# transformers' Llama4TextConfig defaults (Llama-4-Scout-17B-16E), for the fields read here.
TEXT_DEFAULTS: dict[str, Any] = dict(
    vocab_size=202048, hidden_size=5120, intermediate_size=8192, intermediate_size_mlp=16384, num_hidden_layers=48,
    num_attention_heads=40, num_key_value_heads=8, head_dim=128, tie_word_embeddings=False, attention_bias=False,
    num_experts_per_tok=1, num_local_experts=16, moe_layers=None, interleave_moe_layer_step=1, no_rope_layers=None,
    no_rope_layer_interval=4, attention_chunk_size=8192, layer_types=None, max_position_embeddings=131072,
)  # fmt: skip
DEFAULTS: dict[str, dict[str, Any]] = {"llama4_text": TEXT_DEFAULTS, "llama4": dict(tie_word_embeddings=False)}

VISION_DEFAULTS: dict[str, Any] = dict(
    hidden_size=768, intermediate_size=5632, num_hidden_layers=34, num_channels=3, image_size=448, patch_size=14,
    vision_output_dim=7680, projector_input_dim=4096, projector_output_dim=4096,
)  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class Llama4Vision(Tower):
    """Llama 4's ViT (unfolded-patch linear, class token, learned positions, LayerNorm layers with biased
    attention and GELU MLP), its pixel-shuffle adapter MLP, and the projector into the text width."""

    hidden: int
    intermediate: int
    num_layers: int
    patch_size: int
    image_size: int
    num_channels: int
    adapter_in: int  # projector_input_dim
    adapter_out: int  # projector_output_dim
    output_dim: int  # vision_output_dim: what multi_modal_projector reads
    projector_out: int  # the text hidden size
    prefix: str = "vision_model"

    @property
    def patches_per_item(self) -> int:
        return (self.image_size // self.patch_size) ** 2 + 1  # every patch of one tile, plus the class token

    def tensors(self) -> list[Tensor]:
        hv, iv, p = self.hidden, self.intermediate, self.prefix
        # Patches are unfolded (channels × patch × patch values each) and projected by a plain linear.
        ts = linear(f"{p}.patch_embedding.linear", "vision", hv, self.num_channels * self.patch_size**2, None)
        ts += param(f"{p}.class_embedding", "vision", (hv,), None, role="position")
        ts += param(f"{p}.positional_embedding_vlm", "vision", (self.patches_per_item, hv), None, role="position")
        ts += norm(f"{p}.layernorm_pre", hv, None, part="vision", bias=True)
        ts += norm(f"{p}.layernorm_post", hv, None, part="vision", bias=True)
        for i in range(self.num_layers):
            q = f"{p}.model.layers.{i}"
            for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
                ts += linear(f"{q}.self_attn.{proj}", "vision", hv, hv, None, bias=True)
            ts += linear(f"{q}.mlp.fc1", "vision", iv, hv, None, bias=True)
            ts += linear(f"{q}.mlp.fc2", "vision", hv, iv, None, bias=True)
            ts += norm(f"{q}.input_layernorm", hv, None, part="vision", bias=True)
            ts += norm(f"{q}.post_attention_layernorm", hv, None, part="vision", bias=True)
        # The adapter's first linear reads `intermediate_size` features (what transformers sizes it by).
        ts += linear(f"{p}.vision_adapter.mlp.fc1", "vision", self.adapter_in, iv, None)
        ts += linear(f"{p}.vision_adapter.mlp.fc2", "vision", self.adapter_out, self.adapter_out, None)
        ts += linear("multi_modal_projector.linear_1", "vision", self.projector_out, self.output_dim, None)
        return ts


def read(c: Cfg, meta: Meta) -> Model:
    base = ""
    towers: list[Tower] = []
    if meta.model_type == "llama4":
        top = c
        c, meta = text_config(top, meta, "llama4_text", TEXT_DEFAULTS)
        base = "language_model."  # Llama4ForConditionalGeneration holds a whole Llama4ForCausalLM
        v = top.sub("vision_config", VISION_DEFAULTS)
        towers.append(
            Llama4Vision(
                hidden=v.int("hidden_size"), intermediate=v.int("intermediate_size"),
                num_layers=v.int("num_hidden_layers"), patch_size=v.int("patch_size"), image_size=v.int("image_size"),
                num_channels=v.int("num_channels"), adapter_in=v.int("projector_input_dim"),
                adapter_out=v.int("projector_output_dim"), output_dim=v.int("vision_output_dim"),
                projector_out=c.int("hidden_size"),
            )
        )  # fmt: skip
    hidden = c.int("hidden_size")
    n, kv, d = heads(c)
    num_layers = c.int("num_hidden_layers")
    interval = c.int("no_rope_layer_interval")
    # 1 = a RoPE layer; by default every `interval`-th layer is NoPE.
    rope = c.int_list("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(num_layers)]
    if len(rope) < num_layers:
        raise c.error(f"has {len(rope)} entries for {num_layers} layers", "no_rope_layers")
    kinds = layer_types(c, num_layers, lambda i: "chunked_attention" if rope[i] else "full_attention")
    chunk = c.opt_int("attention_chunk_size")
    if chunk is None:  # no chunk size: vLLM gives the chunked layers full attention
        kinds = ["full_attention" for _ in kinds]
    step = c.int("interleave_moe_layer_step")
    moe_layers = c.int_list("moe_layers")
    sparse = set(moe_layers if moe_layers is not None else range(step - 1, num_layers, step))
    inter = c.int("intermediate_size")
    moe = MoE(
        hidden=hidden, num_experts=c.int("num_local_experts"), experts_per_token=c.int("num_experts_per_tok"),
        expert_intermediate=inter, router_name="router", shared=shared_experts(hidden, inter, name="shared_expert"),
        name="feed_forward",
    )  # fmt: skip
    dense = DenseMLP(hidden=hidden, inter=c.int("intermediate_size_mlp"), name="feed_forward",
                     detail="dense_first" if len(sparse) < num_layers else "dense")  # fmt: skip
    bias = c.bool("attention_bias")
    attn = {k: attention(k, chunk=chunk, c=c, hidden=hidden, heads=n, kv_heads=kv, head_dim=d, qkv_bias=bias,
                         o_bias=bias) for k in set(kinds)}  # fmt: skip
    return decoder(c, meta, parts=lambda i: (attn[kinds[i]], moe if i in sparse else dense), rotary_dim=d,
                   prefix=f"{base}model.layers", embed=f"{base}model.embed_tokens", final_norm=f"{base}model.norm",
                   head=f"{base}lm_head", towers=tuple(towers))  # fmt: skip
