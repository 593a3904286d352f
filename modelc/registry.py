"""Model registries: an index.json plus .modelc files, at an http(s) URL or in a local folder.

    index.json = {"models": [{"name", "versions": [{"version", "architecture", "quant", "params",
                                                    "size", "sha256", "path"}]}]}   (path: relative)

pull downloads into $MODELC_HOME/downloads/*.part (resumed with HTTP Range after an interruption,
retried with backoff), checks size and sha256, and only then moves the file into the store as the
new active version; on failure the store is unchanged. `registry serve` uses the static
file server in modelc/build/static_server.py. No numba here.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from modelc import store
from modelc.artifact.reader import read_header_only
from modelc.errors import ChecksumError, ModelcError, NotFoundError

INDEX = "index.json"
CHUNK_BYTES = 1 << 20
MAX_REDIRECTS = 5
MAX_INDEX_BYTES = 64 << 20
Progress = Callable[[int, int], None]
_SHA256 = re.compile(r"[0-9a-f]{64}")
_REL_PATH = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*")


class RegistryError(ModelcError):
    """The registry is missing, unreachable, or its index is malformed."""


@dataclass(frozen=True, slots=True)
class RegistryModel:
    """One version of one model in a registry index."""

    name: str
    version: int
    architecture: str
    quant: str
    params: int
    size: int
    sha256: str
    path: str


def location(explicit: str | None = None) -> str:
    """--registry, else $MODELC_REGISTRY; a clear error when neither is set."""
    loc = explicit or os.environ.get("MODELC_REGISTRY")
    if not loc:
        raise RegistryError("no registry configured: pass --registry URL|DIR or set MODELC_REGISTRY")
    return loc


def is_remote(loc: str) -> bool:
    return loc.startswith(("http://", "https://"))


def load_index(loc: str) -> list[RegistryModel]:
    """Every version of every model listed by the registry at `loc`."""
    if is_remote(loc):
        import httpx

        try:
            with _open(loc, _join(loc, INDEX)) as resp:
                if resp.status_code != 200:
                    raise RegistryError(f"registry {loc} answered {resp.status_code} for {INDEX}")
                raw = bytearray()
                for chunk in resp.iter_bytes():
                    raw += chunk
                    if len(raw) > MAX_INDEX_BYTES:
                        raise RegistryError(f"registry {loc}: {INDEX} is larger than {MAX_INDEX_BYTES} bytes")
        except httpx.HTTPError as e:
            raise RegistryError(f"cannot reach registry {loc}: {type(e).__name__}") from None
    else:
        try:
            raw = (Path(loc) / INDEX).read_bytes()
        except OSError as e:
            raise RegistryError(f"cannot read registry index {Path(loc) / INDEX}: {e.strerror or e}") from None
    try:
        return parse_index(json.loads(raw))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise RegistryError(f"registry {loc}: {INDEX} is not valid JSON ({e})") from None


def parse_index(data: Any) -> list[RegistryModel]:
    """Every entry, each checked by pattern before anything uses it to build a path or a URL: names
    are store names, sha256 64 hex digits, paths relative without '..', sizes and versions >= 0/1.
    Errors say which entry, never quote the index's bytes."""
    if not isinstance(data, dict) or not isinstance(data.get("models"), list):
        raise RegistryError(f"{INDEX} has no models list")
    out = []
    for i, m in enumerate(data["models"]):
        try:
            name = store.check_name(m["name"]) if isinstance(m["name"], str) else None
            if name is None:
                raise ValueError("the name is not a string")
            for v in m["versions"]:
                out.append(_entry(name, v))
        except (KeyError, TypeError, ValueError, ModelcError) as e:
            why = e.message if isinstance(e, ModelcError) else f"{type(e).__name__} {e}"[:120]
            raise RegistryError(f"{INDEX}: malformed models[{i}] ({why})") from None
    return out


def _entry(name: str, v: dict[str, Any]) -> RegistryModel:
    sha, rel, size, version = v["sha256"], v["path"], v["size"], v["version"]
    if not isinstance(sha, str) or not _SHA256.fullmatch(sha):
        raise ValueError("sha256 must be 64 lowercase hex digits")
    if not isinstance(rel, str) or not _REL_PATH.fullmatch(rel) or ".." in rel.split("/"):
        raise ValueError("path must be relative, of [A-Za-z0-9._-] segments, without '..'")
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ValueError("size must be a non-negative integer")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError("version must be a positive integer")
    params = v.get("params") or 0
    return RegistryModel(
        name,
        version,
        str(v.get("architecture") or "")[:64],
        str(v.get("quant") or "")[:64],
        int(params) if isinstance(params, int) else 0,
        size,
        sha,
        rel,
    )


