"""Nemotron-H (Nemotron-H 8B/47B, Nemotron Nano 9B v2, Nemotron 3 Nano/Super) and NemotronHPuzzle.

Each layer is one block under `backbone.layers.N.mixer`: a Mamba2 mixer (M), attention without positional
encoding (*), a non-gated relu^2 MLP (-) or a MoE (E), with a single pre-norm. The pattern comes from
`layers_block_type` (or the older `hybrid_override_pattern` string). The MoE routes with a sigmoid gate to
non-gated experts, adds an always-on shared MLP and, in latent MoE (Nemotron 3 Super), runs the routed experts
at `moe_latent_size` between two projections. Puzzle checkpoints vary blocks per layer through
`block_configs`; checkpoints with `num_nextn_predict_layers` carry MTP blocks under `mtp.layers.N`.
"""

from __future__ import annotations

from typing import Any

from launcher.common.records import dataclass
from launcher.model.arch.common import Meta, attention, heads
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.mamba import backbone
from launcher.model.arch.families.mamba2 import mamba2_mixer
from launcher.model.arch.layers import MLP, DenseMLP, Layer, Mixer, MoE, Norm, shared_experts
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import Tensor, linear

MODEL_TYPES = ("nemotron_h",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "nemotron_h": dict(vocab_size=131072, hidden_size=4096, layers_block_type=None,
                       num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=4096,
                       sliding_window=None, intermediate_size=21504, mlp_bias=False, ssm_state_size=128,
                       mamba_num_heads=128, mamba_head_dim=64, n_groups=8, conv_kernel=4, use_conv_bias=True,
                       use_bias=False, n_routed_experts=8, moe_intermediate_size=7688,
                       moe_shared_expert_intermediate_size=7688, moe_latent_size=None, num_experts_per_tok=2,
                       num_nextn_predict_layers=0, mtp_layers_block_type=None),
}  # fmt: skip

ATTRIBUTE_MAP: dict[str, dict[str, str]] = {
    "nemotron_h": {"layer_types": "layers_block_type", "num_local_experts": "n_routed_experts"},
}

# hybrid_override_pattern letters, and the older block names transformers still accepts.
PATTERN = {"M": "linear_attention", "E": "moe", "*": "full_attention", "-": "mlp"}
LEGACY = {"mamba": "linear_attention", "attention": "full_attention"}
KINDS = frozenset(PATTERN.values())
# Mamba fields transformers renamed; a config may use either name.
RENAMED = {"n_groups": "mamba_n_groups", "conv_kernel": "mamba_d_conv", "use_conv_bias": "mamba_conv_bias"}


@dataclass(frozen=True, kw_only=True)
class NemotronMoE(MoE):
    """Nemotron-H's MoE: router, non-gated experts (up, down), the shared MLP and, when `latent` is set,
    fc1/fc2 projections to and from the width the routed experts run at."""

    latent: int | None = None
    latent_bias: bool = False

    def tensors(self, prefix: str, layer: int | None) -> list[Tensor]:
        p = f"{prefix}.{self.name}"
        h, e, i = self.hidden, self.num_experts, self.expert_intermediate
        width = self.latent or h  # the experts' input and output width
        x = f"{p}.{self.experts_name}"
        ts = linear(f"{p}.{self.router_name}", "experts", e, h, layer, gguf="ffn_gate_inp", detail="router",
                    role="router")  # fmt: skip
        # The router's e_score_correction_bias: saved with the checkpoint, a buffer rather than a parameter.
        ts.append(Tensor(f"{p}.{self.router_name}.e_score_correction_bias", "experts", "buffer", (e,), 1, layer,
                         "exp_probs_b", "router"))  # fmt: skip
        ts += linear(f"{x}.up_proj", "experts", i, width, layer, gguf="ffn_up_exps", detail="routed_experts",
                     copies=e, role="expert")  # fmt: skip
        ts += linear(f"{x}.down_proj", "experts", width, i, layer, gguf="ffn_down_exps", detail="routed_experts",
                     copies=e, role="expert")  # fmt: skip
        if self.latent:
            ts += linear(f"{p}.fc1_latent_proj", "experts", self.latent, h, layer, bias=self.latent_bias,
                         detail="latent")  # fmt: skip
            ts += linear(f"{p}.fc2_latent_proj", "experts", h, self.latent, layer, bias=self.latent_bias,
                         detail="latent")  # fmt: skip
        if self.shared is not None:
            ts += self.shared.tensors(p, layer)
        return ts


def _key(c: Cfg, key: str) -> str:
    """The name this config stores a renamed Mamba field under."""
    old = RENAMED.get(key)
    return old if old is not None and c.has(old) else key


def block_types(c: Cfg, list_key: str, pattern_key: str, default: list[str]) -> list[str]:
    """Block types from the list field, else the pattern string, else transformers' default."""
    raw = c.list(list_key)
    if raw is None:
        pattern = c.str(pattern_key, None)
        if pattern is not None:
            bad = [ch for ch in pattern if ch not in PATTERN]
            if bad:
                raise c.error(f"unknown block letter {bad[0]!r}; known: M E * -", pattern_key)
            return [PATTERN[ch] for ch in pattern]
        raw = default
    out = [LEGACY.get(t, t) for t in raw]
    if not out:
        raise c.error("lists no layers", list_key if raw is not default else pattern_key)
    for i, t in enumerate(out):
        if t not in KINDS:
            raise c.error(f"unknown block type {t!r} at index {i}; known: {', '.join(sorted(KINDS))}", list_key)
    return out


