"""The package version and the git sha it was built from (`modelc --version`, /api/version, builds)."""

from __future__ import annotations

import functools
import os
import subprocess

__version__ = "0.1.0"


@functools.cache
def git_sha() -> str:
    """The git sha baked at build time (modelc/_build.py), else read from a checkout, else 'unknown'.
    Cached: the checkout does not change under a running process, and /api/version must not spawn git."""
    try:
        from modelc._build import GIT_SHA  # type: ignore[import-not-found]  # written only into builds

        return GIT_SHA
    except ImportError:
        pass
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        out = subprocess.run(
            ["git", "-C", here, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5
        )
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def version_line() -> str:
    return f"modelc {__version__} (git {git_sha()})"
