"""Mamba2 (SSD, e.g. Mamba-Codestral): every layer a Mamba2 mixer under `backbone.`, no attention and no MLP.

A Mamba2 mixer keeps per request a conv state over x, B and C (kernel - 1 taps) and an SSM state of
head_dim x d_state per head. `Mamba2Mixer` is the Mamba2 part with vLLM's tensor-parallel geometry: when
n_groups does not divide by tp, vLLM replicates the B/C groups so that every rank holds the groups its heads
read, which widens the conv state. The hybrid families (Nemotron-H, Granite 4.0, Zamba2, Falcon-H1) use it too.
"""

from __future__ import annotations

from typing import Any

from launcher.common.records import dataclass
from launcher.model.arch.common import Meta
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.mamba import backbone
from launcher.model.arch.layers import Mamba2
from launcher.model.arch.model import Model

MODEL_TYPES = ("mamba2",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "mamba2": dict(vocab_size=32768, hidden_size=4096, num_hidden_layers=64, num_heads=128, head_dim=64,
                   state_size=128, expand=2, conv_kernel=4, n_groups=8, use_bias=False, use_conv_bias=True,
                   tie_word_embeddings=False),
}  # fmt: skip


def extra_groups(n_groups: int, tp: int) -> int:
    """B/C groups vLLM adds per model so that tp divides them (MambaStateShapeCalculator's rule)."""
    return 0 if n_groups % tp == 0 else tp - n_groups


@dataclass(frozen=True, kw_only=True)
class Mamba2Mixer(Mamba2):
    """A Mamba2 mixer whose per-rank state follows vLLM's sharding (groups replicated when tp > n_groups)."""

    def state_shapes(self, tp: int = 1) -> dict[str, tuple[int, ...]]:
        groups = self.n_groups + extra_groups(self.n_groups, tp)
        # conv: x (d_inner) plus B and C (d_state per group each), split over ranks; ssm: one
        # head_dim x d_state matrix per head, heads split over ranks.
        conv_dim = self.d_inner + 2 * groups * self.d_state
        return {"conv": (conv_dim // tp, self.conv_kernel - 1), "ssm": (self.heads // tp, self.head_dim, self.d_state)}


def mamba2_mixer(c: Cfg, hidden: int, *, heads: int, head_dim: int, d_state: str, n_groups: str, conv_kernel: str,
                 conv_bias: str, proj_bias: str, out_bias: str | None = None, gated_norm: bool = True,
                 name: str = "mixer") -> Mamba2Mixer:  # fmt: skip
    """A Mamba2 mixer from the config keys a family names its fields by."""
    return Mamba2Mixer(
        hidden=hidden, heads=heads, head_dim=head_dim, d_state=c.int(d_state), n_groups=c.int(n_groups),
        conv_kernel=c.int(conv_kernel), conv_bias=c.bool(conv_bias), proj_bias=c.bool(proj_bias),
        out_bias=c.bool(out_bias) if out_bias else None, gated_norm=gated_norm, name=name,
    )  # fmt: skip


def read(c: Cfg, meta: Meta) -> Model:
    hidden = c.int("hidden_size")
    heads, head_dim = c.int("num_heads"), c.int("head_dim")
    # transformers sizes the mixer by expand * hidden and requires the heads to tile it exactly.
    if heads * head_dim != c.int("expand") * hidden:
        raise c.error(f"num_heads * head_dim ({heads * head_dim}) must equal expand * hidden_size", "num_heads")
    mixer = mamba2_mixer(c, hidden, heads=heads, head_dim=head_dim, d_state="state_size", n_groups="n_groups",
                         conv_kernel="conv_kernel", conv_bias="use_conv_bias", proj_bias="use_bias")  # fmt: skip
    return backbone(c, meta, [((mixer,), ())] * c.int("num_hidden_layers"))
