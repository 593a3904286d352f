"""The local model store: $MODELC_HOME/models, versions, list/rm/cp/switch/resolve.

Layout (docs/artifact.md): `models/<name>.modelc` is the active version, `models/<name>.v<N>.modelc`
the others, and `models/<name>.active` holds the active version's number (when absent: one more
than the highest other version). A name like "user/model" lives in a subfolder `models/user/`.
Adding a model under an existing name makes the new file active with the next version number;
the previous active file is renamed to `<name>.v<its number>.modelc`. Every write is a temp file
plus rename; no numba, no tensor reads here (list reads headers only).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from modelc import tmpfiles
from modelc.artifact.reader import read_header_only
from modelc.errors import ModelcError, NotFoundError, StoreError

SUFFIX = ".modelc"
_SEGMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_VERSIONED = re.compile(r"^(?P<base>.+)\.v(?P<n>[0-9]+)\.modelc$")
_NAME_VERSION = re.compile(r"^(?P<name>.+):(?P<n>[0-9]+)$")


def home() -> Path:
    """$MODELC_HOME, default ~/.modelc."""
    return Path(os.environ.get("MODELC_HOME") or Path.home() / ".modelc")


def models_dir() -> Path:
    return home() / "models"


MAX_SEGMENT_CHARS = 200  # ASCII only (see _SEGMENT): bytes == characters


def check_name(name: str) -> str:
    """A store name: segments of [A-Za-z0-9._-] joined by '/', not ending in .vN."""
    parts = name.split("/")
    if not name or not all(_SEGMENT.fullmatch(p) and p not in (".", "..") for p in parts):
        raise StoreError(f"invalid model name {name!r}: use letters, digits, '.', '_', '-' and '/' (like user/model)")
    if re.search(r"\.v[0-9]+$", name) or name.endswith(SUFFIX) or name.endswith(".active"):
        raise StoreError(f"invalid model name {name!r}: it must not end in .vN, .modelc or .active")
    if any(len(p) > MAX_SEGMENT_CHARS for p in parts):
        # the longest file name it becomes (NAME.vNNN.modelc) must stay within the file system's 255 bytes
        raise StoreError(
            f"invalid model name {name[:60]!r}...: each part may be at most {MAX_SEGMENT_CHARS} characters"
        )
    return name


def active_path(name: str) -> Path:
    return models_dir() / f"{check_name(name)}{SUFFIX}"


def version_path(name: str, version: int) -> Path:
    return models_dir() / f"{check_name(name)}.v{version}{SUFFIX}"


def _record_path(name: str) -> Path:
    return models_dir() / f"{name}.active"


def versions(name: str) -> list[int]:
    """Numbers of the non-active versions of `name`, ascending."""
    base = active_path(name)
    if not base.parent.is_dir():
        return []
    stem = base.name[: -len(SUFFIX)]
    out = []
    for p in base.parent.iterdir():
        m = _VERSIONED.match(p.name)
        if m and m["base"] == stem and p.is_file():
            out.append(int(m["n"]))
    return sorted(out)


def active_version(name: str) -> int | None:
    """The active file's version number, or None when `name` has no active file."""
    if not active_path(name).is_file():
        return None
    try:
        n = int(_record_path(name).read_text().strip())
        if n > 0 and n not in versions(name):
            return n
    except (OSError, ValueError):
        pass
    return max(versions(name), default=0) + 1


def exists(name: str) -> bool:
    return active_path(name).is_file() or bool(versions(name))


def resolve(name_or_path: str | os.PathLike[str]) -> Path:
    """A path to an existing file, or a store name ("name" or "name:VERSION") -> its artifact path."""
    raw = os.fspath(name_or_path)
    p = Path(raw).expanduser()
    if p.is_file():
        return p
    m = _NAME_VERSION.match(raw)
    if _looks_like_path(raw) and not m:
        raise NotFoundError(f"no such file: {raw}")
    return lookup(raw)


