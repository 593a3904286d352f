"""Runs an ONNX execution plan (Model.metadata["onnx.execution_plan"]) over numpy arrays.

`OnnxProgram(source)` binds the plan to the source's tensors once (zero-copy views), resolves
attribute tensors, and frees each intermediate after its last use. Ops live in ops_*.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from modelc.errors import EngineError, FormatError, InvalidRequestError, ModelcError, UnsupportedError
from modelc.ir import DataType, TensorData
from modelc.onnx import feeds as feed_checks
from modelc.onnx.registry import OPS, Op

PLAN_KEY = "onnx.execution_plan"


def tensor_array(t: TensorData) -> np.ndarray:
    """A typed array for a stored tensor: a view for plain dtypes; BF16 widened to f32; blocks dequantized."""
    if t.dtype is DataType.BF16:
        return (t.array().astype(np.uint32) << 16).view(np.float32)
    if t.dtype.numpy_dtype is not None:
        return t.array()
    from modelc.kernels import linear  # quantized weights (a packed/quantized ONNX model)

    return linear.dequantize(t).reshape(t.shape)


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
    """An executable ONNX plan. `run(feeds) -> {output name: array}`; thread-safe (no shared mutable state)."""

    def __init__(self, source: Any) -> None:
        plan = source.metadata.get(PLAN_KEY)
        if not isinstance(plan, dict):
            raise FormatError(f"model {source.name!r} has no ONNX execution plan")
        self.plan = plan
        self.opset = int(plan.get("opset", 13))
        self.inputs: list[dict[str, Any]] = plan["inputs"]
        self.outputs: list[dict[str, Any]] = plan["outputs"]
        self.constants: dict[str, np.ndarray] = {}
        for name in plan.get("initializers", []):
            self.constants[name] = tensor_array(source.tensors[name])
        self.steps = self._bind(plan["nodes"], source.tensors)

    def _bind(self, nodes: list[dict[str, Any]], tensors: dict[str, TensorData]) -> list[Step]:
        keep = set(self.constants) | {o["name"] for o in self.outputs}
        last_use: dict[str, int] = {}
        for i, n in enumerate(nodes):
            for x in n["inputs"]:
                if x:
                    last_use[x] = i
        steps = []
        for i, n in enumerate(nodes):
            fn = OPS.get(n["op_type"])
            if fn is None:
                raise UnsupportedError(f"ONNX op {n['op_type']} (node {n['name']}) is not supported")
            attrs: dict[str, Any] = {"_num_outputs": len(n["outputs"])}
            for key, a in n["attributes"].items():
                attrs[key] = tensor_array(tensors[a["value"]]) if a["type"] == "tensor" else a["value"]
            frees = tuple(x for x in set(n["inputs"]) if x and last_use.get(x) == i and x not in keep)
            steps.append(Step(n["name"], n["op_type"], fn, tuple(n["inputs"]), tuple(n["outputs"]), attrs, frees))
        return steps

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
        values: dict[str, np.ndarray] = dict(self.constants)
        values.update(self.validate(feeds))
        for step in self.steps:
            args = [values[x] if x else None for x in step.inputs]
            while args and args[-1] is None:
                args.pop()
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
            for name in step.frees:
                values.pop(name, None)
        return {o["name"]: np.asarray(values[o["name"]]) for o in self.outputs}
