"""Launch profiles: a YAML file validated into typed, frozen dataclasses.

Every error is a ProfileError that names the file, the dotted key path and, for an unknown key, the closest
known one. Relative paths in a profile (model, config, python, executable) are resolved against the profile's
directory first, then the current working directory; a model found in neither is kept as written (a repo id).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NoReturn, get_args

from launcher.common.chars import unsafe_char as unsafe_char  # re-exported for callers of profiles.unsafe_char
from launcher.common.errors import ProfileError, VlaunchError
from launcher.common.records import dataclass
from launcher.common.units import human_readable_int, parse_size
from launcher.model.formats import ALIASES, FORMATS
from launcher.model.kv import KV_CACHE_DTYPES
from launcher.plan.machines import INTERCONNECTS, MACHINE_ALIASES, MACHINE_NAMES, Interconnect, MachineName

if TYPE_CHECKING:
    import yaml

Dtype = Literal["auto", "bfloat16", "float16", "float32"]
DTYPES: tuple[Dtype, ...] = get_args(Dtype)
DTYPE_ALIASES: dict[str, Dtype] = {
    "bf16": "bfloat16", "fp16": "float16", "half": "float16", "float": "float32", "fp32": "float32",
}  # fmt: skip

LaunchMode = Literal["cli", "module", "container"]
ContainerRuntime = Literal["docker", "podman"]
MambaDtype = Literal["auto", "float32", "bfloat16", "float16"]
MambaCacheMode = Literal["auto", "none", "align"]
Runner = Literal["auto", "generate", "pooling", "draft"]
# vLLM 0.32's SpeculativeConfig fields a profile may set (vllm/config/speculative.py), and its methods.
SPECULATIVE_KEYS = (
    "method", "num_speculative_tokens", "model", "draft_tensor_parallel_size", "tensor_parallel_size",
    "quantization", "kv_cache_dtype", "max_model_len", "revision", "code_revision", "enforce_eager",
    "prompt_lookup_max", "prompt_lookup_min", "disable_padded_drafter_batch", "parallel_drafting",
    "attention_backend", "moe_backend", "rejection_sample_method", "draft_sample_method",
)  # fmt: skip
SPECULATIVE_METHODS = (
    "ngram", "medusa", "mlp_speculator", "draft_model", "suffix", "eagle", "eagle3", "mtp", "ngram_gpu", "dflash",
    "dspark", "extract_hidden_states", "deepseek_mtp", "mimo_mtp", "mimo_v2_mtp", "glm4_moe_mtp",
    "glm4_moe_lite_mtp", "ernie_mtp", "nemotron_h_mtp", "qwen3_next_mtp", "qwen3_5_mtp", "longcat_flash_mtp",
    "exaone_moe_mtp", "pangu_ultra_moe_mtp", "step3p5_mtp",
)  # fmt: skip
LAUNCH_MODES: tuple[LaunchMode, ...] = get_args(LaunchMode)


Auto = Literal["auto"]

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True, kw_only=True)
class VllmSection:
    """The `vllm:` section: which vLLM, how it is started, and what it is told."""

    version: str | None = None
    launch: LaunchMode = "cli"
    executable: str = "vllm"
    python: str | None = None
    image: str | None = None
    container_name: str | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    extra_args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()  # (name, value) pairs in file order; dict(env) for a mapping
    served_model_name: str | tuple[str, ...] | None = None  # several names: vLLM's nargs "+"
    container_args: tuple[str, ...] = ()  # the container runtime's own options (mounts, -e, --gpus, --shm-size …)
    entrypoint_serves: bool | None = None  # the image's entrypoint runs `vllm serve` (None: known by the image)
    exec_container: str | None = None  # run vLLM inside this running container (`docker exec`)
    container_runtime: ContainerRuntime = "docker"
    pass_env: tuple[str, ...] = ()  # variables passed to the container by name from the caller's environment

    @property
    def version_info(self) -> tuple[int, int, int] | None:
        """`version` as (major, minor, patch), read with packaging ("v0.6.3.post1" -> (0, 6, 3)), or None."""
        from launcher.vllm.versions import parse_version

        try:
            return parse_version(self.version) if self.version else None
        except VlaunchError:
            return None

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["extra_args"] = list(self.extra_args)
        out["env"] = dict(self.env)
        out["container_args"] = list(self.container_args)
        out["pass_env"] = list(self.pass_env)
        if isinstance(self.served_model_name, tuple):
            out["served_model_name"] = list(self.served_model_name)
        return out


NodeRole = Literal["head", "worker"]
ExecutorBackend = Literal["mp", "ray", "uni", "external_launcher"]  # vLLM's ParallelConfig backends


@dataclass(frozen=True, kw_only=True)
class NodeSpec:
    """One machine of a multi-node launch (e.g. two DGX Sparks joined by their 200 Gb link)."""

    host: str
    role: NodeRole = "worker"
    machine: MachineName = "dgx-spark"
    gpus: int = 1
    ssh: str | None = None  # ssh destination (user@host); default: host. Loopback hosts run locally.
    os_reserve_gib: float | Auto = "auto"
    gpu_memory_gib: float | None = None

    def to_json(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


@dataclass(frozen=True, kw_only=True)
class Profile:
    """A validated launch profile. Build one with load_profile or profile_from_mapping, which validate."""

    model: str
    name: str = "profile"
    description: str = ""
    config: str | None = None
    quantization: str | None = None  # vLLM's --quantization as given, or a vlaunch format name (launcher/vllm/quant.py)
    dtype: Dtype = "auto"
    kv_cache_dtype: str = "auto"
    revision: str | None = None
    max_model_len: int | Auto | None = None
    users: int = 1
    machine: MachineName = "auto"
    gpu_memory_gib: float | None = None
    interconnect: Interconnect | Auto = "auto"  # how the GPUs of one box reach each other (auto: the machine's)
    cpu_bf16: bool | None = None  # CPU backend: the CPU has AVX512-BF16 (None: read from this box)
    os_reserve_gib: float | Auto = "auto"
    gpu_memory_utilization: float | Auto = "auto"
    biggest_pool: bool = False
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    data_parallel_size: int = 1
    decode_context_parallel_size: int = 1
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    enforce_eager: bool = False
    block_size: int | None = None
    kv_cache_memory_bytes: int | None = None
    overhead_gib: float | None = None
    distributed_executor_backend: ExecutorBackend | None = None
    enable_expert_parallel: bool = False
    language_model_only: bool = False
    limit_mm_per_prompt: tuple[tuple[str, int], ...] = ()  # (modality, items per prompt) in file order
    speculative_config: tuple[tuple[str, Any], ...] = ()  # vLLM's SpeculativeConfig keys, in file order
    mamba_cache_dtype: MambaDtype = "auto"
    mamba_ssm_cache_dtype: MambaDtype = "auto"
    mamba_cache_mode: MambaCacheMode = "auto"
    enable_prefix_caching: bool | None = None
    disable_hybrid_kv_cache_manager: bool = False
    runner: Runner = "auto"
    nodes: tuple[NodeSpec, ...] = ()
    vllm: VllmSection = field(default_factory=VllmSection)
    source: str | None = field(default=None, compare=False)  # the file it was read from; not a YAML key

    def with_overrides(self, **changes: Any) -> Profile:
        """A copy with some fields changed (e.g. from CLI flags), validated as if written in the file.

        Values may be given as in YAML ("4G", "bf16") or typed. `vllm` takes a VllmSection or a mapping of
        the vllm keys to change. Errors name the key but not the file, since the value did not come from it.
        """
        raw = _raw_profile(self)
        for key, value in changes.items():
            if key == "vllm" and isinstance(value, VllmSection):
                value = _raw_vllm(value)
            elif key == "vllm" and isinstance(value, Mapping):
                value = {**raw["vllm"], **value}
            raw[key] = value
        return dataclasses.replace(profile_from_mapping(raw), source=self.source)

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["vllm"] = self.vllm.to_json()
        out["nodes"] = [n.to_json() for n in self.nodes]
        out["limit_mm_per_prompt"] = dict(self.limit_mm_per_prompt)
        out["speculative_config"] = dict(self.speculative_config)
        return out

    @property
    def speculative(self) -> dict[str, Any]:
        return dict(self.speculative_config)

    def modality_limit(self, modality: str) -> int | None:
        """Items of `modality` a prompt may carry as vLLM resolves it (0 when text only; None: vLLM's default)."""
        if self.language_model_only:
            return 0
        return dict(self.limit_mm_per_prompt).get(modality)


# ---- reading -----------------------------------------------------------------------------------------------


# A profile's text parses to the same data every time: the data of a text read before is kept as JSON under
# $XDG_CACHE_HOME/vlaunch/profiles (the text stored beside it and compared on reading, so a cache entry never answers
# for another text). PyYAML's import alone is the largest single cost of a cold `vlaunch plan`; a cached profile
# skips it. An unwritable cache is no cache.
_CACHE_VERSION = 1


def _cache_file(text: str) -> Path:
    import zlib

    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    key = f"{zlib.crc32(text.encode('utf-8', 'surrogatepass')):08x}-{len(text)}"
    return Path(base) / "vlaunch" / "profiles" / f"{key}.json"


def _cached_data(text: str) -> Any | None:
    """The data cached for `text`, or None: an entry that is not a small regular file (a FIFO, a link to
    /dev/zero), not JSON, nested too deeply, or for another text is no entry."""
    import json

    from launcher.common.files import read_small

    try:
        entry = json.loads(read_small(_cache_file(text)))
    except (VlaunchError, OSError, ValueError, UnicodeError, RecursionError, MemoryError):
        return None
    if isinstance(entry, dict) and entry.get("version") == _CACHE_VERSION and entry.get("text") == text:
        return entry.get("data")
    return None


def _cache_data(text: str, data: Any) -> None:
    import json

    try:
        body = json.dumps({"version": _CACHE_VERSION, "text": text, "data": data})
        if json.loads(body)["data"] != data:
            return  # YAML values JSON cannot hold as they are (dates, sets, tuples, non-string keys)
        path = _cache_file(text)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(body, encoding="utf-8")
        os.replace(tmp, path)  # readers see the old entry or the new one, never half of one
    except (OSError, TypeError, ValueError, RecursionError):
        pass


def _yaml_data(text: str, source: str, *, duplicates: bool = False) -> Any:
    """The YAML document in `text` (libyaml's loader where PyYAML has it: the same nodes, marks and errors);
    duplicated keys (unless `duplicates`) and anchor bombs are found on the composed node tree before
    construction."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if not duplicates:
            _duplicate_keys(node, "", source, set())
        if _expanded_size(node, {}, set(), source) > MAX_YAML_VALUES:
            raise ProfileError(
                f"YAML expands to more than {MAX_YAML_VALUES:,} values (aliases repeating anchors); "
                "no profile is that large",
                source=source,
            )
        return loader.construct_document(node)
    except yaml.YAMLError as e:
        raise _yaml_error(e, source, text) from None
    except (ValueError, OverflowError) as e:  # e.g. an integer too long for int()
        raise ProfileError(f"unreadable value: {e}", source=source) from None
    except RecursionError:
        raise ProfileError("YAML nested too deeply", source=source) from None
    finally:
        loader.dispose()


MAX_YAML_VALUES = 100_000
"""Keys, values and items a profile's YAML may expand to, aliases counted as often as they are used: a profile
holds a few hundred; an anchor bomb (each level a list of aliases to the one before) billions."""


def _expanded_size(node: yaml.Node, sizes: dict[int, int], inside: set[int], source: str) -> int:
    """The values `node` stands for once every alias is expanded, capped just past MAX_YAML_VALUES; an alias
    inside its own anchor (`a: &x [*x]`, a value that contains itself) is refused."""
    import yaml

    if id(node) in inside:
        line = node.start_mark.line + 1 if node.start_mark is not None else 0
        raise ProfileError(f"line {line}: an alias inside its own anchor (a value that contains itself)", source=source)
    if id(node) in sizes:  # an alias to a node counted before
        return sizes[id(node)]
    inside.add(id(node))
    n = 1
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            n += _expanded_size(key_node, sizes, inside, source) + _expanded_size(value_node, sizes, inside, source)
            if n > MAX_YAML_VALUES:
                break
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            n += _expanded_size(item, sizes, inside, source)
            if n > MAX_YAML_VALUES:
                break
    inside.discard(id(node))
    sizes[id(node)] = min(n, MAX_YAML_VALUES + 1)
    return sizes[id(node)]


def _duplicate_keys(node: yaml.Node, path: str, source: str, seen: set[int]) -> None:
    import yaml

    if id(node) in seen:  # an alias revisiting a node (or a recursive structure)
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        first: dict[str, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *base` merges are allowed to be overridden
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            if key is not None:
                line = key_node.start_mark.line + 1
                if key in first:
                    raise ProfileError(
                        f"duplicated key {key!r} at line {line} (first at line {first[key]})",
                        source=source,
                        field=_join(path, key),
                    )
                first[key] = line
            _duplicate_keys(value_node, _join(path, str(key)), source, seen)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _duplicate_keys(item, f"{path}[{i}]", source, seen)


def _yaml_error(e: yaml.YAMLError, source: str, text: str = "") -> ProfileError:
    import yaml

    if isinstance(e, yaml.reader.ReaderError) and isinstance(e.position, int):
        before = text[: e.position]
        line, column = before.count("\n") + 1, e.position - (before.rfind("\n") + 1) + 1
        char = e.character if isinstance(e.character, int) else ord(e.character or "?")
        return ProfileError(
            f"line {line} column {column}: control character U+{char:04X} is not allowed in YAML", source=source
        )
    if isinstance(e, yaml.MarkedYAMLError):
        mark = e.problem_mark or e.context_mark
        what = ", ".join(str(p) for p in (e.context, e.problem) if p) or "invalid YAML"
        where = f"line {mark.line + 1} column {mark.column + 1}: " if mark is not None else ""
        return ProfileError(f"{where}{what}", source=source)
    return ProfileError(f"invalid YAML: {e}", source=source)


def profile_from_yaml(text: str, *, source: str = "<profile>", base_dir: Path | None = None) -> Profile:
    """Parse and validate profile text. `base_dir` anchors relative paths (None: leave them as written)."""
    data = _cached_data(text)
    if data is None:
        data = _yaml_data(text, source)
        if isinstance(data, dict):
            _cache_data(text, data)
    if data is None:
        raise ProfileError("empty profile; it needs at least a 'model' key", source=source)
    return profile_from_mapping(data, source=source, base_dir=base_dir)


def load_profile(path: str | Path) -> Profile:
    """Read and validate a profile file. Errors name the file as given."""
    p = Path(path)
    source = str(path)
    from launcher.common.files import read_small

    if not p.exists():
        raise ProfileError("no such profile file", source=source)
    try:
        data = read_small(p, ProfileError)
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise ProfileError(f"line {line}: not UTF-8 text ({e.reason} at byte {e.start})", source=source) from None
    except OSError as e:
        raise ProfileError(f"cannot read: {e.strerror or e}", source=source) from None
    return profile_from_yaml(text, source=source, base_dir=p.parent)


def yaml_document(text: str, source: str) -> Any:
    """The data of a YAML document vlaunch did not write as a profile (the calibration store): refused with a
    ProfileError, one line, when it is not YAML, has numbers past int's limit, nests too deeply or is an anchor
    bomb. Duplicated keys are allowed, as PyYAML allows them."""
    return _yaml_data(text, source, duplicates=True)


def check_yaml_file(path: str, error: type[VlaunchError] = ProfileError) -> None:
    """Refuse (one line) a YAML file another reader is about to load: not a regular file, too large, not UTF-8,
    not YAML, or an anchor bomb. Duplicated keys are left to that reader."""
    from launcher.common.files import read_small

    data = read_small(path, error)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise error(f"line {line}: not UTF-8 text ({e.reason} at byte {e.start})", source=path) from None
    try:
        _yaml_data(text, path, duplicates=True)
    except ProfileError as e:
        raise error(e.message, source=path, field=e.field) from None


def available_profiles(profiles_dir: Path) -> list[str]:
    """Names of the *.yaml profiles in a directory, sorted."""
    try:
        return sorted(p.stem for p in profiles_dir.glob("*.yaml") if p.is_file())
    except OSError:
        return []


# The profiles that ship with vlaunch: profiles/ at the repository root, through the package's link to it.
BUNDLED_PROFILES = Path(__file__).resolve().parent.parent / "bundled_profiles"  # launcher/bundled_profiles


def user_profiles_dir() -> Path:
    """The user's own profiles: $XDG_CONFIG_HOME/vlaunch/profiles (default ~/.config/vlaunch/profiles), where
    `vlaunch demo` writes its profile. Nothing is created here."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "vlaunch" / "profiles"


def profile_dirs(profiles_dir: Path) -> tuple[Path, ...]:
    """Where a bare profile name is looked up, in order: `profiles_dir` (./profiles), the user's profiles, the
    bundled ones."""
    return (profiles_dir, user_profiles_dir(), BUNDLED_PROFILES)


def profile_names(profiles_dir: Path) -> list[str]:
    """Every name `resolve_profile_arg` takes, sorted."""
    return sorted({name for d in profile_dirs(profiles_dir) for name in available_profiles(d)})


# The bundled profile `make serve` and `vlaunch serve` start when no profile is named, by detected machine: the
# Spark's container, vLLM's CPU build on a box without a GPU, and the pip-installed vLLM on any other GPU.
DEFAULT_PROFILES: dict[str, str] = {"dgx-spark": "llama8b-32k", "cpu": "tiny-cpu"}
DEFAULT_GPU_PROFILE = "qwen3-8b-pip"


def default_profile_name(machine_name: str) -> str:
    """The bundled profile for a machine (the detected one's name: dgx-spark, cpu, h100-80gb, cuda, …)."""
    return DEFAULT_PROFILES.get(machine_name, DEFAULT_GPU_PROFILE)


def default_profile_path(machine_name: str) -> Path:
    """The profile file for a machine: the user's own of the default's name (`vlaunch demo` writes tiny-cpu
    there, pointing at a model and a vLLM outside any clone), else the bundled one; never a file of the same
    name in ./profiles."""
    name = f"{default_profile_name(machine_name)}.yaml"
    own = user_profiles_dir() / name
    return own if _exists(own, "file") else BUNDLED_PROFILES / name


def shadowing_note(arg: str, found: Path) -> str | None:
    """What to say when the bare name `arg` resolved to `found`, a file of ./profiles other than the bundled
    profile of that name: which file runs, and that a bundled one is shadowed. Nothing for a path, nor for the
    user's own profiles (`user_profiles_dir`: put there to stand in for the bundled one, as `vlaunch demo` does)."""
    if "/" in arg or os.sep in arg or found.parent == user_profiles_dir():
        return None
    for bundled in (BUNDLED_PROFILES / f"{arg}.yaml", BUNDLED_PROFILES / arg):
        if not _exists(bundled, "file"):
            continue
        try:
            same = os.path.samefile(bundled, found)
        except (OSError, ValueError):
            same = False
        if not same:
            return (
                f"{arg!r} is {found}, which shadows the bundled profile of that name ({bundled}); give a path to choose"
            )
    return None


def resolve_profile_arg(arg: str, profiles_dir: Path) -> Path:
    """A profile given as a path, or as a bare name looked up as `<dir>/<name>.yaml` in `profile_dirs`:
    `profiles_dir`, the user's profiles, the bundled ones."""
    from launcher.common.files import expand_user

    given = Path(expand_user(arg, ProfileError))
    if _exists(given, "file"):
        return given
    if "/" not in arg and os.sep not in arg:
        for d in profile_dirs(profiles_dir):
            for candidate in (d / f"{arg}.yaml", d / arg):
                if _exists(candidate, "file"):
                    return candidate
    names = profile_names(profiles_dir)
    if not names:
        raise ProfileError(
            f"no such profile file, and no profiles in {profiles_dir}, {user_profiles_dir()} or bundled", source=arg
        )
    close = _close(arg.removesuffix(".yaml"), names, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise ProfileError(f"no such profile file or name; {hint}available: {', '.join(names)}", source=arg)


# ---- validation ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Ctx:
    source: str | None
    base_dir: Path | None

    def fail(self, path: str, message: str) -> NoReturn:
        raise ProfileError(message, source=self.source, field=path)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _show(v: object) -> str:
    """A value as the user wrote it, for error messages."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, Mapping):
        return "a mapping"
    if isinstance(v, list | tuple):
        return "a list"
    if isinstance(v, int) and v.bit_length() > 64:
        return "a very large integer"
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _check_keys(data: Mapping[Any, Any], known: tuple[str, ...], path: str, ctx: _Ctx) -> None:
    for key in data:
        if key in known:
            continue
        close = _close(str(key), known, n=1, cutoff=0.6) if isinstance(key, str) else []
        hint = f"; did you mean {close[0]!r}?" if close else ""
        ctx.fail(_join(path, str(key)), f"unknown key{hint}")


def printable(text: str) -> str:
    """`text` with every character that is not printable written as an escape (`\\u2028`, `\\xff` for a byte
    that was not UTF-8): safe to show in one line of an error."""
    out = []
    for ch in text:
        if ch.isprintable():
            out.append(ch)
        elif 0xDC80 <= ord(ch) <= 0xDCFF:  # an undecodable byte of a file name (surrogateescape)
            out.append(f"\\x{ord(ch) - 0xDC00:02x}")
        else:
            out.append(ascii(ch)[1:-1])
    return "".join(out)


PROFILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
"""A profile's name: it names the run log and record under --logs-dir (`NAME-<stamp>.log`), the container
(`vlaunch-NAME`) and `profiles/NAME.yaml`, so it is one plain file name: letters, digits, '.', '_', '-', not
starting with '.' or '-', without '..'."""
NAME_RULE = "letters, digits, '.', '_' and '-' (at most 128), starting with a letter or digit, without '..'"


def name_problem(name: str) -> str | None:
    """Why `name` cannot be a profile's name (PROFILE_NAME), or None."""
    if PROFILE_NAME.fullmatch(name) and ".." not in name:
        return None
    return f"must be {NAME_RULE}; got {_show(name)}"


def _name(v: object, path: str, ctx: _Ctx) -> Any:
    text: str = _str(v, path, ctx)
    problem = name_problem(text)
    if problem:
        ctx.fail(path, problem)
    return text


def _name_from_file(source: str) -> str:
    """The name a profile without `name:` takes from its file name, refused (one line, naming the file) when the
    file name is not a profile name."""
    stem = Path(source).stem
    problem = name_problem(stem)
    if problem:
        raise ProfileError(
            f"no name: key, so the file name names the profile, and it {problem}; set name: or rename the file",
            source=printable(source),
            field="name",
        )
    return stem


def _plain(text: str, path: str, ctx: _Ctx) -> str:
    bad = unsafe_char(text)
    if bad is not None:
        ctx.fail(path, f"holds {bad}: control, format and line/paragraph separator characters are refused")
    return text


def _str(v: object, path: str, ctx: _Ctx, *, optional: bool = False, empty_ok: bool = False) -> Any:
    if v is None and optional:
        return None
    if not isinstance(v, str) or (not empty_ok and not v.strip()):
        ctx.fail(path, f"must be a {'string' if empty_ok else 'non-empty string'}, got {_show(v)}")
    return _plain(v, path, ctx)


def _choice(v: object, path: str, ctx: _Ctx, choices: tuple[str, ...], aliases: Mapping[str, str] | None = None) -> Any:
    aliases = aliases or {}
    if isinstance(v, str):
        key = v.strip().lower()
        if key in choices:
            return key
        if key in aliases:
            return aliases[key]
    close = _close(v, [*choices, *aliases], n=1, cutoff=0.6) if isinstance(v, str) else []
    hint = f"; did you mean {close[0]!r}?" if close else ""
    ctx.fail(path, f"must be one of {', '.join(choices)}; got {_show(v)}{hint}")


MAX_BYTES = 2**50
"""1 PiB: no size a profile gives (a KV pool, a GPU's memory) is physically larger."""
MAX_PARALLEL = 4096
"""No tensor / pipeline / data parallel size beyond this many GPUs is a launch anyone runs."""
MAX_COUNT = 10**9
"""Users, sequences: bounded so that arithmetic on them stays small."""
MAX_TOKENS = 2**40
"""Tokens of one context or one scheduler step: a trillion is past any model's limit."""


def _int(
    v: object, path: str, ctx: _Ctx, *, optional: bool = False, hi: int | None = None, cap: int | None = None
) -> Any:
    """A positive integer; `hi`: the field's own range (a port); `cap`: the most that is physically possible."""
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 1 or (hi is not None and v > hi):
        what = f"an integer between 1 and {hi}" if hi is not None else "a positive integer"
        ctx.fail(path, f"must be {what}, got {_show(v)}")
    if cap is not None and v > cap:
        ctx.fail(path, f"must be a positive integer of at most {cap:,}, got {_show(v)}")
    return v


MAX_GIB = 2**20
"""GiB of memory, a reserve or an overhead: past 1 PiB it is no machine's (and GiB to bytes would overflow)."""


def _float(
    v: object,
    path: str,
    ctx: _Ctx,
    *,
    optional: bool = False,
    auto: bool = False,
    positive: bool = False,
    at_most_one: bool = False,
) -> Any:
    if v is None and optional:
        return None
    if auto and v == "auto":
        return "auto"
    x = math.nan
    if isinstance(v, int | float) and not isinstance(v, bool):
        with contextlib.suppress(OverflowError):
            x = float(v)
    ok = math.isfinite(x) and (x > 0 if positive else x >= 0) and x <= (1 if at_most_one else MAX_GIB)
    if not ok:
        rule = "a number greater than 0" if positive else "a number ≥ 0"
        rule += " and at most 1" if at_most_one else f" and at most {MAX_GIB:,} (GiB)"
        ctx.fail(path, f"must be {'auto or ' if auto else ''}{rule}, got {_show(v)}")
    return x


def _bool(v: object, path: str, ctx: _Ctx) -> Any:
    if not isinstance(v, bool):
        ctx.fail(path, f"must be true or false, got {_show(v)}")
    return v


def parse_kv_bytes(text: str) -> int:
    """'12GiB', '2.5GB' (units.parse_size) or vLLM's own '4G' (binary) / '4g' (decimal) -> bytes.

    Raises ValueError. Like vLLM's human_readable_int, a binary single-letter suffix takes whole numbers only.
    """
    t = text.strip()
    if t[-1:] in "KMGT" and "." in t and t[:-1].replace(".", "", 1).isdigit():
        raise ValueError(f"vLLM takes no decimals with {t[-1]!r} (binary); write e.g. {t}iB")
    try:
        return human_readable_int(t)
    except ValueError:
        return parse_size(t)


def _kv_bytes(v: object, path: str, ctx: _Ctx) -> Any:
    if v is None:
        return None
    n: int | None = None
    if isinstance(v, str):
        try:
            n = parse_kv_bytes(v)
        except ValueError as e:
            ctx.fail(path, str(e))
        except OverflowError:
            n = None
    elif isinstance(v, int) and not isinstance(v, bool):
        n = v
    if n is None or n <= 0:
        ctx.fail(path, f"must be a positive number of bytes or a size like 12GiB, 4G or 2.5GB, got {_show(v)}")
    if n > MAX_BYTES:
        ctx.fail(path, f"{_show(v)} is more memory than any machine vlaunch plans for holds (at most 1 PiB)")
    return n


def _quantization(v: object, path: str, ctx: _Ctx) -> Any:
    """vLLM's --quantization value as written (lowercased, as vLLM reads it): a method of any vLLM release or one
    of its online shorthands, or a vlaunch format name or alias (older profiles). The plan says whether the
    checkpoint and the vLLM release take it."""
    from launcher.vllm.quant import format_names

    if v is None:
        return None
    names = [*format_names(), *ALIASES]
    if isinstance(v, str) and v.strip().lower() in names:
        return v.strip().lower()
    close = _close(v, names, n=1, cutoff=0.6) if isinstance(v, str) else []
    hint = f"; did you mean {close[0]!r}?" if close else ""
    ctx.fail(
        path,
        f"must be a vLLM --quantization method (fp8, fp8_per_block, awq, gptq_marlin, modelopt, compressed-tensors, "
        f"…) or a vlaunch format ({', '.join(FORMATS)}); got {_show(v)}{hint}",
    )


def _exists(p: Path, kind: Literal["any", "file"] = "any") -> bool:
    try:
        return p.is_file() if kind == "file" else p.exists()
    except (OSError, ValueError):  # names too long, NUL bytes: not a local path
        return False


def _expand(text: str) -> Path | None:
    try:
        return Path(text).expanduser()
    except (RuntimeError, ValueError):  # ~user with no such user
        return None


def _local(text: str, base_dir: Path | None) -> Path | None:
    """A relative path found under base_dir, else under the cwd, made absolute (no symlinks followed)."""
    p = _expand(text)
    if p is None:
        return None
    if p.is_absolute():
        return p
    for root in (base_dir, Path.cwd()):
        if root is not None and _exists(root / p):
            return Path(os.path.abspath(root / p))
    return None


def _model(v: object, path: str, ctx: _Ctx) -> Any:
    text: str = _str(v, path, ctx)
    if ctx.base_dir is None:
        return text
    found = _local(text, ctx.base_dir)
    return str(found) if found is not None else text


def _config_path(v: object, path: str, ctx: _Ctx) -> Any:
    text: str | None = _str(v, path, ctx, optional=True)
    if text is None or ctx.base_dir is None:
        return text
    found = _local(text, ctx.base_dir)
    if found is None:
        expanded = _expand(text)
        if expanded is None:
            return text
        found = Path(os.path.abspath(ctx.base_dir / expanded))
    return str(found)


def _command_path(v: object, path: str, ctx: _Ctx, *, optional: bool) -> Any:
    """An executable: a bare name is looked up on PATH at launch; a relative path is resolved like the model."""
    text: str | None = _str(v, path, ctx, optional=optional)
    if text is None or ctx.base_dir is None or "/" not in text:
        return text
    found = _local(text, ctx.base_dir)
    return str(found) if found is not None else text


def _version(v: object, path: str, ctx: _Ctx) -> Any:
    if v is None:
        return None
    if _is_number(v):
        ctx.fail(path, f'must be a quoted string like "0.19.0" (YAML read a number), got {_show(v)}')
    if not isinstance(v, str) or not v.strip():
        ctx.fail(path, f"must be a version like 0.19.0, v0.11.0 or 0.6.3.post1, got {_show(v)}")
    from launcher.vllm.versions import parse_version  # packaging's reading: v0.11.0, 0.16.0rc2, a wheel's name

    try:
        parse_version(v)
    except VlaunchError as e:
        ctx.fail(path, e.message)
    return v.strip()


def _scalar_text(v: object, path: str, ctx: _Ctx, what: str) -> str:
    if isinstance(v, str):
        return _plain(v, path, ctx)
    if _is_number(v) and not (isinstance(v, int) and v.bit_length() > 64):
        return str(v)
    extra = " (quote it, or write 1 or 0)" if isinstance(v, bool) else ""
    ctx.fail(path, f"must be {what}{extra}, got {_show(v)}")


def _extra_args(v: object, path: str, ctx: _Ctx) -> Any:
    if v is None:
        return ()
    if not isinstance(v, list | tuple):
        ctx.fail(path, f"must be a list of strings, got {_show(v)}")
    return tuple(_scalar_text(a, f"{path}[{i}]", ctx, "a string") for i, a in enumerate(v))


def _env(v: object, path: str, ctx: _Ctx) -> Any:
    if v is None:
        return ()
    items: list[tuple[Any, Any]]
    if isinstance(v, Mapping):
        items = list(v.items())
    elif isinstance(v, tuple) and all(isinstance(p, tuple) and len(p) == 2 for p in v):
        items = list(v)  # the typed form, from with_overrides
    else:
        ctx.fail(path, f"must be a mapping of variable names to values, got {_show(v)}")
    out: list[tuple[str, str]] = []
    for key, value in items:
        if not isinstance(key, str) or not _ENV_NAME.match(key):
            ctx.fail(_join(path, str(key)), "not a valid environment variable name")
        out.append((key, _scalar_text(value, _join(path, key), ctx, "a string or a number")))
    return tuple(out)


def _block_size(v: object, path: str, ctx: _Ctx) -> Any:
    """vLLM's CacheConfig.block_size: a positive integer (its attention backends may ask for a multiple)."""
    if v is None:
        return None
    return _int(v, path, ctx, cap=MAX_TOKENS)


def _names(v: object, path: str, ctx: _Ctx) -> Any:
    """--served-model-name: one name, or several (vLLM's nargs "+"; the first is the one it reports)."""
    if isinstance(v, list | tuple):
        if not v:
            ctx.fail(path, "must name at least one model")
        names = tuple(_str(x, f"{path}[{i}]", ctx) for i, x in enumerate(v))
        return names[0] if len(names) == 1 else names
    return _str(v, path, ctx, optional=True)


def _words(v: object, path: str, ctx: _Ctx) -> Any:
    """A list of command-line words (extra_args, container_args)."""
    return _extra_args(v, path, ctx)


def _env_names(v: object, path: str, ctx: _Ctx) -> Any:
    if v is None:
        return ()
    if not isinstance(v, list | tuple):
        ctx.fail(path, f"must be a list of variable names, got {_show(v)}")
    for i, name in enumerate(v):
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            ctx.fail(f"{path}[{i}]", "not a valid environment variable name")
    return tuple(v)


def _mm_limits(v: object, path: str, ctx: _Ctx) -> Any:
    """vLLM's --limit-mm-per-prompt: {modality: count} or {modality: {count: n, ...}}."""
    if v is None:
        return ()
    if not isinstance(v, Mapping):
        ctx.fail(path, f"must be a mapping of modality to count, e.g. {{image: 0}}, got {_show(v)}")
    out = []
    for key, value in v.items():
        p = _join(path, str(key))
        if not isinstance(key, str) or not key.strip():
            ctx.fail(p, "modality names are strings (image, video, audio)")
        count = value.get("count") if isinstance(value, Mapping) else value
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            ctx.fail(p, f"must be a non-negative integer, got {_show(value)}")
        out.append((key, count))
    return tuple(out)


def _speculative(v: object, path: str, ctx: _Ctx) -> Any:
    """vLLM's --speculative-config: a mapping of SpeculativeConfig keys."""
    if v is None:
        return ()
    if isinstance(v, tuple):
        v = dict(v)  # the typed form, from with_overrides
    if not isinstance(v, Mapping):
        ctx.fail(path, f"must be a mapping, e.g. {{method: mtp, num_speculative_tokens: 1}}, got {_show(v)}")
    _check_keys(v, SPECULATIVE_KEYS, path, ctx)
    out: list[tuple[str, Any]] = []
    for key, value in v.items():
        p = _join(path, key)
        if key == "method":
            value = _choice(value, p, ctx, SPECULATIVE_METHODS)
        elif key in ("num_speculative_tokens", "draft_tensor_parallel_size", "tensor_parallel_size",
                     "max_model_len", "prompt_lookup_max", "prompt_lookup_min"):  # fmt: skip
            value = _int(value, p, ctx)
        elif key in ("enforce_eager", "disable_padded_drafter_batch", "parallel_drafting"):
            value = _bool(value, p, ctx)
        else:
            value = _str(value, p, ctx)
        out.append((key, value))
    d = dict(out)
    if "method" not in d and "model" not in d:
        ctx.fail(path, "needs a method (e.g. mtp) or a drafter model")
    if d.get("method") not in ("ngram", "suffix", "ngram_gpu", None) and "num_speculative_tokens" not in d:
        ctx.fail(_join(path, "num_speculative_tokens"), "missing; e.g. 1 for MTP")
    return tuple(out)


def _vllm(v: object, path: str, ctx: _Ctx) -> Any:
    if v is None:
        return VllmSection()
    if not isinstance(v, Mapping):
        ctx.fail(path, f"must be a mapping, got {_show(v)}")
    _check_keys(v, tuple(_VLLM_FIELDS), path, ctx)
    return VllmSection(**{k: _VLLM_FIELDS[k](v[k], _join(path, k), ctx) for k in v})


def _nodes(v: object, path: str, ctx: _Ctx) -> Any:
    if v is None:
        return ()
    if not isinstance(v, list):
        ctx.fail(path, f"must be a list of nodes, got {_show(v)}")
    nodes = []
    for i, item in enumerate(v):
        p = f"{path}[{i}]"
        if not isinstance(item, Mapping):
            ctx.fail(p, f"must be a mapping, got {_show(item)}")
        _check_keys(item, tuple(_NODE_FIELDS), p, ctx)
        if "host" not in item:
            ctx.fail(_join(p, "host"), "missing; give the node's address")
        nodes.append(NodeSpec(**{k: _NODE_FIELDS[k](item[k], _join(p, k), ctx) for k in item}))
    heads = [n for n in nodes if n.role == "head"]
    if nodes and len(heads) != 1:
        ctx.fail(path, f"needs exactly one node with role: head, got {len(heads)}")
    if len({n.host for n in nodes}) != len(nodes):
        ctx.fail(path, "two nodes have the same host")
    return tuple(nodes)


_Check = Callable[[object, str, _Ctx], Any]


def _size_int(v: object, path: str, ctx: _Ctx, *, optional: bool = False, auto: bool = False) -> Any:
    """A token count as vLLM takes it: 8192, '8192', '32k' (32,000), '32K' (32,768), '1M'; 'auto' or -1 where
    vLLM allows it (max_model_len: the longest that fits the memory)."""
    if v is None and optional:
        return None
    if auto and (v == -1 or (isinstance(v, str) and v.strip().lower() in ("auto", "-1"))):
        return "auto"
    if isinstance(v, str):
        try:
            v = human_readable_int(v)
        except ValueError as e:
            ctx.fail(path, str(e))
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        ctx.fail(path, f"must be a positive whole number or a size like 32k, 32K or 1M{', or auto' if auto else ''}, "
                 f"got {_show(v)}")  # fmt: skip
    if v > MAX_TOKENS:
        ctx.fail(path, f"{_show(v)} tokens is beyond any context or batch vLLM runs (at most {MAX_TOKENS:,})")
    return v


@dataclass(frozen=True)
class FieldSpec:
    """One profile key: its validator, its help, and the flags that set it (vLLM's spelling first; none: only the
    YAML sets it). The CLI builds its options from this table, so a key, its check and its help live here once."""

    key: str  # dotted path in the YAML: "max_model_len", "vllm.port", "nodes.host"
    check: _Check
    help: str
    flags: tuple[str, ...] = ()
    switch: Literal["", "flag", "onoff"] = ""  # flag: --x sets true; onoff: --x / --no-x
    cli_type: Literal["str", "int", "float"] = "str"
    metavar: str | None = None

    @property
    def dest(self) -> str:
        """The keyword the CLI passes the value under ("vllm.port" -> "vllm_port")."""
        return self.key.replace(".", "_")


_F = FieldSpec
FIELDS: tuple[FieldSpec, ...] = (
    _F("name", _name, "Profile name: " + NAME_RULE + " (default: the file name without .yaml)."),
    _F("description", lambda v, p, c: _str(v, p, c, empty_ok=True), "Free text shown in listings."),
    _F("model", _model, "Hugging Face repo id or local model directory (required)."),
    _F("config", _config_path, "A config.json to count from, when the model's own cannot be read (vLLM's "
       "--hf-config-path).", ("--hf-config-path",), metavar="FILE"),
    _F("revision", lambda v, p, c: _str(v, p, c, optional=True), "The model's branch, tag or commit on the Hub.",
       ("--revision",), metavar="REV"),
    _F("quantization", _quantization, "vLLM's --quantization: a method (fp8, awq_marlin, modelopt, …) or an online "
       "shorthand (fp8_per_block, mxfp4, …), or a vlaunch format name (bf16, nvfp4, q4_k_m, …); default: the "
       "checkpoint's own, from config.json. A format the checkpoint does not hold and vLLM does not make while "
       "loading it is refused.", ("--quantization", "-q", "--format"), metavar="METHOD"),
    _F("dtype", lambda v, p, c: _choice(v, p, c, DTYPES, DTYPE_ALIASES),
       "Activation/weight dtype: auto, bfloat16, float16 or float32.", ("--dtype",)),
    _F("kv_cache_dtype", lambda v, p, c: _choice(v, p, c, KV_CACHE_DTYPES),
       "KV cache dtype as vLLM names it: " + ", ".join(KV_CACHE_DTYPES) + " (auto: the model's dtype).",
       ("--kv-cache-dtype",)),
    _F("max_model_len", lambda v, p, c: _size_int(v, p, c, optional=True, auto=True),
       "Longest context one conversation may reach, in tokens: 32768, 32k, 32K, 1M, or auto (the longest that "
       "fits); default: the model's.", ("--max-model-len",), metavar="TOKENS"),
    _F("users", lambda v, p, c: _int(v, p, c, cap=MAX_COUNT),
       "Concurrent conversations the KV cache must hold at max_model_len.", ("--users",),
       cli_type="int"),
    _F("machine", lambda v, p, c: _choice(v, p, c, MACHINE_NAMES, MACHINE_ALIASES),
       "Machine to plan for: " + ", ".join(MACHINE_NAMES) + "; aliases " + ", ".join(MACHINE_ALIASES)
       + " (auto: this box).", ("--machine",), metavar="NAME"),
    _F("gpu_memory_gib", lambda v, p, c: _float(v, p, c, optional=True, positive=True),
       "Total memory per GPU in GiB, overriding the machine preset (needed for machine cuda).",
       ("--gpu-memory-gib",), cli_type="float", metavar="GIB"),
    _F("interconnect", lambda v, p, c: _choice(v, p, c, ("auto", *INTERCONNECTS)),
       "How this box's GPUs reach each other, which sizes tensor parallel's NCCL buffers: nvswitch (HGX H100/H200), "
       "nvlink (HGX A100), pcie, network (TP between boxes) or none (auto: the machine's).",
       ("--interconnect",), metavar="LINK"),
    _F("cpu_bf16", lambda v, p, c: None if v is None else _bool(v, p, c),
       "CPU backend: whether the CPU vLLM runs on has AVX512-BF16, on which vLLM keeps SSM state in float32 "
       "(default: read from this box; `check` reads it from the log's 'Reset SSM cache type').",
       ("--cpu-bf16",), switch="onoff"),
    _F("os_reserve_gib", lambda v, p, c: _float(v, p, c, auto=True),
       "GiB kept free for the OS and other processes on unified memory (auto: per machine).",
       ("--os-reserve-gib",), metavar="GIB|auto"),
    _F("gpu_memory_utilization", lambda v, p, c: _float(v, p, c, auto=True, positive=True, at_most_one=True),
       "Fraction of the memory vLLM may claim, 0 < x ≤ 1 (auto: computed to leave the OS reserve).",
       ("--gpu-memory-utilization",), metavar="FRACTION|auto"),
    _F("biggest_pool", _bool, "With auto utilization, take the largest safe KV pool rather than only what users "
       "need.", ("--biggest-pool",), switch="flag"),
    _F("tensor_parallel_size", lambda v, p, c: _int(v, p, c, cap=MAX_PARALLEL), "GPUs each layer is split across.",
       ("--tensor-parallel-size", "-tp"),
       cli_type="int"),
    _F("decode_context_parallel_size", lambda v, p, c: _int(v, p, c, cap=MAX_PARALLEL),
       "Decode context parallel: the tensor-parallel ranks split each request's KV cache by tokens (divides "
       "tensor_parallel_size).", ("--decode-context-parallel-size", "-dcp"), cli_type="int"),
    _F("pipeline_parallel_size", lambda v, p, c: _int(v, p, c, cap=MAX_PARALLEL),
       "Pipeline stages the layers are split into.",
       ("--pipeline-parallel-size", "-pp"), cli_type="int"),
    _F("data_parallel_size", lambda v, p, c: _int(v, p, c, cap=MAX_PARALLEL),
       "Replicas of the whole model (each holds its own weights and KV cache).",
       ("--data-parallel-size", "-dp"), cli_type="int"),
    _F("max_num_batched_tokens", lambda v, p, c: _size_int(v, p, c, optional=True),
       "Tokens one scheduler step may process (default: vLLM's).", ("--max-num-batched-tokens",),
       metavar="TOKENS"),
    _F("max_num_seqs", lambda v, p, c: _int(v, p, c, optional=True, cap=MAX_COUNT),
       "Sequences one scheduler step may hold (default: vLLM's).", ("--max-num-seqs",), cli_type="int"),
    _F("enforce_eager", _bool, "Disable CUDA graphs (less memory, slower decode).", ("--enforce-eager",),
       switch="flag"),
    _F("block_size", _block_size, "KV cache block size in tokens (default: vLLM's).", ("--block-size",),
       cli_type="int"),
    _F("kv_cache_memory_bytes", _kv_bytes, "Fixed KV cache size instead of a utilization fraction (e.g. 12GiB, "
       "4G, 4294967296).", ("--kv-cache-memory-bytes", "--kv-cache-memory"), metavar="SIZE"),
    _F("overhead_gib", lambda v, p, c: _float(v, p, c, optional=True),
       "GiB of non-torch overhead to assume instead of the estimate.", ("--overhead-gib",), cli_type="float",
       metavar="GIB"),
    _F("distributed_executor_backend",
       lambda v, p, c: None if v is None else _choice(v, p, c, get_args(ExecutorBackend)),
       "mp (one node, vLLM's multiprocessing), ray (several nodes), uni (one process) or external_launcher.",
       ("--distributed-executor-backend",)),
    _F("enable_expert_parallel", _bool, "Split MoE experts across ranks (expert parallel) instead of sharding each "
       "expert.", ("--enable-expert-parallel", "-ep"), switch="flag"),
    _F("language_model_only", _bool, "Serve a multimodal model as text only: vLLM skips its vision/audio encoders.",
       ("--language-model-only",), switch="flag"),
    _F("limit_mm_per_prompt", _mm_limits, "Items per prompt by modality, e.g. {image: 0} (flag: JSON); encoders "
       "whose modalities are all 0 are not loaded.", ("--limit-mm-per-prompt",), metavar="JSON"),
    _F("speculative_config", _speculative, "vLLM's speculative decoding: {method: mtp|eagle|eagle3|draft_model|"
       "ngram|…, num_speculative_tokens: N, model: drafter} (flag: JSON); MTP adds the checkpoint's MTP layers to "
       "weights and KV groups.", ("--speculative-config",), metavar="JSON"),
    _F("mamba_cache_dtype", lambda v, p, c: _choice(v, p, c, get_args(MambaDtype)),
       "Dtype of Mamba / linear-attention conv state (auto: the model's dtype).", ("--mamba-cache-dtype",)),
    _F("mamba_ssm_cache_dtype", lambda v, p, c: _choice(v, p, c, get_args(MambaDtype)),
       "Dtype of the SSM / recurrent state (auto: the model's default, e.g. float32 for Qwen3.5 and Nemotron-H).",
       ("--mamba-ssm-cache-dtype",)),
    _F("mamba_cache_mode", lambda v, p, c: _choice(v, p, c, get_args(MambaCacheMode)),
       "How many state blocks a request keeps: auto (align with prefix caching), none or align.",
       ("--mamba-cache-mode",)),
    _F("enable_prefix_caching", lambda v, p, c: None if v is None else _bool(v, p, c),
       "Prefix caching (vLLM's default: on for generative models); turns mamba align mode on.",
       ("--enable-prefix-caching",), switch="onoff"),
    _F("disable_hybrid_kv_cache_manager", _bool, "Allocate sliding-window and chunked layers like full attention "
       "(vLLM's --disable-hybrid-kv-cache-manager).", ("--disable-hybrid-kv-cache-manager",), switch="flag"),
    _F("runner", lambda v, p, c: _choice(v, p, c, get_args(Runner)),
       "auto, generate, pooling (embedding/reranking models: encoders keep no KV cache) or draft.", ("--runner",)),
    _F("nodes", _nodes, "Multi-node launch: a list of {host, role: head|worker, machine, gpus, ssh, "
       "os_reserve_gib}."),
    _F("nodes.host", _str, "Address the other nodes reach this one at (the head's is Ray's address)."),
    _F("nodes.role", lambda v, p, c: _choice(v, p, c, ("head", "worker")),
       "head (runs Ray's head and vllm serve) or worker."),
    _F("nodes.machine", lambda v, p, c: _choice(v, p, c, MACHINE_NAMES, MACHINE_ALIASES),
       "This node's machine name (each node has its own memory and OS reserve)."),
    _F("nodes.gpus", lambda v, p, c: _int(v, p, c, cap=MAX_PARALLEL), "GPUs this node contributes."),
    _F("nodes.ssh", lambda v, p, c: _str(v, p, c, optional=True),
       "ssh destination for this node (default: host; loopback runs locally)."),
    _F("nodes.os_reserve_gib", lambda v, p, c: _float(v, p, c, auto=True),
       "Memory kept for this node's OS (unified machines), or auto."),
    _F("nodes.gpu_memory_gib", lambda v, p, c: _float(v, p, c, optional=True, positive=True),
       "Override this node's total memory per GPU."),
    _F("vllm", _vllm, "How vLLM is launched."),
    _F("vllm.version", _version, "vLLM version the prediction follows, e.g. 0.11.0 (default: detected from the "
       "launch's python or container image, else the newest vlaunch knows).", ("--vllm-version",),
       metavar="VERSION"),
    _F("vllm.launch", lambda v, p, c: _choice(v, p, c, LAUNCH_MODES),
       "cli (the vllm executable), module (PYTHON -m vllm.entrypoints.openai.api_server) or container (docker).",
       ("--launch",)),
    _F("vllm.executable", lambda v, p, c: _command_path(v, p, c, optional=False),
       "The vllm command for cli launch (default: vllm on PATH).", ("--vllm-executable",), metavar="PATH"),
    _F("vllm.python", lambda v, p, c: _command_path(v, p, c, optional=True),
       "Python interpreter that has vLLM, for module launch.", ("--python",), metavar="PATH"),
    _F("vllm.image", lambda v, p, c: _str(v, p, c, optional=True),
       "Container image for container launch (e.g. nvcr.io/nvidia/vllm:25.11-py3).", ("--image",)),
    _F("vllm.container_name", lambda v, p, c: _str(v, p, c, optional=True),
       "Name of the container (default: vlaunch-PROFILE).", ("--container-name",)),
    _F("vllm.host", _str, "Address the server listens on (default 127.0.0.1, this box only; --host 0.0.0.0 "
       "exposes it to the network).", ("--host",)),
    _F("vllm.port", lambda v, p, c: _int(v, p, c, hi=65535), "Port the server listens on.", ("--port",),
       cli_type="int"),
    _F("vllm.extra_args", _extra_args, "Further vllm serve arguments, passed through as written."),
    _F("vllm.env", _env, "Environment variables for the vLLM process."),
    _F("vllm.served_model_name", _names,
       "Model name the API serves (default: the model path); a list serves several names.", ("--served-model-name",)),
    _F("vllm.container_args", _words, "The container runtime's own options for a container launch, as written "
       "(-v HOST:INSIDE, -e NAME=value, --gpus '\"device=1\"', --shm-size 16g …); vlaunch's defaults yield to them."),
    _F("vllm.entrypoint_serves", lambda v, p, c: None if v is None else _bool(v, p, c),
       "The image's entrypoint runs `vllm serve` (vllm/vllm-openai: true; NVIDIA's nvcr.io/nvidia/vllm: false, its "
       "entrypoint is left alone and `vllm serve` follows the image); default: known from the image."),
    _F("vllm.exec_container", lambda v, p, c: _str(v, p, c, optional=True),
       "Run vLLM inside this running container (`docker exec NAME vllm serve …`) instead of starting one."),
    _F("vllm.container_runtime", lambda v, p, c: _choice(v, p, c, get_args(ContainerRuntime)),
       "docker or podman."),
    _F("vllm.pass_env", _env_names, "Variables a container gets by name from the caller's environment (`-e NAME`; "
       "HF_TOKEN always)."),
)  # fmt: skip
del _F
FIELD_HELP: dict[str, str] = {f.key: f.help for f in FIELDS}
"""Help text for every key, by its dotted path."""
_FIELDS: dict[str, _Check] = {f.key: f.check for f in FIELDS if "." not in f.key}


def cli_words(profile: Profile) -> list[str]:
    """The planning flags that give `profile` from the defaults (`vlaunch plan --model M` + these plans it): each
    field with flags whose value is not its default, in the field table's order. The model, and what only a
    profile file holds (nodes, env, extra args), are not among them."""
    defaults = {f.name: f.default for f in dataclasses.fields(Profile)}
    vllm_defaults = {f.name: f.default for f in dataclasses.fields(VllmSection)}
    out: list[str] = []
    for spec in FIELDS:
        if not spec.flags or spec.key == "model":
            continue
        section, name = (profile.vllm, spec.key[5:]) if spec.key.startswith("vllm.") else (profile, spec.key)
        value = getattr(section, name)
        if value == (vllm_defaults if section is profile.vllm else defaults).get(name):
            continue
        out += _flag_words(spec, value)
    return out


def _flag_words(spec: FieldSpec, value: Any) -> list[str]:
    """One field's value as its first flag takes it."""
    flag = spec.flags[0]
    if spec.switch == "flag":
        return [flag] if value else []
    if spec.switch == "onoff":
        return [flag if value else "--no-" + flag[2:]]
    if isinstance(value, tuple) and all(isinstance(x, tuple) and len(x) == 2 for x in value):
        return [flag, json.dumps(dict(value), separators=(",", ":"))]  # limit_mm_per_prompt, speculative_config
    if isinstance(value, tuple):
        return [flag, *(str(x) for x in value)]
    return [flag, f"{value:g}" if isinstance(value, float) else str(value)]


_VLLM_FIELDS: dict[str, _Check] = {f.key[5:]: f.check for f in FIELDS if f.key.startswith("vllm.")}
_NODE_FIELDS: dict[str, _Check] = {f.key[6:]: f.check for f in FIELDS if f.key.startswith("nodes.")}


def profile_from_mapping(data: object, *, source: str | None = None, base_dir: Path | None = None) -> Profile:
    """Validate a parsed profile (a mapping). `source` names the file in errors; `base_dir` anchors paths."""
    ctx = _Ctx(source, base_dir)
    if not isinstance(data, Mapping):
        ctx.fail("", f"must be a mapping of keys to values, got {_show(data)}")
    _check_keys(data, tuple(_FIELDS), "", ctx)
    if "model" not in data:
        ctx.fail("model", "missing; name a Hugging Face repo id or a local model directory")
    data = _fold_extra_args(data)
    values = {k: _FIELDS[k](data[k], k, ctx) for k in data}
    if "name" not in values:
        if source and not (source.startswith("<") and source.endswith(">")):  # `<profile>`: text, no file
            values["name"] = _name_from_file(source)
        else:
            values["name"] = "profile"
    return Profile(**values, source=source)


def _fold_extra_args(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """`vllm.extra_args` that set a field vlaunch plans with (`--max-model-len 4096`, `--device-memory-utilization
    0.5`) become that field, as vLLM would read the command (the extra arguments come last, so they win); the rest
    stay, in vLLM's canonical spellings."""
    vllm = data.get("vllm")
    args = vllm.get("extra_args") if isinstance(vllm, Mapping) else None
    if not isinstance(args, list | tuple) or not args or not all(isinstance(a, str) for a in args):
        return data
    from launcher.vllm.flags import fold

    folded = fold(args)
    if folded is None or not folded[0]:
        return data
    values, rest = folded
    out, section = dict(data), {**vllm, "extra_args": rest}  # type: ignore[dict-item]
    for key, value in values.items():
        if key.startswith("vllm."):
            section[key[5:]] = value
        else:
            out[key] = value
    out["vllm"] = section
    return out


def _raw_vllm(v: VllmSection) -> dict[str, Any]:
    return {f.name: getattr(v, f.name) for f in dataclasses.fields(v)}


def _raw_profile(p: Profile) -> dict[str, Any]:
    raw = {f.name: getattr(p, f.name) for f in dataclasses.fields(p) if f.name != "source"}
    raw["vllm"] = _raw_vllm(p.vllm)
    raw["nodes"] = [n.to_json() for n in p.nodes]
    raw["limit_mm_per_prompt"] = dict(p.limit_mm_per_prompt)
    raw["speculative_config"] = dict(p.speculative_config) or None
    return raw


def _close(word: str, choices: list[str] | tuple[str, ...], n: int, cutoff: float) -> list[str]:
    """difflib's close matches, imported only when a name is wrong."""
    import difflib

    return difflib.get_close_matches(word, choices, n=n, cutoff=cutoff)


def parse_tokens(value: object, flag: str) -> int:
    """A token count given on the command line (8192, 32k, 32K, 1M), checked as a profile's max_model_len is."""
    checked: int = _size_int(value, flag, _Ctx(None, None))
    return checked


# ---- writing ------------------------------------------------------------------------------------------------


def _written(value: object, default: object) -> object:
    """A field's value as YAML writes it: sections and node specs keep only what differs from their defaults."""
    if isinstance(value, VllmSection):
        base = default if isinstance(default, VllmSection) else VllmSection()
        out = {}
        for f in dataclasses.fields(value):
            v = getattr(value, f.name)
            if v != getattr(base, f.name):
                out[f.name] = dict(v) if f.name == "env" else list(v) if isinstance(v, tuple) else v
        return out
    if isinstance(value, NodeSpec):
        blank = NodeSpec(host=value.host)
        return {
            f.name: getattr(value, f.name)
            for f in dataclasses.fields(value)
            if f.name == "host" or getattr(value, f.name) != getattr(blank, f.name)
        }
    return value


def profile_yaml(p: Profile, *, comment: str = "") -> str:
    """The profile as YAML that load_profile reads back to the same profile: the keys that differ from a bare
    profile's defaults, in the order of FIELDS, after `comment` (one `# ` line per line)."""
    import yaml

    bare = Profile(model=p.model)
    data: dict[str, Any] = {}
    for f in dataclasses.fields(Profile):
        if f.name == "source":
            continue
        value, default = getattr(p, f.name), getattr(bare, f.name)
        if f.name not in ("name", "model") and value == default:
            continue
        if f.name == "nodes":
            data[f.name] = [_written(n, None) for n in value]
        elif f.name in ("limit_mm_per_prompt", "speculative_config"):
            data[f.name] = dict(value)
        else:
            data[f.name] = _written(value, default)
    if "vllm" in data and not data["vllm"]:
        del data["vllm"]
    head = "".join(f"# {line}".rstrip() + "\n" for line in comment.splitlines())
    return head + yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=120)
