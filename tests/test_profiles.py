"""Launch profiles: shipped files load, bad YAML fails with one line naming the file and the key."""

from __future__ import annotations

import dataclasses
import json
import tempfile
from pathlib import Path
from typing import Any, get_args

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launcher.common.errors import ProfileError
from launcher.plan.profiles import (
    FIELD_HELP,
    MACHINE_NAMES,
    MachineName,
    NodeSpec,
    Profile,
    VllmSection,
    load_profile,
    parse_kv_bytes,
    profile_from_mapping,
    profile_from_yaml,
    resolve_profile_arg,
)

GiB = 1 << 30
PROFILES = Path(__file__).resolve().parent.parent / "profiles"
SHIPPED = sorted(PROFILES.glob("*.yaml"))


def _write(tmp_path: Path, text: str, name: str = "p.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _error(tmp_path: Path, text: str) -> ProfileError:
    path = _write(tmp_path, text)
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith(f"{path}: ")
    return info.value


# ---- shipped profiles ------------------------------------------------------------------------------------


def test_profiles_are_shipped() -> None:
    assert {p.stem for p in SHIPPED} >= {"llama8b-32k", "llama70b-awq-32k", "qwen3-30b-a3b-8k", "tiny-cpu"}


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_profile_loads(path: Path) -> None:
    p = load_profile(path)
    assert p.name == path.stem
    assert p.source == str(path)
    from launcher.vllm.detect import detect_version

    found = detect_version(p.vllm, ask=False)
    if p.vllm.launch == "container":  # a bundled container profile names an image whose vLLM is known
        assert found.source in ("stated", "image"), found.detail
    json.dumps(p.to_json())


def test_shipped_values() -> None:
    llama = load_profile(PROFILES / "llama8b-32k.yaml")
    assert (llama.model, llama.machine, llama.max_model_len, llama.users) == (
        "meta-llama/Llama-3.1-8B-Instruct", "dgx-spark", 32768, 8,
    )  # fmt: skip
    assert (llama.dtype, llama.quantization, llama.gpu_memory_utilization) == ("bfloat16", None, "auto")
    assert llama.vllm == VllmSection(
        launch="container", image="nvcr.io/nvidia/vllm:25.11-py3", host="127.0.0.1", port=8000
    )
    awq = load_profile(PROFILES / "llama70b-awq-32k.yaml")
    assert (awq.quantization, awq.users, awq.kv_cache_dtype) == ("awq", 4, "auto")
    tiny = load_profile(PROFILES / "tiny-cpu.yaml")
    assert (tiny.machine, tiny.gpu_memory_utilization, tiny.vllm.launch, tiny.vllm.port) == ("cpu", 0.3, "module", 8123)
    assert dict(tiny.vllm.env) == {"VLLM_TARGET_DEVICE": "cpu"}
    assert tiny.vllm.extra_args == ()


# ---- values ----------------------------------------------------------------------------------------------


def test_defaults_and_name_from_stem(tmp_path: Path) -> None:
    p = load_profile(_write(tmp_path, "model: org/m\n", "my-prof.yaml"))
    assert p.name == "my-prof"
    assert p == Profile(model="org/m", name="my-prof")
    assert (p.dtype, p.users, p.machine, p.gpu_memory_utilization, p.vllm.port) == ("auto", 1, "auto", "auto", 8000)


@pytest.mark.parametrize(
    ("text", "expected"), [("bf16", "bfloat16"), ("fp16", "float16"), ("half", "float16"),
                           ("float", "float32"), ("fp32", "float32"), ("BFloat16", "bfloat16"), ("auto", "auto")],
)  # fmt: skip
def test_dtype_aliases(text: str, expected: str) -> None:
    assert profile_from_mapping({"model": "m", "dtype": text}).dtype == expected


def test_quantization_alias() -> None:
    quant = profile_from_mapping({"model": "m", "quantization": "AWQ_Marlin"}).quantization
    assert quant == "awq_marlin"  # as written, lowercased as vLLM reads it


@pytest.mark.parametrize(
    ("value", "expected"),
    [("4G", 4 * GiB), ("2GiB", 2 * GiB), ("1.5GB", 1_500_000_000), ("4g", 4 * 10**9), ("512M", 512 << 20),
     ("25.6k", 25_600), ("12 GiB", 12 * GiB), (4096, 4096), ("4096", 4096)],
)  # fmt: skip
def test_kv_cache_memory_bytes(value: object, expected: int) -> None:
    assert profile_from_mapping({"model": "m", "kv_cache_memory_bytes": value}).kv_cache_memory_bytes == expected


def test_kv_cache_memory_bytes_from_yaml(tmp_path: Path) -> None:
    p = load_profile(_write(tmp_path, "model: m\nkv_cache_memory_bytes: 4G\n"))
    assert p.kv_cache_memory_bytes == 4 * 2**30


def test_binary_suffix_takes_no_decimals() -> None:
    with pytest.raises(ValueError, match=r"2\.5GiB"):
        parse_kv_bytes("2.5G")


def test_vllm_section(tmp_path: Path) -> None:
    p = load_profile(
        _write(
            tmp_path,
            "model: m\nvllm:\n  version: 0.6.3.post1\n  launch: module\n  extra_args: [--seed, 0]\n"
            "  env: {A: 1, B: x, C: 0.5}\n  served_model_name: chat\n",
        )
    )
    assert p.vllm.version_info == (0, 6, 3)
    assert p.vllm.extra_args == ("--seed", "0")
    assert dict(p.vllm.env) == {"A": "1", "B": "x", "C": "0.5"}
    assert p.to_json()["vllm"] == {**p.vllm.to_json(), "env": {"A": "1", "B": "x", "C": "0.5"}}


def test_relative_model_and_config_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "profs" / "local-model").mkdir(parents=True)
    (tmp_path / "cwd" / "other-model").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "cwd")
    profs = tmp_path / "profs"
    assert load_profile(_write(profs, "model: local-model\n")).model == str(profs / "local-model")
    assert load_profile(_write(profs, "model: other-model\n")).model == str(tmp_path / "cwd" / "other-model")
    assert load_profile(_write(profs, "model: org/repo\n")).model == "org/repo"
    cfg = load_profile(_write(profs, "model: m\nconfig: cfg/config.json\n")).config
    assert cfg == str(profs / "cfg" / "config.json")


