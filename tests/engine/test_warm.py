"""warm.warmup: the helper process, `modelc warmup`, and (slow) a parallel warmup from an empty numba cache."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import types

import pytest

from modelc.artifact import write_artifact
from modelc.cli.main import main
from modelc.engine import warm
from modelc.models.tiny import make_tiny_llama


@pytest.fixture
def art(tmp_path):
    return write_artifact(make_tiny_llama(0), tmp_path / "tiny.modelc")


def test_helper_process_runs(art):
    out = subprocess.run([sys.executable, "-m", "modelc.engine.warm", str(art), "0", "0", "float32"],
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]


def test_helper_exits_when_its_parent_is_gone(art):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid that is no longer this helper's parent
    env = {**os.environ, "MODELC_WARM_HELPER_PARENT": str(gone.pid)}
    out = subprocess.run([sys.executable, "-m", "modelc.engine.warm", str(art), "0", "0", "float32"], env=env,
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    assert out.returncode == warm.ORPHANED_EXIT, out.stderr[-2000:]


def test_warmup_command(art, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("MODELC_HOME", str(tmp_path / "home"))
    assert main(["warmup", str(art)]) == 0
    assert "warm: " in capsys.readouterr().out
    assert main(["warmup", str(tmp_path / "missing.modelc")]) == 1


_PROBE = """
import sys
from numba.core import event
from modelc.artifact.reader import open_artifact
from modelc.engine.runner import Runner
from modelc.engine import warm
from modelc.kernels.runtime.nocompile import load_only
sys.path.insert(0, sys.argv[2])
from test_runner import new_signatures_after_requests

with load_only():
    pass  # its listener first: a compile it refuses (a cold cache found) does not reach the one below
compiles = []
class L(event.Listener):  # every compile in this process, on any thread
    def on_start(self, ev): compiles.append(ev.data["dispatcher"].py_func.__qualname__)
    def on_end(self, ev): pass
