from __future__ import annotations

import os
import pathlib

import pytest

# the suite runs as 2 processes on 2 cores (.ci/run): threads that spin long between kernels (modelc's
# default, modelc/__init__.py) would take the core the other process's threads need. Set before any test
# imports modelc, and before libgomp loads; servers the tests start inherit it.
os.environ.setdefault("GOMP_SPINCOUNT", "1000")

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "fixtures"
FIXTURES = ROOT / "tests" / "fixtures"


@pytest.fixture
def shared_fixtures() -> pathlib.Path:
    """../shared/fixtures, or skip the test when this checkout has none beside it."""
    if not SHARED.is_dir():
        pytest.skip("../shared/fixtures is not present")
    return SHARED


@pytest.fixture
def fixtures_dir() -> pathlib.Path:
    return FIXTURES


@pytest.fixture
def frozen_now(monkeypatch):
    """Chat templates' strftime_now() at 2026-01-15 09:30, the time tools/make_template_fixtures.py froze."""
    import datetime as dt

    from modelc.tokenizer import chat_template

    class Frozen(dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return dt.datetime(2026, 1, 15, 9, 30)

    monkeypatch.setattr(chat_template, "datetime", Frozen)
