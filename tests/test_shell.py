"""A pasted launch read as a shell runs it: words, variables, and the wrappers around `vllm serve`."""

from __future__ import annotations

import os

import pytest

from launcher.vllm import shell
from launcher.vllm.shell import CommandError, read


def words(text: str, env: dict[str, str] | None = None) -> list[str]:
    return [w.text(env or {}) for w in shell.split(text)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("vllm serve m --x 1", ["vllm", "serve", "m", "--x", "1"]),
        ("a 'b c' \"d e\" f\\ g", ["a", "b c", "d e", "f g"]),
        ('--sc \'{"method": "mtp"}\'', ["--sc", '{"method": "mtp"}']),
        ('--sc "{\\"a\\": 1}"', ["--sc", '{"a": 1}']),
        ("a \\\n  b", ["a", "b"]),
        ("x=1 y='a b' cmd", ["x=1", "y=a b", "cmd"]),
        ("a && b; c | d", ["a", "&&", "b", ";", "c", "|", "d"]),
        ("''", [""]),
    ],
)
def test_words_as_a_shell_splits_them(text: str, expected: list[str]) -> None:
    assert words(text) == expected


def test_variables_come_from_the_environment() -> None:
    env = {"M": "Qwen/Qwen3-8B", "TAG": "26.05-py3"}
    assert words("vllm serve $M", env)[-1] == "Qwen/Qwen3-8B"
    assert words("nvcr.io/nvidia/vllm:${TAG}", env) == ["nvcr.io/nvidia/vllm:26.05-py3"]
    assert words("'$M'", env) == ["$M"]  # single quotes: no expansion
    assert words("${UNSET:-fallback}", env) == ["fallback"]
    assert words("-v $(pwd)/x:/y") == ["-v", f"{os.getcwd()}/x:/y"]
    assert words("~/m")[0] == os.path.expanduser("~") + "/m"


def test_an_unset_variable_is_refused_by_name() -> None:
    with pytest.raises(CommandError, match=r"\$HF_MODEL_HANDLE is not set"):
        read(["vllm serve ${HF_MODEL_HANDLE} --max-model-len 4096"], {})


def test_command_substitution_other_than_pwd_is_refused() -> None:
    with pytest.raises(CommandError, match=r"\$\(hostname\)"):
        read(["vllm serve m --host $(hostname)"], {})


@pytest.mark.parametrize(
    ("command", "mode"),
    [
        (["vllm", "serve", "m", "-tp", "2"], "cli"),
        (["/opt/venv/bin/vllm", "serve", "m"], "cli"),
        (["CUDA_VISIBLE_DEVICES=0", "vllm", "serve", "m"], "cli"),
        (["env", "A=1", "vllm", "serve", "m"], "cli"),
        (["sudo", "-E", "-u", "me", "vllm", "serve", "m"], "cli"),
        (["nohup", "vllm", "serve", "m"], "cli"),
        (["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"], "module"),
        (["python", "-m", "vllm.entrypoints.cli.main", "serve", "m"], "module"),
        (
            ["sudo", "docker", "run", "--gpus", "all", "nvcr.io/nvidia/vllm:25.11-py3", "vllm", "serve", "m"],
            "container",
        ),
        (["podman", "run", "img", "vllm", "serve", "m"], "container"),
        (["docker", "run", "vllm/vllm-openai:v0.20.0", "m", "-tp", "1"], "container"),
        (["docker", "exec", "-it", "c", "/bin/bash", "-c", "vllm serve m -tp 2"], "container"),
        (["bash", "-c", "cd /x && vllm serve m"], "cli"),
        (["./launch-cluster.sh", "exec", "vllm", "serve", "m"], "cli"),
    ],
)
def test_wrappers_reach_vllm_serve(command: list[str], mode: str) -> None:
    launch = read(command, {})
    assert launch.mode == mode
    assert "m" in launch.args or "--model" in launch.args


def test_docker_run_keeps_its_options() -> None:
    launch = read(
        ["docker run -it --rm --gpus '\"device=1\"' -v /data/hf:/root/.cache/huggingface --shm-size=16g "
         "-e VLLM_LOGGING_LEVEL=DEBUG -e HF_TOKEN=$HF_TOKEN --name mine -p 8000:8000 "
         "nvcr.io/nvidia/vllm:26.05-py3 vllm serve Qwen/Qwen3-8B --max-model-len 8192"],
        {},
    )  # fmt: skip
    assert launch.image == "nvcr.io/nvidia/vllm:26.05-py3" and launch.entrypoint_serves is False
    assert launch.container_args == ("--gpus", '"device=1"', "-v", "/data/hf:/root/.cache/huggingface",
                                     "--shm-size", "16g")  # fmt: skip
    assert launch.env == (("VLLM_LOGGING_LEVEL", "DEBUG"),)
    assert launch.pass_env == ("HF_TOKEN",)  # `-e HF_TOKEN=$HF_TOKEN` passes the caller's own, by name
    assert launch.container_name == "mine"
    assert launch.args == ("Qwen/Qwen3-8B", "--max-model-len", "8192")
    notes = " ".join(launch.notes)
    assert "-p 8000:8000 is not repeated" in notes and "-i -t not repeated" in notes


def test_the_vllm_openai_image_runs_vllm_serve_as_its_entrypoint() -> None:
    launch = read(["docker run --gpus all vllm/vllm-openai:latest --model m --max-model-len 4096"], {})
    assert launch.entrypoint_serves is True
    assert launch.args == ("--model", "m", "--max-model-len", "4096")


def test_nvidias_two_spark_playbook_form() -> None:
    launch = read(
        ["docker exec -it $VLLM_CONTAINER /bin/bash -c ' vllm serve meta-llama/Llama-3.3-70B-Instruct "
         "--tensor-parallel-size 2 --max_num_batched_tokens 64'"],
        {"VLLM_CONTAINER": "node-1"},
    )  # fmt: skip
    assert launch.exec_container == "node-1"
    assert launch.args == ("meta-llama/Llama-3.3-70B-Instruct", "--tensor-parallel-size", "2",
                           "--max_num_batched_tokens", "64")  # fmt: skip


def test_a_chained_command_keeps_the_vllm_part_and_says_what_it_drops() -> None:
    launch = read(
        ['docker run --entrypoint /bin/bash vllm/vllm-openai:v0.20.0 -c "pip install vllm[audio] && vllm serve /m"'],
        {},
    )
    assert launch.args == ("/m",) and launch.entrypoint_serves is False
    assert any("pip install vllm[audio]" in n for n in launch.notes)


@pytest.mark.parametrize(
    "command",
    [["ls", "-la"], ["docker", "run", "img"], ["python3", "-m", "http.server"], ["bash", "-c", "echo hi"]],
)
def test_not_a_vllm_launch_is_one_line(command: list[str]) -> None:
    with pytest.raises(CommandError) as e:
        read(command, {})
    assert "\n" not in e.value.one_line()


def test_one_word_holding_the_whole_command_is_split() -> None:
    launch = read(["CUDA_VISIBLE_DEVICES=1 vllm serve m --max-model-len 4k"], {})
    assert launch.env == (("CUDA_VISIBLE_DEVICES", "1"),) and launch.args == ("m", "--max-model-len", "4k")


@pytest.mark.parametrize("runtime", ["docker", "podman"])
def test_a_container_run_without_an_image_is_refused(runtime: str) -> None:
    """`docker run vllm serve m/x` (the image left out) names no image called `vllm`: it is refused, saying so."""
    with pytest.raises(CommandError, match=rf"{runtime} run names no image"):
        read([f"{runtime} run --gpus all vllm serve m/x"], {})
