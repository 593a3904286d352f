"""Connecting to Ray: a cluster the operator runs (ADDRESS), or a local one started here on
127.0.0.1 and shut down with the server. The only module that calls ray.init / ray.shutdown.

Ray's servers listen on every interface unless told otherwise; a local cluster is pinned to the
loopback address. `ray stop` is never used (it kills every Ray process on the machine).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from modelc.errors import ModelcError, UnsupportedError


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UnsupportedError("Ray is not installed: pip install 'modelc[ray]'") from None
    return ray


@contextmanager
def connected(address: str | None, *, num_cpus: float | None = None) -> Iterator[Any]:
    """Yield the ray module, connected. Starts (and later stops) a local cluster when address is
    None and this process is not connected yet; an existing connection is used as is."""
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    ray = import_ray()
    if ray.is_initialized():
        yield ray
        return
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
    if address is None:
        kwargs.update(_node_ip_address="127.0.0.1", num_cpus=num_cpus)
    else:
        kwargs["address"] = address
    try:
        ray.init(**kwargs)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ModelcError(f"could not connect to Ray at {address or 'a new local cluster'}: {exc}") from None
    try:
        yield ray
    finally:
        ray.shutdown()
