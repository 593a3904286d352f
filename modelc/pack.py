"""pack: weights (any format, or a .modelc) -> transforms (arch, template, prune, quantize) -> a .modelc.

The transforms themselves live in quantize.py and prune.py; this module only orders them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from modelc import architectures, store
from modelc.artifact.format import is_artifact
from modelc.artifact.hash_pool import HashJob, hash_pool
from modelc.artifact.structure import LLAMA_NAMES, check_structure
from modelc.artifact.transforms import plan
from modelc.artifact.writer import write_artifact
from modelc.errors import FormatError
from modelc.ir import Model
from modelc.models.bounds import check_counts
from modelc.models.llama_args import LlamaArgs
from modelc.source import open_model


@dataclass(slots=True)
class PackResult:
    """What pack did: where it wrote, and how many weights pruning zeroed."""

    path: Path
    name: str
    num_pruned: int = 0
    num_params: int = 0
    quantized: list[str] = field(default_factory=list)
    stored_as: dict[str, str] = field(default_factory=dict)  # tensors whose rows forced another kind


def pack(source_path: str | os.PathLike[str], **options: Any) -> Path:
    """Pack `source_path` into a .modelc: to `out`, else into the store under `name`. Returns the path.

    The keyword options are pack_model()'s (out, name, format, arch, compress, level, quantize, prune,
    chat_template, quantize_embeddings, quantize_output, progress, source_hash, amend)."""
    return pack_model(source_path, **options).path


def pack_model(
    source_path: str | os.PathLike[str],
    *,
    out: str | os.PathLike[str] | None = None,
    name: str | None = None,
    format: str | None = None,
    arch: str | None = None,
    compress: str | None = None,
    level: int = 3,
    quantize: str | None = None,
    prune: float | None = None,
    chat_template: str | os.PathLike[str] | None = None,
    quantize_embeddings: bool = False,
    quantize_output: bool = False,
    progress: Callable[[int, int], None] | None = None,
    source_hash: bool = False,
    amend: Callable[[Model], None] | None = None,
) -> PackResult:
    """pack(), returning a PackResult (the CLI prints the prune count from it).

    A single-file source is identified in the provenance by its size and modification time;
    source_hash=True also records its sha256 (provenance.source_sha256): one more pass over the
    file, hashed beside the write, about 0.8 CPU-s per GiB. `amend(model)` may change the model read
    from the source before it is checked and written (modelc.pull records where a model came from).
    """
    src = resolve_source(source_path)
    single_file = src.is_file() and not is_artifact(src)
    # The source's sha256 is the longest single job of a pack: start it before parsing.
    with _SourceHash(src if single_file and source_hash else None) as source_sha:
        model, result, stats = _prepared(
            src, format, name, arch, chat_template, prune, quantize, quantize_embeddings, quantize_output
        )
        if amend is not None:
            amend(model)
        check_structure(model)  # nothing its architecture cannot load enters the store
        check_loadable(model)
        provenance: dict[str, Any] = {"source_sha256": source_sha.result} if source_sha.active else {}
        if single_file:
            st = src.stat()
            provenance.update(source_bytes=st.st_size, source_mtime_ns=st.st_mtime_ns)
        kw: dict[str, Any] = dict(compress=compress, level=level, progress=progress, provenance=provenance)
        if out is not None:
            result.path = Path(write_artifact(model, out, **kw))
        else:
            store_name = store.check_name(name or _default_name(model, src))
            result.path = store.add(store_name, lambda tmp: write_artifact(model, tmp, **kw))
    result.name = model.name
    result.num_pruned = stats.num_pruned if stats is not None else 0
    return result


def _prepared(
    src: Path,
    format: str | None,
    name: str | None,
    arch: str | None,
    chat_template: Any,
    prune: float | None,
    quantize: str | None,
    quantize_embeddings: bool,
    quantize_output: bool,
) -> tuple[Model, PackResult, Any]:
    """The source read as a Model with pack's options applied (transforms planned, not run yet)."""
    model = load_source(src, format=format, name=name)
    if not isinstance(model, Model):
        model = _as_model(model)
    if name:
        model.name = name
    if arch:
        model.architecture = architectures.check(arch)
    elif not model.architecture:
        # lazy: numba kernels load (and compile) only when this path runs
        from modelc.models.mlp import looks_like_mlp

        if looks_like_mlp(model.tensors):
            model.architecture = "mlp"  # dense layers and nothing else: servable on /infer
    if chat_template is not None:
        model.chat_template = read_chat_template(Path(chat_template))
    result = PackResult(Path(), model.name or src.stem, num_params=model.num_params)
    if prune is not None or quantize is not None:
        model.tensors, stats = plan(
            model.tensors,
            prune=prune,
            quantize=quantize,
            quantize_embeddings=quantize_embeddings,
            quantize_output=quantize_output,
        )
        result.quantized = stats.quantized
        result.stored_as = stats.stored_as
    else:
        stats = None
    return model, result, stats


