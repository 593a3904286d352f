"""Wheels built in the test: files plus a RECORD with their sha256 (or a wrong one)."""

from __future__ import annotations

import base64
import hashlib
import io
import zipfile


def make_wheel(name: str, version: str, files: dict[str, bytes], *, tamper: str | None = None) -> bytes:
    """A py3-none-any wheel of `files` (paths inside the wheel); `tamper`: a path whose RECORD hash is wrong."""
    dist = f"{name.replace('-', '_')}-{version}.dist-info"
    files = {**files, f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
             f"{dist}/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}  # fmt: skip
    rows = []
    for path, data in files.items():
        digest = hashlib.sha256(data + (b"x" if path == tamper else b"")).digest()
        rows.append(f"{path},sha256={base64.urlsafe_b64encode(digest).rstrip(b'=').decode()},{len(data)}")
    rows.append(f"{dist}/RECORD,,")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files.items():
            z.writestr(path, data)
        z.writestr(f"{dist}/RECORD", "\n".join(rows) + "\n")
    return buf.getvalue()


def wheel_name(name: str, version: str) -> str:
    return f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
