"""safetensors reader: strict header parse (u64 length + JSON), tensors as zero-copy memmap views.

Owns single files and sharded sets (`*.safetensors.index.json`). No maths here; never
copies tensor bytes. Bad input raises FormatError/UnsupportedError naming the tensor.
"""

from __future__ import annotations

import json
import os
import pathlib
import struct
from typing import Any

import numpy as np

from modelc.errors import FormatError, UnsupportedError
from modelc.ir import DataType, Model, TensorData

MAX_HEADER_BYTES = 100 * 1024 * 1024

# safetensors dtype names -> IR types (safetensors spells BOOL/U8/I8... the same way).
_DTYPES: dict[str, DataType] = {
    "F64": DataType.F64,
    "F32": DataType.F32,
    "F16": DataType.F16,
    "BF16": DataType.BF16,
    "I64": DataType.I64,
    "I32": DataType.I32,
    "I16": DataType.I16,
    "I8": DataType.I8,
    "U8": DataType.U8,
    "BOOL": DataType.BOOL,
}


def read_header(
    path: str | os.PathLike[str], *, base: int = 0, length: int | None = None
) -> tuple[dict[str, Any], int, int]:
    """Parse and sanity-check the header of the safetensors blob at file bytes [base, base+length).

    Returns (header dict, data start offset relative to base, blob size).
    """
    p = pathlib.Path(path)
    try:
        size = p.stat().st_size - base if length is None else length
        with open(p, "rb") as f:
            f.seek(base)
            head = f.read(8)
            if len(head) < 8 or size < 8:
                raise FormatError(f"{p.name}: not a safetensors file (shorter than 8 bytes)")
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER_BYTES or n + 8 > size:
                raise FormatError(f"{p.name}: safetensors header length {n} is not sane for a {size}-byte file")
            raw = f.read(n)
    except OSError as e:
        raise FormatError(f"{p}: cannot read: {e.strerror or e}") from None
    try:
        header = json.loads(raw, object_pairs_hook=_no_duplicates)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise FormatError(f"{p.name}: safetensors header is not valid JSON ({e})") from None
    except _DuplicateKey as e:
        raise FormatError(f"{p.name}: duplicate tensor name {e.args[0]!r} in safetensors header") from None
    if not isinstance(header, dict):
        raise FormatError(f"{p.name}: safetensors header is not a JSON object")
    return header, 8 + n, size


class _DuplicateKey(Exception):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _DuplicateKey(k)
        out[k] = v
    return out


def _entry(name: str, spec: Any, data_len: int, fname: str) -> tuple[DataType, tuple[int, ...], int, int]:
    """Check one tensor entry: dtype known, shape sane, offsets inside the data and matching the size."""
    if not isinstance(spec, dict):
        raise FormatError(f"{fname}: tensor {name}: header entry is not an object")
    dt_name = spec.get("dtype")
    if not isinstance(dt_name, str):
        raise FormatError(f"{fname}: tensor {name}: missing dtype")
    dtype = _DTYPES.get(dt_name)
    if dtype is None:
        raise UnsupportedError(f"unsupported type {dt_name} in tensor {name}")
    shape = spec.get("shape")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise FormatError(f"{fname}: tensor {name}: bad shape {shape!r}")
    offs = spec.get("data_offsets")
    if (
        not isinstance(offs, list)
        or len(offs) != 2
        or not all(isinstance(o, int) and not isinstance(o, bool) for o in offs)
    ):
        raise FormatError(f"{fname}: tensor {name}: bad data_offsets {offs!r}")
    begin, end = offs
    if not 0 <= begin <= end <= data_len:
        raise FormatError(f"{fname}: tensor {name}: data_offsets {offs} outside the {data_len}-byte data section")
    want = dtype.nbytes(tuple(shape))  # Python ints: a 2^60-byte claim is just a big number, never allocated
    if end - begin != want:
        raise FormatError(f"{fname}: tensor {name}: {end - begin} bytes for shape {shape} {dt_name} (needs {want})")
    return dtype, tuple(shape), begin, end


