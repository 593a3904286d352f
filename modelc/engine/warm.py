"""ready_runner(build): a Runner that serves its first request without compiling; warmup(runner): compile all.

ready_runner builds the served runner on kernels/hybrid.py's KernelSet and starts a background thread
that warms a second Runner on the same weights (warmup below). That thread first loads the kernels from
numba's disk cache with compiling refused (kernels/nocompile.load_only): where every kernel the model
reaches is cached (a restart, or another model of the same weight types) the served runner is rebuilt on
numba before ready_runner returns, and nothing compiles. Otherwise (a cold cache) ready_runner returns at
once: requests run on the numpy references (blas_np for matmuls, their activations rounded as the numba
model's are: the same greedy tokens) for each kernel numba has not loaded yet. Two helper processes compile
meanwhile, one after the other, at the server's own priority (the decode path; then batches and prefill), and
the thread loads the decode kernels when the first is done and everything when both are: compiling in this
process would hold the GIL for seconds, which the threads serving on numpy need between calls. Once the decode
kernels are loaded, each served runner tries every step first on a numba model of the repacked weights with
compiling refused (DecodeFirst): decode steps run at full speed from then on, prompts and batches of streams on
the hybrid model until everything is loaded.
Models that are not a file (tests) compile in the thread. MODELC_COLD_START=wait restores
compiling everything first. A draft model (speculative decoding) runs on the same hybrid KernelSet and
warms in the same thread. Models whose forward reaches numba kernels outside the KernelSet (the q8_0
and mixed KV caches) warm first: /health stays 503 until every kernel is compiled or loaded.

warmup(runner): Runner.warmup; where numba's cache is cold, helper processes compile first and this one loads.

The flip of a runner that already serves is delivered, not done from the warmer thread: its owner (the
supervisor, for an engine actor) registers with deliver_swap(runner, notify), the warmer calls notify()
(which only posts a message) and the owner runs swap_kernels(runner) between two batches, so no forward
ever runs on a model being swapped. A runner nobody registered is flipped by the warmer itself.

NOTE: numba compiles one function at a time under the GIL, so threads do not help; processes
do, because compiled kernels land in numba's on-disk cache (cache=True) where any process loads
them. With a cold cache two helper processes (`python -m modelc.engine.warm ARTIFACT ... decode|batch`)
compile, side by side on two CPUs or more: the single-sequence decode path, and what the 2-sequence forward
and the prefill paths need (batched matmuls, BLAS conversions, the parallel and sgemm attention); then this
process runs the whole warmup, which loads everything from the cache and compiles nothing. A served process
that compiled kept LLVM's compile memory in its RSS (190 MB more for a 2-layer Q8_0 model: the memory bound of
tests/server/test_memory_served.py failed from an empty cache). In wait mode the model's build (its weights'
repacking runs numba kernels) waits for the helpers too. With a warm cache, or a model that is not a file
(tests build models in memory), it is Runner.warmup alone.
The helpers only ever write numba's cache: if one fails or is slow, this process compiles the rest.
The helpers run at this process's priority (WARMER_NICE): niced 10, on a host with ordinary load
(load average 10 on 2 cores) each got ~7% of a core and SmolLM2's kernels took many minutes.
Kernel packs (docs/kernel_packs.md, kernels/runtime/packs.py): where the CPU is one of the shipped ISA levels, the
kernels were compiled ahead of time and put into numba's cache when modelc.kernels was imported, so a cold start
takes the restart's path (the shadow loads everything, compiling refused) and everything below is for CPUs without
a pack (and MODELC_KERNEL_PACKS=0). Without a pack: not done, a first request at half the warm speed from an empty
cache. A tier of per-op numba kernels compiled before
/health says 200 was measured and not built (SmolLM2-135M: 31 CPU-s to compile, then 0.17 of the warm speed: the
per-op forward is ~425 Python-crossing calls a token); the options left (/health after the decode helper, kernels
shipped per ISA level in numba's cache format) are in docs/benchmarks.md (issue 38, 2026-12-07).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from modelc.artifact.reader import open_artifact
from modelc.engine.runner import Runner
from modelc.kernels.runtime.nocompile import WouldCompile, load_only, no_compile

HELPER_TIMEOUT_S = 900.0
WARMER_NICE = 0  # helpers compile at the server's priority: niced, they starved behind other load
HELPER_NICE_ENV = "MODELC_WARM_HELPER_NICE"
HELPER_PARENT_ENV = "MODELC_WARM_HELPER_PARENT"
ORPHANED_EXIT = 3  # the helper's exit status when it stopped because its parent was gone
COLD_START_ENV = "MODELC_COLD_START"  # "serve" (default): reference kernels while numba compiles; "wait"


def ready_runner(build: Callable[[Any], Any], source: Any = None, kv_dtype: str = "auto",
                 threads: int | None = None) -> Any:  # fmt: skip
    """build(kernels) -> Runner; returns it once a request can run without compiling (see the module doc).
    source, kv_dtype, threads: what build passes to the Runner, for the helpers of a wait-mode cold start."""
    from modelc.kernels.select import kernel_set

    hybrid = None
    if os.environ.get(COLD_START_ENV, "").lower() != "wait" and kernel_set().name == "numba":
        from modelc.kernels.hybrid import hybrid_kernel_set

        hybrid = hybrid_kernel_set(copy_budget_bytes())
    if hybrid is None:
        runner = _built_from_cache(build)
        if runner is None:  # the build itself (the weights' repacking) would compile: the helpers first
            if source is not None and kernel_set().name == "numba":
                compile_in_helpers(source, kv_dtype, threads)
            runner = build(None)
        warmup(runner)
        return resident(runner)
    kernels, switch = hybrid
    runner = build(kernels)
    _keep_vocabulary_out(runner, switch.copies)
    if not _compile_free(runner):
        switch.numba_only()
        warmup(runner)
        return resident(runner)
    with _lock:  # engines of one model (--engines N) share one warmer: their runners are alike
        warmer = next((w for w in _warmers if w.joins(runner)), None)
        if warmer is not None:
            warmer.served.append((runner, switch))
        else:
            warmer = Warmer(runner, switch)
            warmer.start()
    warmer.decided.wait()  # every kernel loaded from numba's cache (served on numba now), or one must compile
    if warmer.error is not None and warmer.done.is_set() and not warmer.compiled:
        raise warmer.error  # a broken install fails the load, as a plain warmup would
    return resident(runner)


def resident(runner: Any) -> Any:
    """The runner, once its KV pages (and its draft model's) are resident: they are made so in the background from
    the runner's construction on (cache/kv_pages.py), beside the rest of the load; the first request's decode
    steps then fault in none of them."""
    for owner in (runner, getattr(runner, "drafter", None)):
        wait = getattr(getattr(owner, "kv", None), "wait_resident", None)
        if wait is not None:
            wait()
    return runner


COPY_CAP_BYTES = 1 << 30
COPY_FRACTION = 0.25


def copy_budget_bytes() -> int:
    """The f32 weight copies a cold start's numpy matmuls may keep (kernels/matmul/blas_np.Dequantized): at most
    1 GiB and a quarter of MemAvailable. They go when the served runner flips to numba (they live in the hybrid
    KernelSet); a model that does not fit dequantizes the rest per call."""
    from modelc.cache.budget import mem_available_bytes

    avail = mem_available_bytes()
    return COPY_CAP_BYTES if avail is None else min(COPY_CAP_BYTES, int(avail * COPY_FRACTION))


def _keep_vocabulary_out(runner: Any, copies: Any) -> None:
    """No f32 copy of the output head (a tied one is the token-embedding table): with a large vocabulary it is
    the largest matrix of a small model, and its copy would outgrow the file (llama.cpp's memory: file + KV)."""
    for model in (runner.model, getattr(runner.drafter, "model", None)):
        head = getattr(model, "lm_head", None)
        if head is not None:
            copies.keep_out(head)


_warmers: set[Warmer] = set()
_lock = threading.Lock()


def compiling() -> bool:
    """Whether a cold start's warmer thread is still compiling kernels in this process (/health says so)."""
    return any(not w.done.is_set() for w in list(_warmers))


def _compile_free(runner: Any) -> bool:
    """Whether every kernel of this runner's forward goes through its KernelSet (so a hybrid set covers it):
    not the q8_0 and mixed KV caches, whose writes and attention call their numba kernels directly
    (cache/kv_pages.py); those models warm before /health says ok. A draft model is built on the same
    KernelSet, and soft-capping / sinks attention is the set's paged_attention_ext."""
    return runner.kv.kv_dtype in ("float32", "float16")


class Warmer:
    """The background thread: warmup() of a second Runner on the same weights, then the flip to numba-only:
    each served runner's model is rebuilt on the numba kernels, so it reads the repacked weights the second
    Runner made (one copy per source, models/weights.py) instead of the file layout the hybrid set read,
    and calls only kernels the warmup compiled.

    It first runs that warmup with compiling refused (loaded_from_cache): where it completes, the flip comes
    before `decided` is set and ready_runner returns a runner on numba (compiled stays False). Where a kernel
    would have to compile, `compiled` and `decided` are set and the helpers compile (_compile_in_helpers).
    Errors are kept in `error` (the served runner then stays on the reference kernels)."""

    def __init__(self, runner: Any, switch: Any) -> None:
        self.runner = runner
        self.served = [(runner, switch)]  # every runner this warmer flips to numba-only (under _lock)
        self.deliver: dict[int, Callable[[], object]] = {}  # id(runner) -> its owner's notify (deliver_swap)
        self.decode_models: dict[int, Any] = {}  # id(runner) -> its DecodeFirst model, once the decode path loaded
        self.decided, self.done = threading.Event(), threading.Event()
        self.compiled = False
        self.seconds = 0.0
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="modelc-warmer", daemon=True)

    def start(self) -> None:
        _warmers.add(self)
        self._thread.start()

    def joins(self, runner: Any) -> bool:
        """Whether `runner` can share this warmer: same weights, KV type and threads, still warming."""
        r = self.runner
        same = r.source is runner.source and r.kv.kv_dtype == runner.kv.kv_dtype and r.threads == runner.threads
        same = same and _draft_source(r) is _draft_source(runner)
        return same and not self.done.is_set()

    def _compile_in_helpers(self) -> None:
        """Cold cache: two helper processes compile, one after the other (the decode path; then batches and
        prefill), while this thread only loads their results. Compiling here would hold the GIL for seconds at a
        time, and the threads serving requests on the reference kernels need it between numpy calls. One after
        the other: the batch helper's forwards reach nearly every kernel of the decode path too, and two
        processes compile the same kernel twice (SmolLM2-135M Q4_1, empty cache: decode helper 86 CPU-s, batch
        helper alone 90, batch after decode 9). When the decode helper is done, the decode path's kernels load
        here (a one-token forward on a second runner, compiling refused) and the served runners decode on numba
        from then on (_decode_first); each call of the served hybrid set whose kernel and argument types are
        among them runs numba too (the norms, RoPE, attention, embedding rows, and the matmuls of the types not
        repacked, e.g. Q5_0 or the IQ types)."""
        r = self.runner
        for mode in ("decode", "batch"):
            if not _wait(_start_helper(r.source, r.kv.kv_dtype, r.threads, WARMER_NICE, mode)):
                continue
            if mode == "decode" and self._load_decode_kernels():
                self._decode_first()

    def _load_decode_kernels(self) -> bool:
        """Load what the decode helper compiled (a one-token forward on a second runner, compiling refused);
        True when all of it was there."""
        try:
            with load_only():
                self._new_shadow()._scratch_forward([[0]], "logits")
        except WouldCompile:
            return False  # the helper did not get that far: what did load stays loaded, the rest comes later
        return True

    def _decode_first(self) -> None:
        """The decode path is loaded: each served runner takes a numba model (the repacked weights, the decode
        layers) for every step it can run without compiling (DecodeFirst), delivered to its owner as the flip
        is. Built here, compiling refused: a model whose build would compile keeps the hybrid set alone."""
        with _lock:
            served = list(self.served)
        for runner, _ in served:
            try:
                with load_only():
                    fast = _numba_model(runner)
            except WouldCompile:
                continue
            with _lock:
                self.decode_models[id(runner)] = fast
                notify = self.deliver.get(id(runner))
            if notify is not None:
                notify()  # its owner installs it between batches (swap_kernels)
            else:
                _install_decode_first(runner, fast)

    def _run(self) -> None:
        t0 = time.perf_counter()
        try:
            for attempt in range(2):  # a second try: another process may have been rewriting the cache
                try:
                    shadow = self._shadow() if attempt == 0 else None  # None: a kernel would have to compile
                    if shadow is None:
                        self.compiled = True
                        self.decided.set()  # /health: "compiling"; requests run on the references meanwhile
                        if attempt == 0:
                            self._compile_in_helpers()
                        shadow = self._new_shadow()
                        warmup(shadow, helpers=False)  # loads what the helpers compiled, compiles what they did not
                    with _lock:
                        for served, sw in self.served:
                            notify = self.deliver.get(id(served))
                            if notify is not None:
                                notify()  # its owner swaps it between batches (swap_kernels)
                                continue
                            served.rebuild_on_numba()
                            sw.numba_only()
                        _warmers.discard(self)  # no runner joins a warmer that has flipped
                    self.error = None
                    break
                except Exception as e:  # noqa: BLE001 - kept for ready_runner; the references keep serving
                    self.error = e
            if self.error is not None:
                print(f"modelc: compiling kernels failed, serving on the numpy reference kernels: "
                      f"{type(self.error).__name__}: {self.error}", file=sys.stderr, flush=True)  # fmt: skip
        finally:
            self.seconds = time.perf_counter() - t0
            self.done.set()
            self.decided.set()
            with _lock:
                _warmers.discard(self)

    def _new_shadow(self) -> Any:
        """The second Runner, on numba: the same weights (repacked once for both, models/weights.py)."""
        r = self.runner
        return Runner(r.source, num_kv_blocks=2, kv_dtype=r.kv.kv_dtype, threads=r.threads,
                      draft_source=_draft_source(r))  # fmt: skip

    def _shadow(self) -> Any:
        """The second Runner, built and warmed up with compiling refused (its repacking runs numba kernels too),
        or None where a kernel would have had to compile."""
        try:
            with load_only():
                shadow = self._new_shadow()
        except WouldCompile:
            return None
        return shadow if loaded_from_cache(shadow) else None


def deliver_swap(runner: Any, notify: Callable[[], object]) -> bool:
    """From now on the warmer of `runner` calls notify() (from its thread; it must not block) instead of
    flipping the runner itself; the owner then calls swap_kernels(runner) between batches. False when no
    flip is pending (the runner is on numba already, or not on the hybrid set)."""
    with _lock:
        for warmer in _warmers:
            if any(r is runner for r, _ in warmer.served):
                warmer.deliver[id(runner)] = notify
                return True
    return False


def swap_kernels(runner: Any) -> None:
    """The swap the warmer delivered (deliver_swap), run by the runner's owner between batches: while its warmer
    still compiles, the decode path's numba model in front of the hybrid one (DecodeFirst); once it is done,
    the flip: rebuild the model on numba (Runner.rebuild_on_numba) and end the hybrid set's checks. A runner
    not on the hybrid set is left alone; a failed rebuild leaves it serving as it was."""
    kernels = getattr(getattr(runner, "model", None), "kernels", None)
    if getattr(kernels, "name", None) != "hybrid":
        return
    with _lock:
        warmer = next((w for w in _warmers if any(r is runner for r, _ in w.served)), None)
        fast = None if warmer is None else warmer.decode_models.get(id(runner))
    if warmer is not None:  # not flipped yet (a flipped warmer has left _warmers)
        if fast is not None and not isinstance(runner.model, DecodeFirst):
            _install_decode_first(runner, fast)
        return
    try:
        runner.rebuild_on_numba()
    except Exception as e:  # noqa: BLE001 - the reference kernels keep serving, as after a failed warm-up
        print(f"modelc: swapping to the numba kernels failed, serving on the numpy reference kernels: "
              f"{type(e).__name__}: {e}", file=sys.stderr, flush=True)  # fmt: skip
        return
    kernels.matmul.switch.numba_only()


class DecodeFirst:
    """A served model while a cold start compiles: each forward runs first on `fast`, a numba model of the same
    source (repacked weights, the decode layers), with compiling refused; a step that reaches a kernel not
    compiled yet (a prompt, a batch of streams: the batch helper's kernels) runs again on `slow`, the hybrid
    model (file layout, the numpy references where numba lacks a kernel). Every step writes the whole KV of its
    positions, so the second try rewrites what the first left. Everything but forward is `slow`'s (its
    KernelSet, "hybrid", is what swap_kernels checks before the flip)."""

    def __init__(self, fast: Any, slow: Any) -> None:
        self.fast, self.slow = fast, slow
        self.fast_steps = self.slow_steps = 0

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        try:
            with no_compile():
                out = self.fast.forward(*args, **kwargs)
        except WouldCompile:
            self.slow_steps += 1
            return self.slow.forward(*args, **kwargs)
        self.fast_steps += 1
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.slow, name)


