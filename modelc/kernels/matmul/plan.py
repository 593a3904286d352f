"""Which kernel runs out = x @ W.T for a weight type, a token count T and this CPU: the one table.

`plan_matmul(w, t)` returns a `Path`; `linear.matmul` runs it, and warmup (engine/warm.py)
asks `warm_tokens(w)` for one T per path a weight can reach, so every kernel a request can
reach is compiled before the first request. The CPU flags come from cpu.py; the bounds below
were measured (their docstrings say how). In table form (first matching row wins):

| weight | T | CPU | path |
|---|---|---|---|
| any | any | `MODELC_KERNELS=ref` | REF: numpy twins (ref_linear) |
| repacked at load, Q4_0, Q8_0, Q4_K, Q6_K | >= R16_AMX_MIN_T | HAS_AMX_BF16 and AMX_BF16 (opt-in) | AMX_BF16: AMX bf16 tiles from the repacked copy |
| repacked at load, Q4_0, Q8_0, Q4_K, Q6_K | >= R16_AMX_MIN_T | HAS_AMX | AMX_R16: AMX tiles from the repacked copy |
| repacked at load (Q4_0, Q4_1, Q8_0, Q4_K, Q6_K, IQ4_NL, IQ4_XS) | any | any | R16: gemm_r16 (IQ4: gemm_r16_iq4, Q6_K: gemm_r16_q6k) |
| F16 / BF16 / F32 | >= PREFILL_MIN_T_FLOAT, or F32 at T = 1 | any | BLAS (sgemm / sgemv on fp32) |
| F32 | 2 .. 31 | any | FLOAT: gemm_float.smatmul |
| F16 / BF16 | < PREFILL_MIN_T_FLOAT | any | HALF: gemm_float.hmatmul |
| I8 / I4 rows not in whole 32-blocks | any | any | BLAS |
| AMX kinds (Q4_0, Q8_0, Q4_K) | >= PREFILL_MIN_T, <= AMX_PREFILL_MAX_T | HAS_AMX | AMX tiles |
| register-tile kinds | >= PREFILL_MIN_T, <= ZMM_PREFILL_MAX_T | HAS_AVX512_VNNI, no AMX for the kind | TILE |
| other quantized | >= PREFILL_MIN_T | any | BLAS (dequantize panels + sgemm) |
| Q4_K / Q5_K / Q6_K / IQ4_XS | 1 | any | MATVEC_K: gemm_fused_k (256-element super-blocks) |
| IQ4_NL / MXFP4 | 1 | any | MATVEC_IQ: gemm_fused_iq |
| IQ2_XXS / IQ2_XS / IQ2_S / IQ3_XXS / IQ3_S / IQ1_S / IQ1_M / TQ1_0 / TQ2_0 | 1 .. GRID_MAX_T | any | MATVEC_IQ: gemm_fused_grid (grid rows gathered in registers) |
| Q4_0 / Q8_0 | 1 | any | MATVEC: gemm_fused |
| AMX kinds | >= AMX_MIN_T | HAS_AMX | AMX tiles |
| register-tile kinds (Q4_0, Q4_K, Q6_K; Q8_0 where cpu.WIDE_DOT_EXACT) | 2 .. | any | TILE: gemm_tile |
| other quantized | 2 .. | any | ROWS: gemm_int.qmatmul_rows |

`python -m modelc.kernels.matmul.plan` prints the table for this CPU and the common weight types.
No numba kernels run here; this module only reads the kernels' kind sets.
"""

from __future__ import annotations

import enum
from types import SimpleNamespace
from typing import Protocol

import numpy as np

from modelc.ir import DataType
from modelc.kernels.matmul import (
    gemm_fused,
    gemm_fused_grid,
    gemm_fused_iq,
    gemm_fused_k,
    gemm_r16,
    gemm_tile,
    gemm_tile_bf16,
)
from modelc.kernels.quant import quant
from modelc.kernels.runtime import cpu


