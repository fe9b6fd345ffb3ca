"""The memory picture: a bar per machine drawn to its capacity, as one self-contained HTML page.

Pure: plans come in as `Plan.to_json()` dicts (so a run record's `predicted` works as well as a fresh plan), the
page comes out as a string. Every segment carries its byte count in `data-bytes` and its width in % of one
common scale, so widths are proportional to bytes across all bars of a page. templates/report.html.j2 renders
it with autoescape on and StrictUndefined. `vlaunch fit --html` (templates/fit.html.j2) draws every option's bar
the same way, under a chart of memory against speed whose coordinates `speed_chart` computes.
"""

from __future__ import annotations

import math
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
        "chart": speed_chart(fit),
        "decode_note": DECODE_NOTE,
    }


def render_fit_html(data: dict[str, Any]) -> str:
    from launcher.report.templating import jinja_env

    return jinja_env(autoescape=True).get_template("fit.html.j2").render(**data)


# --- vlaunch fit: memory against speed, one point per option -------------------------------------------------------

CHART_WIDTH, CHART_HEIGHT = 1000, 480
PLOT_BOX = (84, 24, 976, 412)  # the frame's left, top, right, bottom in the chart's coordinates
PLOT_PAD = 14  # between the frame and the data range, so a point at an end of an axis stays inside the frame
LOG_SPAN = 30  # values spanning more than this factor go on a log axis
MACHINE_COLOURS = ("#1a73e8", "#e37400", "#8430ce", "#188038", "#d01884", "#12b5cb")
NO_FIT_COLOUR = "#9aa0a6"
_SPEED_KEYS = {
    "expected_tokens_per_s": "expected decode tokens/s per user",
    "tokens_per_s": "ceiling decode tokens/s per user",
}


def _nice_step(span: float, binary: bool) -> float:
    """The tick step that cuts `span` into at most 8 parts: 1, 2 or 5 × a power of ten, or a power of two."""
    if span <= 0:
        return 1.0
    if binary:
        return float(2 ** max(math.ceil(math.log2(span / 8)), 0))
    mag = 10.0 ** math.floor(math.log10(span / 8))
    return next(m * mag for m in (1.0, 2.0, 5.0, 10.0) if span / (m * mag) <= 8)


def _log_marks(lo: float, hi: float, binary: bool) -> tuple[float, float, list[float]]:
    """A log axis's ends and ticks: powers of two (tokens) or 1-2-5 × powers of ten, from the last one at or below
    `lo` to the first at or above `hi`; every other power of two, or decades only, when that makes more than 10."""
    if binary:
        marks = [float(2**k) for k in range(math.floor(math.log2(lo)), math.ceil(math.log2(hi)) + 1)]
        return marks[0], marks[-1], marks if len(marks) <= 10 else marks[(len(marks) - 1) % 2 :: 2]
    low, high = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    seq = [m * 10.0**k for k in range(low, high + 1) for m in (1, 2, 5)]
    start = max(i for i, v in enumerate(seq) if v <= lo * (1 + 1e-9))
    end = min(i for i, v in enumerate(seq) if v >= hi * (1 - 1e-9))
    marks = seq[start : end + 1]
    if len(marks) > 10:
        marks = [10.0**k for k in range(low, high + 1)]
    return marks[0], marks[-1], marks


def _tick_label(v: float, binary: bool) -> str:
    if binary and v >= 2**20 and v % 2**20 == 0:
        return f"{int(v) >> 20}M"
    if binary and v >= 1024 and v % 1024 == 0:
        return f"{int(v) >> 10}K"
    return f"{v:,.0f}" if v == int(v) else f"{v:g}"


def _axis(values: list[float], binary: bool, px: tuple[float, float]) -> dict[str, Any]:
    """An axis over `values` (all > 0) drawn from px[0] to px[1]: log when they span more than LOG_SPAN×, else
    linear from 0; its ends and ticks nice numbers."""
    lo, hi = min(values), max(values)
    if hi / lo > LOG_SPAN:
        low, high, ticks = _log_marks(lo, hi, binary)
        axis = {"scale": "log", "min": low, "max": high}
    else:
        step = _nice_step(hi, binary)
        top = round(math.ceil(hi / step) * step, 9)
        ticks = [round(i * step, 9) for i in range(round(top / step) + 1)]
        axis = {"scale": "linear", "min": 0.0, "max": top}
    axis["px"] = px
    axis["ticks"] = [{"value": v, "label": _tick_label(v, binary), "pos": _pos(axis, v)} for v in ticks]
    return axis


