"""The actor design's rules (STYLE.md section 4), checked: every message is data (no field may hold a
callable, statically by its type and at run time by its value), and the event loop never takes a
threading.Lock while it serves (so it never waits on one an engine's worker thread holds)."""

from __future__ import annotations

import collections.abc
import dataclasses
import inspect
import threading
import traceback
import types
import typing

import anyio
import numpy as np
import pytest
from anyio.streams.memory import MemoryObjectSendStream

from modelc.actors import messages
from modelc.actors.mailbox import Address, EngineInbox
from modelc.api.async_engine import AsyncEngine
from modelc.config import CacheConfig, EngineConfig, SchedulerConfig
from modelc.models.tiny import make_tiny_llama
from modelc.request import SamplingParams

# Leaves a message may hold: plain values, frozen arrays, read-only maps, errors, reply addresses.
DATA = (int, float, str, bool, bytes, type(None), np.ndarray, types.MappingProxyType, BaseException, Address)


def message_classes() -> list[type]:
    return [c for _, c in inspect.getmembers(messages, inspect.isclass) if dataclasses.is_dataclass(c)]


def _type_problems(tp: object, where: str, seen: set) -> list[str]:
    """Why the annotation `tp` could hold something that is not data (a callable, an object with behaviour)."""
    origin = typing.get_origin(tp)
    if tp is typing.Any or tp is object:
        return [f"{where}: {tp} may hold anything"]
    if origin in (collections.abc.Callable,) or tp is collections.abc.Callable or inspect.isfunction(tp):
        return [f"{where}: a callable"]
    if origin in (typing.Union, types.UnionType) or origin in (tuple, typing.Literal):
        args = [a for a in typing.get_args(tp) if a is not Ellipsis]
        if origin is typing.Literal:
            return []
        return [p for a in args for p in _type_problems(a, where, seen)]
    if origin is not None:
        return [f"{where}: {tp} (a container of something)"]
    if isinstance(tp, type) and issubclass(tp, DATA):
        return []
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if tp in seen:
            return []
        seen.add(tp)
        if not tp.__dataclass_params__.frozen:
            return [f"{where}: {tp.__name__} is not frozen"]
        hints = typing.get_type_hints(tp)
        return [p for f in dataclasses.fields(tp) for p in _type_problems(hints[f.name], f"{where}.{f.name}", seen)]
    return [f"{where}: {tp!r} is not a data type"]


def test_every_message_field_is_typed_as_data():
    classes = message_classes()
    assert {"RunBatch", "BatchDone", "AddSequence", "TokenEmitted", "SwapKernels"} <= {c.__name__ for c in classes}
    problems = [p for c in classes for p in _type_problems(c, c.__name__, set())]
    assert problems == []


def _value_problems(value: object, where: str) -> list[str]:
    if isinstance(value, DATA) and not callable(value):
        if isinstance(value, np.ndarray) and value.flags.writeable:
            return [f"{where}: a writeable array"]
        return []
    if isinstance(value, tuple):
        return [p for i, v in enumerate(value) for p in _value_problems(v, f"{where}[{i}]")]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [
            p for f in dataclasses.fields(value) for p in _value_problems(getattr(value, f.name), f"{where}.{f.name}")
        ]
    return [f"{where}: {type(value).__name__} {'(callable)' if callable(value) else ''}"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _config() -> EngineConfig:
    return EngineConfig(threads=1, cpu_count=2, warmup=False, cache=CacheConfig(kv_cache_tokens=1024),
                        scheduler=SchedulerConfig(max_num_seqs=8, max_batch_tokens=64))  # fmt: skip


async def _serve(eng: AsyncEngine, n: int) -> list[list[int]]:
    out: list[list[int]] = [[] for _ in range(n)]

    async def one(i: int) -> None:
        params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
        async for ev in eng.generate([3 + i, 9, 27, 5, 11], params):
            if hasattr(ev, "token_id"):
                out[i].append(ev.token_id)

    async with anyio.create_task_group() as tg:
        for i in range(n):
            tg.start_soon(one, i)
    return out


@pytest.mark.anyio
async def test_every_message_sent_while_serving_is_data(anyio_backend, monkeypatch):
    sent: list[object] = []  # everything put into a mailbox: memory object streams and engine inboxes
    for cls, name in ((MemoryObjectSendStream, "send_nowait"), (EngineInbox, "tell")):
        real = getattr(cls, name)

        def watching(self, msg, _real=real):
            sent.append(msg)
            return _real(self, msg)

        monkeypatch.setattr(cls, name, watching)
    with anyio.fail_after(120):
        async with AsyncEngine.open(make_tiny_llama(1), _config()) as eng:
            await _serve(eng, 3)
            await eng.embed([[1, 2, 3]])
    names = {type(m).__name__ for m in sent}
    assert {"AddSequence", "RunBatch", "BatchDone", "TokenEmitted", "Embed", "Embedded", "Shutdown"} <= names
    problems = [p for m in sent for p in _value_problems(m, type(m).__name__)]
    assert problems == []


class _WatchedLock:
    """threading.Lock that records every acquire made on the event loop's thread while `on` is set."""

    on = False

    def __init__(self, loop_thread: int, taken: list[str], real: typing.Callable[[], typing.Any]) -> None:
        self._lock, self._loop_thread, self._taken = real(), loop_thread, taken

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if _WatchedLock.on and threading.get_ident() == self._loop_thread:
            self._taken.append("".join(traceback.format_stack(limit=6)[:-1]))
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()

    def locked(self) -> bool:
        return self._lock.locked()

    def _at_fork_reinit(self) -> None:
        self._lock._at_fork_reinit()

    __enter__ = acquire

    def __exit__(self, *exc: object) -> None:
        self.release()


@pytest.mark.anyio
async def test_the_event_loop_takes_no_threading_lock_while_serving(anyio_backend, monkeypatch):
    """Every threading.Lock made from the engine's start on is watched; once it serves, 4 concurrent streams
    and an embedding run with no acquire on the loop's thread. (The engine inbox's queue.SimpleQueue has a
    C lock whose put never waits; a lock the loop took could be held by an engine's thread mid-forward.)"""
    taken: list[str] = []
    real = threading.Lock
    loop_thread = threading.get_ident()
    monkeypatch.setattr(threading, "Lock", lambda: _WatchedLock(loop_thread, taken, real))
    monkeypatch.setattr(_WatchedLock, "on", False)
    with anyio.fail_after(120):
        async with AsyncEngine.open(make_tiny_llama(1), _config()) as eng:
            await _serve(eng, 2)  # warm: the kernels compile or load now
            _WatchedLock.on = True
            outs = await _serve(eng, 4)
            await eng.embed([[1, 2, 3]])
            _WatchedLock.on = False
    assert all(len(o) == 12 for o in outs)
    assert taken == [], taken[0]
