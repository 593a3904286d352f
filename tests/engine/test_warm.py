"""warm.warmup: the helper process, `modelc warmup`, and (slow) a parallel warmup from an empty numba cache."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from modelc.artifact import write_artifact
from modelc.cli.main import main
from modelc.models.tiny import make_tiny_llama


@pytest.fixture
def art(tmp_path):
    return write_artifact(make_tiny_llama(0), tmp_path / "tiny.modelc")


def test_helper_process_runs(art):
    out = subprocess.run([sys.executable, "-m", "modelc.engine.warm", str(art), "0", "0", "float32"],
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]


def test_warmup_command(art, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("MODELC_HOME", str(tmp_path / "home"))
    assert main(["warmup", str(art)]) == 0
    assert "warm: " in capsys.readouterr().out
    assert main(["warmup", str(tmp_path / "missing.modelc")]) == 1


_PROBE = """
import sys
from modelc.artifact.reader import open_artifact
from modelc.engine.runner import Runner
from modelc.engine import warm
sys.path.insert(0, sys.argv[2])
from test_runner import new_signatures_after_requests

runner = Runner(open_artifact(sys.argv[1]), num_kv_blocks=16)
assert warm._worth_a_helper(runner), "the cache should be cold"
warm.warmup(runner)
print("GREW", new_signatures_after_requests(runner))
"""


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_parallel_warmup_from_an_empty_cache_leaves_nothing_to_compile(art, tmp_path):
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    here = str(pathlib.Path(__file__).parent)
    out = subprocess.run([sys.executable, "-c", _PROBE, str(art), here], capture_output=True, text=True, env=env,
                         timeout=1200)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert "GREW {}" in out.stdout, out.stdout
