"""The planner: job spec + observed children + clock → writes, events and the new status. Pure and level-based.

Everything it needs to remember lives in the cluster: counters, which lost pods were already counted
(``status.accountedPods``; a lost pod is deleted only after a status naming it was written, and a
finalizer keeps worker pods from vanishing uncounted), the PS pods holding model state
(``status.parameterServerPods``), when the chief was lost (``status.chief.lostAt``), and holder and
epoch in the Lease. So a restarted operator, or a simulator, reaches the same decisions.

A pass is a list of stages, each a function from values to a value (:mod:`ttj.planner.stages` lists
them in the order a pass calls them); last come the phase and conditions (:mod:`ttj.planner.conditions`).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

from pydantic import ValidationError

from ttj.api.models import (
    ChiefStatus,
    CleanPodPolicy,
    ConditionType,
    DeadlineStatus,
    JobRef,
    Phase,
    ProgressStatus,
    Reason,
    TransientTrainingJob,
    TransientTrainingJobSpec,
    TransientTrainingJobStatus,
    WorkerCounts,
    WorkerGroupStatus,
    status_body,
    without_accruing,
)
from ttj.deadline.policy import DeadlineState
from ttj.planner.actions import EmitEvent, LabelPod, Observation, Refusal, Write
from ttj.planner.classify import PodState, PodVerdict
from ttj.planner.conditions import TERMINAL, Derived, Ended, Finished, InProgress, InvalidSpec, Standing, derive
from ttj.planner.config import CostFunction, PlannerConfig
from ttj.planner.evaluation import progress_events
from ttj.planner.groups import (
    Group,
    Unavailable,
    group_problems,
    groups_of,
    groups_status,
    next_capacity_retry,
    recorded_unavailable,
    with_catch_up_workers,
)
from ttj.planner.lease import lease_epoch_of, renewed_since_election, reported_progress
from ttj.planner.lost import ServerLoss
from ttj.planner.observed import Observed, meta, name_of
from ttj.planner.ownership import name_problems, ownership_problems
from ttj.planner.rates import group_steps_per_second, with_steps_per_second
from ttj.planner.stages.assess import Assessment, assess_workers
from ttj.planner.stages.checkpoint_interval import IntervalPlan, adaptive_checkpoint_interval
from ttj.planner.stages.chief import ChiefInputs, ChiefPlan, keep_chief, operators_chief
from ttj.planner.stages.costing import Costing, cost_and_budget
from ttj.planner.stages.deadline import DeadlineInputs, DeadlinePlan, deadline_at, plan_deadline
from ttj.planner.stages.ending import clean_up, deadline_of, ending, final_checkpoint_reported, release_pods
from ttj.planner.stages.losses import LossAccounting, account_losses
from ttj.planner.stages.parameter_servers import ParameterServers, parameter_servers, refused_creates
from ttj.planner.stages.slots import SlotInputs, WorkerSlots, fill_worker_slots
from ttj.planner.stages.stall import Stall, stall_of, track_progress
from ttj.planner.stages.static_children import StaticChildren, static_children
from ttj.planner.stages.suspension import Suspension, suspension_of
from ttj.planner.stages.waiting import waiting_parameter_servers, waiting_workers
from ttj_contract import format_time, parse_time, worker_selector

__all__ = ["CostFunction", "Plan", "PlannerConfig", "plan"]

WriteT = TypeVar("WriteT")


@dataclass
class Plan:
    """The planner's answer: apply ``writes`` in order, write ``status`` when ``status_due``, then post
    ``events``; delete the job itself when ``delete_job`` (ttlSecondsAfterFinished elapsed)."""

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
    #: Whether ``status`` is worth a write: it differs from the status seen in more than the cost accrued since,
    #: or that cost adds up (:func:`status_due`).
    status_due: bool = True

    def of_type(self, kind: type[WriteT]) -> list[WriteT]:
        """The writes of one kind, in order."""
        return [w for w in self.writes if isinstance(w, kind)]


@dataclass(frozen=True)
class _Pass:
    """The inputs of one pass."""

    ref: JobRef
    generation: int | None
    #: The job's creationTimestamp, and its status as read (JSON), which the planned one is compared with.
    created: datetime | None
    seen_status: Mapping[str, Any]
    previous: TransientTrainingJobStatus
    observed: Observed
    now: datetime
    config: PlannerConfig
    #: The writes of this pass the API refused: a second planning of the same pass, after applying.
    refused: tuple[Refusal, ...] = ()

    @property
    def now_text(self) -> str:
        return format_time(self.now)

    @property
    def name(self) -> str:
        return self.ref.name


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
        previous = TransientTrainingJobStatus.model_validate(_known_conditions(job.get("status") or {}))
    except ValidationError:
        previous = TransientTrainingJobStatus()
    metadata = meta(job)
    name = str(metadata.get("name", ""))
    run = _Pass(
        JobRef(name, metadata.get("namespace"), metadata.get("uid")),
        metadata.get("generation"),
        parse_time(metadata.get("creationTimestamp")),
        job.get("status") or {},
        previous,
        observed,
        now,
        config or PlannerConfig(),
        tuple(refused),
    )
    try:
        spec = TransientTrainingJobSpec.model_validate(job.get("spec") or {})
    except ValidationError as exc:
        return _invalid(run, [f"{'.'.join(str(p) for p in e['loc']) or 'spec'}: {e['msg']}" for e in exc.errors()])
    problems = name_problems(name, spec) or ownership_problems(job, spec) or group_problems(spec)
    if problems:
        return _invalid(run, problems)
    if previous.phase is not None and previous.phase in TERMINAL:
        return _finished(run, spec, previous.phase)
    return _running(run, spec)


def _known_conditions(status: dict[str, Any]) -> dict[str, Any]:
    """``status`` without conditions of a type or reason this operator does not know (another version's, or
    another writer's): each pass drops every condition it does not want anyway, and the rest of the status
    (counters, the chief, the records) must not be lost to one of them failing validation."""
    if "conditions" not in status:
        return status
    known_types, known_reasons = set(ConditionType), set(Reason)
    kept = [
        c
        for c in status.get("conditions") or []
        if isinstance(c, dict)
        and c.get("type") in known_types
        and (c.get("reason") is None or c.get("reason") in known_reasons)
    ]
    return {**status, "conditions": kept}


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
            # the chief's last report may reach this operator after the pass that saw it exit (the export path)
            "progress": reported_progress(run.observed.lease, previous.progress),
            "workers": _counts(run, spec, active=0, pending=0),
            "phase": derived.phase,
            "conditions": derived.conditions,
        }
    )
    return _plan(run, status, writes=cleanup.writes, delete_job=cleanup.delete_job, wake=[cleanup.wake])


@dataclass(frozen=True)
class _Reading:
    """What a running pass reads before it decides: the children it keeps, the workers assessed, the chief the
    status records, training progress, the chief's epoch, and the cost."""

    start_time: str
    statics: StaticChildren
    assessed: Assessment
    holder: str | None
    progress: ProgressStatus | None
    epoch: int
    has_model: bool
    costing: Costing
    suspension: Suspension
    #: The job's worker groups, in order of preference, and those new workers skip for want of capacity.
    groups: tuple[Group, ...]
    unavailable: Mapping[str, Unavailable]

    @property
    def holder_verdict(self) -> PodVerdict | None:
        return self.assessed.verdicts.get(self.holder) if self.holder else None

    def holder_is(self, state: PodState) -> bool:
        return self.holder_verdict is not None and self.holder_verdict.state == state


def _running(run: _Pass, spec: TransientTrainingJobSpec) -> Plan:
    """A pass of a job that is neither invalid nor finished: read, then either end the job in this pass, or let
    each stage decide and plan what goes on."""
    reading = _read(run, spec)
    workers_counted = _counted(run, reading)
    end = _end(run, spec, reading, failures=workers_counted.failures)
    if end is not None:
        return _ends_now(
            run,
            spec,
            workers_counted,
            end,
            reading.assessed,
            writes=_read_writes(reading),
            events=_read_events(reading),
        )
    return _goes_on(run, spec, reading, _decide(run, spec, reading))


@dataclass(frozen=True)
class _Decisions:
    """What the stages of a running pass decide after the reading, when the job does not end in it."""

    servers: ParameterServers
    #: The status with this pass's losses counted, the parameter servers' included.
    counted: TransientTrainingJobStatus
    deadline: DeadlinePlan
    slots: WorkerSlots
    stall: Stall
    chief: ChiefPlan
    interval: IntervalPlan
    #: Chief elections so far, this pass's included.
    elections: int


def _decide(run: _Pass, spec: TransientTrainingJobSpec, reading: _Reading) -> _Decisions:
    """The parameter servers, the deadline's catch-up workers, the worker slots, a stall, the chief (kept as it is
    while suspended) and the checkpoint interval, each stage from the values the earlier ones returned."""
    servers = _servers(run, spec)
    counted = _counted(run, reading, server_preemptions=servers.preemptions)
    deadline = _deadline(run, spec, reading)
    slots = _slots(run, spec, reading, catch_up_workers=deadline.catch_up_workers)
    stall = _stall(run, spec, reading)
    chief = (
        _kept_while_suspended(run)
        if reading.suspension.suspended
        else _chief(run, spec, reading, servers=servers, slots=slots, stall=stall)
    )
    return _Decisions(
        servers=servers,
        counted=counted,
        deadline=deadline,
        slots=slots,
        stall=stall,
        chief=chief,
        interval=_interval(run, spec, reading, chief, slots),
        elections=run.previous.chief_elections + chief.elections,
    )


def _goes_on(run: _Pass, spec: TransientTrainingJobSpec, reading: _Reading, decided: _Decisions) -> Plan:
    """The job goes on in this pass: its phase and conditions, the losses priced, the new status, the writes in
    the order they are applied, the events, and when to plan again."""
    derived = derive(_situation(run, spec, reading, decided), run.previous.conditions, run.now_text, run.generation)
    losses = _losses(run, decided.counted, reading.assessed, decided.servers.server_losses)
    servers, slots, chief = decided.servers, decided.slots, decided.chief
    return _plan(
        run,
        _running_status(run, spec, reading, decided, derived=derived, losses=losses),
        writes=_running_writes(reading, servers, slots, chief, decided.interval),
        events=[
            *_read_events(reading),
            *_placement_events(run.observed),
            *servers.events,
            *slots.events,
            *chief.events,
            *derived.events,
            *decided.deadline.events,
            *losses.events,
        ],
        observations=chief.observations,
        wake=_running_wake(spec, reading, decided),
    )


def _placement_events(observed: Observed) -> list[EmitEvent]:
    """What the operator changed in the cluster for the job (a node pool's autoscaling maximum raised)."""
    placement = observed.placement
    if placement is None:
        return []
    raised = [EmitEvent("Normal", "AutoscalingRaised", placement.raised)] if placement.raised else []
    failed = [EmitEvent("Warning", "AutoscalingNotRaised", placement.raise_failed)] if placement.raise_failed else []
    return raised + failed


def _running_status(
    run: _Pass,
    spec: TransientTrainingJobSpec,
    reading: _Reading,
    decided: _Decisions,
    *,
    derived: Derived,
    losses: LossAccounting,
) -> TransientTrainingJobStatus:
    """The status a running pass writes: the counted status with what the stages decided."""
    servers, slots = decided.servers, decided.slots
    progress = decided.counted.progress
    return decided.counted.model_copy(
        update={
            "progress": progress.model_copy(update={"eta": decided.deadline.eta}) if progress is not None else None,
            "deadline": decided.deadline.status,
            "preemption_costs": losses.costs,
            "savings": losses.savings,
            "phase": derived.phase,
            # scaled to 0 while suspended, the parameter servers hold no model state: the new ones are no loss
            "parameter_server_pods": [""] * len(servers.pods)
            if reading.suspension.servers_down
            else list(servers.pods),
            "chief": decided.chief.chief,
            "chief_elections": decided.elections,
            "workers": _counts(run, spec, active=slots.active, pending=slots.pending),
            "worker_groups": _groups(run, reading.groups, slots, decided.counted),
            "slot_incarnations": list(slots.incarnations) or None,
            "conditions": derived.conditions,
            "checkpoint_interval": decided.interval.status,
        }
    )


def _running_wake(spec: TransientTrainingJobSpec, reading: _Reading, decided: _Decisions) -> list[datetime | None]:
    """The moments a running pass waits for: grace periods, the Lease, a stall, capacity retries, the deadline
    (which does not run while the job is suspended)."""
    slots = decided.slots
    return [
        *reading.assessed.wake,
        *decided.servers.wake,
        decided.chief.wake,
        decided.stall.wake,
        slots.wake,
        next_capacity_retry(spec, slots.unavailable),
        None if reading.suspension.suspended else deadline_of(spec, parse_time(reading.start_time)),
    ]


def _read(run: _Pass, spec: TransientTrainingJobSpec) -> _Reading:
    previous, observed, now = run.previous, run.observed, run.now
    groups = groups_of(spec)
    unavailable = recorded_unavailable(spec, previous.worker_groups or [], now)
    suspension = suspension_of(spec, previous.conditions, observed.pods)
    assessed = assess_workers(
        observed, previous.accounted_pods or [], now, timedelta(seconds=run.config.node_grace_seconds)
    )
    progress = track_progress(reported_progress(observed.lease, previous.progress), previous.progress, now)
    if suspension.resuming and progress is not None:
        # the step stood still while suspended: the stall clock starts again with the job
        progress = progress.model_copy(update={"last_progress_time": run.now_text})
    epoch = lease_epoch_of(observed.lease) if observed.lease is not None else (previous.chief or ChiefStatus()).epoch
    return _Reading(
        # as in batch/v1, a resumed job starts again: activeDeadlineSeconds counts from now
        start_time=run.now_text if suspension.resuming else previous.start_time or run.now_text,
        statics=static_children(run.ref, spec, observed.children, ps_replicas=suspension.parameter_server_replicas),
        assessed=assessed,
        holder=operators_chief(previous.chief),  # never a holder someone else wrote into the Lease
        progress=progress,
        epoch=epoch,
        has_model=final_checkpoint_reported(spec, progress, epoch, renewed=renewed_since_election(observed.lease)),
        costing=cost_and_budget(
            spec,
            observed,
            assessed.verdicts,
            previous.cost,
            now=now,
            config=run.config,
            groups=groups,
            unavailable=unavailable,
        ),
        suspension=suspension,
        groups=groups,
        unavailable=unavailable,
    )


def _running_writes(
    reading: _Reading, servers: ParameterServers, slots: WorkerSlots, chief: ChiefPlan, interval: IntervalPlan
) -> list[Write]:
    """In the order they are applied: what the job's work waits for first, bookkeeping last. When the chief
    changes, its Lease and labels go before everything else, so that the new chief is named one round trip
    into the pass; then the parameter servers and the workers' creates; a Lease write that only publishes the
    worker counts goes after the creates, so that it delays no replacement; then the chief label off stopped
    pods, and the deletes and finalizer releases of losses an earlier pass counted. The interval annotation
    goes after the chief's own Lease write (which may carry a resourceVersion precondition)."""
    naming = chief.elections > 0 or any(isinstance(write, LabelPod) for write in chief.writes)
    return [
        *reading.statics.writes,
        *(chief.writes if naming else ()),
        *servers.writes,
        *slots.writes,
        *(() if naming else chief.writes),
        *chief.tidying,
        *reading.assessed.releases,
        *interval.writes,
    ]


def _read_writes(reading: _Reading) -> list[Write]:
    return [*reading.statics.writes, *reading.assessed.releases]


def _read_events(reading: _Reading) -> list[EmitEvent]:
    return [*reading.statics.events, *reading.assessed.events]


def _counted(run: _Pass, reading: _Reading, *, server_preemptions: int = 0) -> TransientTrainingJobStatus:
    """The status with this pass's losses counted (workers', and the parameter servers' when the pass gets to
    them): the one place the counters grow."""
    previous, assessed = run.previous, reading.assessed
    return previous.model_copy(
        update={
            "start_time": reading.start_time,
            "preemptions": previous.preemptions + assessed.preemptions + server_preemptions,
            "failures": previous.failures + assessed.failures,
            "replacements": previous.replacements + assessed.replacements,
            "migrations": previous.migrations + assessed.migrations,
            "accounted_pods": list(assessed.accounted) or None,
            "progress": reading.progress,
            "cost": reading.costing.cost,
        }
    )


def _end(run: _Pass, spec: TransientTrainingJobSpec, reading: _Reading, *, failures: int) -> Ended | None:
    """Whether the job succeeds or fails in this pass."""
    lease = run.observed.lease
    end = ending(
        spec,
        holder=reading.holder,
        epoch=reading.epoch,
        renewed=renewed_since_election(lease),
        verdicts=reading.assessed.verdicts,
        failures=failures,
        last_failure=reading.assessed.last_failure,
        progress=reading.progress,
        # the deadline does not run while the job is suspended
        started_at=None if reading.suspension.suspended else parse_time(reading.start_time),
        now=run.now,
        budget=reading.costing.budget,
    )
    suspension = reading.suspension
    resumed = suspension.ever and not suspension.suspended
    if end is None:
        return None
    return Ended(end, _budget_limited(spec), resumed=resumed, deadline=_met(run, spec, reading, end.phase))


def _met(run: _Pass, spec: TransientTrainingJobSpec, reading: _Reading, phase: Phase) -> Standing | None:
    """A job with a deadline that succeeds in this pass met it or missed it."""
    at = deadline_at(spec, parse_time(reading.start_time), run.created)
    if at is None or phase != Phase.SUCCEEDED:
        return None
    state = DeadlineState.MET if run.now <= at else DeadlineState.MISSED
    return Standing(state, f"succeeded at {run.now_text}, deadline {format_time(at)}")


def _budget_limited(spec: TransientTrainingJobSpec) -> bool:
    return spec.budget is not None and spec.budget.max_cost_usd is not None


def _servers(run: _Pass, spec: TransientTrainingJobSpec) -> ParameterServers:
    observed = run.observed
    return parameter_servers(
        run.name,
        spec.parameter_servers.replicas,
        observed.pods,
        run.previous.parameter_server_pods or [],
        nodes=observed.nodes,
        now=run.now,
        node_grace=timedelta(seconds=run.config.node_grace_seconds),
    )


def _deadline(run: _Pass, spec: TransientTrainingJobSpec, reading: _Reading) -> DeadlinePlan:
    return plan_deadline(
        DeadlineInputs(
            spec=spec,
            progress=reading.progress,
            previous=run.previous,
            groups=reading.groups,
            workers=reading.assessed.workers,
            verdicts=reading.assessed.verdicts,
            unavailable=reading.unavailable,
            lease=run.observed.lease,
            holder=reading.holder,
            budget=reading.costing.budget,
            group_prices=reading.costing.group_rates,
            started=parse_time(reading.start_time),
            created=run.created,
            suspended=reading.suspension.suspended,
            now=run.now,
        )
    )


def _slots(run: _Pass, spec: TransientTrainingJobSpec, reading: _Reading, *, catch_up_workers: int) -> WorkerSlots:
    return fill_worker_slots(
        SlotInputs(
            job=run.ref,
            spec=spec,
            workers=reading.assessed.workers,
            verdicts=reading.assessed.verdicts,
            holder=reading.holder,
            budget=reading.costing.budget,
            placement=run.observed.placement,
            groups=with_catch_up_workers(reading.groups, catch_up_workers),
            recorded=run.previous.slot_incarnations or (),
            # a chief that ended without the model leaves its slot to be filled again
            refill_finished=reading.holder_is(PodState.SUCCEEDED) and not reading.has_model,
            suspended=reading.suspension.suspended,
            now=run.now,
            unavailable=reading.unavailable,
            previous_desired=run.previous.workers.desired if run.previous.workers is not None else None,
            extra_allowed=reading.costing.allows_extra,
            group_prices=reading.costing.group_rates,
        )
    )


def _chief(
    run: _Pass,
    spec: TransientTrainingJobSpec,
    reading: _Reading,
    *,
    servers: ParameterServers,
    slots: WorkerSlots,
    stall: Stall,
) -> ChiefPlan:
    observed = run.observed
    return keep_chief(
        ChiefInputs(
            job=run.ref,
            workers=tuple(reading.assessed.workers),
            verdicts=reading.assessed.verdicts,
            nodes=observed.nodes,
            lease=observed.lease,
            holder=reading.holder,
            recorded=run.previous.chief,
            ps_replaced=servers.replaced,
            active=slots.active,
            desired=spec.workers.replicas,
            now=run.now,
            config=run.config,
            stalled=stall.message if stall.replace_chief else "",
            ended_without_model=not reading.has_model,
        )
    )


def _stall(run: _Pass, spec: TransientTrainingJobSpec, reading: _Reading) -> Stall:
    return stall_of(
        spec,
        reading.progress,
        run.previous.chief,
        chief_running=reading.holder_is(PodState.RUNNING) and not reading.suspension.suspended,
        now=run.now,
    )


def _kept_while_suspended(run: _Pass) -> ChiefPlan:
    """No election while suspended: the chief being stopped writes its checkpoint at its own epoch, and the
    chief of the resumed job is elected at a new one."""
    return ChiefPlan(
        chief=run.previous.chief, elections=0, healthy=False, writes=(), events=(), observations=(), wake=None
    )


def _interval(
    run: _Pass, spec: TransientTrainingJobSpec, reading: _Reading, chief: ChiefPlan, slots: WorkerSlots
) -> IntervalPlan:
    chief_pod = chief.chief.pod if chief.chief is not None else None
    observed = run.observed
    return adaptive_checkpoint_interval(
        spec,
        job_name=run.name,
        holder_pod=next((p for p in reading.assessed.workers if name_of(p) == chief_pod), None),
        nodes=observed.nodes,
        lease=observed.lease,
        previous=run.previous.checkpoint_interval,
        now=run.now,
        active_workers=slots.active,
    )


def _situation(run: _Pass, spec: TransientTrainingJobSpec, reading: _Reading, decided: _Decisions) -> InProgress:
    """What the phase and conditions of a job that goes on are derived from."""
    counted, servers, slots, chief = decided.counted, decided.servers, decided.slots, decided.chief
    elections = decided.elections
    if reading.suspension.restarting:
        # a resumed job starts again: what it lost before, and the election after the resume, are no loss
        lost = servers.lost or servers.preemptions + reading.assessed.preemptions + reading.assessed.failures > 0
    else:
        lost = servers.lost or counted.preemptions + counted.failures > 0 or elections > 1
    return InProgress(
        started=elections > 0,
        lost=lost,
        chief=chief.chief,
        chief_healthy=chief.healthy,
        parameter_servers_ready=servers.ready,
        active=slots.active,
        desired=spec.workers.replicas,
        min_replicas=spec.workers.min_replicas,
        unschedulable=slots.unschedulable,
        budget=reading.costing.budget,
        budget_limited=_budget_limited(spec),
        refused=(*run.refused, *refused_creates(run.name, spec.parameter_servers.replicas, run.observed.children)),
        stalled=decided.stall.message,
        suspended=reading.suspension.suspended,
        stopping=reading.suspension.stopping,
        ever_suspended=reading.suspension.ever,
        capacity_fallback=_capacity_fallback(spec, slots),
        fallback_workers=slots.fallback_workers,
        waiting_workers=waiting_workers(reading.assessed.workers, reading.assessed.verdicts),
        waiting_servers=waiting_parameter_servers(run.observed.pods, spec.parameter_servers.replicas),
        deadline=_standing(decided.deadline),
        placement_warnings="; ".join(run.observed.placement.warnings if run.observed.placement else ()),
    )


def _standing(deadline: DeadlinePlan) -> Standing | None:
    status = deadline.status
    return None if status is None else Standing(DeadlineState(status.state), status.message or "")


def _capacity_fallback(spec: TransientTrainingJobSpec, slots: WorkerSlots) -> str | None:
    """The CapacityFallback condition's message: the groups new workers skip, and why ("" for none); None
    without groups."""
    if not spec.workers.groups:
        return None
    return "; ".join(
        f"group {name} skipped since {format_time(mark.since)}: {mark.reason}"
        for name, mark in sorted(slots.unavailable.items())
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
            "deadline": _finished_deadline(counted.deadline, situation.deadline),
        }
    )
    return _plan(run, status, writes=writes, events=[*events, *derived.events, *losses.events], wake=assessed.wake)