def search(query: str, *, arch: str | None = None, loc: str | None = None) -> list[RegistryModel]:
    """Latest version of each model whose name or architecture contains `query` (case-insensitive),
    optionally of one architecture."""
    q = query.lower()
    latest: dict[str, RegistryModel] = {}
    for m in load_index(location(loc)):
        if (q in m.name.lower() or q in m.architecture.lower()) and (
            arch is None or m.architecture.lower() == arch.lower()
        ):
            if m.name not in latest or m.version > latest[m.name].version:
                latest[m.name] = m
    return sorted(latest.values(), key=lambda m: m.name)


def find(spec: str, loc: str, version: int | None = None) -> RegistryModel:
    """NAME[:VERSION] -> its index entry (the highest version when none is given)."""
    m = re.fullmatch(r"(?P<name>[^:]+)(?::(?P<v>[0-9]+))?", spec)
    if not m:
        raise RegistryError(f"invalid model identifier {spec!r}; use NAME or NAME:VERSION")
    name = store.check_name(m["name"])
    want = int(m["v"]) if m["v"] else version
    found = [e for e in load_index(loc) if e.name == name]
    if not found:
        raise NotFoundError(f"model {name} is not in registry {loc}")
    if want is None:
        return max(found, key=lambda e: e.version)
    for e in found:
        if e.version == want:
            return e
    have = ", ".join(str(e.version) for e in sorted(found, key=lambda e: e.version))
    raise NotFoundError(f"model {name} has no version {want} in registry {loc} (versions: {have})")


def pull(
    spec: str,
    *,
    loc: str | None = None,
    version: int | None = None,
    progress: Progress | None = None,
    retries: int = 5,
    backoff_s: float = 0.5,
) -> Path:
    """Download NAME[:VERSION] into the store (new active version); returns the store path."""
    loc = location(loc)
    entry = find(spec, loc, version)
    if _same_file(store.active_path(entry.name), entry):
        return store.active_path(entry.name)  # already the active version: nothing to download
    part = _part_path(entry)
    part.parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(retries + 1):
        try:
            _fetch(loc, entry, part, progress)
            break
        except RegistryError:
            part.unlink(missing_ok=True)
            raise
        except (OSError, _Interrupted) as e:
            if attempt == retries:
                raise RegistryError(f"download of {entry.name} failed after {retries + 1} tries: {e}") from None
            time.sleep(min(backoff_s * 2**attempt, 30.0))
    _check(entry, part)
    return _install(entry, part)


class _Interrupted(Exception):
    """The transfer stopped early (dropped connection, short body); resumable."""


def _fetch(loc: str, entry: RegistryModel, part: Path, progress: Progress | None) -> None:
    have = part.stat().st_size if part.exists() else 0
    if have > entry.size:
        part.unlink()
        have = 0
    if have == entry.size:
        return
    if is_remote(loc):
        _fetch_http(loc, _join(loc, entry.path), entry, part, have, progress)
    else:
        _fetch_file(Path(loc) / entry.path, entry, part, have, progress)
    if part.stat().st_size < entry.size:
        raise _Interrupted(f"got {part.stat().st_size} of {entry.size} bytes")


def _fetch_http(loc: str, url: str, entry: RegistryModel, part: Path, have: int, progress: Progress | None) -> None:
    import httpx

    headers = {"Range": f"bytes={have}-"} if have else {}
    try:
        with _open(loc, url, headers) as resp:
            if resp.status_code == 416 and have:
                part.unlink()  # our partial file does not fit the server's: start over
                raise _Interrupted("server refused the resume range")
            if resp.status_code not in (200, 206):
                raise RegistryError(f"registry answered {resp.status_code} for {url}")
            if resp.status_code == 200:
                have = 0  # the server ignored Range: rewrite from the start
            with open(part, "r+b" if have else "wb") as f:
                f.seek(have)
                for chunk in resp.iter_bytes():  # unbuffered: every byte received is kept for a resume
                    if have + len(chunk) > entry.size:  # never more than the index declared
                        f.truncate(0)
                        raise RegistryError(
                            f"registry sent more than the {entry.size} bytes its index declares for {entry.name}"
                        )
                    f.write(chunk)
                    have += len(chunk)
                    if progress is not None:
                        progress(have, entry.size)
    except httpx.HTTPError as e:
        raise _Interrupted(type(e).__name__) from None


def _fetch_file(src: Path, entry: RegistryModel, part: Path, have: int, progress: Progress | None) -> None:
    try:
        with open(src, "rb") as r, open(part, "r+b" if have else "wb") as f:
            r.seek(have)
            f.seek(have)
            while chunk := r.read(min(CHUNK_BYTES, entry.size + 1 - have)):
                if have + len(chunk) > entry.size:
                    f.truncate(0)
                    raise RegistryError(f"registry file for {entry.name} is larger than its index declares")
                f.write(chunk)
                have += len(chunk)
                if progress is not None:
                    progress(have, entry.size)
    except FileNotFoundError:
        raise RegistryError(f"registry file {src} is missing") from None


