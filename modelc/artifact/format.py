"""The .modelc on-disk layout: preamble, header JSON, tensor table entries; parsing and bounds checks.

    magic b"MODELC\\0\\0" | u32 version | u64 header_len | header JSON (header_len bytes) | pad | data

Every tensor starts at an offset (from the start of the artifact) that is a multiple of 64.
No I/O beyond parsing bytes handed in (and is_artifact's 8-byte peek); reader.py and writer.py do the files.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from typing import Any

from modelc.artifact.digest import DEFAULT_DIGEST, DIGEST_KINDS
from modelc.errors import ArtifactError, ModelcError
from modelc.ir import DataType

MAGIC = b"MODELC\0\0"
FORMAT_VERSION = 1
ALIGN = 64
PREAMBLE = struct.Struct("<8sIQ")  # magic, version, header_len
PREAMBLE_SIZE = PREAMBLE.size  # 20
MAX_HEADER_BYTES = 1 << 31  # a header over 2 GiB is corrupt, not a model
COMPRESSIONS = ("none", "zstd")


def is_artifact(path: str | os.PathLike[str]) -> bool:
    """True when `path` is a file that starts with the .modelc magic (the one check every caller uses)."""
    try:
        with open(path, "rb") as f:
            return f.read(len(MAGIC)) == MAGIC
    except OSError:  # a folder, a missing file, no permission
        return False


def align_up(n: int, align: int = ALIGN) -> int:
    return (n + align - 1) // align * align


@dataclass(frozen=True, slots=True)
class TensorEntry:
    """One row of the header's tensor table. offset is from the artifact's first byte.

    digest: hex digest of the stored bytes, of kind digest_kind ("blake3", or "sha256" in older files)."""

    name: str
    dtype: DataType
    shape: tuple[int, ...]
    offset: int
    nbytes: int
    compression: str
    stored_nbytes: int
    digest: str
    digest_kind: str = DEFAULT_DIGEST

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "dtype": self.dtype.value,
            "shape": list(self.shape),
            "offset": self.offset,
            "nbytes": self.nbytes,
            "compression": self.compression,
            "stored_nbytes": self.stored_nbytes,
            self.digest_kind: self.digest,
        }


def pack_preamble(header_len: int, version: int = FORMAT_VERSION) -> bytes:
    return PREAMBLE.pack(MAGIC, version, header_len)


def parse_preamble(raw: bytes, size: int, where: str) -> int:
    """Check magic, version and header bounds; return header_len. `size` is the artifact's byte length."""
    if len(raw) < PREAMBLE_SIZE:
        raise ArtifactError(f"{where}: too short to be a .modelc file ({size} bytes)")
    magic, version, header_len = PREAMBLE.unpack(raw[:PREAMBLE_SIZE])
    if magic != MAGIC:
        raise ArtifactError(f"{where}: not a .modelc file (bad magic)")  # never quote a foreign file's bytes
    if version != FORMAT_VERSION:
        raise ArtifactError(f"{where}: unsupported .modelc version {version}; this modelc reads {FORMAT_VERSION}")
    if header_len == 0 or header_len > MAX_HEADER_BYTES or PREAMBLE_SIZE + header_len > size:
        raise ArtifactError(f"{where}: header length {header_len} runs past the end of the file ({size} bytes)")
    return header_len


def parse_header(raw: bytes, where: str) -> dict[str, Any]:
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise ArtifactError(f"{where}: header is not valid JSON ({e})") from None
    if not isinstance(header, dict) or not isinstance(header.get("tensors"), list):
        raise ArtifactError(f"{where}: header has no tensor table")
    return header


def parse_entries(header: dict[str, Any], size: int, header_end: int, where: str) -> list[TensorEntry]:
    """Validate the tensor table against the artifact size: types, bounds, alignment, no duplicates.

    header_end: first byte after the header JSON; no tensor may start before it.
    """
    seen: set[str] = set()
    entries = []
    for i, raw in enumerate(header["tensors"]):
        entry = _parse_entry(raw, i, where)
        if entry.name in seen:
            raise ArtifactError(f"{where}: duplicate tensor {entry.name}")
        seen.add(entry.name)
        if entry.offset % ALIGN:
            raise ArtifactError(f"{where}: tensor {entry.name} offset {entry.offset} is not {ALIGN}-byte aligned")
        if entry.offset < header_end or entry.offset + entry.stored_nbytes > size:
            raise ArtifactError(
                f"{where}: tensor {entry.name} bytes [{entry.offset}, {entry.offset + entry.stored_nbytes}) "
                f"lie outside the data region (file is {size} bytes)"
            )
        entries.append(entry)
    return entries


def _parse_entry(raw: Any, i: int, where: str) -> TensorEntry:
    if not isinstance(raw, dict):
        raise ArtifactError(f"{where}: tensor table row {i} is not an object")
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise ArtifactError(f"{where}: tensor table row {i} has no name")
    try:
        dtype = DataType.parse(str(raw["dtype"]), tensor=name)
        shape = tuple(raw["shape"])
        if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise ArtifactError(f"{where}: tensor {name} has a bad shape {raw['shape']}")
        offset, nbytes, stored = (raw[k] for k in ("offset", "nbytes", "stored_nbytes"))
        compression = raw["compression"]
        kind = next((k for k in DIGEST_KINDS if k in raw), DIGEST_KINDS[0])
        digest = raw[kind]
    except KeyError as e:
        raise ArtifactError(f"{where}: tensor {name} lacks field {e.args[0]}") from None
    except ModelcError as e:
        raise ArtifactError(f"{where}: {e}") from None
    for key, val in (("offset", offset), ("nbytes", nbytes), ("stored_nbytes", stored)):
        if not isinstance(val, int) or isinstance(val, bool) or val < 0:
            raise ArtifactError(f"{where}: tensor {name} has a bad {key} {val!r}")
    if compression not in COMPRESSIONS:
        raise ArtifactError(f"{where}: tensor {name} has unknown compression {compression!r}")
    try:
        want = dtype.nbytes(shape)
    except ModelcError as e:
        raise ArtifactError(f"{where}: tensor {name}: {e}") from None
    if nbytes != want:
        raise ArtifactError(f"{where}: tensor {name} says {nbytes} bytes but {dtype.value}{list(shape)} needs {want}")
    if compression == "none" and stored != nbytes:
        raise ArtifactError(f"{where}: tensor {name} is uncompressed but stores {stored} of {nbytes} bytes")
    if not isinstance(digest, str) or len(digest) != 64:
        raise ArtifactError(f"{where}: tensor {name} has a bad {kind} digest")
    return TensorEntry(name, dtype, shape, offset, nbytes, compression, stored, digest.lower(), kind)
