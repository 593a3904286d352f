"""ONNX execution: the interpreter that runs the plan modelc.formats.onnx records (numpy, numba via kernels)."""

from __future__ import annotations

from modelc.onnx.interpreter import OnnxProgram

__all__ = ["OnnxProgram"]
