"""The actor design's rules (STYLE.md section 4), checked: every message is data (no field may hold a
callable, statically by its type and at run time by its value), and the event loop never takes a
threading.Lock while it serves (so it never waits on one an engine's worker thread holds)."""

from __future__ import annotations

import collections.abc
import dataclasses
import inspect
import sys
import threading
import traceback
import types
import typing

import anyio
import numpy as np
import pytest

from modelc.actors import messages
from modelc.actors.mailbox import Address, EngineInbox, MailboxSender
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
    sent: list[object] = []  # everything put into a mailbox: actor mailboxes and engine inboxes
    for cls, name in ((MailboxSender, "send_nowait"), (EngineInbox, "tell")):
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
    """A threading.Lock (or a wrapped existing lock) that records every acquire made on the event loop's
    thread while `on` is set."""

    on = False

    def __init__(self, loop_thread: int, taken: list[str], lock: typing.Any) -> None:
        self._lock, self._loop_thread, self._taken = lock, loop_thread, taken

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


_LOCK_TYPES = (type(threading.Lock()), type(threading.RLock()))


def _watch_locks(monkeypatch: pytest.MonkeyPatch, taken: list[str]) -> None:
    """Watch every threading.Lock made from now on, and the module-level locks modelc made at import (a
    `_lock = threading.Lock()` beside a cache), which the constructor patch alone would miss."""
    real = threading.Lock
    loop_thread = threading.get_ident()
    monkeypatch.setattr(threading, "Lock", lambda: _WatchedLock(loop_thread, taken, real()))
    monkeypatch.setattr(_WatchedLock, "on", False)
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "modelc" or name.startswith("modelc.")):
            continue
        for attr, value in list(vars(module).items()):
            if isinstance(value, _LOCK_TYPES):
                monkeypatch.setattr(module, attr, _WatchedLock(loop_thread, taken, value))


async def _locks_taken_while_serving(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Serve 4 concurrent streams and an embedding on a warm engine; the stacks of every threading.Lock
    acquire made on the loop's thread meanwhile."""
    taken: list[str] = []
    _watch_locks(monkeypatch, taken)
    with anyio.fail_after(120):
        async with AsyncEngine.open(make_tiny_llama(1), _config()) as eng:
            await _serve(eng, 2)  # warm: the kernels compile or load now
            _WatchedLock.on = True
            outs = await _serve(eng, 4)
            await eng.embed([[1, 2, 3]])
            _WatchedLock.on = False
    assert all(len(o) == 12 for o in outs)
    return taken


@pytest.mark.anyio
async def test_the_event_loop_takes_no_threading_lock_while_serving(anyio_backend, monkeypatch):
    """Once it serves, 4 concurrent streams and an embedding run with no threading.Lock acquire on the loop's
    thread. (The engine inbox's queue.SimpleQueue has a C lock whose put never waits; a lock the loop took
    could be held by an engine's thread mid-forward.)"""
    taken = await _locks_taken_while_serving(monkeypatch)
    assert taken == [], taken[0]


@pytest.mark.anyio
@pytest.mark.parametrize("which", ["new", "module"])
async def test_the_lock_watch_sees_a_lock_the_loop_takes(anyio_backend, monkeypatch, which):
    """The check above can fail: a RequestActor (on the loop) that takes a lock made while serving, or the
    module-level lock of engine/constraint.py, is caught."""
    from modelc.actors.request import RequestActor
    from modelc.engine import constraint

    real_handle = RequestActor.handle

    def handle_under_a_lock(self, msg):
        lock = threading.Lock() if which == "new" else constraint._lock
        with lock:
            return real_handle(self, msg)

    monkeypatch.setattr(RequestActor, "handle", handle_under_a_lock)
    taken = await _locks_taken_while_serving(monkeypatch)
    assert taken and "handle_under_a_lock" in taken[0]


# Messages that break the rules, for the test that the checks can fail.
@dataclasses.dataclass(frozen=True)
class _WithCallback:
    on_done: typing.Callable[[], None]


@dataclasses.dataclass(frozen=True)
class _WithAny:
    payload: typing.Any


@dataclasses.dataclass
class _Mutable:
    n: int


@dataclasses.dataclass(frozen=True)
class _Holder:
    inner: _Mutable


def test_the_data_checks_see_what_is_not_data():
    """The message checks above can fail: a callable field, an `Any`, a mutable dataclass, a lambda, a bound
    method and a writeable array are each reported."""

    for cls in (_WithCallback, _WithAny, _Holder):
        assert _type_problems(cls, cls.__name__, set()), cls
    assert _value_problems(_WithAny(lambda: None), "m") == ["m.payload: function (callable)"]
    assert _value_problems(_WithAny(np.zeros(2).sum), "m")
    assert _value_problems(_WithAny(np.zeros(2)), "m") == ["m.payload: a writeable array"]
    frozen = np.zeros(2)
    frozen.flags.writeable = False
    assert _value_problems(_WithAny((1, "a", frozen)), "m") == []
