"""Write a model source (Model or Artifact) as a GGUF file with gguf.GGUFWriter, atomically.

GGML block types (Q4_0 ... Q6_K), F32/F16/BF16 and plain ints keep their stored bytes exactly
(shapes reversed by GGUFWriter into GGUF's fastest-first order). I4 and I8-with-`@scale` tensors,
which GGUF cannot hold, are dequantized to F32. Metadata keys that look like GGUF keys
(`general.*`, `<arch>.*`, `tokenizer.*`) are written back with llama.cpp's usual value types;
`tokenizer.chat_template` and modelc's own fields (`modelc.*`) are added.

NOTE: GGUF-named models keep their names; HF-named llama (LLaMA 2/3, Mistral), qwen2, phi3 and
gpt2 models are converted the way llama.cpp's convert_hf_to_gguf.py does (export_gguf_hf.py);
other HF-named models keep HF names (llama.cpp would not load those; modelc does).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from modelc.errors import UnsupportedError
from modelc.formats import export_gguf_hf as hf
from modelc.formats.export_gguf_tokenizer import tokenizer_arrays
from modelc.formats.export_safetensors import ExportError, atomic_file, dequantized, header_strings
from modelc.ir import SCALE_SUFFIX, DataType, TensorData

_SKIP_KEYS = ("GGUF.", "general.alignment")  # reader bookkeeping; GGUFWriter writes its own


def export_gguf(
    source: Any, path: str | os.PathLike[str], *, progress: Callable[[int, int], None] | None = None
) -> str:
    """Write `source` to `path` as GGUF (tensors in sorted name order); returns the path."""
    import gguf

    path = os.fspath(path)
    metadata = dict(source.metadata or {})
    tensors = gguf_tensors(source)
    converted = hf.convert(source, tensors) if hf.convertible(source) else None
    if converted is not None:  # HF names -> GGUF names and layouts, config -> {arch}.* keys, tokenizer.ggml.*
        tensors, metadata = converted
    arch = str(metadata.get("general.architecture") or source.architecture or "modelc")
    out = atomic_file(path)
    with out:  # GGUFWriter reopens the temp file by name; atomic_file fsyncs and renames it
        w = gguf.GGUFWriter(path=out.tmp, arch=arch)
        for key, val in metadata.items():
            _add_kv(w, gguf, key, val)
        for key, val in _modelc_kvs(source).items():
            w.add_key_value(key, val, gguf.GGUFValueType.STRING)
        if "tokenizer.ggml.tokens" not in metadata:
            _add_tokenizer(w, gguf, source)
        for name, (arr, raw_dtype) in tensors.items():
            w.add_tensor(name, arr, raw_dtype=raw_dtype)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    if progress is not None:
        total = sum(a.nbytes for a, _ in tensors.values())
        progress(total, total)
    return path


def gguf_tensors(source: Any) -> dict[str, tuple[np.ndarray, Any]]:
    """name -> (array for GGUFWriter.add_tensor, raw GGML type or None)."""
    import gguf

    out = {}
    for name in sorted(source.tensors):
        if name.endswith(SCALE_SUFFIX) and name[: -len(SCALE_SUFFIX)] in source.tensors:
            continue
        t: TensorData = source.tensors[name]
        scale = source.tensors.get(name + SCALE_SUFFIX)
        if t.dtype is DataType.I4 or scale is not None:
            out[name] = (dequantized(t, scale), None)
        elif t.dtype.ggml_type is None:
            raise UnsupportedError(f"tensor {name} is {t.dtype.value}, which GGUF cannot hold")
        elif t.dtype.numpy_dtype is not None and t.dtype is not DataType.F64:
            out[name] = (t.array(), None)
        else:  # block types, BF16, F64: raw bytes as (..., row_bytes) uint8
            row = t.shape[-1] if t.shape else 1
            byte_shape = (*t.shape[:-1], t.dtype.nbytes((row,))) if t.shape else (t.nbytes,)
            out[name] = (t.data.reshape(byte_shape), gguf.GGMLQuantizationType(t.dtype.ggml_type))
    return out


def _modelc_kvs(source: Any) -> dict[str, str]:
    kv = header_strings(source)
    if source.chat_template and "tokenizer.chat_template" not in (source.metadata or {}):
        kv["tokenizer.chat_template"] = source.chat_template
    if source.tokenizer_json:
        kv["modelc.tokenizer_json"] = source.tokenizer_json
    return {k: v for k, v in kv.items() if v}


def _add_tokenizer(w: Any, gguf: Any, source: Any) -> None:
    """tokenizer.ggml.tokens/token_type/merges|scores rebuilt from tokenizer.json (GGUF-born models)."""
    meta = source.metadata or {}
    if not source.tokenizer_json or "tokenizer.ggml.tokens" in meta:
        return
    T = gguf.GGUFValueType
    subtypes = {"tokens": T.STRING, "token_type": T.INT32, "merges": T.STRING, "scores": T.FLOAT32}
    for key, values in tokenizer_arrays(source.tokenizer_json, meta).items():
        w.add_key_value(key, values, T.ARRAY, sub_type=subtypes[key.rsplit(".", 1)[1]])


def _add_kv(w: Any, gguf: Any, key: str, val: Any) -> None:
    """Write one metadata value with llama.cpp's usual types; values GGUF cannot hold are skipped."""
    T = gguf.GGUFValueType
    if key.startswith(_SKIP_KEYS) or key == "general.architecture" or "." not in key or val is None:
        return
    if isinstance(val, np.ndarray):
        val = val.tolist()
    if isinstance(val, np.generic):
        val = val.item()
    if isinstance(val, bool):
        w.add_key_value(key, val, T.BOOL)
    elif isinstance(val, int):
        vtype = T.UINT32 if 0 <= val < 2**32 else (T.INT64 if val < 0 else T.UINT64)
        w.add_key_value(key, val, vtype)
    elif isinstance(val, float):
        w.add_key_value(key, val, T.FLOAT32)
    elif isinstance(val, str):
        w.add_key_value(key, val, T.STRING)
    elif isinstance(val, (list, tuple)) and val and _uniform(val):
        sub = T.get_type(val[0])
        w.add_key_value(key, list(val), T.ARRAY, sub_type=sub)
    # dicts, empty or mixed lists have no GGUF form: left out


def _uniform(val: Any) -> bool:
    kinds = {type(v) for v in val}
    return len(kinds) == 1 and next(iter(kinds)) in (int, float, str, bool)


__all__ = ["ExportError", "export_gguf", "gguf_tensors"]
