"""An idle kept-alive connection outlives the client pools' own expiry (httpx: 5 s), so the client
retires it first and never sends a request into a connection the server is closing (the race behind
a RemoteProtocolError in tests/cli/test_daemon_cmds.py); a drain still closes idle connections at once;
and a connection its client closed is closed by the server at once (modelc.server.hypercorn_close),
not held open until the keep-alive timer fires: no file descriptors pile up."""

from __future__ import annotations

import os
import select
import socket
import sys
import time

import pytest

from tests.server.live import LiveServer

REQUEST = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


def read_response(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(next(ln.split(b":")[1] for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length")))
    while len(body) < length:
        body += sock.recv(65536)
    return head


def test_idle_connection_outlives_five_seconds_and_a_drain_closes_it() -> None:
    s = LiveServer("--delay", "0")
    try:
        with socket.create_connection(("127.0.0.1", s.port), timeout=30) as sock:
            sock.sendall(REQUEST)
            assert read_response(sock).startswith(b"HTTP/1.1 200")
            time.sleep(6.0)  # hypercorn's default keep-alive (5 s) would have closed it by now
            readable, _, _ = select.select([sock], [], [], 0)
            assert not readable, "the server closed the idle connection"
            sock.sendall(REQUEST)
            assert read_response(sock).startswith(b"HTTP/1.1 200")
            start = time.monotonic()
            s.terminate()
            assert s.wait(25) == 0  # the idle connection does not hold the 30 s drain
            assert time.monotonic() - start < 25
            sock.settimeout(5)
            assert sock.recv(1) == b""
    finally:
        s.stop()


def open_sockets(pid: int) -> int:
    fds = f"/proc/{pid}/fd"
    n = 0
    for name in os.listdir(fds):
        try:
            n += os.readlink(f"{fds}/{name}").startswith("socket:")
        except FileNotFoundError:
            pass
    return n


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts /proc/PID/fd")
def test_connections_closed_by_clients_do_not_hold_file_descriptors() -> None:
    s = LiveServer("--delay", "0")
    try:
        before = open_sockets(s.proc.pid)  # the listening socket and the event loop's own pair
        for _ in range(20):
            with socket.create_connection(("127.0.0.1", s.port), timeout=30) as sock:
                sock.sendall(REQUEST)
                assert read_response(sock).startswith(b"HTTP/1.1 200")
        deadline = time.monotonic() + 20  # well below the 75 s keep-alive that held them before
        while open_sockets(s.proc.pid) > before and time.monotonic() < deadline:
            time.sleep(0.1)
        assert open_sockets(s.proc.pid) == before
    finally:
        s.stop()


def test_an_answer_before_the_body_says_connection_close() -> None:
    """The guard refuses a cross-origin POST from its headers alone; the body is still on its way,
    so hypercorn closes the connection after the 403, and the 403 says so (no client reuses it)."""
    s = LiveServer("--delay", "0")
    try:
        with socket.create_connection(("127.0.0.1", s.port), timeout=30) as sock:
            sock.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://evil.example\r\n"
                b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n"
            )  # the body ("{}") is never sent
            head = read_response(sock).lower()
            assert head.startswith(b"http/1.1 403") and b"\r\nconnection: close" in head
            sock.settimeout(10)
            assert sock.recv(1) == b""  # and closed it is
        with socket.create_connection(("127.0.0.1", s.port), timeout=30) as sock:
            body = b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}'
            post = (
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
            )
            for _ in range(2):  # a body read in full keeps the connection alive, as does a bodiless GET
                sock.sendall(post)
                head = read_response(sock).lower()
                assert head.startswith(b"http/1.1 200") and b"connection: close" not in head
                sock.sendall(REQUEST)
                head = read_response(sock).lower()
                assert head.startswith(b"http/1.1 200") and b"connection: close" not in head
    finally:
        s.stop()
