"""loadtests end to end: a tiny random llama packed into a .modelc, served by modelc's real server
(in-process thread, 127.0.0.1, a free port), driven by the harness; the report must agree with the
server's /metrics, and cancelled streams must be aborted server-side and leave no KV blocks in use."""

from __future__ import annotations

import json
import time

import pytest

from loadtests.server_thread import ServerThread
from loadtests.sweep import Sweep, run_sweep
from loadtests.workload import WorkloadConfig, build_workload
from modelc.config import CacheConfig, EngineConfig


@pytest.fixture(scope="module")
def server(tiny_artifact):
    cfg = EngineConfig(threads=1, cache=CacheConfig(kv_cache_tokens=4096))
    with ServerThread(str(tiny_artifact), engine_config=cfg, start_timeout_s=120) as srv:
        yield srv


def log_records(srv: ServerThread) -> list[dict]:
    return [json.loads(line) for line in srv.log.getvalue().splitlines() if line.startswith("{")]


def test_steady_counts_match_server_metrics(server) -> None:
    wl = WorkloadConfig(scenario="steady", num_requests=6, seed=4, output_tokens=(8, 24), ignore_eos=True)
    want_tokens = sum(s.max_tokens for s in build_workload(wl))
    (run,) = run_sweep(Sweep("steady", server.url, (3,), wl, timeout_s=60))
    assert run["requests"] == run["ok"] == run["completed"] == 6 and run["errors"] == {}
    assert {r["finish_reason"] for r in run["results"]} == {"length"}
    # ignore_eos: every request generated exactly max_tokens (usage); a chunk per token with text
    assert run["output_tokens"] == run["completed_output_tokens"] == want_tokens
    assert all(0 < r["chunks"] <= r["completion_tokens"] for r in run["results"])
    srv = run["server"]
    assert srv["modelc_requests_total"] == 6
    assert srv["modelc_tokens_generated_total"] == want_tokens
    assert srv["modelc_prompt_tokens_total"] == run["prompt_tokens"] > 0
    assert srv["modelc_kv_blocks_used_after"] == 0 and srv["modelc_active_requests_after"] == 0
    assert run["ttft_s"]["count"] == 6 and run["ttft_s"]["p50"] > 0
    assert run["itl_s"]["count"] == sum(r["chunks"] for r in run["results"]) - 6


def test_cancel_storm_aborts_on_the_server_and_frees_kv(server) -> None:
    # long outputs, cut in their first quarter: the server is still generating when the client leaves
    wl = WorkloadConfig(scenario="cancel-storm", num_requests=8, seed=0, output_tokens=(200, 300), ignore_eos=True)
    specs = build_workload(wl)
    cut = {s.index: s.cancel_after_tokens for s in specs if s.cancel_after_tokens is not None}
    assert 2 <= len(cut) <= 6
    before = len(log_records(server))
    (run,) = run_sweep(Sweep("cancel-storm", server.url, (4,), wl, timeout_s=60))
    assert run["requests"] == run["ok"] == 8 and run["errors"] == {}
    assert run["cancelled"] == len(cut) and run["completed"] == 8 - len(cut)
    for r in run["results"]:
        if r["index"] in cut:
            assert r["cancelled"] and r["chunks"] == cut[r["index"]] and r["finish_reason"] is None
        else:
            assert not r["cancelled"] and r["finish_reason"] == "length"
    srv = run["server"]
    assert srv["modelc_requests_total"] == 8
    # the server counts every generated token: the streams that ran to the end, plus what the aborted
    # ones generated before the client left (at least what the client received, at most their max_tokens)
    assert run["completed_output_tokens"] == sum(s.max_tokens for s in specs if s.index not in cut)
    received_cut = sum(r["chunks"] for r in run["results"] if r["index"] in cut)
    most_cut = sum(s.max_tokens for s in specs if s.index in cut)
    total = srv["modelc_tokens_generated_total"]
    assert run["completed_output_tokens"] + received_cut <= total < run["completed_output_tokens"] + most_cut
    # each cancelled stream was closed mid-generation: the server's stream ended early (the engine abort)
    records = [r for r in log_records(server)[before:] if r.get("path") == "/v1/completions"]
    assert len(records) == 8
    early = [r for r in records if r["error"] == "client closed the stream before the end" and r["status"] == 499]
    assert len(early) == len(cut)
    # nothing left running, every KV block free again (prefix-cached blocks count as free)
    assert srv["modelc_kv_blocks_used_after"] == 0
    assert srv["modelc_num_requests_running_after"] == 0 and srv["modelc_num_requests_waiting_after"] == 0
    deadline = time.monotonic() + 5
    while server.engine_stats()["kv_blocks_used"] and time.monotonic() < deadline:
        time.sleep(0.02)
    stats = server.engine_stats()
    assert stats["kv_blocks_used"] == 0 and stats["running"] == 0 and stats["kv_blocks_total"] == 256


def test_cli_open_loop_and_burst_to_json(server, tmp_path, capsys) -> None:
    from loadtests.__main__ import main

    out = tmp_path / "runs.json"
    argv = ["run", "steady", "--rate", "20", "--target", server.url, "--requests", "4", "--output-tokens", "4,4",
            "--ignore-eos", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    (run,) = json.loads(out.read_text())["runs"]
    assert run["scenario"] == "poisson" and run["concurrency"] is None
    assert run["ok"] == 4 and run["output_tokens"] == 16 and run["server"]["modelc_tokens_generated_total"] == 16
    sent = sorted(r["sent_s"] for r in run["results"])
    assert sent[-1] > 0.05  # open loop: sent on the arrival times, not all at once
    assert main(["run", "burst", "--target", server.url, "--requests", "3", "--output-tokens", "2,2"]) == 0
    assert "burst c=3" in capsys.readouterr().out
