"""The memory picture (plan --html, report), the terminal bar, and launch files rendered from templates/."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from launcher.cli import main
from launcher.cli.options import build_profile
from launcher.plan.machines import canonical_machine_name
from launcher.plan.planning import make_plan
from launcher.report import html as report
from launcher.report.render import memory_bar
from launcher.report.templating import config_mapping, config_to_args, render_launch, vllm_args
from tests.conftest import CONFIGS, FIXTURES

LLAMA8B = ["--model", "meta-llama/Llama-3.1-8B-Instruct"]
H100_LOG = FIXTURES / "logs" / "llmd-planner-v0.19.0-meta-llama-llama-3-1-8b---h100-80gb--tp1pp1dp1--8192.log"
EVIL_DESC = "<script>alert(1)</script>"
EVIL_MODEL = 'weird/"&<>model'


@pytest.fixture
def evil_profile(tmp_path: Path) -> Path:
    p = tmp_path / "evil.yaml"
    p.write_text(
        yaml.safe_dump(
            {
                "name": "evil-b",  # a name is a plain file name (tests/test_security_profiles.py)
                "description": EVIL_DESC,
                "model": EVIL_MODEL,
                "config": str(CONFIGS / "Llama-3.1-8B.json"),
                "machine": "rtx4090",
                "max_model_len": 32768,
                "users": 8,
                "vllm": {"served_model_name": "a'b $HOME %n", "env": {"FOO": "x y'\"$z"}},
            }
        )
    )
    return p


def _plan(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, ["plan", *args])
    assert r.exit_code in (0, 3), r.output
    return r.exit_code, r.stdout


def _html(tmp_path: Path, *args: str) -> tuple[int, str]:
    out = tmp_path / "page.html"
    code, _ = _plan(*args, "--html", str(out))
    return code, out.read_text()


def _segments(html: str) -> list[tuple[str, int, float]]:
    """(key, data-bytes, width %) of every drawn segment and overshoot, in page order."""
    pat = re.compile(r'data-key="([a-z]+)" data-bytes="(\d+)" style="left: [\d.]+%; width: ([\d.]+)%"')
    return [(k, int(b), float(w)) for k, b, w in pat.findall(html)]


# --- the HTML page -------------------------------------------------------------------------------------------------


def test_page_is_self_contained(tmp_path: Path) -> None:
    _, html = _html(tmp_path, "llama8b-32k", "--compare", "h100,rtx4090")
    assert html.startswith("<!DOCTYPE html>")
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", html, re.I)
    assert not re.search(r"<script[^>]*\bsrc=", html, re.I)
    assert not re.search(r"<link\b|@import|url\(", html, re.I)


def test_segment_bytes_equal_the_plan(tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["plan", "llama8b-32k", "--json"])
    d = json.loads(r.stdout)
    _, html = _html(tmp_path, "llama8b-32k")
    segs = {k: (b, w) for k, b, w in _segments(html)}
    assert segs["os"][0] == d["os_reserve_bytes"]
    assert segs["weights"][0] == d["weights_bytes"]
    assert segs["kv"][0] == d["kv_need_bytes"]
    assert segs["activation"][0] == d["activation_peak_bytes"]
    assert segs["overhead"][0] == d["overhead_bytes"]
    assert segs["free"][0] == d["machine_total_bytes"] - d["total_bytes"]
    assert "overshoot" not in segs
    # widths in % of the scale: proportional to the bytes
    scale = int(re.search(r'data-scale-bytes="(\d+)"', html).group(1))  # type: ignore[union-attr]
    assert scale == d["machine_total_bytes"]
    for b, w in segs.values():
        assert w == pytest.approx(100 * b / scale, abs=1e-5)
    assert 'class="biggest"' in html and '<span class="tag">biggest</span>' in html
    biggest_row = re.search(r'<tr class="biggest" data-key="([a-z]+)"', html)
    assert biggest_row is not None and biggest_row.group(1) == "kv"


def test_not_fitting_plan_renders_an_overshoot(tmp_path: Path) -> None:
    code, html = _html(tmp_path, *LLAMA8B, "--machine", "rtx4090", "--max-model-len", "32768", "--users", "8")
    assert code == 3
    segs = _segments(html)
    over = [s for s in segs if s[0] == "overshoot"]
    assert len(over) == 1
    used = sum(b for k, b, _ in segs if k not in ("free", "overshoot"))
    cap = int(re.search(r'data-capacity-bytes="(\d+)"', html).group(1))  # type: ignore[union-attr]
    assert over[0][1] == used - cap > 0
    assert "free" not in {k for k, _, _ in segs}
    assert 'data-fits="no"' in html and "does not fit" in html
    left = float(re.search(r'data-key="overshoot" data-bytes="\d+" style="left: ([\d.]+)%', html).group(1))  # type: ignore[union-attr]
    assert left == pytest.approx(100 * cap / used, abs=1e-5)  # starts at the capacity line


def test_compare_draws_three_bars(tmp_path: Path) -> None:
    code, html = _html(tmp_path, "llama8b-32k", "--compare", "spark,h100,rtx4090")
    assert code == 3  # the main plan (the Spark) fits; the 4090 does not: exit 3, the page written all the same
    machines = re.findall(r'<figure class="machine" data-machine="([^"]+)"', html)
    assert machines == ["dgx-spark", "h100-80gb", "rtx4090"]
    assert html.count('data-key="overshoot"') == 1
    # one scale for every bar: capacity widths proportional to capacities
    caps = [int(x) for x in re.findall(r'data-key="capacity" data-bytes="(\d+)"', html)]
    widths = [float(x) for x in re.findall(r'data-key="capacity" data-bytes="\d+" style="width: ([\d.]+)%"', html)]
    for c, w in zip(caps, widths, strict=True):
        assert w / widths[0] == pytest.approx(c / caps[0], rel=1e-6)


def test_compare_adds_the_main_machine_and_prints_bars() -> None:
    code, out = _plan("llama8b-32k", "--compare", "h100,4090")
    assert code == 3  # a compared machine does not fit
    assert _plan("llama8b-32k", "--compare", "h100,h200")[0] == 0  # all of them fit
    assert "compare:" in out
    assert re.search(r"dgx-spark: fits.*\n  \[", out)
    assert re.search(r"rtx4090: does NOT fit.*\n  \[[#=+\-.:]+\]!+", out)
    r = CliRunner().invoke(main, ["plan", "llama8b-32k", "--compare", "h100,4090", "--json"])
    assert [p["machine"] for p in json.loads(r.stdout)["compare"]] == ["dgx-spark", "h100-80gb", "rtx4090"]


def test_compare_unknown_machine_is_one_line() -> None:
    r = CliRunner().invoke(main, ["plan", "llama8b-32k", "--compare", "spark,h1000"])
    assert r.exit_code == 2
    assert r.stderr.count("\n") == 1 and "unknown machine" in r.stderr


@pytest.mark.parametrize(
    ("alias", "name"),
    [("spark", "dgx-spark"), ("h100", "h100-80gb"), ("H200", "h200"), ("a100", "a100-80gb"), ("4090", "rtx4090"),
     ("rtx4090", "rtx4090"), ("dgx-spark", "dgx-spark"), ("3090", "rtx3090")],
)  # fmt: skip
def test_machine_aliases(alias: str, name: str) -> None:
    assert canonical_machine_name(alias) == name


def test_every_value_is_escaped(tmp_path: Path, evil_profile: Path) -> None:
    code, html = _html(tmp_path, str(evil_profile))
    assert code == 3
    assert EVIL_DESC not in html and "alert(1)" in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert EVIL_MODEL not in html
    assert "weird/&#34;&amp;&lt;&gt;model" in html
    assert "evil-b" in html
    assert html.count("<script") == 1  # only the page's own measuring script


def test_report_from_a_run_record(tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["check", str(H100_LOG), *LLAMA8B, "--json"])
    d = json.loads(r.stdout)
    assert d["diff"] is not None
    record = {"profile": "x", "predicted": d["predicted"], "diff": d["diff"], "logged": d}
    run = tmp_path / "run.json"
    run.write_text(json.dumps(record))
    out = tmp_path / "run.html"
    r = CliRunner().invoke(main, ["report", str(run), "--html", str(out)])
    assert r.exit_code == 0, r.stderr
    html = out.read_text()
    assert "Predicted vs logged" in html
    for bucket, row in d["diff"]["rows"].items():
        assert f'<tr data-bucket="{bucket}">' in html
        if row["unit"] == "GiB" and row["logged"] is not None:
            assert f"{row['logged']:,.2f}" in html


def test_report_from_a_log(tmp_path: Path) -> None:
    out = tmp_path / "log.html"
    r = CliRunner().invoke(main, ["report", str(H100_LOG), *LLAMA8B, "--html", str(out), "--json"])
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["html"] == str(out) and d["comparison"] and len(d["bars"]) == 1
    assert "Predicted vs logged" in out.read_text()


def test_report_errors_are_one_line(tmp_path: Path) -> None:
    out = str(tmp_path / "x.html")
    r = CliRunner().invoke(main, ["report", str(H100_LOG), "--html", out])
    assert r.exit_code == 2 and "give --profile, --config or --model" in r.stderr
    bad = tmp_path / "bad.json"
    bad.write_text('{"profile": "x"}')
    r = CliRunner().invoke(main, ["report", str(bad), "--html", out])
    assert r.exit_code == 2 and "not a run record" in r.stderr and r.stderr.count("\n") == 1
    r = CliRunner().invoke(main, ["report", str(tmp_path / "missing.log"), "--html", out])
    assert r.exit_code == 2 and "no such file" in r.stderr


def test_html_to_an_unwritable_place_is_one_line(tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["plan", "llama8b-32k", "--html", str(tmp_path / "no" / "such" / "dir.html")])
    assert r.exit_code == 2 and "cannot write" in r.stderr


def test_page_data_is_pure() -> None:
    plan = make_plan(build_profile("llama8b-32k", {}))
    data = report.page_data([plan.to_json()], description="d")
    assert data["bars"][0]["capacity_bytes"] == plan.machine.total_bytes
    assert [r["key"] for r in data["buckets"]] == ["os", "weights", "kv", "activation", "overhead"]
    with pytest.raises(ValueError):
        report.page_data([])


# --- the terminal bar ----------------------------------------------------------------------------------------------


def test_plan_bar_is_ascii_when_not_a_tty() -> None:
    _, out = _plan("llama8b-32k")  # CliRunner's stdout is not a TTY
    bar = re.search(r"^  \[(.*)\]  121\.63 GiB$", out, re.M)
    assert bar is not None and len(bar.group(1)) == 60
    assert set(bar.group(1)) <= set(":#=+-.")
    assert out.isascii() or "█" not in out
    assert "# weights 14.99" in out and ". free" in out
    # the rest of the output is unchanged
    assert "  total              60.48   of 121.63\n" in out
    assert "fits: yes — 8 users × 32,768 tokens" in out


def test_plan_bar_unicode_on_a_tty(monkeypatch: pytest.MonkeyPatch) -> None:
    import launcher.cli.output as output

    class Tty:
        encoding = "utf-8"

        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(output.sys, "stdout", Tty())
    assert output.bar_style(False) == "unicode"
    assert output.bar_style(True) == "ascii"
    Tty.encoding = "ascii"
    assert output.bar_style(False) == "ascii"


def test_plan_ascii_flag() -> None:
    _, out = _plan("llama8b-32k", "--ascii")
    assert "█" not in out and re.search(r"^  \[[:#=+\-.]+\]", out, re.M)


def test_memory_bar_overshoot_and_unicode() -> None:
    gib = 1 << 30
    line, legend = memory_bar([("weights", 30 * gib), ("KV cache", 10 * gib)], 20 * gib, "ascii", width=40)
    inside, spill = line[3:].split("]", 1)
    assert inside == "#" * 20 and spill.startswith("!" * 20)
    assert "! over by 20.00" in legend
    line, legend = memory_bar([("weights", 5 * gib), ("KV cache", 5 * gib)], 20 * gib, "unicode", width=40)
    assert line[3:].split("]")[0] == "█" * 10 + "▓" * 10 + "·" * 20
    assert "· free 10.00" in legend


# --- launch files --------------------------------------------------------------------------------------------------


def _render(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, ["render", *args])
    assert r.exit_code in (0, 3), r.stderr
    return r.exit_code, r.stdout


@pytest.mark.parametrize("profile", ["llama8b-32k", "llama70b-awq-32k", "qwen3-30b-a3b-8k"])
@pytest.mark.parametrize("kind", ["script", "docker"])
def test_shell_outputs_pass_bash_n(tmp_path: Path, profile: str, kind: str) -> None:
    _, text = _render(profile, "--as", kind)
    f = tmp_path / "x.sh"
    f.write_text(text)
    subprocess.run(["bash", "-n", str(f)], check=True)
    assert text.startswith("#!/usr/bin/env bash\n")


def test_script_quotes_every_value(tmp_path: Path, evil_profile: Path) -> None:
    code, text = _render(str(evil_profile), "--as", "script")
    assert code == 3
    f = tmp_path / "x.sh"
    f.write_text(text)
    subprocess.run(["bash", "-n", str(f)], check=True)
    assert shlex.quote(EVIL_MODEL) in text
    assert "export FOO=" + shlex.quote("x y'\"$z") in text
    for line in text.splitlines():
        if line.startswith("#") and EVIL_DESC in line:
            break
    else:
        raise AssertionError("description missing from the header comment")
    # run it with `exec` replaced by printing the argv: the words come back exactly
    probe = text.replace("exec ", "printf '%s\\n' ", 1)
    out = subprocess.run(["bash", "-c", probe, "x"], capture_output=True, text=True, check=True).stdout
    plan = make_plan(build_profile(str(evil_profile), {}))
    assert out.splitlines() == list(plan.argv)


def test_systemd_unit(evil_profile: Path) -> None:
    """The unit runs `vlaunch serve` on the profile file (tests/test_render_systemd.py has the rest): the profile's
    values stay in the profile, and the model in the description is one line with `%` escaped."""
    _, text = _render(str(evil_profile), "--as", "systemd")
    exec_line = next(line for line in text.splitlines() if line.startswith("ExecStart="))
    assert f'"serve" "{evil_profile}"' in exec_line
    assert 'Description=vLLM evil-b: weird/"&<>model (vlaunch serve)' in text
    assert "$HOME" not in text and "FOO" not in text and "Environment=" not in text
    assert "Restart=on-failure" in text and "KillMode=mixed" in text
    assert "[Install]" in text and "WantedBy=multi-user.target" in text


def test_docker_line_for_a_cli_profile(evil_profile: Path) -> None:
    _, text = _render(str(evil_profile), "--as", "docker")
    assert "\ndocker run \\\n" in text and "nvcr.io/nvidia/vllm" in text
    assert shlex.quote(EVIL_MODEL) in text and "-e 'FOO=x y'" in text


@pytest.mark.parametrize("profile", ["llama8b-32k", "llama70b-awq-32k", "qwen3-30b-a3b-8k"])
def test_vllm_config_round_trips_to_the_plan_argv(profile: str) -> None:
    _, text = _render(profile, "--as", "vllm-config")
    data = yaml.safe_load(text)
    plan = make_plan(build_profile(profile, {}))
    assert data["model"] == plan.profile.model
    assert all("_" not in k for k in data)
    assert config_to_args(data) == vllm_args(plan)
    argv = list(plan.argv)
    assert argv[argv.index(plan.profile.model) + 1 :] == vllm_args(plan)


def test_vllm_config_flags_and_lists(tmp_path: Path) -> None:
    p = tmp_path / "p.yaml"
    p.write_text(
        yaml.safe_dump(
            {
                "model": "meta-llama/Llama-3.1-8B-Instruct",
                "machine": "h100-80gb",
                "max_model_len": 8192,
                "enforce_eager": True,
                "vllm": {"extra_args": ["--enable-prefix-caching", "--ignore-patterns", "a", "b", "--seed=7"]},
            }
        )
    )
    plan = make_plan(build_profile(str(p), {}))
    m = config_mapping(plan)
    assert m["enforce-eager"] is True and m["enable-prefix-caching"] is True
    assert m["ignore-patterns"] == ["a", "b"] and m["seed"] == 7 and m["max-model-len"] == 8192
    assert config_to_args(yaml.safe_load(render_launch(plan, "vllm-config")))[-5:] == [
        "--ignore-patterns",
        "a",
        "b",
        "--seed",
        "7",
    ]


def test_render_to_a_file_and_json(tmp_path: Path) -> None:
    out = tmp_path / "unit.service"
    r = CliRunner().invoke(main, ["render", "llama8b-32k", "--as", "systemd", "-o", str(out)])
    assert r.exit_code == 0 and r.stdout == "" and out.read_text().startswith("# Generated by vlaunch")
    r = CliRunner().invoke(main, ["render", "llama8b-32k", "--as", "vllm-config", "--json"])
    d = json.loads(r.stdout)
    assert d["as"] == "vllm-config" and d["fits"] is True and "max-model-len: 32768" in d["text"]
    r = CliRunner().invoke(main, ["render", "llama8b-32k", "--as", "nope"])
    assert r.exit_code == 2
