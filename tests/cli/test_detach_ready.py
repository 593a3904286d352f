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
