"""The actors' mailbox (actors/mailbox.py) keeps anyio's memory object stream's contract on asyncio and trio:
order, bounded room and a sender that waits for it, end of stream once every send end is closed, a closed
receiver breaks its senders, receive() is a cancellation point even with a message waiting."""

from __future__ import annotations

import anyio
import pytest
from anyio import wait_all_tasks_blocked

from modelc.actors.mailbox import open_mailbox

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return request.param


async def test_messages_come_in_order_and_a_waiting_receiver_wakes(anyio_backend) -> None:
    address, inbox = open_mailbox(4)
    got: list[int] = []

    async def receive_three() -> None:
        for _ in range(3):
            got.append(await inbox.receive())

    async with anyio.create_task_group() as tg:
        tg.start_soon(receive_three)
        await wait_all_tasks_blocked()  # the receiver waits on an empty mailbox
        assert inbox.queued() == 0
        address.tell(1)
        await wait_all_tasks_blocked()
        address.tell(2)
        address.tell(3)
    assert got == [1, 2, 3]


async def test_a_full_mailbox_makes_send_wait_for_room(anyio_backend) -> None:
    address, inbox = open_mailbox(1)
    sent: list[str] = []

    async def sender(name: str) -> None:
        await address.send(name)
        sent.append(name)

    address.tell("first")
    async with anyio.create_task_group() as tg:
        tg.start_soon(sender, "a")
        tg.start_soon(sender, "b")
        await wait_all_tasks_blocked()
        assert sent == [] and inbox.queued() == 1  # both wait for room
        assert inbox.receive_nowait() == "first"
        await wait_all_tasks_blocked()
        assert len(sent) == 1  # one got the room; the other still waits
        assert await inbox.receive() == sent[0]
        await wait_all_tasks_blocked()
        assert await inbox.receive() == sent[1]
    assert sorted(sent) == ["a", "b"]


async def test_end_of_stream_only_when_every_send_end_is_closed(anyio_backend) -> None:
    address, inbox = open_mailbox(4)
    other = address.clone()
    address.tell("x")
    address.close()
    address.close()  # twice: nothing more happens
    with pytest.raises(anyio.ClosedResourceError):
        address.stream.send_nowait("y")
    assert await inbox.receive() == "x"
    with pytest.raises(anyio.WouldBlock):
        inbox.receive_nowait()  # the clone is still open
    received: list[str] = []

    async def drain() -> None:
        async for msg in inbox:  # ends at EndOfStream
            received.append(msg)

    async with anyio.create_task_group() as tg:
        tg.start_soon(drain)
        await wait_all_tasks_blocked()
        other.tell("z")
        await wait_all_tasks_blocked()
        other.close()  # wakes the waiting receiver, which ends
    assert received == ["z"]
    with pytest.raises(anyio.EndOfStream):
        await inbox.receive()


async def test_a_closed_receiver_breaks_its_senders(anyio_backend) -> None:
    address, inbox = open_mailbox(1)
    address.tell("full")
    broken: list[BaseException] = []

    async def blocked_sender() -> None:
        try:
            await address.send("never")
        except anyio.BrokenResourceError as exc:
            broken.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(blocked_sender)
        await wait_all_tasks_blocked()
        inbox.close()  # wakes the sender waiting for room: it finds the receiver gone
    assert len(broken) == 1
    assert not address.tell("late")  # tell() reports the receiver gone
    with pytest.raises(anyio.ClosedResourceError):
        inbox.receive_nowait()


async def test_receive_is_a_cancellation_point_with_a_message_waiting(anyio_backend) -> None:
    """A cancelled caller gets its cancellation, not the message (which stays for the next receive)."""
    address, inbox = open_mailbox(2)
    address.tell("kept")
    with anyio.CancelScope() as scope:
        scope.cancel()
        await inbox.receive()
        pytest.fail("receive() returned in a cancelled scope")
    assert scope.cancelled_caught
    assert inbox.receive_nowait() == "kept"
    with anyio.move_on_after(0.05) as waited:
        await inbox.receive()  # empty: waits until cancelled
    assert waited.cancelled_caught
    address.tell("after")  # the cancelled wait left no stale waiter behind
    assert await inbox.receive() == "after"


async def test_a_cancelled_sender_leaves_the_room_to_the_next(anyio_backend) -> None:
    address, inbox = open_mailbox(1)
    address.tell("first")
    sent: list[str] = []
    scopes: dict[str, anyio.CancelScope] = {}

    async def sender(name: str) -> None:
        with anyio.CancelScope() as scopes[name]:
            await address.send(name)
            sent.append(name)

    async with anyio.create_task_group() as tg:
        tg.start_soon(sender, "cancelled")
        await wait_all_tasks_blocked()
        tg.start_soon(sender, "waiting")
        await wait_all_tasks_blocked()
        scopes["cancelled"].cancel()  # the first in line leaves while it waits for room
        await wait_all_tasks_blocked()
        assert inbox.receive_nowait() == "first"
        await wait_all_tasks_blocked()
        assert inbox.receive_nowait() == "waiting"
    assert sent == ["waiting"]
