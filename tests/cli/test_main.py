from __future__ import annotations

import subprocess
import sys

from modelc.cli.main import main
from modelc.version import version_line


def test_version_line_and_flag(capsys):
    assert main(["--version"]) == 0
    out = capsys.readouterr().out.strip()
    assert out == version_line() and out.startswith("modelc ")


def test_usage_errors_are_short_not_tracebacks():
    for argv in (["ps", "--bogus"], ["no-such-command"]):
        r = subprocess.run([sys.executable, "-m", "modelc", *argv], capture_output=True, text=True, timeout=120)
        assert r.returncode == 2
        assert "Traceback" not in r.stderr and "Error:" in r.stderr


def test_modelc_error_is_one_line(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "modelc", "inspect", str(tmp_path / "missing.gguf")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ")


def _deep_files(tmp_path):
    """Files whose headers nest far past Python's recursion limit, and a GGUF with nested arrays."""
    import json
    import struct

    deep = b"[" * 100_000 + b"]" * 100_000
    st = tmp_path / "deep.safetensors"
    st.write_bytes(struct.pack("<Q", len(deep)) + deep)
    mc = tmp_path / "deep.modelc"
    mc.write_bytes(b"MODELC\0\0" + struct.pack("<IQ", 1, len(deep)) + deep)
    gg = bytearray(b"GGUF" + struct.pack("<IQQ", 3, 0, 1))
    key = b"x.nested"
    gg += struct.pack("<Q", len(key)) + key + struct.pack("<I", 9)  # an array ...
    for _ in range(2000):
        gg += struct.pack("<IQ", 9, 1)  # ... of one array of one array ...
    gg += struct.pack("<IQ", 4, 0)  # ... ending in an empty u32 array
    (tmp_path / "deep.gguf").write_bytes(bytes(gg))
    reg = tmp_path / "registry"
    reg.mkdir()
    (reg / "index.json").write_text('{"models": ' + "[" * 100_000 + "]" * 100_000 + "}")
    return st, mc, tmp_path / "deep.gguf", reg, json


def test_recursion_never_surfaces_as_a_traceback(tmp_path, capsys):
    st, mc, gg, reg, _ = _deep_files(tmp_path)
    for argv in (
        ["inspect", str(st)],
        ["inspect", str(mc)],
        ["inspect", str(gg)],
        ["search", "x", "--registry", str(reg)],
    ):
        assert main(argv) == 1, argv
        err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
        assert len(err) == 1 and err[0].startswith("error: ") and "internal error" not in err[0], (argv, err)


def test_names_over_255_bytes_are_a_clean_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MODELC_HOME", str(tmp_path / "home"))
    assert main(["rm", "x" * 300]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: invalid model name")


def test_read_only_store_is_one_error_line(tmp_path, monkeypatch, capsys):
    import errno

    from modelc import tmpfiles
    from modelc.artifact import write_artifact
    from modelc.models.tiny import make_tiny_llama

    monkeypatch.setenv("MODELC_HOME", str(tmp_path / "home"))
    src = tmp_path / "m.modelc"
    write_artifact(make_tiny_llama(0), src)

    def read_only(*a, **k):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(tmpfiles, "make", read_only)
    for argv in (["cp", str(src), "copy"], ["pack", str(src), "--name", "packed"]):
        assert main(argv) == 1, argv
        err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
        assert len(err) == 1 and err[0].startswith("error: ") and "Read-only file system" in err[0], err


def test_help_and_version_load_no_numpy_numba_or_server():
    """`modelc --help` / `--version` build the whole command tree but load none of the heavy stacks
    (numba alone took ~0.25 s of a 0.45 s --help before)."""
    probe = (
        "import sys\nfrom modelc.cli.main import main\n"
        "for argv in (['--help'], ['--version'], ['run', '--help']):\n"
        "    assert main(argv) == 0\n"
        "heavy = sorted(m for m in ('numpy', 'numba', 'quart', 'hypercorn', 'httpx') if m in sys.modules)\n"
        "print('HEAVY', heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "HEAVY []" in out.stdout, out.stdout[-500:]
