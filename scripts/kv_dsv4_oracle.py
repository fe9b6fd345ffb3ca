"""vLLM's own KV cache pool for a DeepSeek-V4 config, as JSON: the oracle of tests/e2e/test_kv_dsv4.py.

usage: VLLM_TARGET_DEVICE=cpu .venv-vllm/bin/python scripts/kv_dsv4_oracle.py CONFIG.json '[CASE, ...]'

A CASE is {"available": bytes, "max_model_len": n, "max_num_batched_tokens": n, "concurrent_batches": n}, with
optionally "mtp" (MTP layers, 0), "kv_cache_dtype" ("auto") and "block_size" (256).

The CPU build cannot run DeepSeek-V4 (its attention kernels are CUDA's), so the model is not built: each cache
layer's spec comes from vLLM's own get_kv_cache_spec of its class, called on a stand-in holding the attributes the
class's __init__ sets (those lines are copied from vLLM 0.32, with their place), in the order the layers register
(models/deepseek_v4/attention.py DeepseekV4Attention.__init__: the CSA indexer's k_cache and compressor, the SWA
cache, the attention, its compressor); then packed by the layer's backend as the GPU model runner does
(v1/worker/utils.py customize_attention_spec), and grouped, counted and priced by vLLM's v1/core/kv_cache_utils.py
itself (get_kv_cache_configs, get_kv_cache_capacity) under the BLHNC layout DeepseekV4IndexerBackend declares.
Prints one JSON list: per case the blocks, the bytes per block, the groups, the tokens and the concurrency.
"""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace as NS
from typing import Any

import torch
from vllm.models.deepseek_v4.attention import DeepseekV4Attention, DeepseekV4IndexerCache, _resolve_dsv4_kv_cache_dtype
from vllm.models.deepseek_v4.compressor import CompressorBackend, CompressorStateCache
from vllm.models.deepseek_v4.sparse_mla import DeepseekV4FlashMLABackend
from vllm.v1.attention.backends.mla.indexer import DeepseekV4IndexerBackend
from vllm.v1.attention.backends.mla.sparse_swa import DeepseekSparseSWABackend, DeepseekV4SWACache
from vllm.v1.core import kv_cache_utils as K
from vllm.v1.kv_cache_interface import KVCacheSpec
from vllm.v1.worker.utils import customize_attention_spec

# the block size vLLM picks for DeepSeek-V4: its sparse-MLA and indexer kernels take 256 only
BLOCK = 256


def _stand_in(cls: type, **attrs: Any) -> Any:
    """The layer's attributes, its get_kv_cache_spec bound to them (the method is vLLM's own)."""
    ns = NS(**attrs)
    ns.get_kv_cache_spec = lambda vc: cls.get_kv_cache_spec(ns, vc)
    return ns


def layer_specs(cfg: dict[str, Any], vc: Any, kv_dtype: str, mtp: int) -> dict[str, KVCacheSpec]:
    """Every cache layer's spec, in registration order, packed by its backend."""
    # DeepseekV4FlashMLAAttention (SM90 / SM100) and the SM12x FlashInfer class both use the fp8_ds_mla layout
    dtype_str, torch_dtype = _resolve_dsv4_kv_cache_dtype(True, kv_dtype, vc.cache_config)
    head, index_head, n = cfg["head_dim"], cfg["index_head_dim"], cfg["num_hidden_layers"]
    specs: dict[str, KVCacheSpec] = {}

    def add(name: str, layer: Any, backend: Any) -> None:
        spec = layer.get_kv_cache_spec(vc)
        if spec is not None:
            specs[name] = customize_attention_spec(backend, spec)

    def state(prefix: str, ratio: int, dim: int) -> None:
        coff = 1 + (ratio == 4)  # compressor.py DeepseekCompressor.__init__ / CompressorStateCache.__init__
        layer = _stand_in(CompressorStateCache, state_dim=2 * coff * dim, dtype=torch.float32,
                          sliding_window=coff * ratio, block_size=4 if ratio == 4 else 8)  # fmt: skip
        add(f"{prefix}.state_cache", layer, CompressorBackend)

    for i in range(n + mtp):
        p = f"model.layers.{i}.attn"
        ratio = max(1, cfg["compress_ratios"][i]) if i < n else 1  # DeepseekV4Attention.__init__
        if ratio == 4:  # DeepseekV4Indexer.__init__: FP8 keys plus an fp32 scale per 128
            keys = _stand_in(DeepseekV4IndexerCache, head_dim=index_head + index_head // 128 * 4, dtype=torch.uint8,
                             cache_config=vc.cache_config, compress_ratio=ratio)  # fmt: skip
            add(f"{p}.indexer.k_cache", keys, DeepseekV4IndexerBackend)
            state(f"{p}.indexer.compressor", ratio, index_head)
        swa = _stand_in(DeepseekV4SWACache, bounded_replay=False, block_size=64, head_dim=head, dtype=torch_dtype,
                        window_size=cfg["sliding_window"], cache_config=vc.cache_config, packed_bytes_per_token=584,
                        packed_page_alignment=576)  # fmt: skip
        add(f"{p}.swa_cache", swa, DeepseekSparseSWABackend)
        attn = _stand_in(DeepseekV4Attention, compress_ratio=ratio, kv_cache_dtype=dtype_str, head_dim=head,
                         kv_cache_torch_dtype=torch_dtype)  # fmt: skip
        add(p, attn, DeepseekV4FlashMLABackend)
        if ratio > 1:
            state(f"{p}.compressor", ratio, head)
    return specs


