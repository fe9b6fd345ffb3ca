"""vLLM's own decision, layer by layer, of how each layer of a checkpoint is stored: the quantization oracle.

usage: .venv-vllm/bin/python scripts/quant_oracle.py OUT.json MODEL_DIR [MODEL_DIR ...]

Each MODEL_DIR holds a config.json (and, where the export ships one, its hf_quant_config.json). For each, this builds
vLLM's own ModelConfig (which decides the quantization method exactly as `vllm serve` does: config.json's
quantization_config, else hf_quant_config.json, then every method's override rule), its VllmConfig (which builds the
quantization config class from the same files), then the model class itself on the meta device. Every layer vLLM
constructs asks the quantization config for its method with its own prefix; that call is vLLM's, unchanged, and its
answer is recorded. The CPU build has no kernel for most quantized formats, so once the answer is recorded the layer is
built unquantized: the answer is what is wanted here, not the kernel. A method whose constructor fails for want of a
kernel is recorded by its class, read from the failing frame.

The output maps each model dir's name to {"served": bool, "reason": vLLM's refusal, "quantization": the method vLLM
chose, "model_class": …, "layers": {prefix: [kind, method class, detail]}}. tests/test_quant_oracle.py pins it.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
# vLLM's multimodal models import transformers' image processors, which import torchvision; the CPU build's torch
# has no torchvision that imports beside it. A stand-in package (scripts/oracle/torchvision_stub) lets those modules
# import: no image is processed here. vLLM inspects model classes in a subprocess, which inherits PYTHONPATH.
_STUB = str(Path(__file__).resolve().parent / "oracle" / "torchvision_stub")
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (_STUB, os.environ.get("PYTHONPATH", "")) if p)
sys.path.insert(0, _STUB)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from vllm.config import CacheConfig, DeviceConfig, LoadConfig, ModelConfig, VllmConfig, set_current_vllm_config  # noqa: E402
from vllm.distributed import init_distributed_environment, initialize_model_parallel  # noqa: E402
from vllm.model_executor.layers.fused_moe.routed_experts import RoutedExperts  # noqa: E402
from vllm.model_executor.layers.linear import LinearBase, UnquantizedLinearMethod  # noqa: E402
from vllm.model_executor.layers.quantization.base_config import QuantizeMethodBase  # noqa: E402
from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding  # noqa: E402
from vllm.model_executor.model_loader.utils import initialize_model  # noqa: E402


class _NoEvent:
    """torch.cuda.Event and Stream stand-ins: models that overlap streams create them at build time, which the CPU
    build's torch refuses (its CUDA classes are dummies). They take no part in how a layer is stored."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass


torch.cuda.Event = _NoEvent  # type: ignore[misc, assignment]
torch.cuda.Stream = _NoEvent  # type: ignore[misc, assignment]


def _dense_attention_backend() -> None:
    """The CPU platform has no sparse-attention backend (DeepSeek-V3.2's and GLM-5's indexer): choose the backend
    as for dense MLA. The attention backend has no say in how a layer's weights are stored."""
    from vllm.platforms.cpu import CpuPlatform

    real = CpuPlatform.get_attn_backend_cls.__func__  # type: ignore[attr-defined]

    def pick(cls: Any, selected_backend: Any, attn_selector_config: Any, num_heads: int | None = None) -> str:
        if getattr(attn_selector_config, "use_sparse", False):
            attn_selector_config = attn_selector_config._replace(use_sparse=False)
        return real(cls, selected_backend, attn_selector_config, num_heads)  # type: ignore[no-any-return]

    CpuPlatform.get_attn_backend_cls = classmethod(pick)  # type: ignore[method-assign, assignment]


_dense_attention_backend()


def _ungated_moe_on_cpu() -> None:
    """FusedMoEConfig refuses an ungated MoE activation (Nemotron-H's relu2) off CUDA, XPU and ROCm, as the last
    check of its __post_init__: the config is whole by then, and the check is about kernels, not storage."""
    from vllm.model_executor.layers.fused_moe.config import FusedMoEConfig

    real = FusedMoEConfig.__post_init__

    def post_init(self: Any) -> None:
        try:
            real(self)
        except NotImplementedError as e:
            if "is_act_and_mul" not in str(e):
                raise

    FusedMoEConfig.__post_init__ = post_init  # type: ignore[method-assign]


_ungated_moe_on_cpu()


def _meta_stays_meta() -> None:
    """Kimi-K2.5 moves its vision tower to the device while it is built (`.to(device=…)`), which a module on the
    meta device cannot do: leave such a module where it is. Where it lives has no say in how it is stored."""
    real = torch.nn.Module.to

    def to(self: torch.nn.Module, *args: Any, **kwargs: Any) -> torch.nn.Module:
        if any(p.is_meta for p in self.parameters()):
            return self
        return real(self, *args, **kwargs)

    torch.nn.Module.to = to  # type: ignore[method-assign, assignment]


_meta_stays_meta()


def _kind(layer: torch.nn.Module) -> str:
    if isinstance(layer, ParallelLMHead):
        return "lm_head"
    if isinstance(layer, VocabParallelEmbedding):
        return "embedding"
    if isinstance(layer, LinearBase):
        return "linear"
    if isinstance(layer, RoutedExperts):
        return "experts"
    return "other"


