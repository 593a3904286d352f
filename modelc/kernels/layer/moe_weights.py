"""A mixture-of-experts layer's expert weights stacked as stored, for the one-call expert kernel (moe_ffn.py).

GGUF stores each projection of all experts as one 3-D tensor (E, rows, cols); MoeExperts keeps those bytes
as (E, rows, row_bytes) uint8 views (zero-copy), so a kernel can index any expert. No numba here: the
numba kernel (moe_ffn.py) and its numpy twin (ref_moe.py) both take a MoeExperts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from modelc.errors import FormatError
from modelc.ir import DataType, TensorData
from modelc.kernels.matmul.gemm_weight import Weight


@dataclass(frozen=True, slots=True)
class MoeExperts:
    """gate, up: (E, F, row_bytes) uint8 of (F, C) weights; down: (E, C, row_bytes) uint8 of (C, F) weights.

    Biases (gpt-oss): gate_bias, up_bias (E, F) f32 and down_bias (E, C) f32, else None. oss: gpt-oss's
    clamped SwiGLU instead of SiLU(gate) * up. router: the (E, C) F32 router weight (and its (E,) bias) when
    the kernel computes the router logits itself (moe_ffn with logits None), else None. gate_r16, up_r16,
    down_r16: that projection repacked per expert by gemm_r16.repack ((E, rows/16, row blocks x BYTES)
    uint8, made by the model loader for the numba kernels), or None; moe_ffn then reads only the copy.
    """

    gate_dtype: DataType
    up_dtype: DataType
    down_dtype: DataType
    gate: np.ndarray  # (E, F, gate row bytes) uint8
    up: np.ndarray  # (E, F, up row bytes) uint8
    down: np.ndarray  # (E, C, down row bytes) uint8
    gate_bias: np.ndarray | None = None  # (E, F) f32
    up_bias: np.ndarray | None = None  # (E, F) f32
    down_bias: np.ndarray | None = None  # (E, C) f32
    oss: bool = False
    router: np.ndarray | None = None  # (E, C) f32
    router_bias: np.ndarray | None = None  # (E,) f32
    gate_r16: np.ndarray | None = None  # (E, F/16, C/256 * 2304) uint8 (Q4_K; see gemm_r16.BYTES)
    up_r16: np.ndarray | None = None
    down_r16: np.ndarray | None = None  # (E, C/16, F/256 * 2304)

    @property
    def num_experts(self) -> int:
        return self.gate.shape[0]

    @property
    def ffn(self) -> int:  # F
        return self.gate.shape[1]

    @property
    def hidden(self) -> int:  # C
        return self.down.shape[1]

    def weight(self, which: str, e: int) -> Weight:
        """Expert e's "gate", "up" or "down" projection as a Weight (a view; no fixed plan)."""
        dt = getattr(self, which + "_dtype")
        rows, cols = (self.hidden, self.ffn) if which == "down" else (self.ffn, self.hidden)
        return Weight(dt, rows, cols, getattr(self, which)[e], None)


def _stacked(t: TensorData, rows: int, cols: int, name: str) -> np.ndarray:
    E = t.shape[0]
    if len(t.shape) != 3 or t.shape[1:] != (rows, cols):
        raise FormatError(f"tensor {name} has shape {t.shape}, expected ({E}, {rows}, {cols})")
    return t.data.reshape(E, rows, t.dtype.nbytes((cols,)))


def stack_experts(
    gate: TensorData,
    up: TensorData,
    down: TensorData,
    *,
    biases: tuple | None = None,
    oss: bool = False,
    router: Weight | None = None,
    router_bias: np.ndarray | None = None,
) -> MoeExperts:
    """gate, up (E, F, C) and down (E, C, F) stored tensors as a MoeExperts (views); biases: (gate (E, F), up
    (E, F), down (E, C)) f32 arrays or None; router: the (E, C) router weight, kept when it is F32."""
    E, F, C = gate.shape if len(gate.shape) == 3 else (0, 0, 0)
    g, u, d = _stacked(gate, F, C, "gate"), _stacked(up, F, C, "up"), _stacked(down, C, F, "down")
    if not (up.shape[0] == down.shape[0] == E):
        raise FormatError(f"expert tensors disagree on the expert count: {gate.shape}, {up.shape}, {down.shape}")
    gb, ub, db = biases if biases is not None else (None, None, None)
    r = None
    if router is not None and router.dtype is DataType.F32 and router.shape == (E, C):
        r = router.blocks.view(np.float32).reshape(E, C)
    return MoeExperts(
        gate.dtype, up.dtype, down.dtype, g, u, d, gb, ub, db, oss, r, router_bias if r is not None else None
    )
