"""What a user asks to launch: a profile, a pasted vLLM command, vLLM's flags and vlaunch's own, layered into one
profile read the way the vLLM that runs reads them.

Precedence, highest first: vlaunch's flags and the vLLM flags given to vlaunch itself, then the pasted command
(`vlaunch plan -- vllm serve …`), then vLLM's `--config` YAML, then the profile file. The vLLM words of every layer
are read with the option table of the release the launch runs (stated, read from its python, or known for its
image), so an alias, an underscore, a prefix or a dotted key means what it means to that vLLM.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from launcher.common.errors import ProfileError, VlaunchError
from launcher.common.records import dataclass
from launcher.plan.profiles import FIELDS, Profile, VllmSection
from launcher.vllm import interface as I
from launcher.vllm.flags import Parsed, parse_serve_args, read_serve_config

if TYPE_CHECKING:
    from launcher.vllm import shell

# The words that start a pasted launch rather than name a profile.
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")  # NAME=value, an environment prefix
_LAUNCH_WORDS = frozenset({"vllm", "docker", "podman", "sudo", "env", "nohup", "exec", "bash", "sh", "uv", "uvx"})


def is_launch_word(word: str) -> bool:
    """`vllm`, `docker`, `sudo`, `python3`, `NAME=value` …: the first word of a pasted launch."""
    base = os.path.basename(word)
    return base in _LAUNCH_WORDS or base.startswith("python") or bool(_ASSIGNMENT.match(word)) or " " in word


def is_vllm_spelling(name: str) -> bool:
    """An option name the newest vLLM takes as it is written (underscores read as dashes)."""
    if name.startswith("--"):
        name = "--" + name[2:].replace("_", "-")
    return name in I.newest().by_spelling


def split_words(words: Sequence[str]) -> tuple[str | None, tuple[str, ...]]:
    """PROFILE and/or a pasted launch (after --): `plan p`, `plan -- vllm serve M …`, `plan p -- docker run …`."""
    if not words:
        return None, ()
    if is_launch_word(words[0]):
        return None, tuple(words)
    return words[0], tuple(words[1:])


# ---- vLLM flags given to vlaunch itself -------------------------------------------------------------------------


def _vllm_flag(name: str, *, older: bool = True) -> I.Flag | None:
    """The option a word names in the newest table (underscores, unique prefixes, dotted keys, -O read as vLLM
    does), or in an older table when the newest lacks it (`older`)."""
    key = name.partition("=")[0]
    if key.startswith("--"):
        key = "--" + key[2:].partition(".")[0].replace("_", "-")
    elif key.startswith("-O") and key != "-O":
        key = "--optimization-level"
    elif "." in key:
        key = key.partition(".")[0]
    releases = list(reversed(I.available()))
    for release in releases if older else releases[:1]:
        table = I.load(release).by_spelling
        if key in table:
            return table[key]
        if key.startswith("--"):
            hits = {f.dest: f for s, f in table.items() if s.startswith(key)}
            if len(hits) == 1:
                return next(iter(hits.values()))
    return None


_NEGATIVE = re.compile(r"^-\d+$|^-\d*\.\d+$")  # argparse reads these as values, not options


def _values_of(flag: I.Flag, args: Sequence[str], i: int) -> int:
    """How many words from args[i] an option given to vlaunch takes as its values (argparse's nargs)."""

    def free(k: int) -> bool:
        return k < len(args) and args[k] != "--" and (not args[k].startswith("-") or bool(_NEGATIVE.match(args[k])))

    if flag.nargs in ("+", "*"):
        n = 0
        while free(i + n):
            n += 1
        return n
    if flag.nargs == "?":
        return 1 if free(i) else 0
    count = flag.nargs if isinstance(flag.nargs, int) else 1
    return min(count, len(args) - i)


def split_vllm_words(args: Sequence[str], own: Mapping[str, bool]) -> tuple[list[str], list[str]]:
    """(the words for vlaunch's own options and arguments, the vLLM options given to vlaunch with their values).

    `own`: vlaunch's option names (those no vLLM takes) -> whether each takes a value. Everything after `--` is
    the pasted command and stays. `--gpu-memory-utilization auto` stays too: vlaunch's auto (vLLM takes a number).
    A word no vLLM release takes stays for vlaunch's parser to refuse."""
    keep: list[str] = []
    vllm: list[str] = []
    i = 0
    while i < len(args):
        word = args[i]
        name = word.partition("=")[0]
        if word == "--":
            keep += args[i:]
            break
        flag = None if name in own or not word.startswith("-") or word == "-" else _vllm_flag(word)
        if flag is None or (flag.dest == "gpu_memory_utilization" and args[i + 1 : i + 2] == ["auto"]):
            takes = own.get(name, flag is not None) and "=" not in word
            keep += args[i : i + 1 + int(takes and i + 1 < len(args))]
            i += 1 + int(takes and i + 1 < len(args))
            continue
        vllm.append(word)
        i += 1
        if "=" in word or (word.startswith("-O") and len(word) > 2):
            continue  # the value is attached
        n = 1 if "." in name else _values_of(flag, args, i) if flag.takes_value else 0
        vllm += args[i : i + n]
        i += n
    return keep, vllm


# ---- layering ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Asked:
    """The profile a user asked for, and what the reading noticed (wrappers not repeated, unmodelled flags)."""

    profile: Profile
    notes: tuple[str, ...] = ()
    inputs: tuple[str, ...] = ()  # files read besides the profile (vLLM's --config YAML)
    shadowing: str | None = None  # a bare name found a local file that shadows the bundled profile of that name


def _field_dests() -> dict[str, Any]:
    return {spec.dest: spec for spec in FIELDS}


def _launch_values(launch: shell.Launch) -> dict[str, Any]:
    """A pasted command's launch, as the profile's vllm section says it."""
    v: dict[str, Any] = {"launch": launch.mode}
    if launch.executable:
        v["executable"] = launch.executable
    if launch.python:
        v["python"] = launch.python
    if launch.image:
        v["image"] = launch.image
    if launch.container_name:
        v["container_name"] = launch.container_name
    if launch.container_args:
        v["container_args"] = list(launch.container_args)
    if launch.entrypoint_serves is not None and launch.image:
        v["entrypoint_serves"] = launch.entrypoint_serves
    if launch.exec_container:
        v["exec_container"] = launch.exec_container
    if launch.runtime != "docker":
        v["container_runtime"] = launch.runtime
    if launch.env:
        v["env"] = dict(launch.env)
    if launch.pass_env:
        v["pass_env"] = list(launch.pass_env)
    return v


def _version_section(values: Mapping[str, Any], launch: shell.Launch | None, base: Profile | None) -> VllmSection:
    """The vllm section that decides which vLLM runs: flags over the pasted launch over the profile."""
    raw: dict[str, Any] = {}
    if base is not None:
        raw.update({k: getattr(base.vllm, k) for k in ("version", "launch", "executable", "python", "image")})
    if launch is not None:
        pasted = _launch_values(launch)
        raw.update({k: pasted[k] for k in ("launch", "executable", "python", "image") if k in pasted})
        if launch.mode != "container":
            raw["image"] = None
    for key in ("version", "launch", "executable", "python", "image"):
        if values.get(f"vllm_{key}") is not None:
            raw[key] = values[f"vllm_{key}"]
    return VllmSection(**{k: v for k, v in raw.items() if v is not None})


def _refuse_own_flags(launch: shell.Launch, own: Mapping[str, bool], iface: I.Interface) -> None:
    """vlaunch's own options after `--` go to vLLM, which does not take them: refused with a pointer."""
    for word in launch.args:
        name = word.partition("=")[0]
        if name in own and name not in iface.by_spelling and _vllm_flag(word) is None:
            raise VlaunchError(
                f"{name} is vlaunch's option, not vLLM's: put it before `--` (vlaunch … {name} -- vllm serve …)",
                source="command",
            )


def _layers(
    values: dict[str, Any], launch: shell.Launch | None, vllm_words: Sequence[str], iface: I.Interface
) -> tuple[list[Parsed], str | None]:
    layers: list[Parsed] = []
    if vllm_words:
        layers.append(parse_serve_args(vllm_words, iface, where="flags", pasted=False))
    if launch is not None:
        layers.append(parse_serve_args(launch.args, iface, where="command", serve=launch.serve))
    serve_config = values.pop("serve_config", None) or next((x.serve_config for x in layers if x.serve_config), None)
    if serve_config:
        from launcher.plan.profiles import check_yaml_file

        check_yaml_file(serve_config, VlaunchError)
        from_file, hf_config = read_serve_config(serve_config, iface)
        if hf_config:
            values.setdefault("config", hf_config)
        layers.append(from_file)
    return layers, serve_config


def _merged_extra(base: Profile | None, layers: list[Parsed], iface: I.Interface) -> list[str]:
    """Every layer's pass-through options, read once more so that each option appears once, the highest layer's
    value kept."""
    words: list[str] = list(base.vllm.extra_args) if base is not None else []
    for layer in reversed(layers):
        words += layer.extra_args
    if not words:
        return []
    return parse_serve_args(["__model__", *words], iface, where="vllm.extra_args").extra_args


def build(
    profile: str | None,
    flags: Mapping[str, Any],
    command: Sequence[str] = (),
    vllm_words: Sequence[str] = (),
    *,
    own: Mapping[str, bool] | None = None,
    env: Mapping[str, str] | None = None,
) -> Asked:
    """The profile asked for. `flags` holds vlaunch's option values by field dest ("users", "machine",
    "vllm_version", "serve_config"…); `vllm_words` the vLLM options given to vlaunch; `command` a pasted launch."""
    from launcher.plan.profiles import load_profile, resolve_profile_arg, shadowing_note
    from launcher.vllm.detect import detect_version

    values = {k: v for k, v in flags.items() if v is not None}
    env = os.environ if env is None else env
    launch = None
    if command:
        from launcher.vllm import shell  # a pasted command's words and wrappers

        launch = shell.read(command, env)
    if profile and _is_config_json(profile):
        values.setdefault("config", profile)
        profile = None
    found = resolve_profile_arg(profile, Path.cwd() / "profiles") if profile else None
    base = load_profile(found) if found else None
    iface = I.for_version(detect_version(_version_section(values, launch, base), ask=False).version)
    if launch is not None:
        _refuse_own_flags(launch, own or {}, iface)
    layers, serve_config = _layers(values, launch, vllm_words, iface)
    for layer in layers:
        for k, v in layer.values.items():
            values.setdefault(k, v)
    overrides, vllm = _overrides(values)
    if launch is not None:
        for k, v in _launch_values(launch).items():
            vllm.setdefault(k, v)
    extra = _merged_extra(base, layers, iface)
    if extra or (base is not None and base.vllm.extra_args):
        vllm["extra_args"] = extra
    notes = list(launch.notes if launch else ())  # the plan names the flags passed on (check_launch)
    if base is not None:
        for key in ("model", "config"):
            if values.get(key):
                overrides[key] = values[key]
        if vllm:
            overrides["vllm"] = vllm
        p = base.with_overrides(**overrides) if overrides else base
    else:
        p = _from_flags(values.get("model"), values.get("config"), overrides)
        p = p.with_overrides(vllm=vllm) if vllm else p
    shadowing = shadowing_note(profile, found) if profile and found else None
    return Asked(p, tuple(dict.fromkeys(notes)), (serve_config,) if serve_config else (), shadowing)


def _overrides(values: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(profile keys, vllm-section keys) from planning values."""
    overrides: dict[str, Any] = {}
    vllm: dict[str, Any] = {}
    for spec in FIELDS:
        value = values.get(spec.dest)
        if value is None or spec.key in ("model", "config") or ("." in spec.key and not spec.key.startswith("vllm.")):
            continue
        if spec.key in ("limit_mm_per_prompt", "speculative_config") and isinstance(value, str):
            value = _json_value(value, spec.flags[0] if spec.flags else spec.key)
        if spec.key.startswith("vllm."):
            vllm[spec.key[5:]] = value
        else:
            overrides[spec.key] = value
    return overrides, vllm


def _json_value(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as e:
        raise ProfileError(f"not JSON: {e}", field=where) from None
    except RecursionError:
        raise ProfileError("not JSON: nested too deeply", field=where) from None


def _from_flags(model: str | None, config: str | None, overrides: dict[str, Any]) -> Profile:
    from launcher.plan.planning import profile_from_flags

    return profile_from_flags(model, config, **overrides)


def _is_config_json(arg: str) -> bool:
    """A model's config.json given where a profile goes: read as --hf-config-path."""
    if not arg.endswith(".json"):
        return False
    try:
        with open(os.path.expanduser(arg), encoding="utf-8") as fh:
            head = fh.read(1 << 16)
    except (OSError, ValueError):
        return False
    return bool(re.search(r'"(model_type|architectures)"\s*:', head))


def vllm_values(words: Sequence[str], flags: Mapping[str, Any], profile: str | None = None) -> Parsed:
    """The vLLM options given to a command, read with the table of the vLLM the launch runs: planning values
    (by the planning flags' dests) and the pass-through options."""
    from launcher.plan.profiles import load_profile, resolve_profile_arg
    from launcher.vllm.detect import detect_version

    values = {k: v for k, v in flags.items() if v is not None}
    base = load_profile(resolve_profile_arg(profile, Path.cwd() / "profiles")) if profile else None
    iface = I.for_version(detect_version(_version_section(values, None, base), ask=False).version)
    return parse_serve_args(words, iface, where="flags", pasted=False)
