"""`vlaunch fit`: the ways to run one model on a box, each planned by `plan` itself, ranked.

A user's choices are enumerated — the weight format (the checkpoint's own; for a 16-bit checkpoint the formats
vLLM makes from it while loading), the KV cache dtype, tensor / pipeline parallel over the box's GPUs (or two
Sparks), MTP speculative decoding where the checkpoint has it, max_num_seqs — and every one becomes a profile that
`planning.make_plan` plans: no second model of memory. The longest context a number of users can have is a
search over max_model_len whose every answer is confirmed by plans on both sides of it (it fits, one token more
does not).

Targets decide what a row is: with --users N and --context C each option is planned for N users × C tokens;
with --users alone at the longest context N users fit; with --context alone (or nothing) for one user at C (or the
model's context), the rows then saying how many users fit and how long a context 1, 4 and 16 users get.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Iterable
from typing import Any, Literal

from launcher.common.errors import VlaunchError
from launcher.common.records import dataclass
from launcher.common.units import GiB, last_true
from launcher.model.arch.model import Model
from launcher.model.formats import FormatSpec
from launcher.model.kv import kv_per_token
from launcher.plan import decode, speed
from launcher.plan.cache import PlanCache
from launcher.plan.machines import Machine
from launcher.plan.planning import Plan, make_plan
from launcher.plan.profiles import Profile
from launcher.plan.rowspeed import RowSpeed, row_speed
from launcher.plan.speed import DEFAULT_MTP_ACCEPTANCE
from launcher.plan.verdict import known_gpus
from launcher.vllm import pool as vp
from launcher.vllm import quant
from launcher.vllm import versions as V
from launcher.vllm.kvdtypes import checkpoint_kv_dtype

# Fewest quality compromises first: weights as priced (16-bit > 8-bit > 4-bit floating point > 4-bit integer), then
# the KV cache (the model's dtype > fp8).
WEIGHT_QUALITY: dict[str, int] = {
    "fp32": 0, "bf16": 0, "fp16": 0,
    "fp8": 1, "int8": 1, "q8_0": 1, "mxfp8": 1,
    "nvfp4": 2, "mxfp4": 2,
    "awq": 3, "gptq": 3, "w4a16": 3, "q4_k_m": 3,
}  # fmt: skip
# What vLLM makes from a 16-bit checkpoint while loading it that fit offers, where the release has it (quant.online),
# in quality order: fp8 for every layer; MXFP4 for every layer; NVFP4 for the MoE experts alone (Blackwell SM10x).
# fp8's block and channel variants and MXFP8 weigh as fp8 within a few scale bytes: `-q` plans them.
ONLINE_CHOICES: tuple[str, ...] = ("fp8", "mxfp4", "nvfp4_per_token")
USER_COUNTS = (1, 4, 16)  # without --users: the longest context for each
SPARK_HOSTS = ("spark-1", "spark-2")  # placeholders a two-Spark profile is written with: set them to the real ones

Mode = Literal["users+context", "users", "context", "none"]  # what the target gives: see Target.mode


@dataclass(frozen=True)
class Option:
    """One way to run the model: the choices a row makes (max_model_len and users come from the target)."""

    format: str  # the weights as served: the checkpoint's own format, or the --quantization that makes them
    own: bool  # the checkpoint's own format (no --quantization)
    kv_cache_dtype: str  # "auto" or "fp8"
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    nodes: int = 1  # machines (a DGX Spark holds one GPU: two Sparks are two nodes)
    speculative: tuple[tuple[str, Any], ...] = ()  # vLLM's speculative_config; () off
    max_num_seqs: int | None = None  # None: vLLM's default
    expert_parallel: bool = False  # MoE experts split whole across the tensor-parallel ranks

    @property
    def gpus(self) -> int:
        return self.tensor_parallel_size * self.pipeline_parallel_size

    def flags(self) -> list[str]:
        """The vLLM flags (as `vlaunch plan` takes them) that make this option from the model's defaults."""
        out: list[str] = []
        if not self.own:
            out += ["--quantization", self.format]
        if self.kv_cache_dtype != "auto":
            out += ["--kv-cache-dtype", self.kv_cache_dtype]
        if self.tensor_parallel_size > 1:
            out += ["-tp", str(self.tensor_parallel_size)]
        if self.pipeline_parallel_size > 1:
            out += ["-pp", str(self.pipeline_parallel_size)]
        if self.speculative:
            import json

            out += ["--speculative-config", json.dumps(dict(self.speculative), separators=(",", ":"))]
        if self.max_num_seqs is not None:
            out += ["--max-num-seqs", str(self.max_num_seqs)]
        if self.expert_parallel:
            out += ["--enable-expert-parallel"]
        return out


def _tps(v: float | None) -> str:
    return "unknown" if v is None else f"{v:,.1f}"


def _secs(v: float | None) -> str:
    return "unknown" if v is None else f"{v:,.2f} s"


