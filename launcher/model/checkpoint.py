"""Exact weight bytes of a checkpoint on disk, read from safetensors and GGUF headers only.

Tensor data is never read: a safetensors file is sized from its JSON header, a GGUF file from its
tensor-info table. Pure standard library, so that sizing a checkpoint pulls in no array library.
"""

from __future__ import annotations

import json
import os
import re
import struct
from dataclasses import field
from pathlib import Path
from typing import BinaryIO, Literal

from launcher.common.errors import CheckpointError
from launcher.common.records import dataclass

__all__ = [
    "GGML_TYPES",
    "SAFETENSORS_DTYPE_BITS",
    "CheckpointBytes",
    "TensorInfo",
    "find_checkpoint",
    "read_gguf_tensors",
    "read_safetensors_header",
]

# Bits per element, so that the sub-byte formats (F4, F6) use the same arithmetic as the rest.
SAFETENSORS_DTYPE_BITS: dict[str, int] = {
    "BOOL": 8,
    "U8": 8,
    "I8": 8,
    "F8_E4M3": 8,
    "F8_E5M2": 8,
    "F8_E4M3FNUZ": 8,
    "F8_E5M2FNUZ": 8,
    "F8_E8M0": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "I64": 64,
    "U64": 64,
    "F64": 64,
    "C64": 64,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
}

# ggml type id -> (name, elements per block, bytes per block); ggml's type_traits / gguf's GGML_QUANT_SIZES.
# Ids 4, 5 (Q4_2, Q4_3) and 31-33, 36-38 (Q4_0_4_4 and friends) were removed from ggml; files using
# them cannot be loaded by current llama.cpp either.
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 18),
    3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34),
    9: ("Q8_1", 32, 40),
    10: ("Q2_K", 256, 84),
    11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210),
    15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66),
    17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18),
    21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82),
    23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1),
    25: ("I16", 1, 2),
    26: ("I32", 1, 4),
    27: ("I64", 1, 8),
    28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2),
    34: ("TQ1_0", 256, 54),
    35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17),
    40: ("NVFP4", 64, 36),
    41: ("Q1_0", 128, 18),
}

# The safetensors library refuses headers larger than this.
_SAFETENSORS_MAX_HEADER = 100_000_000

_GGUF_MAGIC = b"GGUF"
_GGUF_VERSIONS = (2, 3)
_GGUF_DEFAULT_ALIGNMENT = 32
_GGUF_STRING = 8
_GGUF_ARRAY = 9
# Metadata value type -> size in bytes, for the fixed-size types.
_GGUF_SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_GGUF_UINT32 = 4
_GGUF_MAX_ARRAY_NESTING = 16
_GGUF_SPLIT = re.compile(r"^(?P<prefix>.+)-(?P<part>\d{5})-of-(?P<count>\d{5})\.gguf$")
_INDEX_NAME = "model.safetensors.index.json"
_INDEX_SUFFIX = ".safetensors.index.json"


