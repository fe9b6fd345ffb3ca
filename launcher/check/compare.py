"""`vlaunch check`: what a vLLM log states, what went wrong, and predicted vs logged by bucket."""

from __future__ import annotations

import io
import sys
from dataclasses import field
from typing import Any, BinaryIO, Literal

from launcher.check.facts import LogFacts
from launcher.check.stream import parse_stream
from launcher.check.throughput import summary as throughput_summary
from launcher.common.errors import VlaunchError
from launcher.common.records import dataclass
from launcher.common.units import GiB
from launcher.plan.budget import Prediction
from launcher.plan.planning import Plan


class LogError(VlaunchError):
    """The log could not be read."""


class NotAVllmLog(LogError):
    """The file holds no line vLLM prints and no launch failure vlaunch knows."""


STDIN_NAMES = frozenset(("-", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"))
"""LOG arguments that mean the standard input (a pipe: `journalctl -u vllm | vlaunch check -`)."""
MAX_STDIN_LOG = 1 << 30
"""How much of the standard input a log may be: a start-up log is far smaller, and a stream that never ends is
refused here rather than read forever."""
_HEADS: dict[str, bytes] = {}  # the first bytes read from the standard input, to say what it held


class _BoundedInput(io.RawIOBase):
    """The standard input as a raw binary file for parse_stream: refused (one line) past MAX_STDIN_LOG bytes; its
    first bytes are kept in _HEADS."""

    def __init__(self, raw: BinaryIO, source: str) -> None:
        super().__init__()
        self.raw, self.source, self.left = raw, source, MAX_STDIN_LOG
        _HEADS[source] = b""

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        view = memoryview(b).cast("B")
        read = getattr(self.raw, "read1", self.raw.read)  # what a pipe has now, without waiting for a full buffer
        data = read(min(len(view), self.left)) if self.left > 0 else read(1)
        if self.left <= 0 and data:
            raise LogError(f"more than {MAX_STDIN_LOG >> 30} GiB on the standard input: not a log", source=self.source)
        view[: len(data)] = data
        self.left -= len(data)
        if len(_HEADS[self.source]) < 4096:
            _HEADS[self.source] = (_HEADS[self.source] + data)[:4096]
        return len(data)


def read_log(path: str, stdin: BinaryIO | None = None) -> LogFacts:
    """The facts of the log at `path`; `-` or /dev/stdin read the standard input (`stdin`, else sys.stdin)."""
    from launcher.common.files import open_regular

    try:
        if path in STDIN_NAMES:
            facts = parse_stream(io.BufferedReader(_BoundedInput(stdin or sys.stdin.buffer, path)))
        else:
            with open_regular(path, LogError) as fh:
                facts = parse_stream(fh)
    except OSError as e:
        raise LogError(f"cannot read: {e.strerror}", source=path) from None
    facts.source = path
    return facts


def require_vllm_log(f: LogFacts) -> LogFacts:
    """`f`, unless its file is not a vLLM log: no line only vLLM prints (version banner, engine config, non-default
    args, a boot stage, a memory or pool line …) and no failure (a launch that failed in docker, on the GPU or on the
    model's repo prints no vLLM line, but is one). A vLLM log cut before its pool line passes."""
    if f.recognised or f.failure is not None:
        return f
    raise NotAVllmLog(f"not a vLLM log ({_what_it_is(f.source)})", source=f.source)


def _what_it_is(path: str | None) -> str:
    head = b""
    if path in _HEADS:
        head = _HEADS[path]
    elif path:
        try:
            with open(path, "rb") as fh:
                head = fh.read(4096)
        except OSError:
            pass
    text = head.lstrip()
    if not head:
        return "the file is empty"
    if not text and len(head) < 4096:
        return "only blank lines"
    if text[:1] in (b"{", b"["):
        return "JSON, not a log; `vlaunch report` reads run records"
    if b"\x00" in head:
        return "binary data"
    return "no line of it is one vLLM prints, and it shows no launch failure"


# Flags a plan can take from the log itself (non-default args, engine config).
def flags_from_log(f: LogFacts) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ("max_model_len", "tensor_parallel_size", "pipeline_parallel_size", "gpu_memory_utilization",
                "max_num_batched_tokens", "max_num_seqs", "kv_cache_memory_bytes"):  # fmt: skip
        v = getattr(f, key)
        if v is not None:
            out[key] = v
    if f.non_default_args.get("block_size") is not None:  # the user's; f.block_size is what vLLM settled on
        out["block_size"] = f.non_default_args["block_size"]
    if f.non_default_args.get("decode_context_parallel_size") is not None:
        out["decode_context_parallel_size"] = f.non_default_args["decode_context_parallel_size"]
    if f.dtype and f.dtype != "auto":
        out["dtype"] = str(f.dtype).removeprefix("torch.")
    if f.kv_cache_dtype and f.kv_cache_dtype != "auto":
        out["kv_cache_dtype"] = f.kv_cache_dtype
    if f.quantization:
        out["quantization"] = f.quantization
    if f.enforce_eager:
        out["enforce_eager"] = True
    if f.ssm_cache_dtype_reset == "float32":  # the CPU build resets it on a CPU with AVX512-BF16 (platforms/cpu.py)
        out["cpu_bf16"] = True
    return out


@dataclass(frozen=True)
class Row:
    bucket: str
    predicted: float | None  # GiB, or tokens / x for the pool rows
    logged: float | None
    unit: str

    @property
    def delta(self) -> float | None:
        if self.predicted is None or self.logged is None:
            return None
        return self.predicted - self.logged

    @property
    def delta_pct(self) -> float | None:
        if self.delta is None or not self.logged:
            return None
        return 100 * self.delta / self.logged

    def to_json(self) -> dict[str, Any]:
        return {
            "predicted": self.predicted,
            "logged": self.logged,
            "delta": None if self.delta is None else round(self.delta, 4),
            "delta_pct": None if self.delta_pct is None else round(self.delta_pct, 2),
            "unit": self.unit,
        }


@dataclass(frozen=True)
class Comparison:
    rows: tuple[Row, ...]
    explained_by: str | None
    explanation: str
    notes: tuple[str, ...] = field(default=())
    warnings: tuple[str, ...] = field(default=())  # the plan and the log disagree on a fact (the vLLM version)
    at_logged_total: AtLoggedTotal | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "rows": {r.bucket: r.to_json() for r in self.rows},
            "explained_by": self.explained_by,
            "explanation": self.explanation,
            "notes": list(self.notes),
            "warnings": list(self.warnings),
            "at_logged_total": None if self.at_logged_total is None else self.at_logged_total.to_json(),
        }


Cause = Literal["another_box", "hot_plug", "catalog"]
"""Why vLLM logged another total than the plan's machine: the log is from another box than the one planned for
(another backend, another GPU); the same CPU box's node total moved (a VM's hot-plug); the same GPU with another
figure than the plan's (the catalog's, or the one given)."""

SAME_GPU = 0.06
"""A GPU's logged total within this share of the plan's is that GPU with another figure than the plan's; further
off, another GPU. Two catalog GPUs of one memory size differ by less (A100 and H100 80GB: 0.05 %), of two sizes by
more (T4 and RTX 4080: 6.6 %); nvidia-smi's total runs 0.6 % above CUDA's."""

_BACKENDS = frozenset(("cuda", "cpu", "rocm", "tpu", "xpu", "hpu", "neuron"))


def log_backend(f: LogFacts) -> str | None:
    """What the log's vLLM ran on: the device it names, else `cuda` when it logged a GPU-only bucket (CUDA graphs,
    non-torch memory) and `cpu` when it logged the CPU worker's; None when it does not tell."""
    if f.device in _BACKENDS:
        return f.device
    if any(x is not None for x in (f.cudagraph_gib, f.cudagraph_estimate_gib, f.non_torch_gib)):
        return "cuda"
    return "cpu" if f.cpu_non_kv_gib is not None else None


def total_cause(plan: Plan, f: LogFacts, logged_total: int) -> Cause:
    """Why vLLM's total is not the plan's (`Cause`). A GPU's total does not move; a CPU node's can."""
    m = plan.machine
    ran_on = log_backend(f)
    if ran_on is not None and ran_on != m.backend:
        return "another_box"
    if m.backend == "cpu":
        return "hot_plug"
    return "catalog" if abs(logged_total - m.total_bytes) <= SAME_GPU * m.total_bytes else "another_box"


def another_box_words(plan: Plan, f: LogFacts, logged_total: int) -> str:
    """`planned for another box: …` with both totals and what to plan with instead."""
    backend = log_backend(f)
    ran_on = {"cuda": "a GPU", "cpu": "the CPU"}.get(backend or "", "a box")
    total = f"--gpu-memory-gib {logged_total / GiB:.2f}"
    how = f"--machine cpu {total}" if backend == "cpu" else f"--machine NAME, or --machine cuda {total}"
    return (
        f"planned for another box: the plan is for machine '{plan.machine.name}' "
        f"({plan.machine.total_bytes / GiB:.2f} GiB), the log's vLLM ran on {ran_on} with {logged_total / GiB:.2f} "
        f"GiB ({(logged_total - plan.machine.total_bytes) / GiB:+.2f} GiB); plan for the box the log is from "
        f"({how}) to compare like with like"
    )


@dataclass(frozen=True)
class AtLoggedTotal:
    """The plan made again at the total memory vLLM logged, when that is not the total the plan read.

    Memory that moved between the plan and the launch (a VM's hot-added RAM), or a log from another box than the
    one planned for, is an input that changed, not an error of the model: `error` is the model's, at the total
    vLLM saw; `raw_error` the plan's as it was, of which `drift_bytes` is the explanation."""

    planned_total_bytes: int
    logged_total_bytes: int
    kv_pool_tokens: int
    """The pool predicted at vLLM's total."""
    logged_kv_pool_tokens: int
    raw_kv_pool_tokens: int
    """The pool the plan predicted at its own total."""
    cause: Cause = "hot_plug"
    moved_words: str = ""
    """What the note says about the cause (`note`)."""

    @property
    def drift_bytes(self) -> int:
        return self.logged_total_bytes - self.planned_total_bytes

    @property
    def error(self) -> float:
        return (self.kv_pool_tokens - self.logged_kv_pool_tokens) / self.logged_kv_pool_tokens

    @property
    def raw_error(self) -> float:
        return (self.raw_kv_pool_tokens - self.logged_kv_pool_tokens) / self.logged_kv_pool_tokens

    def note(self) -> str:
        again = (
            f"Planned again at vLLM's total: pool {self.kv_pool_tokens:,} tokens, {100 * self.error:+.2f}% off the "
            f"log; the raw {100 * self.raw_error:+.2f}% is the "
        )
        if self.cause == "another_box":
            return f"{self.moved_words}. {again}other box's"
        return (
            f"the total moved: the plan read {self.planned_total_bytes / GiB:.2f} GiB, vLLM "
            f"{self.logged_total_bytes / GiB:.2f} GiB ({self.drift_bytes / GiB:+.2f} GiB): {self.moved_words}. "
            f"{again}drift's"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "planned_total_bytes": self.planned_total_bytes,
            "logged_total_bytes": self.logged_total_bytes,
            "drift_bytes": self.drift_bytes,
            "kv_pool_tokens": self.kv_pool_tokens,
            "logged_kv_pool_tokens": self.logged_kv_pool_tokens,
            "raw_kv_pool_tokens": self.raw_kv_pool_tokens,
            "error": round(self.error, 6),
            "raw_error": round(self.raw_error, 6),
            "cause": self.cause,
        }


def at_logged_total(plan: Plan, f: LogFacts) -> AtLoggedTotal | None:
    """The plan again at the total vLLM logged (and the utilization it ran with), when the totals differ."""
    from launcher.plan.planning import make_plan

    if f.total_memory_gib is None or not f.kv_pool_tokens or plan.prediction.args.kv_cache_memory_bytes:
        return None  # an explicit pool does not depend on the total
    logged_total = round(f.total_memory_gib * GiB)
    if abs(logged_total - plan.machine.total_bytes) <= 0.01 * GiB:  # the log rounds to 0.01 GiB
        return None
    util = f.gpu_memory_utilization if f.gpu_memory_utilization is not None else plan.prediction.gpu_memory_utilization
    try:
        again = make_plan(
            plan.profile.with_overrides(gpu_memory_gib=f.total_memory_gib, gpu_memory_utilization=float(util)),
            free_bytes=None,
            use_calibration=plan.use_calibration,
            detect=plan.detect,
        )
    except VlaunchError:
        return None
    cause = total_cause(plan, f, logged_total)
    return AtLoggedTotal(
        plan.machine.total_bytes,
        logged_total,
        again.prediction.pool.tokens,
        f.kv_pool_tokens,
        plan.prediction.pool.tokens,
        cause,
        _moved_words(plan, f, logged_total, cause),
    )


def _moved_words(plan: Plan, f: LogFacts, logged_total: int, cause: Cause) -> str:
    """What the note says moved the total, by its cause."""
    from launcher.plan.machines import CATALOG

    if cause == "another_box":
        return another_box_words(plan, f, logged_total)
    if cause == "hot_plug":
        return (
            "memory was added to or taken from this machine between the plan and the launch (a VM's hot-plug; a "
            "DGX Spark's total does not move)"
        )
    m = plan.machine
    figure = "the catalog's" if m.name in CATALOG and not m.source.startswith("given") else "the one planned with"
    return f"the GPU's total is not {figure}: give --gpu-memory-gib or plan on the box itself"


def _g(b: int) -> float:
    return round(b / GiB, 4)


def _opt(x: int | None) -> float | None:
    return None if x is None else float(x)


def _by_group(p: Prediction) -> str:
    """A hybrid pool group by group: what one request takes from the shared blocks, and why."""
    lay, ctx = p.layout, p.args.context()
    parts: dict[str, list[int]] = {}
    for g in lay.groups:
        parts.setdefault(g.kind, []).append(g.blocks_per_request(ctx))
    per_kind = "; ".join(
        f"{len(b)} {kind} group(s) × {b[0]} block(s)" if len(set(b)) == 1 else f"{kind} groups {'+'.join(map(str, b))}"
        for kind, b in parts.items()
    )
    return (
        f"hybrid pool: {p.pool.num_blocks:,} blocks of {lay.bytes_per_block / 2**20:,.2f} MiB (one block id spans a "
        f"layer of each of the {lay.n_groups} groups of {lay.group_size}); a {p.args.max_model_len:,}-token request "
        f"takes {p.pool.blocks_per_request} blocks: {per_kind}"
    )


def version_warning(plan: Plan, f: LogFacts) -> str | None:
    """The plan followed another vLLM than the one that logged: which sizing rules differ between the two."""
    from launcher.vllm import versions as V

    if not f.vllm_version:
        return None
    try:
        logged = V.parse_version(f.vllm_version)
    except VlaunchError:
        return None
    planned = plan.prediction.args.version
    if logged == planned:
        return None
    differ = [r.name for r in V.RULES if r.on(logged) != r.on(planned)]
    how = f" ({plan.version_found.detail})" if plan.version_found else ""
    rules = f"; rules that differ: {', '.join(differ)}" if differ else "; no sizing rule differs between them"
    return f"the plan follows vLLM {V.fmt_version(planned)}{how} but the log is vLLM {f.vllm_version}{rules}"


def compare(plan: Plan, f: LogFacts) -> Comparison:
    """Predicted vs logged for each bucket the log states; the bucket that explains most of the KV gap."""
    p = plan.prediction
    notes: list[str] = []
    moved = at_logged_total(plan, f)
    rows = _memory_rows(plan, f, moved, notes)
    rows += _pool_rows(p, f)
    if p.layout.hybrid:
        notes.append(_by_group(p))
    explained_by, explanation = _explain_kv_gap(p, rows)
    warning = version_warning(plan, f)
    return Comparison(tuple(rows), explained_by, explanation, tuple(notes), (warning,) if warning else (), moved)


def _memory_rows(plan: Plan, f: LogFacts, moved: AtLoggedTotal | None, notes: list[str]) -> list[Row]:
    """The total memory (a note when vLLM saw another), the non-KV buckets and the available KV."""
    p = plan.prediction
    rows: list[Row] = []
    if f.total_memory_gib is not None:
        rows.append(Row("total_memory", _g(plan.machine.total_bytes), f.total_memory_gib, "GiB"))
        logged_total = round(f.total_memory_gib * GiB)
        differ = abs(plan.machine.total_bytes / GiB - f.total_memory_gib) > 0.01
        other_backend = log_backend(f) not in (None, plan.machine.backend)
        if moved is not None:
            notes.append(moved.note())
        elif (differ or other_backend) and total_cause(plan, f, logged_total) == "another_box":
            notes.append(another_box_words(plan, f, logged_total))
        elif differ:
            notes.append(
                f"vLLM saw {f.total_memory_gib} GiB of total memory; "
                f"the plan assumed {plan.machine.total_bytes / GiB:.2f}"
            )
    if p.args.platform == "cpu":
        rows.append(Row("non_kv (worker RSS)", _g(p.requested_bytes - p.available_kv_bytes), f.cpu_non_kv_gib, "GiB"))
    else:
        logged_w = f.model_loading_gib if f.model_loading_gib is not None else f.weights_gib
        rows.append(Row("weights", _g(p.weights_bytes), logged_w, "GiB"))
        rows.append(Row("activation", _g(p.activation_peak_bytes), f.activation_gib, "GiB"))
        rows.append(Row("non_torch", _g(p.non_torch_bytes), f.non_torch_gib, "GiB"))
        logged_cg = f.cudagraph_estimate_gib if p.args.cudagraph_in_budget else f.cudagraph_gib
        rows.append(Row("cudagraph", _g(p.cudagraph_bytes), logged_cg, "GiB"))
    rows.append(Row("available_kv", _g(p.available_kv_bytes), f.available_kv_gib, "GiB"))
    return rows


def _pool_rows(p: Prediction, f: LogFacts) -> list[Row]:
    """The KV pool: tokens, blocks, concurrency, and the block size and groups when they tell something."""
    rows = [
        Row(
            "kv_pool_tokens",
            float(p.pool.tokens),
            None if f.kv_pool_tokens is None else float(f.kv_pool_tokens),
            "tokens",
        )
    ]
    if f.num_blocks is not None:
        rows.append(Row("num_blocks", float(p.pool.num_blocks), float(f.num_blocks), "blocks"))
    rows.append(Row("max_concurrency", round(p.pool.max_concurrency, 2), f.max_concurrency, "x"))
    lay = p.layout
    if lay.hybrid or lay.mamba_page_bytes or f.block_size is not None:
        rows.append(Row("block_size", float(lay.block_size), _opt(f.block_size), "tokens"))
    if lay.hybrid or f.padding_layers is not None or f.kv_cache_groups is not None:
        # vLLM prints the groups only when there are several, and a padding line only when it pads
        logged_groups = f.kv_cache_groups if f.kv_cache_groups is not None else (1 if f.started else None)
        rows.append(Row("kv_cache_groups", float(len(lay.groups)), _opt(logged_groups), "groups"))
        logged_pad = f.padding_layers if f.padding_layers is not None else (0 if f.started else None)
        rows.append(Row("padding_layers", float(sum(lay.padding_layers)), _opt(logged_pad), "layers"))
    return rows


def _explain_kv_gap(p: Prediction, rows: list[Row]) -> tuple[str | None, str]:
    """The bucket whose error explains most of the available KV's, and the sentence that says so."""
    # The KV gap is the sum of the non-KV buckets' errors (with the opposite sign) and of the budget's.
    budget_rows = [r for r in rows if r.unit == "GiB" and r.bucket not in ("available_kv",) and r.delta is not None]
    kv = next(r for r in rows if r.bucket == "available_kv")
    explained_by, explanation = None, "the log states no bucket to compare"
    if budget_rows:
        worst = max(
            budget_rows,
            key=lambda r: abs((r.delta or 0.0) * (p.gpu_memory_utilization if r.bucket == "total_memory" else 1)),
        )
        explained_by = worst.bucket
        d = worst.delta or 0.0
        if kv.delta is not None:
            explanation = (
                f"available KV off by {kv.delta:+.2f} GiB; {worst.bucket} off by {d:+.2f} GiB "
                f"({'over' if d > 0 else 'under'}-predicted) explains most of it"
            )
        else:
            explanation = f"{worst.bucket} is the largest difference ({d:+.2f} GiB)"
    return explained_by, explanation


def render_facts(f: LogFacts) -> str:
    lines = []
    if f.recognised or f.vllm_version or f.model:
        head = f"vLLM {f.vllm_version or '?'} ({f.engine or '?'}, {f.device or '?'})"
        if f.model:
            head += f": {f.model}"
    else:  # a launch that failed before vLLM printed anything (docker, the GPU, the repo)
        head = "no vLLM line: the launch failed before vLLM started"
    lines.append(head)
    settings = []
    for label, v in (("max_model_len", f.max_model_len), ("tp", f.tensor_parallel_size),
                     ("gpu_memory_utilization", f.gpu_memory_utilization), ("dtype", f.dtype),
                     ("kv_cache_dtype", f.kv_cache_dtype), ("quantization", f.quantization)):  # fmt: skip
        if v is not None:
            settings.append(f"{label} {v}")
    if settings:
        lines.append("  " + ", ".join(settings))
    for label, v, unit in (
        ("total memory", f.total_memory_gib, "GiB"),
        ("model loading", f.model_loading_gib, "GiB"),
        ("available KV", f.available_kv_gib, "GiB"),
        ("blocks", f.num_blocks, ""),
        ("KV pool", f.kv_pool_tokens, "tokens"),
        ("max concurrency", f.max_concurrency, "x"),
        ("CUDA graphs", f.cudagraph_gib, "GiB"),
        ("init engine", f.init_engine_seconds, "s"),
    ):
        if v is not None:
            shown = f"{v:,}" if isinstance(v, int) else f"{v}"
            lines.append(f"  {label:<16} {shown} {unit}".rstrip())
    if f.failure:
        lines.append(f"failed: {f.failure.kind}: {f.failure.message}")
        lines.append(f"  fix: {f.failure.fix}")
    else:
        lines.append("started" if f.started else "no pool line and no failure (truncated log?)")
    if serving := throughput_summary(f):
        lines.append(f"  {serving}")
    return "\n".join(lines)


def _comparison_cell(x: float | None, unit: str) -> str:
    if x is None:
        return "—"
    return f"{x:,.0f}" if unit in ("tokens", "blocks", "groups", "layers") else f"{x:,.2f}"


def render_comparison(c: Comparison) -> str:
    """The predicted-vs-logged table: each column as wide as its longest cell (at least the usual widths), so
    columns stay apart however large a number is."""
    head = ("", "predicted", "logged", "diff")
    cells = [
        (
            f"{r.bucket} ({r.unit})",
            _comparison_cell(r.predicted, r.unit),
            _comparison_cell(r.logged, r.unit),
            "" if r.delta is None else _comparison_cell(r.delta, r.unit),
            "" if r.delta_pct is None else f" ({r.delta_pct:+.1f}%)",
        )
        for r in c.rows
    ]
    label = max([22] + [len(row[0]) + 1 for row in cells])
    widths = [max([w] + [len(row[i]) + 1 for row in cells]) for i, w in ((1, 14), (2, 14), (3, 12))]
    lines = ["", f"  {head[0]:<{label}}" + "".join(f"{h:>{w}}" for h, w in zip(head[1:], widths, strict=True))]
    for row in cells:
        lines.append(
            f"  {row[0]:<{label}}" + "".join(f"{x:>{w}}" for x, w in zip(row[1:4], widths, strict=True)) + row[4]
        )
    lines.append(f"  {c.explanation}")
    for w in c.warnings:
        lines.append(f"  warning: {w}")
    for n in c.notes:
        lines.append(f"  note: {n}")
    return "\n".join(lines)
