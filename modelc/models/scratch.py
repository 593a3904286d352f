"""Scratch: named float32 work buffers reused across forwards, grown to the largest batch seen.

Views `get(name, T)` are C-contiguous (T, N) slices of one (T_max, N) buffer, so steady-state
decoding allocates nothing per layer.
"""

from __future__ import annotations

import numpy as np


class Scratch:
    def __init__(self, widths: dict[str, int]):
        self.widths = dict(widths)
        self.capacity = 0
        self.buffers: dict[str, np.ndarray] = {}

    def reserve(self, T: int) -> None:
        if T <= self.capacity:
            return
        cap = max(T, 2 * self.capacity, 16)
        self.buffers = {k: np.empty((cap, n), np.float32) for k, n in self.widths.items()}
        self.capacity = cap

    def get(self, name: str, T: int) -> np.ndarray:
        """(T, N) float32 view; reserve(T) must have been called for this forward."""
        return self.buffers[name][:T]
