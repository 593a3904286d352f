"""The CPU features the kernels compile for, and every MODELC_* switch of the kernels: read once, here.

Each flag is read at import from llvmlite's host features, and an environment switch can turn it
(and every flag that needs it) off, to run what a smaller CPU runs:

| flag | the host has | turned off by | what it selects |
|---|---|---|---|
| `HAS_AVX2` | avx2 + fma | `MODELC_NO_AVX2` | 256-bit int8 dots (`vpmaddubsw`/`vpmaddwd`); else portable LLVM vector IR |
| `HAS_VNNI` | HAS_AVX2 + (avxvnni, or avx512vnni + avx512vl) | `MODELC_NO_VNNI` | `vpdpbusd` for the 256-bit dots |
| `HAS_AVX512_VNNI` | HAS_VNNI + avx512f/bw/vl/vnni | `MODELC_NO_AVX512` | 512-bit dots: K-quant/IQ matvec, register tiles |
| `HAS_AVX512` | HAS_AVX512_VNNI + avx512vbmi | `MODELC_NO_AVX512` | 16-lane Q4_0/Q8_0/F16 matvec (`vpermt2b`) |
| `HAS_AMX` | HAS_AVX512_VNNI + amx-tile/amx-int8, and the kernel's permission | `MODELC_NO_AMX` | AMX int8 tiles (batches, prefill) |
| `HAS_AMX_BF16` | HAS_AMX + amx-bf16 | `MODELC_NO_AMX` | AMX bf16 tiles (gemm_tile_bf16) |
| `PREFETCH_T1` | HAS_AVX2, but not HAS_AVX512_VNNI on AMD Zen 4 (`znver4`), unless `MODELC_PREFETCH_T1=0`/`1` says | `MODELC_PREFETCH_T1=0` | software prefetch in gemm_r16's one-token Q4_0/Q8_0/Q4_K/Q6_K loops (IQ4's with AVX-512) |
| `PREFETCH_L2` | PREFETCH_T1 and amx-tile (Intel's AMX server cores), unless `MODELC_PREFETCH_L2=0`/`1` says | `MODELC_PREFETCH_L2=0` | that prefetch into L2 (prefetcht1) in those loops but IQ4's |

So `MODELC_NO_AVX512=1 MODELC_NO_VNNI=1 MODELC_NO_AMX=1` runs what an AVX2-only CPU (AMD Zen 3)
runs, and `MODELC_NO_AVX2=1` the portable code (what every other CPU runs: on aarch64 LLVM lowers it
to NEON, docs/arm.md). The other switches the kernels read:
`MODELC_KERNELS=ref` (numpy twins, `use_reference`), and the tuning numbers of plan.py
(`MODELC_PREFILL_T`, `MODELC_PREFILL_T_FLOAT`), linear.py (`MODELC_PARALLEL_CHUNK`) and
hugepages.py (`MODELC_HUGEPAGES=0`: weights served from the file mapping, not moved onto huge
pages after load).

The intrinsics are compiled for these flags; numba's index does not key on them, so
kernels/runtime/jit_cache.py puts the flags in the cache folder's name. No numba here.
"""

from __future__ import annotations

import ctypes
import os
import platform

import llvmlite.binding as llb


def _host_features() -> dict[str, bool]:
    try:
        return {k: bool(v) for k, v in llb.get_host_cpu_features().items()}
    except RuntimeError:  # features not reported on this host
        return {}


def _host_cpu_name() -> str:
    try:
        return llb.get_host_cpu_name()
    except RuntimeError:
        return ""


def _off(name: str) -> bool:
    return bool(os.environ.get(name))


def _has(*names: str) -> bool:
    return all(FEATURES.get(n, False) for n in names)


def _amx_permitted() -> bool:
    """Linux hands out the AMX tile state only after arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA) per process."""
    if not _has("amx-tile", "amx-int8") or platform.machine().lower() not in ("x86_64", "amd64"):
        return False  # (158 is arch_prctl on x86-64 only: never make that syscall elsewhere)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.syscall(158, 0x1023, 18) == 0  # SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XTILEDATA
    except (OSError, AttributeError):
        return False


FEATURES = _host_features()
"""llvmlite's host CPU features (name -> present)."""

CPU_NAME = _host_cpu_name()
"""LLVM's name of the host CPU (znver3, znver4, sapphirerapids, emeraldrapids, ...; "" where unknown)."""

