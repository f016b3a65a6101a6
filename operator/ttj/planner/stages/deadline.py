"""Finishing by spec.deadline: how many catch-up workers the job holds, its ETA, and where it stands.

The stage reads the job as the policy (:mod:`ttj.deadline.policy`) sees it: the steps done and the live rate of
each worker (the chief's per-slot report), the spot workers the job can have now (running, pending and not
unschedulable, or replacing a lost one: none while the spot pool is out), the catch-up workers it holds, and the
most it may hold; it asks :func:`~ttj.deadline.policy.decide` and hands the count to the worker slots through the
catch-up group's room.

Two rules of its own, both make-before-break: catch-up workers are released only once the spot workers the
decision counts on run (one still starting keeps them; an unschedulable one is not counted on), and never the
chief (a chief in the catch-up group keeps one catch-up worker until it is lost). The policy's only memory,
whether it held catch-up workers for the deadline, is ``status.deadline.escalatedAt``.

Jobs without a deadline get their ETA here too, and nothing else.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from ttj.api.models import (
    DeadlineStatus,
    EtaStatus,
    ProgressStatus,
    TransientTrainingJobSpec,
    TransientTrainingJobStatus,
)
from ttj.cost.budget import DEFAULT_HORIZON_SECONDS, BudgetDecision
from ttj.deadline.policy import DeadlineDecision, DeadlineState, DeadlineView, Eta, decide, project
from ttj.planner.actions import EmitEvent
from ttj.planner.classify import PodState, PodVerdict
from ttj.planner.groups import Group, Unavailable, catch_up_cap, group_of, in_catch_up_group
from ttj.planner.observed import Obj, annotations_of, name_of
from ttj.planner.rates import slot_groups
from ttj_contract import ANNOTATION_PROGRESS, LeaseProgress, format_time, parse_time

#: How long the global step may stand still before the ETA is projected from now rather than from its advance.
ETA_STILL_SECONDS = 60.0


@dataclass(frozen=True)
class DeadlineInputs:
    spec: TransientTrainingJobSpec
    #: status.progress as this pass reads it (the chief's latest report).
    progress: ProgressStatus | None
    previous: TransientTrainingJobStatus
    groups: tuple[Group, ...]
    workers: Sequence[Obj]
    verdicts: Mapping[str, PodVerdict]
    unavailable: Mapping[str, Unavailable]
    lease: Obj | None
    holder: str | None
    budget: BudgetDecision | None
    #: What one more worker of each group costs per hour (empty without prices).
    group_prices: Mapping[str | None, float]
    #: status.startTime as this pass writes it, and the job's creationTimestamp.
    started: datetime | None
    created: datetime | None
    suspended: bool
    now: datetime


@dataclass(frozen=True)
class DeadlinePlan:
    #: The catch-up workers the slots hold (0 without a deadline).
    catch_up_workers: int
    #: status.deadline (None without a deadline) and status.progress.eta (None while the rate is unknown).
    status: DeadlineStatus | None
    eta: EtaStatus | None
    events: tuple[EmitEvent, ...] = ()


def deadline_at(spec: TransientTrainingJobSpec, started: datetime | None, created: datetime | None) -> datetime | None:
    """spec.deadline as a time: the earlier of completeBy and completeWithinSeconds after the start (else the
    creation); None without a deadline."""
    if spec.deadline is None:
        return None
    moments = [parse_time(spec.deadline.complete_by)]
    origin = started or created
    if spec.deadline.complete_within_seconds is not None and origin is not None:
        moments.append(origin + timedelta(seconds=spec.deadline.complete_within_seconds))
    return min((m for m in moments if m is not None), default=None)


def plan_deadline(given: DeadlineInputs) -> DeadlinePlan:
    """The stage, as the module describes it."""
    view = _view(given)
    at = deadline_at(given.spec, given.started, given.created)
    if at is not None and view is None and not given.suspended:
        return _starting(given, at)
    if at is None or view is None or given.suspended:
        # no rate to project from, or nothing runs: where the job stood last stays
        return DeadlinePlan(0, given.previous.deadline if at is not None else None, _eta_of(given, view))
    decision = decide(view)
    count, why_kept = _make_before_break(given, decision.catch_up_workers, view)
    eta = _eta_of(given, view, count)
    infeasible = decision.state == DeadlineState.INFEASIBLE
    words = decision.message + (_cap_note(given, view.catch_up_max) if infeasible else "") + why_kept
    return DeadlinePlan(
        count,
        _status(given, decision.state, count, at=at, eta=eta, message=words),
        eta,
        _events(given, decision, count),
    )


def _starting(given: DeadlineInputs, at: datetime) -> DeadlinePlan:
    """Before any step rate is known there is nothing to project; a job none of whose spot workers can run then
    (its spot pool out at the start) would wait for spot with the clock running and never learn its pace. It holds
    one catch-up worker, which trains and gets the pace measured; the policy decides from the next report on."""
    if _spot_workers(given) > 0 or _catch_up_max(given) < 1:
        return DeadlinePlan(0, given.previous.deadline, None)
    previous = given.previous.deadline
    words = "no worker of the other groups can run and no step rate is known yet: 1 catch-up worker starts training"
    status = DeadlineStatus(
        at=format_time(at),
        state=DeadlineState.AT_RISK,
        catch_up_workers=1,
        escalated_at=(previous.escalated_at if previous else None) or format_time(given.now),
        message=words,
    )
    held_before = previous.catch_up_workers if previous is not None else 0
    group = next((g.name for g in given.groups if g.catch_up), None)
    events = (
        (EmitEvent("Normal", "DeadlineEscalated", f"adding 1 catch-up worker(s) in group {group} (1 held): {words}"),)
        if held_before < 1
        else ()
    )
    return DeadlinePlan(1, status, None, events)


# -- the view --------------------------------------------------------------------------------------
def _view(given: DeadlineInputs) -> DeadlineView | None:
    """The job as the policy sees it now; None while no step rate is known."""
    per_worker = _per_worker_rates(given)
    if per_worker is None:
        return None
    spot_rate, catch_up_rate = per_worker
    progress = given.progress or ProgressStatus()
    # without a deadline the view only projects the ETA: any moment stands in for it
    at = deadline_at(given.spec, given.started, given.created) or given.now
    savings = given.previous.savings
    interval = given.previous.checkpoint_interval
    most = _catch_up_max(given) if given.spec.deadline is not None else 0
    return DeadlineView(
        now=given.now,
        started=given.started or given.created or given.now,
        deadline=at,
        steps_done=progress.global_step,
        steps_total=given.spec.train_steps,
        spot_workers=_spot_workers(given),
        # more than allowed (a cap lowered, replicas scaled up into the free slots): the slots release the rest
        catch_up_workers=min(_held(given), most),
        catch_up_max=most,
        rate=lambda spot, catch_up: spot * spot_rate + catch_up * catch_up_rate,
        spot_hazard_per_hour=(interval.hazard_per_hour or 0.0) if interval is not None else 0.0,
        steps_lost_per_preemption=savings.steps_lost / savings.losses if savings and savings.losses else 0.0,
        escalated=given.previous.deadline is not None and given.previous.deadline.escalated_at is not None,
    )


def _alive(given: DeadlineInputs) -> list[Obj]:
    return [pod for pod in given.workers if given.verdicts[name_of(pod)].alive]


def _held(given: DeadlineInputs) -> int:
    return sum(in_catch_up_group(given.groups, pod) for pod in _alive(given))


def _spot_workers(given: DeadlineInputs) -> int:
    """The other workers the job can have now, at most replicas: those running, those pending and not
    unschedulable in a group whose capacity is not known to be out, and the replacements this pass creates while
    such a group is left (a preemption alone is no reason to catch up; a spot pool out is)."""
    others = [pod for pod in _alive(given) if not in_catch_up_group(given.groups, pod)]
    can = 0
    for pod in others:
        verdict = given.verdicts[name_of(pod)]
        schedulable = not verdict.pending_reason and str(group_of(pod)) not in given.unavailable
        can += verdict.state == PodState.RUNNING or schedulable
    replicas = given.spec.workers.replicas
    if any(not g.catch_up and str(g.name) not in given.unavailable for g in given.groups):
        can += max(0, replicas - len(others))
    return min(can, replicas)


def _catch_up_limits(given: DeadlineInputs) -> list[tuple[int, str]]:
    """What caps the catch-up workers, each with its words: the free slots above replicas,
    deadline.maxCatchUpWorkers, the group's maxReplicas, and what the budget allows."""
    workers = given.spec.workers
    limits = [(max(0, workers.slots - workers.replicas), f"the free worker slots (maxReplicas {workers.slots})")]
    deadline = given.spec.deadline
    if deadline is not None and deadline.max_catch_up_workers is not None:
        limits.append((deadline.max_catch_up_workers, "deadline.maxCatchUpWorkers"))
    own = catch_up_cap(given.spec)
    if own is not None:
        limits.append((own, "the catch-up group's maxReplicas"))
    budget = _budget_room(given)
    if budget is not None and given.budget is not None:
        limits.append((budget, f"the budget (maxCostUSD ${given.budget.max_cost_usd:.2f})"))
    return limits


