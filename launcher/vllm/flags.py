"""vLLM's own ways of saying what to serve — a `vllm serve` command line, its `--config` YAML, the vLLM flags given
to vlaunch itself — read as the vLLM that runs reads them, and turned into vlaunch's planning values.

The words go through launcher.vllm.serveparse with the option table of that release (launcher/vllm/interface):
every alias resolves to its field (`--device-memory-utilization` is gpu_memory_utilization), underscores,
prefixes, dotted keys and `-O` read as vLLM reads them. The fields vlaunch plans with (`MODELLED`) become profile
values; every other option is kept for the launch in its canonical spelling, once; those that change memory in a
way the plan does not model are named in a note (`MEMORY_NOTES`). A word the release does not take is refused in
one line: another release's flag (saying which releases have it), a typo (did you mean), or a flag of no vLLM
release vlaunch knows (a patched build's).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import field
from typing import TYPE_CHECKING, Any

from launcher.common.errors import VlaunchError
from launcher.common.records import dataclass
from launcher.vllm import interface as I

if TYPE_CHECKING:
    from launcher.vllm.serveparse import Given, ServeArgs

# vLLM's field (EngineArgs / the frontend's dest) -> the profile key it sets.
_OBJECT_FLAGS = {"speculative_config": "--speculative-config", "limit_mm_per_prompt": "--limit-mm-per-prompt"}
"""Modelled flags whose JSON must be an object: vLLM builds a config from its fields (a number fails there)."""

MODELLED: dict[str, str] = {
    "model_tag": "model",
    "model": "model",
    "hf_config_path": "config",
    "revision": "revision",
    "quantization": "quantization",
    "dtype": "dtype",
    "kv_cache_dtype": "kv_cache_dtype",
    "max_model_len": "max_model_len",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "tensor_parallel_size": "tensor_parallel_size",
    "pipeline_parallel_size": "pipeline_parallel_size",
    "data_parallel_size": "data_parallel_size",
    "decode_context_parallel_size": "decode_context_parallel_size",
    "max_num_batched_tokens": "max_num_batched_tokens",
    "max_num_seqs": "max_num_seqs",
    "enforce_eager": "enforce_eager",
    "block_size": "block_size",
    "kv_cache_memory_bytes": "kv_cache_memory_bytes",
    "distributed_executor_backend": "distributed_executor_backend",
    "enable_expert_parallel": "enable_expert_parallel",
    "language_model_only": "language_model_only",
    "limit_mm_per_prompt": "limit_mm_per_prompt",
    "speculative_config": "speculative_config",
    "mamba_cache_dtype": "mamba_cache_dtype",
    "mamba_ssm_cache_dtype": "mamba_ssm_cache_dtype",
    "mamba_cache_mode": "mamba_cache_mode",
    "enable_prefix_caching": "enable_prefix_caching",
    "disable_hybrid_kv_cache_manager": "disable_hybrid_kv_cache_manager",
    "runner": "runner",
    "served_model_name": "vllm.served_model_name",
    "host": "vllm.host",
    "port": "vllm.port",
}
# --spec-method / --spec-model / --spec-tokens: keys of the speculative config (EngineArgs.create_speculative_config)
SPEC_FLAGS: dict[str, tuple[str, str]] = {
    "spec_method": ("--spec-method", "method"),
    "spec_model": ("--spec-model", "model"),
    "spec_tokens": ("--spec-tokens", "num_speculative_tokens"),
}

# Fields that change memory in ways the plan does not model: kept for the launch, named in the plan.
MEMORY_NOTES: dict[str, str] = {
    "cpu_offload_gb": "weights offloaded to CPU memory shrink the GPU's weights bucket",
    "swap_space": "pinned CPU swap per GPU (host memory; on a Spark the same memory)",
    "num_gpu_blocks_override": "a fixed number of KV blocks instead of the profiled pool",
    "compilation_config": "CUDA graph capture sizes and modes change the graph memory",
    "cuda_graph_sizes": "CUDA graph capture sizes change the graph memory",
    "cudagraph_capture_sizes": "CUDA graph capture sizes change the graph memory",
    "max_cudagraph_capture_size": "CUDA graph capture sizes change the graph memory",
    "optimization_level": "the optimization level sets CUDA graph capture and compilation (graph memory)",
    "kv_offloading_size": "KV blocks offloaded to CPU memory",
    "kv_offloading_backend": "KV blocks offloaded to CPU memory",
    "mm_processor_cache_gb": "the multimodal processor cache (host memory)",
    "hf_overrides": "config overrides can change the model's shape",
    "prefill_context_parallel_size": "prefill context parallel shards the KV cache",
    "data_parallel_size_local": "data-parallel replicas on this node each hold the weights and a pool",
    "nnodes": "a launch over several nodes (vLLM's own multi-node, without Ray): each node holds its ranks",
    "enable_eplb": "expert load balancing adds redundant experts to each rank's weights",
    "kv_cache_dtype_skip_layers": "layers kept at the model dtype in the KV cache",
    "kv_sharing_fast_prefill": "KV sharing changes the prefill activation",
    "mamba_block_size": "the state block size changes the hybrid pool's layout",
    "max_num_scheduled_tokens": "tokens scheduled per step change the activation peak",
    "enable_chunked_prefill": "chunked prefill bounds the activation peak by max_num_batched_tokens",
    "async_scheduling": "async scheduling keeps two batches in flight",
    "enable_lora": "LoRA adapters add weights and activation memory",
    "max_loras": "LoRA adapters add weights and activation memory",
    "max_lora_rank": "LoRA adapters add weights and activation memory",
    "max_cpu_loras": "LoRA adapters cached in CPU memory",
    "calculate_kv_scales": "dynamic KV scales",
    "max_num_partial_prefills": "concurrent partial prefills change the activation peak",
    "mm_encoder_tp_mode": "the vision encoder's weights are replicated or sharded across ranks",
    "offload_group_size": "layer offloading moves weights to CPU memory",
    "offload_num_in_group": "layer offloading moves weights to CPU memory",
    "offload_backend": "layer offloading moves weights to CPU memory",
    "kv_transfer_config": "a KV connector allocates transfer buffers",
}

# The memory, parallelism and cache flags of vLLM 0.32, each taken in vLLM's spellings and forms (tests cover each).
MEMORY_FLAGS: tuple[str, ...] = (
    # the KV cache and the pool (CacheConfig)
    "--block-size", "--gpu-memory-utilization", "--kv-cache-memory-bytes", "--kv-cache-dtype",
    "--num-gpu-blocks-override", "--enable-prefix-caching", "--kv-cache-dtype-skip-layers", "--kv-sharing-fast-prefill",
    "--mamba-cache-dtype", "--mamba-ssm-cache-dtype", "--mamba-block-size", "--mamba-cache-mode",
    "--kv-offloading-size", "--kv-offloading-backend",
    # ranks (ParallelConfig)
    "--tensor-parallel-size", "--pipeline-parallel-size", "--data-parallel-size", "--data-parallel-size-local",
    "--decode-context-parallel-size", "--prefill-context-parallel-size", "--enable-expert-parallel",
    "--distributed-executor-backend", "--nnodes", "--enable-eplb",
    # the scheduler's batch (SchedulerConfig)
    "--max-num-batched-tokens", "--max-num-seqs", "--max-num-scheduled-tokens", "--disable-hybrid-kv-cache-manager",
    "--enable-chunked-prefill", "--async-scheduling",
    # the model's weights and context (ModelConfig, OffloadConfig, MultiModalConfig)
    "--max-model-len", "--quantization", "--dtype", "--enforce-eager", "--cpu-offload-gb", "--hf-overrides",
    "--language-model-only", "--limit-mm-per-prompt", "--mm-processor-cache-gb", "--runner",
    # CUDA graphs and speculative decoding
    "--compilation-config", "--cudagraph-capture-sizes", "--max-cudagraph-capture-size", "--optimization-level",
    "--speculative-config", "--spec-tokens",
)  # fmt: skip


class FlagError(VlaunchError):
    """A vLLM flag the release that runs does not take, or takes otherwise."""


@dataclass(frozen=True)
class Parsed:
    """What a command line or serve config said: planning values, and what passes to vLLM untouched."""

    values: dict[str, Any] = field(default_factory=dict)  # by the planning flags' dests: "max_model_len", "vllm_port"
    extra_args: list[str] = field(default_factory=list)  # options passed to vLLM, canonical spellings, once each
    notes: list[str] = field(default_factory=list)
    request: dict[str, Any] = field(default_factory=dict)  # vLLM's own values of the modelled fields given
    serve_config: str | None = None  # a `--config FILE` among the words


def profile_dest(key: str) -> str:
    """The planning values' key for a profile key ("vllm.port" -> "vllm_port")."""
    return key.replace(".", "_")


