"""Temp files of atomic writes (write, fsync, rename), named so that a later store operation can tell
an orphan from a live write: `.<final name>.<writer pid>.<random>.modelc-tmp`.

A temp file whose writer process is gone (kill -9, a crash, power loss) is an orphan; sweep(root)
removes those. A temp file of a live process (this one included) is never touched.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

SUFFIX = ".modelc-tmp"
_NAME = re.compile(r"^\..*\.(\d+)\.[A-Za-z0-9_]+" + re.escape(SUFFIX) + "$")


def make(directory: str | os.PathLike[str], final_name: str) -> tuple[int, Path]:
    """(fd, path) of a new temp file in `directory` for a file that will be renamed to `final_name`."""
    prefix = f".{final_name[:120]}.{os.getpid()}."
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=prefix, suffix=SUFFIX)
    return fd, Path(tmp)


def writer_pid(name: str) -> int | None:
    """The pid in a temp file's name, or None when the name is not one of ours."""
    m = _NAME.match(name)
    return int(m.group(1)) if m else None


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return pid < 2**31  # another user's process (or a nonsense pid: an orphan)
    return True


def sweep(root: str | os.PathLike[str]) -> list[Path]:
    """Remove orphaned temp files under `root` (recursively); returns what was removed."""
    removed: list[Path] = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            pid = writer_pid(name)
            if pid is None or _alive(pid):
                continue
            path = Path(dirpath) / name
            try:
                path.unlink()
                removed.append(path)
            except FileNotFoundError:
                pass  # another sweeper was first
            except OSError:
                pass  # a read-only store: nothing to clean now
    return removed
