"""Replaying measured spot availability against a deadline: ttj's policy, always-on-demand, greedy and the
hindsight optimum, on the very same traces.

The job: ``spot`` workers in a spot group whose capacity follows the trace, up to ``catch_up_max`` catch-up
(on-demand) workers, one parameter-server set that runs from start to end. Speeds add through the fitted
throughput (``ThroughputModel.predict_mix`` of the same GPU type: the rate of n workers), prices are the
simulator's (``ttj.simulate.prices``), and a worker's join is the fitted start-up delay: the very model of
``ttj simulate`` and ``--plan``.

Time moves in ticks of one join. In each tick the job runs ``s`` spot workers (only while the trace has capacity
for the whole tick) and ``c`` catch-up workers; only the workers that already ran the tick before train in it
(a new worker spends its first tick joining, billed), so every change of instances costs a join. The job's
always-on-demand time is one join plus its steps at the rate of ``on_demand_workers`` on-demand workers; a
deadline is that time times the slack. Every policy keeps its spot workers whenever the trace has capacity:
spot steps are the cheap ones; what the policies choose is the catch-up workers.

- **ttj**: :func:`ttj.deadline.policy.decide` at every tick, with the availability and mean outage observed in
  the trace up to that moment (nothing later): the lower availability and the longer outage of the whole trace
  so far and of its last day.
- **on-demand**: ``on_demand_workers`` on-demand workers from the start, no spot.
- **greedy**: no catch-up worker until the slack left is what ``catch_up_max`` of them need (the policy's own
  safety net, :data:`ttj.deadline.policy.COMMIT_GUARD_JOINS`), then all of them to the end.
- **uniform**: the paper's uniform progress as a fleet would run it: catch-up workers (all of them) while spot
  is out and the job is behind the line, held until it is ahead by the release margin; greedy's safety net.
- **optimum**: the cheapest schedule knowing the whole trace: dynamic programming over ticks × progress (a
  grid of :data:`PROGRESS_POINTS`, linearly interpolated) × the workers running the tick before, choosing spot
  on or off and the catch-up count in every tick.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

import numpy as np

from ttj.deadline.policy import (
    COMMIT_GUARD_JOINS,
    ETA_SPREAD,
    DeadlineView,
    decide,
    on_demand_seconds,
    uniform_steps,
)
from ttj.simulate.engine import SimJob
from ttj.simulate.fit import FittedModel
from ttj.simulate.prices import price_per_hour, ps_price_per_hour
from ttj.simulate.traces import CapacityTrace

POLICIES = ("ttj", "on-demand", "greedy", "uniform", "optimum")
#: Points of the optimum's progress grid: its interpolation error is a small share of a tick's progress.
PROGRESS_POINTS = 801
#: ttj is told the lower availability (and the longer mean outage) of the whole trace so far and of this last span.
RECENT_SECONDS = 86400.0
#: The ETA is sampled for the calibration about once an hour of a run.
ETA_SAMPLE_SECONDS = 3600.0
_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
_INFEASIBLE = 1e18


@dataclass(frozen=True)
class ReplayJob:
    """A job as the replay sees it: its steps, its fleet, the rate of n workers, prices and the join."""

    steps: float
    spot_workers: int
    catch_up_max: int
    on_demand_workers: int
    #: global steps/s of n workers training together, n = 0 .. spot_workers + max(catch_up_max, on_demand)
    rates: tuple[float, ...]
    spot_usd_per_hour: float  # one worker
    on_demand_usd_per_hour: float  # one worker
    ps_usd_per_hour: float  # all parameter servers
    join_seconds: float

    def rate(self, spot: int, catch_up: int) -> float:
        return self.rates[spot + catch_up]

    @property
    def on_demand_seconds(self) -> float:
        return self.join_seconds + self.steps / self.rate(0, self.on_demand_workers)

    @property
    def on_demand_usd(self) -> float:
        hourly = self.on_demand_workers * self.on_demand_usd_per_hour + self.ps_usd_per_hour
        return hourly * self.on_demand_seconds / 3600.0

    def usd_per_tick(self, spot: int, catch_up: int) -> float:
        hourly = spot * self.spot_usd_per_hour + catch_up * self.on_demand_usd_per_hour + self.ps_usd_per_hour
        return hourly * self.join_seconds / 3600.0


def replay_job(
    template: SimJob, fitted: FittedModel, price_table: str, *, catch_up_max: int | None = None, hours: float | None
) -> ReplayJob:
    """The manifest's job: its workers are the spot group (at its provisioning's price, spot unless it is
    on-demand) and the always-on-demand fleet; ``hours`` (when given) sets its steps so that fleet takes that
    long."""
    workers = template.workers
    most = workers if catch_up_max is None else catch_up_max
    accelerator, ps = template.accelerator, template.ps_replicas
    rates = tuple(
        fitted.throughput.predict(n, accelerator, ps).central for n in range(workers + max(most, workers) + 1)
    )
    steps = float(template.train_steps) if hours is None else hours * 3600.0 * rates[workers]
    provisioning = template.provisioning if template.provisioning != "on-demand" else "spot"
    return ReplayJob(
        steps=steps,
        spot_workers=workers,
        catch_up_max=most,
        on_demand_workers=workers,
        rates=rates,
        spot_usd_per_hour=price_per_hour(accelerator, provisioning, price_table),
        on_demand_usd_per_hour=price_per_hour(accelerator, "on-demand", price_table),
        ps_usd_per_hour=ps * ps_price_per_hour(price_table),
        join_seconds=fitted.startup_s,
    )


@dataclass(frozen=True)
class Case:
    """One deadline on one stretch of one trace."""

    trace: CapacityTrace
    start_seconds: float  # into the trace
    slack: float  # the deadline, in always-on-demand times

    def up(self, job: ReplayJob) -> list[bool]:
        """Whether the spot group has capacity for the whole of each tick from the start to the deadline."""
        tick = job.join_seconds
        count = math.ceil(self.slack * job.on_demand_seconds / tick)
        return [
            self.trace.up_throughout(self.start_seconds + k * tick, self.start_seconds + (k + 1) * tick)
            for k in range(count)
        ]

    def share_up(self, job: ReplayJob) -> float:
        return self.trace.share_up(self.start_seconds, self.start_seconds + self.slack * job.on_demand_seconds)


@dataclass(frozen=True)
class EtaSample:
    """An ETA given during a run, in seconds from its start, and when the run ended."""

    at: float
    p50: float
    p90: float
    finished: float


@dataclass(frozen=True)
class Outcome:
    policy: str
    cost_usd: float
    #: seconds from the start to completion (inf: not finished by the deadline)
    finished_seconds: float
    met: bool
    catch_up_changes: int = 0
    eta_samples: tuple[EtaSample, ...] = field(default=(), repr=False)


@dataclass
class _Run:
    """The tick model's bookkeeping, the same for every policy."""

    job: ReplayJob
    deadline: float
    done: float = 0.0
    cost: float = 0.0
    spot: int = 0
    catch_up: int = 0
    changes: int = 0
    finished: float = math.inf

    def tick(self, index: int, spot: int, catch_up: int) -> None:
        job = self.job
        if catch_up != self.catch_up:
            self.changes += 1
        gain = job.rate(min(spot, self.spot), min(catch_up, self.catch_up)) * job.join_seconds
        bill = job.usd_per_tick(spot, catch_up)
        self.spot, self.catch_up = spot, catch_up
        if gain > 0 and self.done + gain >= job.steps:
            share = (job.steps - self.done) / gain
            self.finished = (index + share) * job.join_seconds
            self.cost += bill * share
            self.done = job.steps
        else:
            self.done += gain
            self.cost += bill

    def outcome(self, policy: str, samples: Sequence[EtaSample] = ()) -> Outcome:
        met = self.finished <= self.deadline + 1e-6
        return Outcome(policy, self.cost, self.finished, met, self.changes, tuple(samples))


