"""vLLM's own KV page sizes per --kv-cache-dtype, as JSON: the oracle of tests/e2e/test_kv_pages.py.

usage: VLLM_TARGET_DEVICE=cpu .venv-vllm/bin/python scripts/kv_page_oracle.py '[["fp8", 8, 128, 128], ...]'

Each row is (dtype, KV heads, head_size, head_size_v) for standard attention, or (dtype, 0, latent + rope, 0) for an
MLA layer. The spec is built by vLLM's own Attention.get_kv_cache_spec / MLAAttention.get_kv_cache_spec (called on
a stand-in layer) at block size 1, then packed by the backend that stores the dtype, as the model runner does
(v1/worker/utils.py customize_attention_spec): Triton for the per-token-head dtypes, TurboQuant for turboquant_*,
MLACommonBackend for MLA. FlashInfer (nvfp4) and UltraQuant do not import on the CPU build, so their two-line
customize_spec is repeated here with vLLM's own helpers (nvfp4_kv_cache_full_dim, ultraquant format.slot_size).
Prints {"dtype/heads/head/head_v": page bytes, or "error: …"}.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from types import SimpleNamespace as NS
from typing import Any

import torch
from vllm.model_executor.layers.attention.attention import Attention
from vllm.model_executor.layers.attention.mla_attention import MLAAttention, MLACommonBackend
from vllm.utils.torch_utils import kv_cache_dtype_str_to_dtype, nvfp4_kv_cache_full_dim
from vllm.v1.attention.backend import AttentionType
from vllm.v1.attention.backends.triton_attn import TritonAttentionBackend
from vllm.v1.attention.backends.turboquant_attn import TurboQuantAttentionBackend
from vllm.v1.attention.ops.ultraquant.format import slot_size


def _config() -> Any:
    return NS(cache_config=NS(block_size=1, skip_page_size_padded=None), model_config=NS(dtype=torch.bfloat16))


def attention_page(dtype: str, heads: int, head: int, head_v: int) -> int:
    vc = _config()
    layer = NS(attn_type=AttentionType.DECODER, kv_cache_dtype=dtype, sliding_window=None, num_kv_heads=heads,
               head_size=head, head_size_v=head_v, attn_backend=None,
               kv_cache_torch_dtype=kv_cache_dtype_str_to_dtype(dtype, vc.model_config))  # fmt: skip
    spec = Attention.get_kv_cache_spec(layer, vc)
    if dtype.endswith("per_token_head"):
        spec = TritonAttentionBackend.customize_spec(spec)
    elif dtype.startswith("turboquant_"):
        spec = TurboQuantAttentionBackend.customize_spec(spec)
    elif dtype in ("nvfp4", "nvfp4_4over6"):  # FlashInferBackend.customize_spec
        spec = replace(spec, num_head_slots=2 * heads, state_content_bytes=nvfp4_kv_cache_full_dim(head))
    elif dtype == "ultraquant_4bit":  # UltraQuantAttentionBackend.customize_spec
        spec = replace(spec, state_content_bytes=slot_size(head))
    return int(spec.page_size_bytes)


def mla_page(dtype: str, head: int) -> int:
    layer = NS(kv_cache_dtype=dtype, head_size=head, sliding_window=None, indexer=None,
               non_causal_multi_token_decode=False)  # fmt: skip
    spec = MLAAttention.get_kv_cache_spec(layer, _config())
    return int(MLACommonBackend.customize_spec(spec).page_size_bytes)


def main() -> None:
    out: dict[str, int | str] = {}
    for dtype, heads, head, head_v in json.loads(sys.argv[1]):
        try:
            out[f"{dtype}/{heads}/{head}/{head_v}"] = (
                mla_page(dtype, head) if heads == 0 else attention_page(dtype, heads, head, head_v)
            )
        except Exception as e:  # a dtype vLLM cannot lay out for this geometry: say why
            out[f"{dtype}/{heads}/{head}/{head_v}"] = f"error: {type(e).__name__}: {e}"
    print(json.dumps(out))


if __name__ == "__main__":
    main()
