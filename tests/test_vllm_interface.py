"""The generated `vllm serve` tables (launcher/vllm/interface): every release loads, uses only closed names, and
states what vLLM's own sources say. Each expectation below was read by hand from the vLLM file named beside it
(the release's wheel, unpacked), not from the tables."""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from launcher.vllm import interface as iface

ROOT = Path(__file__).resolve().parents[1]

# The releases the brief requires, and those that known container images ship (version detection lands on them).
REQUIRED = [(0, 10, 0), (0, 11, 0), (0, 15, 0), (0, 19, 0), (0, 23, 0), (0, 26, 0), (0, 29, 0), (0, 32, 0)]
IMAGES = [
    (0, 10, 1, 1), (0, 10, 2), (0, 11, 1), (0, 12, 0), (0, 13, 0), (0, 15, 1), (0, 17, 1), (0, 20, 1), (0, 21, 0),
    (0, 22, 1), (0, 24, 0), (0, 27, 1), (0, 31, 0),
]  # fmt: skip
MINORS = [(0, 14, 0), (0, 16, 0), (0, 18, 0), (0, 25, 0), (0, 28, 0), (0, 30, 0), (0, 33, 0), (0, 34, 0)]

TYPES = {
    "str", "int", "float", "json", "human_int", "human_int_kmg", "human_int_or_auto", "dict_or_str",
    "lower_underscore", "int_or_str_list", "bool", "port", "truthy", "none_as_empty",
}  # fmt: skip
TYPE_PREFIXES = ("dataclass:", "dataclass_json:", "enum:")
ACTIONS = {
    "store", "store_true", "store_false", "store_const", "bool", "enable_disable", "append", "count", "version",
    "custom:LoRAParserAction", "custom:DeprecatedLogConfigFileAction",
}  # fmt: skip
FEATURE_VALUES: dict[str, set[Any]] = {
    "allow_abbrev": {True, False},
    "underscores": {True, False},
    "dotted_keys": {True, False},
    "dotted_list_plus": {True, False},
    "dotted_human_int": {True, False},
    "o_flag": {"optimization_level", "compilation_config", None},
    "o_level_key": {"level", "mode", None},
    "o_separate": {True, False},
    "o_dotted": {"compilation_config", None},
    "model_option": {"moved", "rejected", "kept"},
    "model_option_moves": {True, False},
    "served_name_needs_positional": {True, False},
    "config_yaml": {True, False},
    "config_false": {"no_flag", "dropped", "string", None},
    "config_list": {"words", "string", None},
    "config_dict": {"json", "string", None},
    "module_config_order": {"first", "after_first_word", "other", None},
    "module_config_false": {"no_flag", "dropped", "string", None},
    "help_keyword": {True, False},
    "serve_positional": {"model_tag"},
}


def closed_type(name: str) -> bool:
    if name.startswith("optional:"):
        return closed_type(name[len("optional:") :])
    if name.startswith(TYPE_PREFIXES):
        return re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name.split(":", 1)[1]) is not None
    return name in TYPES


def flag(release: tuple[int, ...], spelling: str) -> iface.Flag:
    return iface.load(release).by_spelling[spelling]


def v(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split("."))


# ---- every table ------------------------------------------------------------------------------------------------


def test_the_required_releases_and_the_image_releases_have_a_table() -> None:
    missing = [r for r in REQUIRED + IMAGES + MINORS if r not in iface.available()]
    assert missing == []


@pytest.mark.parametrize("release", iface.available(), ids=lambda r: ".".join(map(str, r)))
def test_every_table_loads_with_closed_names(release: tuple[int, ...]) -> None:
    table = iface.load(release)
    path = Path(iface.__file__).parent / f"v{'_'.join(map(str, release))}.json"
    assert v(json.loads(path.read_text(encoding="utf-8"))["version"]) == release
    assert len(table.flags) > 150
    assert [f.type for f in table.flags if not closed_type(f.type)] == []
    assert [f.action for f in table.flags if f.action not in ACTIONS] == []
    assert set(table.features) == set(FEATURE_VALUES)
    assert {k: x for k, x in table.features.items() if x not in FEATURE_VALUES[k]} == {}
    spellings = [s for f in table.flags for s in f.spellings]
    assert len(spellings) == len(set(spellings))  # argparse maps each string to one option


