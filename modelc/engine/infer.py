"""The `infer` capability: /infer request bodies -> MLP or ONNX plan runs -> response bodies.

Request shapes (the seed spec plus named inputs):
  {"input": x}                 one example -> {"output": y}
  {"inputs": [x1, x2, ...]}    a batch     -> {"outputs": [y1, y2, ...]}
  {"inputs": {"name": x, ...}} named graph inputs, fed as given -> {"outputs": {"output name": y, ...}}
An example x is a flat list (the seed spec: flattened into the graph input's shape, answered
flat) or a nested list in the input's shape, with or without the leading batch dimension
(answered in the output's shape, batch dimension likewise). A batch is stacked into ONE run
(one GEMM per MLP layer) when the graph's first dimension is symbolic. Synchronous; the server
calls `infer` from a worker thread.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from modelc import architectures
from modelc.errors import InvalidRequestError, UnsupportedError
from modelc.models.mlp import MlpModel
from modelc.onnx import OnnxProgram
from modelc.onnx.feeds import to_array
from modelc.source import as_source

MAX_BATCH = 4096


def supports_infer(source: Any) -> bool:
    return architectures.family(getattr(source, "architecture", None)) in architectures.INFERRING


class Inferencer:
    """`Inferencer(source).infer(payload) -> dict`; also `run_batch(list of examples) -> list of arrays`."""

    def __init__(self, source: Any) -> None:
        source = as_source(source)
        arch = str(getattr(source, "architecture", ""))
        self.name = getattr(source, "name", arch)
        self.architecture = arch
        if arch == "mlp":
            self.mlp: MlpModel | None = MlpModel(source)
            self.program: OnnxProgram | None = None
            self.spec = {"name": "input", "dtype": "F32", "shape": ["batch", self.mlp.in_features]}
        elif arch == "onnx":
            self.mlp = None
            self.program = OnnxProgram(source)
            self.spec = self.program.inputs[0] if self.program.inputs else {"name": "", "shape": []}
        else:
            raise UnsupportedError(f"/infer needs an MLP or ONNX model; {self.name!r} is a {arch} model")

    # ---------------------------------------------------------------- request handling

    def infer(self, payload: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(payload, dict):
            raise InvalidRequestError("the request body must be a JSON object")
        if ("input" in payload) == ("inputs" in payload):
            raise InvalidRequestError("send exactly one of 'input' (one example) or 'inputs' (a batch)", param="input")
        if "input" in payload:
            x = payload["input"]
            if isinstance(x, dict):
                return {"outputs": self._named(x)}
            return {"output": self.run_batch([x])[0].tolist()}
        xs = payload["inputs"]
        if isinstance(xs, dict):
            return {"outputs": self._named(xs)}
        if not isinstance(xs, list) or not xs:
            raise InvalidRequestError(
                "'inputs' must be a non-empty list of examples or an object of named inputs", param="inputs"
            )
        if len(xs) > MAX_BATCH:
            raise InvalidRequestError(
                f"'inputs' has {len(xs)} examples; at most {MAX_BATCH} per request", param="inputs"
            )
        return {"outputs": [y.tolist() for y in self.run_batch(xs)]}

    def _named(self, feeds: dict[str, Any]) -> dict[str, Any]:
        if self.program is None:
            if set(feeds) != {"input"}:
                raise InvalidRequestError("an mlp model has one input, named 'input'", param="inputs")
            return {"output": self.mlp.forward(to_array(feeds["input"], self.spec)).tolist()}
        return {k: v.tolist() for k, v in self.program.run(feeds).items()}

    # ---------------------------------------------------------------- batching

    def run_batch(self, examples: list[Any]) -> list[np.ndarray]:
        """One output array per example, in the example's form (flat in -> flat out)."""
        if self.program is not None and len(self.program.inputs) != 1:
            names = self.program.input_names
            raise InvalidRequestError(
                f"this model has inputs {names}: send 'inputs' as an object by name", param="inputs"
            )
        arrays = [to_array(x, self.spec) for x in examples]
        batched, forms = zip(*(self._as_batch(a) for a in arrays), strict=True)
        if self._stackable(batched):
            out = self._run(np.concatenate(batched, axis=0))
            parts = np.split(out, np.cumsum([b.shape[0] for b in batched])[:-1], axis=0)
        else:
            parts = [self._run(b) for b in batched]
        return [self._unbatch(p, form) for p, form in zip(parts, forms, strict=True)]

    def _as_batch(self, a: np.ndarray) -> tuple[np.ndarray, str]:
        """(array with the graph's rank, form): form is "flat", "example" (batch dim added) or "full"."""
        shape = self.spec.get("shape")
        if shape is None:
            return a, "full"
        rank = len(shape)
        if a.ndim == rank and not (a.ndim == 1 and rank > 1):
            return a, "full"
        if a.ndim == rank - 1 and rank > 0 and _batchable(shape[0]):
            return a[None], "example"
        if a.ndim == 1 and rank > 1:
            rest = shape[1:] if _batchable(shape[0]) else shape
            if not all(isinstance(d, int) and d > 0 for d in rest):
                raise InvalidRequestError(
                    f"input {self.spec['name']!r} has shape {shape}: send a nested list, a flat one is ambiguous",
                    param="input",
                )
            want = math.prod(rest)
            if a.size != want:
                raise InvalidRequestError(f"input must have {want} numbers, got {a.size}", param="input")
            return a.reshape((1, *rest) if _batchable(shape[0]) else tuple(rest)), "flat"
        raise InvalidRequestError(f"input must have shape {shape}, got {list(a.shape)}", param="input")

    def _stackable(self, batched: tuple[np.ndarray, ...]) -> bool:
        shape = self.spec.get("shape")
        if len(batched) < 2 or not shape or not (shape[0] is None or isinstance(shape[0], str)):
            return False
        return len({b.shape[1:] for b in batched}) == 1

    def _run(self, x: np.ndarray) -> np.ndarray:
        if self.mlp is not None:
            return self.mlp.forward(x)
        return self.program.run({self.spec["name"]: x})[self.program.output_names[0]]

    @staticmethod
    def _unbatch(y: np.ndarray, form: str) -> np.ndarray:
        if form == "flat":
            return y.reshape(-1)
        if form == "example" and y.ndim > 0 and y.shape[0] == 1:
            return y[0]
        return y


def _batchable(dim: Any) -> bool:
    """A leading dimension that may hold a batch: symbolic, unknown, or 1."""
    return dim is None or isinstance(dim, str) or dim == 1
