"""The deadline policy's rules, one table row per situation, and the ETA's arithmetic."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from ttj.deadline.eta import Duration, SpotCapacity, time_to_finish
from ttj.deadline.policy import DeadlineState, DeadlineView, Eta, decide, project, uniform_steps

START = datetime(2026, 11, 27, 9, 0, tzinfo=UTC)
DEADLINE = START + timedelta(seconds=10_000)
JOIN = 60.0


def linear(spot: int, catch_up: int) -> float:
    """Ten steps/s a worker, whichever kind: speeds add."""
    return 10.0 * (spot + catch_up)


def view(at: float, done: int, **changes: object) -> DeadlineView:
    base = DeadlineView(
        now=START + timedelta(seconds=at),
        started=START,
        deadline=DEADLINE,
        steps_done=done,
        steps_total=100_000,
        spot_workers=4,
        catch_up_workers=0,
        catch_up_max=4,
        rate=linear,
        join_seconds=JOIN,
        spot_workers_wanted=4,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


#: spot seen out before: the safety net weighs the risk of losing it
OUTAGES = {"spot_availability": 0.9, "spot_outage_mean_seconds": 600.0}

# the uniform line at 5,000 s is 50,000 steps; 4 catch-up workers alone make 40 steps/s
DECISIONS = [
    ("finished in time", view(9_000, 100_000), 0, DeadlineState.MET),
    ("past the deadline", view(10_000, 90_000), 4, DeadlineState.MISSED),
    # 90,000 steps at 80 steps/s (every spot and catch-up worker) need 1,185 s with the join; 1,000 s left
    ("infeasible at once", view(9_000, 10_000), 4, DeadlineState.INFEASIBLE),
    ("early, on spot", view(1_000, 10_000), 0, DeadlineState.ON_TRACK),
    ("spot out, slack left: wait for it", view(5_000, 50_000, spot_workers=0), 0, DeadlineState.ON_TRACK),
    # 50,000 steps: 4 catch-up workers alone need 60 + 1,250 s; 1,400 s left is within two joins of it
    ("the safety net takes on-demand", view(8_600, 50_000, spot_workers=0), 4, DeadlineState.AT_RISK),
    # held, spot trains beside them: 20,000 steps left, the 4 alone need 500 s of the 1,000 left (> 2 guards)
    (
        "released once the slack is twice the guard",
        view(9_000, 80_000, catch_up_workers=4, escalated=True, **OUTAGES),
        0,
        DeadlineState.ON_TRACK,
    ),
    # spot never seen out runs and finishes alone (500 s of 1,000): trusted, the line decides (behind it: held)
    (
        "spot never seen out: the line, not the safety net",
        view(9_000, 80_000, catch_up_workers=4, escalated=True),
        4,
        DeadlineState.AT_RISK,
    ),
    # held: 30,000 steps, the 4 alone need 750 s, 950 s left: inside the hysteresis band, kept
    (
        "kept inside the hysteresis band",
        view(9_050, 70_000, catch_up_workers=4, escalated=True, **OUTAGES),
        4,
        DeadlineState.AT_RISK,
    ),
]

# one catch-up worker alone (10 steps/s) can no longer finish: the uniform line decides
SPOT_NEEDED = {"catch_up_max": 1, "spot_availability": 0.5, "spot_outage_mean_seconds": 3_600.0}
LINE_DECISIONS = [
    (
        "behind the line, spot out, p90 late",
        view(5_000, 40_000, spot_workers=0, **SPOT_NEEDED),
        1,
        DeadlineState.AT_RISK,
    ),
    ("behind the line, spot up: catch up", view(5_000, 45_000, catch_up_max=1), 1, DeadlineState.AT_RISK),
    # 49,500 steps left: one catch-up worker alone needs 5,010 s of the 5,000 left
    (
        "ahead of the line, spot out, late at p90",
        view(5_000, 50_500, spot_workers=0, **SPOT_NEEDED),
        1,
        DeadlineState.AT_RISK,
    ),
    ("ahead of the line and in time at p90", view(5_000, 50_500, catch_up_max=1), 0, DeadlineState.ON_TRACK),
    (
        "held until ahead by the margin",
        view(5_000, 52_000, catch_up_workers=1, escalated=True, **SPOT_NEEDED),
        1,
        DeadlineState.AT_RISK,
    ),
    (
        "released when ahead by the margin and spot alone makes it",
        view(5_000, 60_000, catch_up_workers=1, escalated=True, catch_up_max=1),
        0,
        DeadlineState.ON_TRACK,
    ),
]


@pytest.mark.parametrize(("situation", "seen", "workers", "state"), DECISIONS + LINE_DECISIONS)
def test_decide(situation: str, seen: DeadlineView, workers: int, state: DeadlineState) -> None:
    decision = decide(seen)
    assert (decision.catch_up_workers, decision.state) == (workers, state), (situation, decision.message)


def test_the_decision_reports_the_line_and_the_eta_with_the_decided_fleet() -> None:
    decision = decide(view(8_600, 50_000, spot_workers=0))
    # 4 catch-up workers joining (60 s), then 50,000 steps at 40 steps/s; no spot: no spread
    finish = START + timedelta(seconds=8_600 + 60 + 1_250)
    assert (decision.expected_steps, decision.eta, decision.slack_seconds) == (86_000, Eta(finish, finish), 90.0)
    assert decision.eta_before is None  # nothing trains while spot is out and nothing is held, and nothing is known
    assert "on-demand for the rest" in decision.message


def test_the_eta_of_a_job_that_waits_for_spot_is_capped_by_the_safety_net() -> None:
    # spot out for hours on average: waiting for it is slower than the safety net, which bounds the ETA
    waiting = view(5_000, 50_000, spot_workers=0, spot_availability=0.2, spot_outage_mean_seconds=20_000.0)
    decision = decide(waiting)
    latest = DEADLINE - timedelta(seconds=JOIN)  # taken at the guard (two joins), ended a join after
    assert (decision.catch_up_workers, decision.eta) == (0, Eta(latest, latest))


@pytest.mark.parametrize(
    ("seen", "spot", "catch_up", "seconds"),
    [
        (view(0, 0), 4, 0, 2_500.0),  # 100,000 steps at 40 steps/s
        (view(0, 0), 4, 2, 60 + 100_000 / 60),  # two workers more, after their join
        (view(0, 0, catch_up_workers=2), 4, 2, 100_000 / 60),  # already there: no join
        (view(0, 60_000), 0, 4, 60 + 1_000.0),  # spot out, nothing known of outages: the fleet of now
    ],
)
def test_project_without_outages_is_the_rate(seen: DeadlineView, spot: int, catch_up: int, seconds: float) -> None:
    finish = START + timedelta(seconds=seconds)
    assert project(seen, spot, catch_up) == Eta(finish, finish)


def test_project_spreads_with_outages_and_waits_for_spot_when_it_is_out() -> None:
    outages = {"spot_availability": 0.5, "spot_outage_mean_seconds": 600.0, "join_seconds": 0.0}
    up = project(view(0, 0, **outages), 4, 0)
    out = project(view(0, 0, spot_workers=0, **outages), 0, 0)
    assert up is not None
    assert out is not None
    # half the time at 40 steps/s: 5,000 s on average; out now, a mean outage first
    assert (up.p50, out.p50) == (START + timedelta(seconds=5_000), START + timedelta(seconds=5_600))
    assert up.p90 > up.p50
    assert out.p90 > out.p50


def test_uniform_steps_is_the_straight_line() -> None:
    assert [uniform_steps(view(at, 0)) for at in (-5, 0, 2_500, 10_000, 12_000)] == [0, 0, 25_000, 100_000, 100_000]


TIMES = [
    # steps, up rate, down rate, capacity, join -> mean, deviation
    (3_600, 2.0, 0.0, SpotCapacity(), 0.0, Duration(1_800.0, 0.0)),
    (3_600, 2.0, 0.0, SpotCapacity(out_now=True), 0.0, None),  # out, and nothing known: no progress
    (3_600, 2.0, 1.0, SpotCapacity(out_now=True), 0.0, Duration(3_600.0, 0.0)),
    # half the time up, 600 s outages: 1 step/s on average; variance rate 4·(0.25·600² + 0.25·600²)/1200 = 600
    (3_600, 2.0, 0.0, SpotCapacity(0.5, 600.0), 0.0, Duration(3_600.0, math.sqrt(600 * 3_600))),
    # out now: the rest of the outage (600 s) first, with an outage's variance
    (3_600, 2.0, 0.0, SpotCapacity(0.5, 600.0, out_now=True), 0.0, Duration(4_200.0, math.sqrt(600**2 + 600 * 3_600))),
    # a 200 s join ends every outage: 800 s out, 400 s up in a 1,200 s cycle
    (
        1_200,
        3.0,
        0.0,
        SpotCapacity(0.5, 600.0),
        200.0,
        Duration(1_200.0, math.sqrt(9 * ((2 / 3) ** 2 * 400**2 + (1 / 3) ** 2 * 800**2) / 1_200 * 1_200)),
    ),
]


@pytest.mark.parametrize(("steps", "up", "down", "capacity", "join", "expected"), TIMES)
def test_time_to_finish(  # noqa: PLR0917 (a table's columns)
    steps: float, up: float, down: float, capacity: SpotCapacity, join: float, expected: Duration | None
) -> None:
    got = time_to_finish(steps, up, down, capacity, join)
    if expected is None:
        assert got is None
    else:
        assert got is not None
        assert (got.mean, got.deviation) == pytest.approx((expected.mean, expected.deviation))