def config(case: dict[str, Any], model_type: str) -> Any:
    """The VllmConfig fields kv_cache_utils reads, as one rank of a CUDA launch with the hybrid manager on."""
    mml, mnbt = case["max_model_len"], case["max_num_batched_tokens"]
    cache = NS(block_size=case.get("block_size", BLOCK), cache_dtype=case.get("kv_cache_dtype", "auto"),
               kv_cache_layout="BLHNC", num_gpu_blocks_override=None, prefix_cache_retention_interval=None,
               get_resolved_kv_cache_layout=lambda: K.KVCacheLayout.BLHNC)  # fmt: skip
    return NS(
        cache_config=cache,
        model_config=NS(max_model_len=mml, original_max_model_len=mml, hf_config=NS(model_type=model_type)),
        scheduler_config=NS(disable_hybrid_kv_cache_manager=False, max_num_batched_tokens=mnbt),
        parallel_config=NS(decode_context_parallel_size=1, tensor_parallel_size=1),
        attention_config=NS(hisparse_config=None),
        speculative_config=None,
        device_config=NS(device_type="cuda"),
        num_prefill_lookahead_tokens=0,  # no multi-module MTP: one MTP module
        max_in_flight_tokens=case["concurrent_batches"] * mnbt,
    )


def _members(spec: Any) -> list[Any]:
    return list(spec.kv_cache_specs.values()) if hasattr(spec, "kv_cache_specs") else [spec]


def pool(cfg: dict[str, Any], case: dict[str, Any]) -> dict[str, Any]:
    vc = config(case, cfg["model_type"])
    specs = layer_specs(cfg, vc, case.get("kv_cache_dtype", "auto"), case.get("mtp", 0))
    (kcc,) = K.get_kv_cache_configs(vc, [specs], [case["available"]])
    tokens, concurrency = K.get_kv_cache_capacity(vc, kcc)
    groups = []
    for g in kcc.kv_cache_groups:
        spec = g.kv_cache_spec
        blocks = K.cdiv(spec.max_memory_usage_bytes(vc), spec.page_size_bytes)
        pages = sorted(s.page_size_bytes for s in _members(spec))
        groups.append({"layers": len(g.layer_names), "pages": pages, "blocks_per_request": blocks})
    layer2 = {name: s.page_size_bytes for name, s in specs.items() if name.startswith("model.layers.2.")}
    return {"num_blocks": kcc.num_blocks, "bytes_per_block": K._pool_bytes_per_block(vc, kcc.kv_cache_groups),
            "tokens": tokens, "concurrency": concurrency, "groups": groups, "pages": layer2}  # fmt: skip


def main() -> None:
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    print(json.dumps([pool(cfg, case) for case in json.loads(sys.argv[2])]))


if __name__ == "__main__":
    main()
