"""The op table: ONNX op_type -> implementation, and SUPPORTED_OPS for read-time checks."""

from __future__ import annotations

from modelc.onnx import ops_conv, ops_elementwise, ops_nn, ops_shape
from modelc.onnx.ops_elementwise import Op

OPS: dict[str, Op] = {**ops_elementwise.OPS, **ops_shape.OPS, **ops_nn.OPS, **ops_conv.OPS}
SUPPORTED_OPS: frozenset[str] = frozenset(OPS)
