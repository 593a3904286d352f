"""$MODELC_HOME/daemon.json: the running daemon's record ({pid, url, token, started}), mode 0600.

`modelc run` writes it (temp file + rename) once it answers and removes it at exit; the CLI client
reads it and talks only to that daemon, sending its random control token (the token is what lets the
CLI stop it or load models, so the file is readable by its owner only). MODELC_HOST overrides the
address (then MODELC_API_KEY is the credential). No HTTP here.
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

FILE_NAME = "daemon.json"
FILE_MODE = 0o600


@dataclass(frozen=True, slots=True)
class DaemonInfo:
    pid: int
    url: str
    started: float  # unix time
    token: str | None = None  # the daemon's control token (None in records of older versions)


def new_token() -> str:
    """A fresh control token: 256 random bits, URL-safe."""
    return secrets.token_urlsafe(32)


def state_path() -> Path:
    from modelc.store import home  # lazy: store imports numpy; `modelc --help` reads no daemon state

    return home() / FILE_NAME


def write_state(url: str, pid: int | None = None, path: Path | None = None, token: str | None = None) -> DaemonInfo:
    """Record this process as the daemon at `url` (atomically, owner-only)."""
    info = DaemonInfo(pid or os.getpid(), url, time.time(), token)
    path = path or state_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, FILE_MODE)
        with os.fdopen(fd, "w") as f:
            json.dump({"pid": info.pid, "url": info.url, "token": info.token, "started": info.started}, f)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return info


def read_state(path: Path | None = None) -> DaemonInfo | None:
    """The recorded daemon, or None when the file is missing or unreadable."""
    try:
        raw = json.loads((path or state_path()).read_text())
        token = raw.get("token")
        return DaemonInfo(
            int(raw["pid"]),
            str(raw["url"]),
            float(raw.get("started") or 0.0),
            token if isinstance(token, str) else None,
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def remove_state(pid: int | None = None, path: Path | None = None) -> None:
    """Remove the file if it still names `pid` (default: this process); another daemon's record stays."""
    path = path or state_path()
    info = read_state(path)
    if info is not None and info.pid == (pid or os.getpid()):
        path.unlink(missing_ok=True)


def explicit_url() -> str | None:
    """MODELC_HOST as a URL, when set."""
    host = os.environ.get("MODELC_HOST")
    if not host:
        return None
    host = host.rstrip("/")
    return host if "://" in host else f"http://{host}"


def daemon_url() -> str | None:
    """MODELC_HOST, else the url in daemon.json, else None (no daemon is recorded: nothing is guessed)."""
    info = read_state()
    return explicit_url() or (info.url if info is not None else None)
