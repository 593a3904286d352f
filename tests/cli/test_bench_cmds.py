from __future__ import annotations

import json

import pytest

from modelc.artifact.writer import write_artifact
from modelc.cli.bench_cmds import cold_start_s
from modelc.cli.main import main
from modelc.models.tiny import make_tiny_llama


@pytest.fixture
def tiny_artifact(tmp_path):
    path = tmp_path / "tiny.modelc"
    write_artifact(make_tiny_llama(0), path)
    return path


def test_bench_json(tiny_artifact, capsys):
    rc = main(["bench", str(tiny_artifact), "--prompt-tokens", "8,20", "--gen-tokens", "4", "--runs", "2", "--json",
               "--no-cold-start", "--threads", "1"])  # fmt: skip
    assert rc == 0
    res = json.loads(capsys.readouterr().out)
    assert set(res["prefill_tok_s"]) == {"8", "20"} and all(v > 0 for v in res["prefill_tok_s"].values())
    assert res["decode_tok_s"] > 0 and res["load_s"] > 0 and res["peak_rss_mb"] > 10
    assert res["weights_mb"] > 0 and res["kv_cache_mb"] > 0
    assert 0 < res["token_latency_ms"]["p50"] <= res["token_latency_ms"]["p99"]


def test_bench_text_and_errors(tiny_artifact, capsys):
    assert main(["bench", str(tiny_artifact), "--prompt-tokens", "4", "--gen-tokens", "2", "--runs", "1",
                 "--no-cold-start"]) == 0  # fmt: skip
    assert "decode" in capsys.readouterr().out
    assert main(["bench", str(tiny_artifact), "--prompt-tokens", "x", "--no-cold-start"]) == 1
    assert "prompt-tokens" in capsys.readouterr().err


@pytest.mark.slow
def test_cold_start_probe(tiny_artifact):
    assert cold_start_s(str(tiny_artifact), 1, fresh_cache=False) > 0


def test_bench_a_bad_model_prints_the_one_line_every_command_prints(tmp_path, capsys):
    """The cold-start probe's failure was `error: cold-start probe failed: modelc.errors.ArtifactError: ...`
    (the subprocess's traceback line); it is now the ModelcError's own message, as without the probe."""
    bad = tmp_path / "bad.modelc"
    bad.write_bytes(b"MODELC\0\0junk")
    lines = []
    for extra in ([], ["--no-cold-start"]):  # the probe subprocess first, then the in-process load
        assert main(["bench", str(bad), "--runs", "1", "--gen-tokens", "1", *extra]) == 1
        lines.append(capsys.readouterr().err.strip().splitlines())
    assert lines[0] == lines[1] == [f"error: {bad}: too short to be a .modelc file (12 bytes)"], lines
