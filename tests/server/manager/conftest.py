from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

from modelc import store
from modelc.artifact.tiny import make_model
from modelc.artifact.writer import write_artifact
from tests.server.fake_engine import FakeEngine


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # Quart is asyncio-only


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A store with three small artifacts: alpha, beta, gamma."""
    monkeypatch.setenv("MODELC_HOME", str(tmp_path))
    for name in ("alpha", "beta", "gamma"):
        store.add(name, lambda tmp, n=name: write_artifact(make_model(name=n), tmp))
    return tmp_path


class FakeOpener:
    """open_engine's stand-in: a FakeEngine named after the file, with a load delay and a log."""

    def __init__(self, delay_s: float = 0.0, fail: set[str] | None = None) -> None:
        self.delay_s = delay_s
        self.fail = fail or set()
        self.opened: list[str] = []
        self.closed: list[str] = []

    @contextlib.asynccontextmanager
    async def __call__(self, path: Any, config: Any = None):
        import anyio

        from modelc.errors import ArtifactError

        name = Path(path).stem
        self.opened.append(name)
        await anyio.sleep(self.delay_s)
        if name in self.fail:
            raise ArtifactError(f"{path}: broken")
        try:
            yield FakeEngine(name=name)
        finally:
            self.closed.append(name)