@dataclass(frozen=True)
class TensorInfo:
    """One tensor as its file header describes it.

    `dtype` is the safetensors dtype string ("BF16", "F8_E4M3", ...) or the GGML type name ("Q4_K", ...);
    `shape` is row-major, outermost dimension first, for both formats; `nbytes` is exactly what the
    tensor's data occupies in the file.
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int

    @property
    def numel(self) -> int:
        """Number of elements (1 for a scalar)."""
        return _prod(self.shape)


@dataclass(frozen=True)
class CheckpointBytes:
    """The weights of a whole checkpoint (one file, or every shard / split part of it).

    When only a sharded index's `metadata.total_size` is known (the shards are not on disk),
    `tensors` is empty, `bytes_by_dtype` is empty, `numel` is 0 and `files` holds the index path.
    """

    kind: Literal["safetensors", "gguf"]
    files: tuple[str, ...]
    tensors: tuple[TensorInfo, ...]
    total_bytes: int
    bytes_by_dtype: dict[str, int] = field(hash=False)
    numel: int

    def to_json(self) -> dict[str, object]:
        """A JSON-ready summary, without the per-tensor list."""
        return {
            "kind": self.kind,
            "files": list(self.files),
            "tensor_count": len(self.tensors),
            "total_bytes": self.total_bytes,
            "bytes_by_dtype": dict(self.bytes_by_dtype),
            "numel": self.numel,
        }


def _prod(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _summarize(kind: Literal["safetensors", "gguf"], files: list[str], tensors: list[TensorInfo]) -> CheckpointBytes:
    by_dtype: dict[str, int] = {}
    for t in tensors:
        by_dtype[t.dtype] = by_dtype.get(t.dtype, 0) + t.nbytes
    ordered = dict(sorted(by_dtype.items(), key=lambda kv: (-kv[1], kv[0])))
    return CheckpointBytes(
        kind=kind,
        files=tuple(files),
        tensors=tuple(tensors),
        total_bytes=sum(t.nbytes for t in tensors),
        bytes_by_dtype=ordered,
        numel=sum(t.numel for t in tensors),
    )


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


# --------------------------------------------------------------------------------------------- safetensors


def read_safetensors_header(path: str | Path) -> list[TensorInfo]:
    """The tensors of one .safetensors file, in header order, from its JSON header alone.

    Each tensor's size is computed from dtype and shape and must agree with its `data_offsets`, which
    must lie inside the file. Raises CheckpointError for anything malformed or unreadable.
    """
    source = str(path)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            prefix = f.read(8)
            if len(prefix) < 8:
                raise CheckpointError(f"truncated: {size} bytes, shorter than the 8-byte header length", source=source)
            (header_len,) = struct.unpack("<Q", prefix)
            if header_len > size - 8:
                raise CheckpointError(
                    f"header length {header_len} is larger than the file ({size} bytes): truncated or not safetensors",
                    source=source,
                )
            if header_len > _SAFETENSORS_MAX_HEADER:
                raise CheckpointError(
                    f"header length {header_len} exceeds the safetensors limit of {_SAFETENSORS_MAX_HEADER} bytes",
                    source=source,
                )
            raw = f.read(header_len)
    except OSError as e:
        raise CheckpointError(f"cannot read: {e.strerror or e}", source=source) from e
    if len(raw) != header_len:
        raise CheckpointError("truncated while reading the header", source=source)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise CheckpointError(f"header is not valid JSON: {e}", source=source) from e
    if not isinstance(header, dict):
        raise CheckpointError("header is not a JSON object", source=source)
    data_size = size - 8 - header_len
    return [
        _safetensors_tensor(source, name, entry, data_size) for name, entry in header.items() if name != "__metadata__"
    ]


def _safetensors_tensor(source: str, name: str, entry: object, data_size: int) -> TensorInfo:
    if not isinstance(entry, dict):
        raise CheckpointError("tensor entry is not a JSON object", source=source, field=name)
    dtype = entry.get("dtype")
    shape = entry.get("shape")
    offsets = entry.get("data_offsets")
    if not isinstance(dtype, str):
        raise CheckpointError("missing or non-string dtype", source=source, field=name)
    bits = SAFETENSORS_DTYPE_BITS.get(dtype)
    if bits is None:
        raise CheckpointError(f"unknown dtype {dtype!r}", source=source, field=name)
    if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
        raise CheckpointError("shape is not a list of non-negative integers", source=source, field=name)
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_count(o) for o in offsets)):
        raise CheckpointError("data_offsets is not a pair of non-negative integers", source=source, field=name)
    begin, end = offsets
    if end < begin:
        raise CheckpointError(f"data_offsets [{begin}, {end}] end before they begin", source=source, field=name)
    if end > data_size:
        raise CheckpointError(
            f"data_offsets end at {end}, past the {data_size} data bytes in the file: truncated",
            source=source,
            field=name,
        )
    dims = tuple(shape)
    numel = _prod(dims)
    if numel * bits % 8:
        raise CheckpointError(
            f"{numel} elements of {dtype} ({bits} bits each) is not a whole number of bytes",
            source=source,
            field=name,
        )
    nbytes = numel * bits // 8
    if nbytes != end - begin:
        raise CheckpointError(
            f"{dtype} {list(dims)} is {nbytes} bytes but data_offsets [{begin}, {end}] span {end - begin}",
            source=source,
            field=name,
        )
    return TensorInfo(name=name, dtype=dtype, shape=dims, nbytes=nbytes)


# -------------------------------------------------------------------------------------------------- GGUF


class _Cursor:
    """Sequential little/big-endian reads over a file, refilled in large chunks; skips seek."""

    _CHUNK = 1 << 20

    def __init__(self, f: BinaryIO, size: int, source: str) -> None:
        self._f = f
        self._size = size
        self.source = source
        self._buf = b""
        self._pos = 0
        self._base = 0
        self.endian = "<"

    @property
    def offset(self) -> int:
        return self._base + self._pos

    def _truncated(self, what: str, need: int) -> CheckpointError:
        return CheckpointError(
            f"truncated: {what} needs {need} bytes at offset {self.offset}, the file has {self._size}",
            source=self.source,
        )

    def _need(self, n: int, what: str) -> None:
        if self._pos + n <= len(self._buf):
            return
        if self.offset + n > self._size:
            raise self._truncated(what, n)
        rest = self._buf[self._pos :]
        self._base = self.offset
        self._buf = rest + self._f.read(max(n - len(rest), self._CHUNK))
        self._pos = 0
        if len(self._buf) < n:
            raise self._truncated(what, n)

    def take(self, n: int, what: str) -> bytes:
        self._need(n, what)
        out = self._buf[self._pos : self._pos + n]
        self._pos += n
        return out

    def u32(self, what: str) -> int:
        self._need(4, what)
        (v,) = struct.unpack_from(self.endian + "I", self._buf, self._pos)
        self._pos += 4
        return int(v)

    def u64(self, what: str) -> int:
        self._need(8, what)
        (v,) = struct.unpack_from(self.endian + "Q", self._buf, self._pos)
        self._pos += 8
        return int(v)

    def skip(self, n: int, what: str) -> None:
        if self._pos + n <= len(self._buf):
            self._pos += n
            return
        target = self.offset + n
        if target > self._size:
            raise self._truncated(what, n)
        self._f.seek(target)
        self._buf = b""
        self._pos = 0
        self._base = target

    def string(self, what: str) -> bytes:
        return self.take(self.u64(what), what)

    def skip_strings(self, count: int, what: str) -> None:
        """Skip `count` gguf strings (u64 length + bytes); the hot loop of a tokenizer vocabulary."""
        if count * 8 > self._size - self.offset:
            raise self._truncated(what, count * 8)
        fmt = struct.Struct(self.endian + "Q")
        for _ in range(count):
            if self._pos + 8 > len(self._buf):
                self._need(8, what)
            (n,) = fmt.unpack_from(self._buf, self._pos)
            self._pos += 8
            if self._pos + n <= len(self._buf):
                self._pos += n
            else:
                self.skip(n, what)


def _skip_gguf_value(cur: _Cursor, vtype: int, key: str, depth: int = 0) -> None:
    size = _GGUF_SCALAR_SIZES.get(vtype)
    if size is not None:
        cur.skip(size, f"metadata {key!r}")
    elif vtype == _GGUF_STRING:
        cur.skip(cur.u64(f"metadata {key!r}"), f"metadata {key!r}")
    elif vtype == _GGUF_ARRAY:
        if depth >= _GGUF_MAX_ARRAY_NESTING:
            raise CheckpointError("metadata arrays nested too deeply", source=cur.source, field=key)
        etype = cur.u32(f"metadata {key!r}")
        count = cur.u64(f"metadata {key!r}")
        esize = _GGUF_SCALAR_SIZES.get(etype)
        if esize is not None:
            cur.skip(count * esize, f"metadata {key!r}")
        elif etype == _GGUF_STRING:
            cur.skip_strings(count, f"metadata {key!r}")
        elif etype == _GGUF_ARRAY:
            # Every nested array takes at least 12 bytes, so a bogus count fails on truncation quickly.
            for _ in range(count):
                _skip_gguf_value(cur, _GGUF_ARRAY, key, depth + 1)
        else:
            raise CheckpointError(f"unknown metadata array element type {etype}", source=cur.source, field=key)
    else:
        raise CheckpointError(f"unknown metadata value type {vtype}", source=cur.source, field=key)


def read_gguf_tensors(path: str | Path) -> list[TensorInfo]:
    """The tensors of one GGUF file (versions 2 and 3), in table order, from its tensor-info table.

    Metadata is skipped without being decoded. Each tensor's size comes from ggml's block table and
    must lie inside the file's data section. Raises CheckpointError for anything malformed.
    """
    source = str(path)
    try:
        with open(path, "rb", buffering=0) as f:
            size = os.fstat(f.fileno()).st_size
            return _read_gguf(_Cursor(f, size, source), size, source)
    except OSError as e:
        raise CheckpointError(f"cannot read: {e.strerror or e}", source=source) from e


def _read_gguf(cur: _Cursor, size: int, source: str) -> list[TensorInfo]:
    """The tensors of the GGUF file `cur` reads (`size` bytes); CheckpointError for anything malformed."""
    tensor_count, kv_count = _read_gguf_header(cur, size, source)
    alignment = _read_gguf_metadata(cur, kv_count, source)
    tensors: list[TensorInfo] = []
    offsets: list[int] = []
    for _ in range(tensor_count):
        tensor, offset = _read_gguf_tensor_info(cur, source)
        tensors.append(tensor)
        offsets.append(offset)
    _check_gguf_data(tensors, offsets, -(-cur.offset // alignment) * alignment, size, source)
    return tensors


def _read_gguf_header(cur: _Cursor, size: int, source: str) -> tuple[int, int]:
    """Magic and version (the byte order follows the version); the tensor count and the metadata count."""
    magic = cur.take(4, "magic") if size >= 4 else b""
    if magic != _GGUF_MAGIC:
        raise CheckpointError(f"bad magic {magic!r}, expected {_GGUF_MAGIC!r}: not a GGUF file", source=source)
    raw_version = cur.take(4, "version")
    version = struct.unpack("<I", raw_version)[0]
    if version not in _GGUF_VERSIONS:
        swapped = struct.unpack(">I", raw_version)[0]
        if swapped not in _GGUF_VERSIONS:
            raise CheckpointError(
                f"unsupported GGUF version {version} (supported: 2, 3)", source=source, field="version"
            )
        cur.endian = ">"
    tensor_count = cur.u64("tensor_count")
    kv_count = cur.u64("metadata_kv_count")
    return tensor_count, kv_count


def _read_gguf_metadata(cur: _Cursor, kv_count: int, source: str) -> int:
    """Skip the metadata; the data section's alignment (general.alignment, a power of two)."""
    alignment = _GGUF_DEFAULT_ALIGNMENT
    for _ in range(kv_count):
        key = cur.string("metadata key").decode("utf-8", errors="replace")
        vtype = cur.u32(f"metadata {key!r}")
        if key == "general.alignment" and vtype == _GGUF_UINT32:
            alignment = cur.u32(f"metadata {key!r}")
            if alignment == 0 or alignment & (alignment - 1):
                raise CheckpointError(
                    f"alignment {alignment} is not a power of two", source=source, field="general.alignment"
                )
        else:
            _skip_gguf_value(cur, vtype, key)
    return alignment


