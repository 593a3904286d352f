"""The thread tuner's choices kept across restarts: a restart decodes on the thread count an earlier process of the
same model file, thread budget and CPU chose, with no first probe (engine/thread_tuner.py).

A probe costs the request it runs in: half its steps on half the threads, and on a 2-vCPU host the first steps
back on every thread wait for the second one to wake. A server's first request after a restart paid it every time
(SmolLM2-135M Q4_1: a probe started within the first 8-18 of its 31 decode steps in each of 3 restarts, the
other process on the machine being the client reading the stream; docs/benchmarks.md, issue 38).

One small JSON file per key, {"format": 1, "choices": {"<batch key>": threads}}, in the kernels' cache folder
(kernels/runtime/jit_cache: already one per modelc kernels' source and CPU flags), beside the warm lists; the key
digests the model file's identity (path, offset, length, size, mtime), the thread budget and the CPU (count and
model name). Only the tuner of a runner on the numba kernels keeps one (a cold start's hybrid kernels time other
code). Written (temp file + rename) when a probe decides something new; read defensively: a missing, unreadable,
corrupt or foreign file is no choice, and the tuner probes as it did before. A kept choice is where a tuner
starts: it probes again after PERIOD steps, or at once when its steps drift, as after any probe. No numba here.
"""

from __future__ import annotations

import functools
import json
import os
import pathlib
from typing import Any

from modelc import tmpfiles

FORMAT = 1
MAX_BYTES = 4096  # a choice file is a few dozen bytes: anything longer is not one
KEEP = 64  # files kept per cache folder (the most recently written): tests write one per temporary model file


@functools.lru_cache(maxsize=1)
def cpu_identity() -> tuple[int, str]:
    """(CPU count, model name from /proc/cpuinfo or '')."""
    name = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return os.cpu_count() or 1, name


class ChoiceFile:
    """load() -> {batch key: threads} kept for one model, thread budget and CPU; save(choices) when they change."""

    def __init__(self, path: pathlib.Path) -> None:
        self.path = path
        self._kept: dict[int, int] | None = None  # what the file holds, as last read or written

    def load(self) -> dict[int, int]:
        """The kept choices; {} where the file is missing, unreadable or not a choice file of this format."""
        try:
            with open(self.path, "rb") as f:
                raw = f.read(MAX_BYTES + 1)
            data = json.loads(raw) if len(raw) <= MAX_BYTES else None
        except (OSError, ValueError):  # ValueError: JSON's and UTF-8's decoding errors
            return {}
        choices = data.get("choices") if isinstance(data, dict) and data.get("format") == FORMAT else None
        if not isinstance(choices, dict):
            return {}
        out = {}
        for k, n in choices.items():
            if isinstance(k, str) and k.isdigit() and type(n) is int and n > 0:
                out[int(k)] = n
        self._kept = dict(out)
        return out

    def save(self, choices: dict[int, int]) -> None:
        """Write the choices (temp file + rename) unless the file holds them already; a cache folder that cannot
        be written is no error (the next start probes)."""
        if choices == self._kept:
            return
        text = json.dumps({"format": FORMAT, "choices": {str(k): int(n) for k, n in sorted(choices.items())}})
        tmp = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tmpfiles.make(self.path.parent, self.path.name)
            with os.fdopen(fd, "w") as f:
                f.write(text)
            os.replace(tmp, self.path)
            tmp = None
        except OSError:
            return
        finally:
            if tmp is not None:
                tmp.unlink(missing_ok=True)
        self._kept = dict(choices)
        from modelc.kernels.runtime.warm_list import prune

        prune(self.path.parent, "*.json", KEEP)


def for_source(source: Any, threads: int) -> ChoiceFile | None:
    """The choice file of a model source read from a file, for this thread budget and CPU; None for a model that
    is not a file (tests build models in memory) or where modelc's source cannot be digested (a frozen app)."""
    from modelc.engine.warm_replay import file_identity
    from modelc.kernels.runtime import jit_cache, warm_list

    identity = file_identity(source)
    key = None if identity is None else warm_list.key("thread-choice", identity, int(threads), cpu_identity())
    if key is None:
        return None
    return ChoiceFile(jit_cache.cache_dir() / "thread-choices" / f"{key}.json")
