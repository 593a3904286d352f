"""What a call from Python into a numba kernel costs, by how its arguments travel (issue 40: the decode layer's
arguments as a struct). Each form calls a kernel that reads one value, so the figure is numba's dispatch: typing
each argument (an array's dtype, rank and layout), finding the compiled version, unboxing the arguments.

    .venv/bin/python benchmarks/dispatch_cost.py [--calls 20000] [--rounds 7]

Forms, all with the same 25 arrays of fixed weights (20 float32 vectors, 5 uint8 matrices) behind them:
- 45 positional arguments (decode_layer.attention_half's shape: 25 arrays, 15 ints, 2 floats, 3 bools);
- an int64 table (decode_step's rows: each array as its address and shape) plus the 22 per-step arguments
  decode_step.decode_layers takes beside it (17 arrays, 3 ints, a float, a bool);
- the same table alone;
- a tuple of the 25 arrays (numba types a heterogeneous tuple element by element, on every call);
- a numba structref holding the 25 arrays (typed from its Python proxy, one lookup).
Prints the median of `rounds` rounds of `calls` calls, in microseconds a call. Compile once before timing.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from numba import njit, types
from numba.experimental import structref


def per_call_us(f, args: tuple, calls: int, rounds: int) -> float:
    for _ in range(200):
        f(*args)
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            f(*args)
        times.append((time.perf_counter() - t0) / calls)
    return 1e6 * statistics.median(times)


@njit(nogil=True)
def _positional(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19, w0, w1, w2,
                w3, w4, i0, i1, i2, i3, i4, i5, i6, i7, i8, i9, i10, i11, i12, i13, i14, f0, f1, b0, b1, b2):  # fmt: skip
    return a0[0] + w4[0, 0] + i14


@njit(nogil=True)
def _table_and_step(table, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, i0, i1, i2, f0,
                    b0):  # fmt: skip
    return table[0, 0] + a0[0]


@njit(nogil=True)
def _table(table):
    return table[0, 0]


@njit(nogil=True)
def _tuple(arrays, a0):
    return arrays[0][0] + a0[0]


@structref.register
class _LayerType(types.StructRef):
    def preprocess_fields(self, fields):
        return tuple((name, types.unliteral(t)) for name, t in fields)


class _Layer(structref.StructRefProxy):
    pass


_FIELDS = [f"a{i}" for i in range(20)] + [f"w{i}" for i in range(5)]
structref.define_proxy(_Layer, _LayerType, _FIELDS)


@njit(nogil=True)
def _struct(layer, a0):
    return layer.a0[0] + a0[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    vecs = [np.zeros(16, np.float32) for _ in range(20)]
    mats = [np.zeros((4, 4), np.uint8) for _ in range(5)]
    table = np.zeros((30, 120), np.int64)
    forms = [
        ("45 positional arguments", _positional, (*vecs, *mats, *range(15), 1.0, 2.0, True, False, True)),
        ("int64 table + 22 per-step arguments", _table_and_step, (table, *vecs[:17], 1, 2, 3, 1.0, True)),
        ("int64 table alone", _table, (table,)),
        ("tuple of 25 arrays + 1 array", _tuple, ((*vecs, *mats), vecs[0])),
        ("structref of 25 arrays + 1 array", _struct, (_Layer(*vecs, *mats), vecs[0])),
    ]
    for name, f, args in forms:
        print(f"{name:38s} {per_call_us(f, args, a.calls, a.rounds):6.2f} us/call")


if __name__ == "__main__":
    main()