def _failed_method(exc: BaseException) -> str | None:
    """The quantize method whose constructor raised (the outermost such frame)."""
    for frame, _ in traceback.walk_tb(exc.__traceback__):
        me = frame.f_locals.get("self")
        if frame.f_code.co_name == "__init__" and isinstance(me, QuantizeMethodBase):
            return type(me).__name__
    return None


def _detail(config: Any, method: Any, prefix: str) -> str:
    """The format's parameters vLLM reads for this layer (ModelOpt's algo, compressed-tensors' scheme, fp8 blocks)."""
    if hasattr(config, "_resolve_quant_algo"):
        try:
            return str(config._resolve_quant_algo(prefix) or "")
        except Exception as e:
            return f"error: {e}"
    scheme = getattr(method, "scheme", None)
    if scheme is not None:
        return type(scheme).__name__
    algo = getattr(config, "quant_method", None) or getattr(config, "quant_algo", None)
    block = getattr(config, "weight_block_size", None)
    return ",".join(str(x) for x in (algo, block) if x)


def _recorder(config: Any, layers: dict[str, list[str]], asking: set[int]) -> Any:
    real = config.get_quant_method

    def get_quant_method(layer: torch.nn.Module, prefix: str) -> Any:
        kind = _kind(layer)
        asking.add(id(layer))
        try:
            method = real(layer, prefix)
            name = type(method).__name__ if method is not None else "None"
        except Exception as e:
            method, name = None, _failed_method(e) or f"error: {type(e).__name__}: {e}"
        if kind != "other":
            layers[prefix] = [kind, name, _detail(config, method, prefix)]
        if kind in ("linear", "lm_head") or (kind == "embedding" and method is not None):
            return UnquantizedLinearMethod() if kind != "embedding" else None
        if kind == "experts":
            return None
        return method

    return get_quant_method


def _vllm_config(mc: ModelConfig) -> VllmConfig:
    """The engine's config; a model whose config sets a Mamba block size (Kimi-K3) is only taken with prefix
    caching on, which has no say in how a layer is stored."""
    common: dict[str, Any] = {"load_config": LoadConfig(load_format="dummy"), "device_config": DeviceConfig("cpu")}
    try:
        return VllmConfig(model_config=mc, **common)
    except ValueError as e:
        if "--mamba-block-size can only be set with --enable-prefix-caching" not in str(e):
            raise
        return VllmConfig(model_config=mc, cache_config=CacheConfig(enable_prefix_caching=True), **common)


def _say(e: BaseException, model_dir: Path) -> str:
    """vLLM's words, on one line, with the model's own path as <model> (so two runs' records compare equal)."""
    return " ".join(str(e).replace(str(model_dir), "<model>").split())[:400]


def _one(model_dir: Path) -> dict[str, Any]:
    try:
        mc = ModelConfig(model=str(model_dir), skip_tokenizer_init=True, max_model_len=2048, trust_remote_code=False)
    except Exception as e:
        return {"served": False, "reason": _say(e, model_dir), "stage": "model_config"}
    out: dict[str, Any] = {"served": True, "quantization": mc.quantization, "architecture": mc.architecture}
    try:
        vc = _vllm_config(mc)
    except Exception as e:
        return {**out, "served": False, "reason": _say(e, model_dir), "stage": "vllm_config"}
    layers: dict[str, list[str]] = {}
    asking: set[int] = set()  # the modules that asked (a part of one is built with its answer, not asking again)
    if vc.quant_config is not None:
        vc.quant_config.get_quant_method = _recorder(vc.quant_config, layers, asking)  # type: ignore[method-assign]
    try:
        with set_current_vllm_config(vc), torch.device("meta"):
            model = initialize_model(vllm_config=vc)
    except Exception as e:
        return {**out, "layers": layers, "build_error": _say(e, model_dir)}
    out["model_class"] = type(model).__name__
    out["packed_modules_mapping"] = {k: list(v) for k, v in getattr(model, "packed_modules_mapping", {}).items()}
    # Layers built without the quantization config (routers, gates vLLM keeps in 16 bits) never asked it: their
    # method is the one they were built with.
    asked = tuple(p + "." for p in layers)
    inside = {id(sub) for mod in model.modules() if id(mod) in asking for sub in mod.modules() if sub is not mod}
    for name, mod in model.named_modules():
        kind = _kind(mod)
        if kind != "other" and name not in layers and not name.startswith(asked) and id(mod) not in inside:
            layers[name] = [kind, type(getattr(mod, "quant_method", None)).__name__, "not asked"]
    out["layers"] = layers
    return out


def main(argv: list[str]) -> int:
    out_path, dirs = Path(argv[0]), [Path(a) for a in argv[1:]]
    boot = VllmConfig()
    with set_current_vllm_config(boot):
        init_distributed_environment(
            world_size=1, rank=0, local_rank=0, backend="gloo",
            distributed_init_method=f"file://{tempfile.mktemp(prefix='quant-oracle-')}",
        )  # fmt: skip
        initialize_model_parallel(1, 1)
    results: dict[str, Any] = json.loads(out_path.read_text()) if out_path.exists() else {}
    for d in dirs:
        results[d.name] = _one(d)
        r = results[d.name]
        print(d.name, r.get("served"), r.get("quantization"), len(r.get("layers") or {}), r.get("reason", "")[:120],
              r.get("build_error", "")[:160], flush=True)  # fmt: skip
        out_path.write_text(json.dumps(results, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