def _finished_deadline(status: DeadlineStatus | None, standing: Standing | None) -> DeadlineStatus | None:
    """status.deadline of a job that succeeds in this pass: met or missed, nothing held, no slack to watch."""
    if status is None or standing is None:
        return status
    return status.model_copy(
        update={
            "state": standing.state,
            "catch_up_workers": 0,
            "slack_seconds": None,
            "escalated_at": None,
            "message": standing.message,
        }
    )


def _losses(
    run: _Pass, counted: TransientTrainingJobStatus, assessed: Assessment, servers_lost: Iterable[ServerLoss]
) -> LossAccounting:
    """What this pass's losses cost, and the savings net of all losses so far (:mod:`ttj.planner.stages.losses`)."""
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


def _groups(
    run: _Pass, groups: tuple[Group, ...], slots: WorkerSlots, counted: TransientTrainingJobStatus
) -> list[WorkerGroupStatus] | None:
    before = run.previous.cost
    entries = groups_status(
        groups,
        held=slots.held,
        running=slots.running,
        unavailable=slots.unavailable,
        previous=run.previous.worker_groups or [],
        ledger_before=(before.pods if before is not None else None) or [],
        ledger=(counted.cost.pods if counted.cost is not None else None) or [],
    )
    return with_steps_per_second(entries, group_steps_per_second(run.observed.lease, run.observed.pods))


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
    body = status_body(status.model_copy(update={"observed_generation": run.generation}))
    return Plan(
        writes=list(writes),
        events=[*events, *progress_events(run.previous.progress, status.progress)],
        status=body,
        observations=list(observations),
        delete_job=delete_job,
        requeue_after=_requeue_after(run.now, next_resync(run.now, run.config.resync_seconds, run.ref), wake),
        status_due=status_due(run.seen_status, body, run.now),
    )


