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
        "--kv-cache-dtype",
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


def test_run_serves_an_artifact_and_stops_on_sigterm(tmp_path) -> None:
    """`modelc run FILE.modelc --port 0` end to end: ready line, /health, a completion, SIGTERM -> exit 0."""
    import os
    import signal
    import subprocess
    import sys

    import httpx

    from modelc.artifact.writer import write_artifact
    from tests.server.live import ROOT, reap, serving_url
    from tests.server.tiny_model import make_served_model

    path = tmp_path / "tiny.modelc"
    write_artifact(make_served_model(), path)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MODELC_HOME": str(tmp_path)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "modelc",
            "run",
            str(path),
            "--port",
            "0",
            "--kv-cache-mb",
            "8",
            "--kv-cache-dtype",
            "q8_0",
            "--max-tokens",
            "3",
            "--temperature",
            "0",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = serving_url(proc)
        assert url.startswith("http://127.0.0.1:")
        with httpx.Client(base_url=url, timeout=60) as c:
            assert c.get("/health").json()["model"] == "tiny-llama"
            r = c.post("/v1/completions", json={"prompt": "hi"}).json()
            assert r["usage"]["completion_tokens"] == 3  # the --max-tokens default applies
            assert c.get("/props").json()["default_generation"]["max_tokens"] == 3
            assert c.get("/props").json()["kv_cache_dtype"] == "q8_0"
            # native /complete shifts the context (here a 48-token request context) and keeps going;
            # the OpenAI route stops at it with finish_reason "length"
            body = {"prompt": "hello", "max_tokens": 100, "max_context": 48, "ignore_eos": True}
            assert c.post("/complete", json=body).status_code == 200
            r = c.post("/v1/completions", json={**body, "temperature": 0}).json()
            assert r["choices"][0]["finish_reason"] == "length" and r["usage"]["completion_tokens"] < 48
            r = c.post("/v1/completions", json={**body, "temperature": 0, "context_shift": True}).json()
            assert r["usage"]["completion_tokens"] == 100
            assert c.post("/v1/completions", json={"prompt": "x " * 40, "max_context": 48}).status_code == 400
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        reap(proc)


