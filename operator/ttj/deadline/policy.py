"""The deadline policy: uniform progress ("Can't Be Late", NSDI 2024) for a fleet of workers.

A job with a deadline should have done ``steps_total · (t - start) / (deadline - start)`` steps at time t: the
straight line from start to deadline. The rules, in the order they are tried:

1. **Infeasible, at once**: not even every spot worker the job may have plus every catch-up worker it may hold,
   training without a break from now, finishes by the deadline.
2. **On-demand for the rest** (the paper's safety net), while the catch-up workers alone can still finish: spot
   (or waiting for it) until the slack left after what they need, their join included, is down to
   :data:`COMMIT_GUARD_JOINS` joins; then the fewest that finish alone in time, whatever spot does. Spot
   workers train beside them while there are any, so the end comes closer and fewer are needed: the extra
   ones are released a join late, and all of them once the slack is twice the guard (hysteresis). Spot never
   seen out (``spot_availability`` 1, no outage known) that runs and finishes in time alone is trusted: rule 3.
3. **Uniform progress**, once the catch-up workers alone can no longer finish (spot must carry part of the
   job): behind the line, or the p90 ETA without catch-up workers (spot's outages included) after the deadline,
   the fewest catch-up workers (at least one) that bring the p90 ETA back before it, held until the job is
   ahead of the line by ``release_margin`` of its steps and the p90 ETA without them is in time again.
4. Otherwise spot alone (or waiting for it while it is out): ``OnTrack``.

The paper plans one instance, which must choose between spot and on-demand; here the workers' speeds add up
(through :class:`FleetRate`, which the operator feeds from the live step rates and the simulator from its
fitted throughput), so the policy chooses a count, and spot workers train beside catch-up workers. That is why
the line does not add workers while on-demand alone can still finish: nothing is lost by taking on-demand at
the last safe moment, and taken earlier, on the line, it pays for steps that spot would have made (replayed on
measured traces, docs/simulate.md: the paper's line rule run by a fleet costs more at every slack).

The ETA: the p50 is the mean time to finish with the fleet decided, spot's outages and the workers'
preemptions included (:mod:`ttj.deadline.eta`); the p90 adds :data:`ETA_SPREAD` standard deviations. Rule 2
bounds the job's completion whatever spot does, so the ETA reported in a decision is capped at the latest
completion that rule allows. How ETA_SPREAD was calibrated on measured spot traces: docs/simulate.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Protocol

from ttj.deadline.eta import SpotCapacity, time_to_finish

#: Ahead of the uniform line by this share of the job's steps before catch-up workers are released.
DEFAULT_RELEASE_MARGIN = 0.05

#: The safety net takes on-demand for the rest once the slack left is this many joins: one for the catch-up
#: workers it starts, one for the decision that comes a pass late.
COMMIT_GUARD_JOINS = 2.0

#: The p90 ETA is the mean plus this many standard deviations of the time left: wider than the normal p90
#: (1.28), because measured outages are longer-tailed and less steady than the exponential ones the spread
#: assumes. Calibrated by replaying measured spot traces (bench/deadline_traces.py --calibrate,
#: docs/simulate.md): the smallest of the values tried with at most 10 % of ETAs followed by a later end at
#: every slack on one campaign of traces (7.3 %), and on the other (8.2 %).
ETA_SPREAD = 1.6449


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
    #: spot workers the job has while its spot group has capacity (None: ``spot_workers``, as now)
    spot_workers_wanted: int | None = None
    #: share of time the spot group had capacity, and its mean outage, as observed (1 and 0: never out)
    spot_availability: float = 1.0
    spot_outage_mean_seconds: float = 0.0
    #: standard deviations of the time left between the p50 and the p90 ETA
    eta_spread: float = ETA_SPREAD


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


def _remaining(view: DeadlineView) -> int:
    return max(0, view.steps_total - view.steps_done)


def _spot_when_up(view: DeadlineView, spot: int) -> int:
    return spot if spot > 0 else (view.spot_workers_wanted or 0)


def project(view: DeadlineView, spot: int, catch_up: int) -> Eta | None:
    """Completion of the remaining steps with ``spot`` spot workers (0: out now; they come back, as many as
    ``spot_workers_wanted``, at the observed availability) and ``catch_up`` catch-up workers. The spot
    workers' expected preemptions slow the pace and widen the spread (a Poisson count of them)."""
    remaining = _remaining(view)
    if remaining == 0:
        return Eta(view.now, view.now)
    up = _spot_when_up(view, spot)
    lost_per_second = up * view.spot_hazard_per_hour / 3600.0 * view.steps_lost_per_preemption
    rate_up = view.rate(up, catch_up) - lost_per_second
    rate_down = view.rate(0, catch_up)
    capacity = SpotCapacity(view.spot_availability, view.spot_outage_mean_seconds, out_now=spot == 0 and up > 0)
    duration = time_to_finish(remaining, rate_up, rate_down, capacity, view.join_seconds)
    if duration is None:
        return None
    joining = view.join_seconds if catch_up > view.catch_up_workers else 0.0
    preemptions = up * view.spot_hazard_per_hour / 3600.0 * duration.mean
    spread_of_losses = math.sqrt(preemptions) * view.steps_lost_per_preemption / max(rate_up, 1e-12)
    deviation = math.hypot(duration.deviation, spread_of_losses)
    p50 = view.now + timedelta(seconds=joining + duration.mean)
    return Eta(p50, p50 + timedelta(seconds=view.eta_spread * deviation))