# ---- refusing what the release does not take ---------------------------------------------------------------------


def unknown_error(words: Sequence[str], iface: I.Interface, where: str) -> FlagError:
    """One line for the first word `vllm serve` of this release does not take."""
    first = next((w for w in words if w.startswith("-")), words[0])
    label = f"vLLM {iface.label}"
    if not first.startswith("-"):
        return FlagError(
            f"unexpected argument {first!r}: {label} reads one model (the word after `vllm serve`) and options",
            source=where,
        )
    name = first.partition("=")[0]
    if name.startswith("--") and iface.features.get("underscores"):
        name = "--" + name[2:].replace("_", "-")
    having = I.versions_with(name)
    if having:
        return FlagError(
            f"{label} has no {name} (vLLM {I.span(having)} has it): drop it, or state the vLLM the launch runs "
            "(--vllm-version, or the profile's vllm.version / image)",
            source=where,
        )
    import difflib  # only for a flag the release does not have

    close = difflib.get_close_matches(name, list(iface.by_spelling), n=1, cutoff=0.85)
    if close:
        return FlagError(f"vllm serve takes no flag {name}; did you mean {close[0]}?", source=where)
    known = I.span(I.available())
    return FlagError(
        f"{name} is a flag of no vLLM release vlaunch knows ({known}): a patched build's (fork-only) flag; vlaunch "
        "plans what released vLLM reads, so drop it to plan this launch",
        source=where,
    )


