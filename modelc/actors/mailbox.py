"""Mailboxes: bounded anyio memory object streams. An Address is the send end; the actor keeps the
receive end. tell() never waits (it is for edges sized so they cannot be full); send() waits
(backpressure); request() sends and waits for one reply, bounded by a timeout.
"""

from __future__ import annotations

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
