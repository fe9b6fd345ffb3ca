"""A ceiling on decode speed: tokens/s ≤ memory bandwidth ÷ bytes one decode step reads. Pure arithmetic.

Decoding is bound by memory bandwidth: every step each GPU reads its share of the weights a token passes through
and every user's KV cache (or state) once. The figure here is an upper bound, not a benchmark: it assumes the
memory runs at its peak, that kernels never wait, that a MoE batch touches only one token's experts, and (with
speculative decoding) that every draft token is accepted.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from launcher.common.records import dataclass
from launcher.model.arch.layers import MoE
from launcher.model.arch.model import Model
from launcher.model.kv import KVPerToken
from launcher.model.params import Tensor


@dataclass(frozen=True)
class DecodeCeiling:
    weights_bytes: int  # weights one step reads, all ranks together
    cache_bytes: int  # KV cache and state one step reads on one tensor-parallel rank, all users
    step_bytes: int  # what one GPU reads per step: its share of the weights + its cache
    tokens_per_step: int  # per user: 1, or 1 + the speculative tokens when every one is accepted
    bandwidth_bytes_per_s: int
    tokens_per_s: float  # per user
    aggregate_tokens_per_s: float  # all users together

    def to_json(self) -> dict[str, object]:
        return {
            "weights_bytes": self.weights_bytes,
            "cache_bytes": self.cache_bytes,
            "step_bytes": self.step_bytes,
            "tokens_per_step": self.tokens_per_step,
            "bandwidth_bytes_per_s": self.bandwidth_bytes_per_s,
            "tokens_per_s": round(self.tokens_per_s, 2),
            "aggregate_tokens_per_s": round(self.aggregate_tokens_per_s, 1),
        }


def expert_share(shape: Model) -> dict[int, tuple[int, int]]:
    """(experts per token, experts) of each MoE layer, by layer index (MTP layers numbered after the decoder's)."""
    out: dict[int, tuple[int, int]] = {}
    for i, layer in enumerate((*shape.layers, *shape.mtp_layers)):
        for f in layer.mlps:
            if isinstance(f, MoE):
                out[i] = (f.experts_per_token, f.num_experts)
    return out


def step_tensors(
    shape: Model, ts: Sequence[Tensor], sizes: Sequence[int], *, mtp: bool
) -> Iterator[tuple[Tensor, int, tuple[int, int] | None]]:
    """The tensors one decode step reads, each with its bytes and, for a MoE layer's routed experts, (experts per
    token, experts). Left out: the towers (an image is encoded once, at prefill), the token embedding and learned
    positions (one row gathered per token; a tied embedding is read whole as the lm_head), and MTP layers unless
    speculating with them."""
    share = expert_share(shape)
    for t, b in zip(ts, sizes, strict=True):
        if t.part == "vision" or t.role == "position":
            continue
        if t.role == "embedding" and not shape.tied_embeddings:
            continue
        if t.layer is not None and t.layer >= shape.num_layers and not mtp:
            continue
        yield t, b, share.get(t.layer) if t.role == "expert" and t.layer is not None else None


def active_weight_bytes(shape: Model, ts: Sequence[Tensor], sizes: Sequence[int], *, mtp: bool) -> int:
    """Bytes of weights one decode step reads for one token, all ranks together (`step_tensors`), of each MoE
    layer's routed experts only the experts_per_token / num_experts a token is routed to."""
    total = 0
    for _, b, routed in step_tensors(shape, ts, sizes, mtp=mtp):
        total += b * routed[0] // routed[1] if routed else b  # only the token's experts: k of the e copies
    return total


def cache_read_bytes(kv: KVPerToken, context: int, state_bytes: int) -> int:
    """KV bytes one request reads per step at `context` tokens on one rank (sliding and chunked layers stop at
    their span), plus its state (Mamba / linear-attention layers read and rewrite it every step)."""
    return kv.bytes_for_context(context) + state_bytes


def ceiling(
    *,
    weights_bytes: int,
    cache_bytes_per_user: int,
    users: int,
    tensor_parallel_size: int,
    bandwidth_bytes_per_s: int,
    speculative_tokens: int = 0,
) -> DecodeCeiling:
    """Tokens/s per user ≤ tokens per step × bandwidth ÷ bytes one GPU reads per step.

    Tensor-parallel ranks read their shares at the same time (weights ÷ tp, each its own KV heads); pipeline stages
    take turns on one token, so they add no bandwidth to it and do not appear here.
    """
    users = max(users, 1)
    tp = max(tensor_parallel_size, 1)
    cache = users * cache_bytes_per_user  # every user's cache, once per step
    step = -(-weights_bytes // tp) + cache  # this GPU's share of the weights, read once for the whole batch
    tokens = 1 + max(speculative_tokens, 0)  # a step yields one token per user, more when drafts are accepted
    per_user = tokens * bandwidth_bytes_per_s / step if step else 0.0
    return DecodeCeiling(weights_bytes, cache, step, tokens, bandwidth_bytes_per_s, per_user, per_user * users)
