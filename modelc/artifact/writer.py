"""write_artifact: stream a model source into one .modelc file, atomically.

NOTE: the layout puts the header (with every tensor's offset and sha256) before the data,
but those are known only after the data is written (zstd sizes, hashes). So the writer
reserves room for the header first: it serializes the header with placeholder numbers at
least as wide as any real value (and a 64-hex sha256), starts the data after that region,
writes the tensors one at a time, then writes the real (never longer) header into the
reserved region. Extra memory: one compressed tensor at most; uncompressed tensors are
copied in 16 MiB chunks. The file is a temp file in the destination directory, fsynced and
renamed over the destination; on any failure it is removed and nothing partial remains.
"""

from __future__ import annotations

import concurrent.futures
import datetime as _dt
import functools
import hashlib
import json
import mmap
import os
import tempfile
from collections.abc import Callable
from typing import Any

import numpy as np

from modelc import __version__
from modelc.artifact.format import FORMAT_VERSION, PREAMBLE_SIZE, TensorEntry, align_up, pack_preamble
from modelc.errors import ModelcError

CHUNK_BYTES = 16 << 20
LATE_FIELD_BYTES = 128
Progress = Callable[[int, int], None]
"""progress(done_bytes, total_bytes): called after each chunk written."""


class ArtifactWriteError(ModelcError):
    """The artifact could not be written (disk full, read-only directory, bad metadata)."""


def write_artifact(
    model: Any,
    path: str | os.PathLike[str],
    *,
    compress: str | None = None,
    level: int = 3,
    progress: Progress | None = None,
    provenance: dict[str, Any] | None = None,
) -> str:
    """Write `model` (an IR Model or an Artifact) to `path`; returns the path written.

    compress: None/"none" or "zstd" (per tensor; a tensor that does not shrink is stored raw).
    provenance: extra provenance fields (e.g. source_sha256) merged into the header's. A value may be
    a zero-argument callable returning a short string (<= LATE_FIELD_BYTES): it is called after the
    tensors are written, so a caller can hash the source in another thread meanwhile.
    """
    if compress not in (None, "none", "zstd"):
        raise ArtifactWriteError(f"unknown compression {compress!r}; use zstd or none")
    if compress == "zstd" and not 1 <= level <= 22:
        raise ArtifactWriteError(f"zstd level must be between 1 and 22, got {level}")
    path = os.fspath(path)
    dest_dir = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(dir=dest_dir, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    except OSError as e:
        raise ArtifactWriteError(f"cannot write {path}: {e.strerror or e}") from None
    try:
        os.fchmod(fd, default_file_mode())  # mkstemp makes 0600; artifacts are shared like any file
        with os.fdopen(fd, "wb") as f:
            _write(f, model, compress == "zstd", level, progress, provenance)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        _remove_quietly(tmp)
        if isinstance(e, OSError):
            raise ArtifactWriteError(f"cannot write {path}: {e.strerror or e}") from None
        raise
    _fsync_dir(dest_dir)
    return path


def _write(f, model: Any, use_zstd: bool, level: int, progress: Progress | None, extra: Any) -> None:
    names = sorted(model.tensors)
    total = sum(model.tensors[n].nbytes for n in names)
    late = {k: v for k, v in (extra or {}).items() if callable(v)}
    header = header_fields(model, {k: "0" * LATE_FIELD_BYTES if k in late else v for k, v in (extra or {}).items()})
    # Placeholders: a number wider than any offset/size this file can reach, a full-width sha.
    wide = 10 ** len(str(2 * (total + 64 * len(names)) + len(_dumps(header)) * 2 + (1 << 20))) - 1
    header["tensors"] = [_placeholder(n, model.tensors[n], wide) for n in names]
    reserved = len(_dumps(header))
    pos = align_up(PREAMBLE_SIZE + reserved)
    compressor = _zstd(level) if use_zstd else None
    entries, done = [], 0
    for name in names:
        t = model.tensors[name]
        f.seek(pos)
        entry = _write_tensor(f, name, t, pos, compressor)
        entries.append(entry)
        done += t.nbytes
        if progress is not None:
            progress(done, total)
        pos = align_up(entry.offset + entry.stored_nbytes)
    end = entries[-1].offset + entries[-1].stored_nbytes if entries else align_up(PREAMBLE_SIZE + reserved)
    f.truncate(end)  # a trailing empty tensor's offset must still lie inside the file
    header["tensors"] = [e.to_json() for e in entries]
    for key, fn in late.items():
        value = fn()
        if not isinstance(value, str) or len(value.encode()) > LATE_FIELD_BYTES:
            raise ArtifactWriteError(f"provenance field {key} must be a string of at most {LATE_FIELD_BYTES} bytes")
        header["provenance"][key] = value
    raw = _dumps(header)
    assert len(raw) <= reserved, "header grew past its reserved region"
    f.seek(0)
    f.write(pack_preamble(len(raw)))
    f.write(raw)


def _write_tensor(f, name: str, t: Any, offset: int, compressor: Any) -> TensorEntry:
    data = np.ascontiguousarray(t.data).reshape(-1).view(np.uint8)  # a view for mmap'd/owned buffers
    if compressor is not None and t.nbytes:
        packed = compressor.compress(memoryview(data))
        release_pages(data)
        if len(packed) < t.nbytes:
            f.write(packed)
            sha = hashlib.sha256(packed).hexdigest()
            return TensorEntry(name, t.dtype, t.shape, offset, t.nbytes, "zstd", len(packed), sha)
    # Hash each chunk in a worker thread while this thread writes it: both drop the GIL, so the
    # sha256 (the format requires it) overlaps the copy instead of adding to it.
    h = hashlib.sha256()
    for i in range(0, t.nbytes, CHUNK_BYTES):
        view = data[i : i + CHUNK_BYTES]
        chunk = memoryview(view)
        hashed = _hasher().submit(h.update, chunk)
        f.write(chunk)
        hashed.result()
        release_pages(view)
    return TensorEntry(name, t.dtype, t.shape, offset, t.nbytes, "none", t.nbytes, h.hexdigest())


@functools.cache
def _hasher() -> concurrent.futures.ThreadPoolExecutor:
    return concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="modelc-sha256")


