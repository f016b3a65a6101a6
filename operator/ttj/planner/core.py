"""The planner: job spec + observed children + clock → writes, events and the new status. Pure and level-based.

Everything it needs to remember lives in the cluster: counters, which lost pods were already counted
(``status.accountedPods``; a lost pod is deleted only after a status naming it was written, and a
finalizer keeps worker pods from vanishing uncounted), the PS pods holding model state
(``status.parameterServerPods``), when the chief was lost (``status.chief.lostAt``), and holder and
epoch in the Lease. So a restarted operator, or a simulator, reaches the same decisions.

A pass is a list of stages, each a function from values to a value: assess the workers, cost and
budget, the end, the static children, the parameter servers, the worker slots, the chief, and last
the phase and conditions (:mod:`ttj.planner.conditions`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

from pydantic import ValidationError

from ttj.api.models import (
    ChiefStatus,
    CleanPodPolicy,
    Phase,
    TransientTrainingJob,
    TransientTrainingJobSpec,
    TransientTrainingJobStatus,
    WorkerCounts,
)
from ttj.planner.actions import EmitEvent, Observation, Refusal, Write
from ttj.planner.assess import Assessment, assess_workers
from ttj.planner.checkpoint_interval import adaptive_checkpoint_interval
from ttj.planner.chief import keep_chief, operators_chief
from ttj.planner.children import name_problems, ownership_problems
from ttj.planner.classify import PodState
from ttj.planner.conditions import TERMINAL, Ended, Finished, InProgress, InvalidSpec, derive
from ttj.planner.config import CostFunction, PlannerConfig
from ttj.planner.costing import cost_and_budget
from ttj.planner.ending import clean_up, deadline_of, ending, final_checkpoint_reported, release_pods
from ttj.planner.lease import lease_epoch_of, renewed_since_election, reported_progress
from ttj.planner.losses import LossAccounting, account_losses
from ttj.planner.observed import Observed, meta
from ttj.planner.parameter_servers import ServerLoss, parameter_servers, refused_creates
from ttj.planner.slots import fill_worker_slots
from ttj.planner.stall import stall_of, track_progress
from ttj.planner.static_children import static_children
from ttj_contract import format_time, parse_time, worker_selector

__all__ = ["CostFunction", "Plan", "PlannerConfig", "plan"]

WriteT = TypeVar("WriteT")


@dataclass
class Plan:
    """The planner's answer: apply ``writes`` in order, write ``status`` if it differs, then post ``events``;
    delete the job itself when ``delete_job`` (ttlSecondsAfterFinished elapsed)."""

    writes: list[Write] = field(default_factory=list)
    #: Events about the job, posted after the status write.
    events: list[EmitEvent] = field(default_factory=list)
    #: The full new status, camelCase JSON as written to the status subresource.
    status: dict[str, Any] = field(default_factory=dict)
    #: Histogram samples measured from cluster state (e.g. chief handover).
    observations: list[Observation] = field(default_factory=list)
    delete_job: bool = False
    #: Replan after this many seconds at the latest (timers: grace, lease expiry, deadlines, TTL).
    requeue_after: float | None = None

    def of_type(self, kind: type[WriteT]) -> list[WriteT]:
        """The writes of one kind, in order."""
        return [w for w in self.writes if isinstance(w, kind)]


@dataclass(frozen=True)
class _Pass:
    """The inputs of one pass."""

    job: dict[str, Any]
    name: str
    generation: int | None
    previous: TransientTrainingJobStatus
    observed: Observed
    now: datetime
    config: PlannerConfig
    #: The writes of this pass the API refused: a second planning of the same pass, after applying.
    refused: tuple[Refusal, ...] = ()

    @property
    def now_text(self) -> str:
        return format_time(self.now)


def plan(
    job: dict[str, Any] | TransientTrainingJob,
    observed: Observed,
    now: datetime,
    config: PlannerConfig | None = None,
    *,
    refused: Sequence[Refusal] = (),
) -> Plan:
    """Decide what to do for one job.

    ``job`` is the TransientTrainingJob as the API returns it (a dict with metadata, spec, status) or
    the pydantic model; ``observed`` its children; ``now`` an aware datetime. The result is
    deterministic in its inputs. ``refused``: the writes of this very plan the API refused; a controller
    plans again with them, so that the status it writes says so (condition ReplicaFailure).
    """
    if isinstance(job, TransientTrainingJob):
        job = job.model_dump(by_alias=True, exclude_none=True, mode="json")
    try:
        previous = TransientTrainingJobStatus.model_validate(job.get("status") or {})
    except ValidationError:
        previous = TransientTrainingJobStatus()
    name = str(meta(job).get("name", ""))
    run = _Pass(
        job, name, meta(job).get("generation"), previous, observed, now, config or PlannerConfig(), tuple(refused)
    )
    try:
        spec = TransientTrainingJobSpec.model_validate(job.get("spec") or {})
    except ValidationError as exc:
        return _invalid(run, [f"{'.'.join(str(p) for p in e['loc']) or 'spec'}: {e['msg']}" for e in exc.errors()])
    problems = name_problems(name, spec) or ownership_problems(job, spec)
    if problems:
        return _invalid(run, problems)
    if previous.phase is not None and previous.phase in TERMINAL:
        return _finished(run, spec, previous.phase)
    return _running(run, spec)


def _invalid(run: _Pass, problems: list[str]) -> Plan:
    """The job fails; pods it still has (an invalid edit mid-run) stop as cleanPodPolicy Running would stop
    them: a Failed job never keeps pods running."""
    previous = run.previous
    derived = derive(
        InvalidSpec("; ".join(problems), previous.phase), previous.conditions, run.now_text, run.generation
    )
    terminal = previous.phase in TERMINAL
    status = previous.model_copy(
        update={
            "phase": derived.phase,
            "completion_time": previous.completion_time if terminal else previous.completion_time or run.now_text,
            "start_time": previous.start_time or run.now_text,
            "conditions": derived.conditions,
        }
    )
    return _plan(run, status, writes=release_pods(run.observed, CleanPodPolicy.RUNNING), events=derived.events)


def _finished(run: _Pass, spec: TransientTrainingJobSpec, phase: Phase) -> Plan:
    """Succeeded or Failed: apply cleanPodPolicy, release finalizers, and the TTL."""
    previous = run.previous
    cleanup = clean_up(spec, run.observed, parse_time(previous.completion_time), run.now)
    derived = derive(Finished(phase), previous.conditions, run.now_text, run.generation)
    status = previous.model_copy(
        update={
            "accounted_pods": None,
            "workers": _counts(run, spec, active=0, pending=0),
            "phase": derived.phase,
            "conditions": derived.conditions,
        }
    )
    return _plan(run, status, writes=cleanup.writes, delete_job=cleanup.delete_job, wake=[cleanup.wake])


def _running(run: _Pass, spec: TransientTrainingJobSpec) -> Plan:
    previous, observed, now = run.previous, run.observed, run.now
    start_time = previous.start_time or run.now_text
    started_at = parse_time(start_time)
    budget_limited = spec.budget is not None and spec.budget.max_cost_usd is not None

    statics = static_children(run.job, spec, observed.children)
    assessed = assess_workers(
        observed, previous.accounted_pods or [], now, timedelta(seconds=run.config.node_grace_seconds)
    )
    holder = operators_chief(previous.chief)  # never a holder someone else wrote into the Lease
    progress = track_progress(reported_progress(observed.lease, previous.progress), previous.progress, now)
    epoch = lease_epoch_of(observed.lease) if observed.lease is not None else (previous.chief or ChiefStatus()).epoch
    has_model = final_checkpoint_reported(spec, progress, epoch, renewed=renewed_since_election(observed.lease))
    costing = cost_and_budget(spec, observed, assessed.verdicts, previous.cost, now=now, config=run.config)
    counted = previous.model_copy(
        update={
            "start_time": start_time,
            "preemptions": previous.preemptions + assessed.preemptions,
            "failures": previous.failures + assessed.failures,
            "replacements": previous.replacements + assessed.replacements,
            "accounted_pods": list(assessed.accounted) or None,
            "progress": progress,
            "cost": costing.cost,
        }
    )
    writes: list[Write] = [*statics.writes, *assessed.releases]
    events: list[EmitEvent] = [*statics.events, *assessed.events]

    end = ending(
        spec,
        holder=holder,
        epoch=epoch,
        renewed=renewed_since_election(observed.lease),
        verdicts=assessed.verdicts,
        failures=counted.failures,
        last_failure=assessed.last_failure,
        progress=progress,
        started_at=started_at,
        now=now,
        budget=costing.budget,
    )
    if end is not None:
        return _ends_now(run, spec, counted, Ended(end, budget_limited), assessed, writes=writes, events=events)

    servers = parameter_servers(
        run.name,
        spec.parameter_servers.replicas,
        observed.pods,
        previous.parameter_server_pods or [],
        nodes=observed.nodes,
        now=now,
        node_grace=timedelta(seconds=run.config.node_grace_seconds),
    )
    holder_verdict = assessed.verdicts.get(holder) if holder else None
    chief_ended_without_model = (
        holder_verdict is not None and holder_verdict.state == PodState.SUCCEEDED and not has_model
    )
    slots = fill_worker_slots(
        run.job,
        spec,
        assessed.workers,
        assessed.verdicts,
        holder=holder,
        budget=costing.budget,
        placement=observed.placement,
        recorded=previous.slot_incarnations or (),
        refill_finished=chief_ended_without_model,
    )
    stall = stall_of(
        spec,
        progress,
        previous.chief,
        chief_running=holder_verdict is not None and holder_verdict.state == PodState.RUNNING,
        now=now,
    )
    chief = keep_chief(
        run.job,
        assessed.workers,
        assessed.verdicts,
        observed.nodes,
        lease=observed.lease,
        holder=holder,
        recorded=previous.chief,
        ps_replaced=servers.replaced,
        active=slots.active,
        desired=spec.workers.replicas,
        now=now,
        config=run.config,
        stalled=stall.message if stall.replace_chief else "",
        ended_without_model=not has_model,
    )
    elections = previous.chief_elections + chief.elections
    chief_pod = chief.chief.pod if chief.chief is not None else None
    interval = adaptive_checkpoint_interval(
        spec,
        job_name=run.name,
        holder_pod=next((p for p in assessed.workers if meta(p).get("name") == chief_pod), None),
        nodes=observed.nodes,
        lease=observed.lease,
        previous=previous.checkpoint_interval,
        now=now,
        active_workers=slots.active,
    )
    # the interval annotation goes after the chief's own Lease write (which may carry a resourceVersion precondition)
    chief = dataclasses.replace(chief, writes=(*chief.writes, *interval.writes))
    situation = InProgress(
        started=elections > 0,
        lost=servers.lost or counted.preemptions + servers.preemptions + counted.failures > 0 or elections > 1,
        chief=chief.chief,
        chief_healthy=chief.healthy,
        parameter_servers_ready=servers.ready,
        active=slots.active,
        desired=spec.workers.replicas,
        min_replicas=spec.workers.min_replicas,
        unschedulable=slots.unschedulable,
        budget=costing.budget,
        budget_limited=budget_limited,
        refused=(*run.refused, *refused_creates(run.name, spec.parameter_servers.replicas, observed.children)),
        stalled=stall.message,
    )
    derived = derive(situation, previous.conditions, run.now_text, run.generation)
    losses = _losses(run, counted, assessed, servers.server_losses)
    status = counted.model_copy(
        update={
            "preemption_costs": losses.costs,
            "savings": losses.savings,
            "phase": derived.phase,
            "preemptions": counted.preemptions + servers.preemptions,
            "parameter_server_pods": list(servers.pods),
            "chief": chief.chief,
            "chief_elections": elections,
            "workers": _counts(run, spec, active=slots.active, pending=slots.pending),
            "slot_incarnations": list(slots.incarnations) or None,
            "conditions": derived.conditions,
            "checkpoint_interval": interval.status,
        }
    )
    return _plan(
        run,
        status,
        writes=[*writes, *servers.writes, *slots.writes, *chief.writes],
        events=[*events, *servers.events, *chief.events, *derived.events, *losses.events],
        observations=chief.observations,
        wake=[*assessed.wake, *servers.wake, chief.wake, stall.wake, deadline_of(spec, started_at)],
    )


def _ends_now(
    run: _Pass,
    spec: TransientTrainingJobSpec,
    counted: TransientTrainingJobStatus,
    situation: Ended,
    assessed: Assessment,
    *,
    writes: list[Write],
    events: list[EmitEvent],
) -> Plan:
    """The job succeeds or fails in this pass; the next pass, seeing the written phase, cleans up."""
    derived = derive(situation, run.previous.conditions, run.now_text, run.generation)
    active, pending = assessed.count(PodState.RUNNING), assessed.count(PodState.PENDING)
    losses = _losses(run, counted, assessed, ())
    status = counted.model_copy(
        update={
            "preemption_costs": losses.costs,
            "savings": losses.savings,
            "phase": derived.phase,
            "completion_time": run.now_text,
            "workers": _counts(run, spec, active=active, pending=pending),
            "conditions": derived.conditions,
        }
    )
    return _plan(run, status, writes=writes, events=[*events, *derived.events, *losses.events], wake=assessed.wake)


def _losses(
    run: _Pass, counted: TransientTrainingJobStatus, assessed: Assessment, servers_lost: Iterable[ServerLoss]
) -> LossAccounting:
    """What this pass's losses cost, and the savings net of all losses so far (:mod:`ttj.planner.losses`)."""
    return account_losses(
        run.previous.preemption_costs or [],
        run.previous.savings,
        lost_workers=assessed.preempted,
        lost_servers=servers_lost,
        chief=(run.previous.chief.pod if run.previous.chief is not None else None),
        pods=run.observed.pods,
        verdicts=assessed.verdicts,
        progress=counted.progress,
        cost=counted.cost,
        now=run.now,
    )


