"""vLLM's own ways of saying what to serve: a `vllm serve` command line and its `--config` YAML.

Both become the keyword values the CLI's planning flags produce (a profile field's dest: "max_model_len",
"vllm_port", …). The flags vlaunch models map to profile fields; every other flag `vllm serve` takes is kept,
as written, for the launch (`extra_args`), and those among them that change memory are named in a note, since
the plan does not model them. A near miss of a flag `vllm serve` takes (a typo) is an error naming the flag
meant; a flag it does not know at all may be another version's and is passed on as written.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import field
from typing import Any

from launcher.errors import VlaunchError
from launcher.records import dataclass

# vLLM flags that change memory but that the plan does not model: kept for the launch, and named in the plan.
UNMODELLED_MEMORY_FLAGS: dict[str, str] = {
    "--cpu-offload-gb": "weights offloaded to CPU memory shrink the GPU's weights bucket",
    "--swap-space": "pinned CPU swap per GPU (host memory; on a Spark the same memory)",
    "--num-gpu-blocks-override": "a fixed number of KV blocks instead of the profiled pool",
    "--compilation-config": "CUDA graph capture sizes and modes change the graph memory",
    "--cuda-graph-sizes": "CUDA graph capture sizes change the graph memory",
    "--max-cudagraph-capture-size": "CUDA graph capture sizes change the graph memory",
    "--kv-offloading-size": "KV blocks offloaded to CPU memory",
    "--mm-processor-cache-gb": "the multimodal processor cache (host memory)",
    "--hf-overrides": "config overrides can change the model's shape",
    "--decode-context-parallel-size": "decode context parallel shards the KV cache",
    "--prefill-context-parallel-size": "prefill context parallel shards the KV cache",
    "--enable-lora": "LoRA adapters add weights and activation memory",
    "--max-loras": "LoRA adapters add weights and activation memory",
    "--max-lora-rank": "LoRA adapters add weights and activation memory",
    "--calculate-kv-scales": "dynamic KV scales",
    "--max-num-partial-prefills": "concurrent partial prefills change the activation peak",
}


def unmodelled_notes(extra_args: Sequence[str]) -> list[str]:
    """A note for each pass-through flag that changes memory in a way the plan does not model."""
    notes = []
    for arg in extra_args:
        flag = arg.partition("=")[0]
        if flag == "-cc":
            flag = "--compilation-config"
        if flag in UNMODELLED_MEMORY_FLAGS:
            notes.append(f"{flag} is passed to vLLM but not modelled: {UNMODELLED_MEMORY_FLAGS[flag]}")
    return notes


@dataclass
class Parsed:
    """What a command line or serve config said, as planning-flag keyword values."""

    values: dict[str, Any] = field(default_factory=dict)
    extra_args: list[str] = field(default_factory=list)  # flags passed to vLLM untouched


def _serve_flags() -> dict[str, tuple[str, bool]]:
    """Every spelling `vllm serve` takes -> (its first spelling, takes a value)."""
    from launcher.vllm.serve_flags import SERVE_FLAGS

    return {name: (names[0], takes) for names, takes in SERVE_FLAGS for name in names}


def _field_flags() -> dict[str, Any]:
    """Every spelling of a profile field's flag -> its FieldSpec."""
    from launcher.profiles import FIELDS

    return {flag: spec for spec in FIELDS for flag in spec.flags}


def _no_form(flag: str, fields: Mapping[str, Any]) -> Any:
    if flag.startswith("--no-"):
        spec = fields.get("--" + flag[5:])
        if spec is not None and spec.switch in ("flag", "onoff"):
            return spec
    return None


def _is_value(token: str) -> bool:
    return not token.startswith("-") or token.lstrip("-").replace(".", "", 1).isdigit()


def parse_serve_args(args: Sequence[str], *, where: str = "command") -> Parsed:
    """The flags after `vllm serve MODEL` (and MODEL itself, or --model) -> planning values and pass-through."""
    fields = _field_flags()
    known = _serve_flags()
    out = Parsed()
    i = 0
    while i < len(args):
        tok = args[i]
        i += 1
        if not tok.startswith("-") or tok == "-":
            if "model" in out.values:
                raise VlaunchError(f"a second model {tok!r} in the vllm command", source=where)
            out.values["model"] = tok
            continue
        flag, eq, inline = tok.partition("=")
        if flag in ("--model", "--config"):
            value = inline if eq else (args[i] if i < len(args) else None)
            if value is None:
                raise VlaunchError(f"{flag} needs a value", source=where)
            i += 0 if eq else 1
            out.values["model" if flag == "--model" else "serve_config"] = value
            continue
        spec = fields.get(flag)
        if spec is not None:
            if spec.switch:
                truth = True if not eq else inline.lower() in ("1", "true", "yes", "on")
                out.values[spec.dest] = truth
                continue
            value = inline if eq else (args[i] if i < len(args) else None)
            if value is None:
                raise VlaunchError(f"{flag} needs a value", source=where)
            i += 0 if eq else 1
            out.values[spec.dest] = _typed(spec, value)
            continue
        if (spec := _no_form(flag, fields)) is not None:
            out.values[spec.dest] = False
            continue
        if flag not in known and flag not in UNMODELLED_MEMORY_FLAGS:
            # a typo of a flag vLLM takes is refused; anything else may be another version's flag: passed on
            import difflib  # only for a flag vLLM does not have

            close = difflib.get_close_matches(flag, [*known, *fields], n=1, cutoff=0.85)
            if close:
                raise VlaunchError(f"vllm serve takes no flag {flag}; did you mean {close[0]}?", source=where)
        _, takes = known.get(flag, (flag, True))
        out.extra_args.append(tok)
        if takes and not eq and i < len(args) and _is_value(args[i]):
            out.extra_args.append(args[i])
            i += 1
    return out


