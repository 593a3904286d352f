"""Close a connection as soon as its client does.

hypercorn (0.17-0.18, asyncio) ends a connection's read loop when the client closes (EOF), but the
socket is closed only when the connection's task group ends, and that group still holds the idle
timer task, asleep for the rest of keep_alive_timeout. So every connection a client closed stayed
open on the server (CLOSE-WAIT, one file descriptor) until its keep-alive timer fired: with
KEEP_ALIVE_S = 75 s a soak held 300+ such sockets. Stopping the idle timer once the read loop has
ended lets the group (and the socket) close at once; the read loop ends only while no request is
in flight (hypercorn reads nothing during a response), so nothing is cut short.

install() patches hypercorn.asyncio.tcp_server.TCPServer once; it does nothing when that class is
not the shape described (another hypercorn version): tests/server/test_keep_alive.py then fails.

An answer sent before the request's body has arrived in full (a 403 from the guard, a 413, a 429)
ends the connection too: hypercorn recycles an HTTP/1.1 connection only once both sides are done,
else it closes it, with nothing in the answer saying so. A client then sends its next request into
a socket being closed and reads "Server disconnected without sending a response".
close_if_body_unread() says `Connection: close` in such an answer, so the client opens a new one.
"""

from __future__ import annotations

from typing import Any


def install() -> bool:
    from hypercorn.asyncio.tcp_server import TCPServer

    read = getattr(TCPServer, "_read_data", None)
    if read is None or getattr(read, "_modelc_closes", False) or not hasattr(TCPServer, "_idle_timeout"):
        return getattr(read, "_modelc_closes", False)

    async def _read_data(self: Any) -> None:
        try:
            await read(self)
        finally:
            idle = getattr(self, "idle_task", None)
            if idle is not None:
                await idle.stop()

    _read_data._modelc_closes = True  # type: ignore[attr-defined]
    TCPServer._read_data = _read_data  # type: ignore[method-assign]
    return True


def close_if_body_unread(request: Any, response: Any) -> None:
    """Add `Connection: close` to an HTTP/1.x answer whose request has a body not yet read in full.

    A request without a body (no Content-Length, or 0, and not chunked) never closes: its end may
    still be in quart's queue when a quick answer is ready, and keep-alive must hold for it."""
    if request.http_version not in ("1.0", "1.1"):
        return  # HTTP/2 has no Connection header; its streams end on their own
    chunked = "chunked" in request.headers.get("Transfer-Encoding", "").lower()
    if not request.content_length and not chunked:
        return
    complete = getattr(getattr(request, "body", None), "_complete", None)  # quart.wrappers.request.Body
    if complete is not None and complete.is_set():
        return
    response.headers["Connection"] = "close"
