"""Kernel packs: modelc's kernels compiled ahead of time per common x86 ISA level, shipped in numba's cache format
(modelc/kernels/packs/<level>.tar.zst + <level>.json) and put into the user's kernel cache at start, so that a
first start from an empty cache loads what a restart loads and compiles nothing (issue 38 item 1).

numba keys a cached overload on (signature, codegen.magic_tuple() = (triple, CPU name, target features string),
bytecode digest); its CPU name and features come from NUMBA_CPU_NAME / NUMBA_CPU_FEATURES where set
(numba.core.config, read when the CPU codegen is created: at the first @njit of the process). So where a level
applies, install() pins both to the level's values (the name tunes; the features string turns on a minimal
required set and off every other feature llvmlite names) before any kernel is decorated: the machine code and
the index keys are then the same on every host of the level, and the build host's entries load there.

A level applies only where (select(), host_level()):
- the host's cpu.py flags (jit_cache.cache_key's last part) equal the level's: the same MODELC kernel paths;
- the host has every feature the level turns on (a VM that masks one never runs an instruction it lacks);
- the pack's manifest names this cache key (modelc version, digest of the kernels' source, the flags), this
  Python, numba and llvmlite (manifest_ok());
- numba's CPU target was not created before modelc.kernels was imported, NUMBA_CPU_NAME / NUMBA_CPU_FEATURES are
  not set by the user, MODELC_KERNEL_PACKS is not "0", and no tuning switch a kernel may read at import
  (TUNING_ENV) is set: a pack holds the defaults.
Elsewhere nothing changes (native code, compiled on demand as before).

Where a pack applies, decode_layer.kinds_token names every weight kind (a pack cannot hold each combination of
kinds a GGUF may mix), and extract() merges the pack's index and data files into jit_cache.cache_dir() once
(a marker file names the pack's digest), under the folder's .save.lock: data files are written under free
names and each index is rewritten with the union of its keys (temp file + rename), never clobbered. Child
processes (the cold start's helpers) inherit the pin through the environment (ACTIVE_ENV) and compile the same
keys. tools/build_kernel_packs.py builds the packs (docs/kernel_packs.md). No numba function here.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pathlib
import pickle
import sys
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, field

from modelc import tmpfiles

try:
    import fcntl
except ImportError:  # Windows: extraction unlocked (numba's own saves are too)
    fcntl = None  # type: ignore[assignment]

PACKS_DIR = pathlib.Path(
    os.environ.get("MODELC_KERNEL_PACKS_DIR") or pathlib.Path(__file__).resolve().parents[1] / "packs"
)
"""The shipped packs (MODELC_KERNEL_PACKS_DIR: another folder, for tests and the builder's checks)."""
FORMAT = 1
SWITCH_ENV = "MODELC_KERNEL_PACKS"  # "0": no pack (native code, compiled on demand)
BUILD_ENV = "MODELC_KERNEL_PACK_BUILD"  # the builder's subprocess: pin this level, extract nothing
ACTIVE_ENV = "MODELC_KERNEL_PACK_ACTIVE"  # set where a level is pinned: helper processes inherit it
TUNING_ENV = ("MODELC_PREFILL_T", "MODELC_PREFILL_T_FLOAT", "MODELC_GRID_MAX_T", "MODELC_AMX_BF16",
              "MODELC_PARALLEL_CHUNK", "MODELC_FLASH_PREFILL")  # fmt: skip

# x86-64-v3 (Haswell / Zen 1 on) with the features LLVM folds into it
V3 = ("64bit", "cmov", "cx8", "cx16", "fxsr", "mmx", "sse", "sse2", "sse3", "ssse3", "sse4.1", "sse4.2", "crc32",
      "popcnt", "sahf", "movbe", "xsave", "avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt")  # fmt: skip
AVX512 = ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl", "avx512vnni", "avx512vbmi")
AMX = ("amx-tile", "amx-int8", "amx-bf16")


@dataclass(frozen=True)
class Level:
    name: str
    flags: str  # cpu.py's flags on such a host, as jit_cache.cache_key carries them
    cpu_name: str  # LLVM's CPU name: instruction scheduling and tuning only
    plus: tuple[str, ...]  # the features the code may use (a host must have all of them)
    build_env: dict[str, str] = field(default_factory=dict)  # cpu.py switches that give `flags` on the build host


LEVELS = (
    Level("sapphirerapids", "avx2.vnni.avx512_vnni.avx512.amx.amx_bf16.prefetch_l2.prefetch_t1", "sapphirerapids",
          V3 + AVX512 + AMX),
    Level("znver4", "avx2.vnni.avx512_vnni.avx512", "znver4", V3 + AVX512,
          {"MODELC_NO_AMX": "1", "MODELC_PREFETCH_T1": "0"}),
    Level("znver3", "avx2.prefetch_t1", "znver3", V3,
          {"MODELC_NO_AMX": "1", "MODELC_NO_AVX512": "1", "MODELC_NO_VNNI": "1", "MODELC_PREFETCH_L2": "0"}),
    Level("icelake-server", "avx2.vnni.avx512_vnni.avx512.prefetch_t1", "icelake-server", V3 + AVX512,
          {"MODELC_NO_AMX": "1", "MODELC_PREFETCH_L2": "0"}),
    Level("alderlake", "avx2.vnni.prefetch_t1", "alderlake", V3 + ("avxvnni",),
          {"MODELC_NO_AMX": "1", "MODELC_NO_AVX512": "1", "MODELC_PREFETCH_L2": "0"}),
)  # fmt: skip
"""The levels packs are built for, by the kernels' paths cpu.py picks:
- sapphirerapids: Intel Sapphire / Emerald / Granite Rapids (AVX-512, VNNI, VBMI, AMX);
- znver4: AMD Zen 4 (AVX-512 with VBMI, no prefetch in the one-token loops);
- znver3: AVX2 with FMA/F16C/BMI2 and no VNNI: AMD Zen 2 / Zen 3, Intel Haswell to Skylake(-SP);
- icelake-server: AVX-512 with VNNI and VBMI, no AMX: Intel Ice Lake / Tiger Lake / Rocket Lake, AMD Zen 5;
- alderlake: AVX2 with AVX-VNNI, no AVX-512: Intel Alder / Raptor / Meteor / Arrow Lake clients.
Each can be built on an AMX Xeon (it runs every level's code), with build_env. Not covered: Cascade Lake (AVX-512
VNNI without VBMI: cpu.py has no switch that gives its flags on an AMX Xeon), aarch64."""

ACTIVE: Level | None = None
"""The level this process pinned (install()); decode_layer.kinds_token then names every kind."""
REASON = "not installed"
"""Why no pack applies here (or "pack <level>"), for `modelc info`-style output and tests."""


def features_string(level: Level, names) -> str:
    """'-' for every feature name llvmlite knows but the level's, then '+' for the level's (enabling one also
    enables what it implies, so the '+' set comes last)."""
    minus = sorted(n for n in names if n not in level.plus)
    return ",".join([f"-{n}" for n in minus] + [f"+{n}" for n in level.plus])


def select(flags: str, features: dict[str, bool], levels=LEVELS) -> Level | None:
    """The level whose flags are exactly `flags` and whose every feature the host has (features: name ->
    present, llvmlite's host features); None where none."""
    for level in levels:
        if level.flags == flags and all(features.get(n, False) for n in level.plus):
            return level
    return None


def python_tag() -> str:
    return f"cp{sys.version_info[0]}{sys.version_info[1]}"


def versions() -> dict[str, str]:
    """What a pack's machine code and pickles depend on beyond the cache key."""
    import llvmlite
    import numba

    return {"python": python_tag(), "numba": numba.__version__, "llvmlite": llvmlite.__version__}


def manifest_ok(manifest: dict, level: Level, key: str, vers: dict[str, str]) -> bool:
    """Whether a pack's manifest fits this process: format, level, cache key (modelc version, kernels' digest,
    flags), Python, numba and llvmlite."""
    want = {"format": FORMAT, "level": level.name, "flags": level.flags, "cache_key": key, **vers}
    return all(manifest.get(k) == v for k, v in want.items()) and bool(manifest.get("features"))


def pack_paths(level: Level, folder: pathlib.Path | None = None) -> tuple[pathlib.Path, pathlib.Path]:
    folder = PACKS_DIR if folder is None else folder
    return folder / f"{level.name}.tar.zst", folder / f"{level.name}.json"


def read_manifest(level: Level, folder: pathlib.Path | None = None) -> dict | None:
    try:
        return json.loads(pack_paths(level, folder)[1].read_text())
    except (OSError, ValueError):
        return None


def _flags(key: str) -> str:
    """cpu.py's flags: jit_cache.cache_key's last part."""
    return key.rsplit("-", 1)[1]


def _target_created() -> bool:
    """Whether numba's CPU codegen exists already (its features were fixed then: too late to pin)."""
    if "numba" not in sys.modules:
        return False
    from numba.core import registry

    return "_toplevel_target_context" in vars(registry.cpu_target)


def pin(cpu_name: str, features: str) -> None:
    """NUMBA_CPU_NAME / NUMBA_CPU_FEATURES for this process (numba's config, re-read from the environment at each
    compile) and its children."""
    os.environ["NUMBA_CPU_NAME"], os.environ["NUMBA_CPU_FEATURES"] = cpu_name, features
    from numba.core import config

    config.CPU_NAME, config.CPU_FEATURES = cpu_name, features


def setup(cache_key: Callable[[], str], cache_dir: Callable[[], pathlib.Path]) -> None:
    """Decide, pin and extract (once per process, from jit_cache.install(), before any kernel is decorated).
    cache_key, cache_dir: jit_cache's (passed in: jit_cache imports this module, not the other way round)."""
    global ACTIVE, REASON
    by_name = {lv.name: lv for lv in LEVELS}
    build = os.environ.get(BUILD_ENV)
    if build:  # the builder: pin the level on this host (the flags are asserted there), extract nothing
        level = by_name[build]
        from modelc.kernels.runtime import cpu

        pin(level.cpu_name, features_string(level, cpu.FEATURES))
        ACTIVE, REASON = level, f"building {level.name}"
        return
    inherited = by_name.get(os.environ.get(ACTIVE_ENV, ""))
    if os.environ.get("NUMBA_CPU_NAME") or os.environ.get("NUMBA_CPU_FEATURES"):
        # a parent that pinned a level (a cold start's helpers, a test's subprocess): same code, same kinds
        if inherited is not None and os.environ.get("NUMBA_CPU_NAME") == inherited.cpu_name:
            ACTIVE, REASON = inherited, f"pack {inherited.name} (pinned by the parent process)"
        else:
            REASON = "NUMBA_CPU_NAME / NUMBA_CPU_FEATURES set"
        return
    if os.environ.get(SWITCH_ENV, "1") == "0":
        REASON = f"{SWITCH_ENV}=0"
        return
    if _target_created():
        REASON = "numba's CPU target was created before modelc.kernels was imported"
        return
    if any(os.environ.get(n) for n in TUNING_ENV):
        REASON = "a kernel tuning switch is set"
        return
    from modelc.kernels.runtime import cpu

    key = cache_key()
    level = select(_flags(key), cpu.FEATURES)
    if level is None:
        REASON = f"no level for this CPU ({_flags(key)})"
        return
    manifest = read_manifest(level)
    if manifest is None or not manifest_ok(manifest, level, key, versions()):
        REASON = f"no pack for this build ({level.name})"
        return
    pin(manifest["cpu_name"], manifest["features"])
    os.environ[ACTIVE_ENV] = level.name
    ACTIVE, REASON = level, f"pack {level.name}"
    try:
        extract(level, manifest, cache_dir())
    except (OSError, EOFError, pickle.UnpicklingError, tarfile.TarError, ValueError) as e:
        REASON = f"pack {level.name} (not extracted: {type(e).__name__}: {e})"  # compiles as usual, pinned


def _read_index(data: bytes) -> tuple[str, object, dict]:
    """(numba version, source stamp, overloads) of a numba .nbi file's bytes (IndexDataCacheFile's format)."""
    f = io.BytesIO(data)
    version = pickle.load(f)
    stamp, overloads = pickle.loads(f.read())
    return version, stamp, overloads


def _write_index(path: pathlib.Path, version: str, stamp: object, overloads: dict) -> None:
    from numba.core.serialize import dumps

    _write(path, pickle.dumps(version, protocol=-1) + dumps((stamp, overloads)))


def _write(path: pathlib.Path, data: bytes) -> None:
    """Temp file + rename, named as the project's temp files are (tmpfiles: a crashed writer's leftover is swept)."""
    fd, tmp = tmpfiles.make(path.parent, path.name)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def members(pack: bytes) -> dict[str, bytes]:
    """The files of a .tar.zst pack's bytes: name -> bytes."""
    import zstandard

    with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(pack)) as z:
        data = z.read()
    out = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for m in tar.getmembers():
            if m.isfile() and "/" not in m.name and not m.name.startswith("."):
                out[m.name] = tar.extractfile(m).read()
    return out


