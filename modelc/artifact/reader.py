"""open_artifact: map a .modelc file (or a .modelc stored inside another file) read-only.

Uncompressed tensors are zero-copy uint8 views of one np.memmap; zstd tensors are
decompressed once here, checked against their frame's checksum where it has one (files since
the writer adds it). Every offset and length is checked before any view is made.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from modelc.artifact.digest import HASH_CHUNK_BYTES, new_hasher
from modelc.artifact.format import PREAMBLE_SIZE, TensorEntry, parse_entries, parse_header, parse_preamble
from modelc.errors import ArtifactError, ChecksumError
from modelc.ir import SCALE_SUFFIX, TensorData


class Artifact:
    """A loaded .modelc: Model's attributes plus path, header, file_size, entries."""

    __slots__ = (
        "path",
        "offset",
        "file_size",
        "header",
        "entries",
        "tensors",
        "name",
        "architecture",
        "config",
        "metadata",
        "tokenizer_json",
        "chat_template",
        "special_tokens",
        "generation_config",
        "source_format",
        "naming",
        "_map",
        "__weakref__",
    )

    def __init__(self, path: str, offset: int, size: int, header: dict[str, Any], entries: list[TensorEntry]):
        self.path, self.offset, self.file_size, self.header = path, offset, size, header
        self.entries = {e.name: e for e in entries}
        self.tensors: dict[str, TensorData] = {}
        self.name = str(header.get("name") or "")
        self.architecture = str(header.get("architecture") or "")
        self.config = dict(header.get("config") or {})
        self.metadata = dict(header.get("metadata") or {})
        self.tokenizer_json = header.get("tokenizer")
        self.chat_template = header.get("chat_template")
        self.special_tokens = dict(header.get("special_tokens") or {})
        self.generation_config = dict(header.get("generation_config") or {})
        self.source_format = str((header.get("provenance") or {}).get("source_format") or "")
        self.naming = str(header.get("naming") or "hf")
        self._map: np.ndarray | None = None

    @property
    def provenance(self) -> dict[str, Any]:
        return dict(self.header.get("provenance") or {})

    @property
    def num_params(self) -> int:
        return sum(_count(e.shape) for e in self.entries.values() if not _is_scale(e.name))

    @property
    def total_bytes(self) -> int:
        return sum(e.nbytes for e in self.entries.values())

    def stored_bytes(self, name: str) -> np.ndarray:
        """The tensor's bytes as stored in the file (compressed or not): a zero-copy view."""
        e = self.entries[name]
        assert self._map is not None
        return self._map[e.offset : e.offset + e.stored_nbytes]

    def __repr__(self) -> str:
        return f"Artifact({self.path!r}, name={self.name!r}, architecture={self.architecture!r}, tensors={len(self.entries)})"


def open_artifact(
    path: str | os.PathLike[str], verify: bool = False, *, offset: int = 0, length: int | None = None
) -> Artifact:
    """Map the artifact at `path` (or the `length` bytes at `offset` inside it, e.g. a zip member)."""
    art = read_layout(path, offset=offset, length=length)
    if verify:
        bad = [e.name for e in art.entries.values() if not stored_digest_ok(art, e)]
        if bad:
            kind = art.entries[bad[0]].digest_kind
            raise ChecksumError(f"{art.path}: tensor {bad[0]} does not match its {kind} digest" + _more(bad))
    _make_tensors(art)
    return art


def read_layout(path: str | os.PathLike[str], *, offset: int = 0, length: int | None = None) -> Artifact:
    """Parse and bounds-check the header, map the bytes; no tensor views yet (used by verify and list)."""
    path = os.fspath(path)
    art = read_header_only(path, offset=offset, length=length)
    art._map = np.memmap(path, dtype=np.uint8, mode="r", offset=offset, shape=(art.file_size,))
    return art


