"""`python -m loadtests.serve_bench ARTIFACT`: the in-process server, a sweep over two levels, JSON out."""

from __future__ import annotations

import json

import pytest

from loadtests.serve_bench import main
from loadtests.server_thread import ServerThread
from modelc.errors import ModelcError


def test_bench_serve_json(tiny_artifact, capsys) -> None:
    rc = main([str(tiny_artifact), "--requests", "3", "--concurrency", "1,2", "--gen-tokens",
               "5", "--threads", "1", "--json"])  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0, out
    res = json.loads(out.strip().splitlines()[-1])
    assert [r["concurrency"] for r in res["runs"]] == [1, 2]
    for r in res["runs"]:
        assert r["ok"] == 3 and r["output_tokens"] == 15 and r["server"]["modelc_tokens_generated_total"] == 15
    assert res["engine_stats"]["kv_blocks_used"] == 0


def test_bench_serve_table_and_bad_scenario(tiny_artifact, capsys) -> None:
    assert main([str(tiny_artifact), "--requests", "2", "--concurrency", "2", "--gen-tokens",
                 "3", "--threads", "1"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "output tok/s" in out and "load average" in out
    assert main([str(tiny_artifact), "--scenario", "nope"]) == 1
    assert "unknown scenario 'nope'" in capsys.readouterr().err


def test_server_thread_reports_a_load_failure(tmp_path) -> None:
    with pytest.raises(ModelcError, match="cannot read"):
        ServerThread(str(tmp_path / "missing.modelc"), start_timeout_s=60).start()