def on_demand_seconds(view: DeadlineView, catch_up: int) -> float:
    """Seconds ``catch_up`` catch-up workers alone need to finish, their join included (inf: never)."""
    rate = view.rate(0, catch_up)
    if rate <= 0:
        return math.inf
    joining = view.join_seconds if catch_up > view.catch_up_workers else 0.0
    return joining + _remaining(view) / rate


def decide(view: DeadlineView) -> DeadlineDecision:
    """How many catch-up workers the job should hold now, and why: the module docstring's rules, in order."""
    where = _Where.of(view)
    return _finished(where) or _past_or_infeasible(where) or _safety_net(where) or _uniform_line(where)


@dataclass(frozen=True)
class _Where:
    """Where the job stands against its deadline, as every rule reads it."""

    view: DeadlineView
    #: steps the uniform line expects by now
    expected: float
    #: the ETA with the catch-up workers held before this decision
    before: Eta | None
    #: seconds to the deadline
    left: float
    #: the catch-up workers the job may hold
    most: int
    #: the catch-up workers held now that the rules keep (none unless escalated)
    held: int

    @classmethod
    def of(cls, view: DeadlineView) -> _Where:
        return cls(
            view=view,
            expected=uniform_steps(view),
            before=project(view, view.spot_workers, view.catch_up_workers),
            left=(view.deadline - view.now).total_seconds(),
            most=view.catch_up_max,
            held=view.catch_up_workers if view.escalated else 0,
        )

    @property
    def line(self) -> str:
        return f"{self.view.steps_done}/{self.view.steps_total} steps, {round(self.expected)} on the uniform line"

    def in_time(self, count: int) -> bool:
        """Whether the p90 ETA with ``count`` catch-up workers is before the deadline."""
        eta = project(self.view, self.view.spot_workers, count)
        return eta is not None and eta.p90 <= self.view.deadline

    def decision(self, count: int, state: DeadlineState, message: str) -> DeadlineDecision:
        return _decision(self.view, count, state, self.before, self.expected, message=message)


def _finished(where: _Where) -> DeadlineDecision | None:
    view = where.view
    if view.steps_done < view.steps_total:
        return None
    state = DeadlineState.MET if view.now <= view.deadline else DeadlineState.MISSED
    return DeadlineDecision(0, state, where.before, where.before, None, round(where.expected), f"finished ({state})")


def _past_or_infeasible(where: _Where) -> DeadlineDecision | None:
    """Rule 1, and a deadline already passed."""
    view, most, left = where.view, where.most, where.left
    done, total = view.steps_done, view.steps_total
    if left <= 0:
        return where.decision(most, DeadlineState.MISSED, f"the deadline passed with {done}/{total} steps done")
    fastest_rate = view.rate(_spot_when_up(view, view.spot_workers), most)
    fastest = math.inf
    if fastest_rate > 0:
        fastest = (view.join_seconds if most > view.catch_up_workers else 0.0) + _remaining(view) / fastest_rate
    if fastest <= left:
        return None
    words = "no progress" if math.isinf(fastest) else f"{fastest / 3600:.2f} h needed, {left / 3600:.2f} h left"
    return where.decision(
        most,
        DeadlineState.INFEASIBLE,
        f"the deadline cannot be met even with every spot worker and {most} catch-up workers: {words}, "
        f"{done}/{total} steps done",
    )