@dataclass(frozen=True)
class Target:
    users: int | None = None
    context: int | None = None
    min_tokens_per_s: float | None = None  # expected decode per user at least this
    max_ttft_s: float | None = None  # expected time to first token at the row's context at most this

    def misses(self, rs: RowSpeed | None) -> tuple[str, ...]:
        """The targets a row's expected speed misses (a row without a speed misses any speed target)."""
        out: list[str] = []
        if self.min_tokens_per_s is not None:
            got = rs.expected.tokens_per_s if rs else None
            if got is None or got < self.min_tokens_per_s:
                out.append(f"decode {_tps(got)} < {self.min_tokens_per_s:g} tokens/s per user")
        if self.max_ttft_s is not None:
            ttft = rs.ttft_s if rs else None
            if ttft is None or ttft > self.max_ttft_s:
                out.append(f"time to first token {_secs(ttft)} > {self.max_ttft_s:g} s")
        return tuple(out)

    def to_json(self) -> dict[str, Any]:
        return {"users": self.users, "context": self.context, "mode": self.mode,
                "min_tokens_per_s": self.min_tokens_per_s, "max_ttft_s": self.max_ttft_s}  # fmt: skip

    @property
    def mode(self) -> Mode:
        if self.users is not None and self.context is not None:
            return "users+context"
        if self.users is not None:
            return "users"
        return "context" if self.context is not None else "none"


@dataclass(frozen=True)
class Row:
    machine: str
    option: Option
    plan: Plan  # the row as `plan` gives it: this option at max_model_len × users
    users: int
    max_model_len: int
    max_users: int  # users memory holds at max_model_len
    max_context: int  # the longest context `users` users fit (0: none)
    max_context_by_users: dict[int, int]
    decode: decode.DecodeCeiling | None
    headroom_bytes: int  # memory left per GPU after the row's buckets (negative: short by that much)
    binding_bucket: str | None
    needs_checkpoint: bool
    speed: RowSpeed | None = None
    misses: tuple[str, ...] = ()  # the targets (--min-tokens-per-s, --max-ttft) the row's expected speed misses
    rank: int = 0
    chosen: bool = False

    @property
    def fits(self) -> bool:
        return self.plan.fits

    @property
    def quality(self) -> tuple[int, int]:
        return WEIGHT_QUALITY.get(self.plan.spec.name, 3), 0 if self.option.kv_cache_dtype == "auto" else 1

    @property
    def eligible(self) -> bool:
        """It fits, runs from the checkpoint the user has, and meets the targets: a row that can be chosen."""
        return self.fits and not self.needs_checkpoint and not self.misses

    @property
    def expected_tokens_per_s(self) -> float:
        return self.speed.expected.tokens_per_s if self.speed is not None else 0.0

    def reasons(self) -> list[str]:
        """Why the row does not fit or cannot be chosen: vLLM's refusal, the plan's reasons, the checkpoint it
        needs, the targets it misses."""
        out = ([self.plan.invalid] if self.plan.invalid else []) + list(self.plan.prediction.reasons)
        if self.needs_checkpoint:
            fmt, version = self.option.format, V.fmt_version(self.plan.prediction.args.version)
            out.append(f"needs a {fmt} checkpoint: vLLM {version} does not make {fmt} from a "
                       f"{self.plan.stored.name} one while loading")  # fmt: skip
        return out + [f"misses the target: {m}" for m in self.misses]

    def decode_json(self) -> dict[str, Any] | None:
        if self.decode is None:
            return None
        out = self.decode.to_json()
        if self.speed is not None:
            out.update(self.speed.expected.to_json())
            out.update({"ttft_s": None if self.speed.ttft_s is None else round(self.speed.ttft_s, 3),
                        "ttft_source": self.speed.ttft_source, "ttft_basis": self.speed.ttft_basis})  # fmt: skip
        return out

    def to_json(self) -> dict[str, Any]:
        p = self.plan.prediction
        users = max(self.users, 1)
        return {
            "rank": self.rank,
            "chosen": self.chosen,
            "machine": self.machine,
            "format": self.option.format,
            "checkpoint_format": "own" if self.option.own else "online" if not self.needs_checkpoint else "needed",
            "kv_cache_dtype": self.option.kv_cache_dtype,
            "max_model_len": self.max_model_len,
            "tensor_parallel_size": self.option.tensor_parallel_size,
            "pipeline_parallel_size": self.option.pipeline_parallel_size,
            "nodes": self.option.nodes,
            "gpus": self.option.gpus,
            "speculative_config": dict(self.option.speculative) or None,
            "max_num_seqs": p.args.max_num_seqs,
            "users": self.users,
            "fits": self.fits,
            "binding_bucket": self.binding_bucket,
            "gpu_memory_utilization": p.gpu_memory_utilization,
            "os_reserve_bytes": p.os_reserve_bytes,
            "os_reserve_left_bytes": p.total_bytes - p.held_bytes if self.plan.machine.unified else None,
            "weights_bytes": p.weights_bytes,
            "kv_bytes_per_token": p.kv_bytes_per_token,
            "kv_bytes_per_user": (p.kv_need_bytes - p.state_need_bytes) // users,
            "state_bytes_per_request": p.state_bytes_per_request,
            "headroom_bytes": self.headroom_bytes,
            "max_users": self.max_users,
            "max_context": self.max_context,
            "max_context_by_users": {str(k): v for k, v in self.max_context_by_users.items()},
            "decode_tokens_per_s_ceiling": None if self.decode is None else round(self.decode.tokens_per_s, 2),
            "decode": self.decode_json(),
            "expert_parallel": self.option.expert_parallel,
            "needs_checkpoint": self.needs_checkpoint,
            "meets_targets": not self.misses,
            "target_misses": list(self.misses),
            "quality": list(self.quality),
            "flags": [*self.option.flags(), "--max-model-len", str(self.max_model_len), "--users", str(self.users)],
            "reasons": self.reasons(),
            "kv_pool_tokens": p.pool.tokens,
            "max_concurrency": round(p.pool.max_concurrency, 2),
            "vllm_argv": self.plan.shown_argv,
        }