HAS_AVX2 = not _off("MODELC_NO_AVX2") and _has("avx2", "fma")
"""The int8 dot compiles to vpmaddubsw/vpmaddwd (x86 AVX2)."""

HAS_VNNI = HAS_AVX2 and not _off("MODELC_NO_VNNI") and (_has("avxvnni") or _has("avx512vnni", "avx512vl"))
"""The 256-bit int8 dot is one vpdpbusd (AVX-VNNI or AVX512-VNNI+VL) instead of vpmaddubsw+vpmaddwd."""

HAS_AVX512_VNNI = HAS_VNNI and not _off("MODELC_NO_AVX512") and _has("avx512f", "avx512bw", "avx512vl", "avx512vnni")
"""A 64-byte int8 dot is one zmm vpdpbusd (K-quant / IQ super-blocks, the register tiles)."""

HAS_AVX512 = HAS_AVX512_VNNI and _has("avx512vbmi")
"""The 16-lane kernels (Q4_0/Q8_0 matvec, F16 conversion) compile to zmm vpdpbusd / vpermt2b / vcvtph2ps."""

HAS_AMX = HAS_AVX512_VNNI and not _off("MODELC_NO_AMX") and _amx_permitted()
"""The AMX int8 tiles may be used (CPU, kernel permission, AVX512-VNNI for the rest)."""

HAS_AMX_BF16 = HAS_AMX and _has("amx-bf16")
"""The AMX bf16 tiles (tdpbf16ps) may be used too: gemm_tile_bf16 (MODELC_NO_AMX turns them off with the int8 ones)."""

PREFETCH_T1 = {"1": True, "0": False}.get(
    os.environ.get("MODELC_PREFETCH_T1", ""), HAS_AVX2 and not (HAS_AVX512_VNNI and CPU_NAME == "znver4")
)
"""gemm_r16's one-token loops prefetch ahead (gemm_r16.PREFETCH_BYTES) where the hardware prefetcher alone streams
less. A per-CPU default from the three CPUs measured (docs/benchmarks.md): on for Zen 3 (Q4_0 decode +7-8%) and
Emerald Rapids (streamed, alternating in one process: Q4_0 +26%, Q4_K +35%, Q8_0 +6%), off for Zen 4's AVX-512
kernels (5-15% more without); unmeasured CPUs get the prefetch. MODELC_PREFETCH_T1=1 or 0 overrides."""

PREFETCH_L2 = PREFETCH_T1 and {"1": True, "0": False}.get(os.environ.get("MODELC_PREFETCH_L2", ""), _has("amx-tile"))
"""Where PREFETCH_T1, gemm_r16's one-token loops (Q4_0, Q4_1, Q8_0, Q4_K, Q6_K; not IQ4's) prefetch into L2
(prefetcht1) rather than into every level (prefetcht0): a prefetch into L1 holds one of the core's few L1 fill
buffers for a whole memory round trip. On by default on Intel's AMX server cores (Emerald Rapids measured, an 8B's
matrices streamed, GB/s: Q4_K 16.7-21.4 -> 22.5-23.8; Q8_0 18.9-22.2 -> 19.2-22.3; Q6_K's output head 17.4 -> 19.8,
a part at a time; Q4_0 17.2 -> 18.5; docs/benchmarks.md, issue 42, 2026-12-07). MODELC_PREFETCH_L2=1 or 0 overrides."""

WIDE_DOT_EXACT = HAS_VNNI or not HAS_AVX2
"""The 64-byte unsigned x signed dot is exact for codes up to 255 (VNNI or the portable IR);
the AVX2 vpmaddubsw pair saturates above 63, so Q8_0's 0..255 codes need this."""


def use_reference() -> bool:
    """True when MODELC_KERNELS=ref asks for the numpy reference kernels (read per call: tests set it)."""
    return os.environ.get("MODELC_KERNELS", "").lower() == "ref"


def env_int(name: str, default: int) -> int:
    """An integer tuning switch from the environment."""
    return int(os.environ.get(name, str(default)))


def describe() -> dict[str, bool]:
    """The flags above by name (for `modelc info`-style output and benchmark headers)."""
    names = ("HAS_AVX2", "HAS_VNNI", "HAS_AVX512_VNNI", "HAS_AVX512", "HAS_AMX", "HAS_AMX_BF16", "PREFETCH_L2",
             "PREFETCH_T1", "WIDE_DOT_EXACT")  # fmt: skip
    return {n: bool(globals()[n]) for n in names}
