"""compile --target PLATFORM: one executable file that needs no Python: PyInstaller onefile + the model appended.

NOTE: PyInstaller because it is the maintained, widely used freezer that bundles CPython, the
compiled extensions (numpy, llvmlite, tokenizers...) and their shared libraries into one ELF
file with hooks for numba and llvmlite; it builds for the machine it runs on, hence `--target`
must name this platform. Two details make it fit modelc:

- numba's on-disk kernel cache needs real .py files (it refuses to cache functions loaded from
  PyInstaller's archive), so modelc's own code travels as data and is copied once per build to
  ~/.cache/modelc/apps/BUILD_ID (mtimes kept), imported from there; the kernel cache lives
  beside it and stays valid across runs. Every third-party and stdlib module modelc imports is
  bundled through a generated module of plain imports (PyInstaller follows those).
- the model is not inside PyInstaller's archive (that would extract a copy to /tmp at each start):
  it is appended after it, 64-byte aligned, followed by the app config and a trailer, and the app
  maps it in place with open_artifact(executable, offset=..., length=...).

    file = [PyInstaller onefile][zero pad][model.modelc][config JSON][trailer: magic, offset, length, config_len]
"""

from __future__ import annotations

import ast
import json
import os
import platform
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

from modelc.build.containerize import BuildError
from modelc.version import __version__

TRAILER = struct.Struct("<8sQQQ")  # magic, model offset, model length, config length
TRAILER_MAGIC = b"MODELCX1"
ALIGN = 64
EXCLUDED = {"modelc", "loadtests", "ray"}  # ray: an optional extra, never needed by a compiled app

ENTRY = '''"""modelc compiled executable: copy modelc's code once to a cache folder, then serve the appended model."""
import os, shutil, sys

import _modelc_deps  # noqa: F401  (makes PyInstaller bundle every module modelc imports)


def _code_dir():
    bundled = os.path.join(sys._MEIPASS, "modelc_src")
    with open(os.path.join(bundled, "BUILD_ID")) as f:
        build_id = f.read().strip()
    base = os.environ.get("MODELC_APP_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "modelc", "apps")
    dest = os.path.join(base, build_id)
    if not os.path.isdir(dest):
        os.makedirs(base, exist_ok=True)
        tmp = "%s.tmp%d" % (dest, os.getpid())
        shutil.copytree(bundled, tmp)
        try:
            os.rename(tmp, dest)
        except OSError:  # another start of the same build won the race
            shutil.rmtree(tmp, ignore_errors=True)
    return dest


sys.path.insert(0, _code_dir())
from modelc.build.exe_main import main  # noqa: E402

sys.exit(main(sys.executable, sys.argv[1:]))
'''


def host_target() -> str:
    return f"{platform.system().lower()}-{platform.machine().lower()}"


def compile_executable(artifact: str, output: str | os.PathLike[str], *, target: str, host: str, port: int) -> Path:
    """Build the executable for `target` (must be this machine's platform) at `output`; returns its path."""
    from modelc import store
    from modelc.artifact.reader import read_header_only

    if target != host_target():
        raise BuildError(
            f"--target {target} is not supported here: the executable is built with PyInstaller, which builds "
            f"for the machine it runs on ({host_target()}); run `modelc compile` on a {target} machine"
        )
    model = store.resolve(artifact)
    read_header_only(model)  # a .modelc, or a clear error before minutes of building
    try:
        import PyInstaller.__main__  # noqa: F401
    except ImportError:
        raise BuildError("modelc compile needs PyInstaller: pip install 'modelc[compile]'") from None
    out = Path(output)
    with tempfile.TemporaryDirectory(prefix="modelc-compile-") as tmp:
        work = Path(tmp)
        exe = _pyinstaller(work)
        staged = work / "app"
        shutil.copyfile(exe, staged)
        _append(staged, model, {"host": host, "port": port, "version": __version__})
        os.chmod(staged, 0o755)
        out.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staged, out) if _same_fs(staged, out) else shutil.move(staged, out)
    return out


def _pyinstaller(work: Path) -> Path:
    src = work / "modelc_src"
    pkg = Path(__file__).resolve().parents[1]
    shutil.copytree(pkg, src / "modelc", ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "data"))
    (src / "BUILD_ID").write_text(f"{__version__}-{_tree_id(src / 'modelc')}\n")
    (work / "_modelc_deps.py").write_text(_deps_module(pkg))
    (work / "entry.py").write_text(ENTRY)
    argv = [
        sys.executable,
        "-m",
        "PyInstaller",
        "--onefile",
        "--noconfirm",
        "--log-level",
        "WARN",
        "--name",
        "modelc-app",
        "--distpath",
        str(work / "dist"),
        "--workpath",
        str(work / "build"),
        "--specpath",
        str(work),
        "--paths",
        str(work),
        "--add-data",
        f"{src}{os.pathsep}modelc_src",
        *(arg for mod in ("numba", "llvmlite", "tokenizers", "llguidance") for arg in ("--collect-all", mod)),
        *(arg for mod in sorted(EXCLUDED) for arg in ("--exclude-module", mod)),
        str(work / "entry.py"),
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=work)
    exe = work / "dist" / "modelc-app"
    if proc.returncode != 0 or not exe.is_file():
        last = [line for line in proc.stderr.splitlines() if line.strip()][-3:]
        raise BuildError("PyInstaller failed: " + " | ".join(last))
    return exe


def _deps_module(pkg: Path) -> str:
    """`import X` (guarded) for every module modelc's code imports, stdlib and third-party, lazily or not."""
    names: set[str] = set()
    for path in pkg.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module)
    keep = sorted(n for n in names if n.split(".")[0] not in EXCLUDED and n != "__future__")
    lines = ['"""Generated by modelc compile: every module modelc imports, so PyInstaller bundles it."""']
    for name in keep:
        lines += ["try:", f"    import {name}", "except Exception:", "    pass"]
    return "\n".join(lines) + "\n"


def _tree_id(root: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    for p in sorted(root.rglob("*.py")):
        h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:16]


def _append(exe: Path, model: Path, config: dict) -> None:
    raw = json.dumps(config).encode()
    with open(exe, "ab") as f:
        pos = f.tell()
        pad = -pos % ALIGN
        f.write(b"\0" * pad)
        offset = pos + pad
        with open(model, "rb") as m:
            shutil.copyfileobj(m, f, 16 << 20)
        length = f.tell() - offset
        f.write(raw)
        f.write(TRAILER.pack(TRAILER_MAGIC, offset, length, len(raw)))


def read_trailer(path: str | os.PathLike[str]) -> tuple[int, int, dict]:
    """(model offset, model length, config) of a compiled executable; BuildError if it has none."""
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        if size < TRAILER.size:
            raise BuildError(f"{path} is not a modelc executable")
        f.seek(size - TRAILER.size)
        magic, offset, length, config_len = TRAILER.unpack(f.read(TRAILER.size))
        if magic != TRAILER_MAGIC or offset + length + config_len + TRAILER.size != size:
            raise BuildError(f"{path} is not a modelc executable (no model trailer)")
        f.seek(offset + length)
        return offset, length, json.loads(f.read(config_len))


def _same_fs(a: Path, b: Path) -> bool:
    try:
        return os.stat(a).st_dev == os.stat(b.parent).st_dev
    except OSError:
        return False
