"""GGUF container parser: header key/values and tensor infos, every read bounds-checked.

NOTE: we parse the header ourselves instead of using `gguf.GGUFReader`: the reader makes
one numpy view per array element, which took ~40 s on a 128k-token vocabulary here; this
parser takes well under a second and refuses hostile counts/lengths before looping.
Tensor bytes are not touched here: `GGUFFile.tensor_infos` gives absolute offsets that the
caller maps (gguf.py). No maths, no dequantization.
"""

from __future__ import annotations

import mmap
import os
import pathlib
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from modelc.errors import FormatError, UnsupportedError

GGUF_MAGIC = b"GGUF"
MAX_DIMS = 8

# GGUF value type ids -> (struct code, size); 8 = string, 9 = array.
_SCALARS: dict[int, tuple[str, int]] = {
    0: ("B", 1),
    1: ("b", 1),
    2: ("H", 2),
    3: ("h", 2),
    4: ("I", 4),
    5: ("i", 4),
    6: ("f", 4),
    7: ("?", 1),
    10: ("Q", 8),
    11: ("q", 8),
    12: ("d", 8),
}
_NP: dict[int, str] = {
    0: "u1",
    1: "i1",
    2: "<u2",
    3: "<i2",
    4: "<u4",
    5: "<i4",
    6: "<f4",
    7: "?",
    10: "<u8",
    11: "<i8",
    12: "<f8",
}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """One tensor as the GGUF header lists it. dims are GGUF order (fastest first); offset is absolute."""

    name: str
    dims: tuple[int, ...]
    ggml_type: int
    offset: int


@dataclass(slots=True)
class GGUFFile:
    """A parsed GGUF header. Arrays of numbers are numpy arrays, arrays of strings are lists."""

    path: pathlib.Path
    version: int
    fields: dict[str, Any]
    tensor_infos: list[TensorInfo]
    data_offset: int
    alignment: int
    file_size: int


class _Cursor:
    """Bounds-checked little-endian reads over a buffer."""

    def __init__(self, buf: Any, size: int, fname: str) -> None:
        self.buf, self.size, self.pos, self.fname = buf, size, 0, fname

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.size:
            raise FormatError(f"{self.fname}: truncated GGUF file while reading {what}")

    def scalar(self, code: str, size: int, what: str) -> Any:
        self.need(size, what)
        (v,) = struct.unpack_from("<" + code, self.buf, self.pos)
        self.pos += size
        return v

    def u32(self, what: str) -> int:
        return self.scalar("I", 4, what)

    def u64(self, what: str) -> int:
        return self.scalar("Q", 8, what)

    def raw_string(self, what: str) -> bytes:
        n = self.u64(what)
        self.need(n, what)
        s = self.buf[self.pos : self.pos + n]
        self.pos += n
        return bytes(s)

    def string(self, what: str) -> str:
        return self.raw_string(what).decode("utf-8", errors="replace")


_U64 = struct.Struct("<Q")


def _string_array(cur: _Cursor, count: int, key: str) -> list[str]:
    """`count` length-prefixed strings; the hot loop of a 100k+ token vocabulary, so kept tight."""
    buf, pos, size, unpack = cur.buf, cur.pos, cur.size, _U64.unpack_from
    out: list[str] = []
    append = out.append
    for _ in range(count):
        if pos + 8 > size:
            raise FormatError(f"{cur.fname}: truncated GGUF file while reading array {key}")
        end = pos + 8 + unpack(buf, pos)[0]
        if end > size:
            raise FormatError(f"{cur.fname}: truncated GGUF file while reading array {key}")
        append(buf[pos + 8 : end].decode("utf-8", errors="replace"))  # mmap slices are bytes
        pos = end
    cur.pos = pos
    return out


MAX_ARRAY_DEPTH = 8  # arrays of arrays: real files nest one level; deeper is malformed (and recursion)


