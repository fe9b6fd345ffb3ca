"""The memory picture: a bar per machine drawn to its capacity, as one self-contained HTML page.

Pure: plans come in as `Plan.to_json()` dicts (so a run record's `predicted` works as well as a fresh plan), the
page comes out as a string. Every segment carries its byte count in `data-bytes` and its width in % of one
common scale, so widths are proportional to bytes across all bars of a page. templates/report.html.j2 renders
it with autoescape on and StrictUndefined.
"""

from __future__ import annotations

from typing import Any

from launcher import __version__
from launcher.common.units import GiB

# (key in the page, label, Plan.to_json key)
BUCKETS: tuple[tuple[str, str, str], ...] = (
    ("os", "OS reserve", "os_reserve_bytes"),
    ("weights", "weights", "weights_bytes"),
    ("kv", "KV cache", "kv_need_bytes"),
    ("state", "state", "state_need_bytes"),
    ("activation", "activation", "activation_peak_bytes"),
    ("overhead", "overhead", "overhead_bytes"),
)
_BIGGEST = {"weights": "weights", "kv_cache": "kv", "activation": "activation", "overhead": "overhead"}


MAX_BYTES = 2**60
"""A byte count past 1 EiB is no machine's, and past float's range a width cannot be drawn from it."""

# Plan.to_json keys the page reads as byte counts, and as plain numbers; a run record is a file anyone can edit.
_BYTE_FIELDS = ("machine_total_bytes", *(f for _, _, f in BUCKETS), "kv_bytes_per_token", "state_request_bytes",
                "non_torch_bytes", "cudagraph_bytes", "cuda_context_bytes")  # fmt: skip
_NUMBER_FIELDS = ("max_model_len", "users", "max_users", "gpu_memory_utilization")


class NotARecord(ValueError):
    """A plan, diff or log facts in a run record that the page cannot be drawn from; the message names the key."""


def _is_number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and abs(v) <= MAX_BYTES


def check_plan(plan: object, where: str = "predicted") -> dict[str, Any]:
    """`plan` when the page can be drawn from it: a mapping whose byte counts and numbers are numbers within
    1 EiB (NaN and infinity are not). Raises NotARecord naming the first key that is not."""
    if not isinstance(plan, dict):
        raise NotARecord(f"{where} is not a mapping")
    for key in ("machine_total_bytes", "weights_bytes", "kv_need_bytes", "activation_peak_bytes", "overhead_bytes",
                "os_reserve_bytes", "kv_bytes_per_token", "machine", "profile", "model", "users", "max_model_len",
                "fits"):  # fmt: skip
        if key not in plan:
            raise NotARecord(f"{where} lacks '{key}'")
    for key in _BYTE_FIELDS + _NUMBER_FIELDS:
        v = plan.get(key)
        if v is None and key not in ("machine_total_bytes", "weights_bytes", "kv_need_bytes", "kv_bytes_per_token"):
            continue
        if not _is_number(v):
            raise NotARecord(f"{where}.{key} is not a number within 1 EiB: {str(v)[:40]!r}")
    if not isinstance(plan.get("activation") or {}, dict):
        raise NotARecord(f"{where}.activation is not a mapping")
    for key in ("reasons", "fixes", "vllm_argv"):
        if not isinstance(plan.get(key) or [], list):
            raise NotARecord(f"{where}.{key} is not a list")
    return plan


def _check_diff(diff: dict[str, Any]) -> None:
    rows = diff.get("rows") or {}
    if not isinstance(rows, dict):
        raise NotARecord("diff.rows is not a mapping")
    for bucket, r in rows.items():
        if not isinstance(r, dict):
            raise NotARecord(f"diff.rows.{bucket} is not a mapping")
        for key in ("predicted", "logged", "delta", "delta_pct"):
            if r.get(key) is not None and not _is_number(r[key]):
                raise NotARecord(f"diff.rows.{bucket}.{key} is not a number: {str(r[key])[:40]!r}")


def _bytes(plan: dict[str, Any], key: str, field: str) -> int:
    """A bucket's bytes: a hybrid's Mamba / linear-attention state is drawn apart from its KV cache."""
    state = int(plan.get("state_need_bytes") or 0)
    if key == "kv":
        return int(plan[field]) - state
    if key == "state":
        return state
    return int(plan[field])


def _pct(b: int, scale: int) -> str:
    return f"{100 * b / scale:.6f}"


def _gib(b: int | float) -> str:
    return f"{b / GiB:.2f}"


