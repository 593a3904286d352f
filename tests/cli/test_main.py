from __future__ import annotations

import subprocess
import sys

from modelc.cli.main import main, version_line


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