def replay(job: ReplayJob, case: Case, policy: str, *, eta_spread: float = ETA_SPREAD) -> Outcome:
    """One policy on one case (``eta_spread``: ttj's p90, :attr:`DeadlineView.eta_spread`)."""
    if policy == "optimum":
        return optimum(job, case)
    up = case.up(job)
    run = _Run(job, case.slack * job.on_demand_seconds)
    samples: list[tuple[float, float, float]] = []
    every = max(1, round(ETA_SAMPLE_SECONDS / job.join_seconds))
    escalated = committed = False
    for index, has_capacity in enumerate(up):
        if run.done >= job.steps:
            break
        spot = job.spot_workers if has_capacity else 0
        if policy == "on-demand":
            run.tick(index, 0, job.on_demand_workers)
            continue
        view = replace(_view(job, case, run, index, spot, escalated=escalated), eta_spread=eta_spread)
        if policy in ("greedy", "uniform"):
            committed = committed or _safety_net(view)
            escalated = committed or (policy == "uniform" and _behind_the_line(view, escalated=escalated))
            run.tick(index, spot, job.catch_up_max if escalated else 0)
            continue
        decision = decide(view)
        escalated = decision.catch_up_workers > 0
        if index % every == 0 and decision.eta is not None:
            at = index * job.join_seconds
            samples.append((at, _seconds(decision.eta.p50), _seconds(decision.eta.p90)))
        run.tick(index, spot, decision.catch_up_workers)
    etas = [EtaSample(at, p50, p90, run.finished) for at, p50, p90 in samples]
    return run.outcome(policy, etas)