@dataclass(frozen=True)
class Fit:
    model: str
    model_type: str | None
    checkpoint_format: str
    target: Target
    machines: tuple[Machine, ...]
    rows: tuple[Row, ...]
    vllm_version: str
    vllm_version_source: str
    model_context: int
    options: int
    plans: int
    seconds: float
    notes: tuple[str, ...] = ()
    prefer: Prefer = "balanced"
    mtp_acceptance: float = DEFAULT_MTP_ACCEPTANCE

    @property
    def fits(self) -> bool:
        return any(r.fits for r in self.rows)

    @property
    def meets_targets(self) -> bool:
        return any(r.eligible for r in self.rows)

    @property
    def ranking_rule(self) -> str:
        return ranking_rule(self.prefer, self.target.mode)

    def chosen(self, machine: str | None = None) -> Row | None:
        return next((r for r in self.rows if r.chosen and (machine is None or r.machine == machine)), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "model_type": self.model_type,
            "checkpoint_format": self.checkpoint_format,
            "model_context": self.model_context,
            "target": self.target.to_json(),
            "prefer": self.prefer,
            "ranking_rule": self.ranking_rule,
            "mtp_acceptance": self.mtp_acceptance,
            "meets_targets": self.meets_targets,
            "machine": self.machines[0].name,
            "machines": [
                {
                    "name": m.name,
                    "total_bytes": m.total_bytes,
                    "unified": m.unified,
                    "bandwidth_bytes_per_s": m.bandwidth_bytes_per_s,
                    "bandwidth_source": m.bandwidth_source,
                }
                for m in self.machines
            ],
            "vllm_version": self.vllm_version,
            "vllm_version_source": self.vllm_version_source,
            "fits": self.fits,
            "chosen": next((r.rank for r in self.rows if r.chosen), None),
            "options": [r.to_json() for r in self.rows],
            "search": {"options": self.options, "plans": self.plans, "seconds": round(self.seconds, 3)},
            "decode_note": DECODE_NOTE,
            "notes": list(self.notes),
        }


DECODE_NOTE = (
    "decode_tokens_per_s_ceiling is an upper bound, not a benchmark: memory bandwidth ÷ the bytes one decode step "
    "reads (active weights — a MoE token's experts only — plus every user's KV cache at the full context), per user. "
    "decode.expected_tokens_per_s is what to expect: the experts a batch really touches, the recurrent state read and "
    "rewritten, MTP at its acceptance rate and the link between boxes, at the share of the bandwidth vLLM-class "
    "engines reach in that regime (expected_source: measured on this box, calibrated from published points, or a "
    "default); ttft_s is one user's prefill at the row's context"
)


class NothingFits(VlaunchError):
    """--write-profile when no row fits and none was picked."""

    exit_code = 3


def row_profile(row: Row, name: str) -> Profile:
    """The row as a profile `plan` and `serve` take: its choices, its context and users, and the
    gpu_memory_utilization fit picked for them (written as a number, so a launch claims what the row shows)."""
    p = row.plan.profile
    pred = row.plan.prediction
    o = row.option
    where = f"{o.nodes} × {row.machine}" if o.nodes > 1 else row.machine
    changes: dict[str, Any] = {
        "name": name,
        "description": f"{row.plan.profile.model}: {o.format} weights, KV {o.kv_cache_dtype}, "
        f"{row.users} × {row.max_model_len:,} tokens on {where} (vlaunch fit)",
    }
    if p.gpu_memory_utilization == "auto":
        changes["gpu_memory_utilization"] = pred.gpu_memory_utilization
    return p.with_overrides(**changes)


def profile_text(row: Row, name: str, fit: Fit) -> str:
    """row_profile as YAML, after comment lines saying what the row costs and what a launch still needs."""
    from launcher.plan.profiles import profile_yaml

    o = row.option
    pred = row.plan.prediction
    users = max(row.users, 1)
    lines = [
        f"vlaunch fit, rank {row.rank} of {len(fit.rows)}: {fit.model} on {row.machine}"
        + (f" ({o.nodes} nodes)" if o.nodes > 1 else ""),
        f"weights {pred.weights_bytes / GiB:.2f} GiB per GPU, KV + state {pred.kv_need_bytes / users / GiB:.2f} GiB "
        f"per user, binds: {row.binding_bucket}, gpu_memory_utilization {pred.gpu_memory_utilization:.2f}",
        f"at most {row.max_users} users at {row.max_model_len:,} tokens; {row.users} user(s) up to "
        f"{row.max_context:,} tokens",
    ]
    if row.decode is not None:
        lines.append(
            f"decode ≤ {row.decode.tokens_per_s:,.1f} tokens/s per user: a ceiling (bandwidth ÷ bytes per step), "
            "not a benchmark"
        )
    if row.needs_checkpoint:
        lines.append(
            f"model: is the checkpoint this row was priced from; serving {o.format} takes a {o.format} checkpoint "
            "of it: point model: at one"
        )
    if o.nodes > 1 and all(n.host in SPARK_HOSTS for n in row.plan.profile.nodes):
        lines.append("nodes: spark-1 and spark-2 stand for the two Sparks: set each host: to its address")
    if row.plan.profile.gpu_memory_utilization == "auto":
        lines.append("gpu_memory_utilization is the row's; `auto` re-sizes it at every launch")
    return profile_yaml(row_profile(row, name), comment="\n".join(lines))


