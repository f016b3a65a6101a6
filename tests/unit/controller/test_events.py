"""The passes' Events are posted in the background: in the order handed over, stamped when planned, one failure
not stopping the rest, and a pass never waiting for them."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

from ttj.controller.events import EventPoster
from ttj.planner import EmitEvent

T0 = datetime(2026, 11, 26, 9, 0, tzinfo=UTC)


def job(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns"}}


def test_events_are_posted_in_order_with_their_planned_time_past_a_failure() -> None:
    posted: list[tuple[str, str, datetime]] = []

    def post(job: dict[str, Any], event: EmitEvent, at: datetime) -> None:
        if event.reason == "Refused":
            raise RuntimeError("the API said no")
        posted.append((job["metadata"]["name"], event.reason, at))

    async def scenario() -> None:
        poster = EventPoster(post)
        poster.hand_over(
            job("a"), [EmitEvent("Warning", "WorkerPreempted", ""), EmitEvent("Normal", "Refused", "")], T0
        )
        poster.hand_over(job("b"), [], T0)
        poster.hand_over(job("b"), [EmitEvent("Normal", "ChiefElected", "")], T0 + timedelta(seconds=1))
        await poster.drain()

    asyncio.run(scenario())
    assert posted == [("a", "WorkerPreempted", T0), ("b", "ChiefElected", T0 + timedelta(seconds=1))]


def test_handing_over_does_not_wait_for_the_post() -> None:
    release = threading.Event()
    posted: list[str] = []

    def post(job: dict[str, Any], event: EmitEvent, at: datetime) -> None:
        release.wait(timeout=60)
        posted.append(event.reason)

    async def scenario() -> tuple[list[str], list[str]]:
        poster = EventPoster(post)
        poster.hand_over(job("a"), [EmitEvent("Normal", "ChiefElected", "")], T0)
        await asyncio.sleep(0)  # the poster's task starts, and blocks in its thread
        before = list(posted)
        release.set()
        await poster.drain()
        return before, list(posted)

    assert asyncio.run(scenario()) == ([], ["ChiefElected"])


def test_a_poster_serves_each_event_loop_it_is_used_in() -> None:
    posted: list[str] = []
    poster = EventPoster(lambda job, event, at: posted.append(event.reason))

    async def one(reason: str) -> None:
        poster.hand_over(job("a"), [EmitEvent("Normal", reason, "")], T0)
        await poster.drain()

    asyncio.run(one("first"))
    asyncio.run(one("second"))
    assert posted == ["first", "second"]
