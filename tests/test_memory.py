"""modelc.memory: the memory cgroup (v1 and v2) of a process and what it may still fill, read from fake /proc and
cgroup trees."""

from __future__ import annotations

from pathlib import Path

from modelc import memory

MEMINFO = "MemTotal:       24000000 kB\nMemAvailable:   20000000 kB\n"


def _files(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def _proc(tmp_path: Path, cgroup: str, mounts: list[tuple[str, str, str, str]]) -> str:
    """A fake /proc/self: its cgroup file and a mountinfo with (root, mount point, fs type, options) lines."""
    lines = [f"35 31 0:32 {r} {p} rw,relatime - {fs} {fs} {opts}" for r, p, fs, opts in mounts]
    _files(tmp_path / "proc", {"cgroup": cgroup, "mountinfo": "\n".join(lines) + "\n", "meminfo": MEMINFO})
    return str(tmp_path / "proc")


def test_v1_reads_the_lowest_limit_on_the_way_up_and_counts_the_page_cache_as_reclaimable(tmp_path):
    mem = tmp_path / "memory"
    _files(mem, {
        "memory.limit_in_bytes": "9223372036854771712\n",  # the root: no limit
        "outer/memory.limit_in_bytes": str(3 << 30),
        "outer/inner/memory.limit_in_bytes": str(5 << 30),  # a child cannot exceed its parent: 3 GiB binds
        "outer/inner/memory.usage_in_bytes": str(2 << 30),
        "outer/inner/memory.stat": f"cache {1 << 30}\nrss 100\ntotal_cache {1 << 30}\n",
    })  # fmt: skip
    proc = _proc(tmp_path, "9:name=systemd:/\n4:memory:/outer/inner\n0::/\n", [("/", str(mem), "cgroup", "rw,memory")])
    cg = memory.cgroup_memory(proc)
    assert cg is not None and cg.version == 1
    assert cg.limit_bytes == 3 << 30 and cg.usage_bytes == 2 << 30 and cg.file_bytes == 1 << 30
    assert cg.headroom_bytes == 2 << 30  # 3 GiB - (2 GiB charged - 1 GiB of page cache)
    assert memory.available_bytes(str(tmp_path / "proc" / "meminfo"), proc) == 2 << 30


def test_v2_reads_memory_max_and_max_means_no_limit(tmp_path):
    root = tmp_path / "unified"
    _files(root, {"svc/memory.max": str(1 << 30), "svc/memory.current": str(600 << 20),
                  "svc/memory.stat": f"anon {300 << 20}\nfile {200 << 20}\n"})  # fmt: skip
    proc = _proc(tmp_path, "0::/svc\n", [("/", str(root), "cgroup2", "rw")])
    cg = memory.cgroup_memory(proc)
    assert cg is not None and cg.version == 2 and cg.limit_bytes == 1 << 30
    assert cg.headroom_bytes == (1 << 30) - (400 << 20)
    (root / "svc" / "memory.max").write_text("max\n")
    assert memory.cgroup_memory(proc) is None  # no limit anywhere: MemAvailable alone
    assert memory.available_bytes(str(tmp_path / "proc" / "meminfo"), proc) == 20000000 * 1024


def test_a_container_whose_mount_root_is_its_own_group_reads_the_mount_point(tmp_path):
    mem = tmp_path / "memory"
    _files(mem, {"memory.limit_in_bytes": str(512 << 20), "memory.usage_in_bytes": "0", "memory.stat": ""})
    proc = _proc(tmp_path, "4:memory:/docker/abc\n", [("/docker/abc", str(mem), "cgroup", "rw,memory")])
    cg = memory.cgroup_memory(proc)
    assert cg is not None and cg.limit_bytes == 512 << 20 and cg.path == str(mem)


def test_without_cgroup_files_the_machines_memory_is_what_is_left(tmp_path):
    proc = _proc(tmp_path, "garbage\n", [])
    assert memory.cgroup_memory(proc) is None
    assert memory.cgroup_memory(str(tmp_path / "missing")) is None
    assert memory.available_bytes(str(tmp_path / "proc" / "meminfo"), proc) == 20000000 * 1024
    assert memory.available_bytes(str(tmp_path / "none"), str(tmp_path / "missing")) is None