# --- what a user can choose -----------------------------------------------------------------------------------


def format_choices(
    shape: Model, stored: FormatSpec, machine: Machine, version: V.Version, pinned: tuple[str, ...] = ()
) -> list[tuple[str, bool]]:
    """(format, own) pairs: the pinned ones; else the checkpoint's own, and for a 16-bit checkpoint what vLLM makes
    from it while loading at this release (quant.online) that the GPU runs: a quantized checkpoint is served as it
    is, and a format it does not hold is no choice."""
    own = "bf16" if stored.name == "fp32" and not stored.layers else stored.name  # fp32 is served in 16 bits
    if pinned:
        sixteen = own in quant.SIXTEEN_BIT
        return [(f, f == own or (sixteen and f in quant.SIXTEEN_BIT)) for f in dict.fromkeys(pinned)]
    out: list[tuple[str, bool]] = [(own, True)]
    if stored.method is not None or machine.backend == "cpu" or not shape.causal:
        return out  # a quantized checkpoint is served as it is; the CPU build and encoders: their own dtype
    made = quant.online(version)
    for name in ONLINE_CHOICES:
        if name not in made or (name == "nvfp4_per_token" and not shape.is_moe):
            continue  # not in this release; NVFP4 online quantizes MoE experts alone
        spec = quant.resolve(name, stored, shape, version).spec
        why = quant.refusal(spec.name, version=version, platform="cuda", compute_capability=machine.compute_capability,
                            model_type=shape.model_type, method=name)  # fmt: skip
        if why is None:  # the GPU runs its kernels
            out.append((name, False))
    return out


def kv_choices(shape: Model, pinned: str | None, pooling: bool = False) -> list[str]:
    if pinned is not None:
        return [pinned]
    if pooling or kv_per_token(shape).per_token == 0:
        return ["auto"]  # no attention layer keeps a KV cache (a pooling runner keeps none)
    if (ckpt := checkpoint_kv_dtype(shape, None, V.LATEST)) is not None and ckpt.taken:
        return ["auto"]  # the checkpoint's own KV cache is fp8 (or nvfp4) already: vLLM takes it for auto
    return ["auto", "fp8"]


