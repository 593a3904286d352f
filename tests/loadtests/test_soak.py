"""The soak driver against the tiny real server: samples are taken, every request kind runs, the report
carries the verdict fields and the SVG chart is written."""

from __future__ import annotations

import json

import anyio
import pytest

from loadtests import soak
from tests.server.live import LiveServer

pytestmark = pytest.mark.slow


def test_short_soak_reports_samples_and_verdicts(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(soak, "SAMPLE_EVERY_S", 0.5)
    s = LiveServer("--tiny", timeout_s=120)  # a real tokenizer: JSON-schema and tool constraints compile
    try:
        run = soak.Soak(s.url, minutes=0.25, concurrency=3, pid=s.proc.pid, embed_share=0.3, cancel_share=0.5)
        rep = anyio.run(soak.run_soak, run)
    finally:
        s.stop()
    assert rep["requests"] >= 5 and rep["http_5xx"] == 0 and rep["errors"] == 0, rep["by_kind"]
    assert len(rep["by_kind"]) >= 2
    assert len(rep["samples"]) >= 3 and rep["samples"][0]["rss_mib"] > 0 and rep["samples"][0]["open_files"] > 0
    assert rep["kv_blocks_used_idle"] is not None and rep["rss_growth_after_warmup_pct"] is not None
    soak.write_svg(rep, str(tmp_path / "soak.svg"))
    assert (tmp_path / "soak.svg").read_text().startswith("<svg")
    json.dumps(rep)
