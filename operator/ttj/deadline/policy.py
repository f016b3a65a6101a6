"""The deadline policy: uniform progress ("Can't Be Late", NSDI 2024) for a fleet of workers.

A job with a deadline should have done ``steps_total · (t - start) / (deadline - start)`` steps at time t: the
straight line from start to deadline. The policy keeps its progress on or above that line:

- on spot alone while it is there (spot workers cost a fraction of on-demand ones);
- when it falls behind the line, or when the time left is only what it needs to finish at the pace it can
  reach with every catch-up worker it may hold (plus a restart's overhead), it adds the fewest catch-up
  workers that bring its projected completion, at the chosen confidence, back before the deadline;
- it releases them only once it is ahead of the line by the hysteresis margin *and* the spot workers alone
  project to finish in time, so it does not flap;
- a deadline that the most allowed fleet cannot meet is said at once (``Infeasible``), with the numbers.

The paper plans one instance; here the workers' speeds add up (through :class:`FleetRate`, which the operator
feeds from the live step rates and the simulator from its fitted throughput), so the policy chooses a count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Protocol

#: Ahead of the uniform line by this share of the job's steps before catch-up workers are released.
DEFAULT_RELEASE_MARGIN = 0.05

#: The z-score of the p90 completion time in a normal approximation of the time left.
_Z90 = 1.2816


class FleetRate(Protocol):
    """Global steps per second of ``spot`` spot workers and ``catch_up`` catch-up workers training together."""

    def __call__(self, spot: int, catch_up: int) -> float: ...


class DeadlineState(StrEnum):
    ON_TRACK = "OnTrack"
    AT_RISK = "AtRisk"  # behind: catch-up workers are (to be) added
    INFEASIBLE = "Infeasible"  # not even the most allowed fleet finishes in time
    MET = "Met"
    MISSED = "Missed"


@dataclass(frozen=True)
class DeadlineView:
    """What the policy sees of a job at ``now``."""

    now: datetime
    started: datetime
    deadline: datetime
    steps_done: int
    steps_total: int
    #: spot workers the job can have now (running, or schedulable: 0 while the spot pool is out)
    spot_workers: int
    #: catch-up workers held now, and the most it may hold (its group's room, the job's slots, the budget)
    catch_up_workers: int
    catch_up_max: int
    rate: FleetRate
    #: preemptions per spot worker-hour, and the steps a preemption costs (replacement join + lost work)
    spot_hazard_per_hour: float = 0.0
    steps_lost_per_preemption: float = 0.0
    #: seconds a new worker takes to join (image pull, start, restore)
    join_seconds: float = 60.0
    #: the policy's memory: whether catch-up workers were held for the deadline at the last decision
    escalated: bool = False
    release_margin: float = DEFAULT_RELEASE_MARGIN


@dataclass(frozen=True)
class Eta:
    """Projected completion: median and 90th percentile."""

    p50: datetime
    p90: datetime


@dataclass(frozen=True)
class DeadlineDecision:
    catch_up_workers: int
    state: DeadlineState
    #: the completion projected with the decided fleet (None when it makes no progress)
    eta: Eta | None
    #: the completion projected with the fleet before the decision, for the Event's words
    eta_before: Eta | None
    #: deadline minus the p90 ETA of the decided fleet, in seconds (negative: late)
    slack_seconds: float | None
    #: the steps the uniform line asks for by now
    expected_steps: int
    message: str


def uniform_steps(view: DeadlineView) -> float:
    """Steps the straight line from start to deadline asks for at ``view.now``."""
    span = (view.deadline - view.started).total_seconds()
    if span <= 0:
        return float(view.steps_total)
    share = min(1.0, max(0.0, (view.now - view.started).total_seconds() / span))
    return view.steps_total * share


def project(view: DeadlineView, spot: int, catch_up: int) -> Eta | None:
    """Completion of the remaining steps with ``spot`` and ``catch_up`` workers: the spot workers' expected
    preemptions slow the mean pace; the p90 adds one standard deviation's worth of their Poisson count."""
    remaining = max(0, view.steps_total - view.steps_done)
    if remaining == 0:
        return Eta(view.now, view.now)
    rate = view.rate(spot, catch_up)
    if rate <= 0:
        return None
    joining = view.join_seconds if catch_up > view.catch_up_workers else 0.0
    seconds = joining + remaining / rate
    lambda_per_second = spot * view.spot_hazard_per_hour / 3600.0
    lost_per_second = lambda_per_second * view.steps_lost_per_preemption
    effective = rate - lost_per_second
    if effective <= 0:
        return None
    mean = joining + remaining / effective
    expected_losses = lambda_per_second * mean
    spread = math.sqrt(expected_losses) * view.steps_lost_per_preemption / effective
    p50 = view.now + timedelta(seconds=max(seconds, mean))
    return Eta(p50, p50 + timedelta(seconds=_Z90 * spread))


