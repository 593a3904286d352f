"""modelc: turn model weights into one .modelc file and serve it fast on CPUs."""

from __future__ import annotations

from modelc import spin  # noqa: F401  (first: sets the thread-spin environment before numpy or numba load)
from modelc.version import __version__

__all__ = ["__version__", "Engine", "AsyncEngine"]


def __getattr__(name: str):  # lazy: `import modelc` must stay cheap (no numba import)
    if name == "Engine":
        from modelc.api.engine import Engine

        return Engine
    if name == "AsyncEngine":
        from modelc.api.async_engine import AsyncEngine

        return AsyncEngine
    raise AttributeError(name)
