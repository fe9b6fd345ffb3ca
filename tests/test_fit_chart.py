"""`vlaunch fit --html`'s chart of memory against speed (`report.html.speed_chart`), on real searches: which rows
are points, where the axes put them, the target lines, and the page that draws them."""

from __future__ import annotations

import copy
import math
import re
from typing import Any

import pytest

from launcher.cli.options import build_profile
from launcher.plan import fit as F
from launcher.report import html as report

QWEN32B = "Qwen/Qwen3-32B"


class Edited:
    """A fit whose `to_json()` is the real one edited: for what the search does not give yet or in this case."""

    def __init__(self, fit: F.Fit, edit: Any) -> None:
        self.fit, self.edit = fit, edit

    def to_json(self) -> dict[str, Any]:
        d = copy.deepcopy(self.fit.to_json())
        self.edit(d)
        return d


@pytest.fixture(scope="module")
def spark_h100() -> F.Fit:
    base = build_profile(None, {"model": QWEN32B, "machine": "dgx-spark"})
    return F.search(base, ["dgx-spark", "h100"], F.Target(users=4, context=32768))


@pytest.fixture(scope="module")
def users_only() -> F.Fit:
    base = build_profile(None, {"model": QWEN32B, "machine": "h100"})
    return F.search(base, ["h100"], F.Target(users=4))


def _along(axis: dict[str, Any], lo_px: float, hi_px: float, v: float) -> float:
    """Where `v` lies from lo_px to hi_px on an axis from axis['min'] to axis['max']."""
    if axis["scale"] == "log":
        f = math.log10(v / axis["min"]) / math.log10(axis["max"] / axis["min"])
    else:
        f = (v - axis["min"]) / (axis["max"] - axis["min"])
    return lo_px + f * (hi_px - lo_px)


def _x(chart: dict[str, Any], v: float) -> float:
    return _along(chart["x"], chart["plot"]["left"], chart["plot"]["right"], v)


def _y(chart: dict[str, Any], v: float) -> float:
    return _along(chart["y"], chart["plot"]["bottom"], chart["plot"]["top"], v)


def test_every_row_with_a_decode_figure_is_a_point(spark_h100: F.Fit) -> None:
    chart = report.speed_chart(spark_h100)
    rows = [r for r in spark_h100.rows if r.decode is not None and r.max_users > 0]
    assert len(rows) == len(spark_h100.rows) >= 20
    assert sorted(p["rank"] for p in chart["points"]) == sorted(r.rank for r in rows)
    expected = all("expected_tokens_per_s" in r.to_json()["decode"] for r in rows)
    key, what = ("expected_tokens_per_s", "expected") if expected else ("tokens_per_s", "ceiling")
    assert chart["speed_key"] == key and chart["y"]["label"].startswith(f"{what} decode tokens/s per user")
    by_rank = {p["rank"]: p for p in chart["points"]}
    for r in rows:
        p, speed = by_rank[r.rank], r.to_json()["decode"][key]
        assert (p["x"], p["y"]) == (r.max_users, speed)
        assert p["machine"] == r.machine and p["fits"] == r.fits
        assert f"#{r.rank} {r.machine}: {r.option.format} weights, KV {r.option.kv_cache_dtype}" in p["title"]
        assert f"{r.max_users:,} users fit at 32,768 tokens; {speed:,.2f} tokens/s per user ({what})" in p["title"]
    assert chart["no_decode"] == chart["no_room"] == 0


def test_the_chosen_rows_are_marked_and_labelled(spark_h100: F.Fit) -> None:
    chart = report.speed_chart(spark_h100)
    chosen = [r.rank for r in spark_h100.rows if r.chosen]
    assert len(chosen) == 2  # one per machine
    assert sorted(p["rank"] for p in chart["points"] if p["marker"] == "chosen") == chosen
    assert sorted(label["text"] for label in chart["labels"]) == sorted(f"chosen #{n}" for n in chosen)
    assert [p["chosen"] for p in chart["points"]][-2:] == [True, True]  # drawn last, over the others
    for label in chart["labels"]:
        p = next(p for p in chart["points"] if label["text"] == f"chosen #{p['rank']}")
        assert abs(label["y"] - p["cy"]) < 20 and 5 < abs(label["x"] - p["cx"]) < 20
    a, b = chart["labels"]
    assert abs(a["y"] - b["y"]) >= 15 or abs(a["x"] - b["x"]) >= 100  # not on top of each other


