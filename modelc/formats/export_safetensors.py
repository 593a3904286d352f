"""Write a model source (Model or Artifact) as one .safetensors file, streamed and atomic.

Plain dtypes are written byte for byte. safetensors has no GGML block types, so quantized
tensors (Q*_K, Q4_0..., I4, and I8 with an `@scale` sibling) are dequantized to F32 with
modelc.kernels.matmul.linear.dequantize and their `@scale` siblings dropped; pass dequantize=False
to refuse instead. modelc's own fields go to `__metadata__` as strings (modelc.* keys).
"""

from __future__ import annotations

import json
import os
import struct
import tempfile
from collections.abc import Callable
from typing import Any

import numpy as np

from modelc.artifact.writer import default_file_mode
from modelc.errors import ModelcError, UnsupportedError
from modelc.ir import SCALE_SUFFIX, DataType, TensorData

SAFETENSORS_DTYPES = {
    DataType.F64: "F64",
    DataType.F32: "F32",
    DataType.F16: "F16",
    DataType.BF16: "BF16",
    DataType.I64: "I64",
    DataType.I32: "I32",
    DataType.I16: "I16",
    DataType.I8: "I8",
    DataType.U8: "U8",
    DataType.BOOL: "BOOL",
}
CHUNK_BYTES = 16 << 20


class ExportError(ModelcError):
    """An export could not be written."""


def export_safetensors(
    source: Any,
    path: str | os.PathLike[str],
    *,
    dequantize: bool = True,
    progress: Callable[[int, int], None] | None = None,
) -> str:
    """Write `source`'s tensors to `path` (sorted names); returns the path."""
    tensors = plain_tensors(source, dequantize=dequantize)
    header: dict[str, Any] = {"__metadata__": metadata_strings(source)}
    pos = 0
    for name, t in tensors.items():
        header[name] = {
            "dtype": SAFETENSORS_DTYPES[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [pos, pos + t.nbytes],
        }
        pos += t.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    path = os.fspath(path)
    with atomic_file(path) as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        done = 0
        for t in tensors.values():
            for i in range(0, t.nbytes, CHUNK_BYTES):
                f.write(memoryview(t.data[i : i + CHUNK_BYTES]))
            done += t.nbytes
            if progress is not None:
                progress(done, pos)
    return path


def plain_tensors(source: Any, *, dequantize: bool) -> dict[str, TensorData]:
    """Sorted name -> TensorData in a plain dtype (quantized ones dequantized to F32)."""
    out = {}
    for name in sorted(source.tensors):
        if name.endswith(SCALE_SUFFIX) and name[: -len(SCALE_SUFFIX)] in source.tensors:
            continue
        t = source.tensors[name]
        scale = source.tensors.get(name + SCALE_SUFFIX)
        if t.dtype in SAFETENSORS_DTYPES and scale is None:
            out[name] = t
            continue
        if not dequantize:
            what = t.dtype.value + (" with per-row scales" if scale is not None else "")
            raise UnsupportedError(f"tensor {name} is {what}, which safetensors cannot hold; dequantize it")
        out[name] = TensorData.from_array(dequantized(t, scale))
    return out


def dequantized(t: TensorData, scale: TensorData | None) -> np.ndarray:
    """(shape) float32 values of a quantized tensor (rows dequantized by the kernels' API)."""
    # lazy: numba kernels load (and compile) only when this path runs
    from modelc.kernels.matmul.linear import dequantize

    return np.asarray(dequantize(t, scale), dtype=np.float32).reshape(t.shape)


def header_strings(source: Any) -> dict[str, str]:
    """The `modelc.*` header fields both exporters write, each as a string."""
    return {
        "modelc.name": source.name or "",
        "modelc.architecture": source.architecture or "",
        "modelc.naming": source.naming or "",
        "modelc.config": json.dumps(source.config, default=str),
        "modelc.special_tokens": json.dumps(source.special_tokens, default=str),
        "modelc.generation_config": json.dumps(source.generation_config, default=str),
    }


def metadata_strings(source: Any) -> dict[str, str]:
    """modelc's header fields, each as a string (safetensors metadata is str -> str)."""
    meta = {k: v if isinstance(v, str) else json.dumps(v, default=str) for k, v in (source.metadata or {}).items()}
    meta.update(header_strings(source))
    if source.chat_template:
        meta["modelc.chat_template"] = source.chat_template
    if source.tokenizer_json:
        meta["modelc.tokenizer_json"] = source.tokenizer_json
    return meta


class atomic_file:
    """Context manager: a temp file beside `path`, fsynced and renamed on success, removed on failure."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __enter__(self):
        folder = os.path.dirname(os.path.abspath(self.path))
        try:
            fd, self.tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(self.path)}.", suffix=".tmp")
        except OSError as e:
            raise ExportError(f"cannot write {self.path}: {e.strerror or e}") from None

        os.fchmod(fd, default_file_mode())
        self.f = os.fdopen(fd, "wb")
        return self.f

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            if exc_type is None:
                self.f.flush()
                os.fsync(self.f.fileno())
            self.f.close()
            if exc_type is None:
                os.replace(self.tmp, self.path)
                return False
        except OSError as e:
            _unlink(self.tmp)
            raise ExportError(f"cannot write {self.path}: {e.strerror or e}") from None
        _unlink(self.tmp)
        if isinstance(exc, OSError):
            raise ExportError(f"cannot write {self.path}: {exc.strerror or exc}") from None
        return False


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