# ---- errors ----------------------------------------------------------------------------------------------


def test_unknown_key_suggests(tmp_path: Path) -> None:
    e = _error(tmp_path, "model: m\ngpu_memory_utilisation: 0.8\n")
    assert e.field == "gpu_memory_utilisation"
    assert str(e).endswith("gpu_memory_utilisation: unknown key; did you mean 'gpu_memory_utilization'?")


def test_unknown_key_without_suggestion(tmp_path: Path) -> None:
    e = _error(tmp_path, "model: m\nzzzzqqq: 1\n")
    assert str(e).endswith("zzzzqqq: unknown key")


def test_unknown_nested_key(tmp_path: Path) -> None:
    e = _error(tmp_path, "model: m\nvllm:\n  prot: 8000\n")
    assert e.field == "vllm.prot"
    assert "did you mean 'port'?" in str(e)


@pytest.mark.parametrize(
    ("text", "field", "fragment"),
    [
        ("model: m\nvllm:\n  port: abc\n", "vllm.port", "must be an integer between 1 and 65535, got 'abc'"),
        ("model: m\nvllm:\n  port: 70000\n", "vllm.port", "between 1 and 65535"),
        ("model: m\nusers: true\n", "users", "got true"),
        ("model: m\nusers: '8'\n", "users", "got '8'"),
        ("model: m\nusers: 0\n", "users", "positive integer"),
        ("model: m\nmax_model_len: 8192.0\n", "max_model_len", "positive whole number"),
        ("model: m\ntensor_parallel_size: -1\n", "tensor_parallel_size", "positive integer"),
        ("model: m\ngpu_memory_utilization: 1.5\n", "gpu_memory_utilization", "at most 1"),
        ("model: m\ngpu_memory_utilization: 0\n", "gpu_memory_utilization", "greater than 0"),
        ("model: m\ngpu_memory_utilization: .nan\n", "gpu_memory_utilization", "auto or"),
        ("model: m\nos_reserve_gib: -2\n", "os_reserve_gib", "≥ 0"),
        ("model: m\ngpu_memory_gib: 0\n", "gpu_memory_gib", "greater than 0"),
        ("model: m\noverhead_gib: x\n", "overhead_gib", "≥ 0"),
        ("model: m\nbiggest_pool: yes please\n", "biggest_pool", "true or false"),
        ("model: m\ndtype: int4\n", "dtype", "auto, bfloat16, float16, float32"),
        ("model: m\nmachine: dgx-sprak\n", "machine", "did you mean 'dgx-spark'?"),
        ("model: m\nkv_cache_dtype: fp4\n", "kv_cache_dtype", "fp8_e4m3"),
        ("model: m\nquantization: awk\n", "quantization", "awq"),
        ("model: m\nblock_size: 0\n", "block_size", "a positive integer"),
        ("model: m\nkv_cache_memory_bytes: 12 parsecs\n", "kv_cache_memory_bytes", "unknown unit"),
        ("model: m\nkv_cache_memory_bytes: 2.5G\n", "kv_cache_memory_bytes", "2.5GiB"),
        ("model: m\nkv_cache_memory_bytes: 0\n", "kv_cache_memory_bytes", "positive"),
        ("model: m\nkv_cache_memory_bytes: 1.5\n", "kv_cache_memory_bytes", "positive"),
        ("model: ''\n", "model", "non-empty string"),
        ("model: [a]\n", "model", "got a list"),
        ("model: m\nvllm: 3\n", "vllm", "must be a mapping"),
        ("model: m\nvllm:\n  version: 0.19\n", "vllm.version", "quoted"),
        ("model: m\nvllm:\n  version: latest\n", "vllm.version", "0.19.0"),
        ("model: m\nvllm:\n  launch: docker\n", "vllm.launch", "cli, module, container"),
        ("model: m\nvllm:\n  extra_args: --seed 0\n", "vllm.extra_args", "list of strings"),
        ("model: m\nvllm:\n  extra_args: [a, [b]]\n", "vllm.extra_args[1]", "got a list"),
        ("model: m\nvllm:\n  env: [A]\n", "vllm.env", "mapping"),
        ("model: m\nvllm:\n  env: {A: true}\n", "vllm.env.A", "quote it"),
        ("model: m\nvllm:\n  env: {A: null}\n", "vllm.env.A", "got null"),
        ("model: m\nvllm:\n  env: {1A: x}\n", "vllm.env.1A", "environment variable"),
        ("model: m\nvllm:\n  host: 5\n", "vllm.host", "string"),
    ],
)
def test_invalid_value(tmp_path: Path, text: str, field: str, fragment: str) -> None:
    e = _error(tmp_path, text)
    assert e.field == field
    assert f": {field}: " in str(e)
    assert fragment in str(e)


