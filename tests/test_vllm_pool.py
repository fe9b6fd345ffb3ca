"""vLLM's grouping and pool (launcher/vllm): worked examples from vLLM's own comments and logs, and invariants."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from launcher.vllm import pool as vp
from launcher.vllm import versions as V
from launcher.vllm.specs import CacheSpec, Context, FullAttentionSpec, MambaSpec, SlidingWindowSpec


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


# --- DeepSeek-V4 (vLLM 0.32): pages of several sizes packed in one block ------------------------------------------


def _v4_specs(name: str, block_size: int = 256, mtp: bool = False) -> list[CacheSpec]:
    """Every cache layer of a configs-2026 DeepSeek-V4 model, in vLLM's order, as vlaunch specs them."""
    import json

    from launcher.model.arch import read_config
    from launcher.vllm.specs import SpecSettings, layer_specs
    from tests.conftest import FIXTURES

    cfg = json.loads((FIXTURES / "configs-2026" / f"{name}_config.json").read_text())
    model = read_config(cfg, name)
    s = SpecSettings(block_size, "fp8_ds_mla", "bfloat16", 1, (0, 32, 0))
    layers = model.layers + (model.mtp_layers if mtp else ())
    return [spec for layer in layers for m in layer.mixers for spec in layer_specs(m, s, layer.prefix)]


FLASH, PRO = "nvidia--DeepSeek-V4-Flash-NVFP4", "deepseek-ai--DeepSeek-V4-Pro"


def test_deepseek_v4_cache_layers_and_pages() -> None:
    """One CSA layer registers five caches, in DeepseekV4Attention.__init__'s order; an HCA layer three, a
    window-only layer one. Pages (v1/kv_cache_interface.py AttentionSpec.page_size_bytes = states per block ×
    state bytes, padded by _apply_alignment_padding to a multiple of 576, FlashMLA's packing stride):
    - indexer keys (DeepseekV4IndexerCache): 256 / 4 = 64 keys of 132 B = 8,448 → 15 × 576 = 8,640
    - indexer compressor (CompressorStateCache, block 4): 4 × 2 × 2 × 128 fp32 = 8,192 → 8,640
    - window (DeepseekV4SWACache, block 64): 64 × 584 = 37,376 → 65 × 576 = 37,440
    - CSA KV (DeepseekV4Attention.get_kv_cache_spec, tokens_per_state 4): 64 × 584 = 37,376 → 37,440
    - CSA compressor (block 4, two overlapping series): 4 × 2 × 2 × 512 fp32 = 32,768 → 57 × 576 = 32,832
    - HCA KV (tokens_per_state 128): 2 × 584 = 1,168 → 3 × 576 = 1,728
    - HCA compressor (block 8, one series): 8 × 2 × 512 fp32 = 32,768 → 32,832"""
    from launcher.vllm.specs import CompressedMLASpec, SlidingMLASpec

    specs = _v4_specs(FLASH)
    assert len(specs) == 2 * 1 + 21 * 5 + 20 * 3
    window_only, csa, hca = specs[0], specs[2:7], specs[7:10]
    assert isinstance(window_only, SlidingMLASpec) and (window_only.block_size, window_only.window) == (64, 128)
    assert [s.page_bytes for s in csa] == [8_640, 8_640, 37_440, 37_440, 32_832]
    assert [type(s).__name__ for s in csa] == ["CompressedMLASpec", "SlidingMLASpec", "SlidingMLASpec",
                                               "CompressedMLASpec", "SlidingMLASpec"]  # fmt: skip
    assert [(s.block_size, getattr(s, "window", None)) for s in csa] == [(256, None), (4, 8), (64, 128), (256, None),
                                                                           (4, 8)]  # fmt: skip
    assert [s.page_bytes for s in hca] == [37_440, 1_728, 32_832]
    assert isinstance(hca[2], SlidingMLASpec) and (hca[2].block_size, hca[2].window) == (8, 128)
    assert isinstance(hca[1], CompressedMLASpec) and hca[1].tokens_per_state == 128


