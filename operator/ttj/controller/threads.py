"""The threads that carry the passes' blocking requests, the lightest first.

A pass hands over its writes as one batch (they apply in order). At start-up the first pass of each job creates
some sixteen children; on a first-come first-served pool, every later status write and chief election queued
behind all of them, and at 500 jobs a job whose pods were all ready waited tens of seconds to say Running. Here
a batch waits behind lighter ones only (a status write weighs 1, a batch its number of writes), and heavy
batches never hold the last ``reserved`` threads, so a light one finds a thread free within one request.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(order=True)
class _Request:
    weight: int
    order: int
    call: Callable[[], Any] = field(compare=False)
    future: asyncio.Future[Any] = field(compare=False)
    loop: asyncio.AbstractEventLoop = field(compare=False)


class RequestThreads:
    """``threads`` threads running blocking calls lightest first; calls heavier than ``heavy_above`` run on at
    most ``threads - reserved`` of them at once. The threads are daemons: a call still running when the process
    exits is abandoned, as a request cut by the network would be (every write of a pass is idempotent)."""

    def __init__(self, threads: int, *, reserved: int, heavy_above: int, name: str = "ttj-api") -> None:
        if not 0 <= reserved < threads:
            raise ValueError(f"reserved must be in [0, {threads}), not {reserved}")
        self.threads, self.reserved, self.heavy_above, self.name = threads, reserved, heavy_above, name
        self._waiting: list[_Request] = []
        self._order = itertools.count()
        self._heavy_running = 0
        #: threads waiting for a call: a new one starts only when none is
        self._idle = 0
        self._changed = threading.Condition()
        self._started: list[threading.Thread] = []

    async def run(self, weight: int, call: Callable[..., T], *args: Any) -> T:
        """``call(*args)`` on one of the threads, after every lighter call submitted before it has started."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._changed:
            heapq.heappush(self._waiting, _Request(weight, next(self._order), lambda: call(*args), future, loop))
            if self._idle <= len(self._waiting) - 1 and len(self._started) < self.threads:
                self._start_one()
            self._changed.notify()
        return await future

    def _start_one(self) -> None:
        thread = threading.Thread(target=self._serve, name=f"{self.name}_{len(self._started)}", daemon=True)
        self._started.append(thread)
        thread.start()

    def _heavy(self, request: _Request) -> bool:
        return request.weight > self.heavy_above

    def _next(self) -> _Request:
        with self._changed:
            while True:
                if self._waiting and (
                    not self._heavy(self._waiting[0]) or self._heavy_running < self.threads - self.reserved
                ):
                    request = heapq.heappop(self._waiting)
                    if self._heavy(request):
                        self._heavy_running += 1
                    return request
                self._idle += 1
                self._changed.wait()
                self._idle -= 1

    def _serve(self) -> None:
        while True:
            request = self._next()
            try:
                result, error = request.call(), None
            except BaseException as exc:  # handed to the awaiting pass, as an executor would
                result, error = None, exc
            finally:
                if self._heavy(request):
                    with self._changed:
                        self._heavy_running -= 1
                        self._changed.notify_all()
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: the operator is stopping
                request.loop.call_soon_threadsafe(_settle, request.future, result, error)


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():  # the pass was cancelled (its daemon stopped) while its call ran
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