def layout_choices(
    shape: Model, machine: Machine, gpus: int, max_nodes: int, base: Profile, pinned: tuple[int, int] | None
) -> list[tuple[int, int, int]]:
    """(tp, pp, nodes): one GPU; tensor parallel over 2, 4, … of the box's GPUs, and pipeline parallel over two
    (within one box tensor parallel is the faster split; two stages are the cheapest in memory); on a one-GPU
    unified machine (a DGX Spark) tensor or pipeline parallel over up to `max_nodes` of them."""
    if base.nodes:
        return [(base.tensor_parallel_size, base.pipeline_parallel_size, len(base.nodes))]
    per_node = 1 if machine.unified and machine.backend == "cuda" else max(gpus, 1)

    def nodes_for(tp: int, pp: int) -> int:
        return -(-(tp * pp) // per_node)

    if pinned is not None:
        return [(pinned[0], pinned[1], nodes_for(*pinned))]
    if machine.backend == "cpu":
        return [(1, 1, 1)]
    most = per_node * (max_nodes if per_node == 1 and machine.unified else 1)
    out = [(1, 1, 1)]
    k = 2
    while k <= most:
        if shape.num_heads % k == 0:
            out.append((k, 1, nodes_for(k, 1)))
        if k <= shape.num_layers and (k == 2 or per_node == 1):
            out.append((1, k, nodes_for(1, k)))
        k *= 2
    return out


def expert_parallel_choices(shape: Model, tp: int, pinned: bool) -> list[bool]:
    """Expert parallel where vLLM offers it: a MoE split over tensor-parallel ranks (held when the profile sets it)."""
    if pinned:
        return [True]
    return [False, True] if shape.is_moe and tp > 1 and tp <= _routed_experts(shape) else [False]


def _routed_experts(shape: Model) -> int:
    """The fewest routed experts of a decoder MoE layer (expert parallel needs at least one per rank)."""
    return min((e for i, (_, e) in decode.expert_share(shape).items() if i < shape.num_layers), default=0)


def speculative_choices(shape: Model, pinned: tuple[tuple[str, Any], ...] | None) -> list[tuple[tuple[str, Any], ...]]:
    if pinned is not None:
        return [pinned]
    if not shape.mtp_layers:
        return [()]
    return [(), (("method", "mtp"), ("num_speculative_tokens", len(shape.mtp_layers)))]


# --- the search -----------------------------------------------------------------------------------------------


class _Planner:
    """Plans of one base profile with options applied, each made once."""

    def __init__(
        self,
        base: Profile,
        use_calibration: bool,
        detect: bool = False,
        cache: PlanCache | None = None,
        free_bytes: int | None = None,
    ):
        self.base = base
        self.use_calibration = use_calibration
        self.detect = detect
        self.free_bytes = free_bytes  # memory free at launch on this machine, as `plan --free-gib` takes it
        self.cache = PlanCache() if cache is None else cache
        self.profiles: dict[Option, Profile] = {}
        self.plans: dict[tuple[Option, int, int], Plan] = {}

    def profile(self, o: Option) -> Profile:
        if o not in self.profiles:
            self.profiles[o] = option_profile(self.base, o)
        return self.profiles[o]

    def plan(self, o: Option, length: int, users: int) -> Plan:
        key = (o, length, users)
        if key not in self.plans:
            p = dataclasses.replace(self.profile(o), max_model_len=length, users=users)
            self.plans[key] = make_plan(
                p,
                free_bytes=self.free_bytes,
                use_calibration=self.use_calibration,
                detect=self.detect,
                cache=self.cache,
            )
        return self.plans[key]


def option_profile(base: Profile, o: Option) -> Profile:
    """The base profile with an option's choices (validated as if written in a profile)."""
    changes: dict[str, Any] = {
        "quantization": None if o.own else o.format,
        "kv_cache_dtype": o.kv_cache_dtype,
        "tensor_parallel_size": o.tensor_parallel_size,
        "pipeline_parallel_size": o.pipeline_parallel_size,
        "speculative_config": dict(o.speculative) or None,
        "max_num_seqs": o.max_num_seqs,
        "enable_expert_parallel": o.expert_parallel,
    }
    if o.nodes > 1 and not base.nodes:
        per = max(1, o.gpus // o.nodes)
        changes["nodes"] = [
            {
                "host": host,
                "role": "head" if i == 0 else "worker",
                "machine": base.machine,
                "gpus": per,
                "os_reserve_gib": base.os_reserve_gib,
                "gpu_memory_gib": base.gpu_memory_gib,
            }
            for i, host in enumerate(_hosts(o.nodes))
        ]
        changes["distributed_executor_backend"] = "ray"
    return base.with_overrides(**changes)


def _hosts(n: int) -> list[str]:
    return [SPARK_HOSTS[i] if i < len(SPARK_HOSTS) else f"node-{i + 1}" for i in range(n)]


def longest_context(planner: _Planner, o: Option, users: int, top: int) -> tuple[int, Plan]:
    """The longest max_model_len ≤ top at which `users` users fit in memory, with the plan at it (at `top` when
    none fits). The pool and room of the plan at `top` give the answer for every length whose buckets do not
    depend on it; plans at the answer and one token past it confirm it, and a search by plans takes over when
    they do not."""
    at_top = planner.plan(o, top, users)
    if at_top.prediction.fits:
        return top, at_top

    def fits(length: int) -> bool:
        return planner.plan(o, length, users).prediction.fits

    lo, hi = 1, top - 1  # `top` does not fit
    guess = _estimate(at_top, users, top)
    if guess >= 1 and fits(guess):
        if guess == hi or not fits(guess + 1):
            return guess, planner.plan(o, guess, users)
        lo = guess + 1  # the estimate fell short: search above it
    else:
        hi = guess - 1 if guess >= 1 else hi  # it overshot: search below it
        if hi < 1 or not fits(1):
            return 0, at_top
    longest = last_true(lo, hi, fits)  # the estimate missed: search by plans
    return longest, planner.plan(o, longest, users)


def _estimate(at_top: Plan, users: int, top: int) -> int:
    """The longest length whose `users` requests fit the pool and the room of the plan at `top` (0: none)."""
    pred = at_top.prediction
    lay = pred.layout
    if not lay.groups or not lay.bytes_per_block:
        return 0
    if pred.failure in ("weights_do_not_fit", "no_kv_memory", "eats_os_reserve", "insufficient_free_memory"):
        return 0
    ctx0 = pred.args.context()

    def ok(length: int) -> bool:
        ctx = dataclasses.replace(ctx0, max_model_len=length)
        per_req = vp.blocks_per_request(lay, ctx)
        if users * per_req * lay.bytes_per_block > pred.room_bytes:
            return False  # the lesson's room: memory − OS − weights − overhead − activation
        pool = vp.pool(lay, pred.available_kv_bytes, ctx, engine=pred.args.engine,
                       num_blocks_override=pred.args.num_gpu_blocks_override)  # fmt: skip
        return pool.num_blocks >= per_req and pool.max_concurrency >= users

    return last_true(1, top - 1, ok) if ok(1) else 0  # `top` does not fit: its plan says so


def binding_bucket(plan: Plan) -> str | None:
    """The bucket that stops the row (or, when it fits, the one that grows with each user)."""
    p = plan.prediction
    if plan.invalid and p.fits:
        return None  # vLLM refuses the settings, not the memory
    kv_attention = p.kv_need_bytes - p.state_need_bytes
    per_user = "state" if p.state_need_bytes > kv_attention else "kv_cache"
    return {
        None: per_user,
        "weights_do_not_fit": "weights",
        "no_kv_memory": "activation" if p.activation_peak_bytes >= p.overhead_bytes else "overhead",
        "kv_too_small_for_max_model_len": per_user,
        "users_do_not_fit": per_user,
        "eats_os_reserve": "os_reserve",
        "insufficient_free_memory": "free_memory",
        "cuda_oom": "overhead",
        "kv_cache_memory_too_large": "kv_cache",
    }.get(p.failure, per_user)


def decode_ceiling(
    plan: Plan, users: int, bandwidth: int | None, cache: PlanCache | None = None
) -> decode.DecodeCeiling | None:
    """The decode speed a row's memory bandwidth allows at most (None without a bandwidth figure, and for a pooling
    model, which decodes nothing)."""
    if not bandwidth or plan.prediction.args.pooling:
        return None
    from launcher.plan.layers import kv_geometry, tensor_bytes

    cache = PlanCache() if cache is None else cache
    shape, a = plan.shape, plan.prediction.args
    ts, sizes = tensor_bytes(shape, plan.spec, cache)
    mtp = a.speculative_method == "mtp"
    weights = cache.get(
        ("active_weights", id(shape), plan.spec, mtp),
        lambda: decode.active_weight_bytes(shape, ts, sizes, mtp=mtp),
        shape,
    )
    kv = kv_geometry(shape, a.kv_cache_dtype, a.tensor_parallel_size, cache)
    state = plan.prediction.state_bytes_per_request * a.pipeline_parallel_size  # every stage's state layers
    cache_bytes = decode.cache_read_bytes(kv, a.max_model_len, state)
    spec = a.num_speculative_tokens if a.speculative_method == "mtp" else 0
    return decode.ceiling(
        weights_bytes=weights,
        cache_bytes_per_user=cache_bytes,
        users=users,
        tensor_parallel_size=a.tensor_parallel_size,
        bandwidth_bytes_per_s=bandwidth,
        speculative_tokens=spec,
    )


def _row(
    planner: _Planner,
    machine: Machine,
    o: Option,
    search: _Search,
    top: int,
    bandwidth: int | None,
    measured: dict[str, speed.Efficiency] | None = None,
) -> Row:
    target = search.target
    by_users: dict[int, int] = {}
    if target.mode == "users+context":
        assert target.users is not None and target.context is not None
        plan = planner.plan(o, target.context, target.users)
        users, length = target.users, target.context
        by_users[users], _ = longest_context(planner, o, users, top)
    elif target.mode == "users":
        assert target.users is not None
        users = target.users
        longest, plan = longest_context(planner, o, users, top)
        by_users[users] = longest
        length = plan.prediction.args.max_model_len
    else:
        users = 1
        for n in USER_COUNTS:
            by_users[n], _ = longest_context(planner, o, n, top)
        length = target.context or (by_users[1] if 0 < by_users[1] < top else top)
        plan = planner.plan(o, length, users)
    p = plan.prediction
    ceiling = decode_ceiling(plan, users, bandwidth, planner.cache)
    rs = None
    if ceiling is not None and bandwidth:
        rs = row_speed(plan, users, bandwidth, planner.cache, acceptance=search.mtp_acceptance, measured=measured)
    return Row(
        machine=machine.name,
        option=o,
        plan=plan,
        users=users,
        max_model_len=length,
        max_users=p.max_users,
        max_context=by_users.get(users, 0),
        max_context_by_users=by_users,
        decode=ceiling,
        headroom_bytes=p.total_bytes - p.plan_total_bytes,
        binding_bucket=binding_bucket(plan),
        needs_checkpoint=_format_refused(plan),
        speed=rs,
        misses=target.misses(rs),
    )


def _format_refused(plan: Plan) -> bool:
    """The row's format is one the checkpoint does not hold and vLLM does not make while loading it."""
    p = plan.profile
    return quant.resolve(p.quantization, plan.stored, plan.shape, plan.prediction.args.version).refusal is not None


Prefer = Literal["speed", "balanced", "quality"]
PREFERS: tuple[Prefer, ...] = ("speed", "balanced", "quality")
DEFAULT_PREFER: Prefer = "balanced"
"""balanced by default: on the boxes people own, decode speed is what a user feels, while 8-bit weights and an fp8
KV cache cost a quality difference few users see; 4-bit weights made from the checkpoint cost more, so they win
only when nothing closer fits."""
SPEED_STEP = 1.05
"""Expected speeds within 5 % rank alike: the model is not finer than that."""
_ROOM = {"users+context": "memory left", "users": "context for the users", "context": "users", "none": "users"}


def balanced_tier(r: Row) -> int:
    """How far the row's weights are from the checkpoint's, as a user would notice: its own format and 8-bit 0,
    4-bit floating point (NVFP4, MXFP4) 1, 4-bit integer 2."""
    if r.option.own:
        return 0
    q = WEIGHT_QUALITY.get(r.plan.spec.name, 3)
    return 0 if q <= 1 else q - 1


def _speed_step(r: Row) -> int:
    """Expected tokens/s per user in SPEED_STEP steps, fastest first (ceiling where no expected figure)."""
    tps = r.expected_tokens_per_s or (r.decode.tokens_per_s if r.decode is not None else 0.0)
    return -round(math.log(tps) / math.log(SPEED_STEP)) if tps > 0 else 0


def _room(r: Row, mode: Mode) -> int:
    """Memory left in whole GiB with a target of users and context, else the longest context in whole thousands of
    tokens (--users), else the most users."""
    if mode == "users+context":
        return r.headroom_bytes // GiB
    if mode == "users":
        return r.max_context // 1024
    return r.max_users


def rank_key(r: Row, mode: Mode, prefer: Prefer = DEFAULT_PREFER) -> tuple[Any, ...]:
    """Rows that can be chosen first (they fit, run from the checkpoint at hand, meet the targets); then by the
    goal (ranking_rule says it in words); ties: without MTP, without expert parallel, vLLM's max_num_seqs."""
    head = (not r.fits, r.needs_checkpoint, bool(r.misses))
    tail = (bool(r.option.speculative), r.option.expert_parallel, r.option.max_num_seqs or 0)
    kv = r.quality[1]
    if prefer == "quality":
        return (*head, *r.quality, r.option.gpus, _speed_step(r), -_room(r, mode), *tail)
    if prefer == "speed":
        return (*head, _speed_step(r), balanced_tier(r), kv, r.option.gpus, -_room(r, mode), *tail)
    return (*head, balanced_tier(r), r.option.gpus, _speed_step(r), kv, -_room(r, mode), *tail)


def ranking_rule(prefer: Prefer, mode: Mode) -> str:
    """rank_key in one line."""
    first = "rows that fit, run from the checkpoint at hand and meet the targets first; then "
    speed = "fastest expected decode per user (5 % steps)"
    room = f"most {_ROOM[mode]}"
    if prefer == "quality":
        return first + f"weights closest to 16 bits, KV cache in the model's dtype, fewest GPUs, {speed}, {room}"
    if prefer == "speed":
        return first + f"{speed}, then weights closest to the checkpoint, fewest GPUs, {room}"
    return first + (f"weights within 8 bits of the checkpoint (4-bit float next, 4-bit integer last), fewest GPUs, "
                    f"{speed}, KV cache in the model's dtype, {room}")  # fmt: skip


def _same_memory(a: Row, b: Row) -> bool:
    pa, pb = a.plan.prediction, b.plan.prediction
    return (pa.activation_peak_bytes, pa.gpu_memory_utilization, pa.pool.num_blocks, a.max_context) == (
        pb.activation_peak_bytes, pb.gpu_memory_utilization, pb.pool.num_blocks, b.max_context,
    )  # fmt: skip


def without_idle_seqs(rows: list[Row]) -> list[Row]:
    """Rows with a smaller max_num_seqs that change nothing in memory (the sampler's warm-up is not the peak, or
    the overhead is given) are left out: they would repeat the row with vLLM's default."""
    default = {dataclasses.replace(r.option, max_num_seqs=None): r for r in rows if r.option.max_num_seqs is None}
    return [
        r
        for r in rows
        if r.option.max_num_seqs is None
        or (d := default.get(dataclasses.replace(r.option, max_num_seqs=None))) is None
        or not _same_memory(r, d)
    ]


def search(
    base: Profile,
    machines: Iterable[str],
    target: Target,
    *,
    gpus: int | None = None,
    max_nodes: int | None = None,
    prefer: Prefer = DEFAULT_PREFER,
    mtp_acceptance: float = DEFAULT_MTP_ACCEPTANCE,
    formats_allowed: tuple[str, ...] | None = None,
    pinned: dict[str, Any] | None = None,
    bandwidth_gbs: float | None = None,
    use_calibration: bool = True,
    detect: bool = False,
    free_bytes: int | None = None,
) -> Fit:
    """Every option on every machine, planned and ranked; the first row of each machine is marked chosen.
    `detect`: the launch's python may be run to read its vLLM version (--detect-version). `free_bytes`: memory free
    at launch on the first machine (`--free-gib`); the machines compared with it are planned empty. `max_nodes`:
    boxes a model may span (None: the base profile's nodes, else one)."""
    started = time.perf_counter()
    nodes = max_nodes if max_nodes is not None else max(len(base.nodes), 1)
    search = _Search(target, gpus, nodes, formats_allowed, pinned or {}, bandwidth_gbs, use_calibration, detect,
                     prefer, mtp_acceptance)  # fmt: skip
    rows: list[Row] = []
    machine_list: list[Machine] = []
    notes: list[str] = []
    first: Plan | None = None
    options = plans = 0
    cache = PlanCache()  # the model's work, shared by every plan of the search
    for i, name in enumerate(dict.fromkeys(machines)):
        prof = base if i == 0 else base.with_overrides(machine=name, gpu_memory_gib=None)
        free = free_bytes if i == 0 else None
        planner = _Planner(prof, use_calibration, detect, cache, free)
        probe = make_plan(
            dataclasses.replace(prof, max_model_len=target.context, users=target.users or 1),
            free_bytes=free,
            use_calibration=use_calibration,
            detect=detect,
            cache=cache,
        )
        first = first or probe
        machine_list.append(probe.machine)
        machine_rows = _machine_rows(search, planner, probe, notes)
        options += len(machine_rows)
        plans += len(planner.plans)
        machine_rows.sort(key=lambda r: rank_key(r, target.mode, prefer))
        rows += [
            dataclasses.replace(r, rank=len(rows) + j + 1, chosen=j == 0 and r.eligible)
            for j, r in enumerate(machine_rows)
        ]
    if first is None:
        raise VlaunchError("fit needs a machine")
    found = first.version_found
    return Fit(
        model=base.model,
        model_type=first.shape.model_type,
        checkpoint_format=first.stored.name,
        target=target,
        machines=tuple(machine_list),
        rows=tuple(rows),
        vllm_version=V.fmt_version(first.prediction.args.version),
        vllm_version_source=found.source if found else "stated",
        model_context=_model_context(first),
        options=options,
        plans=plans,
        seconds=time.perf_counter() - started,
        notes=tuple(notes + _target_notes(rows, target)),
        prefer=prefer,
        mtp_acceptance=mtp_acceptance,
    )


@dataclass(frozen=True)
class _Search:
    """What a search was asked, besides the base profile and the machines."""

    target: Target
    gpus: int | None
    max_nodes: int
    formats_allowed: tuple[str, ...] | None
    pinned: dict[str, Any]
    bandwidth_gbs: float | None
    use_calibration: bool
    detect: bool
    prefer: Prefer = DEFAULT_PREFER
    mtp_acceptance: float = DEFAULT_MTP_ACCEPTANCE


def _machine_rows(search: _Search, planner: _Planner, probe: Plan, notes: list[str]) -> list[Row]:
    """Every option on the probe's machine, each a row (rows that repeat vLLM's max_num_seqs left out)."""
    pinned, target, prof = search.pinned, search.target, planner.base
    machine, shape = probe.machine, probe.shape
    top = max(target.context or 0, _model_context(probe))  # longest contexts are searched up to here
    wanted = search.formats_allowed or ((pinned["quantization"],) if pinned.get("quantization") else ())
    version = probe.prediction.args.version
    fmts = format_choices(shape, probe.stored, machine, version, tuple(x.strip().lower() for x in wanted))
    tp_pp = (
        (int(pinned.get("tensor_parallel_size") or 1), int(pinned.get("pipeline_parallel_size") or 1))
        if pinned.get("tensor_parallel_size") or pinned.get("pipeline_parallel_size")
        else None
    )
    box_gpus = search.gpus or known_gpus(machine, probe.reading) or 1
    layouts = layout_choices(shape, machine, box_gpus, search.max_nodes, prof, tp_pp)
    spec_pin = tuple(prof.speculative_config) if pinned.get("speculative_config") else None
    seqs: list[int | None] = [pinned["max_num_seqs"]] if pinned.get("max_num_seqs") else [None]
    default_seqs = probe.prediction.args.max_num_seqs
    if not pinned.get("max_num_seqs") and target.users is not None and target.users < default_seqs:
        seqs.append(target.users)  # a smaller sampler warm-up: vLLM then runs at most that many at once
    bw = round(search.bandwidth_gbs * 10**9) if search.bandwidth_gbs else machine.bandwidth_bytes_per_s
    if not bw:
        notes.append(f"{machine.name}: no memory bandwidth figure; --memory-bandwidth-gbs gives one")
    choices = [
        Option(fmt, own, kv, tp, pp, nodes, spec, mns, ep)
        for fmt, own in fmts
        for kv in kv_choices(shape, pinned.get("kv_cache_dtype"), probe.prediction.args.pooling)
        for tp, pp, nodes in layouts
        for ep in expert_parallel_choices(shape, tp, prof.enable_expert_parallel)
        for spec in speculative_choices(shape, spec_pin)
        for mns in seqs
    ]
    measured = _measured_speed(probe) if search.use_calibration and not search.bandwidth_gbs else None
    return without_idle_seqs([_row(planner, machine, o, search, top, bw, measured) for o in choices])


def _measured_speed(probe: Plan) -> dict[str, speed.Efficiency]:
    """This box's measured decode efficiencies for the machine and vLLM version (vlaunch calibrate)."""
    from launcher.plan.calibration import machine_key
    from launcher.plan.speed_calibration import lookup_speed

    m = probe.machine
    return lookup_speed(machine_key(m.name, m.total_bytes), V.fmt_version(probe.prediction.args.version))


def _target_notes(rows: list[Row], target: Target) -> list[str]:
    """Why nothing was chosen when rows fit but none meets the targets."""
    if any(r.eligible for r in rows) or not any(r.fits for r in rows):
        return []
    fitting = [r for r in rows if r.fits and not r.needs_checkpoint]
    if not fitting:
        return ["every row that fits needs a checkpoint in another format: name one (--model) to serve it"]
    fastest = max(fitting, key=lambda r: r.expected_tokens_per_s)
    return [f"no row meets the targets, so none is chosen; the fastest that fits is #{fastest.rank}: "
            + "; ".join(fastest.misses)]  # fmt: skip


def _model_context(plan: Plan) -> int:
    """The model's own context (what vLLM derives from config.json)."""
    return int(plan.shape.max_position_embeddings or plan.prediction.args.max_model_len)
