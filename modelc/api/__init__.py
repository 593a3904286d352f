"""The front door: `Engine` (api/engine.py: synchronous, one request at a time) and `AsyncEngine`
(api/async_engine.py: the actor tree, what the server serves). Both open a model by path or store name
with modelc.source.open_model; `modelc.Engine` / `modelc.AsyncEngine` name them too."""

from __future__ import annotations

__all__ = ["AsyncEngine", "Engine"]


def __getattr__(name: str):  # lazy: `import modelc.api` stays cheap (the engines import numba)
    if name == "Engine":
        from modelc.api.engine import Engine

        return Engine
    if name == "AsyncEngine":
        from modelc.api.async_engine import AsyncEngine

        return AsyncEngine
    raise AttributeError(name)