def _value(cur: _Cursor, vtype: int, key: str, depth: int = 0) -> Any:
    if vtype in _SCALARS:
        code, size = _SCALARS[vtype]
        return cur.scalar(code, size, f"value of {key}")
    if vtype == _STRING:
        return cur.string(f"value of {key}")
    if vtype == _ARRAY:
        itype = cur.u32(f"array type of {key}")
        count = cur.u64(f"array length of {key}")
        if itype in _SCALARS:
            size = _SCALARS[itype][1]
            cur.need(count * size, f"array {key} ({count} items)")
            arr = np.frombuffer(cur.buf, dtype=_NP[itype], count=count, offset=cur.pos).copy()
            cur.pos += count * size
            return arr
        if itype == _STRING:
            cur.need(count * 8, f"array {key} ({count} strings)")  # each string has at least its u64 length
            return _string_array(cur, count, key)
        if itype == _ARRAY:
            if depth >= MAX_ARRAY_DEPTH:
                raise FormatError(f"{cur.fname}: GGUF array {key} is nested more than {MAX_ARRAY_DEPTH} deep")
            cur.need(count * 12, f"array {key} ({count} nested arrays)")
            return [_value(cur, _ARRAY, key, depth + 1) for _ in range(count)]
        raise FormatError(f"{cur.fname}: unknown GGUF array element type {itype} in {key}")
    raise FormatError(f"{cur.fname}: unknown GGUF value type {vtype} in {key}")


def _tensor_info(cur: _Cursor, index: int) -> tuple[str, tuple[int, ...], int, int]:
    name = cur.string(f"name of tensor {index}")
    n_dims = cur.u32(f"dims of tensor {name}")
    if n_dims > MAX_DIMS:
        raise FormatError(f"{cur.fname}: tensor {name} has {n_dims} dimensions (at most {MAX_DIMS})")
    dims = tuple(cur.u64(f"dims of tensor {name}") for _ in range(n_dims))
    ggml_type = cur.u32(f"type of tensor {name}")
    offset = cur.u64(f"offset of tensor {name}")
    return name, dims, ggml_type, offset


def parse_gguf(path: str | os.PathLike[str]) -> GGUFFile:
    """Parse the header of a GGUF v2/v3 file; raises FormatError on anything malformed."""
    p = pathlib.Path(path)
    try:
        with open(p, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < 24:
                raise FormatError(f"{p.name}: not a GGUF file (only {size} bytes)")
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                return _parse(mm, size, p)
    except OSError as e:
        raise FormatError(f"{p}: cannot read: {e.strerror or e}") from None


def _parse(buf: Any, size: int, p: pathlib.Path) -> GGUFFile:
    cur = _Cursor(buf, size, p.name)
    if bytes(buf[:4]) != GGUF_MAGIC:
        raise FormatError(f"{p.name}: not a GGUF file (bad magic {bytes(buf[:4])!r})")
    cur.pos = 4
    version = cur.u32("version")
    if version in (2 << 24, 3 << 24):
        raise UnsupportedError(f"{p.name}: big-endian GGUF files are not supported")
    if version not in (2, 3):
        raise UnsupportedError(f"{p.name}: GGUF version {version} is not supported (2 or 3)")
    n_tensors = cur.u64("tensor count")
    n_kv = cur.u64("key/value count")
    # Each key/value needs >= 8+4 bytes and each tensor info >= 8+4+4+8: refuse absurd counts up front.
    cur.need(n_kv * 12 + n_tensors * 24, "the header")
    fields: dict[str, Any] = {}
    for i in range(n_kv):
        key = cur.string(f"key {i}")
        if key in fields:
            raise FormatError(f"{p.name}: duplicate GGUF key {key}")
        fields[key] = _value(cur, cur.u32(f"type of {key}"), key)
    raw = [_tensor_info(cur, i) for i in range(n_tensors)]
    alignment = fields.get("general.alignment", 32)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise FormatError(f"{p.name}: general.alignment {alignment!r} is not a power of two")
    data_offset = (cur.pos + alignment - 1) // alignment * alignment
    infos: list[TensorInfo] = []
    seen: set[str] = set()
    for i, (name, dims, ggml_type, offset) in enumerate(raw):
        if not name:  # an artifact cannot hold it (its reader refuses a nameless row): refuse it before packing
            raise FormatError(f"{p.name}: tensor {i} has an empty name")
        if name in seen:
            raise FormatError(f"{p.name}: duplicate tensor name {name}")
        seen.add(name)
        if offset % alignment:  # the spec: every tensor's data starts on a general.alignment boundary
            raise FormatError(f"{p.name}: tensor {name} offset {offset} is not a multiple of the alignment {alignment}")
        infos.append(TensorInfo(name, dims, ggml_type, data_offset + offset))
    return GGUFFile(p, version, fields, infos, data_offset, alignment, size)
