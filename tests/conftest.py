from __future__ import annotations

import pathlib

import pytest

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
