"""A job's reconcile loop: pass after pass, each woken by a change, the planner's timer or the retry of a failed
one, until the job is gone or its daemon stops."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from ttj.controller.backoff import Backoff

log = logging.getLogger("ttj.controller")


class Stopped(Protocol):
    """What the loop needs of :class:`kopf.DaemonStopped`: truthy once the daemon must stop, and a wait."""

    def __bool__(self) -> bool: ...

    def wait(self) -> Awaitable[Any]: ...


async def reconcile_loop(
    one_pass: Callable[[], Awaitable[float | None]],
    wakeup: asyncio.Event,
    stopped: Stopped,
    backoff: Backoff,
    *,
    debounce: Callable[[], float] = lambda: 0.0,
    what: str = "",
) -> None:
    """Pass after pass until the job is gone or the daemon stops. A failed pass (an API error, a bug) is
    retried here after ``backoff``, during which wake-ups are ignored: kopf would restart the
    daemon after a fixed second, and every watch event would retry at once, all jobs in lockstep. After each
    wake-up the loop waits ``debounce()`` seconds more, for the changes that come in a burst."""
    failures = 0
    while not stopped:
        wakeup.clear()
        try:
            delay = await one_pass()
        except Exception as exc:  # any failure of a pass is retried, not fatal
            failures += 1
            pause = backoff.delay(failures)
            log.warning("%s: pass failed (%d in a row), again in %.1f s: %s", what, failures, pause, exc)
            await _sleep(asyncio.Event(), stopped, pause)
            continue
        failures = 0
        if delay is None:
            return
        await _sleep(wakeup, stopped, delay)
        pause = debounce()
        if pause:
            await asyncio.sleep(pause)


async def _sleep(wakeup: asyncio.Event, stopped: Stopped, seconds: float) -> None:
    """Until the job's wake-up, the daemon's stop (so cleanup runs before kopf cancels), or ``seconds``."""

    async def until_stopped() -> None:
        await stopped.wait()

    waiters = [asyncio.ensure_future(wakeup.wait()), asyncio.ensure_future(until_stopped())]
    try:
        await asyncio.wait(waiters, timeout=max(0.01, seconds), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
