"""verify_artifact: check a .modelc file's structure and every tensor's digest (BLAKE3, or SHA-256 in older files), without loading it."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from modelc.artifact.reader import check_zstd_budget, open_artifact, read_layout, stored_digest_ok
from modelc.errors import ChecksumError


@dataclass(frozen=True, slots=True)
class VerifyReport:
    path: str
    num_tensors: int
    stored_bytes: int
    bad_tensors: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.bad_tensors


def verify_artifact(path: str | os.PathLike[str], progress: Callable[[int, int], None] | None = None) -> VerifyReport:
    """Bounds/format errors raise ArtifactError; checksum mismatches are listed in the report.

    progress(done_bytes, total_bytes) is called after each tensor is hashed.
    """
    art = read_layout(path)
    check_zstd_budget(art)  # a small file claiming gigabytes of zstd output is refused, not "ok"
    entries = list(art.entries.values())
    total = sum(e.stored_nbytes for e in entries)
    bad, done = [], 0
    for e in entries:
        if not stored_digest_ok(art, e):
            bad.append(e.name)
        done += e.stored_nbytes
        if progress is not None:
            progress(done, total)
    if not bad:
        open_artifact(path)  # compressed tensors must also decompress to their declared size
    return VerifyReport(art.path, len(entries), total, tuple(bad))


def require_intact(path: str | os.PathLike[str], progress: Callable[[int, int], None] | None = None) -> VerifyReport:
    """verify_artifact, raising ChecksumError (naming the first bad tensor) on any mismatch."""
    report = verify_artifact(path, progress)
    if not report.ok:
        more = f" (and {len(report.bad_tensors) - 1} more)" if len(report.bad_tensors) > 1 else ""
        raise ChecksumError(f"{report.path}: tensor {report.bad_tensors[0]} does not match its digest{more}")
    return report
