"""modelc: turn model weights into one .modelc file and serve it fast on CPUs."""

from __future__ import annotations

import os

from modelc.version import __version__

# OpenMP threads (numba's parallel kernels, OpenBLAS) spin while they wait by default; on a busy
# CPU that starves a descheduled peer thread and made 2-thread decode 10x slower (measured,
# docs/kernels.md). It must be set before the first parallel kernel runs, so it is set here,
# when the package is imported. An explicit setting from the user wins.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

__all__ = ["__version__", "Engine", "AsyncEngine"]


def __getattr__(name: str):  # lazy: `import modelc` must stay cheap (no numba import)
    if name == "Engine":
        from modelc.api.engine import Engine

        return Engine
    if name == "AsyncEngine":
        from modelc.api.async_engine import AsyncEngine

        return AsyncEngine
    raise AttributeError(name)
