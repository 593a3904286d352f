"""Per-tensor digests of the .modelc format: BLAKE3 (what pack writes) or SHA-256 (older files).

NOTE: BLAKE3 because it is a cryptographic hash that runs at several GB/s with SIMD and
threads, where SHA-256 ran at ~1.3 GB/s on this CPU's SHA unit and made pack ~4.5x slower
than `cp` (issue 17). A tensor row in the header carries exactly one of the two keys
("blake3" or "sha256"), 64 hex digits either way, so files written before the switch still
open and verify. Registry manifests keep SHA-256 of the whole file (what registries and OCI use).
"""

from __future__ import annotations

import hashlib
from typing import Any

DIGEST_KINDS = ("blake3", "sha256")
DEFAULT_DIGEST = "blake3"
HASH_CHUNK_BYTES = 16 << 20


def new_hasher(kind: str, *, threads: bool = True) -> Any:
    """An object with update(buffer) and hexdigest(). threads: let BLAKE3 split big updates across cores."""
    if kind == "blake3":
        import blake3

        return blake3.blake3(max_threads=blake3.blake3.AUTO if threads else 1)
    if kind == "sha256":
        return hashlib.sha256()
    raise ValueError(f"unknown digest kind {kind!r}")


def hexdigest(kind: str, data: Any) -> str:
    """The digest of a whole buffer (numpy array or bytes-like), hashed in HASH_CHUNK_BYTES pieces."""
    h = new_hasher(kind)
    mv = memoryview(data).cast("B")
    for i in range(0, len(mv), HASH_CHUNK_BYTES):
        h.update(mv[i : i + HASH_CHUNK_BYTES])
    return h.hexdigest()