def read_header_only(path: str | os.PathLike[str], *, offset: int = 0, length: int | None = None) -> Artifact:
    """Parse the header and tensor table without mapping the data (cheap: for `list`)."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            total = os.fstat(f.fileno()).st_size
            size = total - offset if length is None else length
            if offset < 0 or size < 0 or offset + size > total:
                raise ArtifactError(f"{path}: artifact region [{offset}, {offset + size}) is outside the file")
            f.seek(offset)
            header_len = parse_preamble(f.read(PREAMBLE_SIZE), size, path)
            raw = f.read(header_len)
    except OSError as e:
        raise ArtifactError(f"cannot read {path}: {e.strerror or e}") from None
    if len(raw) != header_len:
        raise ArtifactError(f"{path}: truncated header")
    header = parse_header(raw, path)
    entries = parse_entries(header, size, PREAMBLE_SIZE + header_len, path)
    return Artifact(path, offset, size, header, entries)


def stored_digest_ok(art: Artifact, e: TensorEntry) -> bool:
    """Whether a tensor's stored bytes match the digest its row declares (BLAKE3 or, in older files, SHA-256)."""
    h = new_hasher(e.digest_kind)
    data = art.stored_bytes(e.name)
    for i in range(0, e.stored_nbytes, HASH_CHUNK_BYTES):
        h.update(memoryview(data[i : i + HASH_CHUNK_BYTES]))
    return h.hexdigest() == e.digest


# zstd tensors: the declared sizes of all of them together may be at most this many times the file's
# size (or ZSTD_FLOOR_BYTES for small files): a tiny file cannot claim gigabytes. Real weights shrink
# by well under 2x with zstd; only near-constant tensors compress more.
ZSTD_MAX_RATIO = 64
ZSTD_FLOOR_BYTES = 64 << 20


def zstd_budget_bytes(file_size: int) -> int:
    return max(ZSTD_FLOOR_BYTES, ZSTD_MAX_RATIO * file_size)


def check_zstd_budget(art: Artifact) -> None:
    """Refuse (before decompressing anything) an artifact whose zstd tensors claim more than the budget."""
    claimed = sum(e.nbytes for e in art.entries.values() if e.compression != "none")
    budget = zstd_budget_bytes(art.file_size)
    if claimed > budget:
        raise ArtifactError(
            f"{art.path}: compressed tensors claim {claimed} bytes, more than {ZSTD_MAX_RATIO}x the file's "
            f"{art.file_size} bytes (limit {budget}); refusing to decompress"
        )


def _make_tensors(art: Artifact) -> None:
    check_zstd_budget(art)
    for e in art.entries.values():
        stored = art.stored_bytes(e.name)
        data = stored if e.compression == "none" else _decompress(art.path, e, stored)
        art.tensors[e.name] = TensorData(e.shape, e.dtype, data)


def _decompress(path: str, e: TensorEntry, stored: np.ndarray) -> np.ndarray:
    import zstandard

    checked = False
    try:
        params = zstandard.get_frame_parameters(memoryview(stored))
        declared, checked = params.content_size, params.has_checksum
        if declared not in (zstandard.CONTENTSIZE_UNKNOWN, e.nbytes):  # checked before any allocation
            raise ArtifactError(f"{path}: tensor {e.name}: its zstd frame declares {declared} bytes, not {e.nbytes}")
        # zstd verifies the frame's content checksum where the writer put one (every file since it does).
        raw = zstandard.ZstdDecompressor().decompress(memoryview(stored), max_output_size=e.nbytes)
    except zstandard.ZstdError as err:
        if checked and "checksum" in str(err):
            raise ChecksumError(
                f"{path}: tensor {e.name} is corrupt: it decompresses to data that does not match its zstd checksum"
            ) from None
        raise ArtifactError(f"{path}: tensor {e.name} does not decompress ({err})") from None
    if len(raw) != e.nbytes:
        raise ArtifactError(f"{path}: tensor {e.name} decompresses to {len(raw)} bytes, expected {e.nbytes}")
    return np.frombuffer(raw, dtype=np.uint8)


def _count(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _is_scale(name: str) -> bool:
    return name.endswith(SCALE_SUFFIX)


def _more(bad: list[str]) -> str:
    return f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
