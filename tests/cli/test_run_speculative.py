"""`modelc run TARGET --draft DRAFT --gamma N` end to end: speculative greedy output equals plain
greedy output over HTTP (OpenAI extra fields `speculative`/`gamma`), /props reports gamma, /metrics
counts drafts and accepted tokens as vLLM names them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import httpx
import pytest

from modelc.artifact.writer import write_artifact
from modelc.cli.run_cmds import engine_config
from tests.server.live import ROOT, reap, serving_url
from tests.server.tiny_model import make_served_model


def test_engine_config_speculation_flags() -> None:
    base = {"engines": 1, "threads": 1, "max_num_seqs": 8, "max_batch_tokens": 64, "max_queue": 3, "kv_cache_mb": 8.0}
    assert engine_config(**base).scheduler.speculative is None
    cfg = engine_config(**base, gamma=6)
    assert (cfg.scheduler.speculative, cfg.scheduler.spec_gamma, cfg.draft) == ("ngram", 6, None)
    cfg = engine_config(**base, draft="d.modelc")
    assert (cfg.scheduler.speculative, cfg.scheduler.spec_gamma, cfg.draft) == ("draft", 4, "d.modelc")
    assert engine_config(**base, draft="d.modelc", gamma=0).draft is None


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


@pytest.mark.slow
def test_run_with_a_draft_model_over_http(tmp_path) -> None:
    target, draft = tmp_path / "target.modelc", tmp_path / "draft.modelc"
    write_artifact(make_served_model(0), target)
    write_artifact(make_served_model(0), draft)  # draft == target: every draft is accepted
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MODELC_HOME": str(tmp_path)}
    cmd = [sys.executable, "-m", "modelc", "run", str(target), "--port", "0", "--kv-cache-mb", "8",
           "--draft", str(draft), "--gamma", "3"]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = serving_url(proc)
        with httpx.Client(base_url=url, timeout=60) as c:
            assert c.get("/props").json()["default_generation"]["gamma"] == 3
            body = {"prompt": "abcabcabc", "max_tokens": 24, "temperature": 0}
            plain = c.post("/v1/completions", json={**body, "speculative": False}).json()
            metrics = c.get("/metrics").text
            assert _metric(metrics, "modelc_spec_decode_num_drafts_total") == 0
            spec = c.post("/v1/completions", json={**body, "gamma": 2}).json()
            assert spec["choices"][0]["text"] == plain["choices"][0]["text"]
            assert spec["usage"]["completion_tokens"] == plain["usage"]["completion_tokens"] == 24
            metrics = c.get("/metrics").text
            drafted = _metric(metrics, "modelc_spec_decode_num_draft_tokens_total")
            assert _metric(metrics, "modelc_spec_decode_num_drafts_total") > 0
            assert 0 < drafted <= 2 * _metric(metrics, "modelc_spec_decode_num_drafts_total")
            assert _metric(metrics, "modelc_spec_decode_num_accepted_tokens_total") == drafted
            assert _metric(metrics, "modelc_spec_decode_draft_acceptance_rate") == 1.0
            native = c.post(
                "/complete", json={"prompt": "abcabcabc", "max_tokens": 24, "speculative": True, "gamma": 3}
            )
            assert native.json()["completion"] == plain["choices"][0]["text"]  # the native API's default is greedy
            bad = c.post("/v1/completions", json={**body, "gamma": 99})
            assert bad.status_code == 400 and "gamma" in bad.text
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        reap(proc)
