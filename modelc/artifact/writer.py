"""write_artifact: stream a model source into one .modelc file, atomically.

NOTE: the layout puts the header (with every tensor's offset and digest) before the data,
but those are known only after the data is written (zstd sizes, hashes). So the writer
reserves room for the header first: it serializes the header with placeholder numbers at
least as wide as any real value (and a 64-hex digest), starts the data after that region,
writes the tensors one at a time, then writes the real (never longer) header into the
reserved region. The file is a temp file in the destination directory, fsynced and renamed
over the destination; on any failure it is removed and nothing partial remains.

How it stays near `cp` speed: a raw tensor that is a view of a memory-mapped file (every
reader maps its source) is copied by the kernel (`copy_file_range`, no pass through this
process's memory), and each 16 MiB written is handed to the disk at once
(`sync_file_range(SYNC_FILE_RANGE_WRITE)`), so the final fsync finds little left to do.
The tensor digests (BLAKE3, digest.py) run meanwhile on the hash pool (hash_pool.py), reading
the same bytes through the source's map. Anything else (an in-memory or transformed tensor, another filesystem)
is written from memory in 16 MiB chunks. Extra memory: one compressed or in-memory tensor
at most (the writer waits for its hash before going on), plus the pool's chunks.
"""

from __future__ import annotations

import ctypes
import dataclasses
import datetime as _dt
import errno
import functools
import json
import mmap
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from modelc import tmpfiles
from modelc.artifact.digest import DEFAULT_DIGEST, DIGEST_KINDS, hexdigest
from modelc.artifact.format import FORMAT_VERSION, PREAMBLE_SIZE, TensorEntry, align_up, pack_preamble
from modelc.artifact.hash_pool import HashJob, hash_pool, release_pages
from modelc.errors import ModelcError
from modelc.version import __version__

__all__ = ["ArtifactWriteError", "default_file_mode", "header_fields", "release_pages", "write_artifact"]

CHUNK_BYTES = 16 << 20
LATE_FIELD_BYTES = 128
Progress = Callable[[int, int], None]
"""progress(done_bytes, total_bytes): called after each tensor written."""

# copy_file_range errors that mean "not between these two files": write from memory instead.
_NO_COPY_RANGE = {errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL, errno.EBADF, errno.ETXTBSY}
_SYNC_FILE_RANGE_WRITE = 2


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
    digest: str = DEFAULT_DIGEST,
) -> str:
    """Write `model` (an IR Model or an Artifact) to `path`; returns the path written.

    compress: None/"none" or "zstd" (per tensor; a tensor that does not shrink is stored raw).
    provenance: extra provenance fields (e.g. source_sha256) merged into the header's. A value may be
    a zero-argument callable returning a short string (<= LATE_FIELD_BYTES): it is called after the
    tensors are written, so a caller can hash the source meanwhile (pack does, on the hash pool).
    digest: the per-tensor digest kind, "blake3" (default) or "sha256" (what files before BLAKE3 hold).
    """
    if digest not in DIGEST_KINDS:
        raise ArtifactWriteError(f"unknown digest {digest!r}; use {' or '.join(DIGEST_KINDS)}")
    if compress not in (None, "none", "zstd"):
        raise ArtifactWriteError(f"unknown compression {compress!r}; use zstd or none")
    if compress == "zstd" and not 1 <= level <= 22:
        raise ArtifactWriteError(f"zstd level must be between 1 and 22, got {level}")
    if any(not isinstance(n, str) or not n for n in model.tensors):  # the reader refuses a nameless row
        raise ArtifactWriteError("a tensor has an empty name; an artifact names every tensor")
    path = os.fspath(path)
    dest_dir = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tmpfiles.make(dest_dir, os.path.basename(path))  # an orphan is swept by the store
    except OSError as e:
        raise ArtifactWriteError(f"cannot write {path}: {e.strerror or e}") from None
    try:
        os.fchmod(fd, default_file_mode())  # mkstemp makes 0600; artifacts are shared like any file
        with os.fdopen(fd, "wb", buffering=0) as f:
            _write(f, model, compress == "zstd", level, progress, provenance, digest)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        _remove_quietly(tmp)
        if isinstance(e, OSError):
            raise ArtifactWriteError(f"cannot write {path}: {e.strerror or e}") from None
        raise
    _fsync_dir(dest_dir)
    return path


