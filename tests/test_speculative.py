"""Speculative decoding in a plan: MTP layers, draft models and EAGLE heads join the weights and the KV groups."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from launcher.cli import main

FIXTURES = Path(__file__).parent / "fixtures"
QWEN35 = FIXTURES / "configs-v2" / "extra" / "qwen3_5_moe--35b-a3b.json"


def plan(*args: str) -> tuple[int, dict[str, Any], str]:
    r = CliRunner().invoke(main, ["plan", *args, "--json"])
    return r.exit_code, (json.loads(r.stdout) if r.stdout.strip().startswith("{") else {}), r.stderr


def test_mtp_adds_a_full_attention_layer_and_three_padding_layers() -> None:
    """Qwen3.5-35B-A3B: 30 Gated DeltaNet + 10 attention layers; its one MTP layer makes 11 attention layers,
    so groups of 11 and the 30 state layers padded by 3 (as a Spark log with MTP shows)."""
    base = ["--config", str(QWEN35), "--machine", "dgx-spark", "--max-model-len", "131072"]
    code, off, err = plan(*base)
    assert code == 0, err
    code, on, err = plan(*base, "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1}')
    assert code == 0, err
    assert (off["padding_layers"], off["kv_cache_groups"]) == (0, 4)  # groups of 10: 3 state + 1 attention
    assert (on["padding_layers"], on["kv_cache_groups"]) == (3, 4)  # groups of 11
    assert on["weights_bytes"] > off["weights_bytes"]  # the MTP layer's weights are loaded
    # one more conv column per draft token and one more state block per request
    assert on["state_bytes_per_request"] > off["state_bytes_per_request"]
    assert on["block_size"] == off["block_size"] == 1056


def test_a_draft_model_adds_its_layers_and_weights() -> None:
    base = ["--config", str(FIXTURES / "configs" / "Qwen3-32B.json"), "--machine", "h100-80gb",
            "--max-model-len", "32768"]  # fmt: skip
    _, alone, _ = plan(*base)
    small = str(FIXTURES / "configs" / "Qwen3-0.6B.json")
    draft = {"method": "draft_model", "model": small, "num_speculative_tokens": 3}
    _, both, err = plan(*base, "--speculative-config", json.dumps(draft))
    assert both, err
    # Qwen3-0.6B: 28 layers with the same KV page as Qwen3-32B's 64, so one group of 92 layers
    assert both["kv_layout"]["groups"] == [{"kind": "full_attention", "layers": 92, "page_bytes": 65536}]
    assert both["weights_bytes"] - alone["weights_bytes"] > 1_000_000_000  # 0.6B parameters in bf16
    assert both["vllm_argv"][-2:] == ["--speculative-config", json.dumps(draft, separators=(",", ":"))]


def test_dflash_dspark_and_assistant_drafters_add_their_weights(monkeypatch: Any) -> None:
    """NVIDIA's Spark recipes name a DFlash drafter (z-lab/Qwen3.8-27B-DFlash2), a DSpark one and Gemma 4's
    "assistant" (method mtp with a model of its own): each is a model vLLM loads beside the target."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    base = ["--config", str(FIXTURES / "configs" / "Qwen3-32B.json"), "--machine", "dgx-spark",
            "--max-model-len", "32768"]  # fmt: skip
    _, alone, _ = plan(*base)
    small = str(FIXTURES / "configs" / "Qwen3-0.6B.json")
    _, drafted, _ = plan(*base, "--speculative-config", json.dumps({"model": small, "num_speculative_tokens": 3}))
    for method in ("dflash", "dspark", "mtp"):
        spec = {"method": method, "model": small, "num_speculative_tokens": 3}
        code, both, err = plan(*base, "--speculative-config", json.dumps(spec))
        assert code == 0, err
        assert both["weights_bytes"] == drafted["weights_bytes"] > alone["weights_bytes"] + 1_000_000_000, method
    missing = {"method": "dflash", "model": "z-lab/not-cached-DFlash", "num_speculative_tokens": 8}
    r = CliRunner().invoke(main, ["plan", *base, "--speculative-config", json.dumps(missing)])
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "hf download z-lab/not-cached-DFlash config.json" in r.stderr and '"model": "/path/to/drafter"' in r.stderr


