"""`vlaunch count`: resolve a model, count it, price its weights, and read exact bytes from files when present."""

from __future__ import annotations

from pathlib import Path

from launcher.common.errors import ConfigError
from launcher.common.files import expand_user
from launcher.common.records import dataclass
from launcher.common.units import GB, GiB, KiB
from launcher.model import formats
from launcher.model.arch.model import Model
from launcher.model.checkpoint import CheckpointBytes
from launcher.model.kv import KVPerToken, kv_per_token
from launcher.model.modelsource import ModelSource, load, read_model
from launcher.model.params import ParamCount, Tensor, count, tensors


@dataclass(frozen=True)
class CountResult:
    source: ModelSource
    shape: Model
    params: ParamCount
    spec: formats.FormatSpec
    weights: formats.WeightBytes
    checkpoint: CheckpointBytes | None
    kv: KVPerToken
    kv_cache_dtype: str

    @property
    def weight_bytes(self) -> int:
        """Exact bytes from the files when they are present, else the format's arithmetic."""
        if self.checkpoint is not None and self.checkpoint.total_bytes:
            return self.checkpoint.total_bytes
        return self.weights.total_bytes

    def to_json(self) -> dict[str, object]:
        s = self.shape
        weights = self.weights.to_json()
        if self.checkpoint is not None and self.checkpoint.total_bytes:
            weights["bytes"] = self.checkpoint.total_bytes
            weights["source"] = self.checkpoint.kind
            weights["estimate_bytes"] = self.weights.total_bytes
        return {
            "model": self.source.spec,
            "config": self.source.config_path,
            "model_type": s.model_type,
            "architecture": s.architecture,
            "total": self.params.total,
            "text_total": self.params.text_total,
            "parts": dict(self.params.parts),
            "detail": dict(self.params.detail),
            "per_layer": _per_layer_summary(self.params),
            "tied_embeddings": s.tied_embeddings,
            "causal": s.causal,
            "num_layers": s.num_layers,
            "layers": s.layer_summary(),
            "layer_map": "".join(_map_code(layer.code) for layer in s.layers),
            "arch_support": s.support,
            "arch_note": s.support_note,
            "family": s.family,
            "wrapper_type": s.wrapper_type,
            "towers": [type(t).__name__ for t in s.towers],
            "defaults_used": list(s.defaults_used),
            "weight_bytes": self.weight_bytes,
            "weights": weights,
            "checkpoint": self.checkpoint.to_json() if self.checkpoint else None,
            "kv_cache_dtype": self.kv_cache_dtype,
            "kv_bytes_per_token": self.kv.per_token,
            "kv": self.kv.to_json(),
        }


def _map_code(code: str) -> str:
    """One character per layer in the compact map (a layer with several mixers shows in brackets)."""
    return code if len(code) == 1 else f"({code})"


def _kinds_line(s: Model) -> str:
    parts = []
    for kind, info in s.layer_summary().items():
        extra = [f"{k} {v}" for k, v in info.items() if k in ("window", "chunk", "kv_lora_rank")]
        if info.get("bidirectional"):
            extra.append("bidirectional")
        if "state_shapes" in info:
            extra.append("state " + " + ".join("×".join(str(d) for d in shp) for shp in info["state_shapes"].values()))
        parts.append(f"{info['count']} {kind}" + (f" ({', '.join(extra)})" if extra else ""))
    return ", ".join(parts)


def _per_layer_summary(p: ParamCount) -> dict[str, int] | int:
    distinct = sorted(set(p.per_layer))
    if not distinct:  # no decoder layer (a config whose layer list is empty)
        return 0
    if len(distinct) == 1:
        return distinct[0]
    return {"min": distinct[0], "max": distinct[-1]}


