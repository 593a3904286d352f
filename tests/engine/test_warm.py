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
from numba.core.registry import CPUDispatcher
from modelc.artifact.reader import open_artifact
from modelc.engine.runner import Runner
from modelc.engine import warm
from modelc.scheduler.batch import BatchPlan
sys.path.insert(0, sys.argv[2])
from test_runner import _chunk, _generate

def signatures():
    return {f"{n}.{a}": len(o.signatures) for n, m in list(sys.modules.items()) if n.startswith("modelc.kernels.")
            and m is not None for a, o in vars(m).items() if isinstance(o, CPUDispatcher)}

runner = Runner(open_artifact(sys.argv[1]), num_kv_blocks=16)
assert warm._worth_a_helper(runner), "the cache should be cold"
warm.warmup(runner)
before = signatures()
_generate(runner, 1, list(range(1, 71)), 3, list(range(6)))
_generate(runner, 2, [4, 5], 2, [7])
res = runner.execute(BatchPlan(99, (_chunk(1, [3], 72, list(range(6)), prompt_len=70, num_out=3),
                                    _chunk(2, [6], 3, [7], prompt_len=2, num_out=2))))
assert res.error is None, res.error
grew = {k: (before.get(k, 0), v) for k, v in signatures().items() if v > before.get(k, 0)}
print("GREW", grew)
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
