"""PyTorch checkpoint reader (torch.save zip files) WITHOUT torch and WITHOUT running pickle code.

A restricted Unpickler admits only the few globals a state dict needs (tensor rebuild helpers,
storage types, OrderedDict); any other global is refused before it is resolved, so nothing a
pickle names is ever imported or called. Storages are memmapped from the uncompressed zip
entries `<archive>/data/<key>`. Also reads safetensors files (or a safetensors entry in a zip)
that carry a .pt/.pth/.bin name.
"""

from __future__ import annotations

import io
import os
import pathlib
import pickle
import struct
import zipfile
import zlib
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from modelc.errors import FormatError, ModelcError, UnsupportedError
from modelc.formats import safetensors as st
from modelc.ir import DataType, Model, TensorData

MAX_PICKLE_BYTES = 32 * 1024 * 1024  # a state dict's pickle is ~200 bytes per tensor
MAX_INFLATE_RATIO = 20  # a deflated entry may not claim more than this x its stored size (zip bombs)

# torch.<Name>Storage -> stored element type
STORAGE_TYPES: dict[str, DataType] = {
    "FloatStorage": DataType.F32,
    "DoubleStorage": DataType.F64,
    "HalfStorage": DataType.F16,
    "BFloat16Storage": DataType.BF16,
    "LongStorage": DataType.I64,
    "IntStorage": DataType.I32,
    "ShortStorage": DataType.I16,
    "CharStorage": DataType.I8,
    "ByteStorage": DataType.U8,
    "BoolStorage": DataType.BOOL,
}
_TORCH_DTYPES: dict[str, DataType] = {
    "float32": DataType.F32,
    "float": DataType.F32,
    "float64": DataType.F64,
    "double": DataType.F64,
    "float16": DataType.F16,
    "half": DataType.F16,
    "bfloat16": DataType.BF16,
    "int64": DataType.I64,
    "long": DataType.I64,
    "int32": DataType.I32,
    "int": DataType.I32,
    "int16": DataType.I16,
    "int8": DataType.I8,
    "uint8": DataType.U8,
    "bool": DataType.BOOL,
}


@dataclass(frozen=True, slots=True)
class _StorageType:
    dtype: DataType | None  # None: UntypedStorage (bytes)


@dataclass(frozen=True, slots=True)
class _Storage:
    dtype: DataType
    data: np.ndarray  # 1-D uint8 view of the storage's bytes


@dataclass(frozen=True, slots=True)
class _TensorRef:
    storage: _Storage
    offset: int
    size: tuple[int, ...]
    stride: tuple[int, ...]


def _rebuild_tensor(storage: Any, storage_offset: Any, size: Any, stride: Any, *_: Any) -> _TensorRef:
    if not isinstance(storage, _Storage):
        raise FormatError("pickle rebuilds a tensor from something that is not a storage")
    ints = (storage_offset, *size, *stride)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in ints) or len(size) != len(stride):
        raise FormatError(f"bad tensor geometry offset={storage_offset!r} size={size!r} stride={stride!r}")
    return _TensorRef(storage, int(storage_offset), tuple(size), tuple(stride))


def _rebuild_parameter(data: Any, *_: Any) -> Any:
    return data


class _RefusingUnpickler(pickle.Unpickler):
    """Resolves only an allow-list of globals to our own inert stand-ins; refuses everything else."""

    def __init__(self, file: io.BytesIO, load_storage: Any) -> None:
        super().__init__(file)
        self._load_storage = load_storage

    def find_class(self, module: str, name: str) -> Any:
        if module == "torch._utils" and name in ("_rebuild_tensor_v2", "_rebuild_tensor"):
            return _rebuild_tensor
        if module == "torch._utils" and name == "_rebuild_parameter":
            return _rebuild_parameter
        if module == "collections" and name == "OrderedDict":
            return OrderedDict
        if module == "torch" and name in STORAGE_TYPES:
            return _StorageType(STORAGE_TYPES[name])
        if module in ("torch", "torch.storage") and name in ("UntypedStorage", "TypedStorage"):
            return _StorageType(None)
        if module == "torch" and name in _TORCH_DTYPES:
            return _TORCH_DTYPES[name]
        if module == "torch" and name.endswith("Storage") and name.isidentifier():
            raise UnsupportedError(f"unsupported tensor storage type torch.{name}")
        raise FormatError(
            f"refused pickle global {module}.{name} (only plain state dicts of tensors are read;"
            " save model.state_dict() or convert to safetensors)"
        )

    def persistent_load(self, pid: Any) -> Any:
        if not (isinstance(pid, tuple) and len(pid) >= 5 and pid[0] == "storage"):
            raise FormatError(f"refused pickle persistent id {str(pid)[:60]}")
        storage_type, key, _location, numel = pid[1], pid[2], pid[3], pid[4]
        if isinstance(storage_type, DataType):  # a torch dtype global in place of a storage class
            dtype = storage_type
        elif isinstance(storage_type, _StorageType):
            dtype = storage_type.dtype or DataType.U8
        else:
            raise FormatError(f"refused storage type {storage_type!r}")
        if not isinstance(key, str) or not isinstance(numel, int) or numel < 0:
            raise FormatError(f"bad storage record key={key!r} numel={numel!r}")
        return self._load_storage(key, dtype, numel)


