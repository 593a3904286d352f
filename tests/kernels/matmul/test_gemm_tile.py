"""gemm_tile (the register-tiled small-T matmul behind gemm_int.qmatmul) against ref_linear.matmul_qact."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from modelc.ir import DataType
from modelc.kernels.matmul import gemm_int, gemm_tile, gemm_tile_amx, linear, plan
from modelc.kernels.matmul.gemm_random import random_tensor
from modelc.kernels.quant import quant
from modelc.kernels.reference import ref_linear
from modelc.kernels.simd import qdot_tile

EXACT_QACT = 2e-5  # relative to max |ref|: same integer dots, float summation order differs
TILE_TYPES = ["Q4_0", "Q8_0", "Q4_K", "Q6_K"]
TOKENS = [2, 3, 4, 5, 7, 8, 9, 16, 17, 31, 33]
# (N, C): odd N (a last 4-row tile with missing rows), C with an odd number of 32-blocks
SHAPES_32 = [(37, 96), (5, 512), (64, 1056)]
SHAPES_256 = [(37, 256), (5, 768), (64, 512)]


def _case(name: str, n: int, c: int, t: int, seed: int):
    rng = np.random.default_rng(seed)
    w = linear.prepare_weight(random_tensor(DataType[name], n, c, rng))
    x = rng.standard_normal((t, c)).astype(np.float32)
    xq = np.empty((t, c), np.int8)
    xd = np.empty((t, c // 32), np.float32)
    xs = np.empty((t, c // 16), np.float32)
    quant.quantize_act(xq, xd, xs, x)
    return w, x, xq, xd, xs


def _qmatmul(w: linear.Weight, xq, xd, xs, *, zmm: bool = False) -> np.ndarray:
    """gemm_int.qmatmul (the dispatch), or with zmm=True the zmm tile itself (no AMX)."""
    out = np.full((xq.shape[0], w.rows), np.nan, np.float32)  # canary: every element must be written
    kind = quant.KIND[w.dtype]
    if zmm:
        gemm_tile.qmatmul_tile(out, xq, xd, xs, w.blocks, kind)
    else:
        gemm_int.qmatmul(out, xq, xd, xs, w.blocks, kind, np.ones(1, np.float32), w.dtype in quant.SIGNED)
    assert not np.isnan(out).any()
    return out


def _relerr(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))


@pytest.mark.parametrize("name", TILE_TYPES)
def test_tile_kinds_on_this_cpu(name: str) -> None:
    kind = quant.KIND[DataType[name]]
    if name == "Q8_0":  # its 0..255 codes need VNNI (or the portable dot): not the vpmaddubsw pair
        assert (kind in gemm_tile.TILE_KINDS) == qdot_tile.WIDE_DOT_EXACT
    else:
        assert kind in gemm_tile.TILE_KINDS


@pytest.mark.parametrize("t", TOKENS)
@pytest.mark.parametrize("name", TILE_TYPES)
def test_tile_matches_qact(name: str, t: int) -> None:
    if quant.KIND[DataType[name]] not in gemm_tile.TILE_KINDS:
        pytest.skip("Q8_0 takes the rows path on this CPU")
    shapes = SHAPES_32 if DataType[name].block_size == 32 else SHAPES_256
    for k, (n, c) in enumerate(shapes):
        w, x, xq, xd, xs = _case(name, n, c, t, seed=1000 * t + k)
        want = np.empty((t, n), np.float32)
        ref_linear.matmul_qact(want, x, w)
        assert _relerr(_qmatmul(w, xq, xd, xs, zmm=True), want) < EXACT_QACT, (n, c)


@pytest.mark.parametrize("t", [2, 5, 17])
@pytest.mark.parametrize("name", TILE_TYPES)
def test_qmatmul_dispatch_matches_qact(name: str, t: int) -> None:
    """gemm_int.qmatmul, whichever kernel it picks (zmm tile, AMX, rows)."""
    shapes = SHAPES_32 if DataType[name].block_size == 32 else SHAPES_256
    for k, (n, c) in enumerate(shapes):
        w, x, xq, xd, xs = _case(name, n, c, t, seed=3000 * t + k)
        want = np.empty((t, n), np.float32)
        ref_linear.matmul_qact(want, x, w)
        assert _relerr(_qmatmul(w, xq, xd, xs), want) < EXACT_QACT, (n, c)


def test_tile_tokens_are_independent() -> None:
    """Each output row depends on its own token only (no mixing between tiles or padding)."""
    w, x, xq, xd, xs = _case("Q4_0", 21, 96, 7, seed=5)
    full = _qmatmul(w, xq, xd, xs)
    for i in range(7):
        one = _qmatmul(w, xq[i : i + 1].copy(), xd[i : i + 1].copy(), xs[i : i + 1].copy())
        np.testing.assert_allclose(one[0], full[i], rtol=1e-5, atol=1e-6 * np.abs(full).max())


@pytest.mark.parametrize("off", [0, 8, 128])
def test_prep_act(off: int) -> None:
    rng = np.random.default_rng(off)
    t, c = 3, 192
    xq = rng.integers(-127, 128, (t, c)).astype(np.int8)
    xd = rng.random((t, c // 32)).astype(np.float32)
    ini = np.zeros((t, c // 4), np.int32)
    dxl = np.empty((t, c // 4), np.float32)
    gemm_tile.prep_act(ini, dxl, xq, xd, off)
    lanes = xq.astype(np.int32).reshape(t, c // 4, 4).sum(axis=2)
    np.testing.assert_array_equal(ini, -off * lanes if off else np.zeros_like(lanes))
    np.testing.assert_array_equal(dxl, np.repeat(xd, 8, axis=1))


def test_other_kinds_keep_the_rows_path() -> None:
    w, x, xq, xd, xs = _case("Q5_K", 9, 256, 6, seed=2)
    assert quant.KIND[DataType.Q5_K] not in gemm_tile.TILE_KINDS
    want = np.empty((6, 9), np.float32)
    ref_linear.matmul_qact(want, x, w)
    assert _relerr(_qmatmul(w, xq, xd, xs), want) < EXACT_QACT


@pytest.mark.skipif(not qdot_tile.HAS_AMX, reason="no AMX int8 tiles on this CPU / kernel")
@pytest.mark.parametrize("t", [1, 2, 4, 8, 9, 15, 16, 17, 31, 32, 33, 47, 63, 65, 79, 80])
@pytest.mark.parametrize("name", ["Q4_0", "Q8_0", "Q4_K"])
def test_amx_matches_qact(name: str, t: int) -> None:
    """The AMX kernel for any T (qmatmul sends it T >= MIN_T, prefill too): odd N, odd block count,
    2..5 token tiles (full and partial)."""
    shapes = SHAPES_32 if DataType[name].block_size == 32 else SHAPES_256
    for k, (n, c) in enumerate(shapes + [(16, 2048)]):
        w, x, xq, xd, xs = _case(name, n, c, t, seed=77 * t + k)
        want = np.empty((t, n), np.float32)
        ref_linear.matmul_qact(want, x, w)
        out = np.full((t, n), np.nan, np.float32)
        gemm_tile_amx.qmatmul_amx(out, xq, xd, xs, w.blocks, quant.KIND[w.dtype])
        assert not np.isnan(out).any()
        assert _relerr(out, want) < EXACT_QACT, (n, c)


@pytest.mark.skipif(not qdot_tile.HAS_AMX, reason="no AMX int8 tiles on this CPU / kernel")
@pytest.mark.parametrize("t", [1, 9, 16, 33, 80])
@pytest.mark.parametrize("name", ["Q4_0", "Q8_0", "Q4_K", "Q6_K"])
def test_amx_on_the_repacked_copy_matches_qact(name: str, t: int) -> None:
    """qmatmul_amx_r16 (AMX tiles from gemm_r16's copy, where a repacked weight prefills): the same numbers as
    qmatmul_amx on the file's blocks up to float summation order (Q6_K: only from the repacked copy, its 16-element
    halves as two dots); full and partial token tiles, one and several 16-row groups, odd block counts."""
    from modelc.kernels.matmul import gemm_r16

    shapes = [(16, 96), (48, 1056)] if DataType[name].block_size == 32 else [(16, 256), (48, 768)]
    for k, (n, c) in enumerate(shapes):
        w, x, xq, xd, xs = _case(name, n, c, t, seed=31 * t + k)
        want = np.empty((t, n), np.float32)
        ref_linear.matmul_qact(want, x, w)
        out = np.full((t, n), np.nan, np.float32)
        gemm_tile_amx.qmatmul_amx_r16(out, xq, xd, xs, gemm_r16.repack(w.blocks, w.dtype), quant.KIND[w.dtype])
        assert not np.isnan(out).any()
        assert _relerr(out, want) < EXACT_QACT, (n, c)


@pytest.mark.skipif(not qdot_tile.HAS_AMX, reason="no AMX int8 tiles on this CPU / kernel")
@pytest.mark.parametrize("name", ["Q4_0", "Q8_0", "Q4_K", "Q6_K"])
def test_amx_token_blocks_and_k_chunks(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Activations in blocks of 16 and 32 tokens (gemm_tile_amx.blocks: several passes over the panels, the last one
    partial), and the columns in K chunks of 8 and 16 blocks (the later chunks add to out; K-quants in whole
    super-blocks, the last chunk shorter), on the file's blocks and on the repacked copy (Q6_K: the repacked copy
    only): the same numbers as one pass."""
    from modelc.kernels.matmul import gemm_r16

    t, (n, c) = 71, ((48, 1056) if DataType[name].block_size == 32 else (48, 768))
    w, x, xq, xd, xs = _case(name, n, c, t, seed=5)
    kind = quant.KIND[w.dtype]
    rw = gemm_r16.repack(w.blocks, w.dtype)
    want = np.empty((t, n), np.float32)
    ref_linear.matmul_qact(want, x, w)
    runs = [gemm_tile_amx.qmatmul_amx_r16] + ([gemm_tile_amx.qmatmul_amx] if name != "Q6_K" else [])
    # (K_BLOCK, TOKEN_BLOCK_BYTES) -> (tokens, blocks) a pass
    for k_block, tokens, got in ((1 << 30, 16 * c, (16, c // 32)), (1 << 30, 32 * c, (32, c // 32)), (8, 1 << 30, (80, 8)),
                                 (16, 16, (16, 16))):  # fmt: skip
        monkeypatch.setattr(gemm_tile_amx, "K_BLOCK", k_block)
        monkeypatch.setattr(gemm_tile_amx, "TOKEN_BLOCK_BYTES", tokens)
        assert gemm_tile_amx.blocks(t, c) == got
        for run in runs:
            out = np.full((t, n), np.nan, np.float32)
            run(out, xq, xd, xs, w.blocks if run is gemm_tile_amx.qmatmul_amx else rw, kind)
            assert not np.isnan(out).any()
            assert _relerr(out, want) < EXACT_QACT, (k_block, tokens, run.__name__)


@pytest.mark.parametrize("name", ["Q4_0", "Q8_0", "Q4_K", "Q6_K"])
def test_linear_prefill_routing(name: str) -> None:
    """From plan.PREFILL_MIN_T tokens on, the AMX kinds keep int8 activations (the AMX tiles) where
    the CPU has them, and the register-tile kinds up to plan.ZMM_PREFILL_MAX_T tokens with AVX512-VNNI;
    every other case is dequantize + BLAS (fp32 results)."""
    t = max(plan.PREFILL_MIN_T, 1) + 17
    w, x, _, _, _ = _case(name, 37, 512, t, seed=5)
    out = np.full((t, 37), np.nan, np.float32)
    linear.matmul(out, x, w)
    want = np.empty_like(out)
    kind = quant.KIND[w.dtype]
    amx = qdot_tile.HAS_AMX and kind in plan.AMX_PREFILL_MAX_T
    zmm = not amx and qdot_tile.HAS_VNNI512 and t <= plan.ZMM_PREFILL_MAX_T.get(kind, 0)
    assert plan.plan_matmul(w, t) is (plan.Path.AMX if amx else plan.Path.TILE if zmm else plan.Path.BLAS)
    (ref_linear.matmul_qact if amx or zmm else ref_linear.matmul)(want, x, w)
    assert _relerr(out, want) < EXACT_QACT


def test_prefill_is_blas_without_amx() -> None:
    """MODELC_NO_AMX=1 MODELC_NO_VNNI=1: prefill of every quantized kind goes to BLAS as before."""
    script = textwrap.dedent(
        """
        from modelc.ir import DataType
        from modelc.kernels.matmul import plan
        from modelc.kernels.simd import qdot_tile
        from tests.kernels.matmul.test_gemm_tile import _case
        print(qdot_tile.HAS_AMX, all(plan.plan_matmul(_case(n, 5, 512, 1, 0)[0], plan.PREFILL_MIN_T)
              is plan.Path.BLAS for n in ("Q4_0", "Q8_0", "Q4_K", "Q6_K")))
        """
    )
    root = pathlib.Path(__file__).resolve().parents[3]
    env = {**os.environ, "MODELC_NO_AMX": "1", "MODELC_NO_VNNI": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=root, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["False", "True"]


_FALLBACK = textwrap.dedent(
    """
    import numpy as np
    from modelc.ir import DataType
    from modelc.kernels.matmul import gemm_tile, linear
    from modelc.kernels.quant import quant
    from modelc.kernels.reference import ref_linear
    from modelc.kernels.simd import qdot, qdot_tile
    from tests.kernels.matmul.test_gemm_tile import _case, _qmatmul, _relerr
    print("flags", qdot.HAS_AVX2, qdot.HAS_VNNI, qdot_tile.HAS_VNNI512, qdot_tile.WIDE_DOT_EXACT, qdot_tile.HAS_AMX)
    for name in NAMES:
        tiled = quant.KIND[DataType[name]] in gemm_tile.TILE_KINDS
        for t in (3, 8):
            w, x, xq, xd, xs = _case(name, 13, 1024 if name.endswith("K") else 352, t, seed=t)
            want = np.empty((t, 13), np.float32)
            ref_linear.matmul_qact(want, x, w)
            print(name, t, tiled, _relerr(_qmatmul(w, xq, xd, xs), want))
    """
)


@pytest.mark.slow  # a subprocess compiling the tiles for each switch (79 s of the default run on Zen 3): as the other fallback tests
@pytest.mark.parametrize(
    "env, names",
    [
        ({"MODELC_NO_VNNI": "1"}, ["Q4_0", "Q6_K", "Q8_0"]),  # AVX2 vpmaddubsw (Q8_0: rows path)
        ({"MODELC_NO_AVX2": "1"}, ["Q4_K", "Q8_0"]),  # portable LLVM vector IR
        ({"MODELC_NO_AMX": "1"}, ["Q4_0"]),  # the zmm tile at every T
    ],
)
def test_fallback_without_vnni_or_avx2(env: dict, names: list[str]) -> None:
    """The non-VNNI / non-AVX2 dots and the path without AMX give the same numbers."""
    root = pathlib.Path(__file__).resolve().parents[3]
    script = f"NAMES = {names!r}\n" + _FALLBACK
    full_env = {**os.environ, **env}  # the kernel cache keys on the switches (jit_cache): shared, never stale
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=root, env=full_env, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.split("\n")
    flags = lines[0].split()
    assert flags[5] == "False"  # no AMX in any of these
    if "MODELC_NO_VNNI" in env:
        assert flags[2:5] == ["False", "False", "False"]
    elif "MODELC_NO_AVX2" in env:
        assert flags[1:5] == ["False", "False", "False", "True"]
    results = [ln.split() for ln in lines[1:] if ln.strip()]
    assert len(results) == 2 * len(names)
    for name, _t, tiled, err in results:
        want_tiled = name != "Q8_0" or "MODELC_NO_VNNI" not in env
        assert tiled == str(want_tiled), name
        assert float(err) < EXACT_QACT, (name, err)
