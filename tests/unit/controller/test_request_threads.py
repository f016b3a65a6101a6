"""The passes' requests run lightest first, and heavy batches leave threads free for light ones.

At 500 jobs the first passes' creates (sixteen writes each) held every thread first come first served, and a
job whose pods were all ready waited behind them to write its status. Each test holds the threads with calls
that block on an Event, so what starts next depends on the order alone, not on timing."""

from __future__ import annotations

import asyncio
import threading

import pytest

from ttj.controller.threads import RequestThreads


class Gate:
    """A blocking call that reports when it started and returns once opened."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.opened = threading.Event()

    def __call__(self, value: str) -> str:
        self.started.set()
        self.opened.wait(timeout=60)
        return value


async def started(gate: Gate) -> None:
    await asyncio.to_thread(gate.started.wait, 60)


def test_waiting_calls_start_lightest_first_then_in_order() -> None:
    threads = RequestThreads(1, reserved=0, heavy_above=4)
    order: list[str] = []

    async def scenario() -> list[str]:
        gate = Gate()
        holding = asyncio.ensure_future(threads.run(1, gate, "holding"))
        await started(gate)
        waiting = [
            asyncio.ensure_future(threads.run(weight, order.append, name))
            for weight, name in [(16, "first job's creates"), (1, "status"), (2, "replacement"), (1, "election")]
        ]
        await asyncio.sleep(0)  # every call is queued before the thread is free
        gate.opened.set()
        await asyncio.gather(holding, *waiting)
        return order

    assert asyncio.run(scenario()) == ["status", "election", "replacement", "first job's creates"]


def test_heavy_batches_leave_the_reserved_threads_to_light_calls() -> None:
    threads = RequestThreads(2, reserved=1, heavy_above=4)

    async def scenario() -> list[str]:
        heavy = Gate()
        first = asyncio.ensure_future(threads.run(16, heavy, "first heavy"))
        await started(heavy)
        done: list[str] = []
        second = asyncio.ensure_future(threads.run(16, done.append, "second heavy"))
        light = await threads.run(1, lambda: done.append("light") or "light")  # on the reserved thread
        assert light == "light"
        assert done == ["light"], "a second heavy batch must not take the reserved thread"
        heavy.opened.set()
        await asyncio.gather(first, second)
        return done

    assert asyncio.run(scenario()) == ["light", "second heavy"]


def test_a_failed_call_raises_in_the_pass() -> None:
    threads = RequestThreads(2, reserved=0, heavy_above=4)

    def refuse() -> None:
        raise RuntimeError("refused")

    async def scenario() -> str:
        with pytest.raises(RuntimeError, match="refused"):
            await threads.run(1, refuse)
        return await threads.run(1, str, 7)  # the thread serves on

    assert asyncio.run(scenario()) == "7"


def test_reserving_every_thread_is_refused() -> None:
    with pytest.raises(ValueError, match="reserved"):
        RequestThreads(2, reserved=2, heavy_above=4)
