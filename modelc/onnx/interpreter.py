"""Runs an ONNX execution plan (Model.metadata["onnx.execution_plan"]) over numpy arrays.

`OnnxProgram(source)` binds the plan to the source's tensors once (zero-copy views), resolves
attribute tensors, and frees each intermediate after its last use. Ops live in ops_*.py.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from modelc.errors import EngineError, FormatError, InvalidRequestError, ModelcError, UnsupportedError
from modelc.ir import SCALE_SUFFIX, DataType, TensorData
from modelc.onnx import feeds as feed_checks
from modelc.onnx.registry import OPS, Op

PLAN_KEY = "onnx.execution_plan"
SHAPE_OPS = frozenset({"Shape", "Size"})  # ops whose output depends only on their input's shape
SHAPE_CACHE_SIZE = 64  # input-shape signatures whose shape-only values are kept


def tensor_array(t: TensorData, scale: TensorData | None = None, want: str | None = None) -> np.ndarray:
    """A typed array for a stored tensor, in the graph's element type `want` (a DataType name).

    Plain dtypes are zero-copy views. A tensor quantized at pack time (int8/int4 with its
    @scale, GGML blocks, f16/bf16 from f32) is dequantized once and cast back to `want`.
    """
    plain = t.dtype is not DataType.BF16 and t.dtype.numpy_dtype is not None and scale is None
    if plain and want in (None, t.dtype.value):
        return t.array()
    if t.dtype is DataType.BF16 and scale is None:
        wide = (t.array().astype(np.uint32) << 16).view(np.float32)
    elif t.dtype.numpy_dtype is not None and scale is None:
        wide = t.array()
    else:
        from modelc.kernels.matmul import linear  # quantized storage

        wide = linear.dequantize(t, scale).reshape(t.shape)
    target = np.dtype(np.float32) if want in (None, "BF16") else DataType.parse(want).numpy_dtype
    return wide.astype(target, copy=False)


@dataclass(frozen=True, slots=True)
class Step:
    """One node, ready to run: the op, its value names, and resolved attributes."""

    name: str
    op_type: str
    fn: Op
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: dict[str, Any]
    frees: tuple[str, ...]  # intermediates whose last reader is this step


class OnnxProgram:
    """An executable ONNX plan. `run(feeds) -> {output name: array}`; thread-safe (only the shape cache is shared)."""

    def __init__(self, source: Any) -> None:
        plan = source.metadata.get(PLAN_KEY)
        if not isinstance(plan, dict):
            raise FormatError(f"model {source.name!r} has no ONNX execution plan")
        self.plan = plan
        self.opset = int(plan.get("opset", 13))
        self.inputs: list[dict[str, Any]] = plan["inputs"]
        self.outputs: list[dict[str, Any]] = plan["outputs"]
        self.constants: dict[str, np.ndarray] = {}
        want = plan.get("initializer_dtypes", {})
        for name in plan.get("initializers", []):
            t = source.tensors[name]
            self.constants[name] = tensor_array(t, source.tensors.get(name + SCALE_SUFFIX), want.get(name))
        self._shape_values: dict[tuple, dict[str, np.ndarray]] = {}
        self._lock = threading.Lock()
        self.steps = self._bind(plan["nodes"], source.tensors)

    def _bind(self, nodes: list[dict[str, Any]], tensors: dict[str, TensorData]) -> list[Step]:
        """Resolve ops and attributes; fold constant subgraphs; alias Identity; plan frees."""
        outputs = {o["name"] for o in self.outputs}
        alias: dict[str, str] = {}
        live: list[tuple[dict[str, Any], Op, dict[str, Any], tuple[str, ...]]] = []
        for n in nodes:
            fn = OPS.get(n["op_type"])
            if fn is None:
                raise UnsupportedError(f"ONNX op {n['op_type']} (node {n['name']}) is not supported")
            attrs: dict[str, Any] = {"_num_outputs": len(n["outputs"])}
            for key, a in n["attributes"].items():
                attrs[key] = tensor_array(tensors[a["value"]]) if a["type"] == "tensor" else a["value"]
            ins = tuple(alias.get(x, x) for x in n["inputs"])
            if n["op_type"] == "Identity" and ins[0] and n["outputs"][0] not in outputs:
                alias[n["outputs"][0]] = ins[0]  # no copy, no call: later readers read the source
                continue
            if all(not x or x in self.constants for x in ins) and n["op_type"] != "Dropout":
                # NOTE: every input is known now (initializers, Constant nodes, folded results), so
                # the node is computed once here instead of on every run.
                args = [self.constants[x] if x else None for x in ins]
                try:
                    folded = fn(_trim(args), attrs, self.opset)
                except ModelcError:
                    raise
                except Exception as e:
                    raise FormatError(f"node {n['name']} ({n['op_type']}) fails on its constant inputs: {e}") from None
                for name, val in zip(n["outputs"], folded, strict=False):
                    if name:
                        self.constants[name] = np.asarray(val)
                continue
            live.append((n, fn, attrs, ins))
        self._output_alias = {o: alias.get(o, o) for o in outputs}
        # NOTE: shape-only values (Shape outputs and whatever is computed from them and constants
        # alone) are fixed by the input shapes. The first run for a set of input shapes records
        # them; later runs with the same shapes inject them and run only `data_steps`. Exported
        # transformers have many such nodes (Shape -> Gather -> Unsqueeze -> Concat -> Reshape).
        shape_only: set[str] = set()
        for n, _, _, ins in live:
            if n["op_type"] in SHAPE_OPS or all(not x or x in self.constants or x in shape_only for x in ins):
                shape_only.update(o for o in n["outputs"] if o)
        self.shape_only = shape_only
        data = [e for e in live if not any(o in shape_only for o in e[0]["outputs"])]
        self.data_steps = _plan(data, set(self.constants) | outputs)
        return _plan(live, set(self.constants) | outputs)

    @property
    def input_names(self) -> list[str]:
        return [s["name"] for s in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [s["name"] for s in self.outputs]

    def validate(self, feeds: dict[str, Any]) -> dict[str, np.ndarray]:
        return feed_checks.validate(feeds, self.inputs)

    def run(self, feeds: dict[str, Any]) -> dict[str, np.ndarray]:
        """Validate `feeds` (name -> nested list or array) and execute the graph."""
        arrays = self.validate(feeds)
        values: dict[str, np.ndarray] = dict(self.constants)
        values.update(arrays)
        key = tuple((name, a.shape) for name, a in arrays.items())
        cached = self._shape_values.get(key)
        if cached is not None:
            values.update(cached)
            self._execute(self.data_steps, values, None)
        else:
            record: dict[str, np.ndarray] = {}
            self._execute(self.steps, values, record)
            with self._lock:  # runs may come from several worker threads
                if len(self._shape_values) >= SHAPE_CACHE_SIZE:
                    self._shape_values.pop(next(iter(self._shape_values)))
                self._shape_values[key] = record
        return {o["name"]: np.asarray(values[self._output_alias[o["name"]]]) for o in self.outputs}

    def _execute(self, steps: list[Step], values: dict[str, np.ndarray], record: dict[str, np.ndarray] | None) -> None:
        for step in steps:
            args = [values[x] if x else None for x in step.inputs]
            try:
                outs = step.fn(args, step.attrs, self.opset)
            except ModelcError:
                raise
            except (ValueError, IndexError, TypeError, FloatingPointError) as e:
                raise InvalidRequestError(f"node {step.name} ({step.op_type}) failed on these inputs: {e}") from None
            except Exception as e:  # a bug, not bad input
                raise EngineError(f"node {step.name} ({step.op_type}) failed: {type(e).__name__}: {e}") from e
            for name, val in zip(step.outputs, outs, strict=False):
                if name:
                    values[name] = val
                    if record is not None and name in self.shape_only:
                        record[name] = val
            for name in step.frees:
                del values[name]


def _plan(live: list[tuple[dict[str, Any], Op, dict[str, Any], tuple[str, ...]]], keep: set[str]) -> list[Step]:
    """Steps with, for each, the intermediates it reads last (freed right after it)."""
    last_use: dict[str, int] = {}
    for i, (_, _, _, ins) in enumerate(live):
        for x in ins:
            if x:
                last_use[x] = i
    steps = []
    for i, (n, fn, attrs, ins) in enumerate(live):
        frees = tuple(x for x in set(ins) if x and last_use.get(x) == i and x not in keep)
        trimmed = tuple(_trim(list(ins)))  # trailing omitted optional inputs dropped once, here
        steps.append(Step(n["name"], n["op_type"], fn, trimmed, tuple(n["outputs"]), attrs, frees))
    return steps


def _trim(args: list[Any]) -> list[Any]:
    """Drop trailing omitted optional inputs (None values or "" names) so ops can test `len(inputs) > k`."""
    while args and (args[-1] is None or (isinstance(args[-1], str) and not args[-1])):
        args.pop()
    return args
