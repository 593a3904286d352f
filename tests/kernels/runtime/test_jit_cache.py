"""jit_cache: the kernels' numba cache holds across restarts and reinstalls of the same code (new paths,
new mtimes), and a changed kernel source or MODELC_NO_* switch gets a folder of its own."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from modelc.kernels.elementwise import norm
from modelc.kernels.runtime import jit_cache

ROOT = pathlib.Path(__file__).resolve().parents[3]

_PROBE = """
import numpy as np
from numba.core import event
n = []
class L(event.Listener):
    def on_start(self, ev): n.append(1)
    def on_end(self, ev): pass
event.register("numba:compile", L())
from modelc.kernels.elementwise import norm
from modelc.kernels.runtime import jit_cache
x = np.ones((2, 32), np.float32)
norm.rms_norm(np.empty_like(x), x, np.ones(32, np.float32), 1e-5)
print("COMPILES", len(n), "KEY", jit_cache.cache_key())
"""


def _install(site: pathlib.Path) -> None:
    """A copy of the package where pip would put it (the code only: no caches, no bundled model)."""
    shutil.copytree(ROOT / "modelc", site / "modelc", ignore=shutil.ignore_patterns("__pycache__", "data", "packs"))


def _run(site: pathlib.Path, cache: pathlib.Path, **env: str) -> tuple[int, str]:
    e = {**os.environ, "PYTHONPATH": str(site), "NUMBA_CACHE_DIR": str(cache), "MODELC_KERNEL_PACKS": "0", **env}
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, env=e, cwd=site, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    words = out.stdout.split()
    return int(words[words.index("COMPILES") + 1]), words[words.index("KEY") + 1]


def test_kernels_cache_in_the_keyed_folder():
    assert pathlib.Path(norm.rms_norm._cache._cache_path) == jit_cache.cache_dir()
    assert jit_cache.cache_dir().name == jit_cache.cache_key()


def test_cache_survives_restart_and_reinstall_but_not_a_source_change(tmp_path):
    cache = tmp_path / "cache"
    _install(tmp_path / "a")
    assert _run(tmp_path / "a", cache)[0] > 0  # cold
    assert _run(tmp_path / "a", cache)[0] == 0  # restart
    for f in (tmp_path / "a" / "modelc").rglob("*.py"):
        os.utime(f, (1e9, 1e9))  # a reinstall in place: same code, new mtimes
    assert _run(tmp_path / "a", cache)[0] == 0
    _install(tmp_path / "b")  # a reinstall elsewhere (another environment)
    n, key = _run(tmp_path / "b", cache)
    assert n == 0
    norm_py = tmp_path / "b" / "modelc" / "kernels" / "elementwise" / "norm.py"
    norm_py.write_text(norm_py.read_text() + "\n# changed\n")
    n2, key2 = _run(tmp_path / "b", cache)
    assert n2 > 0 and key2 != key
    assert sorted(p.name for p in cache.iterdir()) == sorted([key, key2])


def test_a_cpu_switch_gets_its_own_folder(tmp_path):
    _install(tmp_path / "a")
    _, key = _run(tmp_path / "a", tmp_path / "cache")
    if key.endswith("-portable"):
        pytest.skip("no AVX2 here: the switch changes nothing")
    _, key2 = _run(tmp_path / "a", tmp_path / "cache", MODELC_NO_AVX2="1")
    assert key2.endswith("-portable") and key2 != key


def test_the_one_token_prefetch_switch_gets_its_own_folder(tmp_path):
    _install(tmp_path / "a")
    _, on = _run(tmp_path / "a", tmp_path / "cache", MODELC_PREFETCH_T1="1")
    _, off = _run(tmp_path / "a", tmp_path / "cache", MODELC_PREFETCH_T1="0")
    assert on.endswith(".prefetch_t1") or on.endswith("-prefetch_t1")
    assert "prefetch_t1" not in off and on != off


def test_an_unusable_cache_folder_falls_back_to_numbas_own(tmp_path):
    _install(tmp_path / "a")
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")  # the cache root cannot be created: kernels still run (numba's locators)
    n, _ = _run(tmp_path / "a", blocked)
    assert n > 0


def test_the_files_left_out_of_the_key_define_no_numba_function():
    """A file of NOT_COMPILED may call numba's machinery, never define a kernel: a kernel there would keep its
    stale machine code in the cache after an edit."""
    import ast

    for name in jit_cache.NOT_COMPILED:
        tree = ast.parse((jit_cache.KERNELS / name).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for d in node.decorator_list:
                    called = d.func if isinstance(d, ast.Call) else d
                    word = called.attr if isinstance(called, ast.Attribute) else getattr(called, "id", "")
                    assert word not in ("njit", "jit", "vectorize", "guvectorize", "intrinsic", "overload"), (
                        name,
                        node.name,
                    )


def test_overlapping_saves_of_one_function_keep_both_overloads(tmp_path, monkeypatch):
    """Two processes (or threads) that save overloads of one function into the folder at once: numba reads the
    index, adds its key, writes it back; without the folder's lock the later write drops the other key."""
    import threading
    import time

    from numba.core import caching

    jit_cache.install()
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    folder = tmp_path / "k"
    folder.mkdir()
    load_index = caching.IndexDataCacheFile._load_index

    def slow_load(self):
        out = load_index(self)
        time.sleep(0.3)  # both saves read the index before either writes it
        return out

    monkeypatch.setattr(caching.IndexDataCacheFile, "_load_index", slow_load)
    files = [caching.IndexDataCacheFile(str(folder), "f", "stamp") for _ in range(2)]
    threads = [threading.Thread(target=f.save, args=(f"key{i}", f"data{i}")) for i, f in enumerate(files)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [files[0].load(f"key{i}") for i in range(2)] == ["data0", "data1"]
