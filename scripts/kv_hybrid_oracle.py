"""vLLM's hybrid attention block size per --kv-cache-dtype, as JSON: an oracle of tests/e2e/test_kv_pages.py.

usage: VLLM_TARGET_DEVICE=cpu .venv-vllm/bin/python scripts/kv_hybrid_oracle.py MODEL_DIR DTYPE [DTYPE ...]

Builds vLLM's own ModelConfig from MODEL_DIR/config.json (no weights, no tokenizer) and runs
Platform._align_hybrid_block_size, the CUDA platforms' alignment of the attention page to the mamba state page,
with the Triton attention backend (kernel blocks of a multiple of 16, importable on the CPU build; it packs the
per-token-head dtypes; TurboQuant is taken by the alignment itself). Prints {dtype: [block size, padded mamba
page or null]}.
"""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace as NS

from vllm.config import CacheConfig, ModelConfig, ParallelConfig
from vllm.platforms.interface import Platform
from vllm.v1.attention.backends.triton_attn import TritonAttentionBackend


def main() -> None:
    model = ModelConfig(model=sys.argv[1], skip_tokenizer_init=True, dtype="bfloat16", max_model_len=4096)
    # every attention layer on Triton (the selector's choice is out of the picture)
    Platform._find_non_ssm_backends = classmethod(lambda cls, vc: [TritonAttentionBackend])
    out: dict[str, list[int | None]] = {}
    for dtype in sys.argv[2:]:
        cache = CacheConfig(block_size=16, cache_dtype=dtype)
        cache.mamba_cache_mode = "align"
        config = NS(cache_config=cache, model_config=model, parallel_config=ParallelConfig(), speculative_config=None)
        Platform._align_hybrid_block_size(config, TritonAttentionBackend)
        out[dtype] = [cache.block_size, cache.mamba_page_size_padded]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