@pytest.mark.parametrize("release", iface.available(), ids=lambda r: ".".join(map(str, r)))
def test_every_table_but_the_installed_one_names_its_wheel(release: tuple[int, ...]) -> None:
    source = iface.load(release).source
    if release == (0, 32, 0):
        assert source.startswith("vllm 0.32.0")
    else:
        label = ".".join(map(str, release))
        assert source.startswith(f"wheel vllm-{label}-"), source
        assert "stubs: dist-version" in source


# ---- which table a launch reads ---------------------------------------------------------------------------------


def test_table_for_picks_the_newest_at_or_below() -> None:
    assert iface.table_for((0, 10, 1, 1)) == (0, 10, 1, 1)
    assert iface.table_for((0, 10, 1, 7)) == (0, 10, 1, 1)
    assert iface.table_for((0, 10, 2)) == (0, 10, 2)
    assert iface.table_for((0, 10, 1)) == (0, 10, 1)
    assert iface.table_for((0, 12, 5)) == (0, 12, 0)
    assert iface.table_for((0, 32, 0)) == (0, 32, 0)


def test_table_for_an_older_release_is_the_oldest_and_a_newer_one_the_newest() -> None:
    assert iface.table_for((0, 9, 2)) == (0, 10, 0)
    assert iface.table_for((0, 0, 1)) == (0, 10, 0)
    assert iface.table_for((1, 0, 0)) == iface.available()[-1]
    assert iface.available()[-1] >= (0, 34, 0)


# ---- facts read from vLLM's sources -----------------------------------------------------------------------------


def test_quantization_short_flag_everywhere() -> None:
    # vllm/engine/arg_utils.py: model_group.add_argument("--quantization", "-q", ...) in every release
    assert {flag(r, "-q").dest for r in iface.available()} == {"quantization"}
    assert {flag(r, "-q").canonical for r in iface.available()} == {"--quantization"}


def test_swap_space_last_in_0_17() -> None:
    # vllm/engine/arg_utils.py 0.17.1: cache_group.add_argument("--swap-space", ...); 0.18.0 has no swap_space
    assert iface.versions_with("--swap-space")[-1] == (0, 17, 1)
    assert iface.versions_with("--swap-space")[0] == (0, 10, 0)
    assert "--swap-space" not in iface.load((0, 18, 0)).by_spelling
    assert flag((0, 10, 0), "--swap-space").type == "float"


def test_device_memory_utilization_alias_from_0_31() -> None:
    # vllm/engine/arg_utils.py 0.31.0: add_argument("--gpu-memory-utilization", "--device-memory-utilization",
    # dest="gpu_memory_utilization", ...)
    assert iface.versions_with("--device-memory-utilization")[0] == (0, 31, 0)
    assert "--device-memory-utilization" not in iface.load((0, 30, 0)).by_spelling
    f = flag((0, 31, 0), "--device-memory-utilization")
    assert f.dest == "gpu_memory_utilization"
    assert f.spellings == ("--gpu-memory-utilization", "--device-memory-utilization")
    assert flag((0, 10, 0), "--gpu-memory-utilization").default == 0.9