def _write(f, model: Any, use_zstd: bool, level: int, progress: Progress | None, extra: Any, kind: str) -> None:
    names = sorted(model.tensors)
    total = sum(model.tensors[n].nbytes for n in names)
    late = {k: v for k, v in (extra or {}).items() if callable(v)}
    header = header_fields(model, {k: "0" * LATE_FIELD_BYTES if k in late else v for k, v in (extra or {}).items()})
    # Placeholders: a number wider than any offset/size this file can reach, a full-width sha.
    wide = 10 ** len(str(2 * (total + 64 * len(names)) + len(_dumps(header)) * 2 + (1 << 20))) - 1
    header["tensors"] = [_placeholder(n, model.tensors[n], wide, kind) for n in names]
    reserved = len(_dumps(header))
    pos = align_up(PREAMBLE_SIZE + reserved)
    compressor = _zstd(level) if use_zstd else None
    written: list[tuple[TensorEntry, HashJob | None]] = []
    sources = _Sources()
    done = 0
    try:
        for name in names:
            t = model.tensors[name]
            entry, job = _write_tensor(f, name, t, pos, compressor, sources, kind)
            written.append((entry, job))
            done += t.nbytes
            if progress is not None:
                progress(done, total)
            pos = align_up(entry.offset + entry.stored_nbytes)
        end = pos if not written else written[-1][0].offset + written[-1][0].stored_nbytes
        os.ftruncate(f.fileno(), end)  # a trailing empty tensor's offset must still lie inside the file
        entries = [e if job is None else dataclasses.replace(e, digest=job.result()) for e, job in written]
    except BaseException:
        for _, job in written:
            if job is not None:
                job.cancel()  # the pool stops hashing a file that is about to be removed
        raise
    finally:
        sources.close()
    header["tensors"] = [e.to_json() for e in entries]
    for key, fn in late.items():
        value = fn()
        if not isinstance(value, str) or len(value.encode()) > LATE_FIELD_BYTES:
            raise ArtifactWriteError(f"provenance field {key} must be a string of at most {LATE_FIELD_BYTES} bytes")
        header["provenance"][key] = value
    raw = _dumps(header)
    assert len(raw) <= reserved, "header grew past its reserved region"
    _pwrite_all(f.fileno(), pack_preamble(len(raw)) + raw, 0)


def _write_tensor(
    f, name: str, t: Any, offset: int, compressor: Any, sources: _Sources, kind: str
) -> tuple[TensorEntry, HashJob | None]:
    """Write one tensor at `offset`; returns its entry and the pending hash (None: entry has it)."""
    fd = f.fileno()
    data = np.ascontiguousarray(t.data).reshape(-1).view(np.uint8)  # a view for mmap'd/owned buffers
    if compressor is not None and t.nbytes:
        packed = compressor.compress(memoryview(data))
        release_pages(data)
        if len(packed) < t.nbytes:
            _pwrite_all(fd, packed, offset)
            digest = hexdigest(kind, packed)
            return TensorEntry(name, t.dtype, t.shape, offset, t.nbytes, "zstd", len(packed), digest, kind), None
    entry = TensorEntry(name, t.dtype, t.shape, offset, t.nbytes, "none", t.nbytes, "", kind)
    job = hash_pool().submit(data, kind)
    try:
        region = sources.region(data)
        copied = _copy(region[0], fd, region[1], offset, t.nbytes, sources) if region is not None else 0
        for i in range(copied, t.nbytes, CHUNK_BYTES):
            view = data[i : i + CHUNK_BYTES]
            _pwrite_all(fd, view, offset + i)
            release_pages(view)
        if region is None:
            job.result()  # an in-memory tensor: keep at most one alive until hashed
    except BaseException:
        job.cancel()
        raise
    return entry, job


def _copy(src_fd: int, dst_fd: int, src_off: int, dst_off: int, nbytes: int, sources: _Sources) -> int:
    """copy_file_range in CHUNK_BYTES steps; returns the bytes copied (less: write the rest from memory)."""
    done = 0
    while done < nbytes:
        try:
            n = os.copy_file_range(src_fd, dst_fd, min(CHUNK_BYTES, nbytes - done), src_off + done, dst_off + done)
        except OSError as e:
            if e.errno not in _NO_COPY_RANGE:
                raise
            sources.enabled = False
            return done
        if n == 0:  # the file is shorter than its map: the write path reads the map (and fails loudly)
            return done
        _start_writeback(dst_fd, dst_off + done, n)
        done += n
    return done