class _SourceHash:
    """sha256 of the source file, hashed on the hash pool while the artifact is written."""

    def __init__(self, path: Path | None) -> None:
        self.path, self.active = path, path is not None
        self._job: HashJob | None = None

    def __enter__(self) -> _SourceHash:
        if self.path is not None:
            self._job = hash_pool().submit_file(self.path)
        return self

    def result(self) -> str:
        assert self._job is not None
        try:
            return self._job.result()
        except OSError as e:
            raise FormatError(f"cannot read {self.path}: {e.strerror or e}") from None

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if self._job is not None and exc_type is not None:
            self._job.cancel()  # a failed or interrupted pack should not wait for the whole hash


def resolve_source(path_or_name: str | os.PathLike[str]) -> Path:
    """An existing file or folder as is; anything else is a store name[:version], the bundled model's
    `default` included (store.resolve), so a stored model can be packed again (requantized, renamed)."""
    raw = os.fspath(path_or_name)
    path = Path(raw).expanduser()
    if path.exists():
        return path
    if raw.startswith((".", "~", os.sep)):  # a path, not a name
        raise FormatError(f"no such file or folder: {raw}")
    return store.resolve(raw)


def load_source(src: Path, *, format: str | None = None, name: str | None = None) -> Any:
    """A model source from a path (not a store name): modelc.source.open_model on an existing path."""
    if not src.exists():
        raise FormatError(f"no such file or folder: {src}")
    return open_model(src, format=format, name=name)


def _as_model(art: Any) -> Model:
    """An Artifact's fields as a mutable Model (tensors stay zero-copy views of the map)."""
    return Model(
        art.name,
        art.architecture,
        dict(art.tensors),
        config=dict(art.config),
        metadata=dict(art.metadata),
        tokenizer_json=art.tokenizer_json,
        chat_template=art.chat_template,
        special_tokens=dict(art.special_tokens),
        generation_config=dict(art.generation_config),
        source_format=art.source_format,
        naming=art.naming,
    )


MAX_TEMPLATE_BYTES = 1024 * 1024  # the largest official chat templates are ~20 KiB


def read_chat_template(path: Path) -> str:
    """Read a Jinja chat template (`pack --chat-template`, `run --chat-template`) and check that minijinja
    compiles it; a one-line FormatError naming the file otherwise."""
    import minijinja

    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_TEMPLATE_BYTES + 1)
    except FileNotFoundError:
        raise FormatError(f"chat template {path} does not exist") from None
    except IsADirectoryError:
        raise FormatError(f"chat template {path} is a folder, not a file") from None
    except OSError as e:
        raise FormatError(f"cannot read chat template {path}: {e.strerror or e}") from None
    if len(raw) > MAX_TEMPLATE_BYTES:
        raise FormatError(f"chat template {path} is larger than {MAX_TEMPLATE_BYTES // 1024} KiB")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise FormatError(f"chat template {path} is not UTF-8 text") from None
    if not text.strip():
        raise FormatError(f"chat template {path} is empty")
    try:
        minijinja.Environment().add_template("chat", text)
    except minijinja.TemplateError as e:  # its message only: str(e) shows the source around the error
        raise FormatError(f"chat template {path} does not compile: {e.message or 'syntax error'}") from None
    return text


def _default_name(model: Any, src: Path) -> str:
    raw = model.name or (src.stem if src.is_file() else src.name)
    cleaned = "".join(c if c.isalnum() or c in "._-" else "-" for c in raw).strip("-.") or "model"
    return cleaned


def check_loadable(model: Any) -> None:
    """What the loaders refuse is refused at pack too (a pack that succeeds must load): the config's counts against
    the tensors, and the llama loader's reading of the config. Here, not in artifact/structure.py: these checks are
    the models' own (models/ imports artifact/)."""
    arch = str(getattr(model, "architecture", "") or "")
    naming = getattr(model, "naming", "hf") or "hf"
    family = architectures.family(arch)
    if family in architectures.GENERATING | architectures.EMBEDDING:
        check_counts(model)  # the config's counts (context, layers, widths) against the tensors
    if family == architectures.LLAMA and naming in LLAMA_NAMES:
        LlamaArgs.from_config(dict(model.config or {}), naming, arch)  # the llama loader's reading of the config
