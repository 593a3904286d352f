"""How much memory this process may still fill: its memory cgroup's limit (v1 or v2) and the machine's MemAvailable.

Read-only: parses /proc/self/cgroup, /proc/self/mountinfo, the cgroup's files and /proc/meminfo; never writes.
Page cache charged to a cgroup is reclaimable (the kernel drops clean file pages before it kills anything), so
the headroom is the limit minus what the group holds that cannot be reclaimed (anonymous memory, kernel memory).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

NO_LIMIT = 1 << 60  # v1 writes "no limit" as a huge number (9223372036854771712): anything above this is none


@dataclass(frozen=True, slots=True)
class CgroupMemory:
    """The memory cgroup this process is charged to, as its files say now."""

    version: int  # 1 or 2
    path: str  # its folder, e.g. /sys/fs/cgroup/memory/<group> (v1) or /sys/fs/cgroup/<group> (v2)
    limit_bytes: int  # the lowest limit on the way up to the root
    usage_bytes: int  # charged now: anonymous + page cache + kernel
    file_bytes: int  # of which page cache (reclaimable)

    @property
    def headroom_bytes(self) -> int:
        """What the group may still take before its limit, counting its page cache as reclaimable."""
        return max(0, self.limit_bytes - (self.usage_bytes - self.file_bytes))


def mem_available_bytes(meminfo: str = "/proc/meminfo") -> int | None:
    """MemAvailable from /proc/meminfo, or None where the file or the line is missing."""
    try:
        with open(meminfo, encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def available_bytes(meminfo: str = "/proc/meminfo", proc: str = "/proc/self") -> int | None:
    """What this process may still fill: min(MemAvailable, its cgroup's headroom); None where neither is known."""
    got = [b for b in (mem_available_bytes(meminfo), _headroom(proc)) if b is not None]
    return min(got) if got else None


def _headroom(proc: str) -> int | None:
    cg = cgroup_memory(proc)
    return None if cg is None else cg.headroom_bytes


def cgroup_memory(proc: str = "/proc/self") -> CgroupMemory | None:
    """This process's memory cgroup where it has a limit (v2's memory.max or v1's memory.limit_in_bytes, the
    lowest on the path to the root); None without one or where the files cannot be read."""
    lines = _read(os.path.join(proc, "cgroup"))
    if lines is None:
        return None
    mounts = _cgroup_mounts(os.path.join(proc, "mountinfo"))
    for line in lines.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hid, controllers, rel = parts
        if "memory" in controllers.split(",") and "v1" in mounts:
            got = _group(1, mounts["v1"], rel)
        elif hid == "0" and controllers == "" and "v2" in mounts:
            got = _group(2, mounts["v2"], rel)
        else:
            continue
        if got is not None:
            return got
    return None


_FILES = {1: ("memory.limit_in_bytes", "memory.usage_in_bytes"), 2: ("memory.max", "memory.current")}


def _group(version: int, root: tuple[str, str], rel: str) -> CgroupMemory | None:
    folder = _folder(root, rel)
    if folder is None:
        return None
    limit_file, usage_file = _FILES[version]
    limit = _lowest(root[1], folder, limit_file)
    usage = _int(os.path.join(folder, usage_file))
    if limit is None or usage is None:
        return None
    stat = _stat(os.path.join(folder, "memory.stat"))
    file_bytes = stat.get("total_cache", stat.get("cache", 0)) if version == 1 else stat.get("file", 0)
    return CgroupMemory(version, folder, limit, usage, min(file_bytes, usage))


def _folder(root: tuple[str, str], rel: str) -> str | None:
    """The cgroup folder of `rel` (the path /proc/self/cgroup names) under a mount of that hierarchy (mount root
    `root[0]` at `root[1]`); in a container whose mount root is the group itself, the mount point."""
    mount_root, mount_point = root
    rel = rel.rstrip("\n")
    if mount_root != "/" and (rel == mount_root or rel.startswith(mount_root + "/")):
        rel = rel[len(mount_root) :]
    folder = os.path.normpath(os.path.join(mount_point, rel.lstrip("/")))
    return folder if os.path.isdir(folder) else (mount_point if os.path.isdir(mount_point) else None)


def _lowest(top: str, folder: str, name: str) -> int | None:
    """The lowest limit in `name` from folder up to the mount point `top` (a parent's limit binds its children);
    None where there is none."""
    best = None
    top = os.path.normpath(top)
    while True:
        v = _limit(os.path.join(folder, name))
        if v is not None and (best is None or v < best):
            best = v
        if folder == top or len(folder) <= len(top):
            return best
        folder = os.path.dirname(folder)


def _limit(path: str) -> int | None:
    text = _read(path)
    if text is None or text.strip() == "max":
        return None
    try:
        v = int(text.strip())
    except ValueError:
        return None
    return None if v >= NO_LIMIT else v


def _int(path: str) -> int | None:
    text = _read(path)
    try:
        return None if text is None else int(text.strip())
    except ValueError:
        return None


def _stat(path: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in (_read(path) or "").splitlines():
        key, _, value = line.partition(" ")
        try:
            out[key] = int(value)
        except ValueError:
            continue
    return out


def _cgroup_mounts(mountinfo: str) -> dict[str, tuple[str, str]]:
    """{"v1": (root, mount point) of the hierarchy with the memory controller, "v2": (root, point) of cgroup2}."""
    out: dict[str, tuple[str, str]] = {}
    for line in (_read(mountinfo) or "").splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 3:
            continue
        root, point = _unescape(fields[3]), _unescape(fields[4])
        if tail[0] == "cgroup2":
            out.setdefault("v2", (root, point))
        elif tail[0] == "cgroup" and "memory" in tail[2].split(","):
            out.setdefault("v1", (root, point))
    return out


def _unescape(s: str) -> str:
    return s.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError):
        return None
