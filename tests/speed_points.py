"""The published measured decode speeds of tests/fixtures/speed-points, each planned as vlaunch plans its layout:
the decode step the point ran (its model, weights, users and context on its machine), the ceiling, and the
modelled rate the efficiencies scale. Shared by tests/test_speed_points.py and bench/speed_points.py.
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from launcher.cli.options import build_profile
from launcher.model import formats
from launcher.plan import decode, rowspeed, speed
from launcher.plan.cache import PlanCache
from launcher.plan.layers import kv_geometry, tensor_bytes
from launcher.plan.planning import make_plan

FIXTURES = Path(__file__).resolve().parent / "fixtures"
POINTS: list[dict[str, Any]] = yaml.safe_load((FIXTURES / "speed-points" / "points.yaml").read_text("utf-8"))
MODELS = {
    "Llama-3.1-8B": "meta-llama/Llama-3.1-8B-Instruct",
    "Llama-3.1-70B": "meta-llama/Llama-3.1-70B-Instruct",
    "R1-Distill-Qwen-14B": str(FIXTURES / "speed-points" / "configs" / "DeepSeek-R1-Distill-Qwen-14B.json"),
    "gpt-oss-20b": "openai/gpt-oss-20b",
    "gpt-oss-120b": "openai/gpt-oss-120b",
    "Qwen3-Coder-30B-A3B": "Qwen/Qwen3-30B-A3B",  # the same shape
    "Qwen2.5-Coder-7B": "Qwen/Qwen2.5-7B-Instruct",  # the same shape
    "Nemotron-3-Nano-30B-A3B": str(FIXTURES / "configs-v2" / "extra" / "nemotron_h--nemotron-3-nano-30b-a3b.json"),
}
OWN_FORMAT = {"gpt-oss-20b": "mxfp4", "gpt-oss-120b": "mxfp4"}
_CACHE = PlanCache()


@dataclass(frozen=True)
class Point:
    raw: dict[str, Any]
    machine: str
    engine: speed.EngineClass
    regime: speed.Regime
    step: speed.Step
    bandwidth: int
    ceiling: float  # tokens/s per user: bandwidth ÷ (one token's weights + every user's cache)
    modelled: float  # tokens/s per user at efficiency 1: the batch's experts, the state read and rewritten

    @property
    def measured(self) -> float:
        return float(self.raw["measured_tok_s_per_user"])

    @property
    def ratio(self) -> float:
        return self.measured / self.modelled

    @property
    def label(self) -> str:
        r = self.raw
        return f"{r['model']} {r['weights']} {r['engine']} {r['box']} × {r['users']} @ {r['context']}"


def _llama_cpp_gpt_oss(shape: Any, ts: list[Any], sizes: list[int]) -> list[int]:
    """llama.cpp's gpt-oss GGUF: the routed experts in MXFP4 as the checkpoint has them, every other tensor Q8_0."""
    q8 = formats.tensor_bytes(shape, formats.FormatSpec("q8_0"), ts)
    return [s if t.role == "expert" else q for t, s, q in zip(ts, sizes, q8, strict=True)]


def point(raw: dict[str, Any]) -> Point:
    machine = "rtx5090" if "5090" in raw["box"] else "dgx-spark"
    nodes = 2 if raw["box"].startswith("2") else 1
    users, context = int(raw["users"]), int(raw["context"])
    flags: dict[str, Any] = {"model": MODELS[raw["model"]], "machine": machine, "max_model_len": 4096, "users": 1}
    if raw["weights"] != OWN_FORMAT.get(raw["model"], "bf16"):
        flags["quantization"] = raw["weights"]
    plan = make_plan(build_profile(None, flags), cache=_CACHE)
    engine = speed.engine_class(raw["engine"])
    ts, sizes = tensor_bytes(plan.shape, plan.spec, _CACHE)
    if engine == "llama.cpp" and raw["model"].startswith("gpt-oss") and "ollama" not in raw["engine"].lower():
        sizes = _llama_cpp_gpt_oss(plan.shape, ts, sizes)
    kv = kv_geometry(plan.shape, "auto", 1, _CACHE)
    step = dataclasses.replace(
        rowspeed.decode_step(plan, users, _CACHE, speed.DEFAULT_MTP_ACCEPTANCE),
        weights=speed.weight_reads(plan.shape, ts, sizes, mtp=False),
        cache_bytes_per_user=kv.bytes_for_context(context),
        nodes=nodes,
    )
    bw = int(plan.machine.bandwidth_bytes_per_s or 0)
    one_token = decode.active_weight_bytes(plan.shape, ts, sizes, mtp=False)
    cache = decode.cache_read_bytes(kv, context, plan.prediction.state_bytes_per_request)
    ceiling = decode.ceiling(weights_bytes=one_token, cache_bytes_per_user=cache, users=users,
                             tensor_parallel_size=1, bandwidth_bytes_per_s=bw).tokens_per_s  # fmt: skip
    hybrid = bool(plan.prediction.state_bytes_per_request)
    regime = speed.regime(users=users, moe=plan.shape.is_moe, hybrid=hybrid, nodes=nodes)
    unit = speed.Efficiency(1.0, "default", "unit")
    modelled = speed.expected_decode(step, bandwidth_bytes_per_s=bw, eff=unit, regime_=regime).tokens_per_s
    return Point(raw, machine, engine, regime, step, bw, ceiling, modelled)


def all_points() -> list[Point]:
    return [point(p) for p in POINTS]


def expected(p: Point) -> float:
    """The point's expected speed with vlaunch's efficiency for its machine, engine class and regime."""
    return p.modelled * speed.efficiency(p.machine, p.regime, p.engine).value


def refit(points: list[Point]) -> dict[tuple[str, str, str], tuple[float, int]]:
    """The efficiency table from the points: the median of measured ÷ modelled per machine, engine and regime."""
    groups: dict[tuple[str, str, str], list[float]] = {}
    for p in points:
        groups.setdefault((p.machine, p.engine, p.regime), []).append(p.ratio)
    return {k: (statistics.median(v), len(v)) for k, v in groups.items()}
