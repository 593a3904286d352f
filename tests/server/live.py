"""Start a server in a subprocess for a test and stop it by its pid."""

from __future__ import annotations

import collections
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]


def serving_url(proc: subprocess.Popen, timeout_s: float = 120.0) -> str:
    """The URL of `modelc run`'s "serving ... http://HOST:PORT" stderr line; fails with its stderr if none comes."""
    deadline = time.monotonic() + timeout_s
    line = ""
    while time.monotonic() < deadline and "serving" not in line:
        line = proc.stderr.readline()
        if not line and proc.poll() is not None:
            break
    assert "serving" in line, proc.stderr.read()
    return "http://" + line.split("http://", 1)[1].split()[0]


def reap(proc: subprocess.Popen) -> None:
    """Kill `proc` if it still runs (a test failed before stopping it), wait for it, close its pipes."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    proc.stdout.close()
    proc.stderr.close()


class LiveServer:
    """The server's stderr (its request log) is read all the time by a thread that keeps the last lines
    (log_tail()): a pipe nobody reads fills up after 64 KiB and then blocks the server's event loop in
    its next log write (a long schemathesis run stalled that way)."""

    def __init__(self, *args: str, module: str = "tests.server.serve_fake", timeout_s: float = 60.0) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._log: collections.deque[str] = collections.deque(maxlen=400)
        self._drain = threading.Thread(target=self._read_log, daemon=True)
        self._drain.start()
        deadline = time.monotonic() + timeout_s
        line = ""
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line.startswith("READY") or not line and self.proc.poll() is not None:
                break
        if not line.startswith("READY"):
            self.stop()
            raise RuntimeError(f"server did not start: {line!r} {self.log_tail()[-2000:]}")
        self.port = int(line.split()[1])
        self.url = f"http://127.0.0.1:{self.port}"

    def _read_log(self) -> None:
        for line in self.proc.stderr:
            self._log.append(line)

    def log_tail(self) -> str:
        """The last lines the server wrote to stderr."""
        return "".join(self._log)

    def terminate(self) -> None:
        self.proc.send_signal(signal.SIGTERM)

    def wait(self, timeout_s: float = 30.0) -> int:
        return self.proc.wait(timeout=timeout_s)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._drain.join(timeout=5)  # the pipe ends with the process
        for f in (self.proc.stdout, self.proc.stderr):
            if f:
                f.close()