#: A status that differs from the one seen only in cost accrued since is written once the cost moved by this
#: much (either figure, in US dollars) ...
COST_WRITE_USD = 0.01
#: ... or the cost seen was accrued this long ago (seconds).
COST_WRITE_SECONDS = 30.0


def status_due(seen: Mapping[str, Any], planned: Mapping[str, Any], now: datetime) -> bool:
    """Whether the planned status is worth writing over the one seen.

    Cost accrues in every pass, so every pass would write: at a preemption, a dozen writes where two say
    something. Only the accrual alone waits for a cent or :data:`COST_WRITE_SECONDS`; every other change
    (a count, a pod entering or leaving the ledger, a rate) is written at once. Nothing is lost by waiting:
    each pass accrues again from the ledger last written and the pods' own start and end times, and asks the
    budget with that exact figure.
    """
    if planned == seen:
        return False
    if without_accruing(TransientTrainingJobStatus, planned) != without_accruing(TransientTrainingJobStatus, seen):
        return True
    before, after = seen.get("cost") or {}, planned.get("cost") or {}
    moved = max(abs(after.get(f, 0.0) - before.get(f, 0.0)) for f in ("usd", "onDemandEquivalentUSD"))
    accrued_at = parse_time(before.get("accruedAt"))
    return moved >= COST_WRITE_USD or accrued_at is None or (now - accrued_at).total_seconds() >= COST_WRITE_SECONDS


def _requeue_after(now: datetime, resync: datetime, moments: Iterable[datetime | None]) -> float:
    """Seconds to the earliest future moment, at most to the job's next resync."""
    at = min([resync, *(m for m in moments if m is not None and m > now)])
    return max(0.0, (at - now).total_seconds())


def next_resync(now: datetime, period_seconds: float, job: JobRef) -> datetime:
    """The job's next timed pass: within one period, at the job's own offset in the period (from its uid). Were
    each timed pass a period after the last pass, the jobs whose passes a burst bunched (a few hundred going
    Running in the same seconds) would keep their timed passes bunched for ever after: at 1,000 jobs, hundreds of
    passes in the same second of every minute, in front of any replacement."""
    if period_seconds <= 0:
        return now
    offset = zlib.crc32((job.uid or f"{job.namespace}/{job.name}").encode()) / 2**32 * period_seconds
    into_period = (now.timestamp() - offset) % period_seconds
    return now + timedelta(seconds=period_seconds - into_period)