def test_missing_model(tmp_path: Path) -> None:
    e = _error(tmp_path, "users: 2\n")
    assert e.field == "model"
    assert "missing" in str(e)


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "---\n", "null\n"])
def test_empty_file(tmp_path: Path, text: str) -> None:
    assert "empty profile" in str(_error(tmp_path, text))


@pytest.mark.parametrize(("text", "got"), [("- a\n- b\n", "a list"), ("just text\n", "'just text'"), ("3\n", "3")])
def test_not_a_mapping(tmp_path: Path, text: str, got: str) -> None:
    assert str(_error(tmp_path, text)).endswith(f"must be a mapping of keys to values, got {got}")


@pytest.mark.parametrize(
    ("text", "where"),
    [("model: m\n  users: 2\n", "line 2 column 8: "), ("model: [a\n", "line 2 column 1: "),
     ("model: m\n---\nmodel: n\n", "line 2 column 1: ")],
)  # fmt: skip
def test_yaml_syntax_error(tmp_path: Path, text: str, where: str) -> None:
    e = _error(tmp_path, text)
    assert e.field is None
    assert where in str(e)


@pytest.mark.parametrize(
    ("text", "field", "lines"),
    [("model: m\nusers: 2\nusers: 3\n", "users", "line 3 (first at line 2)"),
     ("model: m\nvllm:\n  port: 1\n  host: h\n  port: 2\n", "vllm.port", "line 5 (first at line 3)"),
     ("model: m\nvllm:\n  env:\n    A: 1\n    A: 2\n", "vllm.env.A", "line 5 (first at line 4)")],
)  # fmt: skip
def test_duplicate_key(tmp_path: Path, text: str, field: str, lines: str) -> None:
    e = _error(tmp_path, text)
    assert e.field == field
    assert f"duplicated key {field.rsplit('.', 1)[-1]!r} at {lines}" in str(e)


def test_merge_keys_are_not_duplicates(tmp_path: Path) -> None:
    text = "base: &b {port: 1}\n"  # an anchor on an unknown key is still an unknown key
    assert _error(tmp_path, "model: m\n" + text).field == "base"
    p = load_profile(_write(tmp_path, "model: m\nvllm:\n  <<: {port: 1, host: h}\n  port: 2\n"))
    assert (p.vllm.port, p.vllm.host) == (2, "h")


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(ProfileError, match="no such profile file") as info:
        load_profile(path)
    assert str(info.value).startswith(f"{path}: ")


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "bin.yaml"
    path.write_bytes(b"model: \xff\xfe\n")
    with pytest.raises(ProfileError, match="not UTF-8"):
        load_profile(path)


