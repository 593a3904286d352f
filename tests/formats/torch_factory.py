"""Writes torch.save-style zip checkpoints WITHOUT torch: data.pkl + data/<key> + version + byteorder.

Fake `torch` / `torch._utils` modules are put in sys.modules only while pickling, so the pickle
names the same globals torch's own pickles do (torch._utils._rebuild_tensor_v2, torch.FloatStorage).
"""

from __future__ import annotations

import collections
import contextlib
import io
import pathlib
import pickle
import sys
import types
import zipfile

import numpy as np

_STORAGE_NAMES = {
    np.dtype("float32"): "FloatStorage",
    np.dtype("float16"): "HalfStorage",
    np.dtype("int64"): "LongStorage",
    np.dtype("int32"): "IntStorage",
    np.dtype("uint8"): "ByteStorage",
    np.dtype("bool"): "BoolStorage",
}


class _Storage:
    def __init__(self, key: str, arr: np.ndarray) -> None:
        self.key, self.arr = key, arr


class _Tensor:
    def __init__(self, storage: _Storage, offset: int, size: tuple[int, ...], stride: tuple[int, ...], rebuild) -> None:
        self.args = (storage, offset, size, stride, False, collections.OrderedDict())
        self.rebuild = rebuild

    def __reduce__(self):
        return (self.rebuild, self.args)


@contextlib.contextmanager
def fake_torch():
    torch = types.ModuleType("torch")
    utils = types.ModuleType("torch._utils")

    def _rebuild_tensor_v2(*args):  # never called: only its name is pickled
        raise AssertionError

    _rebuild_tensor_v2.__module__ = "torch._utils"
    _rebuild_tensor_v2.__qualname__ = "_rebuild_tensor_v2"
    utils._rebuild_tensor_v2 = _rebuild_tensor_v2
    for name in _STORAGE_NAMES.values():
        cls = type(name, (), {"__module__": "torch"})
        setattr(torch, name, cls)
    saved = {k: sys.modules.get(k) for k in ("torch", "torch._utils")}
    sys.modules["torch"], sys.modules["torch._utils"] = torch, utils
    try:
        yield torch, utils
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


class _Pickler(pickle.Pickler):
    def __init__(self, f, torch) -> None:
        super().__init__(f, protocol=2)
        self.torch = torch

    def persistent_id(self, obj):
        if isinstance(obj, _Storage):
            cls = getattr(self.torch, _STORAGE_NAMES[obj.arr.dtype])
            return ("storage", cls, obj.key, "cpu", obj.arr.size)
        return None


def write_checkpoint(
    path: pathlib.Path,
    tensors: dict[str, np.ndarray],
    *,
    transpose: set[str] = frozenset(),
    wrap: str | None = None,
    compress: bool = False,
) -> None:
    """Save like torch.save(state_dict). Names in `transpose` are saved as a strided view (stride swapped)."""
    with fake_torch() as (torch, utils):
        storages = {}
        sd = collections.OrderedDict()
        for i, (name, arr) in enumerate(tensors.items()):
            if name in transpose:
                base = np.ascontiguousarray(arr.T)
                st = _Storage(str(i), base.reshape(-1))
                sd[name] = _Tensor(st, 0, arr.shape, (1, arr.shape[0]), utils._rebuild_tensor_v2)
            else:
                # a one-element offset into a slightly larger storage exercises storage_offset
                flat = np.concatenate([np.zeros(1, arr.dtype), arr.reshape(-1)])
                st = _Storage(str(i), flat)
                stride = tuple(int(s // arr.itemsize) for s in np.zeros(arr.shape, arr.dtype).strides)
                sd[name] = _Tensor(st, 1, arr.shape, stride, utils._rebuild_tensor_v2)
            storages[st.key] = st
        obj = {wrap: sd, "epoch": 3} if wrap else sd
        buf = io.BytesIO()
        _Pickler(buf, torch).dump(obj)
    write_zip(path, buf.getvalue(), {k: s.arr.tobytes() for k, s in storages.items()}, compress=compress)


def write_zip(path: pathlib.Path, pkl: bytes, storages: dict[str, bytes], *, compress: bool = False) -> None:
    mode = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w", compression=mode) as zf:
        zf.writestr("archive/data.pkl", pkl)
        zf.writestr("archive/byteorder", "little")
        for key, raw in storages.items():
            zf.writestr(f"archive/data/{key}", raw)
        zf.writestr("archive/version", "3\n")