event.register("numba:compile", L())
art = open_artifact(sys.argv[1])
runner = warm.ready_runner(lambda kernels: Runner(art, num_kv_blocks=16, kernels=kernels), art, "auto", None)
print("COMPILES", compiles)
print("GREW", new_signatures_after_requests(runner))
"""


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_a_wait_mode_start_from_an_empty_cache_compiles_nothing_in_this_process(art, tmp_path):
    """MODELC_COLD_START=wait, an empty cache: helper processes compile everything (the build's repacking, the
    decode path, batches and prefill) and the serving process only loads, so none of LLVM's compile memory stays
    in its RSS (tests/server/test_memory_served.py's bound); then requests reach no kernel the warmup missed."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba"), "MODELC_KERNEL_PACKS": "0", "MODELC_COLD_START": "wait"}
    here = str(pathlib.Path(__file__).parent)
    out = subprocess.run([sys.executable, "-c", _PROBE, str(art), here], capture_output=True, text=True, env=env,
                         timeout=1200)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert "COMPILES []" in out.stdout and "GREW {}" in out.stdout, out.stdout
    assert len(list((tmp_path / "numba").rglob("*.nbi"))) > 10  # the cache was cold: the helpers filled it


class _FakeRunner:
    """A runner of a model file whose warmup 'would compile' until the helpers ran (a cold cache)."""

    def __init__(self, path, log, cache):
        self.source = types.SimpleNamespace(path=str(path), offset=0, file_size=0)
        self.model = types.SimpleNamespace(kernels=types.SimpleNamespace(name="numba"))
        self.kv = types.SimpleNamespace(kv_dtype="float16")
        self.threads = 1
        self.log, self.cache = log, cache

    def warmup(self):
        from modelc.kernels.runtime import nocompile

        loading = getattr(nocompile._state, "load_only", False)
        self.log.append(("warmup", loading))
        if loading and self.cache["cold"]:
            raise nocompile.WouldCompile("a kernel")


def test_a_cold_wait_mode_start_runs_the_helpers_before_the_build_and_the_warmup(monkeypatch, tmp_path):
    """Wait mode, a cold cache: the build (its repacking) and the warmup are tried with compiling refused, both
    helpers run side by side, then this process builds and warms up, loading what they compiled; a warm cache
    starts no helper. A helper that did not start leaves the rest to this process (it compiles)."""
    from modelc.kernels.runtime import nocompile

    path = tmp_path / "m.gguf"
    path.write_bytes(b"x")
    log: list = []
    cache = {"cold": True}

    def start(source, kv_dtype, threads, nice=0, mode="batch"):
        log.append(("helper", mode, kv_dtype, threads))
        if mode == "batch" and cache.get("broken"):
            return None
        cache["cold"] = False  # what it compiled loads from now on
        return types.SimpleNamespace(wait=lambda timeout: 0)

    def build(kernels):
        loading = getattr(nocompile._state, "load_only", False)
        log.append(("build", loading))
        if loading and cache["cold"]:
            raise nocompile.WouldCompile("_repack")
        return _FakeRunner(path, log, cache)

    monkeypatch.setenv("MODELC_COLD_START", "wait")
    monkeypatch.setattr(warm, "_start_helper", start)
    runner = warm.ready_runner(build, types.SimpleNamespace(path=str(path)), "f16", 1)
    assert isinstance(runner, _FakeRunner)
    assert log == [("build", True), ("helper", "decode", "f16", 1), ("helper", "batch", "f16", 1),
                   ("build", False), ("warmup", True)]  # fmt: skip
    log.clear()  # a warm cache: the build and the warmup load, no helper
    warm.ready_runner(build, types.SimpleNamespace(path=str(path)), "f16", 1)
    assert log == [("build", True), ("warmup", True)]
    log.clear()  # warmup() alone, a cold cache, one helper failing to start: this process warms up with compiling
    cache.update(cold=True, broken=True)
    warm.warmup(runner)
    assert log == [("warmup", True), ("helper", "decode", "float16", 1), ("helper", "batch", "float16", 1),
                   ("warmup", False)]  # fmt: skip


_COLD = """
import sys, threading
import numpy as np
from numba.core import event
from modelc.artifact.reader import open_artifact
from modelc.engine.runner import Runner
from modelc.engine.warm import ready_runner
from modelc.kernels.select import kernel_set

main_compiles = []
class OnCompile(event.Listener):
    def on_start(self, ev):
        if threading.current_thread() is threading.main_thread():
            main_compiles.append(ev.data["dispatcher"].py_func.__qualname__)
    def on_end(self, ev):
        pass
event.register("numba:compile", OnCompile())
art = open_artifact(sys.argv[1])
runner = ready_runner(lambda kernels: Runner(art, num_kv_blocks=16, kernels=kernels))
sw = runner.model.kernels.matmul.switch
ids = [1, 2, 3, 4, 5]
got = runner.logits(ids)
want = Runner(art, num_kv_blocks=16, kernels=kernel_set("ref")).logits(ids)
assert sw.ref_calls > 0, (sw.ref_calls, sw.numba_calls)
assert np.allclose(got, want, rtol=1e-4, atol=1e-4), float(np.abs(got - want).max())
assert main_compiles == [], main_compiles
if sys.argv[2] == "wait":
    warmer = next(t for t in threading.enumerate() if t.name == "modelc-warmer")
    warmer.join(1200)
    assert sw.only_numba and runner.model.kernels.name == "numba"
    numba = Runner(art, num_kv_blocks=16, kernels=kernel_set("numba")).logits(ids)
    assert np.allclose(runner.logits(ids), numba, rtol=1e-5, atol=1e-5)
    assert main_compiles == [], main_compiles
print("OK", sw.ref_calls, sw.numba_calls)
"""


def _cold(art, tmp_path, until: str) -> None:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba"), "MODELC_KERNEL_PACKS": "0"}
    out = subprocess.run([sys.executable, "-c", _COLD, str(art), until], capture_output=True, text=True, env=env,
                         timeout=1500)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert "OK" in out.stdout


def test_cold_start_serves_on_the_references_without_compiling(art, tmp_path):
    _cold(art, tmp_path, "first")


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_cold_start_switches_to_numba_when_the_warmer_is_done(art, tmp_path):
    _cold(art, tmp_path, "wait")


def test_cold_start_wait_compiles_before_serving(monkeypatch):
    from modelc.engine.runner import Runner

    monkeypatch.setenv("MODELC_COLD_START", "wait")
    runner = warm.ready_runner(lambda kernels: Runner(make_tiny_llama(0), num_kv_blocks=4, kernels=kernels))
    assert runner.model.kernels.name == "numba" and not warm.compiling()


def test_ready_runner_returns_once_the_kv_pages_are_resident(monkeypatch):
    """/health says 200 once ready_runner returns: by then the KV pages, made resident in the background from the
    runner's construction on (cache/kv_pages.commit), are; until then it waits."""
    import threading

    from modelc.cache import kv_pages
    from modelc.engine.runner import Runner

    release = threading.Event()

    def commit(*arrays):  # a commit that lasts until the test lets it end
        t = threading.Thread(target=release.wait, daemon=True)
        t.start()
        return t

    monkeypatch.setattr(kv_pages, "commit", commit)
    monkeypatch.setenv("MODELC_COLD_START", "wait")
    monkeypatch.setenv("MODELC_KERNELS", "ref")  # no numba: the rest of ready_runner takes a moment
    monkeypatch.setattr(warm, "warmup", lambda runner, **kw: 0.0)
    got = []
    build = lambda kernels: Runner(make_tiny_llama(0), num_kv_blocks=4, kernels=kernels)  # noqa: E731
    t = threading.Thread(target=lambda: got.append(warm.ready_runner(build)), daemon=True)
    t.start()
    t.join(2.0)
    assert not got  # still waiting for the pages
    release.set()
    t.join(60)
    assert got and got[0].kv._commit is None


def test_a_failing_warmer_leaves_the_reference_kernels_serving(monkeypatch, capsys):
    import threading

    from modelc.engine.runner import Runner

    def boom(runner, **kw):
        raise RuntimeError("boom")

    monkeypatch.setattr(warm, "loaded_from_cache", lambda r: False)  # a cold cache: ready at once
    monkeypatch.setattr(warm, "warmup", boom)
    runner = warm.ready_runner(lambda kernels: Runner(make_tiny_llama(0), num_kv_blocks=4, kernels=kernels))
    for t in threading.enumerate():
        if t.name == "modelc-warmer":
            t.join(60)
    assert not warm.compiling() and not runner.model.kernels.matmul.switch.only_numba
    assert runner.logits([1, 2, 3]).shape[0] == 3  # served on the references
    assert "serving on the numpy reference kernels: RuntimeError: boom" in capsys.readouterr().err


def test_engines_of_one_model_share_one_warmer(monkeypatch):
    import threading

    from modelc.engine.runner import Runner

    monkeypatch.setattr(warm, "loaded_from_cache", lambda r: False)  # cold: both return at once
    src = make_tiny_llama(0)
    runners = [warm.ready_runner(lambda kernels: Runner(src, num_kv_blocks=4, kernels=kernels)) for _ in range(2)]
    warmers = [t for t in threading.enumerate() if t.name == "modelc-warmer"]
    assert len(warmers) == 1
    warmers[0].join(600)
    assert all(r.model.kernels.name == "numba" for r in runners) and not warm.compiling()


def _q4_0_tiny():
    from modelc.artifact.transforms import plan

    src = make_tiny_llama(3)
    src.tensors, _ = plan(src.tensors, prune=None, quantize="q4_0", quantize_embeddings=True, quantize_output=True)
    return src


def _r16_of(model) -> list:
    layer = model.layers[0]
    return [w.r16 for w in (layer.q, layer.k, layer.v, layer.o, layer.gate, layer.up, layer.down)]


def test_after_the_warmer_the_served_model_reads_the_repacked_weights(monkeypatch):
    """The hybrid set serves from the file layout; when the warmer is done the served runner's model is rebuilt
    on numba and reads the warmer's repacked copy (one per source): no file-layout kernel to compile later."""
    import threading

    import numpy as np

    from modelc.engine.runner import Runner

    monkeypatch.delenv("MODELC_REPACK", raising=False)
    monkeypatch.setattr(warm, "loaded_from_cache", lambda r: False)  # cold: ready at once, on the hybrid set
    src = _q4_0_tiny()
    runner = warm.ready_runner(lambda kernels: Runner(src, num_kv_blocks=4, kernels=kernels))
    assert runner.model.kernels.name == "hybrid" and all(r is None for r in _r16_of(runner.model))
    for t in threading.enumerate():
        if t.name == "modelc-warmer":
            t.join(600)
    assert runner.model.kernels.name == "numba" and not warm.compiling()
    served = _r16_of(runner.model)
    assert all(r is not None for r in served)
    engine = Runner(src, num_kv_blocks=4)  # another engine of the same source reads the same copy
    assert all(a is b for a, b in zip(served, _r16_of(engine.model), strict=True))
    assert np.allclose(runner.logits([1, 2, 3]), engine.logits([1, 2, 3]), rtol=1e-5, atol=1e-5)


def test_readers_of_one_source_share_one_repacked_copy_and_free_it_with_the_source():
    import gc

    from modelc.engine.runner import Runner
    from modelc.models import weights

    src = _q4_0_tiny()
    a, b = Runner(src, num_kv_blocks=4), Runner(src, num_kv_blocks=4)
    assert all(x is y and x is not None for x, y in zip(_r16_of(a.model), _r16_of(b.model), strict=True))
    key = id(src)
    assert key in weights._SHARED
    del a, b, src
    gc.collect()
    assert key not in weights._SHARED


def test_the_rebuild_drops_the_file_pages_the_hybrid_set_read(monkeypatch, tmp_path):
    """After the flip the file layout is no longer read (the repacked copy is): its pages leave RSS."""
    from modelc.artifact.reader import open_artifact
    from modelc.engine import runner as runner_mod

    src = _q4_0_tiny()
    art = open_artifact(write_artifact(src, tmp_path / "q4.modelc"))
    r = runner_mod.Runner(art, num_kv_blocks=4)
    dropped = []
    monkeypatch.setattr(runner_mod, "release_pages", lambda view: dropped.append(view.ctypes.data))
    r.rebuild_on_numba()
    matrices = {t.data.ctypes.data for t in art.tensors.values() if len(t.shape) >= 2}
    assert matrices and matrices <= set(dropped)
    assert r.logits([1, 2]).shape[0] == 2


_RESTART = """
import sys
from numba.core import event

compiles = []
class OnCompile(event.Listener):  # every compile of this process, on any thread (not those load_only refused)
    def on_start(self, ev):
        pass
    def on_end(self, ev):  # (numba 0.6x's Event.is_failed is False either way: read the exception itself)
        if (getattr(ev, "_exc_details", None) or (None, None, None))[1] is None:
            compiles.append(ev.data["dispatcher"].py_func.__qualname__)
event.register("numba:compile", OnCompile())
from modelc.artifact.reader import open_artifact
from modelc.engine import warm
from modelc.engine.runner import Runner
sys.path.insert(0, sys.argv[2])
from test_runner import _generate

runner = warm.ready_runner(lambda kernels: Runner(open_artifact(sys.argv[1]), num_kv_blocks=16, kernels=kernels))
state = (runner.model.kernels.name, warm.compiling())
tokens = _generate(runner, 1, [5, 17, 3, 88, 41, 9, 60], 6, [0, 1])
print("STATE", state, "COMPILES", compiles, "TOKENS", tokens)
"""


def _q4_0_file(tmp_path, name: str, **shape):
    from modelc.artifact.transforms import plan

    src = make_tiny_llama(5, **shape)
    src.tensors, _ = plan(src.tensors, prune=None, quantize="q4_0", quantize_embeddings=True, quantize_output=True)
    return write_artifact(src, tmp_path / name)


def _restart(path, env: dict[str, str] | None = None, timeout: float = 600) -> str:
    here = str(pathlib.Path(__file__).parent)
    out = subprocess.run([sys.executable, "-c", _RESTART, str(path), here], capture_output=True, text=True,
                         timeout=timeout, env=env)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_a_restart_and_a_second_model_of_the_same_types_load_without_compiling(tmp_path):
    """Once a model's kernels are in numba's cache, a new process serves it on numba from the first request,
    with no "compiling" state and no compile at all (a restart), and so does another model of the same weight
    types and other shapes (no warm list of its own: its warmup forwards load every kernel from the cache)."""
    from modelc.artifact.reader import open_artifact
    from modelc.engine.runner import Runner
    from tests.engine.test_runner import _generate

    first = _q4_0_file(tmp_path, "a.modelc")
    runner = Runner(open_artifact(first), num_kv_blocks=16)
    warm.warmup(runner)  # compiles what the shared cache lacks, and records the model's kernel list
    want = _generate(runner, 1, [5, 17, 3, 88, 41, 9, 60], 6, [0, 1])
    got = _restart(first)
    assert f"STATE ('numba', False) COMPILES [] TOKENS {want}" in got, got
    other = _q4_0_file(tmp_path, "b.modelc", vocab_size=160, hidden_size=128, num_layers=3, num_heads=8,
                       num_kv_heads=4, intermediate_size=256)  # fmt: skip
    got = _restart(other)
    assert "STATE ('numba', False) COMPILES [] TOKENS" in got, got


def test_a_fresh_kernel_cache_serves_a_first_request_with_the_warm_paths_tokens(tmp_path):
    """An empty kernel cache: the first request runs on the reference kernels (hybrid, compiling in helper
    processes, none in this one) and its greedy tokens equal those of the warm path (numba, cached kernels)."""
    from modelc.artifact.reader import open_artifact
    from modelc.engine.runner import Runner
    from tests.engine.test_runner import _generate

    path = _q4_0_file(tmp_path, "a.modelc")
    runner = Runner(open_artifact(path), num_kv_blocks=16)
    warm.warmup(runner)
    want = _generate(runner, 1, [5, 17, 3, 88, 41, 9, 60], 6, [0, 1])
    got = _restart(path, {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba"), "MODELC_KERNEL_PACKS": "0"})
    assert f"STATE ('hybrid', True) COMPILES [] TOKENS {want}" in got, got


_WARM_ONLY = """
import sys
from modelc.artifact.reader import open_artifact
from modelc.engine import warm
from modelc.engine.runner import Runner
warm.warmup(Runner(open_artifact(sys.argv[1]), num_kv_blocks=16))
"""


def test_decode_first_runs_the_steps_numba_can_and_the_rest_on_the_hybrid_model():
    """Once the decode helper's kernels are loaded, a served runner tries each step on a numba model of the
    repacked weights with compiling refused (warm.DecodeFirst) and runs it again on the hybrid model where a
    kernel is missing; either way its greedy tokens are the warm path's."""
    from modelc.engine.runner import Runner
    from modelc.kernels.hybrid import hybrid_kernel_set
    from modelc.kernels.runtime.nocompile import WouldCompile
    from tests.engine.test_runner import _generate

    src = _q4_0_tiny()
    prompt = [5, 17, 3, 88, 41, 9, 60]
    want = _generate(Runner(src, num_kv_blocks=16), 1, prompt, 6, [0, 1])  # numba: every kernel in memory now
    kernels, _ = hybrid_kernel_set()
    runner = Runner(src, num_kv_blocks=16, kernels=kernels)
    warm._install_decode_first(runner, warm._numba_model(runner))
    model = runner.model
    assert isinstance(model, warm.DecodeFirst) and model.kernels.name == "hybrid"
    assert _generate(runner, 1, prompt, 6, [0, 1]) == want
    assert (model.fast_steps, model.slow_steps) == (6, 0)

    def missing(*args, **kwargs):  # a kernel of the step not compiled yet: the fast model gives up midway
        raise WouldCompile("gemm_r16")

    model.fast.forward = missing
    assert _generate(runner, 2, prompt, 6, [2, 3]) == want
    assert (model.fast_steps, model.slow_steps) == (6, 6)


def test_swap_kernels_installs_the_decode_model_then_flips_when_the_warmer_is_done(monkeypatch):
    """The owner's swaps (deliver_swap): while the warmer compiles, the decode path's numba model goes in front of
    the hybrid one; after the warmer is done, the flip rebuilds the model on numba alone."""
    from modelc.engine.runner import Runner
    from modelc.kernels.hybrid import hybrid_kernel_set

    src = _q4_0_tiny()
    kernels, switch = hybrid_kernel_set()
    runner = Runner(src, num_kv_blocks=4, kernels=kernels)
    warmer = warm.Warmer(runner, switch)
    told = []
    monkeypatch.setattr(warm, "_warmers", {warmer})
    assert warm.deliver_swap(runner, lambda: told.append(1))
    warm.swap_kernels(runner)  # nothing to install yet
    assert runner.model.kernels.name == "hybrid" and not isinstance(runner.model, warm.DecodeFirst)
    warmer.decode_models[id(runner)] = warm._numba_model(runner)
    warm.swap_kernels(runner)
    assert isinstance(runner.model, warm.DecodeFirst) and runner.model.fast is warmer.decode_models[id(runner)]
    warm._warmers.discard(warmer)  # the warmer flipped: it leaves the set before notifying
    warm.swap_kernels(runner)
    assert runner.model.kernels.name == "numba" and not isinstance(runner.model, warm.DecodeFirst)
    assert switch.only_numba and told == []


_DECODE_FIRST = """
import subprocess, sys
from modelc.artifact.reader import open_artifact
from modelc.engine import warm
from modelc.engine.runner import Runner
from modelc.kernels.hybrid import hybrid_kernel_set
sys.path.insert(0, sys.argv[2])
from test_runner import _generate
path = sys.argv[1]
subprocess.run([sys.executable, "-m", "modelc.engine.warm", path, "0", "0", "float32", "decode"], check=True)
kernels, switch = hybrid_kernel_set()
runner = Runner(open_artifact(path), num_kv_blocks=16, kernels=kernels)
w = warm.Warmer(runner, switch)
assert w._load_decode_kernels()
w._decode_first()
compiles = []
from numba.core import event
class L(event.Listener):  # every compile of this process from here on: none may happen
    def on_start(self, ev): compiles.append(getattr(ev.data.get("dispatcher"), "py_func", None).__qualname__)
    def on_end(self, ev): pass
event.register("numba:compile", L())
tokens = _generate(runner, 1, [5, 17, 3, 88, 41, 9, 60], 6, [0, 1])
m = runner.model
print("DECODE_FIRST", type(m).__name__, m.fast_steps, m.slow_steps, "COMPILES", compiles, "TOKENS", tokens)
"""


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_after_the_decode_helper_a_served_runner_decodes_on_numba_and_after_the_warmup_a_restart_compiles_nothing(
    tmp_path,
):
    """An empty kernel cache, the decode helper done: the served runner's decode steps run on the numba model
    (DecodeFirst), its prompt on the hybrid one, nothing compiles in the serving process, and the greedy tokens
    are the warm path's. Then this model's warmup fills the rest of that cache (no other model's kernels in it):
    the restart must find every kernel there (an earlier version decided "cold" from a kernel this model never
    calls, and compiled again at every restart). One cache for both halves: each compiles for minutes."""
    from modelc.artifact.reader import open_artifact
    from modelc.engine.runner import Runner
    from tests.engine.test_runner import _generate

    path = _q4_0_file(tmp_path, "a.modelc")
    want = _generate(Runner(open_artifact(path), num_kv_blocks=16), 1, [5, 17, 3, 88, 41, 9, 60], 6, [0, 1])
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba"), "MODELC_KERNEL_PACKS": "0"}
    out = subprocess.run([sys.executable, "-c", _DECODE_FIRST, str(path), str(pathlib.Path(__file__).parent)],
                         capture_output=True, text=True, timeout=1400, env=env)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"DECODE_FIRST DecodeFirst 5 1 COMPILES [] TOKENS {want}" in out.stdout, out.stdout
    out = subprocess.run([sys.executable, "-c", _WARM_ONLY, str(path)], capture_output=True, text=True, env=env,
                         timeout=1200)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    got = _restart(path, env)
    assert f"STATE ('numba', False) COMPILES [] TOKENS {want}" in got, got