def _safety_net(where: _Where) -> DeadlineDecision | None:
    """Rule 2: while on-demand alone can still finish, spot until the slack left is the guard (kept one guard
    longer once workers are held, so that it does not flap), then the fewest that finish alone in time; as spot
    brings the end closer, fewer are needed, and those held are released one join late."""
    view, most, left, held = where.view, where.most, where.left, where.held
    reserve = left - on_demand_seconds(view, most)
    # Spot that was never seen out is no risk the safety net can weigh: while it runs and finishes in time
    # alone, the line decides.
    never_out = view.spot_availability >= 1.0 or view.spot_outage_mean_seconds <= 0.0
    if reserve < 0 or (never_out and view.spot_workers > 0 and where.in_time(0)):
        return None
    guard = COMMIT_GUARD_JOINS * view.join_seconds
    if reserve > guard + (guard if held else 0):
        when = view.now + timedelta(seconds=reserve - guard)
        return where.decision(
            0,
            DeadlineState.ON_TRACK,
            f"{where.line}: spot suffices; on-demand takes over at {when:%Y-%m-%dT%H:%M:%SZ} unless spot "
            "brings the end closer",
        )
    count = _or(
        _fewest(
            range(most + 1),
            lambda c: on_demand_seconds(view, c) <= left - guard - (view.join_seconds if c < held else 0.0),
        ),
        most,
    )
    return where.decision(
        count,
        DeadlineState.AT_RISK,
        f"{left / 3600:.2f} h left and {count} catch-up workers alone need "
        f"{on_demand_seconds(view, count) / 3600:.2f} h: on-demand for the rest",
    )


def _uniform_line(where: _Where) -> DeadlineDecision:
    """Rules 3 and 4: on-demand alone can no longer finish (spot must carry part of it), or spot never seen out
    finishes alone: the uniform line says when it is not carrying enough."""
    view, most, held = where.view, where.most, where.held
    done, total = view.steps_done, view.steps_total
    # a join's lag is no sign of falling behind: every worker starts that late
    span = (view.deadline - view.started).total_seconds()
    behind = done < where.expected - (total / span * view.join_seconds if span > 0 else 0.0)
    ahead = done >= where.expected + view.release_margin * total
    if held > 0 and not (ahead and where.in_time(0)):
        count = _or(_fewest(range(held, most + 1), where.in_time), most)
        return where.decision(
            count,
            DeadlineState.AT_RISK,
            f"{where.line}: holding {count} catch-up workers until ahead by {view.release_margin:.0%} of the "
            "steps and spot alone makes it",
        )
    if behind or not where.in_time(0):
        count = _or(_fewest(range(1, most + 1), where.in_time), most)
        return where.decision(
            count,
            DeadlineState.AT_RISK,
            f"{where.line}: behind it, or late at p90 without catch-up workers: {count} catch-up workers",
        )
    return where.decision(
        0, DeadlineState.ON_TRACK, f"{where.line}: spot suffices (on-demand alone could no longer finish)"
    )


def _fewest(counts: range, enough: Callable[[int], bool]) -> int | None:
    return next((c for c in counts if enough(c)), None)


def _or(count: int | None, otherwise: int) -> int:
    return otherwise if count is None else count


def eta_under_policy(view: DeadlineView, eta: Eta | None) -> Eta | None:
    """``eta`` capped by the safety net: the job is on on-demand for the rest no later than when the slack left
    is the guard, so it ends by then plus a join (the pass that takes it may come one join late)."""
    latest_seconds = max(
        (view.deadline - view.now).total_seconds() - (COMMIT_GUARD_JOINS - 1.0) * view.join_seconds,
        on_demand_seconds(view, view.catch_up_max),
    )
    if math.isinf(latest_seconds):
        return eta
    latest = view.now + timedelta(seconds=latest_seconds)
    if eta is None:
        return Eta(latest, latest)
    return Eta(min(eta.p50, latest), min(eta.p90, latest))


def _decision(
    view: DeadlineView, count: int, state: DeadlineState, before: Eta | None, expected: float, *, message: str
) -> DeadlineDecision:
    eta = project(view, view.spot_workers, count)
    if state in (DeadlineState.ON_TRACK, DeadlineState.AT_RISK):
        eta = eta_under_policy(view, eta)
    slack = None if eta is None else (view.deadline - eta.p90).total_seconds()
    return DeadlineDecision(count, state, eta, before, slack, round(expected), message)