# ---- vLLM's values -> planning values ------------------------------------------------------------------------------


def request_of(args: ServeArgs) -> dict[str, Any]:
    """vLLM's values of the modelled fields the words give (EngineArgs names, as from_cli_args leaves them), with
    the positional model as `model` and --spec-* merged into the speculative config as vLLM merges them."""
    values = args.values
    out = {dest: values[dest] for dest in MODELLED if dest in values and dest != "model_tag"}
    if values.get("model_tag") is not None:
        out["model"] = values["model_tag"]
    for dest, flag in _OBJECT_FLAGS.items():  # vLLM reads any JSON here, then takes the value as its config's fields
        if out.get(dest) is not None and not isinstance(out[dest], dict):
            raise FlagError(f'{flag} takes a JSON object ({{"key": value}}), got {json.dumps(out[dest])[:60]}')
    spec = out.get("speculative_config")
    for dest, (flag, key) in SPEC_FLAGS.items():
        if values.get(dest) is None:
            continue
        spec = dict(spec) if isinstance(spec, dict) else {}
        if key in spec:
            raise FlagError(f"{flag} and --speculative-config['{key}'] are mutually exclusive")
        spec[key] = values[dest]
    if spec is not None or "speculative_config" in out:
        out["speculative_config"] = {str(k).replace("-", "_"): v for k, v in spec.items()} if spec else spec
    return out


def _planning_value(dest: str, value: Any) -> Any:
    if dest == "max_model_len" and value == -1:
        return "auto"
    if dest == "served_model_name" and isinstance(value, list) and len(value) == 1:
        return value[0]
    return value


def option_words(g: Given) -> list[str]:
    """One option as vlaunch passes it on: its canonical spelling and the strings vLLM read."""
    flag = g.flag
    name = flag.canonical or g.spelling
    if flag.switch:
        return [name if g.value else flag.negative]
    if g.raw is None:
        return [name]
    return [name, *g.raw]


