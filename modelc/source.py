"""open_model: a model source from a path or a store name. The one function every front door uses to
open a model (the sync Engine, AsyncEngine, the encoders, `modelc perplexity`, benchmarks).

A model source is anything with the IR Model's attributes: an Artifact (a .modelc file, mapped
zero-copy) or a Model read in memory from raw weights (GGUF, safetensors, an HF folder, ...).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from modelc import store
from modelc.artifact.format import is_artifact
from modelc.artifact.reader import open_artifact
from modelc.errors import ModelcError
from modelc.formats.detect import read_model


def open_model(path_or_name: str | os.PathLike[str], *, format: str | None = None, name: str | None = None) -> Any:
    """A .modelc file is opened as an Artifact; any other existing file or folder is read as raw weights
    (`format` forces the reader, `name` names the model); anything else is a store name[:version]."""
    if not isinstance(path_or_name, str | os.PathLike):
        raise ModelcError(f"a model is a path or a store name, got {type(path_or_name).__name__}")
    p = Path(os.fspath(path_or_name)).expanduser()
    if p.exists():
        if format in (None, "modelc") and is_artifact(p):
            return open_artifact(p)
        return read_model(p, format=format, name=name)
    return open_artifact(store.resolve(os.fspath(path_or_name)))


def as_source(source_or_path: Any) -> Any:
    """open_model(source_or_path) for a path or name; a model source is returned as it is."""
    if isinstance(source_or_path, str | os.PathLike):
        return open_model(source_or_path)
    return source_or_path