def test_kv_cache_dtype_option(capsys) -> None:
    cfg = engine_config(engines=1, threads=1, max_num_seqs=8, max_batch_tokens=64, max_queue=3, kv_cache_mb=16.0,
                        kv_dtype="q8_0")  # fmt: skip
    assert cfg.cache.kv_dtype == "q8_0"
    assert main(["run", "x", "--kv-cache-dtype", "int3"]) == 1
    assert "q8_0" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (None, "does not exist"),
        (b"", "is empty"),
        (b"\xff\xfe{{ x }}", "not UTF-8"),
        (b"{% if %}", "does not compile"),
        (b"{% for m in messages %}{{ m.content }}", "does not compile"),
    ],
)
def test_a_bad_chat_template_file_is_one_line_error(tmp_path, capsys, monkeypatch, content, why) -> None:
    monkeypatch.setenv("MODELC_HOME", str(tmp_path))
    path = tmp_path / "t.jinja"
    if content is not None:
        path.write_bytes(content)
    assert main(["run", "x", "--chat-template", str(path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--chat-template" in err[0] and str(path) in err[0] and why in err[0], err
    assert main(["run", "x", "--chat-template", str(tmp_path)]) == 1
    assert "is a folder" in capsys.readouterr().err


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # Quart is asyncio-only
@pytest.mark.anyio
async def test_chat_template_file_replaces_the_models_own(tmp_path, anyio_backend) -> None:
    from modelc.api.opener import open_engine
    from modelc.artifact.writer import write_artifact
    from modelc.cli.run_cmds import read_chat_template
    from modelc.config import EngineConfig
    from modelc.server.app import create_app
    from modelc.server.state import ServerState
    from tests.server.tiny_model import make_served_model

    path = tmp_path / "tiny.modelc"
    write_artifact(make_served_model(), path)
    file = tmp_path / "mine.jinja"
    file.write_text("OVERRIDE{% for m in messages %} {{ m.content }}{% endfor %}")
    text = read_chat_template(str(file))
    async with open_engine(str(path), EngineConfig(warmup=False), text) as engine:
        assert engine.chat_template.source == text
        client = create_app(ServerState(engine)).test_client()
        props = await (await client.get("/props")).get_json()
        assert props["chat_template"] == text
        body = {"max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
        counted = await (await client.post("/v1/messages/count_tokens", json=body)).get_json()
        ids = await (await client.post("/tokenize", json={"input": "OVERRIDE hi"})).get_json()
        assert counted["input_tokens"] == ids["count"]
        card = (await (await client.get("/v1/models")).get_json())["data"][0]
        assert "tools" not in card["capabilities"]  # the model's own template takes tools; this one does not


def test_llama_cpp_cache_type_flags(capsys) -> None:
    from modelc.cli.run_cmds import kv_type

    assert kv_type("auto", None, None) == "auto"
    assert kv_type("auto", "q8_0", "q8_0") == kv_type("q8_0", None, None) == "q8_0"
    assert kv_type("auto", None, "f16") == kv_type("f16", "f16", None) == "float16"
    assert main(["run", "x", "-ctk", "q8_0", "-ctv", "f16"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--cache-type-k q8_0" in err[0] and "--cache-type-v float16" in err[0], err
    assert main(["run", "x", "--kv-cache-dtype", "f32", "--cache-type-k", "f16"]) == 1
    assert main(["run", "x", "-ctk", "int3"]) == 1
    assert "q8_0" in capsys.readouterr().err


def test_a_model_that_does_not_fit_even_streamed_is_one_line_error(tmp_path, capsys, monkeypatch) -> None:
    """models/residency.py's MemoryLimitError: the largest layer does not fit the page budget (here capped)."""
    from modelc.artifact.writer import write_artifact
    from modelc.models.tiny import make_tiny_llama

    monkeypatch.setenv("MODELC_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MODELC_STREAM_BUDGET_MB", "0.01")
    path = write_artifact(make_tiny_llama(0, hidden_size=128, intermediate_size=256), tmp_path / "m.modelc")
    assert main(["run", str(path), "--port", "0", "--stream-weights"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: model tiny-llama cannot run in the memory left") and "even streamed" in err[-1]
    assert main(["run", str(path), "--port", "0", "--weights", "mmap"]) == 1
    assert capsys.readouterr().err.strip() == "error: weights must be one of auto, resident, streamed"


@pytest.mark.parametrize("port", ["99999", "-1"])
def test_a_port_out_of_range_is_refused_before_loading(tmp_path, capsys, monkeypatch, port) -> None:
    """It loaded the model, then ended in 'error: internal error: ExceptionGroup: ...' (socket.bind's OverflowError)."""
    monkeypatch.setenv("MODELC_HOME", str(tmp_path / "home"))
    assert main(["run", "default", "--port", port]) == 2
    err = capsys.readouterr().err
    assert "--port" in err and "loading" not in err and "internal error" not in err


@pytest.mark.parametrize("flag", ["--models-dir", "--adapters-dir"])
def test_a_folder_flag_naming_no_folder_is_one_line_error(tmp_path, capsys, monkeypatch, flag) -> None:
    """A mistyped --models-dir was accepted (every request naming a file in it then got a 404); the default
    locations ($MODELC_HOME/models, $MODELC_HOME/adapters) may be missing: modelc creates them on first use."""
    monkeypatch.setenv("MODELC_HOME", str(tmp_path / "home"))
    missing, file = tmp_path / "nope", tmp_path / "f.txt"
    file.write_text("x")
    for path, why in ((missing, "does not exist"), (file, "is not a folder")):
        assert main(["run", str(tmp_path / "absent.modelc"), flag, str(path)]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"error: {flag} {path}: {why}"], err
    default = tmp_path / "home" / ("models" if flag == "--models-dir" else "adapters")
    assert main(["run", str(tmp_path / "absent.modelc"), flag, str(default)]) == 1
    err = capsys.readouterr().err  # past the flag: the missing model file is the error now
    assert "absent.modelc" in err and flag not in err, err


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--max-body-mb", "nan", "--max-body-mb must be a finite number >= 0, got nan"),  # was: internal error
        ("--max-body-mb", "inf", "--max-body-mb must be a finite number >= 0, got inf"),
        ("--drain-timeout", "-5", "--drain-timeout must be a finite number >= 0, got -5.0"),  # was: accepted
        ("--drain-timeout", "nan", "--drain-timeout must be a finite number >= 0, got nan"),
        ("--kv-cache-mb", "inf", "kv_cache_mb must be a finite number > 0"),  # was: internal error at load
    ],
)
def test_non_finite_number_flags_are_one_line_errors(tmp_path, capsys, monkeypatch, flag, value, message) -> None:
    monkeypatch.setenv("MODELC_HOME", str(tmp_path))
    assert main(["run", str(tmp_path / "absent.modelc"), flag, value]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [f"error: {message}"]
