"""BatchWindow: the rollout side's bound on batches in flight."""

from __future__ import annotations

import asyncio

import pytest

from producers import BatchWindow


async def settle() -> None:
    """Let every ready task run until it blocks (no timing: nothing else can wake them)."""
    for _ in range(10):
        await asyncio.sleep(0)


async def test_the_third_batch_waits_until_one_is_released() -> None:
    window = BatchWindow(max_in_flight=2)
    await window.acquire("b0")
    await window.acquire("b1")
    assert window.full and window.in_flight == ("b0", "b1")
    third = asyncio.ensure_future(window.acquire("b2"))
    await settle()
    assert not third.done()
    assert window.release("b0")
    await asyncio.wait_for(third, timeout=5)
    assert window.in_flight == ("b1", "b2") and window.is_open("b2") and not window.is_open("b0")


async def test_release_is_idempotent_and_never_widens_the_window() -> None:
    window = BatchWindow(max_in_flight=1)
    await window.acquire("a")
    assert window.release("a") is True
    assert window.release("a") is False  # a redelivered scored batch
    assert window.release("never-acquired") is False
    await window.acquire("b")
    blocked = asyncio.ensure_future(window.acquire("c"))
    await settle()
    assert not blocked.done() and window.in_flight == ("b",)
    blocked.cancel()
    with pytest.raises(asyncio.CancelledError):
        await blocked


async def test_waiters_are_served_in_arrival_order() -> None:
    window = BatchWindow(max_in_flight=1)
    await window.acquire("first")
    served: list[str] = []

    async def publish(batch_id: str) -> None:
        await window.acquire(batch_id)
        served.append(batch_id)

    waiters = [asyncio.ensure_future(publish(f"w{i}")) for i in range(3)]
    await settle()
    for previous in ["first", "w0", "w1"]:
        window.release(previous)
        await settle()
    await asyncio.wait_for(asyncio.gather(*waiters), timeout=5)
    assert served == ["w0", "w1", "w2"]


async def test_a_cancelled_waiter_takes_no_slot() -> None:
    window = BatchWindow(max_in_flight=1)
    await window.acquire("a")
    waiting = asyncio.ensure_future(window.acquire("b"))
    await settle()
    waiting.cancel()
    await settle()
    window.release("a")
    await asyncio.wait_for(window.acquire("c"), timeout=5)
    assert window.in_flight == ("c",)


async def test_a_batch_is_in_flight_once() -> None:
    window = BatchWindow(max_in_flight=2)
    await window.acquire("a")
    with pytest.raises(ValueError, match="already in flight"):
        await window.acquire("a")
    assert window.in_flight == ("a",) and not window.full


def test_the_bound_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_in_flight"):
        BatchWindow(0)
