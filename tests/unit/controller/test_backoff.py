"""A job's daemon after a failed pass: waits that grow, are jittered and capped, ignore wake-ups, and reset
after a success (kopf alone restarts a failed daemon after a fixed second, every job in lockstep)."""

from __future__ import annotations

import asyncio
import random

from ttj.controller.backoff import REFUSED_WRITES_BACKOFF, Backoff
from ttj.controller.loop import reconcile_loop


def test_the_wait_doubles_up_to_the_cap_and_is_jittered_within_its_upper_half() -> None:
    backoff = Backoff(base=0.5, cap=8.0, rng=random.Random(7))
    for failures, ceiling in [(1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (5, 8.0), (6, 8.0), (40, 8.0)]:
        waits = [backoff.delay(failures) for _ in range(200)]
        assert all(ceiling / 2 <= w <= ceiling for w in waits), failures
        assert len({round(w, 6) for w in waits}) > 100, "jittered, not one fixed value"


def test_two_operators_failing_together_do_not_retry_in_lockstep() -> None:
    first, second = Backoff(rng=random.Random(1)), Backoff(rng=random.Random(2))
    assert [first.delay(n) for n in range(1, 6)] != [second.delay(n) for n in range(1, 6)]


class Running:
    """A daemon never asked to stop."""

    def __bool__(self) -> bool:
        return False

    async def wait(self) -> None:
        await asyncio.Event().wait()


class Script:
    """Passes that fail ``failures`` times, succeed once (asking for a pass soon), then end the job."""

    def __init__(self, failures: int, wakeup: asyncio.Event) -> None:
        self.failures, self.wakeup, self.calls = failures, wakeup, 0

    async def __call__(self) -> float | None:
        self.calls += 1
        self.wakeup.set()  # a watch event during the pass: must not cut a backoff short
        if self.calls <= self.failures:
            raise RuntimeError(f"injected failure {self.calls}")
        if self.calls == self.failures + 1:
            return 0.0
        return None


class Recording(Backoff):
    def __init__(self) -> None:
        super().__init__(base=0.001, cap=0.004, rng=random.Random(3))
        self.asked: list[int] = []

    def delay(self, attempt: int, retry_after_seconds: float | None = None) -> float:
        self.asked.append(attempt)
        return super().delay(attempt, retry_after_seconds)


def test_failed_passes_are_retried_with_growing_waits_until_one_succeeds() -> None:
    async def scenario() -> tuple[int, list[int]]:
        wakeup = asyncio.Event()
        script = Script(failures=4, wakeup=wakeup)
        backoff = Recording()
        await asyncio.wait_for(reconcile_loop(script, wakeup, Running(), backoff), timeout=30)
        return script.calls, backoff.asked

    calls, asked = asyncio.run(scenario())
    assert calls == 6  # four failures, the success, the pass that finds the job gone
    assert asked == [1, 2, 3, 4]


def test_a_success_resets_the_count() -> None:
    class Flaky:
        def __init__(self) -> None:
            self.calls = 0

        async def __call__(self) -> float | None:
            self.calls += 1
            if self.calls in (1, 2, 4):
                raise RuntimeError("injected")
            return 0.0 if self.calls < 6 else None

    async def scenario() -> list[int]:
        backoff = Recording()
        await asyncio.wait_for(reconcile_loop(Flaky(), asyncio.Event(), Running(), backoff), timeout=30)
        return backoff.asked

    assert asyncio.run(scenario()) == [1, 2, 1]


def test_refused_writes_back_off_longer_and_never_sooner_than_the_servers_retry_after() -> None:
    delays = [REFUSED_WRITES_BACKOFF.delay(attempt) for attempt in range(1, 12)]
    assert all(0 < d <= REFUSED_WRITES_BACKOFF.cap for d in delays)
    assert max(delays[-3:]) > max(delays[:2])  # it grows
    assert len({REFUSED_WRITES_BACKOFF.delay(3) for _ in range(20)}) > 1  # jitter
    assert REFUSED_WRITES_BACKOFF.delay(1, retry_after_seconds=40) >= 40