def lookup(spec: str) -> Path:
    """A store name ("name" or "name:VERSION") -> its artifact path inside the store; never another file,
    except DEFAULT_NAME, which names the bundled model when the store has no model of its own by that name.

    This is what requests may use: the name is checked against the name pattern before any path is
    built, so "../x", "/etc/x" or "x.modelc" are refused."""
    m = _NAME_VERSION.match(spec)
    name, version = (m["name"], int(m["n"])) if m else (spec, None)
    check_name(name)
    if version is not None:
        if version == active_version(name):
            return active_path(name)
        vp = version_path(name, version)
        if vp.is_file():
            return vp
        raise NotFoundError(f"model {name} has no version {version} (versions: {_versions_text(name)})")
    if active_path(name).is_file():
        return active_path(name)
    if versions(name):
        raise NotFoundError(
            f"model {name} has no active version; run `modelc switch {name} N` ({_versions_text(name)})"
        )
    if name == DEFAULT_NAME and version is None and bundled_default_path().is_file():
        return bundled_default_path()  # the bundled model, unless the store has a model of that name
    raise NotFoundError(f"model {name} is not in the store ({models_dir()}) and is not a file")


DEFAULT_NAME = "default"  # the bundled model's name: every command that takes a model resolves it


def bundled_default_path() -> Path:
    """modelc/data/default.modelc, shipped with the package (docs/default_model.md)."""
    return Path(__file__).resolve().parent / "data" / "default.modelc"


def sweep_orphans() -> list[Path]:
    """Remove temp files that writers killed mid-write left in the store (modelc.tmpfiles); every
    store operation that writes or lists calls it."""
    root = models_dir()
    return tmpfiles.sweep(root) if root.is_dir() else []


def add(name: str, write: Callable[[Path], object]) -> Path:
    """Add a new active version of `name`: write(tmp_path) writes the artifact, then it is installed.

    The previous active file (if any) becomes `<name>.v<N>.modelc`. Returns the active path.
    """
    dest = active_path(name)
    sweep_orphans()
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tmpfiles.make(dest.parent, dest.name)
    except OSError as e:
        raise StoreError(f"cannot add {name} to the store: {e.strerror or e}") from None
    os.close(fd)
    try:
        write(Path(tmp))
        install(name, Path(tmp))
    except BaseException:
        _unlink(Path(tmp))
        raise
    return dest


def install(name: str, tmp: Path) -> int:
    """Move a finished artifact file (in the store's folder) in as the new active version; returns its number."""
    dest = active_path(name)
    new = max([*versions(name), active_version(name) or 0]) + 1
    old = active_version(name)
    try:
        if old is not None:
            os.replace(dest, version_path(name, old))
        os.replace(tmp, dest)
        _write_atomic(_record_path(name), f"{new}\n")
    except OSError as e:
        raise StoreError(f"cannot install {name} in the store: {e.strerror or e}") from None
    return new


def switch(name: str, version: int) -> Path:
    """Make `version` the active one; the current active file becomes `<name>.v<N>.modelc`."""
    current = active_version(name)
    if version == current:
        return active_path(name)
    src = version_path(name, version)
    if not src.is_file():
        raise NotFoundError(f"model {name} has no version {version} (versions: {_versions_text(name)})")
    try:
        if current is not None:
            os.replace(active_path(name), version_path(name, current))
        os.replace(src, active_path(name))
        _write_atomic(_record_path(name), f"{version}\n")
    except OSError as e:
        raise StoreError(f"cannot switch {name} to version {version}: {e.strerror or e}") from None
    return active_path(name)


def remove(name: str, *, all_versions: bool = False, force: bool = False) -> list[Path]:
    """Remove the active file; with versions present this needs all_versions (remove them too) or force."""
    check_name(name)
    sweep_orphans()
    olds = versions(name)
    active = active_path(name)
    if not active.is_file() and not olds:
        raise NotFoundError(f"model {name} is not in the store")
    if olds and not (all_versions or force):
        raise StoreError(
            f"model {name} has {len(olds)} older version(s) ({', '.join(f'v{n}' for n in olds)}); "
            "use --all to remove them too or --force to remove only the active one"
        )
    targets = [active] if active.is_file() else []
    if all_versions:
        targets += [version_path(name, n) for n in olds]
    removed = []
    try:
        for p in targets:
            p.unlink()
            removed.append(p)
        if all_versions or active in removed:
            _unlink(_record_path(name))
    except OSError as e:
        raise StoreError(f"cannot remove {name}: {e.strerror or e}") from None
    _prune_empty_dirs(active.parent)
    return removed