def _pass_through(args: ServeArgs, skip: set[str]) -> tuple[list[str], list[str]]:
    """(the options vLLM reads that vlaunch does not plan with, in canonical spellings and once each; notes)."""
    last: dict[str, Given] = {}
    order: list[str] = []
    appended: list[Given] = []
    for g in args.given:
        if g.dest in MODELLED or g.dest in SPEC_FLAGS or g.dest in skip:
            continue
        if g.flag.action == "append":
            appended.append(g)
            continue
        if g.dest not in last:
            order.append(g.dest)
        last[g.dest] = g
    words: list[str] = []
    for dest in order:
        words += option_words(last[dest])
    for g in appended:
        words += option_words(g)
    notes = [
        f"{last[d].flag.canonical} is passed to vLLM but not modelled: {MEMORY_NOTES[d]}"
        for d in order
        if d in MEMORY_NOTES
    ]
    others = [last[d].flag.canonical or d for d in order if d not in MEMORY_NOTES]
    others += [g.flag.canonical for g in appended if g.flag.canonical not in others]
    if others:
        notes.append("passed to vLLM as given (nothing vlaunch plans with): " + ", ".join(others))
    return words, notes


def from_serve_args(args: ServeArgs, *, where: str) -> Parsed:
    """Planning values, pass-through options and notes from what vLLM read."""
    if args.unknown:
        raise unknown_error(args.unknown, args.interface, where)
    try:
        request = request_of(args)
    except FlagError as e:
        raise FlagError(e.message, source=where) from None
    values = {profile_dest(MODELLED[dest]): _planning_value(dest, value) for dest, value in request.items()}
    config = args.values.get("config")
    extra, notes = _pass_through(args, {"config"})
    return Parsed(values, extra, notes, request, config if isinstance(config, str) else None)


def parse_serve_args(
    words: Sequence[str], iface: I.Interface, *, where: str = "command", serve: bool = True, pasted: bool = True
) -> Parsed:
    """The words after `vllm serve` (serve=False: after `python -m vllm.entrypoints.openai.api_server`;
    pasted=False: vLLM options given to vlaunch, with no model first)."""
    from launcher.vllm.serveparse import ServeArgError, parse  # argparse: only where words are read

    try:
        args = parse(words, iface, serve=serve, pasted=pasted)
    except ServeArgError as e:
        others = _releases_taking(words, iface, serve)
        hint = f" (vLLM {I.span(others)} take it: state the vLLM the launch runs)" if others else ""
        raise FlagError(f"vLLM {iface.label} refuses it: {e.message}{hint}", source=where) from None
    return from_serve_args(args, where=where)


def _releases_taking(words: Sequence[str], iface: I.Interface, serve: bool) -> tuple[I.Version, ...]:
    """The other generated releases whose parser reads `words` without refusing them (for a refusal's hint)."""
    from launcher.vllm.serveparse import ServeArgError, parse

    found = []
    for release in I.available():
        if release == iface.version:
            continue
        try:
            args = parse(words, I.load(release), serve=serve, pasted=False)
        except ServeArgError:
            continue
        if not args.unknown:
            found.append(release)
    return tuple(found)


def unmodelled_notes(extra_args: Sequence[str], iface: I.Interface, *, where: str = "vllm.extra_args") -> list[str]:
    """Plan-time reading of a profile's pass-through arguments with the release that runs: refused when it does not
    take one or when one sets a field the profile has a key for; a note for each that changes memory."""
    parsed = parse_serve_args(["__model__", *extra_args], iface, where=where)
    modelled = sorted(k for k in parsed.request if k != "model")
    if modelled:
        raise FlagError(
            f"sets {', '.join(modelled)}, which vlaunch plans with: write it as the profile's "
            f"{', '.join(MODELLED[k] for k in modelled)} instead",
            source=where,
        )
    return parsed.notes


# ---- vLLM's --config YAML --------------------------------------------------------------------------------------


def config_words(data: Mapping[str, Any], iface: I.Interface, *, module: bool = False) -> list[str]:
    """vLLM's load_config_file: a YAML mapping of flag names to values -> command-line words, as the release that
    runs writes them (`config_false`, `config_list`, `config_dict` in its table's features; `module`: the API server
    module, whose own parser knows the `--no-x` spellings)."""
    feats = iface.features
    false_form = feats.get("module_config_false" if module else "config_false", "dropped")
    words: list[str] = []
    for key, value in data.items():
        flag = f"--{key}"
        if isinstance(value, bool):
            if value:
                words.append(flag)
            elif false_form == "no_flag" and f"--no-{key}" in iface.by_spelling:
                words.append(f"--no-{key}")
            elif false_form == "string":
                words += [flag, str(value)]
        elif isinstance(value, list):
            if value and feats.get("config_list", "words") == "words":
                words += [flag, *(str(v) for v in value)]
            elif value:
                words += [flag, str(value)]
        elif isinstance(value, dict):
            words += [flag, json.dumps(value) if feats.get("config_dict", "json") == "json" else str(value)]
        else:
            words += [flag, str(value)]
    return words


