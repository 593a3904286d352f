"""Mailboxes: bounded anyio memory object streams. An Address is the send end; the actor keeps the
receive end. tell() never waits (it is for edges sized so they cannot be full); send() waits
(backpressure); request() sends and waits for one reply, bounded by a timeout.

An engine's mailbox is an EngineInbox instead: the actor's loop runs on its worker thread, which takes
the next message (the next plan, already there when a forward ends) without a trip through the event
loop; the loop's tell() only appends, and never waits on a lock. The engine posts its answers back
with a loop poster (loop_poster): a callable run soon on the event loop, posted without waiting.
"""

from __future__ import annotations

import asyncio
import queue
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from modelc.errors import EngineError, RequestTimeoutError

T = TypeVar("T")


class MailboxFull(RuntimeError):
    """tell() found the mailbox full: a sizing bug, since tell() is used only where it cannot be."""


@dataclass(frozen=True, slots=True)
class Address(Generic[T]):
    stream: MemoryObjectSendStream[T]

    async def send(self, msg: T) -> None:
        """Deliver, waiting while the mailbox is full. Raises if the actor is gone."""
        await self.stream.send(msg)

    def tell(self, msg: T) -> bool:
        """Deliver without waiting; False when the receiver has gone away (closed its mailbox)."""
        try:
            self.stream.send_nowait(msg)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            return False
        except anyio.WouldBlock:
            raise MailboxFull(f"mailbox full delivering {type(msg).__name__}") from None
        return True

    async def request(self, make_msg: Callable[[Address[Any]], T], *, timeout_s: float) -> Any:
        """Send make_msg(reply_address) and return the one reply; RequestTimeoutError after timeout_s."""
        reply_to, replies = open_mailbox(1)
        msg = make_msg(reply_to)
        with replies, reply_to.stream:
            try:
                with anyio.fail_after(timeout_s):
                    await self.send(msg)
                    return await replies.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                raise EngineError(f"the engine stopped before answering {type(msg).__name__}") from None
            except TimeoutError:
                raise RequestTimeoutError(f"no reply to {type(msg).__name__} within {timeout_s:g} s") from None

    def clone(self) -> Address[T]:
        return Address(self.stream.clone())

    def close(self) -> None:
        self.stream.close()


def open_mailbox(size: int) -> tuple[Address[Any], MemoryObjectReceiveStream[Any]]:
    """A bounded mailbox (size >= 1: an actor's inbox is never unbounded, never math.inf)."""
    if size < 1:
        raise ValueError("a mailbox holds at least one message")
    send, receive = anyio.create_memory_object_stream[Any](size)
    return Address(send), receive


class EngineInbox:
    """An engine's bounded mailbox between the event loop (the scheduler tells it) and the engine's worker
    thread (which receives). tell() appends without waiting (queue.SimpleQueue's put takes no lock that a
    receiver holds); receive() blocks the calling worker thread only, never the loop."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("a mailbox holds at least one message")
        self.size = size
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._closed = False

    def tell(self, msg: Any) -> bool:
        """Deliver without waiting; False once the inbox is closed."""
        if self._closed:
            return False
        if self._queue.qsize() >= self.size:
            raise MailboxFull(f"engine mailbox full delivering {type(msg).__name__}")
        self._queue.put(msg)
        return True

    def receive(self) -> Any:
        """On the engine's worker thread: the next message, waiting for it. EndOfStream once closed and empty."""
        msg = self._queue.get()
        if msg is _CLOSED:
            self._queue.put(_CLOSED)  # every later receive ends too
            raise anyio.EndOfStream
        return msg

    def close(self) -> None:
        """No more messages: the receiver gets what is queued, then EndOfStream."""
        if not self._closed:
            self._closed = True
            self._queue.put(_CLOSED)


_CLOSED = object()  # EngineInbox's end-of-stream marker


def loop_poster() -> Callable[..., None]:
    """On the event loop: a function that runs fn(*args) soon on this loop, called from any thread without
    waiting (anyio.from_thread waits for the result; an engine's thread must not)."""
    try:
        return asyncio.get_running_loop().call_soon_threadsafe
    except RuntimeError:  # no asyncio loop: trio (the actor core's tests run under it)
        import trio  # lazy: only under trio, a test dependency

        return trio.lowlevel.current_trio_token().run_sync_soon
