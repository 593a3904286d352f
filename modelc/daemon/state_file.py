"""$MODELC_HOME/daemon.json: where the running daemon listens ({pid, url, started}).

`modelc run` writes it (temp file + rename) once it answers and removes it at exit; the CLI client
reads it. MODELC_HOST overrides it. No HTTP here.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

DEFAULT_URL = "http://127.0.0.1:8080"
FILE_NAME = "daemon.json"


@dataclass(frozen=True, slots=True)
class DaemonInfo:
    pid: int
    url: str
    started: float  # unix time


def state_path() -> Path:
    from modelc.store import home

    return home() / FILE_NAME


def write_state(url: str, pid: int | None = None, path: Path | None = None) -> DaemonInfo:
    """Record this process as the daemon at `url` (atomically)."""
    info = DaemonInfo(pid or os.getpid(), url, time.time())
    path = path or state_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump({"pid": info.pid, "url": info.url, "started": info.started}, f)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return info


def read_state(path: Path | None = None) -> DaemonInfo | None:
    """The recorded daemon, or None when the file is missing or unreadable."""
    try:
        raw = json.loads((path or state_path()).read_text())
        return DaemonInfo(int(raw["pid"]), str(raw["url"]), float(raw.get("started") or 0.0))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def remove_state(pid: int | None = None, path: Path | None = None) -> None:
    """Remove the file if it still names `pid` (default: this process); another daemon's record stays."""
    path = path or state_path()
    info = read_state(path)
    if info is not None and info.pid == (pid or os.getpid()):
        path.unlink(missing_ok=True)


def daemon_url() -> str:
    """MODELC_HOST, else the url in daemon.json, else the default http://127.0.0.1:8080."""
    host = os.environ.get("MODELC_HOST")
    if host:
        host = host.rstrip("/")
        return host if "://" in host else f"http://{host}"
    info = read_state()
    return info.url if info is not None else DEFAULT_URL