def _catch_up_max(given: DeadlineInputs) -> int:
    return min(count for count, _ in _catch_up_limits(given))


def _budget_room(given: DeadlineInputs) -> int | None:
    """The catch-up workers the budget allows: those held (already in its projection) and as many more as fit
    between the projected cost and maxCostUSD over the budget's horizon; None when the budget does not limit."""
    budget = given.budget
    if budget is None or budget.max_cost_usd is None:
        return None
    if budget.exceeded:
        return 0
    price = next((given.group_prices.get(g.name, 0.0) for g in given.groups if g.catch_up), 0.0)
    if price <= 0:
        return None
    more = (budget.max_cost_usd - budget.projected_usd) / (price * DEFAULT_HORIZON_SECONDS / 3600.0)
    return _held(given) + max(0, math.floor(more + 1e-9))


def _cap_note(given: DeadlineInputs, most: int) -> str:
    """What holds the catch-up workers to ``most``, in words."""
    capping = [words for count, words in _catch_up_limits(given) if count == most]
    return f"; {most} catch-up worker(s) at most: {' and '.join(capping)}"


def _per_worker_rates(given: DeadlineInputs) -> tuple[float, float] | None:
    """Steps per second of one spot worker and of one catch-up worker, from the chief's latest per-slot rates
    (each kind from its own slots, else from the other's); None while none is known."""
    report = LeaseProgress.from_annotation(annotations_of(given.lease or {}).get(ANNOTATION_PROGRESS))
    rates = {slot: rate for slot, rate in ((report.slot_steps_per_second or {}) if report else {}).items() if rate > 0}
    if not rates:
        return None
    catch_up_names = {g.name for g in given.groups if g.catch_up}
    holders = slot_groups([pod for pod in given.workers if given.verdicts[name_of(pod)].alive])
    catch_up = [rate for slot, rate in rates.items() if holders.get(slot) in catch_up_names]
    spot = [rate for slot, rate in rates.items() if holders.get(slot) not in catch_up_names]
    spot_rate = sum(spot) / len(spot) if spot else sum(catch_up) / len(catch_up)
    catch_up_rate = sum(catch_up) / len(catch_up) if catch_up else spot_rate
    return spot_rate, catch_up_rate


