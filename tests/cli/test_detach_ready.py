"""`modelc run --detach` returns once the daemon is ready; past --ready-timeout it fails in one line and stops it."""

from __future__ import annotations

from tests.cli.test_daemon_cmds import alive, cli, free_port, make_store


def test_detach_past_the_ready_timeout_is_one_line_and_stops_the_daemon(tmp_path, monkeypatch) -> None:
    make_store(tmp_path, monkeypatch)
    r = cli(tmp_path, "run", "tiny", "--detach", "--port", str(free_port()), "--ready-timeout", "0.05")
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert lines[-1].startswith("error: the daemon was not ready within 0s") and "stopped it" in lines[-1], r.stderr
    pid = int(lines[-1].split("(pid ")[1].split(")")[0])
    assert not alive(pid) and not (tmp_path / "daemon.json").exists()


def test_detach_returns_once_ready_and_the_log_says_so(tmp_path, monkeypatch) -> None:
    import os
    import signal

    import httpx

    make_store(tmp_path, monkeypatch)
    port = free_port()
    r = cli(tmp_path, "run", "tiny", "--detach", "--port", str(port), "--threads", "1", "--kv-cache-mb", "8")
    assert r.returncode == 0, r.stderr
    pid = int(r.stdout.split("pid ")[1].split(")")[0])
    try:
        health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=10)  # at once: no polling needed
        assert health.status_code == 200 and health.json()["status"] == "ok"
        log = (tmp_path / "daemon.log").read_text()
        assert "modelc: loading tiny (/health answers 503 until it is warm)" in log
        assert "modelc: ready in " in log and f"serving tiny on http://127.0.0.1:{port}" in log
        assert log.index("loading tiny") < log.index("ready in ")
    finally:
        cli(tmp_path, "stop")
        if alive(pid):
            os.kill(pid, signal.SIGTERM)