def test_mtp_without_mtp_layers_and_unplanned_methods_are_one_line_errors() -> None:
    def refused(speculative: str) -> str:
        r = CliRunner().invoke(
            main,
            ["plan", "--config", str(FIXTURES / "configs" / "Qwen3-8B.json"), "--machine", "h100-80gb",
             "--speculative-config", speculative],
        )  # fmt: skip
        assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        return r.stderr

    assert "needs MTP layers" in refused('{"method": "mtp", "num_speculative_tokens": 1}')
    assert "not planned" in refused('{"method": "medusa", "model": "x/y", "num_speculative_tokens": 2}')
    assert "did you mean 'mtp'" in refused('{"method": "mpt", "num_speculative_tokens": 1}')


def test_ngram_loads_nothing() -> None:
    base = ["--config", str(FIXTURES / "configs" / "Qwen3-8B.json"), "--machine", "h100-80gb"]
    _, alone, _ = plan(*base)
    _, ngram, err = plan(*base, "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 4}')
    assert ngram, err
    assert ngram["weights_bytes"] == alone["weights_bytes"] and ngram["kv_pool_tokens"] == alone["kv_pool_tokens"]


def test_hybrid_plan_text_says_state_block_size_groups_and_users() -> None:
    r = CliRunner().invoke(
        main, ["plan", "--model", str(QWEN35), "--machine", "dgx-spark", "--max-model-len", "131072"]
    )
    assert r.exit_code == 0, r.stderr
    out = r.stdout
    # 30 layers × (conv (2×16×128 + 32×128) × 3 in bf16 + 32 × 128 × 128 in float32) = 30 × 2,146,304 bytes
    assert "state per request: 61.41 MiB over 30 Mamba/linear-attention layers" in out
    assert "SSM state float32" in out
    assert "attention block size 1056 tokens" in out
    assert "KV cache groups: 4 of 10 layers (3 × linear_attention, 1 × full_attention)" in out
    assert "only 10 of 40 layers grow with context" in out
    assert "max users at 131,072 tokens:" in out
    assert "\n  state  " in out  # its own bucket row


def test_html_report_draws_the_state_apart(tmp_path: Path) -> None:
    out = tmp_path / "plan.html"
    r = CliRunner().invoke(
        main,
        ["plan", "--model", str(QWEN35), "--machine", "dgx-spark", "--max-model-len", "131072", "--html", str(out)],
    )
    assert r.exit_code == 0, r.stderr
    html = out.read_text()
    assert 'data-key="state"' in html and 'data-key="kv"' in html
    assert "of state per request, whatever the context length" in html


def test_full_cuda_graphs_need_a_state_block_per_sequence() -> None:
    """vLLM from 0.20 (config/compilation.py) refuses FULL decode CUDA graphs over state layers when max_num_seqs
    exceeds the pool's blocks (`max_num_seqs (1024) exceeds available Mamba cache blocks (939)` on a real RTX PRO
    6000 boot of Qwen3.8-27B); 0.19 and --enforce-eager start. Left to vlaunch, the utilization covers the blocks."""
    base = ["--config", str(QWEN35), "--max-model-len", "65536", "--max-num-seqs", "1024"]
    given = [*base, "--machine", "h200", "--gpu-memory-utilization", "0.6"]
    code, refused, _ = plan(*given, "--vllm-version", "0.32.0")
    assert code == 3 and refused["failure"] == "mamba_blocks_below_max_num_seqs"
    blocks = refused["kv_pool_blocks"]
    assert 0 < blocks < 1024 and f"exceeds available Mamba cache blocks ({blocks})" in refused["reasons"][0]
    assert refused["fixes"][0].startswith(f"--max-num-seqs {blocks} ")
    for other in (["--vllm-version", "0.19.0"], ["--vllm-version", "0.32.0", "--enforce-eager"]):
        code, started, _ = plan(*given, *other)
        assert code == 0 and started["failure"] is None, other
    code, auto, err = plan(*base, "--machine", "dgx-spark", "--vllm-version", "0.32.0")
    assert code == 0, err
    assert auto["kv_pool_blocks"] >= 1024 and "one per max_num_seqs sequence" in auto["gpu_memory_utilization_reason"]