def test_kv_cache_dtype_choices_0_10_and_0_32() -> None:
    # vllm/engine/arg_utils.py literal_to_kwargs: `choices: sorted(options)` of the Literal
    # vllm/config.py 0.10.0: CacheDType = Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc"]
    old = ["auto", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc"]
    assert flag((0, 10, 0), "--kv-cache-dtype").choices == tuple(sorted(old))
    # vllm/config/cache.py 0.32.0: CacheDType
    new = [
        "auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla", "nvfp4_ds_mla",
        "turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc", "ultraquant_4bit",
        "int4_per_token_head", "int8_per_token_head", "fp8_per_token_head", "nvfp4", "nvfp4_4over6",
    ]  # fmt: skip
    assert flag((0, 32, 0), "--kv-cache-dtype").choices == tuple(sorted(new))


def test_kv_cache_dtype_is_free_text_from_0_33() -> None:
    # vllm/config/cache.py 0.33.0: `cache_dtype: CacheDType | str = "auto"` (a str in the union: metavar, no choices;
    # CacheConfig._validate_cache_dtype checks it later)
    assert flag((0, 32, 0), "--kv-cache-dtype").choices is not None
    assert flag((0, 33, 0), "--kv-cache-dtype").choices is None


def test_gpu_memory_utilization_default() -> None:
    # vllm/config/cache.py: Field(default=0.9) through 0.19.1, Field(default=0.92) from 0.20.0,
    # 0.34.0: `gpu_memory_utilization: float | None = Field(default=None, ...)`
    assert flag((0, 19, 1), "--gpu-memory-utilization").default == 0.9
    assert flag((0, 20, 0), "--gpu-memory-utilization").default == 0.92
    f = flag((0, 34, 0), "--gpu-memory-utilization")
    assert (f.default, f.type) == (None, "optional:float")


def test_block_size_choices_dropped_in_0_18() -> None:
    # vllm/config/cache.py 0.17.1: `block_size: SkipValidation[BlockSize]` (a Literal of sizes); 0.18.0: `int`
    assert flag((0, 17, 1), "--block-size").choices == (1, 8, 16, 32, 64, 128, 256)
    assert flag((0, 18, 0), "--block-size").choices is None


def test_mamba_cache_mode_added_in_0_15_and_all_dropped_in_0_32() -> None:
    # vllm/config/cache.py 0.15.0: MambaCacheMode = Literal["all", "align", "none"]; 0.32.0: Literal["align", "none"]
    assert iface.versions_with("--mamba-cache-mode")[0] == (0, 15, 0)
    assert flag((0, 15, 0), "--mamba-cache-mode").choices == ("align", "all", "none")
    assert flag((0, 32, 0), "--mamba-cache-mode").choices == ("align", "none")


def test_max_model_len_takes_auto_from_0_14() -> None:
    # vllm/engine/arg_utils.py 0.13.0: max_model_len in human_readable_ints -> human_readable_int;
    # 0.14.0: `if name == "max_model_len": ... human_readable_int_or_auto`
    assert flag((0, 13, 0), "--max-model-len").type == "human_int"
    assert flag((0, 14, 0), "--max-model-len").type == "human_int_or_auto"
    assert flag((0, 32, 0), "--max-model-len").type == "human_int_or_auto"


def test_human_int_gained_t_suffixes_in_0_13() -> None:
    # vllm/engine/arg_utils.py human_readable_int: 0.12.0's multipliers stop at g/G; 0.13.0 adds "t": 10**12, "T": 2**40
    assert flag((0, 12, 0), "--max-num-batched-tokens").type == "human_int_kmg"
    assert flag((0, 13, 0), "--max-num-batched-tokens").type == "human_int"


def test_dataclass_options_expand_human_numbers_from_0_20() -> None:
    # vllm/engine/arg_utils.py parse_dataclass: 0.20.0 calls _expand_json_human_readable_numbers first
    assert flag((0, 19, 1), "--compilation-config").type == "dataclass_json:CompilationConfig"
    assert flag((0, 20, 0), "--compilation-config").type == "dataclass:CompilationConfig"


def test_compilation_config_short_flag_moved_from_O_to_cc_in_0_12() -> None:
    # vllm/engine/arg_utils.py 0.11.2: "--compilation-config", "-O"; 0.12.0: "--compilation-config", "-cc"
    assert flag((0, 11, 2), "-O").dest == "compilation_config"
    assert flag((0, 12, 0), "-cc").dest == "compilation_config"
    assert "-O" not in iface.load((0, 12, 0)).by_spelling
    assert flag((0, 12, 0), "--optimization-level").dest == "optimization_level"


def test_enable_disable_pairs_in_0_33() -> None:
    # vllm/utils/argparse_utils.py 0.33.0 EnableDisableAction: --enable-x pairs with --disable-x; --no-enable-x stays
    # accepted (hidden from help) and sets False too
    f = flag((0, 33, 0), "--enable-prefix-caching")
    assert f.action == "enable_disable"
    assert set(f.spellings) == {"--enable-prefix-caching", "--disable-prefix-caching", "--no-enable-prefix-caching"}
    assert set(f.const) == {"--disable-prefix-caching", "--no-enable-prefix-caching"}
    g = flag((0, 33, 0), "--disable-custom-all-reduce")
    assert g.dest == "disable_custom_all_reduce"
    assert set(g.const) == {"--enable-custom-all-reduce", "--no-disable-custom-all-reduce"}
    assert flag((0, 32, 0), "--enable-prefix-caching").action == "bool"


def test_guided_decoding_bool_type_in_0_11() -> None:
    # vllm/engine/arg_utils.py 0.11.0: ("--guided-decoding-disable-fallback", bool) ... add_argument(arg, type=type)
    assert flag((0, 11, 0), "--guided-decoding-disable-fallback").type == "truthy"


def test_parallel_short_flags() -> None:
    # vllm/engine/arg_utils.py: "-tp" / "-pp" / "-dp" in every release; "-dcp" from 0.10.2 (not in 0.10.1.1)
    for short, dest in (
        ("-tp", "tensor_parallel_size"),
        ("-pp", "pipeline_parallel_size"),
        ("-dp", "data_parallel_size"),
    ):
        assert {flag(r, short).dest for r in iface.available()} == {dest}
    assert iface.versions_with("-dcp")[0] == (0, 10, 2)


# ---- FEATURES, read from each release's FlexibleArgumentParser.parse_args ---------------------------------------


def feature(release: tuple[int, ...], key: str) -> Any:
    return iface.load(release).features[key]


def test_model_option_rejected_then_moved() -> None:
    # vllm/utils/__init__.py 0.11.0: `if model_in_cli_args: raise ValueError(...)`;
    # vllm/utils/argparse_utils.py 0.11.1: "Move <model> to the front"
    assert feature((0, 10, 0), "model_option") == "rejected"
    assert feature((0, 11, 0), "model_option") == "rejected"
    assert feature((0, 11, 1), "model_option") == "moved"
    assert feature((0, 32, 0), "model_option") == "moved"


def test_o_flag_per_release() -> None:
    # 0.10.0-0.11.0: `-O3` -> `-O.level=3`; 0.11.1: `-O.mode=3`; 0.12.0: `--optimization-level 3`
    assert (feature((0, 10, 0), "o_flag"), feature((0, 10, 0), "o_level_key")) == ("compilation_config", "level")
    assert (feature((0, 11, 0), "o_flag"), feature((0, 11, 0), "o_level_key")) == ("compilation_config", "level")
    assert (feature((0, 11, 1), "o_flag"), feature((0, 11, 1), "o_level_key")) == ("compilation_config", "mode")
    assert (feature((0, 12, 0), "o_flag"), feature((0, 12, 0), "o_level_key")) == ("optimization_level", None)
    # `-O.x` is a dotted key of the compilation config through 0.12.0 (rewritten to `-cc.x` there), then not at all
    assert feature((0, 12, 0), "o_dotted") == "compilation_config"
    assert feature((0, 13, 0), "o_dotted") is None


def test_dotted_values_read_human_numbers_from_0_20() -> None:
    # vllm/utils/argparse_utils.py: 0.20.0's dotted-value parsing falls back to human_readable_int
    assert feature((0, 19, 1), "dotted_human_int") is False
    assert feature((0, 20, 0), "dotted_human_int") is True
    assert all(iface.load(r).features["dotted_list_plus"] for r in iface.available())


def test_config_yaml_lists_dicts_and_false() -> None:
    # _load_config_file / load_config_file: lists become words from 0.10.2 (`elif isinstance(value, list)`),
    # mappings JSON from 0.16.0 (`elif isinstance(value, dict)`); a false boolean becomes `--no-x` from 0.28.0 when
    # the reading parser holds it (the serve parser itself: python -m ...api_server), never under `vllm serve`
    assert feature((0, 10, 1, 1), "config_list") == "string"
    assert feature((0, 10, 2), "config_list") == "words"
    assert feature((0, 15, 1), "config_dict") == "string"
    assert feature((0, 16, 0), "config_dict") == "json"
    assert feature((0, 27, 1), "module_config_false") == "dropped"
    assert feature((0, 28, 0), "module_config_false") == "no_flag"
    assert feature((0, 32, 0), "config_false") == "dropped"


def test_config_yaml_placement_for_the_module_entry_point() -> None:
    # 0.10.1.1: `args = [args[0]] + config_args + ...` whatever args[0] is; 0.10.2: `if args[0].startswith('-')`
    assert feature((0, 10, 1, 1), "module_config_order") == "after_first_word"
    assert feature((0, 10, 2), "module_config_order") == "first"


# ---- the generator's own logic, on synthetic callables and parsers ----------------------------------------------


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("vllm_interface_script", ROOT / "scripts" / "vllm_interface.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _human_kmg(value: str) -> int:
    m = re.fullmatch(r"(\d+)([kKmMgGtT])", value)
    if m and m.group(2) in "kmgKMG":
        return int(m.group(1)) * {"k": 1000, "K": 1024, "m": 10**6, "M": 2**20, "g": 10**9, "G": 2**30}[m.group(2)]
    return int(value)


def _human_full(value: str) -> int:
    return 2**40 if value == "1T" else _human_kmg(value)


def test_type_name_tells_the_human_int_variants_apart(gen: ModuleType) -> None:
    _human_kmg.__name__ = "human_readable_int"
    _human_full.__name__ = "human_readable_int"
    assert gen.type_name(_human_kmg) == "human_int_kmg"
    assert gen.type_name(_human_full) == "human_int"


def test_type_name_of_wrappers_and_plain_callables(gen: ModuleType) -> None:
    def optional_type(return_type: Any) -> Any:
        def _optional_type(val: str) -> Any:
            return None if val in ("", "None") else return_type(val)

        return _optional_type

    assert gen.type_name(optional_type(json.loads)) == "optional:json"
    assert gen.type_name(optional_type(int)) == "optional:int"
    assert gen.type_name(bool) == "truthy"
    assert gen.type_name(None) == "str"
    assert gen.type_name(lambda s: s.lower().replace("-", "_")) == "lower_underscore"

    def something_new(val: str) -> str:
        return val

    assert gen.type_name(something_new) == "other:something_new"


def test_features_of_a_parser_that_rewrites_nothing(gen: ModuleType) -> None:
    top = argparse.ArgumentParser(prog="vllm")
    serve = top.add_subparsers(dest="subparser").add_parser("serve")
    serve.add_argument("model_tag", nargs="?")
    serve.add_argument("--max-num-seqs", type=int)
    out = gen.features(serve, top)
    assert out["underscores"] is False
    assert out["dotted_keys"] is False
    assert out["o_flag"] is None
    assert out["model_option"] == "kept"
    assert out["config_yaml"] is False
    assert out["serve_positional"] == "model_tag"


def test_rewritten_captures_what_reaches_argparse(gen: ModuleType) -> None:
    class Dashing(argparse.ArgumentParser):
        def parse_args(self, args: Any = None, namespace: Any = None) -> Any:  # type: ignore[override]
            return super().parse_args([a.replace("_", "-") for a in args], namespace)

    top = Dashing(prog="vllm")
    assert gen._rewritten(top, ["serve", "--max_num_seqs", "7"]) == ["serve", "--max-num-seqs", "7"]