def copy(src: str, dst: str) -> Path:
    """Copy a store model (or a .modelc path) to a new store name; DST must not exist."""
    source = resolve(src)
    if exists(dst):
        raise StoreError(f"model {dst} already exists in the store")

    read_header_only(source)  # refuse to copy something that is not an artifact
    dest = active_path(dst)
    sweep_orphans()
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tmpfiles.make(dest.parent, dest.name)
    except OSError as e:
        raise StoreError(f"cannot copy {src} to {dst}: {e.strerror or e}") from None
    os.close(fd)
    try:
        from modelc.artifact.writer import default_file_mode

        os.chmod(tmp, default_file_mode())
        shutil.copyfile(source, tmp)
        _fsync(Path(tmp))
        install(dst, Path(tmp))
    except BaseException as e:
        _unlink(Path(tmp))
        if isinstance(e, OSError):
            raise StoreError(f"cannot copy {src} to {dst}: {e.strerror or e}") from None
        raise
    return dest


@dataclass(frozen=True, slots=True)
class StoreEntry:
    name: str
    version: int
    active: bool
    path: Path
    architecture: str
    num_params: int
    dtypes: str  # e.g. "Q4_0 62%, F32 38%" by bytes
    size_bytes: int
    modified: float
    error: str | None = None  # set when the header cannot be read


def list_models() -> list[StoreEntry]:
    """Every artifact in the store (active and other versions), reading headers only."""
    root = models_dir()
    if not root.is_dir():
        return []
    sweep_orphans()
    out = []
    for p in sorted(root.rglob(f"*{SUFFIX}")):
        if p.name.startswith("."):
            continue
        rel = p.relative_to(root).as_posix()
        m = _VERSIONED.match(rel)
        name = m["base"] if m else rel[: -len(SUFFIX)]
        try:
            check_name(name)
        except ModelcError:
            continue
        version = int(m["n"]) if m else (active_version(name) or 1)
        out.append(_entry(name, version, not m, p))
    return sorted(out, key=lambda e: (e.name, e.version))


def _entry(name: str, version: int, active: bool, p: Path) -> StoreEntry:
    st = p.stat()
    try:
        art = read_header_only(p)
    except ModelcError as e:
        return StoreEntry(name, version, active, p, "?", 0, "?", st.st_size, st.st_mtime, str(e))
    return StoreEntry(
        name,
        version,
        active,
        p,
        art.architecture,
        art.num_params,
        dtype_summary(art.entries.values()),
        st.st_size,
        st.st_mtime,
    )


def dtype_summary(entries) -> str:
    """'Q4_0 70%, F32 30%': share of tensor bytes per stored dtype, largest first."""
    by: dict[str, int] = {}
    for e in entries:
        by[e.dtype.value] = by.get(e.dtype.value, 0) + e.nbytes
    total = sum(by.values()) or 1
    parts = sorted(by.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{k} {round(100 * v / total)}%" for k, v in parts[:3]) or "-"


def _looks_like_path(raw: str) -> bool:
    return raw.endswith(SUFFIX) or raw.startswith((".", "~", os.sep))


def _versions_text(name: str) -> str:
    nums = versions(name)
    act = active_version(name)
    items = [f"v{n}" for n in nums] + ([f"v{act} (active)"] if act else [])
    return ", ".join(items) or "none"


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tmpfiles.make(path.parent, path.name)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        _unlink(Path(tmp))
        raise


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def _prune_empty_dirs(folder: Path) -> None:
    root = models_dir()
    while folder != root and root in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent
