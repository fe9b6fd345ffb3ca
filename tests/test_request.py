"""What a user asks for, as one request: a profile, a pasted command, vLLM's flags given to vlaunch, vlaunch's own
flags — and the cases where the pieces used to be misread."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from launcher.cli import main

FIXTURES = Path(__file__).resolve().parent / "fixtures"
LLAMA = FIXTURES / "configs" / "Llama-2-7b-hf.json"  # its _name_or_path: meta-llama/Llama-2-7b-hf


def plan(*args: str) -> tuple[int, dict[str, Any] | None, str]:
    r = CliRunner().invoke(main, ["plan", "--machine", "h100", "--json", *args], env={"HF_HUB_OFFLINE": "1"})
    data = json.loads(r.stdout) if r.exit_code in (0, 3) else None
    return r.exit_code, data, r.stderr


def test_vlaunchs_own_flag_after_the_pasted_command_is_refused() -> None:
    r = CliRunner().invoke(main, ["serve", "--", "vllm", "serve", "Qwen/Qwen3-8B", "--dry-run"])
    assert r.exit_code == 2
    assert "--dry-run is vlaunch's option, not vLLM's: put it before `--`" in r.stderr


def test_an_alias_is_planned_once() -> None:
    code, d, _ = plan("--", "vllm", "serve", "Qwen/Qwen3-8B", "--device-memory-utilization", "0.5")
    assert code in (0, 3) and d is not None
    assert d["gpu_memory_utilization"] == 0.5
    argv = d["vllm_argv"]
    assert "--device-memory-utilization" not in argv and argv.count("--gpu-memory-utilization") == 1
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.5"


def test_flags_beat_the_pasted_command() -> None:
    code, d, _ = plan("--max-model-len", "4096", "--", "vllm", "serve", "Qwen/Qwen3-8B", "--max_model_len", "8192")
    assert code in (0, 3) and d is not None and d["vllm_request"]["max_model_len"] == 4096


def test_a_config_json_is_counted_not_served() -> None:
    code, d, _ = plan("--hf-config-path", str(LLAMA))
    assert code in (0, 3) and d is not None
    assert d["vllm_argv"][2] == "meta-llama/Llama-2-7b-hf"  # the repo its _name_or_path names, not the file
    code, d2, _ = plan(str(LLAMA))  # a config.json where a profile goes: read as --hf-config-path
    assert code in (0, 3) and d2 is not None and d2["weights_bytes"] == d["weights_bytes"]


def test_mtp_from_dotted_keys_and_spec_flags_counts_the_mtp_layers() -> None:
    model = str(FIXTURES / "configs-v2" / "extra" / "qwen3_5_moe--35b-a3b.json")
    _, off, _ = plan("--model", model, "--max-model-len", "32k")
    for words in (["-sc", '{"method": "mtp", "num_speculative_tokens": 1}'],
                  ["--speculative-config.method", "mtp", "--speculative-config.num_speculative_tokens", "1"],
                  ["--spec-method", "mtp", "--spec-tokens", "1"]):  # fmt: skip
        _, on, _ = plan("--", "vllm", "serve", model, "--max-model-len", "32k", *words)
        assert off is not None and on is not None
        assert on["weights_bytes"] > off["weights_bytes"], words  # the MTP layer's weights
        assert on["vllm_request"]["speculative_config"] == {"method": "mtp", "num_speculative_tokens": 1}


def test_a_profiles_extra_args_setting_a_planned_field_become_that_field(tmp_path: Path) -> None:
    p = tmp_path / "p.yaml"
    p.write_text("model: Qwen/Qwen3-8B\nmax_model_len: 8192\nvllm:\n  extra_args: [--max_model_len, '4096', -O3]\n")
    code, d, _ = plan(str(p))
    assert code in (0, 3) and d is not None
    assert d["vllm_request"]["max_model_len"] == 4096  # the command's later word, as vLLM reads it
    argv = d["vllm_argv"]
    assert argv.count("--max-model-len") == 1 and argv[-2:] == ["--optimization-level", "3"]


def test_a_flag_the_release_lacks_in_a_profile_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "p.yaml"
    p.write_text("model: Qwen/Qwen3-8B\nvllm:\n  version: '0.32.0'\n  extra_args: [--swap-space, '4']\n")
    code, _, err = plan(str(p))
    assert code == 2 and "vLLM 0.32.0 has no --swap-space (vLLM 0.10.0–0.17.1 has it)" in err