def _detail(plan: dict[str, Any], key: str) -> str:
    if key == "os":
        return "left to the OS, page cache and desktop"
    if key == "weights":
        return str(plan.get("format") or "")
    if key == "kv":
        return (
            f"{plan['users']} users × {int(plan['max_model_len'] or 0):,} tokens × "
            f"{int(plan['kv_bytes_per_token']) / 1024:.1f} KiB"
        )
    if key == "state":
        return (
            f"{plan['users']} users × {int(plan.get('state_request_bytes') or 0) / 2**20:,.1f} MiB of state per "
            "request, whatever the context length"
        )
    if key == "activation":
        model = (plan.get("activation") or {}).get("model")
        return f"profiling peak ({model})" if model else "profiling peak"
    return (
        f"non-torch {_gib(plan.get('non_torch_bytes') or 0)}, CUDA graphs {_gib(plan.get('cudagraph_bytes') or 0)}, "
        f"CUDA context {_gib(plan.get('cuda_context_bytes') or 0)} GiB"
    )


def used_bytes(plan: dict[str, Any]) -> int:
    return sum(_bytes(plan, key, k) for key, _, k in BUCKETS)


def bar(plan: dict[str, Any], scale: int) -> dict[str, Any]:
    """One machine's bar: the buckets in order, then free memory; the overshoot past capacity drawn over them."""
    capacity = int(plan["machine_total_bytes"])
    used = used_bytes(plan)
    segments: list[dict[str, Any]] = []
    left = 0
    for key, label, field in BUCKETS:
        b = _bytes(plan, key, field)
        if b <= 0 and key in ("os", "state"):
            continue
        segments.append(
            {
                "key": key,
                "label": label,
                "bytes": b,
                "gib": _gib(b),
                "left": _pct(left, scale),
                "width": _pct(b, scale),
                "show_label": b / scale > 0.06,
            }
        )
        left += b
    free = max(capacity - used, 0)
    if free:
        segments.append(
            {
                "key": "free",
                "label": "free",
                "bytes": free,
                "gib": _gib(free),
                "left": _pct(left, scale),
                "width": _pct(free, scale),
                "show_label": free / scale > 0.06,
            }
        )
    over = max(used - capacity, 0)
    return {
        "machine": plan["machine"],
        "capacity_bytes": capacity,
        "capacity_gib": _gib(capacity),
        "capacity_pct": _pct(capacity, scale),
        "used_bytes": used,
        "used_gib": _gib(used),
        "segments": segments,
        "overshoot_bytes": over,
        "overshoot_gib": _gib(over),
        "overshoot_left": _pct(capacity, scale),
        "overshoot_width": _pct(over, scale),
        "fits": bool(plan["fits"]),
        "reasons": [str(r) for r in plan.get("reasons") or []],
        "max_users": plan.get("max_users"),
        "gpu_memory_utilization": plan.get("gpu_memory_utilization"),
    }


