"""Each job's timed passes fall in its own slot of the resync period: never more than a period away, a period
apart once nothing else wakes the job, and spread over the period across jobs whatever bunched their passes."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

from tests.unit.planner.builders import T0, job
from ttj.api.models import JobRef
from ttj.planner import plan
from ttj.planner.core import next_resync
from ttj.planner.observed import Observed

PERIOD = 60.0


def test_the_next_timed_pass_is_within_a_period_and_then_a_period_apart() -> None:
    ref = JobRef("mnist", "ns", "2b0f2a36-1b3c-4c5e-9d1a-7f6e5d4c3b2a")
    for seconds in (0.0, 0.4, 17.0, 59.9, 3600.25):
        now = T0 + timedelta(seconds=seconds)
        first = next_resync(now, PERIOD, ref)
        assert timedelta(0) < first - now <= timedelta(seconds=PERIOD)
        assert next_resync(first, PERIOD, ref) - first == timedelta(seconds=PERIOD)
        assert next_resync(now + timedelta(seconds=PERIOD), PERIOD, ref) - first == timedelta(seconds=PERIOD)


def test_jobs_whose_passes_bunched_have_their_timed_passes_spread_over_the_period() -> None:
    """A thousand jobs planned in the same second (a wave of them going Running) get a timed pass in every part of
    the period: no ten-second window holds more than twice its share."""
    slots = Counter(
        int((next_resync(T0, PERIOD, JobRef(f"job-{i}", "bench", f"uid-{i:04d}")) - T0).total_seconds() // 10)
        for i in range(1000)
    )
    assert sorted(slots) == [0, 1, 2, 3, 4, 5]
    assert max(slots.values()) <= 2 * 1000 / 6


def test_a_plan_with_nothing_due_sooner_wakes_at_the_jobs_resync_slot() -> None:
    planned = job("mnist")
    result = plan(planned, Observed(), T0)
    metadata = planned["metadata"]
    due = next_resync(T0, PERIOD, JobRef(metadata["name"], metadata.get("namespace"), metadata.get("uid")))
    assert result.requeue_after is not None
    assert result.requeue_after <= (due - T0).total_seconds()
