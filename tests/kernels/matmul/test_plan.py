"""kernels/matmul/plan.py (the matmul kernel table) and kernels/runtime/cpu.py (CPU flags, MODELC_NO_* switches)."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from modelc.ir import DataType
from modelc.kernels.matmul import linear, plan
from modelc.kernels.matmul.gemm_random import random_tensor
from modelc.kernels.matmul.plan import Path
from modelc.kernels.reference import ref_linear
from modelc.kernels.runtime import cpu

ROOT = pathlib.Path(__file__).resolve().parents[3]


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


def test_plan_is_fixed_when_the_weight_is_prepared(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Weight's plan is fixed when it is made: the switch and the bounds as they were then."""
    w = _w("Q4_0")
    ts = range(1, len(w.paths))  # the fixed table; past it, path() follows the bounds as they are now
    before = [plan.path(w, t) for t in ts]
    monkeypatch.setenv("MODELC_KERNELS", "ref")
    assert plan.path(w, 1) is Path.MATVEC and plan.plan_matmul(w, 1) is Path.REF
    assert all(plan.path(_w("Q4_0"), t) is Path.REF for t in (1, 5, 40, 5000))
    monkeypatch.delenv("MODELC_KERNELS")
    monkeypatch.setattr(plan, "PREFILL_MIN_T", 2)
    monkeypatch.setattr(plan, "AMX_PREFILL_MAX_T", {})
    monkeypatch.setattr(plan, "ZMM_PREFILL_MAX_T", {})
    late = _w("Q4_0")
    assert plan.path(late, 2) is Path.BLAS and plan.path(w, 2) is not Path.BLAS
    assert [plan.path(w, t) for t in ts] == before
    assert all(plan.path(w, t) is plan.plan_matmul(w, t) for t in (len(w.paths), 1000, 5000))


def test_fixed_plan_matches_the_table() -> None:
    for name in ("F32", "F16", "Q4_0", "Q8_0", "Q4_K", "Q6_K", "IQ4_XS", "Q5_0"):
        w = _w(name)
        assert all(plan.path(w, t) is plan.plan_matmul(w, t) for t in range(1, 1025)), name
    bare = linear.Weight(DataType.Q4_0, 8, 256, np.zeros((8, 144), np.uint8), None)
    assert plan.path(bare, 1) is Path.MATVEC and plan.path(dataclasses.replace(bare, rows=4), 1) is Path.MATVEC


def test_replace_fixes_the_plan_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """dataclasses.replace makes a new Weight: its plan is fixed then (a loader that swaps the bytes)."""
    w = _w("Q4_0")
    monkeypatch.setenv("MODELC_KERNELS", "ref")
    assert plan.path(w, 1) is Path.MATVEC and plan.path(dataclasses.replace(w, blocks=w.blocks.copy()), 1) is Path.REF


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


def test_paths_up_to_are_every_path_from_one_token_to_the_bound() -> None:
    """MoeFFN.one_call asks whether every expert matmul up to R16_MAX_T tokens is gemm_r16's (repacked weights)."""
    from tests.kernels.r16_cases import with_r16

    for name in ("F16", "Q4_0", "Q8_0", "Q4_K", "Q6_K", "Q5_0"):
        w0 = linear.prepare_weight(random_tensor(DataType[name], 16, 256, np.random.default_rng(0)))
        for w in (w0, with_r16(w0)) if name in ("Q4_0", "Q8_0", "Q4_K", "Q6_K") else (w0,):
            for top in (1, 5, 31, 32, 127, 128, 129, 159, 160, 200, 1024):
                assert plan.paths_up_to(w, top) == {plan.plan_matmul(w, t) for t in range(1, top + 1)}, (name, top)


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


_FLAGS = "from modelc.kernels.runtime import cpu; print(' '.join(str(v) for v in cpu.describe().values()))"


