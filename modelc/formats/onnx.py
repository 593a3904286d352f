"""ONNX reader: a .onnx file -> Model with architecture "onnx" and the graph as an execution plan.

Owns protobuf decoding (via the `onnx` package, loaded WITHOUT external data), initializer
bytes (raw_data as zero-copy views, typed fields, external data files bounds-checked and kept
inside the model's folder, segmented tensors) and the plan in
Model.metadata["onnx.execution_plan"]: JSON-serializable, nodes in topological order.
Unsupported ops are refused here, at read/pack time. No maths; execution is modelc.onnx.
"""

from __future__ import annotations

import heapq
import os
import pathlib
from collections import defaultdict
from typing import Any

import numpy as np

from modelc.errors import FormatError, UnsupportedError
from modelc.ir import DataType, Model, TensorData
from modelc.onnx.registry import SUPPORTED_OPS

PLAN_KEY = "onnx.execution_plan"
MIN_OPSET = 13
MAX_OPSET = 21  # the op semantics modelc.onnx implements; newer opsets may change an op's meaning

# TensorProto.DataType ids -> IR types.
_ONNX_DTYPES: dict[int, DataType] = {
    1: DataType.F32,
    2: DataType.U8,
    3: DataType.I8,
    5: DataType.I16,
    6: DataType.I32,
    7: DataType.I64,
    9: DataType.BOOL,
    10: DataType.F16,
    11: DataType.F64,
    16: DataType.BF16,
}
_ONNX_TYPE_NAMES = {4: "UINT16", 8: "STRING", 12: "UINT32", 13: "UINT64", 14: "COMPLEX64", 15: "COMPLEX128"}


def onnx_dtype(type_id: int, *, where: str) -> DataType:
    try:
        return _ONNX_DTYPES[type_id]
    except KeyError:
        name = _ONNX_TYPE_NAMES.get(type_id, f"type id {type_id}")
        raise UnsupportedError(f"ONNX element type {name} is not supported ({where})") from None


def read_onnx(path: str | os.PathLike[str], name: str | None = None) -> Model:
    """Read an ONNX model file; external data is resolved relative to its folder."""
    import onnx  # lazy: only ONNX users pay for the protobuf import

    p = pathlib.Path(path)
    try:
        proto = onnx.load(str(p), load_external_data=False)
    except FileNotFoundError:
        raise FormatError(f"{p}: no such file") from None
    except Exception as e:  # protobuf raises DecodeError and friends
        raise FormatError(f"{p}: not a valid ONNX model ({type(e).__name__}: {e})") from None
    opset = _default_opset(proto)
    graph = proto.graph
    tensors: dict[str, TensorData] = {}
    base = p.resolve().parent
    for tname, parts in _group_segments(graph.initializer).items():
        tensors[tname] = _initializer(parts, base)
    nodes = []
    for i, node in enumerate(graph.node):
        nodes.append(_node_record(node, i, tensors, base))
    inputs = [_value_info(v) for v in graph.input if v.name not in tensors]
    outputs = [_value_info(v) for v in graph.output]
    nodes = _topological(nodes, {v["name"] for v in inputs} | set(tensors))
    for o in outputs:
        if (
            o["name"] not in _produced(nodes)
            and o["name"] not in tensors
            and o["name"] not in {i["name"] for i in inputs}
        ):
            raise FormatError(f"graph output {o['name']!r} is produced by no node")
    plan = {
        "opset": opset,
        "inputs": inputs,
        "outputs": outputs,
        "initializers": sorted(n for n in tensors if not n.startswith(_ATTR_PREFIX)),
        # The graph's own element types: pack-time quantization may store a tensor differently.
        "initializer_dtypes": {n: t.dtype.value for n, t in tensors.items()},
        "nodes": nodes,
    }
    return Model(
        name=name or p.stem,
        architecture="onnx",
        tensors=tensors,
        config={},
        metadata={PLAN_KEY: plan, "onnx.producer": proto.producer_name, "onnx.ir_version": int(proto.ir_version)},
        source_format="onnx",
        naming="onnx",
    )