class Path(enum.Enum):
    """A matmul kernel (linear.matmul runs it)."""

    REF = "ref"  # ref_linear.matmul: numpy dequantize + @, fp32
    BLAS = "blas"  # gemm_blas.blas_matmul: dequantize panels into scratch + sgemm, fp32
    FLOAT = "float"  # gemm_float.smatmul: F32 weights, 4-row tiles
    HALF = "half"  # gemm_float.hmatmul: F16 / BF16 converted in registers
    MATVEC_K = "matvec_k"  # gemm_fused_k.qmatvec_k: T=1 Q4_K/Q5_K/Q6_K/IQ4_XS, int8 activations
    MATVEC_IQ = "matvec_iq"  # gemm_fused_iq.qmatvec_iq: T=1 IQ4_NL/MXFP4; T<=GRID_MAX_T grid i-quants, TQ1_0/TQ2_0
    MATVEC = "matvec"  # gemm_fused.qmatvec: T=1 Q4_0/Q8_0
    AMX = "amx"  # gemm_tile_amx.qmatmul_amx: AMX int8 tiles, 16 rows x 16 tokens
    AMX_R16 = "amx_r16"  # gemm_tile_amx.qmatmul_amx_r16: the same tiles from gemm_r16's copy (prefill, repacked)
    AMX_BF16 = "amx_bf16"  # gemm_tile_bf16.qmatmul_bf16_r16: AMX bf16 tiles from gemm_r16's copy (opt-in, AMX_BF16)
    TILE = "tile"  # gemm_tile.qmatmul_tile: register tiles of 4 rows x 4 tokens
    R16 = "r16"  # gemm_r16.qmatmul_r16: Q4_0/Q4_1/Q8_0/Q4_K/Q6_K/IQ4_NL/IQ4_XS repacked at load into 16 interleaved rows, any T
    ROWS = "rows"  # gemm_int.qmatmul_rows: each row unpacked once to L1, any quantized kind


class WeightLike(Protocol):
    """What the plan reads of a weight (gemm_weight.Weight, which asks fixed_paths for its `paths` when made)."""

    dtype: DataType
    cols: int
    r16: np.ndarray | None  # the copy repacked for gemm_r16, where the loader made one
    paths: tuple  # fixed_paths' answer, on a made Weight (path() reads it)


INT8_PATHS = frozenset(
    {Path.MATVEC_K, Path.MATVEC_IQ, Path.MATVEC, Path.AMX, Path.AMX_R16, Path.TILE, Path.ROWS, Path.R16}
)
"""Paths that quantize the activations to int8 blocks first (quant.quantize_act)."""

PREFILL_MIN_T = cpu.env_int("MODELC_PREFILL_T", 32)
"""From this many tokens on, a quantized matmul dequantizes into scratch and uses BLAS (fp32
results), except where the int8 tiles are faster (AMX_PREFILL_MAX_T, ZMM_PREFILL_MAX_T). Below this T every
quantized weight runs int8. Measured: docs/benchmarks.md, "The matmul plan's bounds"."""

PREFILL_MIN_T_FLOAT = cpu.env_int("MODELC_PREFILL_T_FLOAT", 32)
"""The same for F16/BF16/F32 weights: their small-T kernels are FMA-bound. Measured: docs/benchmarks.md, "The
matmul plan's bounds"."""

_Q4_0, _Q8_0, _Q4_K, _Q6_K = (quant.KIND[d] for d in (DataType.Q4_0, DataType.Q8_0, DataType.Q4_K, DataType.Q6_K))

AMX_MIN_T = {_Q4_0: 4, _Q8_0: 6, _Q4_K: 6}
"""Per kind (Q4_0, Q8_0, Q4_K): from this many tokens on, the AMX tiles run the type (where cpu.HAS_AMX) for a
weight not repacked for gemm_r16 (R16_AMX_MIN_T for those). Measured: docs/benchmarks.md, "The matmul plan's
bounds"."""

R16_AMX_MIN_T = {_Q4_0: 160, _Q8_0: 160, _Q4_K: 160, _Q6_K: 160}
"""Per kind (Q4_0, Q8_0, Q4_K, Q6_K): from this many tokens on, a weight repacked for gemm_r16 runs the AMX tiles
instead (where cpu.HAS_AMX), reading their B tiles from the repacked copy (AMX_R16: the file's bytes stay unread
after the repack, so one copy of the weights is resident): gemm_r16 is ahead up to ~128 tokens, so batched
decode (8-32 streams) and the expert batches of MoE models' one call (up to moe_ffn.R16_MAX_T = 128) stay on it.
Measured: docs/benchmarks.md, "The matmul plan's bounds". Since the AMX tiles scale in registers (2026-12-07) they
lead gemm_r16 from 64 tokens on all three kinds (docs/benchmarks.md, "Quiet measurements (2026-12-07 morning)"),
but a bound at or below 128 also moves MoE expert batches of 17-128 tokens off the experts' one call
(moe.one_call), which was not measured: the bound stays until it is."""