def _stored_span(path: pathlib.Path, info: zipfile.ZipInfo, mm: np.ndarray) -> tuple[int, int] | None:
    """(file offset, size) of an uncompressed zip entry's bytes; None when it is compressed."""
    if info.compress_type != zipfile.ZIP_STORED:
        return None
    local = bytes(mm[info.header_offset : info.header_offset + 30])
    if len(local) < 30 or local[:4] != b"PK\x03\x04":
        raise FormatError(f"{path.name}: bad zip local header for {info.filename}")
    name_len, extra_len = struct.unpack("<HH", local[26:30])
    start = info.header_offset + 30 + name_len + extra_len
    if start + info.file_size > len(mm):
        raise FormatError(f"{path.name}: zip entry {info.filename} runs past the end of the file")
    return start, info.file_size


def _entry_view(path: pathlib.Path, zf: zipfile.ZipFile, info: zipfile.ZipInfo, mm: np.ndarray) -> np.ndarray:
    """The bytes of one zip entry: a memmap view when stored uncompressed, else read into memory."""
    span = _stored_span(path, info, mm)
    if span is not None:
        return mm[span[0] : span[0] + span[1]]
    if info.file_size > max(1 << 20, MAX_INFLATE_RATIO * info.compress_size):
        raise FormatError(
            f"{path.name}: zip entry {info.filename} claims {info.file_size} bytes from {info.compress_size}"
        )
    try:
        return np.frombuffer(zf.read(info), dtype=np.uint8)
    except (zipfile.BadZipFile, OSError, EOFError, zlib.error) as e:
        raise FormatError(f"{path.name}: cannot read zip entry {info.filename}: {e}") from None


def _tensor_data(name: str, ref: _TensorRef, notes: list[str]) -> TensorData:
    dtype = ref.storage.dtype
    item = dtype.type_size
    n = 1
    for d in ref.size:
        n *= d
    numel = len(ref.storage.data) // item
    contiguous = []
    acc = 1
    for d in reversed(ref.size):
        contiguous.append(acc)
        acc *= d
    contiguous.reverse()
    if n == 0:
        return TensorData(ref.size, dtype, np.zeros(0, np.uint8))
    last = ref.offset + sum((d - 1) * s for d, s in zip(ref.size, ref.stride, strict=True))
    if last >= numel:
        raise FormatError(f"tensor {name}: size {ref.size} stride {ref.stride} runs past its storage")
    if all(s == c for d, s, c in zip(ref.size, ref.stride, contiguous, strict=True) if d > 1):
        return TensorData(ref.size, dtype, ref.storage.data[ref.offset * item : (ref.offset + n) * item])
    # Non-contiguous (e.g. a saved transpose): one copy of this tensor, never of the whole model. A copy
    # must not outgrow its storage: stride 0 (a broadcast) or overlapping strides could turn a few bytes
    # into gigabytes, so both are refused before anything is allocated.
    if any(s == 0 for d, s in zip(ref.size, ref.stride, strict=True) if d > 1):
        raise FormatError(f"tensor {name}: stride 0 (a broadcast view) is not supported; save a contiguous tensor")
    if n > numel - ref.offset:
        raise FormatError(f"tensor {name}: a view of {n} elements is larger than its storage ({numel})")
    notes.append(name)
    base = ref.storage.data.view(f"V{item}")
    arr = np.lib.stride_tricks.as_strided(base[ref.offset :], shape=ref.size, strides=[s * item for s in ref.stride])
    return TensorData(ref.size, dtype, np.ascontiguousarray(arr).reshape(-1).view(np.uint8))