def read_tensors(
    path: str | os.PathLike[str], *, base: int = 0, length: int | None = None
) -> tuple[dict[str, TensorData], dict[str, str]]:
    """All tensors of one safetensors blob (a whole file by default) as memmap views, plus `__metadata__`."""
    p = pathlib.Path(path)
    header, start, size = read_header(p, base=base, length=length)
    meta = header.pop("__metadata__", None) or {}
    if not isinstance(meta, dict):
        raise FormatError(f"{p.name}: __metadata__ is not an object")
    bad = next((k for k, v in meta.items() if not isinstance(v, str)), None)
    if bad is not None:  # the safetensors library refuses these too (metadata is str -> str)
        raise FormatError(f"{p.name}: __metadata__ value of {bad!r} is a {type(meta[bad]).__name__}, not a string")
    data_len = size - start
    entries = {name: _entry(name, spec, data_len, p.name) for name, spec in header.items()}
    _check_layout(entries, data_len, p.name)
    mm = np.memmap(p, dtype=np.uint8, mode="r") if base + size > 0 else np.zeros(0, np.uint8)
    first = base + start
    tensors = {
        name: TensorData(shape, dtype, mm[first + begin : first + end])
        for name, (dtype, shape, begin, end) in entries.items()
    }
    return tensors, {str(k): str(v) for k, v in meta.items()}


def _check_layout(entries: dict[str, tuple[DataType, tuple[int, ...], int, int]], data_len: int, fname: str) -> None:
    """The tensors tile the data section exactly, as the safetensors library requires: no overlap,
    no hole between two tensors, no unclaimed bytes at the end."""
    spans = sorted((b, e, n) for n, (_, _, b, e) in entries.items() if e > b)
    pos, prev = 0, None
    for b, e, n in spans:
        if b < pos:
            raise FormatError(f"{fname}: tensors {prev} and {n} overlap in the data section")
        if b > pos:
            after = f"after tensor {prev}" if prev else "before the first tensor"
            raise FormatError(f"{fname}: a hole of {b - pos} bytes in the data section {after} (at {pos})")
        pos, prev = e, n
    if pos != data_len:
        raise FormatError(f"{fname}: {data_len - pos} bytes at the end of the data section belong to no tensor")


def read_index(path: str | os.PathLike[str]) -> dict[str, str]:
    """A sharded set's `*.safetensors.index.json`: tensor name -> shard file name."""
    p = pathlib.Path(path)
    try:
        index = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise FormatError(f"{p.name}: cannot read the shard index ({e})") from None
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise FormatError(f"{p.name}: shard index has no weight_map object")
    for shard in set(weight_map.values()):
        if pathlib.Path(shard).name != shard:
            raise FormatError(f"{p.name}: shard name {shard!r} must be a plain file name")
    return weight_map


def read_sharded(index_path: str | os.PathLike[str]) -> tuple[dict[str, TensorData], dict[str, str]]:
    """Every shard named by an index file; a tensor in two shards or missing from its shard is an error."""
    p = pathlib.Path(index_path)
    weight_map = read_index(p)
    tensors: dict[str, TensorData] = {}
    meta: dict[str, str] = {}
    for shard in sorted(set(weight_map.values())):
        shard_path = p.parent / shard
        if not shard_path.is_file():
            raise FormatError(f"{p.name}: shard {shard} is missing")
        part, part_meta = read_tensors(shard_path)
        for name, t in part.items():
            if name in tensors:
                raise FormatError(f"duplicate tensor name {name} in shard {shard}")
            tensors[name] = t
        meta.update(part_meta)
    missing = [n for n in weight_map if n not in tensors]
    if missing:
        raise FormatError(f"{p.name}: tensor {missing[0]} is listed in the index but absent from its shard")
    return tensors, meta


def read_safetensors(path: str | os.PathLike[str], name: str | None = None) -> Model:
    """A Model from one .safetensors file or a `.safetensors.index.json`.

    The architecture is `__metadata__["architecture"]` when present, else "" (pack --arch sets it);
    a file beside a config.json gets the folder's config through detect.read_model.
    """
    p = pathlib.Path(path)
    if p.name.endswith(".index.json"):
        tensors, meta = read_sharded(p)
        stem = p.name.removesuffix(".safetensors.index.json").removesuffix(".index.json")
    else:
        tensors, meta = read_tensors(p)
        stem = p.stem
    return Model(
        name=name or stem,
        architecture=meta.get("architecture", ""),  # a raw file knows its architecture only if it says so
        tensors=tensors,
        metadata=dict(meta),
        source_format="safetensors",
        naming="hf",
    )