def extract(level: Level, manifest: dict, dest: pathlib.Path, folder: pathlib.Path | None = None) -> int:
    """Merge the level's pack into the cache folder `dest` (once: a marker names the pack's digest); returns the
    overloads added. Under dest/.save.lock (jit_cache's lock of numba's saves): for each index of the pack, the
    overloads the folder's index (same numba version and stamp) lacks get their data files under free names, then
    the index is rewritten with both (temp file + rename, as numba writes it)."""
    marker = dest / f".pack-{level.name}-{manifest['digest'][:16]}"
    if marker.exists():
        return 0
    fd = None
    if fcntl is not None:
        fd = os.open(dest / ".save.lock", os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        if marker.exists():
            return 0
        pack = pack_paths(level, folder)[0]
        raw = pack.read_bytes()  # read once: checked against the manifest before anything is unpacked
        if hashlib.sha256(raw).hexdigest() != manifest["digest"]:
            raise ValueError(f"{pack.name} does not match its manifest")
        files = members(raw)
        added = 0
        for name, data in files.items():
            if name.endswith(".nbi"):
                added += _merge(dest, name, data, files)
        marker.write_text(f"{added}\n")  # the data files it added (benchmarks/first_run.py: not compiles)
        return added
    finally:
        if fd is not None:
            os.close(fd)


def _merge(dest: pathlib.Path, name: str, data: bytes, files: dict[str, bytes]) -> int:
    version, stamp, theirs = _read_index(data)
    ours: dict = {}
    try:
        v, s, o = _read_index((dest / name).read_bytes())
        if v == version and s == stamp:
            ours = o
    except FileNotFoundError:
        pass
    base = name[: -len(".nbi")]
    used = set(ours.values())
    merged, added, i = dict(ours), 0, 1
    for key, data_name in theirs.items():
        if key in ours or data_name not in files:
            continue
        while f"{base}.{i}.nbc" in used:
            i += 1
        new = f"{base}.{i}.nbc"
        _write(dest / new, files[data_name])
        merged[key] = new
        used.add(new)
        added += 1
    if added:
        _write_index(dest / name, version, stamp, merged)
    return added