# -- the decision as the slots take it -------------------------------------------------------------
def _make_before_break(given: DeadlineInputs, decided: int, view: DeadlineView) -> tuple[int, str]:
    """The decided count, but fewer than held only once the spot workers the decision counts on run (not while
    one is still starting); and never below one while the chief is a catch-up worker (deleting it would hand over
    before its checkpoint); with why it keeps more, in words ("" when it does not)."""
    held = view.catch_up_workers
    if decided >= held:
        return decided, ""
    running = sum(
        1
        for pod in _alive(given)
        if not in_catch_up_group(given.groups, pod) and given.verdicts[name_of(pod)].state == PodState.RUNNING
    )
    if running < view.spot_workers:
        return held, f"; {held} kept until the {view.spot_workers} other workers counted on run ({running} do)"
    chief = any(name_of(pod) == given.holder and in_catch_up_group(given.groups, pod) for pod in _alive(given))
    if chief and decided == 0:
        return 1, "; 1 kept: the chief runs in the catch-up group until it is lost"
    return decided, ""


def _status(
    given: DeadlineInputs, state: DeadlineState, count: int, *, at: datetime, eta: EtaStatus | None, message: str
) -> DeadlineStatus:
    """status.deadline; its slack is the deadline minus the published p90 ETA, so the two agree."""
    previous = given.previous.deadline
    escalated_at = (previous.escalated_at if previous else None) or format_time(given.now)
    p90 = parse_time(eta.p90) if eta is not None else None
    return DeadlineStatus(
        at=format_time(at),
        state=state,
        catch_up_workers=count,
        slack_seconds=None if p90 is None else round((at - p90).total_seconds()),
        escalated_at=escalated_at if count > 0 else None,
        message=message,
    )