def bucket_rows(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """The four buckets (and the OS reserve when there is one), the biggest marked."""
    biggest = _BIGGEST.get(str(plan.get("biggest_bucket")), "")
    capacity = int(plan["machine_total_bytes"])
    rows = []
    for key, label, field in BUCKETS:
        b = _bytes(plan, key, field)
        if key in ("os", "state") and b <= 0:
            continue
        rows.append(
            {
                "key": key,
                "label": label,
                "bytes": b,
                "gib": _gib(b),
                "pct": f"{100 * b / capacity:.1f}" if capacity else "—",
                "detail": _detail(plan, key),
                "biggest": key == biggest,
            }
        )
    return rows


def _num(x: Any, unit: str) -> str:
    if x is None:
        return "—"
    return f"{x:,.0f}" if unit in ("tokens", "blocks", "groups", "layers") else f"{x:,.2f}"


def comparison_rows(diff: dict[str, Any]) -> list[dict[str, Any]]:
    """Predicted vs logged from `Comparison.to_json()`, with widths for a pair of small bars per GiB row."""
    rows = []
    for bucket, r in (diff.get("rows") or {}).items():
        unit = str(r.get("unit") or "")
        pred, logged = r.get("predicted"), r.get("logged")
        top = max(abs(pred or 0), abs(logged or 0)) or 1
        pct = r.get("delta_pct")
        rows.append(
            {
                "bucket": bucket,
                "unit": unit,
                "predicted": _num(pred, unit),
                "logged": _num(logged, unit),
                "delta": "" if r.get("delta") is None else _num(r["delta"], unit),
                "delta_pct": "" if pct is None else f"{pct:+.1f}%",
                "pred_width": f"{100 * abs(pred or 0) / top:.2f}",
                "logged_width": f"{100 * abs(logged or 0) / top:.2f}",
                "has_logged": logged is not None,
            }
        )
    return rows


def page_data(
    plans: list[dict[str, Any]],
    *,
    description: str = "",
    diff: dict[str, Any] | None = None,
    logged: dict[str, Any] | None = None,
    title: str | None = None,
) -> dict[str, Any]:
    """Everything report.html.j2 shows: plans[0] is the main plan (its table), every plan gets a bar."""
    if not plans:
        raise ValueError("a report needs at least one plan")
    plans = [check_plan(p) for p in plans]
    if diff:
        _check_diff(diff)
    if logged and logged.get("failure") is not None and not isinstance(logged["failure"], dict):
        raise NotARecord("logged.failure is not a mapping")
    main = plans[0]
    scale = max(max(int(p["machine_total_bytes"]), used_bytes(p)) for p in plans) or 1
    failure = (logged or {}).get("failure") or None
    return {
        "version": __version__,
        "title": title or f"{main['profile']}: memory on {', '.join(str(p['machine']) for p in plans)}",
        "profile": main["profile"],
        "description": description,
        "model": main["model"],
        "vllm_version": main.get("vllm_version"),
        "format": main.get("format"),
        "users": main["users"],
        "max_model_len": main["max_model_len"],
        "scale_bytes": scale,
        "bars": [bar(p, scale) for p in plans],
        "buckets": bucket_rows(main),
        "total_gib": _gib(used_bytes(main)),
        "capacity_gib": _gib(int(main["machine_total_bytes"])),
        "main_machine": main["machine"],
        "fits": bool(main["fits"]),
        "reasons": [str(r) for r in main.get("reasons") or []],
        "fixes": [str(r) for r in main.get("fixes") or []],
        "comparison": comparison_rows(diff) if diff else [],
        "explanation": (diff or {}).get("explanation") or "",
        "logged_version": (logged or {}).get("vllm_version"),
        "failure": None if not failure else f"{failure.get('kind')}: {failure.get('message')}",
        "command": " ".join(str(a) for a in main.get("vllm_argv") or []),
    }


def render_html(data: dict[str, Any]) -> str:
    from launcher.report.templating import jinja_env

    return jinja_env(autoescape=True).get_template("report.html.j2").render(**data)


# --- vlaunch fit: the options as bars on one scale -----------------------------------------------------------------


def fit_page_data(fit: Any) -> dict[str, Any]:
    """Every row of a fit as a bar (per GPU, drawn to its machine's capacity) on one scale, best first, the chosen
    ones marked."""
    from launcher.plan.fit import DECODE_NOTE

    plans = [r.plan.to_json() for r in fit.rows]
    scale = max((max(int(p["machine_total_bytes"]), used_bytes(p)) for p in plans), default=1) or 1
    bars = []
    for r, p in zip(fit.rows, plans, strict=True):
        b = bar(p, scale)
        j = r.to_json()
        o = r.option
        par = "1 GPU" if o.gpus == 1 else f"tp {o.tensor_parallel_size} × pp {o.pipeline_parallel_size}"
        b.update(
            {
                "rank": r.rank,
                "chosen": r.chosen,
                "label": f"{o.format} weights, KV {o.kv_cache_dtype}, {par}"
                + (f" over {o.nodes} nodes" if o.nodes > 1 else "")
                + (", MTP" if o.speculative else "")
                + (f", max_num_seqs {o.max_num_seqs}" if o.max_num_seqs else ""),
                "users": r.users,
                "max_model_len": r.max_model_len,
                "binding": r.binding_bucket or "refused by vLLM",
                "needs_checkpoint": r.needs_checkpoint,
                "max_context": r.max_context,
                "ceiling": j["decode_tokens_per_s_ceiling"],
                "format": o.format,
                "kv_cache_dtype": o.kv_cache_dtype,
            }
        )
        bars.append(b)
    t = fit.target
    return {
        "version": __version__,
        "title": f"vlaunch fit: {fit.model}",
        "model": fit.model,
        "vllm_version": fit.vllm_version,
        "target": (f"{t.users} users" if t.users is not None else "users: as many as fit")
        + (f" × {t.context:,} tokens" if t.context is not None else ", the longest context that fits"),
        "machines": [m.name for m in fit.machines],
        "scale_bytes": scale,
        "bars": bars,
        "decode_note": DECODE_NOTE,
    }


def render_fit_html(data: dict[str, Any]) -> str:
    from launcher.report.templating import jinja_env

    return jinja_env(autoescape=True).get_template("fit.html.j2").render(**data)
