"""vLLM's grouping and pool (launcher/vllm): worked examples from vLLM's own comments and logs, and invariants."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from launcher.vllm import pool as vp
from launcher.vllm import versions as V
from launcher.vllm.specs import Context, FullAttentionSpec, MambaSpec, SlidingWindowSpec


def full(bs: int = 16, heads: int = 8, dim: int = 128) -> FullAttentionSpec:
    return FullAttentionSpec(bs, heads, dim, dim, 2)


def sliding(window: int, bs: int = 16, heads: int = 8, dim: int = 128) -> SlidingWindowSpec:
    return SlidingWindowSpec(bs, heads, dim, dim, 2, window=window)


def state(nbytes: int, mode: str = "align", spec: int = 0) -> MambaSpec:
    return MambaSpec(((nbytes // 2,),), (2,), "linear_attention", mode, spec)  # type: ignore[arg-type]


def ctx(mml: int = 8192, version: V.Version = (0, 32, 0), mnbt: int = 8192, batches: int = 1) -> Context:
    return Context(mml, mnbt, batches, version, "align")


def test_gpt_oss_two_groups_of_twelve() -> None:
    """12 full + 12 sliding (window 128): 2 groups; a block id spans 12 layers; per request
    cdiv(mml, bs) + cdiv(min(127 + T, mml), bs) + 1 blocks (reference §1.7)."""
    specs = [full(), sliding(128)] * 12
    lay = vp.layout(specs, block_size=16, version=(0, 32, 0))
    assert [g.kind for g in lay.groups] == ["full_attention", "sliding_attention"]
    assert lay.bytes_per_block == 12 * full().page_bytes and lay.padding_layers == ()
    assert vp.blocks_per_request(lay, ctx(16384, mnbt=8192)) == 1024 + (-(-(127 + 8192) // 16)) + 1


def test_group_size_rule_changed_in_0_30() -> None:
    """gpt-oss + an EAGLE layer, 13 full + 12 sliding: before 0.30 groups of 12 (full split in two), since
    0.30 one group of 13 per kind with a padding layer (kv_cache_utils comment)."""
    specs = [full()] * 13 + [sliding(128)] * 12
    old = vp.layout(specs, block_size=16, version=(0, 29, 0))
    new = vp.layout(specs, block_size=16, version=(0, 30, 0))
    assert (old.group_size, old.n_groups, old.padding_layers) == (12, 3, (11,))
    assert (new.group_size, new.n_groups, new.padding_layers) == (13, 2, (1,))


def test_qwen3_5_with_mtp_pads_three_layers() -> None:
    """Qwen3.5-35B-A3B: 30 Gated DeltaNet + 10 full; MTP adds one full-attention layer: groups of 11, the 30
    state layers in 3 groups of 11 minus 3 padding layers (what a Spark log with MTP shows)."""
    specs: list[object] = [state(2_146_304, spec=1)] * 30 + [full(heads=2, dim=256)] * 11
    lay = vp.layout(specs, block_size=16, version=(0, 32, 0), kernel_block=16)  # type: ignore[arg-type]
    assert lay.block_size == 1056  # 16 × cdiv(2,146,304, 16 × 2,048)
    assert lay.group_size == 11 and lay.padding_layers == (3,)
    assert lay.page_bytes == 1056 * 2048  # the state page padded to the attention page


def test_state_blocks_per_request_by_mode() -> None:
    """align keeps the running state and the last block boundary's (2), plus one per speculative token."""
    c = ctx()
    assert state(1 << 20, "none").max_memory_bytes(c) == 1 << 20
    assert state(1 << 20, "align").max_memory_bytes(c) == 2 << 20
    assert state(1 << 20, "align", spec=2).max_memory_bytes(c) == 4 << 20


def test_attention_free_model_is_one_group() -> None:
    lay = vp.layout([state(1 << 20)] * 24, block_size=16, version=(0, 32, 0))
    assert lay.n_groups == 1 and lay.block_size == 16 and lay.bytes_per_block == 24 << 20
    p = vp.pool(lay, 100 * (24 << 20), ctx(), engine="v1")
    assert p.num_blocks == 100 and p.max_concurrency == 50.0  # two state blocks per request in align mode


def test_without_the_hybrid_manager_sliding_is_full() -> None:
    specs = [full(), sliding(128), sliding(128)]
    lay = vp.layout(specs, block_size=16, version=(0, 32, 0), hybrid_manager=False)
    assert lay.n_groups == 1 and lay.bytes_per_block == 3 * full().page_bytes


def test_every_rule_is_listed_once() -> None:
    names = [r.name for r in V.RULES]
    assert len(names) == len(set(names))
    assert V.GROUP_SIZE_CLOSE in V.changes_in((0, 30, 1))


@settings(max_examples=200, deadline=None)
@given(
    n_full=st.integers(1, 40),
    n_state=st.integers(0, 60),
    n_slide=st.integers(0, 40),
    state_kib=st.integers(1, 4096),
    heads=st.sampled_from([1, 2, 4, 8]),
    dim=st.sampled_from([64, 128, 256]),
    kernel=st.sampled_from([16, 32]),
    avail_mib=st.integers(0, 50_000),
    mml=st.integers(1, 300_000),
)
def test_layout_invariants(
    n_full: int, n_state: int, n_slide: int, state_kib: int, heads: int, dim: int, kernel: int, avail_mib: int,
    mml: int,
) -> None:  # fmt: skip
    specs: list[object] = [full(16, heads, dim)] * n_full + [sliding(512, 16, heads, dim)] * n_slide
    specs += [state(state_kib * 1024)] * n_state
    lay = vp.layout(specs, block_size=16, version=(0, 32, 0), kernel_block=kernel)  # type: ignore[arg-type]
    # every layer is in exactly one group; groups of a kind hold at most group_size layers
    assert sum(g.layers for g in lay.groups) == len(specs)
    assert all(g.layers <= lay.group_size for g in lay.groups)
    # one block id spans the widest group
    assert lay.bytes_per_block == max(g.layers * g.page_bytes for g in lay.groups)
    if n_state:
        # an attention page holds a whole state, at a multiple of the kernel block
        assert lay.page_bytes >= state_kib * 1024 and lay.block_size % kernel == 0
        assert all(g.page_bytes == lay.page_bytes for g in lay.groups)
    c = ctx(mml)
    small = vp.pool(lay, avail_mib << 20, c, engine="v1")
    big = vp.pool(lay, (avail_mib + 1) << 20, c, engine="v1")
    assert small.num_blocks <= big.num_blocks and small.tokens <= big.tokens
    assert small.tokens == int(small.num_blocks / small.blocks_per_request * mml)


def test_pipeline_ranks_project_the_global_groups() -> None:
    """vLLM's example (kv_cache_utils): stage 0 holds full.0, sw.0, sw.1 and stage 1 full.1, sw.2, sw.3; the groups
    are (full.0, full.1), (sw.0, sw.2), (sw.1, sw.3), so each stage has one layer of each group."""
    specs = [full(), sliding(128), sliding(128), full(), sliding(128), sliding(128)]
    for owned in ([True] * 3 + [False] * 3, [False] * 3 + [True] * 3):
        lay = vp.layout(specs, block_size=16, version=(0, 32, 0), owned=owned)
        assert [g.layers for g in lay.groups] == [1, 1, 1]
        assert lay.bytes_per_block == full().page_bytes
    whole = vp.layout(specs, block_size=16, version=(0, 32, 0))
    assert [g.layers for g in whole.groups] == [2, 2, 2]
