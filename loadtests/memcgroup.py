"""A fresh memory cgroup with a limit, to run a command under (the streamed-weights test and benchmark).

cgroup v1 (the memory controller's own hierarchy, `memory.limit_in_bytes`) or v2 (`memory.max` in a folder of
the unified hierarchy whose parent delegates the memory controller). `MemoryCgroup.make(limit)` creates
`modelc-<pid>-<n>` at the top of the hierarchy, `wrap(cmd)` is cmd run inside it (a shell writes its own pid to
cgroup.procs, then execs cmd: its children stay in the group), `peak_bytes()` / `anon_bytes()` / `oom_kills()`
read it, `remove()` deletes it (after its processes have ended). Needs root (or a delegated hierarchy): `make`
raises CgroupUnavailable with the reason otherwise.
"""

from __future__ import annotations

import itertools
import os
import time
from dataclasses import dataclass

_count = itertools.count()


class CgroupUnavailable(RuntimeError):
    """No writable memory cgroup hierarchy here (the reason is the message)."""


@dataclass
class MemoryCgroup:
    path: str
    version: int  # 1 or 2
    limit_bytes: int

    @classmethod
    def make(cls, limit_bytes: int, mountinfo: str = "/proc/self/mountinfo") -> MemoryCgroup:
        roots = _roots(mountinfo)
        errors = []
        for version in (1, 2):
            root = roots.get(version)
            if root is None:
                errors.append(f"no cgroup v{version} memory hierarchy mounted")
                continue
            if version == 2 and "memory" not in _read(os.path.join(root, "cgroup.subtree_control")).split():
                errors.append(f"cgroup v2 at {root} does not delegate the memory controller")
                continue
            path = os.path.join(root, f"modelc-{os.getpid()}-{next(_count)}")
            try:
                os.mkdir(path)
            except OSError as e:
                errors.append(f"cannot create a v{version} cgroup in {root}: {e.strerror}")
                continue
            group = cls(path, version, limit_bytes)
            try:
                _write(os.path.join(path, "memory.limit_in_bytes" if version == 1 else "memory.max"), str(limit_bytes))
                if version == 2:
                    _write(os.path.join(path, "memory.swap.max"), "0")
            except OSError as e:
                group.remove()
                errors.append(f"cannot set a v{version} memory limit: {e.strerror}")
                continue
            return group
        raise CgroupUnavailable("; ".join(errors))

    def wrap(self, cmd: list[str]) -> list[str]:
        """cmd run inside this group (and every process it starts)."""
        procs = os.path.join(self.path, "cgroup.procs")
        return ["sh", "-c", 'echo $$ > "$0" && exec "$@"', procs, *cmd]

    def peak_bytes(self) -> int:
        """The most memory charged to the group so far (page cache included)."""
        name = "memory.max_usage_in_bytes" if self.version == 1 else "memory.peak"
        return int(_read(os.path.join(self.path, name)) or 0)

    def anon_bytes(self) -> int:
        """Anonymous memory charged now (what the kernel cannot drop: no swap here)."""
        stat = _stat(os.path.join(self.path, "memory.stat"))
        return stat.get("total_rss", stat.get("rss", 0)) if self.version == 1 else stat.get("anon", 0)

    def oom_kills(self) -> int:
        text = _read(os.path.join(self.path, "memory.oom_control" if self.version == 1 else "memory.events"))
        return _stat_text(text).get("oom_kill", 0)

    def remove(self, timeout_s: float = 10.0) -> None:
        """Delete the group, once the processes in it have ended."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


def _roots(mountinfo: str) -> dict[int, str]:
    out: dict[int, str] = {}
    for line in _read(mountinfo).splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        if tail[0] == "cgroup" and "memory" in tail[2].split(","):
            out.setdefault(1, fields[4])
        elif tail[0] == "cgroup2":
            out.setdefault(2, fields[4])
    return out


def _stat(path: str) -> dict[str, int]:
    return _stat_text(_read(path))


def _stat_text(text: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if value.strip().lstrip("-").isdigit():
            out[key] = int(value)
    return out


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)
