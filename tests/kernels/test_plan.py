"""kernels/plan.py (the matmul kernel table) and kernels/cpu.py (CPU flags, MODELC_NO_* switches)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from modelc.ir import DataType
from modelc.kernels import cpu, linear, plan, ref_linear
from modelc.kernels.gemm_random import random_tensor
from modelc.kernels.plan import Path

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _w(name: str, cols: int = 256) -> linear.Weight:
    return linear.prepare_weight(random_tensor(DataType[name], 8, cols, np.random.default_rng(0)))


def test_every_cpu_has_these_rows() -> None:
    assert plan.plan_matmul(_w("F32"), 1) is Path.BLAS
    assert plan.plan_matmul(_w("F32"), 2) is Path.FLOAT
    assert plan.plan_matmul(_w("F16"), 3) is Path.HALF
    assert plan.plan_matmul(_w("F16"), plan.PREFILL_MIN_T_FLOAT) is Path.BLAS
    assert plan.plan_matmul(_w("Q4_K"), 1) is Path.MATVEC_K
    assert plan.plan_matmul(_w("IQ4_XS"), 1) is Path.MATVEC_K
    assert plan.plan_matmul(_w("IQ4_NL"), 1) is Path.MATVEC_IQ
    assert plan.plan_matmul(_w("Q4_0"), 1) is Path.MATVEC
    assert plan.plan_matmul(_w("Q5_0"), 1) is Path.ROWS
    assert plan.plan_matmul(_w("Q5_0"), plan.PREFILL_MIN_T) is Path.BLAS
    assert plan.plan_matmul(_w("Q6_K"), 2) is Path.TILE
    assert plan.plan_matmul(_w("Q4_0"), 4) is (Path.AMX if cpu.HAS_AMX else Path.TILE)
    big = 1 << 20
    assert plan.plan_matmul(_w("Q6_K"), big) is Path.BLAS


def test_reference_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODELC_KERNELS", "ref")
    assert plan.plan_matmul(_w("Q4_0"), 1) is Path.REF


def test_warm_tokens_reach_every_path_of_the_table() -> None:
    """warm_tokens names the smallest T for every path a weight can take at any T up to 1024."""
    for name in ("F32", "F16", "Q4_0", "Q8_0", "Q4_K", "Q6_K", "Q5_K", "IQ4_XS", "Q5_0"):
        w = _w(name)
        seen = {plan.plan_matmul(w, t) for t in range(1, 1025)}
        points = plan.warm_tokens(w)
        assert set(points) == seen, name
        for path, t in points.items():
            assert plan.plan_matmul(w, t) is path
            assert all(plan.plan_matmul(w, u) is not path for u in range(1, t))


@pytest.mark.parametrize("name", ["Q4_0", "Q4_K", "Q5_0", "F16"])
def test_matmul_runs_the_planned_path(name: str) -> None:
    """Each planned path gives the numbers of its twin (int8 paths: the activation-quantizing twin)."""
    w = _w(name, 512)
    for t in plan.warm_tokens(w).values():
        x = np.random.default_rng(t).standard_normal((t, w.cols)).astype(np.float32)
        out = np.full((t, w.rows), np.nan, np.float32)
        linear.matmul(out, x, w)
        want = np.empty_like(out)
        int8 = plan.plan_matmul(w, t) in plan.INT8_PATHS
        (ref_linear.matmul_qact if int8 else ref_linear.matmul)(want, x, w)
        assert float(np.abs(out - want).max() / np.abs(want).max()) < 2e-5, (name, t)


_FLAGS = "from modelc.kernels import cpu; print(' '.join(str(v) for v in cpu.describe().values()))"


@pytest.mark.parametrize(
    "switch, off",
    [
        ("MODELC_NO_AMX", {"HAS_AMX"}),
        ("MODELC_NO_AVX512", {"HAS_AVX512_VNNI", "HAS_AVX512", "HAS_AMX"}),
        ("MODELC_NO_VNNI", {"HAS_VNNI", "HAS_AVX512_VNNI", "HAS_AVX512", "HAS_AMX"}),
        ("MODELC_NO_AVX2", {"HAS_AVX2", "HAS_VNNI", "HAS_AVX512_VNNI", "HAS_AVX512", "HAS_AMX"}),
    ],
)
def test_switches_turn_off_a_flag_and_all_that_need_it(switch: str, off: set[str]) -> None:
    env = dict(os.environ, **{switch: "1"}, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-c", _FLAGS], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    got = dict(zip(cpu.describe(), (v == "True" for v in p.stdout.split()), strict=True))
    for name, value in got.items():
        if name in off:
            assert value is False, name
        elif name != "WIDE_DOT_EXACT":
            assert value == cpu.describe()[name], name


def test_plan_prints_its_table() -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-m", "modelc.kernels.plan"], env=env, capture_output=True, text=True,
                       timeout=300)  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    assert "Q4_0" in p.stdout and "T>=1: matvec" in p.stdout
