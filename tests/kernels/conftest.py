"""Shared tolerances for kernel-vs-reference tests (one place, per dtype)."""

from __future__ import annotations

import pytest

TOLERANCES = {
    "float32": {"rtol": 2e-5, "atol": 2e-6},
    "float16": {"rtol": 2e-3, "atol": 2e-3},
}


@pytest.fixture
def tol():
    return TOLERANCES