def test_deepseek_v4_flash_pool() -> None:
    """DeepSeek-V4-Flash on one H200 rank (TP 8), vLLM 0.32 defaults: max_model_len 1,048,576, 8,192 batched tokens,
    2 batches in flight (async scheduling). kv_cache_utils._get_packed_kv_cache_groups buckets the layers by type:
    windows (43 × 37,440), full attention (20 × 1,728 + 21 × 8,640 + 21 × 37,440, unbalanced: one group), CSA
    compressors (21 × 32,832 + 21 × 8,640, balanced: one pattern of 21 repeats), HCA compressors (20 × 32,832).
    Repeats per group: the d ≥ 21 padding [43, 21, 20] least, _approximate_gcd: d = 22 pads 1 + 1 + 2 = 4 (21: 20 +
    0 + 1; 23: 3 + 2 + 3), so the windows split in 2 groups of 22 and 21, the others stay whole.
    A block id spans the widest group: 20 × 1,728 + 21 × 8,640 + 21 × 37,440 = 1,002,240 bytes.
    A request (get_max_concurrency_for_kv_cache_config, Σ over groups): full cdiv(1,048,576, 256) = 4,096; each
    window group cdiv(min(128 - 1 + 16,384, L), 64) + 1 = 259 (SlidingWindowSpec.max_admission_blocks_per_request);
    CSA compressors cdiv(8 - 1 + 16,384, 4) + 1 = 4,099; HCA compressors cdiv(128 - 1 + 16,384, 8) + 1 = 2,065."""
    lay = vp.layout(_v4_specs(FLASH), block_size=256, version=(0, 32, 0))
    assert [(g.kind, g.layers) for g in lay.groups] == [("sliding_mla", 22), ("sliding_mla", 21),
                                                        ("compressed_mla", 62), ("compressor_state", 42),
                                                        ("compressor_state", 20)]  # fmt: skip
    assert lay.group_size == 22 and lay.padding_layers == ()
    assert lay.bytes_per_block == 20 * 1_728 + 21 * 8_640 + 21 * 37_440 == 1_002_240
    c = ctx(1_048_576, mnbt=8192, batches=2)
    assert [g.blocks_per_request(c) for g in lay.groups] == [259, 259, 4_096, 4_099, 2_065]
    assert vp.blocks_per_request(lay, c) == 10_778
    # the pool a plan of this rank reaches: 111,589,663,168 available bytes
    p = vp.pool(lay, 111_589_663_168, c, engine="v1")
    assert p.num_blocks == 111_589_663_168 // 1_002_240 == 111_340
    assert p.max_concurrency == 111_340 / 10_778
    assert p.tokens == int(111_340 / 10_778 * 1_048_576) == 10_832_107


def test_deepseek_v4_pro_pool_and_mtp() -> None:
    """DeepSeek-V4-Pro: 61 windows, 91 full-attention caches (31 HCA, 30 CSA, 30 indexers), 30 + 30 CSA and 31 HCA
    compressors. Balanced counts [61, 30, 31], at least 30: d = 31 pads 1 + 1 + 0 = 2, so the windows split 31 + 30.
    A block: 31 × 1,728 + 30 × 8,640 + 30 × 37,440 = 1,435,968. The MTP layer adds one window (62 → 31 + 31)."""
    lay = vp.layout(_v4_specs(PRO), block_size=256, version=(0, 32, 0))
    assert [g.layers for g in lay.groups] == [31, 30, 91, 31, 60]  # layer 0 is HCA: its compressors come first
    assert lay.group_size == 31
    assert lay.bytes_per_block == 31 * 1_728 + 30 * 8_640 + 30 * 37_440 == 1_435_968
    mtp = vp.layout(_v4_specs(PRO, mtp=True), block_size=256, version=(0, 32, 0))
    assert [g.layers for g in mtp.groups] == [31, 31, 91, 31, 60] and mtp.bytes_per_block == 1_435_968


def test_deepseek_v4_larger_block_is_strided_in_kernel_blocks() -> None:
    """--block-size 512: the full-attention pages double (HCA 4 × 584 → 2,880; indexer 128 × 132 → 17,280; CSA
    128 × 584 → 74,880), the windows and compressors keep their own blocks. The sparse-MLA and indexer backends
    take kernel blocks of 256 only, so their pages stride in 256-token pages (customize_attention_spec:
    MultipleOf(256); KVCacheSpec.get_block_stride_alignment), and a block id is rounded up to the lcm of 1,728,
    8,640 and 37,440 = 112,320 (_get_kv_cache_bytes_per_block): 1,992,960 → 18 × 112,320 = 2,021,760."""
    lay = vp.layout(_v4_specs(FLASH, block_size=512), block_size=512, version=(0, 32, 0))
    widest = 20 * 2_880 + 21 * 17_280 + 21 * 74_880
    assert widest == 1_992_960
    assert lay.bytes_per_block == 18 * 112_320 == 2_021_760
    assert vp.blocks_per_request(lay, ctx(1_048_576, mnbt=8192, batches=2)) == 2_048 + 2 * 259 + 4_099 + 2_065


def test_deepseek_v4_without_the_hybrid_manager_is_not_predicted() -> None:
    import pytest

    from launcher.common.errors import ConfigError

    with pytest.raises(ConfigError, match="not predicted"):
        vp.layout(_v4_specs(FLASH), block_size=256, version=(0, 32, 0), hybrid_manager=False)
