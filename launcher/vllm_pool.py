"""vLLM's own KV-pool arithmetic, version by version: page sizes, groups, blocks, logged tokens and concurrency.

Pure integer arithmetic (floats only where vLLM itself divides in floating point, to print the same figure).
Sources: vLLM's kv_cache_interface / kv_cache_utils / gpu_worker across 0.4-0.33 (docs in the reference notes).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal

from launcher.arch.model import Model
from launcher.errors import ConfigError
from launcher.kv import kv_element_bytes, kv_heads_per_rank

Version = tuple[int, int, int]
Platform = Literal["cuda", "cpu"]
LATEST: Version = (0, 33, 0)


def parse_version(text: str | None) -> Version:
    """'0.19.0', 'v0.10.1.1', '0.6.4.post1' -> (0, 19, 0). None -> the newest release modelled."""
    if not text:
        return LATEST
    m = re.match(r"^v?(\d+)\.(\d+)(?:\.(\d+))?", str(text).strip())
    if not m:
        raise ConfigError(f"not a vLLM version: {text!r} (expected e.g. 0.19.0)", field="vllm.version")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def fmt_version(v: Version) -> str:
    return ".".join(str(x) for x in v)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def default_block_size(shape: Model, platform: Platform, version: Version) -> int:
    if platform == "cpu":
        if version < (0, 7, 0):
            return 16
        if shape.mla is not None and version >= (0, 28, 0):
            return 16
        return 128 if version >= (0, 11, 0) else 16
    if shape.mla is not None:
        return 64  # FlashMLA, the default MLA backend on Hopper
    return 16


@dataclass(frozen=True)
class Group:
    kind: Literal["full_attention", "sliding_attention"]
    layers: int  # layers in the group (padding included)


@dataclass(frozen=True)
class KVLayout:
    """How one rank's KV memory is cut into blocks."""

    block_size: int
    page_bytes: int  # one block of one layer
    bytes_per_block: int  # one block id across the layers that share it (what available memory is divided by)
    groups: tuple[Group, ...]
    group_size: int
    hybrid: bool
    layers_on_rank: int

    @property
    def n_groups(self) -> int:
        return len(self.groups)

    def to_json(self) -> dict[str, object]:
        return {
            "block_size": self.block_size,
            "page_bytes": self.page_bytes,
            "bytes_per_block": self.bytes_per_block,
            "groups": [{"kind": g.kind, "layers": g.layers} for g in self.groups],
            "hybrid": self.hybrid,
        }


def page_bytes(shape: Model, block_size: int, kv_cache_dtype: str, tp: int) -> int:
    """Bytes of one block of one attention layer on one rank (vLLM's AttentionSpec.page_size_bytes)."""
    elem, scale = kv_element_bytes(kv_cache_dtype, shape.torch_dtype)
    if shape.mla is not None:
        if kv_cache_dtype == "fp8_ds_mla":
            return block_size * 656
        # One latent (kv_lora_rank + rope dims) per token, no separate K and V, not split across ranks.
        return block_size * (shape.mla.kv_lora_rank + shape.mla.qk_rope_head_dim) * elem
    heads = kv_heads_per_rank(shape.num_kv_heads, tp)
    # 2: K and V. Per-token-head dtypes add an fp32 scale per token per head for each of K and V.
    return 2 * block_size * heads * (shape.head_dim * elem + scale)


def layout(
    shape: Model,
    *,
    block_size: int,
    kv_cache_dtype: str,
    tp: int = 1,
    layer_kinds: tuple[str, ...] | None = None,
    hybrid_manager: bool = True,
    version: Version = LATEST,
) -> KVLayout:
    """Group the attention layers on one rank as vLLM's KV-cache manager does."""
    kinds = tuple(layer_kinds if layer_kinds is not None else shape.layer_kinds)
    page = page_bytes(shape, block_size, kv_cache_dtype, tp)
    n_full = sum(1 for k in kinds if k in ("full_attention", "mla"))
    n_sw = len(kinds) - n_full
    if not hybrid_manager or n_sw == 0 or n_full == 0:
        # One group: every layer has a block for every block id. Without the hybrid manager, sliding-window
        # layers are allocated like full attention.
        only: Literal["full_attention", "sliding_attention"] = (
            "sliding_attention" if n_full == 0 and hybrid_manager else "full_attention"
        )
        return KVLayout(block_size, page, page * len(kinds), (Group(only, len(kinds)),), len(kinds), False, len(kinds))
    small, big = min(n_full, n_sw), max(n_full, n_sw)
    group_size = small
    if version >= (0, 30, 0) and big < 1.5 * small:
        group_size = big
    groups = [Group("full_attention", group_size)] * cdiv(n_full, group_size)
    groups += [Group("sliding_attention", group_size)] * cdiv(n_sw, group_size)
    # Memory is group_size tensors of page × num_blocks, each shared by one layer of every group.
    return KVLayout(block_size, page, page * group_size, tuple(groups), group_size, True, len(kinds))


