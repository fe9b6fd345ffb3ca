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
    return Context(mml, mnbt, batches, version)


def test_gpt_oss_two_groups_of_twelve() -> None:
    """12 full + 12 sliding (window 128): 2 groups; a block id spans 12 layers; per request
    cdiv(mml, bs) + cdiv(min(127 + T, mml), bs) + 1 blocks (reference §1.7)."""
    specs = [full(), sliding(128)] * 12
    lay = vp.layout(specs, block_size=16, version=(0, 32, 0))
    assert [g.kind for g in lay.groups] == ["full_attention", "sliding_attention"]
    assert lay.bytes_per_block == 12 * full().page_bytes and lay.padding_layers == ()
    assert vp.blocks_per_request(lay, ctx(16384, mnbt=8192)) == 1024 + (-(-(127 + 8192) // 16)) + 1


def test_group_size_rule_by_version() -> None:
    """gpt-oss + an EAGLE layer, 13 full + 12 sliding: before 0.12 groups of the smaller count, 12 (the full
    layers split in two, 11 padding layers); from 0.12 counts within 1.25× of each other make one group per kind
    of 13 (1 padding layer); from 0.18 within 1.5× (kv_cache_utils: "12 sw + 13 full. We pad it to (13 sw,
    13 full) instead of (12 sw, 24 full)")."""

    def shape(n_full: int, n_sw: int, version: V.Version) -> tuple[int, int, tuple[int, ...]]:
        lay = vp.layout([full()] * n_full + [sliding(128)] * n_sw, block_size=16, version=version)
        return lay.group_size, lay.n_groups, lay.padding_layers

    assert shape(13, 12, (0, 11, 0)) == (12, 3, (11,))
    assert shape(13, 12, (0, 12, 0)) == (13, 2, (1,))
    assert shape(16, 12, (0, 17, 0)) == (12, 3, (8,))  # 16 ≥ 1.25 × 12
    assert shape(16, 12, (0, 18, 0)) == (16, 2, (4,))  # 16 < 1.5 × 12


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
    assert V.GROUP_SIZE_CLOSE in V.changes_in((0, 18, 1))
    assert V.HYBRID_PREFIX_CACHING in V.changes_in((0, 26, 0))


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


def test_mamba_cache_mode_by_version() -> None:
    """Granite 4.0-H (SupportsMambaPrefixCaching): prefix caching is off for hybrids before 0.26 (one state block
    per request), on from 0.26 in 'all' mode (a state per block of context) and in 'align' mode from 0.28."""
    from pathlib import Path

    from launcher.plan.planning import make_plan, profile_from_flags

    cfg = Path(__file__).parent / "fixtures" / "configs-v2" / "extra" / "granitemoehybrid--granite-4.0-h-tiny.json"

    def mode(version: str, **kw: object) -> tuple[str, int]:
        prof = profile_from_flags(None, str(cfg), machine="h100-80gb", max_model_len=8192, **kw)
        p = make_plan(prof.with_overrides(vllm={"version": version}), live=False, use_calibration=False).prediction
        return p.args.mamba_cache_mode, p.pool.blocks_per_request

    m25, b25 = mode("0.25.0")
    m27, b27 = mode("0.27.0")
    m32, b32 = mode("0.32.0")
    assert (m25, m27, m32) == ("none", "all", "align")
    assert b27 > b32 > b25
    assert mode("0.32.0", enable_prefix_caching=False)[0] == "none"


def test_an_encoder_under_the_pooling_runner_has_no_pool() -> None:
    """bge-m3 (XLM-RoBERTa) served with --runner pooling: EncoderOnlyAttention keeps no KV cache."""
    import json
    from pathlib import Path

    from click.testing import CliRunner

    from launcher.cli import main

    cfg = Path(__file__).parent / "fixtures" / "configs-v2" / "extra" / "xlm-roberta--bge-m3.json"
    args = ["plan", "--config", str(cfg), "--machine", "l40s", "--max-model-len", "8192"]
    r = CliRunner().invoke(main, [*args, "--runner", "pooling", "--json"])
    assert r.exit_code == 0, r.stderr
    p = json.loads(r.stdout)
    assert p["kv_need_bytes"] == 0 and p["kv_cache_groups"] == 0 and p["fits"]
    assert p["vllm_argv"][-2:] == ["--runner", "pooling"]
    text = CliRunner().invoke(main, [*args, "--runner", "pooling"]).stdout
    assert "an encoder keeps no KV cache" in text and "fits: yes — no KV pool" in text


def test_speculative_state_blocks_start_in_0_15() -> None:
    """Before 0.15 a mamba layer kept one state block whatever the draft tokens (MambaSpec: one page); from 0.15 one
    more per speculative token. The conv window widens by the draft tokens in both."""
    from launcher.model.arch.layers import GatedDeltaNet
    from launcher.vllm.specs import SpecSettings, state_spec

    gdn = GatedDeltaNet(hidden=256, num_k_heads=2, num_v_heads=4, head_k_dim=64, head_v_dim=64, conv_kernel=4)

    def spec(version: V.Version) -> MambaSpec:
        s = SpecSettings(16, "auto", "bfloat16", 1, version, "none", num_speculative_tokens=2)
        out = state_spec(gdn, s)
        assert out is not None
        return out

    assert spec((0, 14, 0)).speculative_blocks == 0
    assert spec((0, 15, 0)).speculative_blocks == 2
    assert spec((0, 14, 0)).shapes[0][1] == spec((0, 15, 0)).shapes[0][1] == 3 + 2


def test_attention_free_plan_says_so() -> None:
    """Mamba2 alone: no attention block is raised and no layer grows with context; a state block stands for the
    whole max_model_len (prefix caching is off for attention-free models)."""
    import json
    from pathlib import Path

    from click.testing import CliRunner

    from launcher.cli import main

    cfg = Path(__file__).parent / "fixtures" / "configs-v2" / "configs" / "mamba2--default.json"
    args = ["plan", "--config", str(cfg), "--machine", "h100-80gb", "--max-model-len", "8192"]
    text = CliRunner().invoke(main, args).stdout
    assert "attention-free: a request holds its state" in text
    assert "hybrid:" not in text and "attention block size" not in text
    p = json.loads(CliRunner().invoke(main, [*args, "--json"]).stdout)
    assert p["block_size"] == p["mamba_block_size"] == 8192 and p["kv_layout"]["attention_block_size_raised"] is False