def _state_dict(obj: Any, path: pathlib.Path) -> dict[str, _TensorRef]:
    """The name -> tensor map: the top-level dict, or a nested "state_dict"/"model"/"module" one."""
    if isinstance(obj, dict):
        tensors = {k: v for k, v in obj.items() if isinstance(v, _TensorRef) and isinstance(k, str)}
        if tensors:
            return tensors
        for key in ("state_dict", "model_state_dict", "model", "module"):
            if isinstance(obj.get(key), dict):
                return _state_dict(obj[key], path)
    raise FormatError(f"{path.name}: the checkpoint holds no state dict of tensors")


def _read_zip(path: pathlib.Path) -> tuple[dict[str, TensorData], dict[str, Any]]:
    mm = np.memmap(path, dtype=np.uint8, mode="r")
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as e:
        raise FormatError(f"{path.name}: not a readable zip archive ({e})") from None
    with zf:
        infos = {i.filename: i for i in zf.infolist()}
        pkl = [n for n in infos if n.endswith("data.pkl") and n.count("/") == 1]
        if not pkl:
            sts = [n for n in infos if n.endswith(".safetensors")]
            span = _stored_span(path, infos[sts[0]], mm) if len(sts) == 1 else None
            if span is not None:
                tensors, meta = st.read_tensors(path, base=span[0], length=span[1])
                return tensors, {"safetensors_metadata": meta}
            raise FormatError(f"{path.name}: zip archive has no data.pkl (not a torch.save checkpoint)")
        prefix = pkl[0][: -len("data.pkl")]
        byteorder = infos.get(prefix + "byteorder")
        if byteorder is not None and byteorder.file_size < 64 and zf.read(byteorder).strip() not in (b"little", b""):
            raise UnsupportedError(f"{path.name}: big-endian torch checkpoints are not supported")
        if infos[pkl[0]].file_size > MAX_PICKLE_BYTES:
            raise FormatError(f"{path.name}: data.pkl is larger than {MAX_PICKLE_BYTES} bytes")
        storages: dict[str, _Storage] = {}

        def load_storage(key: str, dtype: DataType, numel: int) -> _Storage:
            if key not in storages:
                info = infos.get(f"{prefix}data/{key}")
                if info is None:
                    raise FormatError(f"{path.name}: storage {key} is missing from the archive")
                raw = _entry_view(path, zf, info, mm)
                want = numel * dtype.type_size
                if len(raw) < want:
                    raise FormatError(f"{path.name}: storage {key} has {len(raw)} bytes, needs {want}")
                storages[key] = _Storage(dtype, raw[:want])
            return storages[key]

        try:
            obj = _RefusingUnpickler(io.BytesIO(zf.read(infos[pkl[0]])), load_storage).load()
        except ModelcError:
            raise
        except Exception as e:  # any malformed pickle: one clean line, never a traceback
            raise FormatError(f"{path.name}: cannot unpickle data.pkl ({type(e).__name__}: {e})") from None
    notes: list[str] = []
    tensors = {name: _tensor_data(name, ref, notes) for name, ref in _state_dict(obj, path).items()}
    meta: dict[str, Any] = {}
    if notes:
        meta["pytorch_copied_noncontiguous"] = notes
    return tensors, meta


def read_pytorch_tensors(path: str | os.PathLike[str]) -> tuple[dict[str, TensorData], dict[str, Any]]:
    """Tensors of a torch.save zip checkpoint (or a safetensors file with a torch-like name), plus notes."""
    p = pathlib.Path(path)
    try:
        with open(p, "rb") as f:
            head = f.read(16)
    except OSError as e:
        raise FormatError(f"{p}: cannot read: {e.strerror or e}") from None
    if head[:4] == b"PK\x03\x04":
        try:
            return _read_zip(p)
        except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, OSError, NotImplementedError) as e:
            # a damaged member found while reading (bad local header, CRC, truncated deflate stream)
            raise FormatError(f"{p.name}: damaged zip archive ({e})") from None
    if len(head) >= 9 and head[8:9] == b"{":
        tensors, meta = st.read_tensors(p)
        return tensors, {"safetensors_metadata": meta}
    if head[:1] == b"\x80":
        raise UnsupportedError(
            f"{p.name}: legacy (pre-1.6, non-zip) torch.save format is not supported; re-save it with a recent torch"
        )
    raise FormatError(f"{p.name}: not a PyTorch checkpoint (no zip or safetensors header)")


def read_pytorch(path: str | os.PathLike[str], name: str | None = None) -> Model:
    """A Model from a PyTorch checkpoint file (architecture unknown: "", names as saved: naming "hf")."""
    p = pathlib.Path(path)
    tensors, meta = read_pytorch_tensors(p)
    return Model(
        name=name or p.stem,
        architecture="",
        tensors=tensors,
        metadata=meta,
        source_format="pytorch",
        naming="hf",
    )