def _numba_model(runner: Any) -> Any:
    """A numba model of the runner's source: its weights are the ones the warmer's runners repacked (shared)."""
    from modelc.models.registry import build_model

    return build_model(runner.source)


def _install_decode_first(runner: Any, fast: Any) -> None:
    from modelc.engine.thread_tuner import ThreadTuner

    runner.model = DecodeFirst(fast, runner.model)
    runner.tuner = ThreadTuner(runner.tuner.candidates[0])  # its timings were of the hybrid kernels


def loaded_from_cache(runner: Any) -> bool:
    """Run the runner's warmup with compiling refused: True when every kernel it reaches loaded from numba's
    disk cache (or was in memory already), False at the first one that would have had to compile (the
    kernels loaded until then stay loaded)."""
    try:
        with load_only():
            warmup(runner, helpers=False)
    except WouldCompile:
        return False
    return True


def warmup(runner: Any, *, helpers: bool = True) -> float:
    """Compile (or load) every kernel a request can reach; returns seconds. A model that is a file, where a kernel
    is not in numba's cache: helper processes compile (compile_in_helpers) and this process then loads what they
    wrote, so none of LLVM's compile memory stays in it (a server's RSS); what they did not compile (a helper
    failed) compiles here. helpers=False: this process alone."""
    t0 = time.perf_counter()
    if helpers and _helpable(runner):
        if loaded_from_cache(runner):
            return time.perf_counter() - t0  # every kernel was in numba's cache
        compile_in_helpers(runner.source, runner.kv.kv_dtype, runner.threads)
    runner.warmup()
    return time.perf_counter() - t0