AMX_PREFILL_MAX_T = {_Q4_0: 1 << 30, _Q8_0: 1 << 30, _Q4_K: 1 << 30}
"""Per kind: up to this many tokens prefill (T >= PREFILL_MIN_T) stays on the AMX tiles instead of
dequantize + BLAS. Unbounded: faster at every T measured, 32..512 (the engine's prefill chunk). Measured:
docs/benchmarks.md, "The matmul plan's bounds"."""

ZMM_PREFILL_MAX_T = {_Q4_0: 96, _Q8_0: 96, _Q4_K: 96, _Q6_K: 256}
"""Per kind: up to this many tokens the 512-bit register-tile kernel (AVX512-VNNI, no AMX) runs prefill
instead of dequantize + BLAS. Without AVX512-VNNI (256-bit halves) nothing was measured: BLAS. Measured:
docs/benchmarks.md, "The matmul plan's bounds"."""

GRID_MAX_T = cpu.env_int("MODELC_GRID_MAX_T", 4)
"""Up to this many tokens the grid i-quants and TQ1_0/TQ2_0 run gemm_fused_grid (each sub-block's weights
gathered once per group of four tokens), from here on gemm_int.qmatmul_rows (each row unpacked once).
Measured: docs/benchmarks.md, "The matmul plan's bounds"."""

AMX_BF16 = cpu.HAS_AMX_BF16 and cpu.env_int("MODELC_AMX_BF16", 0) == 1
"""Opt-in (MODELC_AMX_BF16=1): where AMX_R16 would run, the AMX bf16 tiles run instead (gemm_tile_bf16: weights
and activations rounded to bf16, no int8 blocks). Kernels alone 1.4-1.8x faster than AMX_R16 on an 8B's matrices at
512 tokens and ahead of it from 64 (Emerald Rapids, docs/benchmarks.md, issue 42, 2026-12-07 afternoon). Off by
default until a model's prefill is checked with it: its numbers are not the int8 path's (closer to fp32: max error
2.2-2.5e-3 of the largest output against 5.1-5.5e-3), and the hybrid cold-start set (kernels/hybrid.py) still
rounds a repacked weight's activations to int8 blocks at every T."""

_FLOAT = (DataType.F16, DataType.BF16, DataType.F32)
_NEVER = 1 << 62


def plan_matmul(w: WeightLike, t: int, *, reference: bool | None = None) -> Path:
    """The kernel for weight `w` and `t` tokens on this CPU (the table above); MODELC_KERNELS read now
    unless `reference` says. linear.matmul runs `path(w, t)`: the weight's plan, fixed when the Weight was made."""
    if cpu.use_reference() if reference is None else reference:
        return Path.REF
    dt = w.dtype
    if dt in _FLOAT:
        if t >= PREFILL_MIN_T_FLOAT or (dt is DataType.F32 and t == 1):  # sgemv is fine
            return Path.BLAS
        return Path.FLOAT if dt is DataType.F32 else Path.HALF
    kind = quant.KIND.get(dt)
    if kind is None or w.cols % 32:  # I8/I4 rows that are not whole 32-blocks
        return Path.BLAS
    if w.r16 is not None and kind in gemm_r16.R16_KINDS:
        if cpu.HAS_AMX and t >= R16_AMX_MIN_T.get(kind, _NEVER):
            if AMX_BF16 and kind in gemm_tile_bf16.KINDS:
                return Path.AMX_BF16
            return Path.AMX_R16  # the AMX tiles on the repacked copy: as on the file's bytes, without the gathers
        return Path.R16  # 1.3x the T=1 matvec, 3.4-4.4x the tiles and BLAS at T = 8..128 (gemm_r16)
    if t >= PREFILL_MIN_T:
        if cpu.HAS_AMX and kind in AMX_PREFILL_MAX_T:
            return Path.AMX if t <= AMX_PREFILL_MAX_T[kind] else Path.BLAS
        if cpu.HAS_AVX512_VNNI and kind in gemm_tile.TILE_KINDS and t <= ZMM_PREFILL_MAX_T.get(kind, 0):
            return Path.TILE
        return Path.BLAS
    if t == 1:
        if kind in gemm_fused_k.KINDS:
            return Path.MATVEC_K
        if kind in gemm_fused_iq.KINDS:
            return Path.MATVEC_IQ
        if kind in gemm_fused.FUSED_KINDS:
            return Path.MATVEC
    if t <= GRID_MAX_T and kind in gemm_fused_grid.KINDS:
        return Path.MATVEC_IQ
    return int8_path(kind, t)


