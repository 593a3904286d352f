"""How many threads a decode step runs on, chosen by timing decode steps rather than assumed.

llama.cpp takes two thread counts (--threads for generation, --threads-batch for prompts) because a
decode step is not a prefill: it streams every weight once and does little arithmetic on it. What it
gains from a second thread depends on the machine, and measured on a 2-vCPU VM it is often nothing:

- quiet, TinyLlama Q4_0: 1 thread 34.7 / 32.4 tok/s, 2 threads 35.3 / 32.1 (one core streams nearly
  the bandwidth both do; prefill is another matter: 144-150 against 218-274 tok/s);
- beside one busy process, a Qwen3-MoE-shaped model (32 experts, 4 active): 1 thread 111-117 tok/s,
  2 threads 48-57. The second thread then waits for a core, and every kernel of the token waits for it.

So decode-shaped steps (every chunk one token) of SMALL rows or fewer alternate between half the configured
thread count and all of it in short blocks (the first step after a switch not counted) and keep the faster by
median; they probe again every PERIOD steps, or sooner where every thread's recent steps run DRIFT times
slower than their best (a neighbour process started). The first probe waits FIRST_PROBE steps on every thread
unless other processes are runnable beside this one (`others_running`: /proc/loadavg less this process's own
runnable threads) or the steps drift: on a
quiet machine a probe is pure cost, and a server's first request paid it (SmolLM2-135M served after a restart:
12 of its first 24 steps on 1 thread, 1.6x slower, and the first steps back on 2 threads 100-300 ms each while
the second thread woke; first request 0.3-0.8 of the warm speed, docs/benchmarks.md, issue 38). A small batch
whose first step finds other processes runnable (busy_now: in each of 3 reads) starts on half the threads instead
and waits FIRST_PROBE steps there before probing (and FIRST_PROBE more while busy_now still says so), the
machine called contended meanwhile: beside one busy process
its first steps on every thread took 100-300 ms each, and a first request that probed at once ran at 0.16-0.36 of
the warm speed from a cold start with a kernel pack (a restart starts on its kept count). Bigger batches do more arithmetic per byte and a probe
costs them more (at 16 streams half the threads is ~2x slower; a 16-token benchmark would be all probe):
they stay on the configured count and probe only on drift, or when a probe found half the threads faster
(the machine is contended). Batch sizes are tuned apart.

The threads spin between kernels (modelc/spin.py: GOMP_SPINCOUNT), which is what makes a quiet decode
fast and a contended one with every thread very slow (TinyLlama Q4_0 beside one busy process: 2-9 tok/s on
2 threads, 27-29 on 1). So a probe starts on half the threads and cuts a candidate short where the median of its
last ABORT_STEPS counted steps runs ABORT times slower than the other's median (one step is not enough: a thread
woken after a block on half the threads took 100-300 ms for one or two steps of a served 7 ms decode, which cut
every-thread probes short and left the process on 1 thread, 75-95 against 125-160 tok/s); a probe cut short waits twice as long (up to
MAX_PERIOD steps) before the next. Steps the tuner does not time (prefill, drafts, embeddings) run on
prompt_threads(): half the threads while the machine is contended, else all. MODELC_THREAD_TUNER=0 turns
tuning off. No probe starts while weights move onto huge pages after a load (kernels/runtime/hugepages.py): steps
run on every thread until the move is done. A runner on the numba kernels keeps the choices of small batches across
restarts (engine/thread_choice.py): a restart starts on the kept count, as probed, so its first request runs no probe.
No numba here.
"""

from __future__ import annotations

import os
import statistics
import time
from collections import deque
from dataclasses import dataclass, field

from modelc.engine.thread_choice import ChoiceFile
from modelc.kernels.runtime import hugepages

BLOCK = 6
"""Steps per probe block; the first of each is not counted (the switch itself). A thread idle for a while
runs slow for a few steps after (its vCPU's core clocked down?): with 4-step blocks a quiet Qwen3-MoE
stream timed 2 threads at 7.9-13.4 ms a step against 7.3-8.7 on 1, and stayed on 1, 20% slower than 2."""
ROUNDS = 2
"""Blocks per candidate in a probe, the candidates' blocks alternating so drift hits both."""
PROBE_STEPS = 2 * BLOCK * ROUNDS
"""Steps of one whole probe (two candidates: every thread and half of them)."""
PERIOD = 256
"""Steps on the chosen count before probing again."""
MAX_PERIOD = 16 * PERIOD
"""The longest wait between probes, reached by probes cut short one after another (a lasting neighbour)."""
ABORT = 2.0
"""A probe drops a candidate whose last ABORT_STEPS counted steps' median is this many times another's median."""
ABORT_STEPS = 3
"""Counted steps of a candidate before it can be cut short (their median: one or two slow wake-ups do not)."""
FIRST_PROBE = 64
"""Steps a small batch runs on every thread before its first probe, unless other processes are runnable or the
steps drift (a quiet machine's first requests at full speed; a busy one probes within its first BLOCK steps)."""
WARM_STEPS = FIRST_PROBE + PROBE_STEPS
"""Decode steps of one stream after which its first probe is over, quiet or busy: benchmarks warm up past them."""
DRIFT = 1.5
"""Probe again early when the chosen count's last BLOCK steps' median is this many times its best median."""
SMALL = 2
"""Decode batches of up to this many rows probe from their first step (a probe there costs ~nothing)."""
PREFER = 1.1
"""Half the threads must be this many times faster than all of them to be chosen (noise and a slow start
after idling favour the count just run; quiet, every thread is the better bet)."""
CONTENDED = 1.3
"""A probe calls the machine contended where half the threads ran this many times faster
(beside one busy process 2 threads were ~2x slower than 1; quiet, the two were within the noise)."""