def blocks_per_request(
    lay: KVLayout, *, max_model_len: int, sliding_window: int | None, max_num_batched_tokens: int, version: Version
) -> int:
    """Blocks one request of max_model_len tokens needs across all groups (vLLM's max_memory_usage_bytes)."""
    bs = lay.block_size
    per_group: list[int] = []
    for g in lay.groups:
        if g.kind == "full_attention" or sliding_window is None:
            per_group.append(cdiv(max_model_len, bs))
        else:
            in_flight = max_num_batched_tokens
            # Tokens a sliding layer must keep: the window plus one step's new tokens, one block of slack.
            per_group.append(cdiv(min(sliding_window - 1 + in_flight, max_model_len), bs) + 1)
    return sum(per_group)


@dataclass(frozen=True)
class Pool:
    available_bytes: int
    num_blocks: int
    tokens: int  # what vLLM logs as "KV cache size: N tokens"
    max_concurrency: float  # what vLLM logs as "Maximum concurrency for L tokens per request: C x"
    blocks_per_request: int
    pool_bytes: int  # num_blocks × bytes_per_block

    def to_json(self) -> dict[str, object]:
        return {
            "kv_pool_bytes": self.pool_bytes,
            "kv_pool_blocks": self.num_blocks,
            "kv_pool_tokens": self.tokens,
            "max_concurrency": round(self.max_concurrency, 2),
        }


def pool(
    lay: KVLayout,
    available_bytes: int,
    *,
    max_model_len: int,
    sliding_window: int | None,
    max_num_batched_tokens: int,
    version: Version,
    engine: Literal["v0", "v1"],
    num_blocks_override: int | None = None,
    pipeline_parallel_size: int = 1,
) -> Pool:
    """Blocks from available bytes, then the tokens and concurrency the given version prints."""
    bs = lay.block_size
    num_blocks = max(0, available_bytes // lay.bytes_per_block)
    if num_blocks_override is not None:
        num_blocks = num_blocks_override
    per_req = blocks_per_request(
        lay,
        max_model_len=max_model_len,
        sliding_window=sliding_window,
        max_num_batched_tokens=max_num_batched_tokens,
        version=version,
    )
    if engine == "v0":
        # V0 allocates every layer for every block; concurrency = tokens / max_model_len.
        tokens = num_blocks * bs
        conc = tokens / max_model_len
    elif version < (0, 9, 1):
        tokens = num_blocks * bs
        conc = tokens / max_model_len
    else:
        conc = num_blocks / per_req if per_req else 0.0
        # 0.9.1-0.20: blocks are shared by all groups, so each token needs one block in every group.
        tokens = int(conc * max_model_len) if version >= (0, 21, 0) else num_blocks // lay.n_groups * bs
    return Pool(
        available_bytes=available_bytes,
        num_blocks=num_blocks,
        tokens=tokens,
        max_concurrency=conc,
        blocks_per_request=per_req,
        pool_bytes=num_blocks * lay.bytes_per_block,
    )


def requested_bytes(total_bytes: int, util: float, version: Version) -> int:
    """vLLM's budget: total × gpu_memory_utilization (ceil since 0.14; a float before, truncated here)."""
    if version >= (0, 14, 0):
        return math.ceil(total_bytes * util)
    return int(total_bytes * util)


def default_utilization(version: Version) -> float:
    return 0.92 if version >= (0, 20, 0) else 0.9


def format_tokens_line(pool_: Pool, max_model_len: int, version: Version, platform: Platform) -> str:
    """The log line this version prints, for side-by-side display."""
    dev = "CPU" if platform == "cpu" and version >= (0, 30, 0) else "GPU"
    if version < (0, 8, 0):
        return f"# GPU blocks: {pool_.num_blocks}; Maximum concurrency for {max_model_len} tokens per request: " + (
            f"{pool_.max_concurrency:.2f}x"
        )
    return (
        f"{dev} KV cache size: {pool_.tokens:,} tokens, Maximum concurrency for {max_model_len:,} tokens per "
        f"request: {pool_.max_concurrency:.2f}x"
    )
