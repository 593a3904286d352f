"""Connecting to Ray: a cluster the operator runs (ADDRESS), or a local one started here on
127.0.0.1 and shut down when the last model using it closes. The only module that calls ray.init
and ray.shutdown; both run in a worker thread (starting a cluster takes seconds).

Ray's servers listen on every interface unless told otherwise; a local cluster is pinned to the
loopback address. `ray stop` is never used (it kills every Ray process on the machine).
"""

from __future__ import annotations

import os
import signal
import socket
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio

from modelc.errors import ModelcError, UnsupportedError

_users = 0  # open `connected()` contexts in this process
_started_here = False  # this process called ray.init (and so must call ray.shutdown)


def import_ray() -> Any:
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # read at import: keeps Ray on loopback
    try:
        import ray
    except ImportError:
        raise UnsupportedError("Ray is not installed: pip install 'modelc[ray]'") from None
    return ray


@asynccontextmanager
async def connected(address: str | None) -> AsyncIterator[Any]:
    """Yield the ray module, connected: to `address`, or to a new local cluster when it is None.
    A connection this process already has (another model, a test's cluster) is shared."""
    global _users, _started_here
    ray = import_ray()
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
        if address is None:  # "local": a new cluster, even where RAY_ADDRESS names another one
            kwargs.update(address="local", _node_ip_address="127.0.0.1")
        else:
            kwargs["address"] = address
        try:
            if address not in (None, "auto"):
                await anyio.to_thread.run_sync(_reachable, address)
            await anyio.to_thread.run_sync(lambda: ray.init(**kwargs))
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise ModelcError(f"could not connect to Ray at {address or 'a new local cluster'}: {exc}") from None
        _started_here = True
        _restore_signal_handlers()
    _users += 1
    try:
        yield ray
    finally:
        _users -= 1
        if _users == 0 and _started_here:
            _started_here = False
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(ray.shutdown)


def _restore_signal_handlers() -> None:
    """ray.init installs a native handler for SIGTERM/SIGINT that prints a stack and aborts; put
    Python's own back so the server still drains and exits cleanly on SIGTERM."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGTERM, signal.SIGINT):
        handler = signal.getsignal(sig)
        if handler is not None:
            signal.signal(sig, handler)


def _reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail in seconds, not minutes, when nothing listens at HOST:PORT (ray.init retries a long time)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise ModelcError(f"--ray takes 'local', 'auto' or HOST:PORT, not {address!r}")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise ConnectionError(f"nothing answers at {address} ({exc.strerror or exc})") from None