def enabled() -> bool:
    return os.environ.get("MODELC_THREAD_TUNER", "1") != "0"


def batch_key(rows: int) -> int:
    """Decode batches of similar size share a tuning: 1, 2, 3, 4, then powers of two."""
    if rows <= 4:
        return rows
    return 1 << (rows - 1).bit_length()


@dataclass(slots=True)
class _Key:
    plan: list[int] = field(default_factory=list)  # thread counts of the probe steps still to run
    samples: dict[int, list[float]] = field(default_factory=dict)
    best: int = 0  # the thread count chosen (the configured count until a probe decides)
    best_s: float = float("inf")  # the lowest median of BLOCK steps seen on `best`
    since: int = 0  # steps on `best` since the last probe
    period: int = PERIOD  # steps on `best` before the next probe (doubled after a probe cut short)
    recent: deque = field(default_factory=lambda: deque(maxlen=BLOCK))
    epoch: int = 0  # the tuner's contention epoch this key last probed in
    probed: bool = True  # False for a small batch until its first probe (FIRST_PROBE)
    busy: int = 0  # bits: which of the last BLOCK steps before the first probe saw others runnable (others_running)
    started_half: bool = False  # others were runnable at its first step: it starts on half the threads


class ThreadTuner:
    """threads_for(key) before a decode step, record(key, threads, seconds) after it."""

    def __init__(self, threads: int, memory: ChoiceFile | None = None):
        """memory: where the choices of small batches are kept across restarts (engine/thread_choice.py): a key
        with a kept choice starts on it, probed, and the next probe comes after PERIOD steps or on drift."""
        self.candidates = sorted({max(1, int(threads)), max(1, int(threads) // 2)}, reverse=True)
        self._keys: dict[int, _Key] = {}
        self.memory = memory
        kept = memory.load() if memory is not None and self.active else {}
        self._kept = {k: n for k, n in kept.items() if k <= SMALL and n in self.candidates}
        self.contended = False  # a probe found half the threads CONTENDED times faster (a small batch's clears it)
        self.epoch = 0  # bumped each time that becomes true: bigger batches then probe once

    @property
    def active(self) -> bool:
        return len(self.candidates) > 1

    def choice(self, key: int) -> int:
        """The thread count decided for `key` (the configured count until a probe has finished)."""
        st = self._keys.get(key)
        return st.best if st is not None and st.best else self.candidates[0]

    def threads_for(self, key: int) -> int:
        if not self.active:
            return self.candidates[0]
        st = self._keys.get(key)
        if st is None:
            kept = self._kept.get(key)
            st = self._keys[key] = _Key(best=kept or self.candidates[0], epoch=-1, probed=key > SMALL or bool(kept))
            if not st.probed and busy_now(self.candidates[0]):  # a neighbour holds a core: start as a probe would end
                st.best, st.started_half = self.candidates[-1], True
                self.epoch += not self.contended
                self.contended = True  # prompts on half the threads too, until a small batch's probe says otherwise
        # not while weights move onto huge pages (kernels/runtime/hugepages.py, the first seconds after a load): the
        # move stalls a core, and a probe would time that instead of the thread counts
        if not st.plan and self._due(key, st) and not hugepages.moving():
            st.plan = [n for _ in range(ROUNDS) for n in self.candidates[::-1] for _ in range(BLOCK)]
            st.samples = {n: [] for n in self.candidates}
            st.recent.clear()
            st.epoch = self.epoch
            st.probed = True
        return st.plan[0] if st.plan else self.choice(key)

    def prompt_threads(self) -> int:
        """The thread count of the steps not tuned (prefill, drafts, embeddings)."""
        return self.candidates[-1] if self.contended else self.candidates[0]

    def _due(self, key: int, st: _Key) -> bool:
        if not st.probed:  # a small batch's first probe: at once on a busy machine, else after FIRST_PROBE steps
            if st.started_half:  # busy from the start and on half the threads already: as a quiet start waits,
                if st.since < FIRST_PROBE and not self._drifted(st):
                    return False
                if busy_now(self.candidates[0]):  # the neighbour is still there: every thread would wait, again
                    st.since = 0
                    return False
                return True
            st.busy = ((st.busy << 1) | others_running(self.candidates[0])) & ((1 << BLOCK) - 1)
            return st.busy.bit_count() * 2 > BLOCK or st.since >= FIRST_PROBE or self._drifted(st)
        # a slowdown on every thread may be a neighbour (probe at once); on half of them, more threads would
        # only compete harder for the cores: that waits for the period
        if st.best == self.candidates[0] and self._drifted(st):
            return True
        if key <= SMALL:
            return st.since >= st.period
        return self.contended and (st.epoch < self.epoch or st.since >= st.period)

    def record(self, key: int, threads: int, seconds: float) -> None:
        st = self._keys.get(key)
        if st is None or not self.active:
            return
        if st.plan:
            if st.plan[0] != threads:  # not the step threads_for planned (cannot happen in the runner)
                return
            first = len(st.plan) % BLOCK == 0  # the plan is whole blocks: a block's first step
            st.plan.pop(0)
            # not on a block's first step: that one may pay for the switch (a thread's first wake-up after a
            # while took 21.5 ms of a 7.8 ms Qwen3-MoE step once: 1 thread then stuck, 15-20% slower)
            if not first:
                mine = st.samples[threads]
                mine.append(seconds)
                others = {m: statistics.median(v) for m, v in st.samples.items() if m != threads and len(v) >= 2}
                slow = statistics.median(mine[-ABORT_STEPS:])
                if others and len(mine) >= ABORT_STEPS and slow > ABORT * min(others.values()):
                    st.plan.clear()  # far slower than a candidate already timed: no more steps on this one
                    self._decide(key, st, {**others, threads: slow})
                    st.period = min(2 * st.period, MAX_PERIOD)
                    return
            if not st.plan:
                self._decide(key, st, {n: statistics.median(v) for n, v in st.samples.items()})
                st.period = PERIOD
            return
        if threads == st.best:
            st.since += 1
            st.recent.append(seconds)
            if len(st.recent) == BLOCK and not self._drifted(st):
                st.best_s = min(st.best_s, statistics.median(st.recent))

    def _decide(self, key: int, st: _Key, med: dict[int, float]) -> None:
        full, half = self.candidates[0], self.candidates[-1]
        st.best = min(med, key=lambda n: (med[n] * (1.0 if n == full else PREFER), -n))
        st.best_s, st.since = med[st.best], 0
        # contended: half the threads clearly faster (quiet, they are often even); only a small batch's probe
        # clears it (a big batch is expected to gain from every thread)
        now = full in med and half in med and med[full] > CONTENDED * med[half]
        if now or key <= SMALL:
            self.epoch += now and not self.contended
            self.contended = now
        if key <= SMALL and self.memory is not None:
            self._kept[key] = st.best
            self.memory.save(dict(self._kept))  # writes only what changed

    @staticmethod
    def _drifted(st: _Key) -> bool:
        return len(st.recent) == BLOCK and statistics.median(st.recent) > DRIFT * st.best_s


LOADAVG = "/proc/loadavg"
TASKS = "/proc/self/task"


def others_running(threads: int, path: str = LOADAVG, tasks: str = TASKS) -> bool:
    """Whether other processes want a core this decode's `threads` spinning threads would take: the tasks
    runnable on the machine right now (the fourth field of /proc/loadavg, runnable/total) less this process's
    own runnable threads, above the CPUs the decode leaves. Its own are no neighbour: a server's event loop
    (formatting the last token) and the caller are runnable at most steps, and counting them made every served
    first request probe at once on a quiet machine. False where that cannot be read (not Linux)."""
    try:
        with open(path) as f:
            running = int(f.read().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return False
    spare = (os.cpu_count() or 1) - threads
    if running - 1 <= spare:  # the caller runs: no room for a neighbour beyond what is spare (no task read)
        return False
    return running - own_running(tasks) > spare


def busy_now(threads: int, reads: int = 3, gap_s: float = 0.001) -> bool:
    """others_running in each of `reads` reads `gap_s` apart (once per batch size and process, at its first decode
    step): a CPU-bound neighbour is runnable in all of them, a passing task (a shell, a timer) rarely is."""
    for i in range(reads):
        if i:
            time.sleep(gap_s)
        if not others_running(threads):
            return False
    return True


def own_running(tasks: str = TASKS) -> int:
    """This process's threads in state R (running or runnable), from /proc/self/task/*/stat; at least 1 (the
    caller)."""
    n = 0
    try:
        names = os.listdir(tasks)
    except OSError:
        return 1
    for tid in names:
        try:
            with open(f"{tasks}/{tid}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # a thread that ended meanwhile
        end = stat.rfind(b")")  # the state follows the command name, which may hold spaces and parentheses
        n += stat[end + 2 : end + 3] == b"R"
    return max(n, 1)