def count_model(spec: str, *, fmt: str | None = None, kv_cache_dtype: str = "auto", tp: int = 1) -> CountResult:
    expand_user(spec, ConfigError)
    src = load(spec)
    shape, ckpt = read_model(src)
    ts: list[Tensor] = tensors(shape)
    detected = formats.detect(shape, src.hf_quant_config)
    fspec = formats.spec_for(fmt, shape, detected) if fmt else detected
    if fmt and ckpt is not None and formats.normalize_name(fmt) != detected.name:
        ckpt = None  # the user asks about another format than the files on disk
    return CountResult(
        source=src,
        shape=shape,
        params=count(shape, ts),
        spec=fspec,
        weights=formats.weight_bytes(shape, fspec, ts),
        checkpoint=ckpt,
        kv=kv_per_token(shape, kv_cache_dtype, tp),
        kv_cache_dtype=kv_cache_dtype,
    )


def _n(x: int) -> str:
    return f"{x:,}"


def render_count(r: CountResult) -> str:
    s, p = r.shape, r.params
    lines = [f"{r.source.spec}  ({s.model_type}, {s.architecture}, {s.num_layers} layers)"]
    if Path(r.source.config_path) != Path(r.source.spec):
        lines[0] += f"  [{r.source.origin}: {r.source.config_path}]"
    lines.append(f"layers     {_kinds_line(s)}")
    if s.support != "exact":
        lines.append(f"  read generically: {s.support_note}")
    elif s.support_note:
        lines.append(f"  note: {s.support_note}")
    lines.append(f"parameters {_n(p.total):>20}")
    width = len(_n(p.total))
    for part, n in p.parts.items():
        if n or part == "lm_head":
            note = " (tied to embedding)" if part == "lm_head" and s.tied_embeddings else ""
            lines.append(f"  {part:<10} {_n(n):>{width + 8}}  {100 * n / p.total:5.1f}%{note}")
    if p.text_total != p.total:
        lines.append(f"  language model alone {_n(p.text_total)}")
    if s.defaults_used:
        lines.append(f"  class defaults used for: {', '.join(s.defaults_used)}")
    w = r.weights
    lines.append("")
    lines.append(
        f"weights    {w.format}: {_n(w.total_bytes)} B = {w.total_bytes / GB:.2f} GB = {w.total_bytes / GiB:.2f} GiB"
        f"  ({w.bits_per_weight:.2f} bits/weight)"
    )
    if w.kept_16bit:
        lines.append(f"  kept 16-bit: {', '.join(w.kept_16bit)}")
    elif w.quantized_params:
        lines.append("  kept 16-bit: nothing")
    if w.kept_f32:
        lines.append(f"  kept F32: {', '.join(w.kept_f32)}")
    if r.checkpoint is not None and r.checkpoint.total_bytes:
        c = r.checkpoint
        lines.append(
            f"  on disk ({c.kind}, {len(c.files)} file(s)): {_n(c.total_bytes)} B = {c.total_bytes / GiB:.2f} GiB"
        )
    kv = r.kv
    lines.append("")
    per_tok = kv.per_token
    lines.append(
        f"KV cache   {r.kv_cache_dtype}: {_n(per_tok)} B/token ({per_tok / KiB:.1f} KiB)"
        + (f", per rank at tp={kv.tensor_parallel_size}" if kv.tensor_parallel_size > 1 else "")
    )
    if not s.causal:
        lines.append("  an encoder (bidirectional attention): under --runner pooling vLLM keeps no KV cache for it")
    if kv.mla:
        lines.append("  MLA: one compressed latent per layer (kv_lora_rank + rope dims), no separate K and V")
    if kv.layers_sliding:
        lines.append(
            f"  full attention {kv.layers_full} layers: {_n(kv.full_attention)} B/token; "
            f"sliding window {kv.layers_sliding} layers: {_n(kv.sliding_attention)} B/token, "
            f"capped at {_n(kv.sliding_window or 0)} tokens"
        )
    if kv.layers_without_kv:
        without = ", ".join(f"{n} {k}" for k, n in kv.layers_without_kv.items())
        lines.append(f"  no per-token KV in {without} layers (a fixed state per request, or another layer's cache)")
    if per_tok and s.causal:
        lines.append(f"  {GiB / per_tok:,.0f} tokens per GiB (all layers storing every token)")
    return "\n".join(lines)
