"""Small models and header surgery shared by the artifact, store and CLI tests."""

from __future__ import annotations

import json
import struct


def read_raw(path) -> tuple[int, dict, bytes]:
    raw = open(path, "rb").read()
    _, version, hlen = struct.unpack("<8sIQ", raw[:20])
    return version, json.loads(raw[20 : 20 + hlen]), raw


def rewrite_header(path, header: dict, version: int = 1) -> None:
    """Write `header` in place of the old one (it must fit before the first tensor)."""
    _, old, raw = read_raw(path)
    new = json.dumps(header, separators=(",", ":")).encode()
    first = min((t["offset"] for t in old["tensors"]), default=len(raw))
    assert 20 + len(new) <= first
    out = bytearray(raw)
    out[:20] = struct.pack("<8sIQ", b"MODELC\0\0", version, len(new))
    out[20 : 20 + len(new)] = new
    open(path, "wb").write(bytes(out))