def _safety_net(view: DeadlineView) -> bool:
    """Greedy's (and the paper's) safety net: all the catch-up workers, to the end, once the slack left is only
    what they need."""
    left = (view.deadline - view.now).total_seconds()
    return left - on_demand_seconds(view, view.catch_up_max) <= COMMIT_GUARD_JOINS * view.join_seconds


def _behind_the_line(view: DeadlineView, *, escalated: bool) -> bool:
    """The paper's uniform progress: on-demand while spot is out and the job is behind the line, held until it is
    ahead by the release margin."""
    expected = uniform_steps(view)
    if escalated:
        return view.steps_done < expected + view.release_margin * view.steps_total
    return view.spot_workers == 0 and view.steps_done < expected


def _seconds(moment: datetime) -> float:
    return (moment - _EPOCH).total_seconds()


def _view(job: ReplayJob, case: Case, run: _Run, index: int, spot: int, *, escalated: bool) -> DeadlineView:
    now = index * job.join_seconds
    # capacity is not steady: the more pessimistic of all that was seen and of the last day
    moment = case.start_seconds + now
    (long_up, long_outage), (recent_up, recent_outage) = (
        case.trace.observed(moment),
        case.trace.observed(moment, moment - RECENT_SECONDS),
    )
    availability, mean_outage = min(long_up, recent_up), max(long_outage, recent_outage)
    return DeadlineView(
        now=_EPOCH + timedelta(seconds=now),
        started=_EPOCH,
        deadline=_EPOCH + timedelta(seconds=run.deadline),
        steps_done=math.floor(run.done),
        steps_total=math.ceil(job.steps),
        spot_workers=spot,
        catch_up_workers=run.catch_up,
        catch_up_max=job.catch_up_max,
        rate=job.rate,
        join_seconds=job.join_seconds,
        escalated=escalated,
        spot_workers_wanted=job.spot_workers,
        spot_availability=availability,
        spot_outage_mean_seconds=mean_outage,
    )


