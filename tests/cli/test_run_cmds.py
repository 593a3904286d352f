from __future__ import annotations

import pytest

from modelc.cli.main import main
from modelc.cli.run_cmds import engine_config


def test_run_missing_artifact_is_one_line_error(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("MODELC_HOME", str(tmp_path))
    assert main(["run", str(tmp_path / "nope.modelc")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "nope.modelc" in err[0]


def test_run_help_lists_options(capsys) -> None:
    main(["run", "--help"])
    text = capsys.readouterr().out
    for opt in (
        "--port",
        "--bind",
        "--api-key",
        "--rate-limit",
        "--max-concurrent",
        "--max-queue",
        "--max-num-seqs",
        "--max-batch-tokens",
        "--kv-cache-mb",
        "--request-timeout",
        "--engines",
        "--threads",
        "--profile",
        "--temperature",
        "--top-p",
        "--min-p",
        "--repetition-penalty",
        "--max-tokens",
    ):
        assert opt in text, opt


def test_engine_config_mapping() -> None:
    cfg = engine_config(engines=1, threads=1, max_num_seqs=8, max_batch_tokens=64, max_queue=3, kv_cache_mb=16.0)
    assert (cfg.scheduler.max_num_seqs, cfg.scheduler.max_batch_tokens, cfg.scheduler.max_queue) == (8, 64, 3)
    assert cfg.cache.kv_cache_mb == 16.0 and cfg.threads == 1


def test_bad_server_option_is_error(tmp_path, capsys) -> None:
    assert main(["run", "x", "--max-concurrent", "0"]) == 1
    assert "max-concurrent" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--rate-limit", "--max-concurrent"])
def test_option_values_checked(flag, capsys) -> None:
    assert main(["run", "x", flag, "-1"]) == 1