def decide(view: DeadlineView) -> DeadlineDecision:
    """How many catch-up workers the job should hold now, and why."""
    expected = uniform_steps(view)
    before = project(view, view.spot_workers, view.catch_up_workers)
    if view.steps_done >= view.steps_total:
        state = DeadlineState.MET if view.now <= view.deadline else DeadlineState.MISSED
        return DeadlineDecision(0, state, before, before, None, round(expected), f"finished ({state})")
    if view.now >= view.deadline:
        return DeadlineDecision(
            view.catch_up_max,
            DeadlineState.MISSED,
            *_with(view, view.catch_up_max, before, expected),
            f"the deadline passed with {view.steps_done}/{view.steps_total} steps done",
        )

    def in_time(count: int, spot: int = view.spot_workers) -> bool:
        eta = project(view, spot, count)
        return eta is not None and eta.p90 <= view.deadline

    best = project(view, view.spot_workers, view.catch_up_max)
    if best is None or best.p90 > view.deadline:
        words = "no progress" if best is None else f"p90 ETA {best.p90:%Y-%m-%dT%H:%M:%SZ}"
        return DeadlineDecision(
            view.catch_up_max,
            DeadlineState.INFEASIBLE,
            *_with(view, view.catch_up_max, before, expected),
            f"the deadline cannot be met even with {view.catch_up_max} catch-up workers: {words}, "
            f"{view.steps_done}/{view.steps_total} steps done",
        )
    behind = view.steps_done < expected
    ahead = view.steps_done >= expected + view.release_margin * view.steps_total
    if view.escalated and not (ahead and in_time(0)):
        # Hold at least what is held; add if the held fleet no longer makes it.
        count = next(
            c for c in range(view.catch_up_workers, view.catch_up_max + 1) if in_time(c) or c == view.catch_up_max
        )
        return DeadlineDecision(
            count,
            DeadlineState.AT_RISK,
            *_with(view, count, before, expected),
            f"{view.steps_done}/{view.steps_total} steps, {round(expected)} on the uniform line: holding {count} "
            "catch-up workers until ahead by the margin and spot alone makes it",
        )
    if behind or not in_time(0):
        count = next(c for c in range(0, view.catch_up_max + 1) if in_time(c))
        if count == 0 and not behind:
            count = 0
        elif count == 0:
            count = min(1, view.catch_up_max)
        return DeadlineDecision(
            count,
            DeadlineState.AT_RISK,
            *_with(view, count, before, expected),
            f"{view.steps_done}/{view.steps_total} steps, {round(expected)} on the uniform line: "
            f"{count} catch-up workers",
        )
    return DeadlineDecision(
        0,
        DeadlineState.ON_TRACK,
        *_with(view, 0, before, expected),
        f"{view.steps_done}/{view.steps_total} steps, {round(expected)} on the uniform line: spot suffices",
    )


def _with(
    view: DeadlineView, count: int, before: Eta | None, expected: float
) -> tuple[Eta | None, Eta | None, float | None, int]:
    eta = project(view, view.spot_workers, count)
    slack = None if eta is None else (view.deadline - eta.p90).total_seconds()
    return eta, before, slack, round(expected)