def optimum(job: ReplayJob, case: Case) -> Outcome:
    """The cheapest schedule knowing the whole trace (the module's docstring), and its cost.

    Backward induction over the ticks. ``least[s, c]`` is the least progress (a share of the steps) from which
    the job can still finish by the deadline at the start of a tick, with ``s`` (spot on or off) and ``c``
    catch-up workers run in the tick before: exact, no grid. ``value[s, c][p]`` is the least cost to finish
    from progress ``p`` on the grid; the finishing tick is billed for its share only, as in the replay. Between
    grid points the cost is interpolated linearly, or, where the lower point cannot finish, extrapolated from
    the two above (the cost falls with progress, convexly: this errs low by a hair, never high).
    """
    up = case.up(job)
    deadline = case.slack * job.on_demand_seconds
    last = PROGRESS_POINTS - 1
    grid = np.linspace(0.0, 1.0, PROGRESS_POINTS)
    spot_choices = (0, job.spot_workers)
    counts = range(job.catch_up_max + 1)
    shape = (len(spot_choices), len(counts))
    after = np.full((*shape, PROGRESS_POINTS), _INFEASIBLE)
    least_after = np.full(shape, math.inf)
    for index in reversed(range(len(up))):
        # the share of this tick the deadline still leaves for finishing in it
        room = min(1.0, (deadline - index * job.join_seconds) / job.join_seconds)
        value = np.full((*shape, PROGRESS_POINTS), _INFEASIBLE)
        least = np.full(shape, math.inf)
        actions = [(s, c) for s in (spot_choices if up[index] else (0,)) for c in counts]
        for before_spot, spot_before in enumerate(spot_choices):
            for catch_up_before in counts:
                best = value[before_spot, catch_up_before]
                for spot, catch_up in actions:
                    gain = job.rate(min(spot, spot_before), min(catch_up, catch_up_before)) * job.join_seconds
                    gain /= job.steps
                    bill = job.usd_per_tick(spot, catch_up)
                    following, enough = (
                        after[spot_choices.index(spot), catch_up],
                        least_after[spot_choices.index(spot), catch_up],
                    )
                    threshold = min(enough - gain, 1.0 - gain * room if gain > 0 else math.inf)
                    least[before_spot, catch_up_before] = min(least[before_spot, catch_up_before], threshold)
                    cost = bill + _between(following, grid + gain, enough, last)
                    if gain > 0:
                        share = (1.0 - grid) / gain
                        cost = np.where(share <= 1.0, np.where(share <= room, bill * share, _INFEASIBLE), cost)
                    np.minimum(best, cost, out=best)
        after, least_after = value, least
    if least_after[0, 0] > 0.0:
        return Outcome("optimum", math.inf, math.inf, False)
    return Outcome("optimum", float(after[0, 0, 0]), math.nan, True)


def _between(values: np.ndarray, reached: np.ndarray, enough: float, last: int) -> np.ndarray:
    """``values`` (on the grid of ``last`` + 1 points over [0, 1]) at the progress ``reached``: infeasible below
    ``enough``; interpolated between feasible grid points; extrapolated from the two points above where the
    point below is infeasible."""
    position = np.clip(reached, 0.0, 1.0) * last
    below = np.minimum(np.floor(position).astype(int), last)
    above = np.minimum(below + 1, last)
    further = np.minimum(above + 1, last)
    fraction = position - below
    low, high, higher = values[below], values[above], values[further]
    interpolated = low + fraction * (high - low)
    extrapolated = high + (high - higher) * (1.0 - fraction)
    feasible_below = below / last >= enough
    return np.where(reached < enough, _INFEASIBLE, np.where(feasible_below, interpolated, extrapolated))


@dataclass(frozen=True)
class CaseResult:
    case: Case
    share_up: float
    outcomes: dict[str, Outcome]


def replay_cases(
    job: ReplayJob, cases: Sequence[Case], policies: Sequence[str] = POLICIES, *, eta_spread: float = ETA_SPREAD
) -> list[CaseResult]:
    return [
        CaseResult(case, case.share_up(job), {p: replay(job, case, p, eta_spread=eta_spread) for p in policies})
        for case in cases
    ]


def cases_of(traces: Sequence[CapacityTrace], job: ReplayJob, slacks: Sequence[float], starts: int) -> list[Case]:
    """``starts`` deadlines per trace and slack, their windows spread evenly over the trace after its first day
    (the history the policy's availability estimate starts from)."""
    cases: list[Case] = []
    history = 86400.0
    for trace in traces:
        for slack in slacks:
            window = slack * job.on_demand_seconds
            room = trace.seconds - history - window
            if room < 0:
                continue
            for k in range(starts):
                offset = room * (k + 0.5) / starts
                cases.append(Case(trace, history + offset, slack))
    return cases