def test_points_lie_where_the_axes_put_them(spark_h100: F.Fit) -> None:
    chart = report.speed_chart(spark_h100)
    xs = [p["x"] for p in chart["points"]] + [4]
    ys = [p["y"] for p in chart["points"]]
    assert chart["x"]["scale"] == ("log" if max(xs) / min(xs) > 30 else "linear")
    assert chart["y"]["scale"] == ("log" if max(ys) / min(ys) > 30 else "linear")
    for axis, vs in ((chart["x"], xs), (chart["y"], ys)):
        assert axis["min"] <= min(vs) and max(vs) <= axis["max"]
        ticks = [t["value"] for t in axis["ticks"]]
        step = ticks[1] - ticks[0]
        # nice numbers: a log axis's ends, a linear axis's step, 1, 2 or 5 × a power of ten
        for v in (axis["min"], axis["max"]) if axis["scale"] == "log" else (step,):
            assert round(v / 10 ** math.floor(math.log10(v)), 9) in (1, 2, 5), axis
        if axis["scale"] == "linear":
            assert axis["min"] == 0 and axis["max"] == ticks[-1] and round(ticks[-1] / step, 9) == len(ticks) - 1
        assert len(axis["ticks"]) >= 3
    plot = chart["plot"]
    for p in chart["points"]:
        assert p["cx"] == pytest.approx(_x(chart, p["x"]), abs=0.06)
        assert p["cy"] == pytest.approx(_y(chart, p["y"]), abs=0.06)
        assert plot["left"] <= p["cx"] <= plot["right"] and plot["top"] <= p["cy"] <= plot["bottom"]
    for t in chart["x"]["ticks"]:
        assert t["pos"] == pytest.approx(_x(chart, t["value"]), abs=0.06)
    assert all(t["label"] == f"{t['value']:g}" for t in chart["x"]["ticks"])  # users: whole numbers


def test_the_target_users_are_a_vertical_line(spark_h100: F.Fit) -> None:
    chart = report.speed_chart(spark_h100)
    (line,) = chart["lines"]
    assert line["axis"] == "x" and line["value"] == 4 and line["label"] == "target: 4 users"
    assert line["x1"] == line["x2"] == pytest.approx(_x(chart, 4), abs=0.06)
    assert (line["y1"], line["y2"]) == (chart["frame"]["top"], chart["frame"]["bottom"])
    for p in chart["points"]:  # every option with room for fewer than 4 users lies left of the line
        assert p["x"] == 4 or (p["cx"] < line["x1"]) == (p["x"] < 4), p


def test_a_speed_target_is_a_horizontal_line(spark_h100: F.Fit) -> None:
    def speed_target(d: dict[str, Any]) -> None:
        d["target"] |= {"min_tokens_per_s": 20, "max_ttft_s": 2.5}

    chart = report.speed_chart(Edited(spark_h100, speed_target))
    line = next(line for line in chart["lines"] if line["axis"] == "y")
    assert line["y1"] == line["y2"] == pytest.approx(_y(chart, 20), abs=0.06)
    assert line["label"] == "target: ≥ 20 tokens/s per user"
    assert sum(p["cy"] < line["y1"] for p in chart["points"]) == sum(p["y"] > 20 for p in chart["points"]) > 0
    assert chart["max_ttft_s"] == 2.5


def test_users_alone_plot_the_longest_context(users_only: F.Fit) -> None:
    chart = report.speed_chart(users_only)
    assert chart["x"]["kind"] == "tokens" and chart["x"]["label"].startswith("longest context for 4 users (tokens)")
    drawn = {r.rank: r.max_context for r in users_only.rows if r.decode is not None and r.max_context > 0}
    assert {p["rank"]: p["x"] for p in chart["points"]} == drawn
    assert chart["no_room"] == sum(1 for r in users_only.rows if r.max_context <= 0)
    assert all(re.fullmatch(r"\d+K|0", t["label"]) for t in chart["x"]["ticks"])
    assert chart["lines"] == []  # --users alone sets no context and no speed


def test_the_ceiling_is_plotted_when_a_row_has_no_expected_speed(spark_h100: F.Fit) -> None:
    def ceiling_only(d: dict[str, Any]) -> None:
        d["options"][-1]["decode"].pop("expected_tokens_per_s", None)

    chart = report.speed_chart(Edited(spark_h100, ceiling_only))
    assert chart["speed_key"] == "tokens_per_s" and chart["y"]["label"].startswith("ceiling decode tokens/s per user")
    ceiling = {r.rank: round(r.decode.tokens_per_s, 2) for r in spark_h100.rows if r.decode is not None}
    assert all(p["y"] == ceiling[p["rank"]] and "(ceiling)" in p["title"] for p in chart["points"])


def test_the_expected_speed_is_plotted_when_rows_have_it(spark_h100: F.Fit) -> None:
    def expected(d: dict[str, Any]) -> None:
        for o in d["options"]:
            o["decode"]["expected_tokens_per_s"] = round(o["decode"]["tokens_per_s"] / 2, 2)

    chart = report.speed_chart(Edited(spark_h100, expected))
    assert chart["speed_key"] == "expected_tokens_per_s" and chart["y"]["label"].startswith("expected decode")
    ceiling = {r.rank: round(r.decode.tokens_per_s, 2) for r in spark_h100.rows if r.decode is not None}
    assert all(p["y"] == round(ceiling[p["rank"]] / 2, 2) for p in chart["points"])
    assert "(expected)" in chart["points"][0]["title"]


def test_rows_without_a_decode_figure_are_left_out_and_said_so(spark_h100: F.Fit) -> None:
    def no_h100_bandwidth(d: dict[str, Any]) -> None:
        for o in d["options"]:
            if o["machine"] == "h100-80gb":
                o["decode"] = None

    fit = Edited(spark_h100, no_h100_bandwidth)
    chart = report.speed_chart(fit)
    h100 = [r for r in spark_h100.rows if r.machine == "h100-80gb"]
    assert chart["no_decode"] == len(h100) > 0
    assert {p["machine"] for p in chart["points"]} == {"dgx-spark"}
    data = report.fit_page_data(spark_h100) | {"chart": chart}
    assert f"{len(h100)} options without a decode figure" in report.render_fit_html(data)
    none = report.speed_chart(Edited(spark_h100, lambda d: [o.update(decode=None) for o in d["options"]]))
    assert none["points"] == []
    page = report.render_fit_html(report.fit_page_data(spark_h100) | {"chart": none})
    assert "No memory-against-speed chart" in page and '<svg class="speed-chart"' not in page


def test_machines_get_their_own_colours(spark_h100: F.Fit) -> None:
    chart = report.speed_chart(spark_h100)
    colours = {m["name"]: m["colour"] for m in chart["machines"]}
    assert list(colours) == ["dgx-spark", "h100-80gb"] and len(set(colours.values())) == 2
    for p in chart["points"]:
        assert p["colour"] == (colours[p["machine"]] if p["fits"] else report.NO_FIT_COLOUR)
        assert p["marker"] == ("chosen" if p["chosen"] else "fit" if p["fits"] else "no-fit")
    assert any(not p["fits"] for p in chart["points"])  # bf16 on one H100: drawn grey


def test_rows_that_need_a_checkpoint_are_hollow() -> None:
    base = build_profile(None, {"model": QWEN32B, "machine": "h100"})
    fit = F.search(base, ["h100"], F.Target(users=4, context=32768), formats_allowed=("bf16", "fp8", "awq", "nvfp4"))
    chart = report.speed_chart(fit)
    needed = {r.rank for r in fit.rows if r.needs_checkpoint}
    assert needed and {p["rank"] for p in chart["points"] if p["marker"] == "checkpoint"} == needed
    for p in chart["points"]:
        if p["rank"] in needed:  # refused by vLLM from a bf16 checkpoint: not a fit, yet drawn in its machine's colour
            assert not p["fits"] and p["colour"] != report.NO_FIT_COLOUR
            assert "needs a checkpoint in this format" in p["title"] and "does not fit" not in p["title"]
    page = report.render_fit_html(report.fit_page_data(fit))
    assert page.count('data-marker="checkpoint"') == len(needed)


@pytest.mark.parametrize(
    ("values", "binary", "scale", "ticks"),
    [
        ([5, 19, 39], False, "linear", ["0", "5", "10", "15", "20", "25", "30", "35", "40"]),
        ([1, 50], False, "log", ["1", "2", "5", "10", "20", "50"]),
        ([2.78, 94.86], False, "log", ["2", "5", "10", "20", "50", "100"]),
        ([0.3, 0.45], False, "linear", ["0", "0.1", "0.2", "0.3", "0.4", "0.5"]),
        ([9456, 40960], True, "linear", ["0", "8K", "16K", "24K", "32K", "40K"]),
        ([1024, 131072], True, "log", ["1K", "2K", "4K", "8K", "16K", "32K", "64K", "128K"]),
    ],
)  # fmt: skip
def test_axes_have_nice_ticks(values: list[float], binary: bool, scale: str, ticks: list[str]) -> None:
    axis = report._axis(values, binary, (100.0, 900.0))
    assert axis["scale"] == scale and [t["label"] for t in axis["ticks"]] == ticks
    assert axis["ticks"][0]["pos"] >= 100 and axis["ticks"][-1]["pos"] <= 900


def test_the_page_draws_the_chart_above_the_bars(spark_h100: F.Fit) -> None:
    page = report.render_fit_html(report.fit_page_data(spark_h100))
    chart = report.speed_chart(spark_h100)
    svg = page[page.index('<svg class="speed-chart"') : page.index("</svg>", page.index('<svg class="speed-chart"'))]
    assert page.index('<svg class="speed-chart"') < page.index('<figure class="option machine')
    assert svg.count('data-key="point"') == len(chart["points"]) and svg.count("<title>") == len(chart["points"])
    assert svg.count('data-key="target_line"') == 1 and "target: 4 users" in svg
    assert svg.count('data-chosen="yes"') == 2 and "chosen #" in svg
    assert "needs a checkpoint" in page and "does not fit the target" in page
    assert "<script src" not in page and "http" not in page.split("<body>")[1].split("generated by")[0]