def _flags(**switches: str) -> dict[str, bool]:
    """cpu.describe() of a fresh interpreter with these environment switches."""
    env = dict(os.environ, **switches, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-c", _FLAGS], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    return dict(zip(cpu.describe(), (v == "True" for v in p.stdout.split()), strict=True))


@pytest.mark.parametrize(
    "switch, off",
    [
        ("MODELC_NO_AMX", {"HAS_AMX", "HAS_AMX_BF16"}),
        ("MODELC_NO_AVX512", {"HAS_AVX512_VNNI", "HAS_AVX512", "HAS_AMX", "HAS_AMX_BF16"}),
        ("MODELC_NO_VNNI", {"HAS_VNNI", "HAS_AVX512_VNNI", "HAS_AVX512", "HAS_AMX", "HAS_AMX_BF16"}),
        (
            "MODELC_NO_AVX2",
            {
                "HAS_AVX2",
                "HAS_VNNI",
                "HAS_AVX512_VNNI",
                "HAS_AVX512",
                "HAS_AMX",
                "HAS_AMX_BF16",
                "PREFETCH_T1",
                "PREFETCH_L2",
            },
        ),
    ],
)
def test_switches_turn_off_a_flag_and_all_that_need_it(switch: str, off: set[str]) -> None:
    got = _flags(**{switch: "1"})
    for name, value in got.items():
        if name in off:
            assert value is False, name
        elif name not in ("WIDE_DOT_EXACT", "PREFETCH_T1", "PREFETCH_L2"):  # derived: a switch may turn these on
            assert value == cpu.describe()[name], name


@pytest.mark.parametrize("value", ["", "0", "1"])
def test_one_token_prefetch_defaults_to_avx2_but_zen4s_avx512_and_the_switch_overrides(value: str) -> None:
    got = _flags(MODELC_PREFETCH_T1=value)
    default = got["HAS_AVX2"] and not (got["HAS_AVX512_VNNI"] and cpu.CPU_NAME == "znver4")
    assert got["PREFETCH_T1"] is {"": default, "0": False, "1": True}[value]


@pytest.mark.parametrize("t1, l2", [("", ""), ("", "0"), ("", "1"), ("0", "1")])
def test_the_l2_prefetch_defaults_to_amx_cores_needs_the_one_token_prefetch_and_the_switch_overrides(t1, l2) -> None:
    got = _flags(MODELC_PREFETCH_T1=t1, MODELC_PREFETCH_L2=l2)
    want = {"": cpu.FEATURES.get("amx-tile", False), "0": False, "1": True}[l2]
    assert got["PREFETCH_L2"] is (got["PREFETCH_T1"] and want)


def test_plan_prints_its_table() -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-m", "modelc.kernels.matmul.plan"], env=env, capture_output=True, text=True,
                       timeout=300)  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    assert "Q4_0" in p.stdout and "T>=1: matvec" in p.stdout
    assert "Q4_0 (repacked at load)" in p.stdout and "T>=1: r16" in p.stdout  # the rows weights repacked at load take


def test_repacked_weights_prefill_on_amx_from_the_repacked_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    """A repacked weight leaves gemm_r16 for the AMX tiles from R16_AMX_MIN_T tokens, read from its repacked copy
    (AMX_R16: the stored bytes stay unread after the repack, one copy resident), and keeps gemm_r16 without AMX
    or for a kind AMX does not take (Q4_1); Q6_K too (its half-block dots, gemm_tile_amx.amx_r16_q6_k)."""
    from modelc.kernels.matmul import gemm_r16

    w = _w("Q4_0", 256)
    w = dataclasses.replace(w, r16=gemm_r16.repack(w.blocks, w.dtype))
    monkeypatch.setattr(cpu, "HAS_AMX", True)
    t = plan.R16_AMX_MIN_T[plan.quant.KIND[DataType.Q4_0]]
    assert plan.plan_matmul(w, t - 1) is Path.R16 and plan.plan_matmul(w, t) is Path.AMX_R16
    assert plan.plan_matmul(w, 512) is Path.AMX_R16
    q6 = _w("Q6_K", 256)
    q6 = dataclasses.replace(q6, r16=gemm_r16.repack(q6.blocks, q6.dtype))
    t6 = plan.R16_AMX_MIN_T[plan.quant.KIND[DataType.Q6_K]]
    assert plan.plan_matmul(q6, t6 - 1) is Path.R16 and plan.plan_matmul(q6, 512) is Path.AMX_R16
    q41 = _w("Q4_1", 256)
    q41 = dataclasses.replace(q41, r16=gemm_r16.repack(q41.blocks, q41.dtype))
    assert plan.plan_matmul(q41, 512) is Path.R16
    monkeypatch.setattr(cpu, "HAS_AMX", False)
    assert plan.plan_matmul(w, 512) is Path.R16