def _pos(axis: dict[str, Any], v: float) -> float:
    """Where `v` is drawn along the axis, in the chart's coordinates (one decimal)."""
    lo, hi = float(axis["min"]), float(axis["max"])
    if axis["scale"] == "log":
        frac = (math.log(v) - math.log(lo)) / (math.log(hi) - math.log(lo)) if hi > lo else 0.5
    else:
        frac = (v - lo) / (hi - lo) if hi > lo else 0.5
    a, b = axis["px"]
    return round(float(a + frac * (b - a)), 1)


def _option_words(o: dict[str, Any]) -> str:
    """A row's choices in words, from its `Row.to_json()`."""
    tp, pp, nodes = o["tensor_parallel_size"], o["pipeline_parallel_size"], o["nodes"]
    par = "1 GPU" if tp * pp == 1 else f"tp {tp} × pp {pp}"
    return (
        f"{o['format']} weights, KV {o['kv_cache_dtype']}, {par}"
        + (f" over {nodes} nodes" if nodes > 1 else "")
        + (", MTP" if o.get("speculative_config") else "")
        + (f", max_num_seqs {o['max_num_seqs']}" if o.get("max_num_seqs") else "")
    )


def _marker(o: dict[str, Any]) -> str:
    """How a point is drawn: the chosen row a diamond; a row that needs a checkpoint in its format a hollow circle
    (vLLM refuses it from this one, so it does not fit either); a row that does not fit a grey cross; any other a
    filled circle."""
    needed = o["checkpoint_format"] == "needed"
    if o["chosen"]:
        return "chosen-hollow" if needed else "chosen"
    if needed:
        return "checkpoint"
    return "fit" if o["fits"] else "no-fit"


def _point(o: dict[str, Any], xy: tuple[float, float], axes: tuple[dict[str, Any], ...], colour: str) -> dict[str, Any]:
    """One option as a point: where it is drawn, its marker, colour (its machine's) and tooltip."""
    (x, y), (x_axis, y_axis) = xy, axes
    what = "expected" if y_axis["key"] == "expected_tokens_per_s" else "ceiling"
    where = f"{o['max_users']:,} users fit at {o['max_model_len']:,} tokens"
    if x_axis["kind"] == "tokens":
        where = f"{o['users']:,} users fit at most {o['max_context']:,} tokens each"
    marker = _marker(o)
    return {
        "colour": NO_FIT_COLOUR if marker == "no-fit" else colour,
        "rank": o["rank"],
        "machine": o["machine"],
        "chosen": bool(o["chosen"]),
        "fits": bool(o["fits"]),
        "needs_checkpoint": o["checkpoint_format"] == "needed",
        "marker": marker,
        "x": x,
        "y": y,
        "cx": _pos(x_axis, x),
        "cy": _pos(y_axis, y),
        "title": f"#{o['rank']} {o['machine']}: {_option_words(o)} — {where}; {y:,.2f} tokens/s per user ({what})"
        + ("" if o["decode"].get("ttft_s") is None else f", first token in {o['decode']['ttft_s']:,.1f} s")
        + ("; needs a checkpoint in this format" if marker in ("checkpoint", "chosen-hollow") else "")
        + ("; does not fit the target" if marker == "no-fit" else "")
        + "".join(f"; misses the target: {m}" for m in o.get("target_misses") or ()),
    }


