"""tools/aarch64_check.sh (docs/arm.md) outside its emulated root: it parses, and where it cannot set up
(here: not root, in a user namespace) it says why and passes, or fails under MODELC_AARCH64_STRICT=1.
The check itself runs as its own CI step (.ci/run), not here."""

from __future__ import annotations

import os
import pathlib
import platform
import shutil
import subprocess

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "tools" / "aarch64_check.sh"


def test_parses():
    p = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


def _as_nobody(tmp_path, **env) -> subprocess.CompletedProcess:
    if platform.machine() != "x86_64" or shutil.which("unshare") is None:
        pytest.skip("needs Linux x86-64 with unshare")
    if subprocess.run(["unshare", "--user", "true"], capture_output=True).returncode != 0:
        pytest.skip("no user namespaces here")
    full = {**os.environ, "MODELC_AARCH64_CACHE": str(tmp_path / "cache"), **env}
    # a new user namespace without a mapping: this process is uid 65534 there
    return subprocess.run(["unshare", "--user", "bash", str(SCRIPT), "ci"], env=full, capture_output=True,
                          text=True, timeout=60)  # fmt: skip


def test_not_root_skips_with_its_reason(tmp_path):
    p = _as_nobody(tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.strip() == "aarch64: skipped: needs root (binfmt_misc, chroot, mounts)"
    assert not (tmp_path / "cache").exists()  # nothing set up, nothing half-written


def test_strict_makes_a_skip_fail(tmp_path):
    p = _as_nobody(tmp_path, MODELC_AARCH64_STRICT="1")
    assert p.returncode == 1
    assert "aarch64: skipped: needs root" in p.stdout


def test_unknown_subset_is_a_usage_error():
    p = subprocess.run(["bash", str(SCRIPT), "everything"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert p.stderr.strip().startswith("usage:")


def test_root_without_mount_rights_skips(tmp_path):
    """Root in a container that may not mount (no CAP_SYS_ADMIN): a skip with its reason, nothing set up."""
    if platform.machine() != "x86_64" or os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root on Linux x86-64 with setpriv")
    env = {**os.environ, "MODELC_AARCH64_CACHE": str(tmp_path / "cache")}
    cmd = ["setpriv", "--bounding-set", "-sys_admin", "--inh-caps", "-sys_admin", "bash", str(SCRIPT), "ci"]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.strip().startswith("aarch64: skipped: cannot bind-mount in a private mount namespace")
    assert not (tmp_path / "cache").exists()