def _same_file(path: Path, entry: RegistryModel) -> bool:
    if not path.is_file() or path.stat().st_size != entry.size:
        return False
    return _sha256(path) == entry.sha256


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_BYTES * 16):
            h.update(chunk)
    return h.hexdigest()


def _check(entry: RegistryModel, part: Path) -> None:
    if part.stat().st_size != entry.size or _sha256(part) != entry.sha256:
        part.unlink()
        raise ChecksumError(
            f"download of {entry.name} v{entry.version} does not match the registry's sha256; discarded"
        )


def _install(entry: RegistryModel, part: Path) -> Path:
    try:
        read_header_only(part)
    except ModelcError:
        part.unlink()
        raise
    dest = store.active_path(entry.name)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    os.close(fd)
    try:
        shutil.move(part, tmp)  # a rename when downloads/ and models/ share a filesystem
        store.install(entry.name, Path(tmp))
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return dest


def _part_path(entry: RegistryModel) -> Path:
    """$MODELC_HOME/downloads/NAME.vN.SHA.part: built from pattern-checked fields only, and checked."""
    store.check_name(entry.name)
    if not _SHA256.fullmatch(entry.sha256):
        raise RegistryError(f"bad sha256 for {entry.name}")
    root = store.home() / "downloads"
    part = root / f"{entry.name.replace('/', '--')}.v{int(entry.version)}.{entry.sha256[:16]}.part"
    if part.parent != root:
        raise RegistryError(f"bad download name for {entry.name}")
    return part


@contextlib.contextmanager
def _open(loc: str, url: str, headers: dict[str, str] | None = None) -> Iterator[Any]:
    """GET url as a stream, following redirects only within the registry's own origin (scheme,
    host, port): an index cannot send the client to another server."""
    import httpx

    base = _origin(loc)
    with httpx.Client(timeout=30, follow_redirects=False) as client:
        for _ in range(MAX_REDIRECTS + 1):
            if _origin(url) != base:
                raise RegistryError(f"registry {loc} redirected outside itself; refused")
            with client.stream("GET", url, headers=headers or {}) as resp:
                if not resp.is_redirect:
                    yield resp
                    return
                url = str(resp.url.join(resp.headers.get("Location", "")))
    raise RegistryError(f"registry {loc}: more than {MAX_REDIRECTS} redirects")


def _origin(url: str) -> tuple[str, str, int | None]:
    from urllib.parse import urlsplit

    u = urlsplit(url)
    return u.scheme.lower(), (u.hostname or "").lower(), u.port or {"http": 80, "https": 443}.get(u.scheme.lower())


def _join(base: str, rel: str) -> str:
    from urllib.parse import quote

    return base.rstrip("/") + "/" + quote(rel.lstrip("/"))


def add(folder: str | os.PathLike[str], artifact: str | os.PathLike[str], *, name: str | None = None) -> RegistryModel:
    """Copy an artifact into a registry folder as the next version of its name; rewrite index.json atomically."""
    root = Path(folder)
    src = store.resolve(artifact)
    art = read_header_only(src)
    name = store.check_name(name or art.name or src.stem)
    root.mkdir(parents=True, exist_ok=True)
    index_path = root / INDEX
    data = json.loads(index_path.read_text()) if index_path.exists() else {"models": []}
    parse_index(data)  # refuse to extend a malformed index
    model = next((m for m in data["models"] if m["name"] == name), None)
    if model is None:
        model = {"name": name, "versions": []}
        data["models"].append(model)
    version = max((int(v["version"]) for v in model["versions"]), default=0) + 1
    rel = f"{name}/{name.rsplit('/', 1)[-1]}-v{version}.modelc"
    dest = root / rel
    dest.parent.mkdir(parents=True, exist_ok=True)
    h = hashlib.sha256()
    with open(src, "rb") as r, open(dest, "wb") as w:
        while chunk := r.read(CHUNK_BYTES * 16):
            h.update(chunk)
            w.write(chunk)
    entry = RegistryModel(
        name,
        version,
        art.architecture,
        store.dtype_summary(art.entries.values()),
        art.num_params,
        dest.stat().st_size,
        h.hexdigest(),
        rel,
    )
    model["versions"].append(
        {k: getattr(entry, k) for k in ("version", "architecture", "quant", "params", "size", "sha256", "path")}
    )
    fd, tmp = tempfile.mkstemp(dir=root, prefix=".index.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, index_path)
    return entry