def _labels(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """ "chosen #rank" beside each chosen point, on its left near the right edge, moved down past the labels
    before it that it would cover."""
    out: list[dict[str, Any]] = []
    for p in points:
        if not p["chosen"]:
            continue
        right = p["cx"] > PLOT_BOX[2] - 110
        x, y = p["cx"] + (-13 if right else 13), p["cy"] + 4
        while any(abs(y - q["y"]) < 15 and abs(x - q["x"]) < 100 for q in out):
            y += 15
        out.append(
            {"text": f"chosen #{p['rank']}", "x": round(x, 1), "y": round(y, 1), "anchor": "end" if right else "start"}
        )
    return out


def _target_lines(target: dict[str, Any], x_axis: dict[str, Any], y_axis: dict[str, Any]) -> list[dict[str, Any]]:
    """The target drawn over the plot: a vertical line at its users (or context), a horizontal one at its speed."""
    left, top, right, bottom = PLOT_BOX
    lines = []
    if x_axis["target"] is not None:
        x = _pos(x_axis, x_axis["target"])
        near_right = x > right - 160
        what = f"{x_axis['target']:,} users" if x_axis["kind"] == "users" else f"{x_axis['target']:,} tokens"
        lines.append({"axis": "x", "value": x_axis["target"], "x1": x, "x2": x, "y1": top, "y2": bottom,
                      "label": f"target: {what}", "label_x": round(x + (-5 if near_right else 5), 1),
                      "label_y": top + 14, "anchor": "end" if near_right else "start"})  # fmt: skip
    if y_axis["target"] is not None:
        y = _pos(y_axis, y_axis["target"])
        lines.append({"axis": "y", "value": y_axis["target"], "x1": left, "x2": right, "y1": y, "y2": y,
                      "label": f"target: ≥ {y_axis['target']:g} tokens/s per user", "label_x": right - 6,
                      "label_y": round(y - 5, 1), "anchor": "end"})  # fmt: skip
    return lines


def _speed_key(options: list[dict[str, Any]]) -> str:
    """The expected decode speed when every row with a decode figure has one, else the ceiling."""
    decodes = [o["decode"] for o in options if o.get("decode")]
    return "expected_tokens_per_s" if decodes and all("expected_tokens_per_s" in d for d in decodes) else "tokens_per_s"


def _x_label(target: dict[str, Any], drawn: list[dict[str, Any]]) -> str:
    if target["mode"] == "users":
        return f"longest context for {target['users']:,} users (tokens)"
    contexts = {o["max_model_len"] for o in drawn}
    return f"users that fit at {contexts.pop():,} tokens" if len(contexts) == 1 else "users that fit at each context"


def speed_chart(fit: Any) -> dict[str, Any]:
    """Memory against speed for `vlaunch fit --html`, from `fit.to_json()`: each option with a decode figure is a
    point at x = the users that fit (the longest context for the target's users under --users alone) and y = its
    decode tokens/s per user; the target a line on each axis it sets. Coordinates are the chart's (CHART_WIDTH ×
    CHART_HEIGHT, y down), rounded to a tenth."""
    d = fit.to_json()
    target, options = d["target"], d["options"]
    tokens = target["mode"] == "users"
    x_key, y_key = ("max_context" if tokens else "max_users"), _speed_key(options)
    drawn = [o for o in options if o.get("decode") and o[x_key] > 0 and o["decode"][y_key] > 0]
    left, top, right, bottom = PLOT_BOX
    chart: dict[str, Any] = {
        "width": CHART_WIDTH,
        "height": CHART_HEIGHT,
        "frame": {"left": left, "top": top, "right": right, "bottom": bottom},
        "plot": {
            "left": left + PLOT_PAD,
            "top": top + PLOT_PAD,
            "right": right - PLOT_PAD,
            "bottom": bottom - PLOT_PAD,
        },
        "speed_key": y_key,
        "no_decode": sum(1 for o in options if not o.get("decode")),
        "no_room": sum(1 for o in options if o.get("decode") and o[x_key] <= 0),
        "max_ttft_s": target.get("max_ttft_s"),
        "points": [],
        "labels": [],
        "lines": [],
    }
    names = [m["name"] for m in d["machines"]]
    chart["machines"] = [{"name": n, "colour": MACHINE_COLOURS[i % len(MACHINE_COLOURS)]} for i, n in enumerate(names)]
    if not drawn:
        return chart
    x_target = target.get("context") if tokens else target.get("users")
    y_target = target.get("min_tokens_per_s")
    xs = [float(o[x_key]) for o in drawn] + ([float(x_target)] if x_target else [])
    ys = [float(o["decode"][y_key]) for o in drawn] + ([float(y_target)] if y_target else [])
    x_axis = _axis(xs, tokens, (left + PLOT_PAD, right - PLOT_PAD))
    y_axis = _axis(ys, False, (bottom - PLOT_PAD, top + PLOT_PAD))
    x_axis |= {"kind": "tokens" if tokens else "users", "target": x_target or None, "label": _x_label(target, drawn)}
    y_axis |= {"kind": "speed", "key": y_key, "target": y_target or None, "label": _SPEED_KEYS[y_key]}
    for axis in (x_axis, y_axis):
        axis["label"] += ", log scale" if axis["scale"] == "log" else ""
    colour = {m["name"]: m["colour"] for m in chart["machines"]}
    points = [_point(o, (o[x_key], o["decode"][y_key]), (x_axis, y_axis), colour[o["machine"]]) for o in drawn]
    points.sort(key=lambda p: (p["chosen"], p["marker"] != "no-fit"))  # drawn in this order: the chosen ones on top
    chart |= {"x": x_axis, "y": y_axis, "points": points, "labels": _labels(points)}
    chart["lines"] = _target_lines(target, x_axis, y_axis)
    return chart