def _default_opset(proto: Any) -> int:
    for imp in proto.opset_import:
        if imp.domain in ("", "ai.onnx"):
            v = int(imp.version)
            if not MIN_OPSET <= v <= MAX_OPSET:
                raise UnsupportedError(f"ONNX opset {v} is not supported (this modelc knows {MIN_OPSET}-{MAX_OPSET})")
            return v
    raise FormatError("ONNX model imports no default-domain opset")


def _group_segments(initializers: Any) -> dict[str, list[Any]]:
    groups: dict[str, list[Any]] = defaultdict(list)
    for t in initializers:
        if not t.name:
            raise FormatError("ONNX initializer without a name")
        groups[t.name].append(t)
    for tname, parts in groups.items():
        if len(parts) > 1 and not all(t.HasField("segment") for t in parts):
            raise FormatError(f"initializer {tname!r} is defined twice")
    return groups


def _initializer(parts: list[Any], base: pathlib.Path) -> TensorData:
    """One initializer (possibly stored as several segments) -> TensorData."""
    first = parts[0]
    dtype = onnx_dtype(first.data_type, where=f"initializer {first.name!r}")
    shape = tuple(int(d) for d in first.dims)
    if any(d < 0 for d in shape):
        raise FormatError(f"initializer {first.name!r} has a negative dimension {shape}")
    if not first.HasField("segment"):
        return TensorData(shape, dtype, _tensor_bytes(first, dtype, base))
    # NOTE: each segment holds elements [begin, end) of the flat tensor; together they must tile it.
    itemsize = dtype.nbytes((1,))
    total = dtype.nbytes(shape) // itemsize if itemsize else 0
    parts = sorted(parts, key=lambda t: t.segment.begin)
    pos = 0
    chunks = []
    for t in parts:
        b, e = int(t.segment.begin), int(t.segment.end)
        if b != pos or e < b:
            raise FormatError(f"initializer {first.name!r}: segments do not tile the tensor (at element {pos})")
        data = _tensor_bytes(t, dtype, base)
        if len(data) != (e - b) * itemsize:
            raise FormatError(f"initializer {first.name!r}: segment [{b}, {e}) has {len(data)} bytes")
        chunks.append(data)
        pos = e
    if pos != total:
        raise FormatError(f"initializer {first.name!r}: segments cover {pos} of {total} elements")
    return TensorData(shape, dtype, np.concatenate(chunks) if chunks else np.zeros(0, np.uint8))


def _tensor_bytes(t: Any, dtype: DataType, base: pathlib.Path) -> np.ndarray:
    """The element bytes of one TensorProto as a 1-D uint8 array (a view when the source allows)."""
    where = f"initializer {t.name!r}" if t.name else "attribute tensor"
    if t.data_location == 1:  # EXTERNAL
        return _external_bytes(t, base, where)
    if t.HasField("raw_data"):
        return np.frombuffer(t.raw_data, np.uint8)
    npd = np.dtype("<u2") if dtype is DataType.BF16 else dtype.numpy_dtype
    if t.data_type in (1,):
        vals = np.asarray(t.float_data, np.float32)
    elif t.data_type == 11:
        vals = np.asarray(t.double_data, np.float64)
    elif t.data_type == 7:
        vals = np.asarray(t.int64_data, np.int64)
    elif t.data_type in (10, 16):  # f16/bf16 bit patterns are stored in int32_data
        vals = np.asarray(t.int32_data, np.int64).astype(np.uint16)
    else:
        vals = np.asarray(t.int32_data, np.int64)
    if t.data_type == 10:
        vals = vals.view(np.float16)
    out = vals.astype(npd)
    return out.reshape(-1).view(np.uint8)


def _external_bytes(t: Any, base: pathlib.Path, where: str) -> np.ndarray:
    info = {e.key: e.value for e in t.external_data}
    loc = info.get("location")
    if not loc:
        raise FormatError(f"{where}: external data without a location")
    target = (base / loc).resolve()
    if not target.is_relative_to(base):
        raise FormatError(f"{where}: external data path {loc!r} escapes the model folder")
    if not target.is_file():
        raise FormatError(f"{where}: external data file {loc!r} not found")
    try:
        offset = int(info.get("offset", 0))
        size = target.stat().st_size
        length = int(info["length"]) if "length" in info else size - offset
    except ValueError:
        raise FormatError(f"{where}: bad external data offset/length") from None
    if offset < 0 or length < 0 or offset + length > size:
        raise FormatError(f"{where}: external data [{offset}, {offset + length}) is outside {loc!r} ({size} bytes)")
    if length == 0:
        return np.zeros(0, np.uint8)
    return np.memmap(target, dtype=np.uint8, mode="r", offset=offset, shape=(length,))


