"""Which format a path holds, and `read_model`, the one entry point that dispatches to the readers.

Directories are Hugging Face folders; files go by extension first, then by sniffing magic bytes.
"""

from __future__ import annotations

import json
import os
import pathlib
import struct

from modelc.artifact.format import MAGIC
from modelc.errors import FormatError, UnsupportedError
from modelc.formats.gguf import read_gguf
from modelc.formats.hf import read_folder_metadata, read_hf
from modelc.formats.pytorch import read_pytorch
from modelc.formats.safetensors import read_safetensors
from modelc.ir import Model

FORMATS = ("safetensors", "hf", "gguf", "onnx", "pytorch", "modelc")
SNIFF_SAFETENSORS_MAX_BYTES = 64 * 1024 * 1024

_EXTENSIONS = {
    ".safetensors": "safetensors",
    ".gguf": "gguf",
    ".onnx": "onnx",
    ".pt": "pytorch",
    ".pth": "pytorch",
    ".bin": "pytorch",
    ".modelc": "modelc",
}


def _sniff(p: pathlib.Path) -> str | None:
    try:
        size = p.stat().st_size
        with open(p, "rb") as f:
            head = f.read(16)
            if head[:4] == b"GGUF":
                return "gguf"
            if head[: len(MAGIC)] == MAGIC:
                return "modelc"
            if head[:4] == b"PK\x03\x04":
                return "pytorch"
            if len(head) >= 9 and head[8:9] == b"{" and size <= SNIFF_SAFETENSORS_MAX_BYTES:
                (n,) = struct.unpack("<Q", head[:8])
                if n + 8 <= size:
                    f.seek(8)
                    json.loads(f.read(n))
                    return "safetensors"
    except (OSError, ValueError, RecursionError):
        return None
    return None


def detect_format(path: str | os.PathLike[str], override: str | None = None) -> str:
    """One of FORMATS for `path`; `override` (from -f) wins when given."""
    p = pathlib.Path(path)
    if override is not None:
        if override not in FORMATS:
            raise FormatError(f"unknown format {override!r} (one of {', '.join(FORMATS)})")
        return override
    if p.is_dir():
        return "hf"
    if not p.exists():
        raise FormatError(f"{p}: no such file or directory")
    if p.name.endswith(".safetensors.index.json"):
        return "safetensors"
    by_ext = _EXTENSIONS.get(p.suffix.lower())
    if by_ext is not None and by_ext != "pytorch":
        return by_ext
    sniffed = _sniff(p)  # .bin/.pt/.pth are also used for GGUF and safetensors files: look inside
    if by_ext is not None:
        return sniffed if sniffed in ("gguf", "safetensors", "modelc") else by_ext
    if sniffed is not None:
        return sniffed
    raise FormatError(f"{p.name}: cannot tell the weight format; pass -f {{{'|'.join(FORMATS)}}}")


def read_model(path: str | os.PathLike[str], format: str | None = None, name: str | None = None) -> Model:
    """Read any supported weights into the IR (tensors are zero-copy views)."""
    p = pathlib.Path(path)
    fmt = detect_format(p, format)
    if fmt == "gguf":
        return read_gguf(p, name)
    if fmt == "hf":
        return read_hf(p, name)
    if fmt == "safetensors":
        return _with_folder_metadata(_read_safetensors(p, name), p)
    if fmt == "pytorch":
        return _with_folder_metadata(read_pytorch(p, name), p)
    if fmt == "onnx":
        # lazy: numba kernels load (and compile) only when this path runs
        from modelc.formats.onnx import read_onnx

        model = read_onnx(p)
        if name:
            model.name = name
        return model
    if fmt == "modelc":
        raise UnsupportedError(f"{p.name} is already a .modelc artifact: open it with modelc.artifact, not a reader")
    raise FormatError(f"unknown format {fmt!r}")


def _read_safetensors(p: pathlib.Path, name: str | None) -> Model:
    return read_safetensors(p, name)


def _with_folder_metadata(model: Model, p: pathlib.Path) -> Model:
    """A lone weights file beside a config.json takes the folder's config, tokenizer and template."""
    folder = p.parent
    if not (folder / "config.json").is_file():
        return model

    meta = read_folder_metadata(folder)
    model.architecture = meta["architecture"]
    model.config = meta["config"]
    model.config["tie_word_embeddings"] = bool(model.config.get("tie_word_embeddings")) or (
        "lm_head.weight" not in model.tensors
    )
    model.metadata = {**meta["metadata"], **model.metadata}
    model.tokenizer_json = meta["tokenizer_json"]
    model.chat_template = meta["chat_template"]
    model.special_tokens = meta["special_tokens"]
    model.generation_config = meta["generation_config"]
    return model