def int8_path(kind: int, t: int) -> Path:
    """AMX, TILE or ROWS: the int8-activation kernel for quant kind `kind` at `t` tokens (gemm_int.qmatmul)."""
    if cpu.HAS_AMX and t >= AMX_MIN_T.get(kind, _NEVER):
        return Path.AMX
    if kind in gemm_tile.TILE_KINDS:
        return Path.TILE
    return Path.ROWS


_FIXED: dict[tuple, tuple[Path, ...]] = {}


def fixed_paths(w: WeightLike) -> tuple[Path, ...]:
    """plan_matmul(w, t) at t = 0 .. max(_bounds()) (index t; [0] unused): weight `w`'s plan, fixed now.

    Weight.__post_init__ stores it on the weight, so MODELC_KERNELS=ref and the bounds above apply as
    they are when a model is built (the MODELC_NO_* switches are read at import, cpu.py), and a matmul
    costs a tuple index, not the table. Weights alike for the table share one tuple.
    """
    ref = cpu.use_reference()
    key = (
        w.dtype,
        w.cols % 32 == 0,
        w.r16 is not None,
        ref,
        PREFILL_MIN_T,
        PREFILL_MIN_T_FLOAT,
        cpu.HAS_AMX,
        cpu.HAS_AVX512_VNNI,
        AMX_BF16,
        *(tuple(sorted(d.items())) for d in (AMX_MIN_T, R16_AMX_MIN_T, AMX_PREFILL_MAX_T, ZMM_PREFILL_MAX_T)),
    )
    got = _FIXED.get(key)
    if got is None:
        got = _FIXED[key] = tuple(plan_matmul(w, max(t, 1), reference=ref) for t in range(max(_bounds()) + 1))
    return got


def path(w: WeightLike, t: int) -> Path:
    """The kernel linear.matmul runs for `w` at `t` >= 1 tokens: its fixed plan (the table past its end)."""
    paths = w.paths
    if t < len(paths):
        return paths[t]
    return plan_matmul(w, t, reference=paths[1] is Path.REF)


def _bounds() -> list[int]:
    """Every T at which some row of the table can change."""
    ts = {1, 2, GRID_MAX_T + 1, PREFILL_MIN_T, PREFILL_MIN_T_FLOAT, *AMX_MIN_T.values(), *R16_AMX_MIN_T.values()}
    ts |= {b + 1 for b in (*AMX_PREFILL_MAX_T.values(), *ZMM_PREFILL_MAX_T.values()) if b < 4096}
    return sorted(t for t in ts if t >= 1)


def paths_up_to(w: WeightLike, t_max: int) -> set[Path]:
    """Every path weight `w` takes at 1 .. t_max tokens."""
    return {path(w, t) for t in _bounds() if t <= t_max} | {path(w, t_max)}


def warm_tokens(w: WeightLike) -> dict[Path, int]:
    """For each path weight `w` can reach, the smallest T that reaches it (what warmup runs)."""
    out: dict[Path, int] = {}
    for t in _bounds():
        out.setdefault(path(w, t), t)
    return out


def table(dtypes: tuple[DataType, ...] | None = None, cols: int = 2048) -> list[tuple[str, str]]:
    """(weight type, "T>=1: path; T>=2: path; ...") for each type on this CPU: the plan as text."""
    rows = []
    for dt in dtypes or (
        DataType.F16,
        DataType.F32,
        DataType.Q4_0,
        DataType.Q8_0,
        DataType.Q4_K,
        DataType.Q5_K,
        DataType.Q6_K,
        DataType.IQ4_XS,
        DataType.Q5_0,
    ):
        # the plan reads only dtype, cols and whether a repacked copy exists (made at load where gemm_r16 can)
        variants = [(dt.name, None)]
        if gemm_r16.can_repack(dt, gemm_r16.GROUP, cols):
            variants.append((f"{dt.name} (repacked at load)", np.zeros((1, 0), np.uint8)))
        for name, r16 in variants:
            w = SimpleNamespace(dtype=dt, cols=cols, r16=r16)
            parts, last = [], None
            for t in _bounds():
                p = plan_matmul(w, t)
                if p is not last:
                    parts.append(f"T>={t}: {p.value}")
                    last = p
            rows.append((name, "; ".join(parts)))
    return rows


if __name__ == "__main__":
    print(" ".join(f"{k}={v}" for k, v in cpu.describe().items()))
    for name, text in table():
        print(f"{name:26s} {text}")