def _placeholder(name: str, t: Any, wide: int) -> dict[str, Any]:
    return TensorEntry(name, t.dtype, t.shape, wide, wide, "zstd", wide, "0" * 64).to_json()


def header_fields(model: Any, extra: dict[str, Any]) -> dict[str, Any]:
    """Every header field except the tensor table, from a Model or an Artifact."""
    old = getattr(model, "header", None) or {}
    provenance = dict(old.get("provenance") or {})
    provenance.update(
        source_format=provenance.get("source_format") or getattr(model, "source_format", "") or "",
        modelc_version=__version__,
        created=_dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )
    provenance.update(extra)
    return {
        "format_version": FORMAT_VERSION,
        "name": model.name,
        "architecture": model.architecture,
        "config": model.config,
        "metadata": model.metadata,
        "tokenizer": model.tokenizer_json,
        "chat_template": model.chat_template,
        "special_tokens": model.special_tokens,
        "generation_config": model.generation_config,
        "naming": model.naming,
        "provenance": provenance,
    }


def _dumps(header: dict[str, Any]) -> bytes:
    try:
        return json.dumps(header, ensure_ascii=False, separators=(",", ":"), default=_json_default).encode("utf-8")
    except (TypeError, ValueError) as e:
        raise ArtifactWriteError(f"model metadata cannot be stored as JSON: {e}") from None


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, bytes):
        return obj.decode("utf-8", errors="replace")
    if isinstance(obj, (set, tuple)):
        return list(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


def _zstd(level: int) -> Any:
    import zstandard

    return zstandard.ZstdCompressor(level=level, write_content_size=True)


def release_pages(view: np.ndarray) -> None:
    """Drop a read-only file-mapped view's pages from this process (best effort; no-op for owned memory).

    NOTE: pages of a mmap'd source count in RSS once touched; without this, packing a 10 GB
    file would grow RSS to 10 GB even though each byte is needed once. The page cache keeps
    the data, so nothing is re-read if the pages are touched again.
    """
    base = view.base
    while base is not None and not isinstance(base, mmap.mmap):
        base = getattr(base, "base", None)
    if base is None or not hasattr(base, "madvise") or view.nbytes == 0:
        return
    try:
        start = view.ctypes.data - np.frombuffer(base, dtype=np.uint8).ctypes.data
    except (ValueError, TypeError):  # a closed map
        return
    lo = start // mmap.PAGESIZE * mmap.PAGESIZE
    hi = (start + view.nbytes) // mmap.PAGESIZE * mmap.PAGESIZE  # whole pages only: neighbours stay
    if hi > lo:
        try:
            base.madvise(mmap.MADV_DONTNEED, lo, hi - lo)
        except (OSError, ValueError):
            pass


def default_file_mode() -> int:
    """0o666 minus the process umask: the mode open() would give a new file."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def _remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
