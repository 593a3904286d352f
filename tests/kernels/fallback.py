"""Run a kernel check script with CPU paths switched off (MODELC_NO_*) in a fresh process."""

from __future__ import annotations

import os
import subprocess
import sys


def fallback_worst(script: str, env: dict[str, str], timeout: float) -> float:
    """Run `script` (it prints HAS_AVX2 HAS_VNNI WORST) under `env`; checks it succeeded and that the
    switched-off paths are off, and returns its worst relative error. The kernel cache folder is keyed
    on the effective CPU flags (kernels/runtime/jit_cache.py), so the processes of one switch share compiled
    kernels and never load another switch's machine code."""
    full = dict(os.environ, **env)
    p = subprocess.run([sys.executable, "-c", script], env=full, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr[-2000:]
    has_avx2, has_vnni, worst = p.stdout.split()
    if "MODELC_NO_AVX2" in env:
        assert has_avx2 == "False"
    if "MODELC_NO_VNNI" in env:
        assert has_vnni == "False"
    return float(worst)
