"""Chat templates render in a separate, memory-limited worker process (one per modelc process).

A template comes from a model file and may be hostile. minijinja's fuel stops most runaway loops,
but not all (iterating a lazily concatenated list of 2^33 items hangs), and a failed allocation in
Rust aborts the whole process. So the render runs in a child process with an address-space limit,
fuel, an output cap and a wall-clock timeout: whatever the template does, the request gets a
TemplateError (HTTP 400) and the daemon keeps running; a dead or stuck worker is replaced.

Protocol: one JSON line per request {"source", "context", "fuel", "limit"} and one JSON line per
reply {"text"} or {"error", "kind"}. `python -m modelc.tokenizer.template_child` is the worker
(tokenizer/template_child.py: the child's side; this module is the parent's).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import subprocess
import sys
import threading
import time
from typing import Any

TIMEOUT_S = 5.0  # real templates render in milliseconds
STARTUP_TIMEOUT_S = 30.0
RETRY_AFTER_S = 60.0  # after a failed start, render in process this long before trying again
WORKER_MEMORY_BYTES = 2 << 30  # the worker's address-space limit
MAX_CACHED = 16  # compiled templates kept by the worker


class RenderFailed(Exception):
    """The worker reported an error ("raise": the template's own raise_exception) or died."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.message, self.kind = message, kind


class WorkerUnavailable(Exception):
    """No worker process could be started here (the caller renders in process instead)."""


class RenderWorker:
    """The parent's handle on the worker: started on first use, restarted after a failure."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._failed_at: float | None = None  # when a worker last failed to start

    def render(self, source: str, context: dict[str, Any], fuel: int, limit: int, now: str = "") -> str:
        """Raises RenderFailed for a failed render, WorkerUnavailable when no worker can be started."""
        return self._render(source, context, fuel, limit, now)

    def _render(self, source: str, context: dict[str, Any], fuel: int, limit: int, now: str) -> str:
        """now: the parent's current time (ISO), what the template's strftime_now() sees."""
        req = {"source": source, "context": context, "fuel": fuel, "limit": limit, "now": now}
        line = json.dumps(req, default=str)
        with self._lock:
            proc = self._send(line)
            try:
                reply = self._read(proc, TIMEOUT_S)
            except (OSError, ValueError):
                reply = None
            if reply is None:
                self._kill()
                raise RenderFailed("the template exhausted its time or memory budget", "budget")
        if "text" in reply:
            return str(reply["text"])
        raise RenderFailed(str(reply.get("error") or "unknown error"), str(reply.get("kind") or "other"))

    def _send(self, line: str) -> subprocess.Popen[bytes]:
        """Write the request; a worker found dead before it got it is replaced once."""
        for attempt in (0, 1):
            proc = self._ensure()
            try:
                assert proc.stdin is not None
                proc.stdin.write(line.encode() + b"\n")
                proc.stdin.flush()
                return proc
            except OSError:
                self._kill()
                if attempt:
                    raise WorkerUnavailable("the chat template worker process stopped") from None
        raise AssertionError("unreachable")

    def _ensure(self) -> subprocess.Popen[bytes]:
        if self._proc is None or self._proc.poll() is not None:
            if getattr(sys, "frozen", False):  # a frozen app: sys.executable is the app, not a Python
                raise WorkerUnavailable("no Python interpreter to start the worker with")
            if self._failed_at is not None and time.monotonic() - self._failed_at < RETRY_AFTER_S:
                raise WorkerUnavailable("the chat template worker process did not start")

            # the child must import this very modelc (a compiled app puts it on sys.path at run time)
            root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
            proc = subprocess.Popen(
                [sys.executable, "-m", "modelc.tokenizer.template_child"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=env,
            )
            try:
                ready = self._read(proc, STARTUP_TIMEOUT_S)
            except ValueError:
                ready = None
            if ready != {"ready": True}:
                with contextlib.suppress(OSError):
                    proc.kill()
                self._failed_at = time.monotonic()  # do not try again on every request
                raise WorkerUnavailable("the chat template worker process did not start")
            self._proc, self._failed_at = proc, None
        return self._proc

    @staticmethod
    def _read(proc: subprocess.Popen[bytes], timeout_s: float) -> dict[str, Any] | None:
        assert proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        chunks: list[bytes] = []
        fd = proc.stdout.fileno()
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return None  # the worker died (an aborted allocation, a crash)
            chunks.append(chunk)
            if chunk.endswith(b"\n"):
                return json.loads(b"".join(chunks))

    def _kill(self) -> None:
        if self._proc is not None:
            with contextlib.suppress(OSError):
                self._proc.kill()
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                self._proc.wait(timeout=5)
            self._proc = None

    def close(self) -> None:
        with self._lock:
            self._kill()


_WORKER: RenderWorker | None = None
_WORKER_LOCK = threading.Lock()


def shared_worker() -> RenderWorker:
    global _WORKER
    with _WORKER_LOCK:
        if _WORKER is None:
            _WORKER = RenderWorker()
            atexit.register(_WORKER.close)
        return _WORKER