# ---- overrides, immutability, lookup -----------------------------------------------------------------------


def test_with_overrides_revalidates(tmp_path: Path) -> None:
    p = load_profile(_write(tmp_path, "model: m\nusers: 2\n"))
    q = p.with_overrides(users=5, dtype="bf16", kv_cache_memory_bytes="4G", vllm={"port": 9000})
    assert (q.users, q.dtype, q.kv_cache_memory_bytes, q.vllm.port, q.vllm.host) == (5, "bfloat16", 4 * GiB, 9000,
                                                                                      "127.0.0.1")  # fmt: skip
    assert q.source == p.source
    assert p.users == 2
    assert p.with_overrides() == p
    assert p.with_overrides(vllm=VllmSection(port=1)).vllm.port == 1
    with pytest.raises(ProfileError) as info:
        p.with_overrides(users=0)
    assert str(info.value) == "users: must be a positive integer, got 0"
    with pytest.raises(ProfileError, match="did you mean 'users'"):
        p.with_overrides(user=3)
    with pytest.raises(ProfileError, match=r"vllm\.port"):
        p.with_overrides(vllm={"port": 0})


def test_frozen() -> None:
    p = profile_from_mapping({"model": "m", "vllm": {"env": {"A": "1"}}})
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.users = 3  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.vllm.port = 1  # type: ignore[misc]
    assert isinstance(p.vllm.extra_args, tuple)
    assert isinstance(p.vllm.env, tuple)
    hash(p)
    dataclasses.asdict(p)


def test_every_field_has_help() -> None:
    keys = {f.name for f in dataclasses.fields(Profile)} - {"source"}
    keys |= {f"vllm.{f.name}" for f in dataclasses.fields(VllmSection)}
    keys |= {f"nodes.{f.name}" for f in dataclasses.fields(NodeSpec)}
    assert keys == set(FIELD_HELP)
    assert all(text and "\n" not in text for text in FIELD_HELP.values())


def test_machine_names() -> None:
    assert get_args(MachineName) == MACHINE_NAMES == (
        "dgx-spark", "h100-80gb", "h200", "a100-80gb", "a100-40gb", "l40s", "rtx5090", "rtx4090", "rtx4080",
        "rtx3090", "t4", "cuda", "cpu", "auto",
    )  # fmt: skip


def test_resolve_profile_arg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_profile_arg("llama8b-32k", PROFILES) == PROFILES / "llama8b-32k.yaml"
    assert resolve_profile_arg("tiny-cpu.yaml", PROFILES) == PROFILES / "tiny-cpu.yaml"
    path = _write(tmp_path, "model: m\n")
    assert resolve_profile_arg(str(path), PROFILES) == path
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ProfileError) as info:
        resolve_profile_arg("llama8b-23k", PROFILES)
    msg = str(info.value)
    assert msg.startswith("llama8b-23k: ")
    assert "did you mean 'llama8b-32k'?" in msg
    assert "llama70b-awq-32k, llama8b-32k, qwen3-30b-a3b-8k, qwen3-8b-pip, tiny-cpu" in msg
    # an empty local directory: the bundled profiles still answer by name
    assert resolve_profile_arg("tiny-cpu", tmp_path / "empty").name == "tiny-cpu.yaml"
    with pytest.raises(ProfileError, match="available: llama70b-awq-32k"):
        resolve_profile_arg("x", tmp_path / "empty")


# ---- junk never escapes as anything but ProfileError -------------------------------------------------------

