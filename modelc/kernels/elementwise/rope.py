"""Rotary position embedding: frequency tables (numpy, once per model) and the in-place rope kernel.

"normal" rope rotates interleaved pairs (2i, 2i+1) (GGUF llama); NeoX rope rotates
(i, i + R/2) (HF llama, qwen2, phi3). Only the first 2*len(inv_freq) dims rotate.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import njit

from modelc.errors import UnsupportedError

# error_model="numpy" on every kernel here: numba's default ("python") guards each float and
# integer division with a zero check that raises, and that branch stops LLVM from vectorizing
# the loop (measured 10x on SiLU). Inputs never divide by zero here (eps > 0, Z = 16).


def rope_inv_freq(rotary_dim: int, theta: float, scaling: dict[str, Any] | None = None) -> np.ndarray:
    """Inverse frequencies (rotary_dim // 2,) float64, with HF-style linear, llama3 or long-RoPE scaling applied."""
    half = rotary_dim // 2
    inv = 1.0 / (float(theta) ** (np.arange(0, half, dtype=np.float64) * 2.0 / rotary_dim))  # (R/2,)
    if not scaling:
        return inv
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind in (None, "default"):
        return inv
    factor = float(scaling.get("factor", 1.0))
    if kind == "linear":
        return inv / factor
    if kind == "yarn":
        return _yarn(inv, rotary_dim, float(theta), factor, scaling)
    if kind in ("longrope", "su"):  # Phi-3.5/Phi-4: per-dim divisors (short factors: contexts <= the original)
        return inv / _longrope_factors(scaling, "short_factor", half)
    if kind == "llama3":
        low = float(scaling.get("low_freq_factor", 1.0))
        high = float(scaling.get("high_freq_factor", 4.0))
        old_ctx = float(scaling.get("original_max_position_embeddings", 8192))
        low_wavelen = old_ctx / low
        high_wavelen = old_ctx / high
        wavelen = 2.0 * math.pi / inv
        out = np.where(wavelen > low_wavelen, inv / factor, inv)
        smooth = (old_ctx / wavelen - low) / (high - low)
        mid = (1.0 - smooth) * inv / factor + smooth * inv
        is_mid = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
        return np.where(is_mid, mid, out)
    raise UnsupportedError(f"unsupported rope scaling type {kind!r}")


def longrope_long_inv_freq(rotary_dim: int, theta: float, scaling: dict[str, Any] | None) -> np.ndarray | None:
    """Long-RoPE's frequencies past the original context (base / long_factor), or None for other scalings."""
    if not scaling or scaling.get("rope_type", scaling.get("type")) not in ("longrope", "su"):
        return None
    if not scaling.get("long_factor"):
        return None
    return rope_inv_freq(rotary_dim, theta) / _longrope_factors(scaling, "long_factor", rotary_dim // 2)


def _longrope_factors(scaling: dict[str, Any], key: str, half: int) -> np.ndarray:
    f = np.asarray(scaling.get(key) or [], np.float64)
    if f.shape != (half,):
        raise UnsupportedError(f"longrope {key} must have {half} entries, got {f.shape[0] if f.ndim else 0}")
    return f


def _yarn(inv: np.ndarray, dim: int, base: float, factor: float, sc: dict[str, Any]) -> np.ndarray:
    """YaRN (gpt-oss, Qwen long context): interpolated (inv / factor) below a band of dims, kept above it,
    a linear ramp between; the band from beta_fast/beta_slow rotations over the original context."""
    orig = float(sc.get("original_max_position_embeddings") or 4096)
    fast, slow = float(sc.get("beta_fast") or 32.0), float(sc.get("beta_slow") or 1.0)

    def corr_dim(rotations: float) -> float:
        return dim * math.log(orig / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = corr_dim(fast), corr_dim(slow)
    if sc.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    keep = 1.0 - ramp  # 1: extrapolate (the original frequency), 0: interpolate
    return inv / factor * (1.0 - keep) + inv * keep


@njit(cache=True, nogil=True, error_model="numpy")
def rope(x, positions, inv_freq, neox):
    """Rotate x in place.

    x: (T, H, D) float32, C-contiguous, updated in place.
    positions: (T,) int32 absolute positions.
    inv_freq: (R/2,) float64, R <= D (dims >= R are left alone).
    neox: True = pairs (i, i + R/2); False = interleaved pairs (2i, 2i + 1).
    """
    T, H, _ = x.shape
    half = inv_freq.shape[0]
    cos = np.empty(half, dtype=np.float32)
    sin = np.empty(half, dtype=np.float32)
    for t in range(T):
        p = np.float64(positions[t])
        for i in range(half):
            a = p * inv_freq[i]
            cos[i] = np.float32(math.cos(a))
            sin[i] = np.float32(math.sin(a))
        for h in range(H):
            row = x[t, h]
            if neox:
                for i in range(half):
                    a0 = row[i]
                    a1 = row[i + half]
                    row[i] = a0 * cos[i] - a1 * sin[i]
                    row[i + half] = a0 * sin[i] + a1 * cos[i]
            else:
                for i in range(half):
                    a0 = row[2 * i]
                    a1 = row[2 * i + 1]
                    row[2 * i] = a0 * cos[i] - a1 * sin[i]
                    row[2 * i + 1] = a0 * sin[i] + a1 * cos[i]
