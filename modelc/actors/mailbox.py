"""Mailboxes: bounded queues with one receiving actor. An Address is the send end; the actor keeps the
receive end. tell() never waits (it is for edges sized so they cannot be full); send() waits
(backpressure); request() sends and waits for one reply, bounded by a timeout.

NOTE: a mailbox is anyio's memory object stream made lean for the served hot path (the same methods and
errors: WouldBlock, EndOfStream, BrokenResourceError, ClosedResourceError). receive() takes a message that
is already there without a trip through the event loop (anyio's yields to the loop first, every time; this
one still raises a pending cancellation); only an empty mailbox waits, on the running loop's own event
(an asyncio future, or anyio's Event under trio). A streamed token crosses two mailboxes (engine ->
scheduler -> request) every step, and on a small model each loop iteration is time the forward's Python
waits for the GIL (docs/benchmarks.md, issue 40). send() stays a cancellation point, as anyio's.

An engine's mailbox is an EngineInbox instead: the actor's loop runs on its worker thread, which takes
the next message (the next plan, already there when a forward ends) without a trip through the event
loop; the loop's tell() only appends, and never waits on a lock. The engine posts its answers back
with a loop poster (loop_poster): a callable run soon on the event loop, posted without waiting.
"""

from __future__ import annotations

import asyncio
import queue
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import anyio

from modelc.errors import EngineError, RequestTimeoutError

T = TypeVar("T")


class MailboxFull(RuntimeError):
    """tell() found the mailbox full: a sizing bug, since tell() is used only where it cannot be."""


class _FutureEvent:
    """A one-shot event on asyncio: one future (set(), await wait(), as anyio.Event)."""

    __slots__ = ("_future",)

    def __init__(self) -> None:
        self._future = asyncio.get_running_loop().create_future()

    def set(self) -> None:
        if not self._future.done():  # (done: set already, or its waiter was cancelled)
            self._future.set_result(None)

    def wait(self) -> asyncio.Future:
        return self._future


class _Box:
    """A mailbox's state, shared by its send ends and its one receive end."""

    __slots__ = ("buffer", "size", "senders", "receiver_open", "receiver", "room", "event")

    def __init__(self, size: int) -> None:
        self.buffer: deque[Any] = deque()
        self.size = size
        self.senders = 1  # open send ends: at 0 the receiver gets EndOfStream once the buffer is empty
        self.receiver_open = True
        self.receiver: Any = None  # the event the receiving task waits on, while it waits
        self.room: deque[Any] = deque()  # events of senders waiting for room
        self.event: Callable[[], Any] | None = None  # the running loop's event class, found at the first wait

    def new_event(self) -> Any:
        if self.event is None:
            try:
                asyncio.get_running_loop()
                self.event = _FutureEvent  # the future anyio's Event wraps on asyncio, without its layers
            except RuntimeError:  # no asyncio loop: trio (the actor core's tests run under it)
                self.event = anyio.Event
        return self.event()

    def wake_receiver(self) -> None:
        if self.receiver is not None:
            self.receiver.set()
            self.receiver = None


class MailboxSender(Generic[T]):
    """A send end (anyio's MemoryObjectSendStream's methods)."""

    __slots__ = ("_box", "_closed")

    def __init__(self, box: _Box) -> None:
        self._box, self._closed = box, False

    def send_nowait(self, msg: T) -> None:
        box = self._box
        if self._closed:
            raise anyio.ClosedResourceError
        if not box.receiver_open:
            raise anyio.BrokenResourceError
        if len(box.buffer) >= box.size:
            raise anyio.WouldBlock
        box.buffer.append(msg)
        box.wake_receiver()

    async def send(self, msg: T) -> None:
        await anyio.lowlevel.checkpoint()
        box = self._box
        while True:
            try:
                self.send_nowait(msg)
                return
            except anyio.WouldBlock:
                pass
            event = box.new_event()
            box.room.append(event)
            try:
                await event.wait()
            except BaseException:
                if event in box.room:
                    box.room.remove(event)
                elif box.room:
                    box.room.popleft().set()  # woken, then cancelled: the room goes to the next sender waiting
                raise

    def clone(self) -> MailboxSender[T]:
        if self._closed:
            raise anyio.ClosedResourceError
        self._box.senders += 1
        return MailboxSender(self._box)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._box.senders -= 1
            if not self._box.senders:
                self._box.wake_receiver()

    def __enter__(self) -> MailboxSender[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Mailbox(Generic[T]):
    """The receive end (anyio's MemoryObjectReceiveStream's methods), for one receiving task."""

    __slots__ = ("_box", "_closed")

    def __init__(self, box: _Box) -> None:
        self._box, self._closed = box, False

    def receive_nowait(self) -> T:
        box = self._box
        if self._closed:
            raise anyio.ClosedResourceError
        if box.buffer:
            msg = box.buffer.popleft()
            if box.room:
                box.room.popleft().set()
            return msg
        if not box.senders:
            raise anyio.EndOfStream
        raise anyio.WouldBlock

    async def receive(self) -> T:
        """The next message: at once when one is there, else after waiting for it. A cancellation point
        (a cancelled caller gets its cancellation, not the message) that yields to other tasks only to wait."""
        box = self._box
        if box.buffer:  # (a wait below is the cancellation point otherwise)
            await anyio.lowlevel.checkpoint_if_cancelled()
        while True:
            try:
                return self.receive_nowait()
            except anyio.WouldBlock:
                pass
            event = box.receiver = box.new_event()
            try:
                await event.wait()
            finally:
                if box.receiver is event:
                    box.receiver = None

    def queued(self) -> int:
        """Messages waiting in the mailbox."""
        return len(self._box.buffer)

    def __aiter__(self) -> Mailbox[T]:
        return self

    async def __anext__(self) -> T:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            box = self._box
            box.receiver_open = False
            while box.room:
                box.room.popleft().set()

    def __enter__(self) -> Mailbox[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True, slots=True)
class Address(Generic[T]):
    stream: MailboxSender[T]

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


def open_mailbox(size: int) -> tuple[Address[Any], Mailbox[Any]]:
    """A bounded mailbox (size >= 1: an actor's inbox is never unbounded, never math.inf)."""
    if size < 1:
        raise ValueError("a mailbox holds at least one message")
    box = _Box(size)
    return Address(MailboxSender(box)), Mailbox(box)


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