def _eta_of(given: DeadlineInputs, view: DeadlineView | None, count: int = 0) -> EtaStatus | None:
    """status.progress.eta: the completion projected with ``count`` catch-up workers as of the step's latest
    advance, so that it moves with the training, not with the clock between reports; as of now once the step
    has stood still for :data:`ETA_STILL_SECONDS` (a job that does not train gets later every pass)."""
    if view is None:
        return None
    progress = given.progress or ProgressStatus()
    advanced = parse_time(progress.last_progress_time) or given.now
    still = (given.now - advanced).total_seconds() > ETA_STILL_SECONDS
    eta = project(_as_of(view, given.now if still else min(advanced, given.now)), view.spot_workers, count)
    return None if eta is None else EtaStatus(p50=format_time(eta.p50), p90=format_time(eta.p90))


def _as_of(view: DeadlineView, moment: datetime) -> DeadlineView:
    return replace(view, now=moment)


def _events(given: DeadlineInputs, decision: DeadlineDecision, count: int) -> tuple[EmitEvent, ...]:
    """DeadlineEscalated or DeadlineReleased when the count changes; DeadlineInfeasible when it becomes so."""
    previous = given.previous.deadline
    before = previous.catch_up_workers if previous is not None else 0
    group = next((g.name for g in given.groups if g.catch_up), None)
    etas = f"p90 ETA {_p90(decision.eta_before)} → {_p90(decision.eta)}"
    events = []
    if count > before:
        events.append(
            EmitEvent(
                "Normal",
                "DeadlineEscalated",
                f"adding {count - before} catch-up worker(s) in group {group} ({count} held): {decision.message}; "
                + etas,
            )
        )
    elif count < before:
        events.append(
            EmitEvent(
                "Normal",
                "DeadlineReleased",
                f"releasing {before - count} catch-up worker(s) in group {group} ({count} held): "
                f"{decision.message}; {etas}",
            )
        )
    was_infeasible = previous is not None and previous.state == DeadlineState.INFEASIBLE
    if decision.state == DeadlineState.INFEASIBLE and not was_infeasible:
        events.append(EmitEvent("Warning", "DeadlineInfeasible", decision.message))
    return tuple(events)


def _p90(eta: Eta | None) -> str:
    return "none (no progress)" if eta is None else format_time(eta.p90)
