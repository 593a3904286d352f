"""The warm list (kernels/runtime/warm_list.py, engine/warm_replay.py): a warmup records the kernels it reached; a
later process of the same model loads exactly those by signature and then runs requests, and the whole
warmup, without compiling or loading anything more."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from modelc.artifact import open_artifact, write_artifact
from modelc.engine import warm, warm_replay
from modelc.engine.runner import Runner
from modelc.models.tiny import make_tiny_llama

_REPLAY = """
import sys

import numpy as np
sys.path.insert(0, sys.argv[1])
from numba.core.dispatcher import _DispatcherBase
from modelc.artifact import open_artifact
from modelc.engine import warm_replay
from modelc.engine.runner import Runner

runner = Runner(open_artifact(sys.argv[2]), num_kv_blocks=8, kv_dtype="float32", threads=1)
print("REPLAYED", warm_replay.replayed(warm_replay.list_key(runner)))
loads = []  # every compile or disk-cache load from here on (a replay must have loaded all of them)
_orig = _DispatcherBase._compile_for_args
def _record(self, *args, **kws):
    loads.append(self.py_func.__qualname__)
    return _orig(self, *args, **kws)
_DispatcherBase._compile_for_args = _record
runner.logits([1, 2, 3])
runner.logits(list(range(1, 40)))  # past the BLAS prefill threshold
runner.warmup()
print("LOADED AFTER REPLAY", sorted(set(loads)))
"""


def test_a_warmup_records_a_list_that_a_new_process_replays_completely(tmp_path):
    path = write_artifact(make_tiny_llama(0), tmp_path / "tiny.modelc")
    runner = Runner(open_artifact(path), num_kv_blocks=8, kv_dtype="float32", threads=1)
    key = warm_replay.list_key(runner)
    assert key is not None
    warm.warmup(runner, helpers=False)  # records the list (compiles from a cold shared cache) or replays it
    root = str(pathlib.Path(__file__).resolve().parents[2])
    out = subprocess.run([sys.executable, "-c", _REPLAY, root, str(path)], capture_output=True, text=True,
                         timeout=600, env=dict(os.environ))  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert "REPLAYED True" in out.stdout, out.stdout
    assert "LOADED AFTER REPLAY []" in out.stdout, out.stdout


def test_the_list_key_follows_the_file_kv_type_and_threads(tmp_path):
    path = write_artifact(make_tiny_llama(0), tmp_path / "tiny.modelc")

    def key(kv_dtype: str = "float32", threads: int = 1) -> str | None:
        return warm_replay.list_key(Runner(open_artifact(path), num_kv_blocks=8, kv_dtype=kv_dtype, threads=threads))

    base = key()
    assert base is not None and key() == base
    assert key(kv_dtype="float16") != base and key(threads=2) != base
    assert key(threads=2) == key(threads=3)  # one thread or several: the kernels reached differ only so
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # the file was replaced
    assert key() != base
    in_memory = Runner(make_tiny_llama(0), num_kv_blocks=8, kv_dtype="float32", threads=1)
    assert warm_replay.list_key(in_memory) is None  # no file: no list, the warmup runs as before
    assert not warm_replay.replayed(None)


def test_lists_are_pruned_to_the_most_recent(tmp_path, monkeypatch):
    from modelc.kernels.runtime import warm_list

    monkeypatch.setattr(warm_list, "_path", lambda k: tmp_path / f"{k}.pkl")
    monkeypatch.setattr(warm_list, "KEEP", 3)
    for i in range(5):
        warm_list.save(f"k{i}", [("modelc.kernels.elementwise.norm", "rms_norm", ())])
        os.utime(tmp_path / f"k{i}.pkl", (i, i))  # written in this order
    assert sorted(f.name for f in tmp_path.glob("*.pkl")) == ["k2.pkl", "k3.pkl", "k4.pkl"]
    assert (
        warm_list.load("k4") == [("modelc.kernels.elementwise.norm", "rms_norm", ())] and warm_list.load("k0") is None
    )


def test_snapshot_skips_a_dead_weakref_proxy():
    """gc.get_objects() hands back weakref proxies too; isinstance() on a dead one raises ReferenceError."""
    import weakref

    from modelc.kernels.runtime import warm_list

    class Gone:
        pass

    obj = Gone()
    proxy = weakref.proxy(obj)
    del obj
    assert warm_list.snapshot() is not None
    del proxy


def test_a_failing_snapshot_never_fails_the_warmup(tmp_path, monkeypatch):
    from modelc.kernels.runtime import warm_list

    def boom():
        raise ReferenceError("weakly-referenced object no longer exists")

    monkeypatch.setattr(warm_list, "snapshot", boom)
    warm_replay.record("k")  # no error: the list is simply not written


def test_a_kernel_numba_does_not_cache_is_left_out_of_the_list():
    """decode_layer._not_in_kinds (cache=False) compiles into the decode layers of a cold process: listed, every
    replay would compile it again and count as failed, so a restart after a cold start never replayed."""
    from modelc.kernels.layer import decode_layer
    from modelc.kernels.runtime import warm_list

    z = np.zeros((1, 1), np.float32)
    with pytest.raises(ValueError):
        decode_layer._not_in_kinds(z, z, np.zeros((1, 1), np.uint8), 0, 0)
    assert decode_layer._not_in_kinds.overloads
    names = {(m, a) for m, a, _ in warm_list.snapshot()}
    assert ("modelc.kernels.layer.decode_layer", "_not_in_kinds") not in names
    assert ("modelc.kernels.layer.decode_layer", "_mm") in names or not decode_layer._mm.overloads