_KEYS = [*(k for k in FIELD_HELP if "." not in k), "model", "vllm"]
_VKEYS = [k.split(".", 1)[1] for k in FIELD_HELP if k.startswith("vllm.")]
_scalars = (
    st.none() | st.booleans() | st.integers() | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats() | st.text(max_size=300) | st.sampled_from(["auto", "4G", "2.5G", "1e9GB", "~nobody/x", "a\x00b"])
)  # fmt: skip
_junk = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8) | st.integers(), inner, max_size=4),
    max_leaves=12,
)
_vllm_junk = st.dictionaries(st.sampled_from(_VKEYS) | st.text(max_size=8), _junk, max_size=5)
_docs = st.dictionaries(
    st.sampled_from(_KEYS) | st.text(max_size=10), _junk | _vllm_junk, max_size=8
) | st.fixed_dictionaries({"model": st.text(max_size=300)}, optional={k: _junk for k in _KEYS if k != "model"})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_docs)
def test_junk_mappings_raise_only_profile_errors(doc: dict[Any, Any]) -> None:
    with tempfile.TemporaryDirectory() as d:
        try:
            p = profile_from_mapping(doc, source="junk.yaml", base_dir=Path(d))
        except ProfileError as e:
            assert "\n" not in str(e) and str(e).startswith("junk.yaml")
        else:
            json.dumps(p.to_json())


@settings(max_examples=200, deadline=None)
@given(_docs | _junk)
def test_junk_yaml_files_raise_only_profile_errors(doc: object) -> None:
    try:
        text = yaml.safe_dump(doc)
    except yaml.YAMLError:
        return
    try:
        profile_from_yaml(text, source="junk.yaml")
    except ProfileError as e:
        assert "\n" not in str(e)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab: -[]{}\n\t'\"&*!<>?|#%@`,.0123")), max_size=60))
def test_junk_text_raises_only_profile_errors(text: str) -> None:
    try:
        profile_from_yaml(text, source="junk.yaml")
    except ProfileError as e:
        assert "\n" not in str(e)


# ---- the parsed-profile cache ----------------------------------------------------------------------------


def _cache_entries(tmp_path: Path) -> list[Path]:
    import os

    return sorted((Path(os.environ["XDG_CACHE_HOME"]) / "vlaunch" / "profiles").glob("*.json"))


def test_cache_gives_the_same_profile(tmp_path: Path) -> None:
    text = "model: org/m\nmax_model_len: 32k\nusers: 4\nvllm: {port: 8100, env: {A: '1'}}\n"
    first = profile_from_yaml(text, source="a.yaml")
    entries = _cache_entries(tmp_path)
    assert len(entries) == 1
    assert json.loads(entries[0].read_text())["text"] == text
    again = profile_from_yaml(text, source="a.yaml")
    assert again == first
    assert (again.max_model_len, again.users, again.vllm.port, dict(again.vllm.env)) == (32000, 4, 8100, {"A": "1"})


def test_cache_entry_for_another_text_is_not_used(tmp_path: Path) -> None:
    text = "model: org/m\nusers: 2\n"
    profile_from_yaml(text)
    (entry,) = _cache_entries(tmp_path)
    data = json.loads(entry.read_text())
    data["text"] = "model: org/other\n"  # a colliding name holds another text: read the YAML instead
    data["data"] = {"model": "org/other", "users": 9}
    entry.write_text(json.dumps(data))
    assert profile_from_yaml(text).users == 2
    entry.write_text("{not json")
    assert profile_from_yaml(text).users == 2


def test_cache_never_hides_an_error(tmp_path: Path) -> None:
    text = "model: a\nmodel: b\n"
    for _ in range(2):
        with pytest.raises(ProfileError, match="duplicated key"):
            profile_from_yaml(text)
    assert _cache_entries(tmp_path) == []
    bad = "model: org/m\nusers: -3\n"  # valid YAML, invalid profile: validated on every read, cached or not
    for _ in range(2):
        with pytest.raises(ProfileError):
            profile_from_yaml(bad)


def test_unwritable_cache_is_no_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file-not-dir"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    assert profile_from_yaml("model: org/m\n").model == "org/m"


def test_yaml_values_json_cannot_hold_are_not_cached(tmp_path: Path) -> None:
    text = "model: org/m\ndescription: 2024-01-01\n"  # YAML reads a date here
    with pytest.raises(ProfileError):
        profile_from_yaml(text)
    text = "model: org/m\n1: x\n"
    with pytest.raises(ProfileError):
        profile_from_yaml(text)
    assert _cache_entries(tmp_path) == []


def test_cached_profile_needs_no_yaml(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    prof = tmp_path / "p.yaml"
    prof.write_text("model: org/m\nmax_model_len: 8192\n")
    code = (
        "import sys\nfrom launcher.plan.profiles import load_profile\n"
        f"p = load_profile({str(prof)!r})\nassert p.max_model_len == 8192\n"
        "print('yaml' in sys.modules)\n"
    )
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ))
            for _ in range(2)]  # fmt: skip
    assert [r.stdout.strip() for r in runs] == ["True", "False"], [r.stderr for r in runs]