def _typed(spec: Any, value: str) -> Any:
    if spec.cli_type == "int":
        try:
            return int(value)
        except ValueError:
            return value  # the profile validator names the problem
    if spec.cli_type == "float" or (spec.metavar or "").endswith("|auto"):
        try:
            return float(value)
        except ValueError:
            return value
    return value


_PYTHON_MODULES = ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.cli.main")


def parse_command(words: Sequence[str]) -> Parsed:
    """A pasted launch: `vllm serve MODEL …`, `python -m vllm.entrypoints.openai.api_server --model M …` or
    `docker run … IMAGE vllm serve MODEL …` -> planning values (launch mode, python, image included)."""
    w = list(words)
    if not w:
        raise VlaunchError("no command after --; paste the `vllm serve …` you run")
    launch: dict[str, Any] = {}
    if os.path.basename(w[0]) == "docker" and "run" in w[:3]:
        try:
            at = next(k for k in range(len(w) - 1) if os.path.basename(w[k]) == "vllm" and w[k + 1] == "serve")
        except StopIteration:
            raise VlaunchError("a docker command without `vllm serve` in it", source="command") from None
        image = w[at - 1]
        launch = {"vllm_launch": "container", "vllm_image": image}
        if "--name" in w[:at]:
            launch["vllm_container_name"] = w[w.index("--name") + 1]
        rest = w[at + 2 :]
    elif os.path.basename(w[0]).startswith("python") and "-m" in w[1:3]:
        module = w[w.index("-m") + 1] if w.index("-m") + 1 < len(w) else ""
        if module not in _PYTHON_MODULES:
            raise VlaunchError(f"python -m {module}: not vLLM's server module", source="command")
        launch = {"vllm_launch": "module", "vllm_python": w[0]}
        rest = w[w.index("-m") + 2 :]
        if module == "vllm.entrypoints.cli.main" and rest[:1] == ["serve"]:
            rest = rest[1:]
    elif os.path.basename(w[0]) == "vllm" and w[1:2] == ["serve"]:
        launch = {"vllm_launch": "cli"}
        if w[0] != "vllm":
            launch["vllm_executable"] = w[0]
        rest = w[2:]
    else:
        raise VlaunchError(
            f"not a vLLM launch: {' '.join(w[:3])} … (expected `vllm serve MODEL …`, "
            "`python -m vllm.entrypoints.openai.api_server …` or `docker run … vllm serve …`)",
            source="command",
        )
    parsed = parse_serve_args(rest)
    for k, v in launch.items():
        parsed.values.setdefault(k, v)
    return parsed


def read_serve_config(path: str) -> tuple[Parsed, str | None]:
    """vLLM's `--config` YAML (flag names as keys, with - or _) -> (planning values, None); a config.json given
    there instead -> (nothing, its path), read as --hf-config-path."""
    import yaml

    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except FileNotFoundError:
        raise VlaunchError("no such file", source=path) from None
    except OSError as e:
        raise VlaunchError(f"cannot read: {e.strerror}", source=path) from None
    except yaml.YAMLError as e:
        raise VlaunchError(f"not YAML: {' '.join(str(e).split())}", source=path) from None
    if not isinstance(data, Mapping):
        raise VlaunchError("a serve config is a mapping of vllm serve flags to values", source=path)
    if "model_type" in data or "architectures" in data:
        return Parsed(), path  # a model's config.json: --hf-config-path
    args: list[str] = []
    for key, value in data.items():
        flag = "--" + str(key).replace("_", "-")
        if value is None:
            continue
        if isinstance(value, bool):
            if value:
                args.append(flag)
            elif "--no-" + flag[2:] in _serve_flags() or flag in _field_flags():
                args.append("--no-" + flag[2:])
        elif isinstance(value, Mapping | list):
            import json

            args += [flag, json.dumps(value)]
        else:
            args += [flag, str(value)]
    return parse_serve_args(args, where=path), None
