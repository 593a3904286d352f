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
