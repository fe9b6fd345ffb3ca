"""Plan step 2, the model: the layers vLLM builds for the request — the model's tensors and their bytes in the
format the weights are priced in, the speculator's drafter, and the KV bytes one token takes per rank."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from launcher.common.errors import ConfigError
from launcher.common.records import dataclass
from launcher.model import formats
from launcher.model.arch.model import Model
from launcher.model.kv import KVPerToken, kv_per_token
from launcher.model.modelsource import ModelSource, read_model
from launcher.model.params import Tensor
from launcher.plan import budget
from launcher.plan.cache import PlanCache
from launcher.plan.resolve import Request, load

# Speculative methods that load no weights and add no layers (their num_speculative_tokens still widens
# Mamba states), and those that load a drafter model (its weights, and its attention layers join the pool).
NO_DRAFTER = frozenset({"ngram", "ngram_gpu", "suffix"})
# DFlash and DSpark drafters are models of their own too (vLLM 0.32 registry: DFlashDraftModel, DSparkDraftModel, …);
# so is an "assistant" drafter named with method "mtp" (Gemma 4's): MTP weights in another repository.
DRAFTER_METHODS = frozenset({"draft_model", "eagle", "eagle3", "dflash", "dspark"})


@dataclass(frozen=True)
class ModelLayers:
    """Step 2: the model's tensors (MTP layers included) with their bytes, the drafter, KV bytes per token."""

    request: Request
    tensors: Sequence[Tensor]
    tensor_bytes: Sequence[int]  # each tensor's bytes in the priced format
    drafter: Model | None  # a draft model / EAGLE head speculating for this one (its layers join the pool)
    drafter_bytes: int  # the drafter's weights per rank (on the last pipeline stage)
    kv: KVPerToken  # per rank, every layer storing every token (the textbook figure)
    stages: tuple[range, ...]  # the model's layers each pipeline stage holds


def model_layers(request: Request, cache: PlanCache) -> ModelLayers:
    """Step 2: the tensors and their bytes, the drafter vLLM loads, the KV geometry."""
    shape, args = request.shape, request.args
    ts, per_tensor = tensor_bytes(shape, request.spec, cache)
    drafter, drafter_bytes = cache.get(
        ("drafter", request.profile.speculative_config, args.speculative_method, args.tensor_parallel_size),
        lambda: _drafter(request.profile.speculative, args.speculative_method, request.speculative_method,
                         args.tensor_parallel_size),
    )  # fmt: skip
    kv = kv_geometry(shape, args.kv_cache_dtype, args.tensor_parallel_size, cache)
    stages = tuple(budget.pp_layer_ranges(shape.num_layers, args.pipeline_parallel_size))
    return ModelLayers(request, ts, per_tensor, drafter, drafter_bytes, kv, stages)


def tensor_bytes(shape: Model, spec: formats.FormatSpec, cache: PlanCache) -> tuple[list[Tensor], list[int]]:
    """The model's tensors (MTP layers included) and their bytes in `spec`."""
    ts = cache.get(("tensors", id(shape)), lambda: shape.tensors(mtp=True), shape)
    return ts, cache.get(("bytes", id(shape), spec), lambda: formats.tensor_bytes(shape, spec, ts), shape)


def kv_geometry(shape: Model, kv_cache_dtype: str, tp: int, cache: PlanCache) -> KVPerToken:
    """KV bytes per token of the model at this KV cache dtype and tensor-parallel size (per rank)."""
    return cache.get(("kv", id(shape), kv_cache_dtype, tp), lambda: kv_per_token(shape, kv_cache_dtype, tp), shape)


def _drafter(
    speculative: dict[str, Any], resolved: str | None, method: str | None, target_tp: int
) -> tuple[Model | None, int]:
    """The drafter vLLM loads for `--speculative-config` with a model: its layers, and its weights per rank."""
    separate_mtp = resolved == "mtp" and bool(speculative.get("model"))
    if (resolved in (None, "mtp") and not separate_mtp) or resolved in NO_DRAFTER:
        return None, 0
    if resolved not in DRAFTER_METHODS and not separate_mtp:
        raise ConfigError(
            f"speculative method {method!r}: its drafter is not planned (MTP, EAGLE, EAGLE-3, DFlash, DSpark, draft "
            "models and n-gram are); plan without it for the target model alone",
            field="speculative_config.method",
        )
    name = speculative.get("model")
    if not name:
        raise ConfigError(f"speculative method {method!r} needs a drafter model", field="speculative_config.model")
    dsrc = _drafter_source(str(name), method)
    dshape, dckpt = read_model(dsrc)
    dspec = formats.detect(dshape, dsrc.hf_quant_config)
    dts = dshape.tensors()
    if dckpt is not None and dckpt.total_bytes:
        total = dckpt.total_bytes  # exactly what the drafter's files hold
    else:
        total = sum(formats.tensor_bytes(dshape, dspec, dts))
    # draft_tensor_parallel_size defaults to the target's (SpeculativeConfig._verify_and_get_draft_tp)
    tp = int(speculative.get("draft_tensor_parallel_size") or speculative.get("tensor_parallel_size") or target_tp)
    return dshape, -(-total // tp)


def _drafter_source(name: str, method: str | None) -> ModelSource:
    """The drafter's config, or a one-line way to give it when it cannot be read."""
    try:
        return load(name)
    except ConfigError as e:
        given = json.dumps({"method": method or "draft_model", "model": "/path/to/drafter"})
        raise ConfigError(
            f"the drafter's config.json cannot be read ({e}): give a directory holding it "
            f"(--speculative-config '{given}') or put it in the Hugging Face cache (`hf download {name} config.json`)",
            field="speculative_config.model",
        ) from None