def _pwrite_all(fd: int, data: Any, offset: int) -> None:
    mv = memoryview(data).cast("B")
    done = 0
    while done < len(mv):
        done += os.pwrite(fd, mv[done:], offset + done)
    _start_writeback(fd, offset, len(mv))


def _start_writeback(fd: int, offset: int, nbytes: int) -> None:
    """Start writing these bytes to disk now (not waiting), so the final fsync has little left."""
    fn = _sync_file_range()
    if fn is not None and nbytes:
        fn(fd, offset, nbytes, _SYNC_FILE_RANGE_WRITE)  # best effort: an error here shows at fsync


@functools.cache
def _sync_file_range() -> Any:
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range  # Linux only; ctypes drops the GIL
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


class _Sources:
    """Open source files for copy_file_range, found from the np.memmap under a tensor's bytes."""

    def __init__(self) -> None:
        self.enabled = hasattr(os, "copy_file_range")
        self._fds: dict[int, int | None] = {}  # id(mmap) -> fd, None: not usable
        self._keep: list[Any] = []  # the maps whose ids are keys, kept alive while ids are in use

    def region(self, data: np.ndarray) -> tuple[int, int] | None:
        """(fd, file offset) of a read-only file view's bytes; None when not such a view."""
        if not self.enabled or data.nbytes == 0:
            return None
        mm, path, map_start = _memmap_of(data)
        if mm is None:
            return None
        base = np.frombuffer(mm, dtype=np.uint8).ctypes.data
        rel = data.ctypes.data - base
        if not 0 <= rel <= len(mm) - data.nbytes:
            return None
        if id(mm) not in self._fds:
            self._keep.append(mm)
            self._fds[id(mm)] = _open_same_file(path, base)
        fd = self._fds[id(mm)]
        return None if fd is None else (fd, map_start + rel)

    def close(self) -> None:
        for fd in self._fds.values():
            if fd is not None:
                os.close(fd)
        self._fds.clear()
        self._keep.clear()


def _memmap_of(data: np.ndarray) -> tuple[Any, str, int]:
    """(the mmap.mmap, its file's path, the file offset where the map starts) under data, or Nones."""
    obj: Any = data
    while obj is not None:
        if isinstance(obj, np.memmap) and getattr(obj, "_mmap", None) is not None and obj.filename:
            if obj.mode != "r":  # a copy-on-write map may hold bytes the file does not have
                break
            off = int(obj.offset)
            return obj._mmap, obj.filename, off - off % mmap.ALLOCATIONGRANULARITY
        obj = getattr(obj, "base", None)
    return None, "", 0


def _open_same_file(path: str, map_addr: int) -> int | None:
    """An fd of `path` if it is still the file mapped at map_addr (checked in /proc/self/maps)."""
    mapped = _mapping_file_id(map_addr)
    if mapped is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    st = os.fstat(fd)
    if (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino) != mapped:
        os.close(fd)  # replaced since it was mapped: copy what the map holds instead
        return None
    return fd


def _mapping_file_id(addr: int) -> tuple[int, int, int] | None:
    """(major, minor, inode) of the file mapped at addr, from /proc/self/maps; None if unknown."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split()
                lo, _, hi = parts[0].partition("-")
                if int(lo, 16) <= addr < int(hi, 16):
                    major, _, minor = parts[3].partition(":")
                    return int(major, 16), int(minor, 16), int(parts[4])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _placeholder(name: str, t: Any, wide: int, kind: str) -> dict[str, Any]:
    return TensorEntry(name, t.dtype, t.shape, wide, wide, "zstd", wide, "0" * 64, kind).to_json()


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

    # The frame's content checksum (XXH64 of the tensor, 4 bytes) lets every load catch a corrupt
    # compressed tensor without --verify's full digest pass; files from before it still load.
    return zstandard.ZstdCompressor(level=level, write_content_size=True, write_checksum=True)


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