def layer_cfg(c: Cfg, i: int) -> Cfg:
    """The config one layer is built from: Puzzle checkpoints override fields per layer in block_configs."""
    blocks = c.raw.get("block_configs")
    if not isinstance(blocks, list) or i >= len(blocks) or not isinstance(blocks[i], dict):
        return c
    return Cfg({**c.raw, **blocks[i]}, c.defaults, source=c.source, path=c.path, used=c.used, aliases=c.aliases)


def moe(c: Cfg, hidden: int, experts_key: str = "n_routed_experts") -> NemotronMoE:
    return NemotronMoE(
        hidden=hidden, num_experts=c.int(experts_key), experts_per_token=c.int("num_experts_per_tok"),
        expert_intermediate=c.int("moe_intermediate_size"), gated=False, latent=c.opt_int("moe_latent_size"),
        latent_bias=c.bool("mlp_bias"), name="mixer",
        # transformers always builds one shared MLP of moe_shared_expert_intermediate_size (n_shared_experts is
        # not read; vLLM drops it at 0 and widens it n_shared_experts times)
        shared=shared_experts(hidden, c.int("moe_shared_expert_intermediate_size"), gated=False,
                              bias=c.bool("mlp_bias")),
    )  # fmt: skip


def attn(c: Cfg, hidden: int) -> Mixer:
    n, kv, d = heads(c, hidden=hidden)
    # transformers ignores sliding_window; vLLM applies it (per layer in Puzzle checkpoints), so it decides.
    window = c.opt_int("sliding_window")
    return attention("sliding_attention" if window else "full_attention", window=window, c=c, hidden=hidden,
                     heads=n, kv_heads=kv, head_dim=d, name="mixer")  # fmt: skip


def mlp_width(c: Cfg, index: int) -> int:
    """The dense MLP width: one integer, or (vLLM) a list with one entry per MLP block."""
    widths = c.int_list("intermediate_size") if isinstance(c.get("intermediate_size"), list) else None
    if widths is None:
        return c.int("intermediate_size")
    if len(widths) == 1:
        return widths[0]
    if index >= len(widths):
        raise c.error(f"has {len(widths)} entries for MLP block {index}", "intermediate_size")
    return widths[index]


def read(c: Cfg, meta: Meta) -> Model:
    hidden = c.int("hidden_size")
    kinds = block_types(
        c, "layers_block_type", "hybrid_override_pattern", ["linear_attention", "moe", "full_attention", "mlp"]
    )
    mamba = mamba2_mixer(c, hidden, heads=c.int("mamba_num_heads"), head_dim=c.int("mamba_head_dim"),
                         d_state="ssm_state_size", n_groups=_key(c, "n_groups"),
                         conv_kernel=_key(c, "conv_kernel"), conv_bias=_key(c, "use_conv_bias"),
                         proj_bias="use_bias")  # fmt: skip
    blocks: list[tuple[tuple[Mixer, ...], tuple[MLP, ...]]] = []
    mlp_index = 0
    for i, kind in enumerate(kinds):
        lc = layer_cfg(c, i)
        if kind == "linear_attention":
            blocks.append(((mamba,), ()))
        elif kind == "full_attention":
            blocks.append(((attn(lc, hidden),), ()))
        elif kind == "mlp":
            blocks.append(((), (DenseMLP(hidden=hidden, inter=mlp_width(lc, mlp_index), gated=False,
                                         bias=lc.bool("mlp_bias"), name="mixer"),)))  # fmt: skip
            mlp_index += 1
        else:
            blocks.append(((), (moe(lc, hidden),)))
    # NemotronH ties nothing (no _tied_weights_keys in transformers, no tie in vLLM), whatever the config says.
    return backbone(c, meta, blocks, is_tied=False, mtp_layers=mtp_layers(c, hidden))


def mtp_layers(c: Cfg, hidden: int) -> tuple[Layer, ...]:
    """MTP blocks as the checkpoint stores them (vLLM's nemotron_h_mtp): per step, the mtp pattern's blocks
    under `mtp.layers.N`; a step's first block merges the token embedding and the hidden state (enorm, hnorm,
    eh_proj over both, hence 2 * hidden), its last ends with final_layernorm. Embedding and head are shared."""
    steps = c.int0("num_nextn_predict_layers")
    if not steps:
        return ()
    pattern = block_types(c, "mtp_layers_block_type", "mtp_hybrid_override_pattern", ["full_attention", "moe"])
    experts = "mtp_n_routed_experts" if c.has("mtp_n_routed_experts") else "n_routed_experts"
    out: list[Layer] = []
    if any(kind in ("linear_attention", "mlp") for kind in pattern):
        raise c.error("vLLM builds MTP blocks of attention and moe only", "mtp_layers_block_type")
    for i in range(steps * len(pattern)):
        pos = i % len(pattern)
        kind = pattern[pos]
        norms_: list[Norm] = [Norm(name="norm", size=hidden)]
        extra: tuple[Tensor, ...] = ()
        if pos == 0:
            norms_ += [Norm(name="enorm", size=hidden), Norm(name="hnorm", size=hidden)]
            extra = tuple(linear("eh_proj", "other", hidden, 2 * hidden, None))
        if pos == len(pattern) - 1:
            norms_.append(Norm(name="final_layernorm", size=hidden))
        mixers: tuple[Mixer, ...] = (attn(c, hidden),) if kind == "full_attention" else ()
        mlps: tuple[MLP, ...] = (moe(c, hidden, experts),) if kind == "moe" else ()
        out.append(Layer(prefix=f"mtp.layers.{i}", norms=tuple(norms_), mixers=mixers, mlps=mlps, extra=extra))
    return tuple(out)