def _read_gguf_tensor_info(cur: _Cursor, source: str) -> tuple[TensorInfo, int]:
    """One entry of the tensor-info table: the tensor and its offset in the data section."""
    raw_name = cur.string("tensor name")
    try:
        name = raw_name.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CheckpointError(f"tensor name is not UTF-8: {raw_name[:64]!r}", source=source) from e
    n_dims = cur.u32(f"tensor {name!r}")
    dims = [cur.u64(f"tensor {name!r}") for _ in range(n_dims)]
    type_id = cur.u32(f"tensor {name!r}")
    offset = cur.u64(f"tensor {name!r}")
    ggml = GGML_TYPES.get(type_id)
    if ggml is None:
        raise CheckpointError(f"unknown GGML type id {type_id}", source=source, field=name)
    type_name, block, type_size = ggml
    # ggml quantizes along rows: the innermost dimension (listed first) must hold whole blocks.
    if dims and dims[0] % block:
        raise CheckpointError(
            f"{type_name} rows of {dims[0]} elements are not a multiple of its block size {block}",
            source=source,
            field=name,
        )
    numel = _prod(tuple(dims))
    if numel % block:
        raise CheckpointError(
            f"{numel} elements is not a multiple of the {type_name} block size {block}",
            source=source,
            field=name,
        )
    # GGUF lists dimensions innermost first (ggml's ne[0] is the contiguous one); reversed here
    # to the row-major order safetensors and PyTorch use, outermost first.
    tensor = TensorInfo(name=name, dtype=type_name, shape=tuple(reversed(dims)), nbytes=numel // block * type_size)
    return tensor, offset


def _check_gguf_data(tensors: list[TensorInfo], offsets: list[int], data_start: int, size: int, source: str) -> None:
    """Every tensor's data lies inside the file's data section (from `data_start` to the end)."""
    data_size = size - data_start
    for t, offset in zip(tensors, offsets, strict=True):
        if offset + t.nbytes > data_size:
            raise CheckpointError(
                f"data at offset {offset} + {t.nbytes} bytes runs past the {max(data_size, 0)} data bytes "
                "in the file: truncated",
                source=source,
                field=t.name,
            )


# ------------------------------------------------------------------------------------------ find_checkpoint


def find_checkpoint(path: str | Path) -> CheckpointBytes | None:
    """The weights at `path`, from headers only; None when a directory holds no checkpoint.

    `path` may be a .safetensors or .gguf file (a GGUF split part brings in all its parts), a
    `*.safetensors.index.json`, or a directory, searched in this order: `model.safetensors.index.json`
    (its shards; or its `metadata.total_size` when shards are missing), every `*.safetensors`, the
    `*.gguf` file (or one complete set of split parts). Several unrelated GGUF files, a missing path or
    a malformed file raise CheckpointError.
    """
    p = Path(path)
    source = str(path)
    if not p.exists():
        raise CheckpointError("no such file or directory", source=source)
    if p.is_dir():
        return _from_directory(p)
    name = p.name
    if name.endswith(_INDEX_SUFFIX):
        return _from_index(p)
    if name.endswith(".safetensors"):
        return _summarize("safetensors", [source], read_safetensors_header(p))
    if name.endswith(".gguf"):
        return _from_gguf_files(_gguf_split_set(p))
    raise CheckpointError(
        "not a checkpoint: expected a directory, a .safetensors or .gguf file, or a safetensors index",
        source=source,
    )


def _from_directory(d: Path) -> CheckpointBytes | None:
    index = d / _INDEX_NAME
    if index.is_file():
        return _from_index(index)
    shards = sorted(p for p in d.glob("*.safetensors") if p.is_file())
    if shards:
        return _from_safetensors_files(shards)
    ggufs = sorted(p for p in d.glob("*.gguf") if p.is_file())
    if not ggufs:
        return None
    if len(ggufs) == 1:
        return _from_gguf_files(ggufs)
    sets = {_split_key(p) for p in ggufs}
    if len(sets) > 1 or None in sets:
        listed = ", ".join(p.name for p in ggufs[:6]) + (", ..." if len(ggufs) > 6 else "")
        raise CheckpointError(f"{len(ggufs)} unrelated GGUF files ({listed}); name the one file to use", source=str(d))
    return _from_gguf_files(_gguf_split_set(ggufs[0]))


def _from_safetensors_files(files: list[Path]) -> CheckpointBytes:
    tensors: list[TensorInfo] = []
    for f in files:
        tensors.extend(read_safetensors_header(f))
    return _summarize("safetensors", [str(f) for f in files], tensors)


def _from_gguf_files(files: list[Path]) -> CheckpointBytes:
    tensors: list[TensorInfo] = []
    for f in files:
        tensors.extend(read_gguf_tensors(f))
    return _summarize("gguf", [str(f) for f in files], tensors)


def _split_key(p: Path) -> tuple[str, int] | None:
    m = _GGUF_SPLIT.match(p.name)
    return (m["prefix"], int(m["count"])) if m else None


def _gguf_split_set(p: Path) -> list[Path]:
    """All parts of the split GGUF that `p` belongs to (just `p` when it is not a split part)."""
    m = _GGUF_SPLIT.match(p.name)
    if not m:
        return [p]
    count = int(m["count"])
    if count < 1 or int(m["part"]) > count:
        raise CheckpointError(f"split part {m['part']} of {m['count']} makes no sense", source=str(p))
    parts = [p.with_name(f"{m['prefix']}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]
    missing = [q.name for q in parts if not q.is_file()]
    if missing:
        raise CheckpointError(
            f"split GGUF is missing {len(missing)} of {count} parts: {', '.join(missing[:4])}"
            + (", ..." if len(missing) > 4 else ""),
            source=str(p),
        )
    return parts


def _from_index(index: Path) -> CheckpointBytes:
    source = str(index)
    try:
        data = json.loads(index.read_text(encoding="utf-8"))
    except OSError as e:
        raise CheckpointError(f"cannot read: {e.strerror or e}", source=source) from e
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise CheckpointError(f"not valid JSON: {e}", source=source) from e
    if not isinstance(data, dict):
        raise CheckpointError("not a JSON object", source=source)
    weight_map = data.get("weight_map")
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise CheckpointError("weight_map is missing or not an object of file names", source=source, field="weight_map")
    shards = [index.parent / name for name in sorted(set(weight_map.values()))]
    missing = [s.name for s in shards if not s.is_file()]
    if not missing:
        return _from_safetensors_files(shards)
    metadata = data.get("metadata")
    total = metadata.get("total_size") if isinstance(metadata, dict) else None
    if isinstance(total, float) and total.is_integer():
        total = int(total)
    if isinstance(total, int) and not isinstance(total, bool) and total >= 0:
        return CheckpointBytes(
            kind="safetensors", files=(source,), tensors=(), total_bytes=total, bytes_by_dtype={}, numel=0
        )
    raise CheckpointError(
        f"{len(missing)} of {len(shards)} shards are missing ({', '.join(missing[:4])}"
        + (", ..." if len(missing) > 4 else "")
        + ") and metadata.total_size is absent",
        source=source,
    )