_ATTR_PREFIX = "onnx.attr/"
_ATTR_KINDS = {1: "float", 2: "int", 3: "string", 4: "tensor", 6: "floats", 7: "ints", 8: "strings"}


def _node_record(node: Any, index: int, tensors: dict[str, TensorData], base: pathlib.Path) -> dict[str, Any]:
    label = node.name or f"#{index}"
    if node.domain not in ("", "ai.onnx"):
        raise UnsupportedError(f"ONNX op {node.domain}.{node.op_type} (node {label}) is not supported")
    if node.op_type not in SUPPORTED_OPS:
        raise UnsupportedError(f"ONNX op {node.op_type} (node {label}) is not supported")
    attrs: dict[str, Any] = {}
    for a in node.attribute:
        kind = _ATTR_KINDS.get(a.type)
        if kind is None:
            raise UnsupportedError(f"ONNX attribute {a.name} of node {label} ({node.op_type}) has an unsupported type")
        if kind == "float":
            val: Any = float(a.f)
        elif kind == "int":
            val = int(a.i)
        elif kind == "string":
            val = a.s.decode("utf-8", "replace")
        elif kind == "floats":
            val = [float(v) for v in a.floats]
        elif kind == "ints":
            val = [int(v) for v in a.ints]
        elif kind == "strings":
            val = [s.decode("utf-8", "replace") for s in a.strings]
        else:
            tname = f"{_ATTR_PREFIX}{index}/{a.name}"
            dt = onnx_dtype(a.t.data_type, where=f"attribute {a.name} of node {label}")
            tensors[tname] = TensorData(tuple(int(d) for d in a.t.dims), dt, _tensor_bytes(a.t, dt, base))
            val = tname
        attrs[a.name] = {"type": kind, "value": val}
    return {
        "name": label,
        "op_type": node.op_type,
        "inputs": list(node.input),
        "outputs": list(node.output),
        "attributes": attrs,
    }


def _value_info(v: Any) -> dict[str, Any]:
    tt = v.type.tensor_type
    if not v.type.HasField("tensor_type"):
        raise UnsupportedError(f"graph value {v.name!r} is not a tensor")
    dims: list[int | str | None] = []
    if tt.HasField("shape"):
        for d in tt.shape.dim:
            if d.HasField("dim_value"):
                dims.append(int(d.dim_value))
            elif d.HasField("dim_param"):
                dims.append(d.dim_param)
            else:
                dims.append(None)
        shape: list[int | str | None] | None = dims
    else:
        shape = None
    dtype = onnx_dtype(tt.elem_type, where=f"graph value {v.name!r}").value if tt.elem_type else None
    return {"name": v.name, "shape": shape, "dtype": dtype}


def _produced(nodes: list[dict[str, Any]]) -> set[str]:
    return {o for n in nodes for o in n["outputs"] if o}


def _topological(nodes: list[dict[str, Any]], available: set[str]) -> list[dict[str, Any]]:
    """Kahn's order, stable with respect to the file's order; refuses cycles and undefined inputs."""
    producer: dict[str, int] = {}
    for i, n in enumerate(nodes):
        for o in n["outputs"]:
            if not o:
                continue
            if o in producer or o in available:
                raise FormatError(f"value {o!r} is produced twice (node {n['name']})")
            producer[o] = i
    deps: list[set[int]] = []
    for n in nodes:
        d = set()
        for x in n["inputs"]:
            if not x or x in available:
                continue
            if x not in producer:
                raise FormatError(f"node {n['name']} ({n['op_type']}) reads undefined value {x!r}")
            d.add(producer[x])
        deps.append(d)
    users: dict[int, list[int]] = defaultdict(list)
    for i, d in enumerate(deps):
        for j in d:
            users[j].append(i)
    remaining = [len(d) for d in deps]
    ready = [i for i, r in enumerate(remaining) if r == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users[i]:
            remaining[u] -= 1
            if remaining[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(nodes):
        raise FormatError("ONNX graph has a cycle")
    return [nodes[i] for i in order]