def read_serve_config(path: str, iface: I.Interface) -> tuple[Parsed, str | None]:
    """vLLM's `--config` YAML (flag names as keys, with - or _) -> (planning values, None); a model's config.json
    given there instead -> (nothing, its path), read as --hf-config-path."""
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
    words = config_words(data, iface)
    model = [str(data["model"])] if isinstance(data.get("model"), str) else []
    words = model + [w for i, w in enumerate(words) if not (w == "--model" or (i and words[i - 1] == "--model"))]
    return parse_serve_args(words, iface, where=path), None


# ---- the planned command, read back ---------------------------------------------------------------------------------


def _same(planned: Any, read: Any) -> bool:
    """A planned value and vLLM's reading of it are the same request (auto is vLLM's -1; one name is a list)."""
    if planned == "auto" and read == -1:
        return True
    if isinstance(planned, tuple | list) or isinstance(read, tuple | list):
        as_list = list(planned) if isinstance(planned, tuple | list) else [planned]
        return as_list == (list(read) if isinstance(read, tuple | list) else [read])
    if isinstance(planned, bool) or isinstance(read, bool):
        return planned is read
    return bool(planned == read)


def check_launch(
    words: Sequence[str], planned: Sequence[tuple[str, Any]], iface: I.Interface, extra: Sequence[str] = ()
) -> tuple[list[str], str | None]:
    """The command a plan writes, checked against the release that runs: (notes for the pass-through flags, why
    that release cannot start it: an option the plan sets that it lacks, or a value outside its choices). The
    pass-through words (`extra`, the profile's extra_args) are read with that release's parser: refused in one line
    when it does not take one, or when one sets a field vlaunch plans with. `words` is the whole command after the
    model, read back only when it has pass-through words (the planned options are written from the same table)."""
    for dest, value in planned:
        flag = iface.by_dest.get(dest)
        if flag is None:
            spelling = I.newest().by_dest[dest].canonical
            having = I.span(I.versions_with_dest(dest))
            return (
                [],
                f"vLLM {iface.label} has no {spelling} (vLLM {having} has it): drop it, or plan the vLLM that has it",
            )
        values = value if isinstance(value, list | tuple) else [value]
        if flag.choices is not None and any(v not in flag.choices for v in values) and value != "auto":
            shown = ", ".join(map(str, flag.choices))
            return [], f"vLLM {iface.label}'s {flag.canonical} takes {shown}, not {value!r}"
    if not extra:
        return [], None
    parsed = parse_serve_args(["__model__", *words], iface, where="the planned vllm serve command")
    wanted = dict(planned)
    for dest, value in parsed.request.items():
        if dest == "model":
            continue
        if dest not in wanted:
            raise FlagError(
                f"sets {dest}, which vlaunch plans with: write it as the profile's {MODELLED[dest]} instead",
                source="vllm.extra_args",
            )
        if not _same(wanted[dest], value):
            raise FlagError(
                f"vLLM {iface.label} reads {iface.by_dest[dest].canonical} as {value!r}, not the planned "
                f"{wanted[dest]!r} (vllm.extra_args sets it again?)",
                field=MODELLED[dest],
            )
    return parsed.notes, None


def fold(extra_args: Sequence[str]) -> tuple[dict[str, Any], list[str]] | None:
    """A profile's pass-through arguments that set fields vlaunch plans with, as those fields (profile keys), and
    the rest in canonical spellings; None when the newest vLLM does not read them (the plan says why, with the
    release that runs)."""
    try:
        parsed = parse_serve_args(["__model__", *extra_args], I.newest(), where="vllm.extra_args")
    except VlaunchError:
        return None
    values = {MODELLED[d]: _planning_value(d, v) for d, v in parsed.request.items() if d != "model"}
    return values, parsed.extra_args