def compile_in_helpers(source: Any, kv_dtype: str, threads: int | None = None) -> bool:
    """Compile the kernels of a model that is a file into numba's cache in two helper processes, the decode path
    and the batch / prefill kernels, and wait for them: side by side where there are two CPUs or more, else one
    after the other (the second then loads most of its kernels from the first's). False where none started.
    The batch helper's forwards reach most of the decode path too, so side by side both compile it: more CPU,
    the same wall time as this process compiling the decode path beside the batch helper (an earlier version),
    and none of the compile's memory here."""
    modes = ("decode", "batch")
    if (os.cpu_count() or 1) < 2:
        return sum(_wait(_start_helper(source, kv_dtype, threads, mode=m)) for m in modes) > 0
    started = [_start_helper(source, kv_dtype, threads, mode=m) for m in modes]
    return sum(_wait(h) for h in started) > 0


def _wait(helper: subprocess.Popen | None) -> bool:
    """Wait for a helper (killed past HELPER_TIMEOUT_S); False for one that never started."""
    if helper is None:
        return False
    try:
        helper.wait(timeout=HELPER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        helper.kill()
        helper.wait()
    return True


def _built_from_cache(build: Callable[[Any], Any]) -> Any:
    """build(None) with compiling refused (its weights' repacking runs numba kernels), or None where a kernel
    would have to compile (what did load stays loaded)."""
    try:
        with load_only():
            return build(None)
    except WouldCompile:
        return None


def _helpable(runner: Any) -> bool:
    """Whether helper processes can compile for this runner: numba kernels, a model that is a file, a Python."""
    return getattr(runner.model.kernels, "name", "") in _NUMBA and _artifact_args(runner.source) is not None


def _draft_source(runner: Any) -> Any:
    drafter = getattr(runner, "drafter", None)
    return None if drafter is None else drafter.source


def _artifact_args(source: Any) -> list[str] | None:
    path = getattr(source, "path", None)
    if not path or not os.path.isfile(path):
        return None
    return [str(path), str(int(getattr(source, "offset", 0) or 0)), str(int(getattr(source, "file_size", 0) or 0))]


_NUMBA = ("numba", "hybrid")  # the kernel sets whose runners a helper compiles for


def _start_helper(source: Any, kv_dtype: str, threads: int | None, nice: int = 0,
                  mode: str = "batch") -> subprocess.Popen | None:  # fmt: skip
    args = _artifact_args(source)
    if args is None or getattr(sys, "frozen", False):  # a compiled executable: sys.executable is the app
        return None
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "modelc.engine.warm", *args, kv_dtype, mode, str(threads or 0)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            # the helper only compiles: the repacked weights it makes go nowhere (this process writes them)
            env={**os.environ, HELPER_NICE_ENV: str(nice), HELPER_PARENT_ENV: str(os.getpid()),
                 "MODELC_REPACK_CACHE": "0"},
        )  # fmt: skip
    except OSError:
        return None


