"""daemon.json handling, the daemon client's errors, and `modelc run`'s launch helpers."""

from __future__ import annotations

import os
import socket

import pytest
import typer

from modelc.artifact.format import is_artifact
from modelc.daemon import launch, state_file
from modelc.daemon.client import DaemonClient, DaemonError, DaemonUnavailableError, _check
from modelc.errors import NotFoundError


def test_state_file_round_trip_and_owner_only_removal(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("MODELC_HOME", str(tmp_path))
    monkeypatch.delenv("MODELC_HOST", raising=False)
    assert state_file.read_state() is None and state_file.daemon_url() is None  # nothing recorded: no guess
    info = state_file.write_state("http://127.0.0.1:9001", token="t0k")
    assert state_file.read_state() == info and info.pid == os.getpid() and info.token == "t0k"
    assert (tmp_path / "daemon.json").stat().st_mode & 0o777 == 0o600  # the token is the owner's only
    assert state_file.daemon_url() == "http://127.0.0.1:9001"
    state_file.remove_state(pid=info.pid + 1)  # another process's record is not ours to remove
    assert (tmp_path / "daemon.json").exists()
    state_file.remove_state()
    assert not (tmp_path / "daemon.json").exists()
    (tmp_path / "daemon.json").write_text("{not json")
    assert state_file.read_state() is None


def test_modelc_host_overrides(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("MODELC_HOME", str(tmp_path))
    state_file.write_state("http://127.0.0.1:9001")
    monkeypatch.setenv("MODELC_HOST", "127.0.0.1:9000/")
    assert state_file.daemon_url() == "http://127.0.0.1:9000"


def test_client_errors() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with DaemonClient(f"http://127.0.0.1:{port}") as c:
        with pytest.raises(DaemonUnavailableError, match=f"no modelc daemon at http://127.0.0.1:{port}; start"):
            c.get("/api/ps")
        assert not c.healthy()
    import httpx

    resp = httpx.Response(404, json={"error": {"message": "model 'x' not found", "type": "t"}})
    with pytest.raises(DaemonError, match="model 'x' not found") as e:
        _check(resp, resp.content)
    assert e.value.http_status == 404


def test_serve_target(tmp_path, monkeypatch) -> None:
    from modelc import store
    from modelc.artifact.tiny import make_model
    from modelc.artifact.writer import write_artifact

    monkeypatch.setenv("MODELC_HOME", str(tmp_path))
    store.add("alpha", lambda tmp: write_artifact(make_model(name="alpha-model"), tmp))
    path, name = launch.serve_target("alpha")
    assert path == store.active_path("alpha") and name == "alpha"
    f = tmp_path / "x.modelc"
    write_artifact(make_model(name="xm"), f)
    assert launch.serve_target(str(f)) == (f, "xm")
    monkeypatch.setattr(launch, "bundled_model_path", lambda: tmp_path / "missing.modelc")
    with pytest.raises(NotFoundError, match="bundled default model is missing"):
        launch.serve_target(None)
    monkeypatch.setattr(launch, "bundled_model_path", lambda: f)
    assert launch.serve_target(None) == (f, "xm")


def test_raw_weights_are_packed_into_the_store(tmp_path, monkeypatch) -> None:
    from modelc import store
    from modelc.artifact.reader import open_artifact
    from modelc.formats.export_safetensors import export_safetensors
    from tests.server.tiny_model import make_served_model

    monkeypatch.setenv("MODELC_HOME", str(tmp_path / "home"))
    src = tmp_path / "tiny.safetensors"
    export_safetensors(make_served_model(), src)
    path, name = launch.serve_target(str(src))
    assert path == store.resolve(name) and is_artifact(path)
    assert name == "tiny" and set(open_artifact(path).tensors) == set(make_served_model().tensors)
    # a restart serves what this file packed into, with no new version; a changed file packs again
    assert launch.serve_target(str(src)) == (path, name) and store.versions("tiny") == []
    os.utime(src, ns=(src.stat().st_atime_ns, src.stat().st_mtime_ns + 1_000_000_000))
    again, _ = launch.serve_target(str(src))
    assert again == path and store.versions("tiny") == [1]  # the earlier one kept as version 1


def test_argv_from_context_rebuilds_the_command_line() -> None:
    from typer.testing import CliRunner

    from modelc.cli.run_cmds import run_cmd

    seen = {}
    app = typer.Typer()

    @app.command()
    def run(ctx: typer.Context, artifact: str | None = typer.Argument(None), port: int = typer.Option(8080, "--port"),
            detach: bool = typer.Option(False, "--detach"), profile: bool = typer.Option(False, "--profile"),
            api_key: str | None = typer.Option(None, "--api-key"),
            allowed_hosts: list[str] = typer.Option([], "--allowed-hosts")) -> None:  # fmt: skip
        seen["argv"] = launch.argv_from_context(ctx)

    CliRunner().invoke(app, ["tiny", "--port", "0", "--detach", "--profile", "--api-key", "secret",
                             "--allowed-hosts", "a.lan", "--allowed-hosts", "b.lan"])  # fmt: skip
    assert seen["argv"] == ["tiny", "--port", "0", "--profile", "--allowed-hosts", "a.lan", "--allowed-hosts", "b.lan"]
    assert "ctx" in run_cmd.__code__.co_varnames  # run_cmd takes the context it rebuilds from
