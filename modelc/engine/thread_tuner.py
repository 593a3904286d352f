"""How many threads a decode step runs on, chosen by timing decode steps rather than assumed.

llama.cpp takes two thread counts (--threads for generation, --threads-batch for prompts) because a
decode step is not a prefill: it streams every weight once and does little arithmetic on it. What it
gains from a second thread depends on the machine, and measured on a 2-vCPU VM it is often nothing:

- quiet, TinyLlama Q4_0: 1 thread 34.7 / 32.4 tok/s, 2 threads 35.3 / 32.1 (one core streams nearly
  the bandwidth both do; prefill is another matter: 144-150 against 218-274 tok/s);
- beside one busy process, a Qwen3-MoE-shaped model (32 experts, 4 active): 1 thread 111-117 tok/s,
  2 threads 48-57. The second thread then waits for a core, and every kernel of the token waits for it.

So decode-shaped steps (every chunk one token) alternate between the configured thread count and half of
it in short blocks (the first step after a switch not counted), keep the faster by median, and probe again
every PERIOD steps, or sooner where the chosen count's recent steps run DRIFT times slower than it measured
(a neighbour process started). Batch sizes are tuned apart (8 streams do more arithmetic per byte than 1).
Prefill steps always use every thread. MODELC_THREAD_TUNER=0 turns tuning off. No numba here.
"""

from __future__ import annotations

import os
import statistics
from collections import deque
from dataclasses import dataclass, field

BLOCK = 4
"""Steps per probe block; the first of each is not counted (the switch itself)."""
ROUNDS = 2
"""Blocks per candidate in a probe, the candidates' blocks alternating so drift hits both."""
PERIOD = 256
"""Steps on the chosen count before probing again."""
DRIFT = 1.5
"""Probe again early when the chosen count's last BLOCK steps' median is this many times its probe median."""


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
    best: int = 0  # 0: no probe finished yet
    best_s: float = 0.0
    since: int = 0  # steps on `best` since the last probe
    recent: deque = field(default_factory=lambda: deque(maxlen=BLOCK))


class ThreadTuner:
    """threads_for(key) before a decode step, record(key, threads, seconds) after it."""

    def __init__(self, threads: int):
        self.candidates = sorted({max(1, int(threads)), max(1, int(threads) // 2)}, reverse=True)
        self._keys: dict[int, _Key] = {}

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
        st = self._keys.setdefault(key, _Key())
        if not st.plan and (not st.best or st.since >= PERIOD or self._drifted(st)):
            st.plan = [n for _ in range(ROUNDS) for n in self.candidates for _ in range(BLOCK)]
            st.samples = {n: [] for n in self.candidates}
            st.recent.clear()
        return st.plan[0] if st.plan else st.best

    def record(self, key: int, threads: int, seconds: float) -> None:
        st = self._keys.get(key)
        if st is None or not self.active:
            return
        if st.plan:
            if st.plan[0] != threads:  # not the step threads_for planned (cannot happen in the runner)
                return
            first = len(st.plan) % BLOCK == 0  # the plan is whole blocks: a block's first step
            st.plan.pop(0)
            if not first:
                st.samples[threads].append(seconds)
            if not st.plan:
                med = {n: statistics.median(v) for n, v in st.samples.items()}
                st.best = min(med, key=lambda n: (med[n], -n))
                st.best_s, st.since = med[st.best], 0
            return
        if threads == st.best:
            st.since += 1
            st.recent.append(seconds)

    @staticmethod
    def _drifted(st: _Key) -> bool:
        return len(st.recent) == BLOCK and statistics.median(st.recent) > DRIFT * st.best_s
