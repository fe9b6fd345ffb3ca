"""Granite MoE (granitemoe, granitemoe_swa, granitemoeshared): Granite's attention (the *_swa model's sinks and
sliding layers) with a MoE whose checkpoints stack the experts, one 3-D tensor for every expert's fused gate
and up and one for the down projections; `shared_intermediate_size` > 0 adds an always-on shared MLP (fused
input_linear, output_linear) beside the MoE."""

from __future__ import annotations

from typing import Any

from launcher.common.records import dataclass
from launcher.model.arch.common import Meta, decoder
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.granite import granite_attention
from launcher.model.arch.layers import MoE, shared_experts
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import Tensor, linear

MODEL_TYPES = ("granitemoe", "granitemoe_swa", "granitemoeshared")

_MOE = dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
            num_attention_heads=32, num_key_value_heads=None, tie_word_embeddings=False, attention_bias=False,
            num_local_experts=8, num_experts_per_tok=2, max_position_embeddings=2048)  # fmt: skip
DEFAULTS: dict[str, dict[str, Any]] = {
    "granitemoe": _MOE,
    "granitemoe_swa": dict(_MOE, shared_intermediate_size=0, sliding_window=128, layer_types=None),
    "granitemoeshared": dict(_MOE, shared_intermediate_size=0),
}  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class StackedMoE(MoE):
    """Granite's MoE block as checkpoints store it: the router and two stacked expert tensors, all experts in
    one tensor each (E × 2·inter × hidden for gate and up, E × hidden × inter for down). We keep them as E
    copies of one expert's matrix, which is what vLLM's fused-MoE layer (and a quantizer) works on per expert.
    `legacy`: granitemoe's names (router.layer, input_linear, output_linear); else the experts.* names that
    transformers writes for granitemoe_swa. The shared MLP is a sibling of the block (`shared_mlp`)."""

    legacy: bool = True
    name: str = "block_sparse_moe"

    def tensors(self, prefix: str, layer: int | None) -> list[Tensor]:
        p = f"{prefix}.{self.name}"
        h, e, i = self.hidden, self.num_experts, self.expert_intermediate
        router, gate_up, down = (
            ("router.layer", "input_linear.weight", "output_linear.weight") if self.legacy
            else ("router", "experts.gate_up_proj", "experts.down_proj")
        )  # fmt: skip
        ts = linear(f"{p}.{router}", "experts", e, h, layer, gguf="ffn_gate_inp", detail="router", role="router")
        # Gate and up of one expert in one matrix: 2 × inter rows.
        ts.append(Tensor(f"{p}.{gate_up}", "experts", "expert", (2 * i, h), e, layer, "ffn_up_exps",
                         "routed_experts"))  # fmt: skip
        ts.append(Tensor(f"{p}.{down}", "experts", "expert", (h, i), e, layer, "ffn_down_exps", "routed_experts"))
        if self.shared is not None:
            ts += self.shared.tensors(prefix, layer)
        return ts


def read(c: Cfg, meta: Meta) -> Model:
    hidden = c.int("hidden_size")
    attns = granite_attention(c, meta, c.int("num_hidden_layers"), hidden)
    # Plain granitemoe has no shared MLP (a shared_intermediate_size in its config is ignored).
    shared_inter = c.int0("shared_intermediate_size") if meta.model_type != "granitemoe" else 0
    shared = shared_experts(hidden, shared_inter, name="shared_mlp", fused_gate_up="input_linear",
                            names=("gate_proj", "up_proj", "output_linear")) if shared_inter else None  # fmt: skip
    moe = StackedMoE(
        hidden=hidden, num_experts=c.int("num_local_experts"), experts_per_token=c.int("num_experts_per_tok"),
        expert_intermediate=c.int("intermediate_size"), shared=shared, legacy=meta.model_type != "granitemoe_swa",
    )  # fmt: skip
    return decoder(c, meta, parts=lambda i: (attns[i], moe), rotary_dim=attns[0].head_dim)
