"""Request-to-path resolution: which file a request's `model` (or LoRA `path`) may make the server open.

A request names a model by store name ("name", "name:3", "user/model"), or by a file under one of the
directories the operator allowed with `--models-dir` ("sub/x.modelc", or an absolute path inside that
directory). LoRA adapters resolve only under `--adapters-dir` (default $MODELC_HOME/adapters), by
name ("style" -> style.safetensors or the PEFT folder style/) or by a path inside it. Anything else is
"not found" without touching the file, and no message names a server path. No HTTP here.
"""

from __future__ import annotations

import contextlib
import copy
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from modelc import store
from modelc.errors import ModelcError, NotFoundError
from modelc.pull.ref import store_name_of

ADAPTER_SUFFIX = ".safetensors"


def _inside(path: Path, root: Path) -> Path | None:
    """path's real location when it lies inside root's real location (symlinks followed), else None."""
    try:
        real, base = path.resolve(strict=True), root.resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    return real if real == base or base in real.parents else None


def _under(spec: str, root: Path, suffix: str) -> Path | None:
    """spec (relative to root, or absolute) as an existing entry inside root, trying spec+suffix too."""
    raw = Path(spec)
    if ".." in raw.parts or not raw.name:
        return None
    base = raw if raw.is_absolute() else root / raw
    for cand in (base, base.with_name(base.name + suffix)) if not spec.endswith(suffix) else (base,):
        real = _inside(cand, root)
        if real is not None and real != root.resolve():
            return real
    return None


def resolve_model(spec: str, models_dirs: Sequence[str | os.PathLike[str]] = ()) -> Path:
    """A request's model name -> the artifact file it may open (store first, then --models-dir)."""
    if not isinstance(spec, str) or not spec or "\0" in spec:
        raise NotFoundError("model name must be a non-empty string", param="model")
    pulled = store_name_of(spec)  # a remote reference names the store model it was pulled into
    if pulled is not None:
        spec = pulled
    try:
        return store.lookup(spec)
    except NotFoundError as e:
        found = _in_dirs(spec, models_dirs)
        if found is not None:
            return found
        raise NotFoundError(_public(e.message, spec), param="model") from None
    except ModelcError:  # not a store name (a path, "..", a suffix): only --models-dir may hold it
        found = _in_dirs(spec, models_dirs)
        if found is not None:
            return found
        raise NotFoundError(
            f"model {spec!r} not found: requests name models by store name"
            + (" or by a file under the server's --models-dir" if models_dirs else ""),
            param="model",
        ) from None


def _in_dirs(spec: str, models_dirs: Sequence[str | os.PathLike[str]]) -> Path | None:
    for d in models_dirs:
        found = _under(spec, Path(d), store.SUFFIX)
        if found is not None and found.is_file():
            return found
    return None


def _public(message: str, spec: str) -> str:
    """A store error without the store's location on disk."""
    hidden = str(store.models_dir())
    if hidden in message:
        return f"model {spec!r} is not in the store; add it with `modelc pull` or `modelc pack`"
    return message


def adapters_dir(configured: str | os.PathLike[str] | None = None) -> Path:
    """--adapters-dir, default $MODELC_HOME/adapters."""
    return Path(configured) if configured else store.home() / "adapters"


def resolve_adapter(spec: str, configured: str | os.PathLike[str] | None = None) -> Path:
    """A request's LoRA `path` -> a .safetensors file or PEFT folder inside the adapters directory."""
    if not isinstance(spec, str) or not spec or "\0" in spec:
        raise NotFoundError("'path' must name a LoRA adapter", param="path")
    found = _under(spec, adapters_dir(configured), ADAPTER_SUFFIX)
    if found is None:
        raise NotFoundError(
            f"no LoRA adapter {Path(spec).name!r} in the server's adapters directory: adapters load only "
            "from --adapters-dir (default $MODELC_HOME/adapters), by name or by a path inside it",
            param="path",
        )
    return found


@contextlib.contextmanager
def hidden_path(path: str | os.PathLike[str], shown: str) -> Iterator[None]:
    """Re-raise a ModelcError raised inside with the server path `path` replaced by `shown`."""
    try:
        yield
    except ModelcError as e:
        where = os.fspath(path)
        if where not in e.message:
            raise
        err = copy.copy(e)
        err.message = e.message.replace(where, shown)
        err.args = (err.message,)
        raise err from None
