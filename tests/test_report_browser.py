"""The memory picture in a real browser: Debian's chromium, headless, measures the bars' rendered widths."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from launcher.cli import main

pytestmark = pytest.mark.browser

FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip


def _chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    pytest.fail("chromium is not installed: apt-get install -y chromium chromium-driver (see .ci/run)")


def _run(args: list[str], tmp: Path) -> str:
    cmd = [_chromium(), *FLAGS, f"--user-data-dir={tmp / 'profile'}", *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def _measured(page: Path, tmp: Path, shot_name: str, height: int) -> tuple[str, list[dict]]:
    """A screenshot of the page, then its DOM with every segment's rendered width (the page's ?measure hook)."""
    shot = Path(__file__).parent.parent / ".cache" / shot_name
    shot.parent.mkdir(exist_ok=True)
    _run([f"--screenshot={shot}", f"--window-size=1280,{height}", page.as_uri()], tmp)
    assert shot.stat().st_size > 10_000
    dom = _run([f"--window-size=1280,{height}", "--dump-dom", page.as_uri() + "?measure"], tmp)
    m = re.search(r'<pre id="measure">(.*?)</pre>', dom, re.S)
    assert m is not None, "the page's measuring script did not run"
    return dom, json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))


def _one_scale(rows: list[dict]) -> dict[str, float]:
    """One scale for the page: px per byte the same for every segment, capacity box and overshoot."""
    ref = max(rows, key=lambda r: r["bytes"])
    px_per_byte = ref["px"] / ref["bytes"]
    assert ref["px"] > 500
    ratios = {}
    for row in rows:
        expected = row["bytes"] * px_per_byte
        if expected < 20:  # sub-20 px slivers: allow half a pixel
            assert abs(row["px"] - expected) <= 0.5, row
        else:
            assert row["px"] / expected == pytest.approx(1, rel=0.01), row
        ratios[f"{row['bar']}:{row['key']}"] = round(row["px"] / expected, 5)
    return ratios


def test_bar_widths_are_proportional_to_bytes(tmp_path: Path) -> None:
    page = tmp_path / "plan.html"
    r = CliRunner().invoke(main, ["plan", "llama8b-32k", "--compare", "spark,h100,rtx4090", "--html", str(page)])
    # 8 users × 32k do not fit a 24 GB RTX 4090: compare exits 3 and writes the page all the same
    assert r.exit_code == 3 and page.exists(), r.stderr
    _, rows = _measured(page, tmp_path, "report-screenshot.png", 2000)
    assert {r["bar"] for r in rows} == {0, 1, 2}
    assert any(r["key"] == "overshoot" for r in rows)  # the 4090 does not fit
    print("rendered/expected width ratios:", json.dumps(_one_scale(rows)))


def test_fit_options_on_one_scale_with_the_choice_marked(tmp_path: Path) -> None:
    page = tmp_path / "fit.html"
    r = CliRunner().invoke(
        main,
        ["fit", "Qwen/Qwen3-32B", "--machine", "spark", "--compare", "h100", "--users", "4",
         "--context", "32K", "--formats", "bf16,fp8", "--html", str(page)],
    )  # fmt: skip
    assert r.exit_code == 0 and page.exists(), r.stderr
    dom, measured = _measured(page, tmp_path, "fit-screenshot.png", 4000)
    rows = [r for r in measured if "bar" in r]  # the bars' segments; the chart's entries are measured below
    assert len({r["bar"] for r in rows}) >= 10
    assert len({r["bar"] for r in rows if r["chosen"] == "yes"}) == 2  # one per machine
    assert any(r["key"] == "overshoot" for r in rows)  # a row that does not fit spills past its capacity
    _one_scale(rows)
    assert dom.count('class="chosen-tag"') == 2  # the chosen bars are marked where a reader sees them


def _at(plot: dict, axis: str, v: float) -> float:
    """Where `v` lies in the measured plot area along `axis` ("x" left to right, "y" bottom to top), from the axis's
    scale and ends as the page states them."""
    scale, lo, hi = plot[f"{axis}_scale"], plot[f"{axis}_min"], plot[f"{axis}_max"]
    f = math.log(v / lo) / math.log(hi / lo) if scale == "log" else (v - lo) / (hi - lo)
    a, b = (plot["left"], plot["right"]) if axis == "x" else (plot["bottom"], plot["top"])
    return a + f * (b - a)


def _overlap(a: dict, b: dict) -> bool:
    return a["left"] < b["right"] and b["left"] < a["right"] and a["top"] < b["bottom"] and b["top"] < a["bottom"]


def test_fit_chart_points_in_the_plot_the_choice_drawn_the_target_at_its_users(tmp_path: Path) -> None:
    page = tmp_path / "fit.html"
    r = CliRunner().invoke(
        main,
        ["fit", "Qwen/Qwen3-32B", "--machine", "spark", "--compare", "h100", "--users", "4", "--context", "32k",
         "--html", str(page)],
    )  # fmt: skip
    assert r.exit_code == 0 and page.exists(), r.stderr
    _, measured = _measured(page, tmp_path, "fit-chart.png", 900)
    (plot,) = [m for m in measured if m["key"] == "plot"]
    points = [m for m in measured if m["key"] == "point"]
    (line,) = [m for m in measured if m["key"] == "target_line"]
    assert plot["right"] - plot["left"] > 800 and plot["bottom"] - plot["top"] > 300
    assert len(points) >= 20 and {p["machine"] for p in points} == {"dgx-spark", "h100-80gb"}
    for p in points:  # every centre inside the plot area, where the axes put its users and tokens/s
        assert (
            plot["left"] - 0.5 <= p["cx"] <= plot["right"] + 0.5
            and plot["top"] - 0.5 <= p["cy"] <= plot["bottom"] + 0.5
        )
        assert p["cx"] == pytest.approx(_at(plot, "x", p["x"]), abs=1), p
        assert p["cy"] == pytest.approx(_at(plot, "y", p["y"]), abs=1), p
    chosen = [p for p in points if p["chosen"] == "yes"]
    assert len(chosen) == 2 and {p["machine"] for p in chosen} == {"dgx-spark", "h100-80gb"}
    for p in chosen:  # drawn, bigger than the others, and the point a reader sees at its place
        assert p["marker"] == "chosen" and p["right"] - p["left"] > 15 and p["on_top"] == p["rank"]
    assert line["axis"] == "x" and line["value"] == 4
    assert line["cx"] == pytest.approx(_at(plot, "x", 4), abs=1)
    assert line["top"] <= plot["top"] and line["bottom"] >= plot["bottom"]
    assert all((p["cx"] < line["cx"]) == (p["x"] < 4) for p in points if p["x"] != 4)
    labels = [m for m in measured if m["key"] == "label"]
    assert sorted(m["text"] for m in labels) == sorted([*(f"chosen #{p['rank']}" for p in chosen), "target: 4 users"])
    assert not any(_overlap(a, b) for i, a in enumerate(labels) for b in labels[i + 1 :]), labels
