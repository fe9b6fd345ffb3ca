"""launcher.model.checkpoint against real files written by the safetensors and gguf libraries."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest
import safetensors
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import quantize
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.numpy import save_file

from launcher.common.errors import CheckpointError
from launcher.model.checkpoint import (
    GGML_TYPES,
    CheckpointBytes,
    TensorInfo,
    find_checkpoint,
    read_gguf_tensors,
    read_safetensors_header,
)

RNG = np.random.default_rng(0)


# ----------------------------------------------------------------------------------------------- helpers


def _np_tensors() -> dict[str, np.ndarray[Any, Any]]:
    return {
        "embed.weight": RNG.standard_normal((16, 8)).astype(np.float32),
        "layer.0.w": RNG.standard_normal((8, 8)).astype(np.float16),
        "layer.0.idx": np.arange(12, dtype=np.int32).reshape(3, 4),
        "layer.0.mask": np.ones(7, dtype=np.uint8),
        "layer.0.pos": np.arange(5, dtype=np.int64),
        "layer.0.f64": np.zeros((2, 3), dtype=np.float64),
        "layer.0.flag": np.zeros(3, dtype=np.bool_),
        "layer.0.scalar": np.array(1.5, dtype=np.float32),
        "layer.0.empty": np.zeros((0, 4), dtype=np.float32),
    }


def _raw_safetensors(header: dict[str, Any] | bytes, data: bytes = b"") -> bytes:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + data


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _gguf_string(s: str | bytes) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def _raw_gguf(
    tensors: list[tuple[str | bytes, list[int], int, int]],
    *,
    kvs: bytes = b"",
    kv_count: int = 0,
    data_len: int = 0,
    version: int = 3,
    magic: bytes = b"GGUF",
) -> bytes:
    """A GGUF file by hand: (name, ggml dims innermost-first, type id, offset) per tensor."""
    out = magic + struct.pack("<IQQ", version, len(tensors), kv_count) + kvs
    for name, dims, type_id, offset in tensors:
        out += _gguf_string(name) + struct.pack("<I", len(dims))
        out += b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", type_id, offset)
    out += b"\0" * (-len(out) % 32)
    return out + b"\0" * data_len


def _assert_one_line_error(exc: pytest.ExceptionInfo[CheckpointError], path: Path) -> None:
    text = str(exc.value)
    assert "\n" not in text
    assert str(path) in text
    assert exc.value.source == str(path)


def _write_gguf(
    path: Path,
    *,
    endianess: gguf.GGUFEndian = gguf.GGUFEndian.LITTLE,
    alignment: int | None = None,
    tokens: int = 2000,
) -> list[int]:
    """F32, F16, Q8_0 and Q4_K tensors plus assorted metadata; returns the bytes written per tensor."""
    w = gguf.GGUFWriter(path, "llama", endianess=endianess)
    if alignment is not None:
        w.add_custom_alignment(alignment)
    w.add_uint32("llama.block_count", 2)
    w.add_uint64("test.u64", 1 << 40)
    w.add_int8("test.i8", -3)
    w.add_float32("test.f32", 0.5)
    w.add_float64("test.f64", 0.25)
    w.add_bool("test.bool", True)
    w.add_string("general.name", "tiny ✓")
    w.add_array("tokenizer.ggml.tokens", [f"tok{i}" for i in range(tokens)])
    w.add_array("tokenizer.ggml.scores", [float(i) for i in range(tokens)])
    w.add_array("tokenizer.ggml.token_type", [1] * tokens)
    f32 = RNG.standard_normal((4, 64)).astype(np.float32)
    f16 = RNG.standard_normal(96).astype(np.float16)
    q8 = quantize(RNG.standard_normal((3, 64)).astype(np.float32), GGMLQuantizationType.Q8_0)
    # Q4_K has no numpy quantizer: raw blocks, 2 rows of 512 elements = 2 x 2 blocks of 144 bytes.
    q4k = RNG.integers(0, 256, size=(2, 2 * 144), dtype=np.uint8)
    w.add_tensor("tok_embd.weight", f32)
    w.add_tensor("output_norm.weight", f16)
    w.add_tensor("blk.0.attn_q.weight", q8, raw_dtype=GGMLQuantizationType.Q8_0)
    w.add_tensor("blk.0.ffn_up.weight", q4k, raw_dtype=GGMLQuantizationType.Q4_K)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return [f32.nbytes, f16.nbytes, q8.nbytes, q4k.nbytes]


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    _write_gguf(path)
    return path


@pytest.fixture(scope="module")
def safetensors_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("st") / "model.safetensors"
    save_file(_np_tensors(), str(path), metadata={"format": "np"})
    return path


# ------------------------------------------------------------------------------------------- safetensors


def test_safetensors_numpy_dtypes(safetensors_file: Path) -> None:
    arrays = _np_tensors()
    tensors = {t.name: t for t in read_safetensors_header(safetensors_file)}
    assert set(tensors) == set(arrays)
    for name, a in arrays.items():
        assert tensors[name].shape == a.shape
        assert tensors[name].nbytes == a.nbytes
        assert tensors[name].numel == a.size
    assert tensors["embed.weight"].dtype == "F32"
    assert tensors["layer.0.w"].dtype == "F16"
    assert tensors["layer.0.idx"].dtype == "I32"
    assert tensors["layer.0.mask"].dtype == "U8"
    assert tensors["layer.0.pos"].dtype == "I64"
    assert tensors["layer.0.flag"].dtype == "BOOL"
    assert tensors["layer.0.scalar"].shape == ()

    ckpt = find_checkpoint(safetensors_file)
    assert ckpt is not None
    assert ckpt.kind == "safetensors"
    assert ckpt.files == (str(safetensors_file),)
    assert ckpt.total_bytes == sum(a.nbytes for a in arrays.values())
    assert ckpt.numel == sum(a.size for a in arrays.values())
    assert ckpt.bytes_by_dtype["F32"] == sum(a.nbytes for a in arrays.values() if a.dtype == np.float32)
    assert sum(ckpt.bytes_by_dtype.values()) == ckpt.total_bytes


def test_safetensors_bf16_fp8_fp4(tmp_path: Path) -> None:
    buffers = {
        "bf16": np.zeros(2 * 3 * 2, dtype=np.uint8),
        "f8": np.zeros(40, dtype=np.uint8),
        "f8_e5m2": np.zeros(8, dtype=np.uint8),
        "scale": np.zeros(4, dtype=np.uint8),
        "f4": np.zeros(16, dtype=np.uint8),
    }
    specs = {
        "bf16": safetensors.TensorSpec(
            dtype="bfloat16", shape=[2, 3], data_ptr=buffers["bf16"].ctypes.data, data_len=12
        ),
        "f8": safetensors.TensorSpec(
            dtype="float8_e4m3fn", shape=[5, 8], data_ptr=buffers["f8"].ctypes.data, data_len=40
        ),
        "f8_e5m2": safetensors.TensorSpec(
            dtype="float8_e5m2", shape=[8], data_ptr=buffers["f8_e5m2"].ctypes.data, data_len=8
        ),
        "scale": safetensors.TensorSpec(
            dtype="float8_e8m0fnu", shape=[4], data_ptr=buffers["scale"].ctypes.data, data_len=4
        ),
        # Storage shape [4, 4] of packed pairs; the header records the logical [4, 8].
        "f4": safetensors.TensorSpec(
            dtype="float4_e2m1fn_x2", shape=[4, 4], data_ptr=buffers["f4"].ctypes.data, data_len=16
        ),
    }
    path = tmp_path / "low.safetensors"
    safetensors.serialize_file(specs, str(path))
    got = {t.name: t for t in read_safetensors_header(path)}
    assert got["bf16"] == TensorInfo("bf16", "BF16", (2, 3), 12)
    assert got["f8"] == TensorInfo("f8", "F8_E4M3", (5, 8), 40)
    assert got["f8_e5m2"] == TensorInfo("f8_e5m2", "F8_E5M2", (8,), 8)
    assert got["scale"] == TensorInfo("scale", "F8_E8M0", (4,), 4)
    assert got["f4"] == TensorInfo("f4", "F4", (4, 8), 16)
    ckpt = find_checkpoint(path)
    assert ckpt is not None
    assert ckpt.total_bytes == sum(b.nbytes for b in buffers.values())


def test_safetensors_f6_from_hand_written_header(tmp_path: Path) -> None:
    header = {"a": {"dtype": "F6_E2M3", "shape": [4, 8], "data_offsets": [0, 24]}}
    path = _write(tmp_path / "f6.safetensors", _raw_safetensors(header, b"\0" * 24))
    assert read_safetensors_header(path) == [TensorInfo("a", "F6_E2M3", (4, 8), 24)]
    odd = {"a": {"dtype": "F6_E3M2", "shape": [3], "data_offsets": [0, 2]}}
    path = _write(tmp_path / "f6odd.safetensors", _raw_safetensors(odd, b"\0" * 2))
    with pytest.raises(CheckpointError, match="whole number of bytes"):
        read_safetensors_header(path)
    f4 = {"a": {"dtype": "F4", "shape": [3], "data_offsets": [0, 1]}}
    path = _write(tmp_path / "f4odd.safetensors", _raw_safetensors(f4, b"\0"))
    with pytest.raises(CheckpointError, match="whole number of bytes"):
        read_safetensors_header(path)


def _sharded(tmp_path: Path) -> tuple[Path, int, list[str]]:
    shards: dict[str, dict[str, np.ndarray[Any, Any]]] = {
        "model-00001-of-00002.safetensors": {
            "a": RNG.standard_normal((8, 4)).astype(np.float32),
            "b": np.zeros(10, dtype=np.float16),
        },
        "model-00002-of-00002.safetensors": {"c": np.zeros((3, 3), dtype=np.int64)},
    }
    total = 0
    weight_map: dict[str, str] = {}
    for fname, arrays in shards.items():
        save_file(arrays, str(tmp_path / fname))
        total += sum(a.nbytes for a in arrays.values())
        weight_map.update(dict.fromkeys(arrays, fname))
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    return tmp_path, total, sorted(shards)


def test_sharded_with_index(tmp_path: Path) -> None:
    d, total, names = _sharded(tmp_path)
    # A stray file next to an index (consolidated weights, say) is not part of the checkpoint.
    save_file({"x": np.zeros(1000, dtype=np.float32)}, str(d / "consolidated.safetensors"))
    ckpt = find_checkpoint(d)
    assert ckpt is not None
    assert ckpt.kind == "safetensors"
    assert ckpt.files == tuple(str(d / n) for n in names)
    assert ckpt.total_bytes == total
    assert len(ckpt.tensors) == 3
    assert ckpt.bytes_by_dtype == {"F32": 128, "I64": 72, "F16": 20}
    assert find_checkpoint(d / "model.safetensors.index.json") == ckpt


def test_index_with_missing_shards_uses_total_size(tmp_path: Path) -> None:
    d, total, names = _sharded(tmp_path)
    (d / names[1]).unlink()
    ckpt = find_checkpoint(d)
    assert ckpt == CheckpointBytes(
        kind="safetensors",
        files=(str(d / "model.safetensors.index.json"),),
        tensors=(),
        total_bytes=total,
        bytes_by_dtype={},
        numel=0,
    )


def test_index_with_missing_shards_and_no_total_size(tmp_path: Path) -> None:
    d, _, names = _sharded(tmp_path)
    (d / names[0]).unlink()
    index = d / "model.safetensors.index.json"
    data = json.loads(index.read_text())
    del data["metadata"]
    index.write_text(json.dumps(data))
    with pytest.raises(CheckpointError, match="missing") as exc:
        find_checkpoint(d)
    _assert_one_line_error(exc, index)


def test_bad_index_json(tmp_path: Path) -> None:
    index = _write(tmp_path / "model.safetensors.index.json", b"{not json")
    with pytest.raises(CheckpointError) as exc:
        find_checkpoint(tmp_path)
    _assert_one_line_error(exc, index)
    index.write_text(json.dumps({"weight_map": ["a"]}))
    with pytest.raises(CheckpointError, match="weight_map"):
        find_checkpoint(tmp_path)


def test_directory_without_index_reads_every_safetensors(tmp_path: Path) -> None:
    save_file({"a": np.zeros(4, dtype=np.float32)}, str(tmp_path / "b.safetensors"))
    save_file({"b": np.zeros(4, dtype=np.float16)}, str(tmp_path / "a.safetensors"))
    _write_gguf(tmp_path / "ignored.gguf")
    ckpt = find_checkpoint(tmp_path)
    assert ckpt is not None
    assert ckpt.files == (str(tmp_path / "a.safetensors"), str(tmp_path / "b.safetensors"))
    assert ckpt.total_bytes == 24


def test_to_json(safetensors_file: Path) -> None:
    ckpt = find_checkpoint(safetensors_file)
    assert ckpt is not None
    out = ckpt.to_json()
    assert out == {
        "kind": "safetensors",
        "files": [str(safetensors_file)],
        "tensor_count": len(_np_tensors()),
        "total_bytes": ckpt.total_bytes,
        "bytes_by_dtype": ckpt.bytes_by_dtype,
        "numel": ckpt.numel,
    }
    json.dumps(out)
    hash(ckpt)


def test_empty_directory_and_missing_path(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    assert find_checkpoint(tmp_path) is None
    missing = tmp_path / "nope"
    with pytest.raises(CheckpointError) as exc:
        find_checkpoint(missing)
    _assert_one_line_error(exc, missing)
    with pytest.raises(CheckpointError, match="not a checkpoint"):
        find_checkpoint(tmp_path / "config.json")


# ------------------------------------------------------------------------------------ safetensors errors


def test_safetensors_truncated_prefix(tmp_path: Path) -> None:
    for n in (0, 5):
        path = _write(tmp_path / f"t{n}.safetensors", b"\1" * n)
        with pytest.raises(CheckpointError, match="truncated") as exc:
            read_safetensors_header(path)
        _assert_one_line_error(exc, path)


def test_safetensors_header_longer_than_file(tmp_path: Path, safetensors_file: Path) -> None:
    raw = safetensors_file.read_bytes()
    (header_len,) = struct.unpack("<Q", raw[:8])
    path = _write(tmp_path / "cut.safetensors", raw[: 8 + header_len // 2])
    with pytest.raises(CheckpointError, match="larger than the file") as exc:
        read_safetensors_header(path)
    _assert_one_line_error(exc, path)


def test_safetensors_data_truncated(tmp_path: Path, safetensors_file: Path) -> None:
    raw = safetensors_file.read_bytes()
    path = _write(tmp_path / "cut.safetensors", raw[:-1])
    with pytest.raises(CheckpointError, match="truncated") as exc:
        find_checkpoint(path)
    _assert_one_line_error(exc, path)


@pytest.mark.parametrize(
    ("header", "data", "match", "field"),
    [
        (b"{garbage", b"", "not valid JSON", None),
        (b"\xff\xfe{}", b"", "not valid JSON", None),
        (b"[1, 2]", b"", "not a JSON object", None),
        ({"w": {"dtype": "F17", "shape": [2], "data_offsets": [0, 4]}}, b"\0" * 4, "unknown dtype", "w"),
        ({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, b"\0" * 8, "span 8", "w"),
        (
            {"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}},
            b"\0" * 4,
            "past the 4 data bytes",
            "w",
        ),
        ({"w": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}}, b"\0" * 8, "end before", "w"),
        ({"w": {"dtype": "F32", "shape": [2.0], "data_offsets": [0, 8]}}, b"\0" * 8, "shape", "w"),
        ({"w": {"dtype": "F32", "shape": [True], "data_offsets": [0, 4]}}, b"\0" * 4, "shape", "w"),
        ({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, b"\0" * 4, "shape", "w"),
        ({"w": {"dtype": "F32", "shape": [1]}}, b"\0" * 4, "data_offsets", "w"),
        ({"w": {"dtype": 4, "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4, "dtype", "w"),
        ({"w": [1]}, b"", "not a JSON object", "w"),
    ],
)
def test_safetensors_malformed_header(
    tmp_path: Path, header: dict[str, Any] | bytes, data: bytes, match: str, field: str | None
) -> None:
    path = _write(tmp_path / "bad.safetensors", _raw_safetensors(header, data))
    with pytest.raises(CheckpointError, match=match) as exc:
        read_safetensors_header(path)
    _assert_one_line_error(exc, path)
    assert exc.value.field == field


def test_safetensors_metadata_is_skipped(tmp_path: Path) -> None:
    header = {
        "__metadata__": {"format": "pt"},
        "w": {"dtype": "I16", "shape": [2, 2], "data_offsets": [0, 8]},
    }
    path = _write(tmp_path / "m.safetensors", _raw_safetensors(header, b"\0" * 8))
    assert read_safetensors_header(path) == [TensorInfo("w", "I16", (2, 2), 8)]


# -------------------------------------------------------------------------------------------------- GGUF


def test_ggml_table_matches_gguf() -> None:
    expected = {int(t): (t.name, *GGML_QUANT_SIZES[t]) for t in GGMLQuantizationType if t in GGML_QUANT_SIZES}
    assert expected == GGML_TYPES


def _check_against_reader(path: Path, written: list[int]) -> CheckpointBytes:
    ours = read_gguf_tensors(path)
    theirs = gguf.GGUFReader(path).tensors
    assert [t.name for t in ours] == [t.name for t in theirs]
    for mine, ref, nbytes in zip(ours, theirs, written, strict=True):
        assert mine.nbytes == nbytes == int(ref.n_bytes)
        assert mine.dtype == ref.tensor_type.name
        # GGUFReader reports ggml's innermost-first order.
        assert mine.shape == tuple(int(d) for d in reversed(ref.shape))
    ckpt = find_checkpoint(path)
    assert ckpt is not None
    assert ckpt.kind == "gguf"
    assert ckpt.total_bytes == sum(written)
    return ckpt


def test_gguf_tensors(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    written = _write_gguf(path)
    ckpt = _check_against_reader(path, written)
    tensors = {t.name: t for t in ckpt.tensors}
    assert tensors["tok_embd.weight"] == TensorInfo("tok_embd.weight", "F32", (4, 64), 4 * 64 * 4)
    assert tensors["output_norm.weight"] == TensorInfo("output_norm.weight", "F16", (96,), 192)
    assert tensors["blk.0.attn_q.weight"] == TensorInfo("blk.0.attn_q.weight", "Q8_0", (3, 64), 3 * 2 * 34)
    assert tensors["blk.0.ffn_up.weight"] == TensorInfo("blk.0.ffn_up.weight", "Q4_K", (2, 512), 2 * 2 * 144)
    assert ckpt.bytes_by_dtype == {"F32": 1024, "Q4_K": 576, "Q8_0": 204, "F16": 192}
    assert ckpt.numel == 256 + 96 + 192 + 1024
    assert find_checkpoint(tmp_path) == ckpt


def test_gguf_big_endian_and_custom_alignment(tmp_path: Path) -> None:
    path = tmp_path / "be.gguf"
    written = _write_gguf(path, endianess=gguf.GGUFEndian.BIG, alignment=256)
    ckpt = find_checkpoint(path)
    assert ckpt is not None
    assert ckpt.total_bytes == sum(written)
    path = tmp_path / "al.gguf"
    _check_against_reader(path, _write_gguf(path, alignment=256))


def test_gguf_large_vocabulary_is_quick(tmp_path: Path) -> None:
    path = tmp_path / "vocab.gguf"
    _write(
        path,
        _raw_gguf(
            [("w", [32], 0, 0)],
            kvs=_gguf_string("tokenizer.ggml.tokens")
            + struct.pack("<IIQ", 9, 8, 150_000)
            + b"".join(_gguf_string(f"token_{i}") for i in range(150_000)),
            kv_count=1,
            data_len=128,
        ),
    )
    start = time.perf_counter()
    assert read_gguf_tensors(path) == [TensorInfo("w", "F32", (32,), 128)]
    assert time.perf_counter() - start < 2.0


def test_gguf_split_parts(tmp_path: Path) -> None:
    w = gguf.GGUFWriter(tmp_path / "model.gguf", "llama", split_max_tensors=1)
    arrays: list[np.ndarray[Any, Any]] = [
        np.zeros((2, 32), dtype=np.float32),
        np.zeros(64, dtype=np.float16),
        np.zeros(8, dtype=np.float32),
    ]
    for i, a in enumerate(arrays):
        w.add_tensor(f"t{i}", a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    parts = [tmp_path / f"model-{i:05d}-of-00003.gguf" for i in (1, 2, 3)]
    assert all(p.is_file() for p in parts)
    ckpt = find_checkpoint(tmp_path)
    assert ckpt is not None
    assert ckpt.files == tuple(str(p) for p in parts)
    assert ckpt.total_bytes == sum(a.nbytes for a in arrays)
    assert find_checkpoint(parts[1]) == ckpt
    parts[2].unlink()
    with pytest.raises(CheckpointError, match="missing 1 of 3"):
        find_checkpoint(parts[0])
    with pytest.raises(CheckpointError, match="missing 1 of 3"):
        find_checkpoint(tmp_path)


def test_several_unrelated_gguf_files(tmp_path: Path) -> None:
    _write_gguf(tmp_path / "model-Q4_K_M.gguf", tokens=10)
    _write_gguf(tmp_path / "mmproj.gguf", tokens=10)
    with pytest.raises(CheckpointError, match="name the one file") as exc:
        find_checkpoint(tmp_path)
    _assert_one_line_error(exc, tmp_path)
    ckpt = find_checkpoint(tmp_path / "mmproj.gguf")
    assert ckpt is not None
    assert ckpt.files == (str(tmp_path / "mmproj.gguf"),)


@pytest.mark.parametrize(
    ("raw", "match", "field"),
    [
        (b"GGU", "bad magic", None),
        (b"", "bad magic", None),
        (_raw_gguf([], magic=b"GGML"), "bad magic", None),
        (_raw_gguf([], version=1), "unsupported GGUF version 1", "version"),
        (_raw_gguf([], version=99), "unsupported GGUF version 99", "version"),
        (_raw_gguf([("w", [32], 99, 0)], data_len=128), "unknown GGML type id 99", "w"),
        (_raw_gguf([("w", [31, 2], 8, 0)], data_len=256), "block size 32", "w"),
        (_raw_gguf([("w", [256, 4], 12, 0)], data_len=575), "truncated", "w"),
        (_raw_gguf([("w", [32], 0, 0)])[:30], "truncated", None),
        (_raw_gguf([], kvs=_gguf_string("k") + struct.pack("<I", 13), kv_count=1), "value type 13", "k"),
        (
            _raw_gguf([], kvs=_gguf_string("k") + struct.pack("<IIQ", 9, 42, 1), kv_count=1),
            "element type 42",
            "k",
        ),
        (
            _raw_gguf([], kvs=_gguf_string("k") + struct.pack("<IIQ", 9, 8, 1 << 60), kv_count=1),
            "truncated",
            None,
        ),
        (
            _raw_gguf([], kvs=_gguf_string("general.alignment") + struct.pack("<II", 4, 24), kv_count=1),
            "power of two",
            "general.alignment",
        ),
        (_raw_gguf([(b"\xff\xfe", [1], 0, 0)], data_len=32), "UTF-8", None),
    ],
)
def test_gguf_malformed(tmp_path: Path, raw: bytes, match: str, field: str | None) -> None:
    path = _write(tmp_path / "bad.gguf", raw)
    with pytest.raises(CheckpointError, match=match) as exc:
        read_gguf_tensors(path)
    _assert_one_line_error(exc, path)
    assert exc.value.field == field


def test_gguf_truncated_tensor_table(tmp_path: Path, gguf_file: Path) -> None:
    raw = gguf_file.read_bytes()
    # Cut inside the last tensor's info record.
    cut = raw.index(b"blk.0.ffn_up.weight") + 10
    path = _write(tmp_path / "cut.gguf", raw[:cut])
    with pytest.raises(CheckpointError, match="truncated") as exc:
        find_checkpoint(path)
    _assert_one_line_error(exc, path)


def test_gguf_nested_arrays_are_skipped(tmp_path: Path) -> None:
    inner = struct.pack("<IQ", 4, 2) + struct.pack("<II", 1, 2)
    kvs = _gguf_string("nested") + struct.pack("<IIQ", 9, 9, 2) + inner * 2
    path = _write(tmp_path / "n.gguf", _raw_gguf([("w", [4], 1, 0)], kvs=kvs, kv_count=1, data_len=32))
    assert read_gguf_tensors(path) == [TensorInfo("w", "F16", (4,), 8)]
    deep = _gguf_string("deep") + struct.pack("<IIQ", 9, 9, 1) * 40
    path = _write(tmp_path / "d.gguf", _raw_gguf([], kvs=deep, kv_count=1))
    with pytest.raises(CheckpointError, match="nested"):
        read_gguf_tensors(path)


# ------------------------------------------------------------------------------------ never a traceback


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


def _survives(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    try:
        find_checkpoint(path)
    except CheckpointError as e:
        assert "\n" not in str(e)
        assert str(path) in str(e)


_FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@_FUZZ
@given(cut=st.integers(min_value=0, max_value=10_000), data=st.data())
def test_truncated_files_only_raise_checkpoint_error(
    scratch: Path, safetensors_file: Path, gguf_file: Path, cut: int, data: st.DataObject
) -> None:
    st_raw = safetensors_file.read_bytes()
    path = scratch / "t.safetensors"
    path.write_bytes(st_raw[: cut % len(st_raw)])
    with pytest.raises(CheckpointError):
        find_checkpoint(path)
    g_raw = gguf_file.read_bytes()
    n = data.draw(st.integers(min_value=0, max_value=len(g_raw) - 1))
    _survives(scratch / "t.gguf", g_raw[:n])


@_FUZZ
@given(
    which=st.sampled_from(["safetensors", "gguf"]),
    edits=st.lists(st.tuples(st.integers(min_value=0), st.binary(min_size=1, max_size=8)), max_size=4),
)
def test_corrupted_files_only_raise_checkpoint_error(
    scratch: Path, safetensors_file: Path, gguf_file: Path, which: str, edits: list[tuple[int, bytes]]
) -> None:
    source = safetensors_file if which == "safetensors" else gguf_file
    raw = bytearray(source.read_bytes())
    # Bias edits toward the header, where they matter.
    limit = min(len(raw), 600)
    for pos, chunk in edits:
        at = pos % limit
        raw[at : at + len(chunk)] = chunk
    _survives(scratch / f"c.{which}", bytes(raw))


@_FUZZ
@given(
    blob=st.binary(max_size=300),
    magic=st.sampled_from([b"", b"GGUF\x03\x00\x00\x00", b"GGUF\x02\x00\x00\x00"]),
)
def test_random_bytes_only_raise_checkpoint_error(scratch: Path, blob: bytes, magic: bytes) -> None:
    _survives(scratch / "r.gguf", magic + blob)
    _survives(scratch / "r.safetensors", blob)


def test_no_array_libraries_imported() -> None:
    code = (
        "import sys, launcher.model.checkpoint; "
        "bad = {'numpy', 'torch', 'gguf', 'safetensors'} & set(sys.modules); "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
