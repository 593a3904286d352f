"""compile: one executable zipapp = shebang + zip(modelc's code, __main__.py, the artifact STORED).

NOTE: the artifact member is stored uncompressed and its data is padded (a zip "extra" field,
as Android's zipalign does) to start at a 64-byte file offset, so the app maps the model in
place with open_artifact(app, offset=..., length=...): no extraction, no copy. The code is
small and is extracted once to a per-build cache folder at start, because numba's on-disk
kernel cache needs real source files (it cannot cache functions imported from a zip).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import tempfile
import zipfile
from pathlib import Path

from modelc.build.containerize import BuildError
from modelc.version import __version__

MODEL_MEMBER = "model.modelc"
CONFIG_MEMBER = "modelc_app.json"
ALIGN = 64
_PAD_ID = 0xD935  # zipalign's extra-field id
SHEBANG = b"#!/usr/bin/env python3\n"

BOOTSTRAP = '''"""modelc compiled app: print the version, check dependencies, extract the code once, serve the model."""
import importlib.util, json, os, sys, tempfile, zipfile

REQUIRED = {required!r}
BUILD_ID = {build_id!r}


def _archive():
    return os.path.abspath(os.path.dirname(__file__))


def _version_line():
    sys.path.insert(0, _archive())
    try:
        from modelc.version import version_line  # the standard library only: before the dependency check
        return version_line()
    finally:
        sys.path.remove(_archive())
        for name in [m for m in sys.modules if m == "modelc" or m.startswith("modelc.")]:
            del sys.modules[name]


def _extract(archive):
    base = os.environ.get("MODELC_APP_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "modelc", "apps")
    dest = os.path.join(base, BUILD_ID)
    if not os.path.isdir(dest):
        os.makedirs(base, exist_ok=True)
        tmp = tempfile.mkdtemp(dir=base, prefix=".tmp-")
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(tmp, [n for n in zf.namelist() if n.startswith("modelc/")])
        try:
            os.rename(tmp, dest)
        except OSError:  # another start won the race
            import shutil
            shutil.rmtree(tmp, ignore_errors=True)
    return dest


def main():
    print(_version_line(), file=sys.stderr, flush=True)
    missing = [pkg for mod, pkg in REQUIRED if importlib.util.find_spec(mod) is None]
    if missing:
        print("error: missing Python packages: %s (pip install %s)" % (", ".join(missing), " ".join(missing)),
              file=sys.stderr)
        return 1
    archive = _archive()
    sys.path.insert(0, _extract(archive))
    from modelc.build.compiled import main as app_main
    return app_main(archive, sys.argv[1:])


sys.exit(main())
'''

# (import name, pip name) the server needs at run time.
REQUIRED = (
    ("numpy", "numpy"),
    ("numba", "numba"),
    ("zstandard", "zstandard"),
    ("minijinja", "minijinja"),
    ("jsonschema", "jsonschema"),
    ("regex", "regex"),
    ("structlog", "structlog"),
    ("prometheus_client", "prometheus-client"),
    ("tokenizers", "tokenizers"),
    ("llguidance", "llguidance"),
    ("httpx", "httpx"),
    ("rich", "rich"),
    ("typer", "typer"),
    ("anyio", "anyio"),
    ("hypercorn", "hypercorn"),
    ("quart", "quart"),
)


def parse_listen(listen: str | None, bind: str, port: int) -> tuple[str, int]:
    """--listen ADDR:PORT (or [v6]:PORT) overrides --bind/--port; both are checked."""
    if listen is not None:
        m = re.fullmatch(r"\[(?P<h6>[0-9A-Fa-f:.]+)\]:(?P<p>\d+)|(?P<h>[^:\[\]]+):(?P<p2>\d+)", listen)
        if not m:
            raise BuildError(f"invalid --listen {listen!r}; use ADDR:PORT, e.g. 127.0.0.1:8080")
        bind, port = m["h6"] or m["h"], int(m["p"] or m["p2"])
    if not 0 <= port <= 65535:
        raise BuildError(f"invalid port {port}; use 0-65535")
    if not bind or any(c.isspace() for c in bind):
        raise BuildError(f"invalid bind address {bind!r}")
    return bind, port


def compile_app(
    artifact: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    bind: str = "127.0.0.1",
    port: int = 8080,
    listen: str | None = None,
) -> Path:
    """Build the executable app at `out` (atomic); returns its path."""
    from modelc import store
    from modelc.artifact.reader import read_header_only
    from modelc.version import git_sha

    src = store.resolve(artifact)
    art = read_header_only(src)
    host, port = parse_listen(listen, bind, port)
    code = _code_files()
    sha = git_sha()
    build_id = _build_id(code, sha)
    config = {"host": host, "port": port, "model_member": MODEL_MEMBER, "name": art.name, "built_with": __version__}
    out = Path(out)
    fd, tmp = tempfile.mkstemp(dir=out.parent if str(out.parent) else ".", prefix=f".{out.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(SHEBANG)
            with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_DEFLATED) as zf:
                for arc, path in code:
                    zf.write(path, arc)
                zf.writestr("modelc/_build.py", f'GIT_SHA = "{sha}"\n')
                zf.writestr("__main__.py", BOOTSTRAP.format(required=REQUIRED, build_id=build_id))
                zf.writestr(CONFIG_MEMBER, json.dumps(config))
                _write_aligned(zf, f, src)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o755)
        os.replace(tmp, out)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise BuildError(f"cannot write {out}: {e.strerror or e}") from None
        raise
    return out


def _write_aligned(zf: zipfile.ZipFile, f, src: Path) -> None:
    size = src.stat().st_size
    info = zipfile.ZipInfo(MODEL_MEMBER, date_time=(2020, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_STORED
    info.file_size = size
    zip64 = size > zipfile.ZIP64_LIMIT
    start = f.tell() + 30 + len(MODEL_MEMBER.encode()) + 4 + (20 if zip64 else 0)
    pad = -start % ALIGN
    info.extra = struct.pack("<HH", _PAD_ID, pad) + b"\0" * pad
    with open(src, "rb") as r, zf.open(info, "w", force_zip64=zip64) as w:
        while chunk := r.read(16 << 20):
            w.write(chunk)


def member_span(archive: str | os.PathLike[str], member: str = MODEL_MEMBER) -> tuple[int, int]:
    """(absolute data offset, length) of a STORED member, read from its local header."""
    with zipfile.ZipFile(archive) as zf:
        info = zf.getinfo(member)
    if info.compress_type != zipfile.ZIP_STORED:
        raise BuildError(f"{archive}: {member} is compressed; it cannot be mapped in place")
    with open(archive, "rb") as f:
        f.seek(info.header_offset)
        local = f.read(30)
    if local[:4] != b"PK\x03\x04":
        raise BuildError(f"{archive}: bad local header for {member}")
    name_len, extra_len = struct.unpack("<HH", local[26:30])
    return info.header_offset + 30 + name_len + extra_len, info.file_size


def _code_files() -> list[tuple[str, Path]]:
    """modelc's modules and its package data (the web UI's files), not caches nor the bundled model."""
    pkg = Path(__file__).resolve().parents[1]
    out = []
    for path in sorted(p for p in pkg.rglob("*") if p.is_file()):
        rel = path.relative_to(pkg.parent).as_posix()
        if "__pycache__" in rel or rel == "modelc/_build.py" or rel.startswith("modelc/data/"):
            continue
        if path.suffix in (".py", ".typed") or rel.startswith("modelc/server/webui/"):
            out.append((rel, path))
    return out


def _build_id(code: list[tuple[str, Path]], sha: str) -> str:
    h = hashlib.sha256(f"{__version__} {sha}".encode())
    for arc, path in code:
        h.update(arc.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]
