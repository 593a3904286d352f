"""modelc: turn model weights into one .modelc file and serve it fast on CPUs."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__", "Engine", "AsyncEngine"]


def __getattr__(name: str):  # lazy: `import modelc` must stay cheap (no numba import)
    if name == "Engine":
        from modelc.engine.api import Engine

        return Engine
    if name == "AsyncEngine":
        from modelc.engine.async_api import AsyncEngine

        return AsyncEngine
    raise AttributeError(name)
