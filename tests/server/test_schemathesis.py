"""schemathesis against /openapi.json of the real server (tiny random llama): a bounded number of
generated requests per operation, zero 5xx, responses and status codes as the spec documents them."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from tests.server.live import LiveServer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(960)]  # the long run below takes ~5 min, st's own limit 900 s
EXAMPLES = os.environ.get("MODELC_SCHEMATHESIS_EXAMPLES", "5")
# schemathesis' own default is every phase and 100 examples (~5 min here): MODELC_SCHEMATHESIS_PHASES=
# examples,coverage,fuzzing,stateful MODELC_SCHEMATHESIS_EXAMPLES=100 runs that (docs/api.md)
PHASES = os.environ.get("MODELC_SCHEMATHESIS_PHASES", "examples,fuzzing")


def test_openapi_fuzzing_finds_no_server_errors(tmp_path) -> None:
    pytest.importorskip("schemathesis")
    st = pathlib.Path(sys.executable).parent / "st"
    if not st.exists():
        pytest.skip("the schemathesis CLI (st) is not installed next to this python")
    s = LiveServer("--tiny", timeout_s=120)
    try:
        checks = "not_a_server_error,response_schema_conformance,status_code_conformance"
        r = subprocess.run(
            [str(st), "run", s.url + "/openapi.json", "-c", checks, "-n", EXAMPLES, "--generation-deterministic",
             "--phases", PHASES, "--request-timeout", "60", "--no-color"],
            cwd=tmp_path, capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]
        assert "passed" in r.stdout
    finally:
        s.stop()
