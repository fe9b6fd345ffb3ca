"""Every vLLM startup-log format vlaunch understands, in one place.

Each pattern is a named, compiled regex with a real example line and the versions that print it. The log text
is not a stable interface; tests/fixtures/logs are the spec. Patterns never anchor at the line start: vLLM
prefixes lines with process names, levels, timestamps and file:line.
"""

from __future__ import annotations

import regex as re

_NUM = r"-?[0-9][0-9,]*(?:\.[0-9]+)?"


def number(text: str) -> float:
    """'34,952' -> 34952.0, '12.5' -> 12.5."""
    return float(text.replace(",", ""))


# "CPU KV cache size: 2,018,688 tokens, Maximum concurrency for 2,048 tokens per request: 985.69x"
#   0.30+ (one record, device name CPU/GPU/XPU); "GPU KV cache size: 476,016 tokens" alone on 0.8-0.27.
KV_CACHE_SIZE = re.compile(rf"(?P<device>[A-Z]+) KV cache size: (?P<tokens>{_NUM}) tokens")

# "Maximum concurrency for 2,048 tokens per request: 985.69x"  (V1 0.8+ with commas; V0 0.6.3+ without)
MAX_CONCURRENCY = re.compile(rf"Maximum concurrency for (?P<max_model_len>{_NUM}) tokens per request: (?P<x>{_NUM})x")

# "Auto set (1.93/8.71) GiB for KV cache on node 0, with 2.61 GiB requested memory for the worker. 0.69 GiB
#  memory was consumed by non-kv usages."  CPU backend 0.20+.
CPU_AUTO_SET = re.compile(
    rf"Auto set \((?P<kv>{_NUM})/(?P<total>{_NUM})\) GiB for KV cache on node (?P<node>\d+), with "
    rf"(?P<requested>{_NUM}) GiB requested memory for the worker\. (?P<non_kv>{_NUM}) GiB memory was consumed"
)

# "Explicitly set (1.0/19.34) GiB for KV cache on node 0."  CPU backend 0.20+ with VLLM_CPU_KVCACHE_SPACE.
CPU_EXPLICIT_SET = re.compile(
    rf"Explicitly set \((?P<kv>{_NUM})/(?P<total>{_NUM})\) GiB for KV cache on node (?P<node>\d+)"
)