def _counts(run: _Pass, spec: TransientTrainingJobSpec, *, active: int, pending: int) -> WorkerCounts:
    desired = spec.workers.replicas
    return WorkerCounts(
        desired=desired,
        active=active,
        pending=pending,
        summary=f"{active}/{desired}",
        selector=worker_selector(run.name),
    )


def _plan(
    run: _Pass,
    status: TransientTrainingJobStatus,
    *,
    writes: Iterable[Write] = (),
    events: Iterable[EmitEvent] = (),
    observations: Iterable[Observation] = (),
    delete_job: bool = False,
    wake: Iterable[datetime | None] = (),
) -> Plan:
    return Plan(
        writes=list(writes),
        events=list(events),
        status=status.model_copy(update={"observed_generation": run.generation}).model_dump(
            by_alias=True, exclude_none=True, mode="json"
        ),
        observations=list(observations),
        delete_job=delete_job,
        requeue_after=_requeue_after(run.now, run.config.resync_seconds, wake),
    )


def _requeue_after(now: datetime, resync_seconds: float, moments: Iterable[datetime | None]) -> float:
    """Seconds to the earliest future moment, at most the resync period."""
    at = min([now + timedelta(seconds=resync_seconds), *(m for m in moments if m is not None and m > now)])
    return max(0.0, (at - now).total_seconds())
