"""The passes' Events, posted in the background, in order, one at a time.

A pass hands its Events over once its status is written and ends: the next pass of the job (a chief whose
container stopped during the pass) does not wait for them, and Events, which only report, never hold an API
thread that another job's replacement or election is waiting for. Each Event keeps the time its pass planned
it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ttj.planner import EmitEvent

log = logging.getLogger("ttj.controller")

#: Posts one Event about a job (blocking: run in a thread): :meth:`ttj.controller.apply.Applier.post_event`.
PostEvent = Callable[[dict[str, Any], EmitEvent, datetime], None]


@dataclass(frozen=True)
class _Planned:
    job: dict[str, Any]
    event: EmitEvent
    at: datetime


class EventPoster:
    """A queue of Events and the task that posts them, in the loop they were handed over in."""

    def __init__(self, post: PostEvent) -> None:
        self._post = post
        self._queue: asyncio.Queue[_Planned] | None = None
        self._task: asyncio.Task[None] | None = None

    def hand_over(self, job: dict[str, Any], events: Sequence[EmitEvent], at: datetime) -> None:
        """Queue ``events`` about ``job``; from the operator's loop."""
        if not events:
            return
        queue = self._running_queue()
        for event in events:
            queue.put_nowait(_Planned(job, event, at))

    async def drain(self, timeout: float | None = None) -> None:
        """Until every Event handed over is posted (or ``timeout`` seconds have passed)."""
        if self._queue is None or self._task is None or self._task.get_loop() is not asyncio.get_running_loop():
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._queue.join(), timeout)

    def _running_queue(self) -> asyncio.Queue[_Planned]:
        loop = asyncio.get_running_loop()
        if self._queue is None or self._task is None or self._task.get_loop() is not loop or self._task.done():
            self._queue = asyncio.Queue()
            self._task = loop.create_task(self._post_forever(self._queue), name="ttj events")
        return self._queue

    async def _post_forever(self, queue: asyncio.Queue[_Planned]) -> None:
        while True:
            planned = await queue.get()
            try:
                await asyncio.to_thread(self._post, planned.job, planned.event, planned.at)
            except Exception as exc:  # an Event is best effort: the status says the same
                log.warning("could not post event %s: %s", planned.event.reason, exc)
            finally:
                queue.task_done()