def _helper_main(argv: list[str]) -> int:
    """The helper: load the artifact and compile the decode path (mode "decode"), or the 2-sequence forward
    and the prefill kernels ("batch", the default)."""
    _exit_with_parent()
    path, offset, length, kv_dtype, *rest = argv
    mode = rest[0] if rest else "batch"
    threads = int(rest[1]) if len(rest) > 1 else 0  # the served runner's (0: numba's default)
    if int(os.environ.get(HELPER_NICE_ENV) or 0) > 0:
        os.nice(int(os.environ[HELPER_NICE_ENV]))
    art = open_artifact(path, offset=int(offset), length=int(length) or None)
    runner = Runner(art, num_kv_blocks=2, kv_dtype=kv_dtype, threads=threads or None)
    if mode == "decode":
        runner._scratch_forward([[0]], "logits")
        return 0
    runner._scratch_forward([[0], [0]], "logits")
    runner._warm_prefill_kernels()
    return 0


def _exit_with_parent() -> None:
    """The helper only feeds its parent's cache: when the parent is gone (a server stopped mid-compile), stop."""
    parent = int(os.environ.get(HELPER_PARENT_ENV) or os.getppid())  # the env: it may be gone already

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(ORPHANED_EXIT)

    threading.Thread(target=watch, name="modelc-warm-parent", daemon=True).start()


if __name__ == "__main__":
    raise SystemExit(_helper_main(sys.argv[1:]))
