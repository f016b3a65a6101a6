"""The job's phase and conditions, derived from what a pass found by one rule table.

A pass ends in one of four situations: the spec is invalid, the job had already finished, it finishes
now, or it is in progress. :data:`CONDITION_RULES` says, for each :class:`ConditionType` in the order
status lists them, what the condition is in each situation (or that it is absent); :func:`phase_of` says
the :class:`Phase`. :func:`derive` applies both and names the events the changes raise.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from ttj.api.models import ChiefStatus, Condition, ConditionType, Phase, Reason
from ttj.cost.budget import BudgetDecision
from ttj.deadline.policy import DeadlineState
from ttj.planner.actions import EmitEvent, Refusal

TERMINAL = frozenset({Phase.SUCCEEDED, Phase.FAILED})


# -- the situations ------------------------------------------------------------------------------
@dataclass(frozen=True)
class InvalidSpec:
    """The spec cannot be acted on; the job fails unless it had already finished."""

    message: str
    previous_phase: Phase | None


@dataclass(frozen=True)
class Finished:
    """The job had succeeded or failed before this pass: its phase and conditions stay."""

    phase: Phase


@dataclass(frozen=True)
class Ending:
    """The job finishes in this pass."""

    phase: Literal[Phase.SUCCEEDED, Phase.FAILED]
    reason: Reason
    message: str


@dataclass(frozen=True)
class Standing:
    """Where a job with spec.deadline stands (status.deadline), for its DeadlineAtRisk condition."""

    state: DeadlineState
    message: str


@dataclass(frozen=True)
class Ended:
    ending: Ending
    #: The spec sets budget.maxCostUSD.
    budget_limited: bool
    #: The job was suspended before and has been resumed: its Suspended condition stays False, as batch/v1's.
    resumed: bool = False
    #: With spec.deadline: met or missed.
    deadline: Standing | None = None


@dataclass(frozen=True)
class InProgress:
    """The job trains, waits or recovers."""

    #: A chief was ever elected.
    started: bool
    #: Something the job had was lost since it started: a worker or parameter server (preempted or
    #: failed) or a chief. Until then a job short of its workers is starting, not recovering.
    lost: bool
    chief: ChiefStatus | None
    chief_healthy: bool
    parameter_servers_ready: bool
    active: int
    desired: int
    min_replicas: int
    #: Why workers cannot be placed, empty when they can.
    unschedulable: str
    budget: BudgetDecision | None
    budget_limited: bool
    #: Writes of this pass the API refused (quota, admission, validation); empty when all went through.
    refused: tuple[Refusal, ...] = ()
    #: Why training is stalled (the global step stood still past spec.progress), empty when it is not.
    stalled: str = ""
    #: spec.suspend is true.
    suspended: bool = False
    #: While suspended: worker pods still stopping (the chief writing its checkpoint).
    stopping: int = 0
    #: The job has been suspended at some time (its Suspended condition stays, False once resumed).
    ever_suspended: bool = False
    #: With worker groups: which groups new workers skip for want of capacity, in words ("" when none); None
    #: for a job without groups.
    capacity_fallback: str | None = None
    #: With worker groups: the running workers, the chief aside, in a less preferred group than one with room, in
    #: words ("" when none).
    fallback_workers: str = ""
    #: The workers alive but not running yet, and the parameter servers without a running pod, in words (see
    #: :mod:`ttj.planner.stages.waiting`); "" when none.
    waiting_workers: str = ""
    waiting_servers: str = ""
    #: With spec.deadline, once a step rate is known: where the job stands.
    deadline: Standing | None = None
    #: What the node pools cannot give the job though it can run (fewer workers than its slots), in words.
    placement_warnings: str = ""

    @property
    def training(self) -> bool:
        return self.started and self.chief_healthy and self.parameter_servers_ready and self.active >= self.min_replicas

    @property
    def whole(self) -> bool:
        return self.active >= self.desired and self.chief_healthy and self.parameter_servers_ready


Situation = InvalidSpec | Finished | Ended | InProgress


def phase_of(situation: Situation) -> Phase | None:
    match situation:
        case InvalidSpec(previous_phase=previous):
            return previous if previous in TERMINAL else Phase.FAILED
        case Finished(phase=phase):
            return phase
        case Ended(ending=ending):
            return ending.phase
        case InProgress():
            if situation.suspended:
                return Phase.SUSPENDED
            if not situation.started:
                return Phase.PENDING
            if situation.whole:
                return Phase.RUNNING
            if not situation.lost:
                return Phase.RUNNING if situation.training else Phase.PENDING
            return Phase.RECOVERING


# -- the rule table --------------------------------------------------------------------------------
#: A condition as a rule finds it: whether it holds, why, and in words.
Holds = tuple[bool, Reason, str]


@dataclass(frozen=True)
class Wanted:
    """A condition as a situation wants it."""

    type: ConditionType
    status: Literal["True", "False"]
    reason: Reason
    message: str = ""


@dataclass(frozen=True)
class Rule:
    #: The condition in a situation, or None when the condition is absent.
    of: Callable[[Situation], Holds | None]
    #: Whether its turning True (or changing reason while True) is a Warning event rather than Normal.
    warns: bool
    #: Whether its changes raise an Event here; False when the stage that causes the change posts a
    #: fuller one itself (an election's Event names the chief, the epoch and why).
    evented: bool = True


def _invalid(s: Situation) -> Holds | None:
    return (True, Reason.INVALID_SPEC, s.message) if isinstance(s, InvalidSpec) else None


def _created(s: Situation) -> Holds | None:
    if isinstance(s, InProgress):
        return True, Reason.CHILDREN_CREATED, s.placement_warnings
    return (True, Reason.CHILDREN_CREATED, "") if isinstance(s, Ended) else None


def _running(s: Situation) -> Holds | None:
    if not isinstance(s, InProgress):
        return None
    if s.suspended:
        return False, Reason.SUSPENDED, "spec.suspend is true"
    if s.training:
        return True, Reason.TRAINING, f"{s.active}/{s.desired} workers"
    if not s.started:
        return False, Reason.WORKERS_UNSCHEDULABLE if s.unschedulable else Reason.WAITING_FOR_WORKERS, s.unschedulable
    if s.active < s.min_replicas:
        reason = Reason.BELOW_MIN_REPLICAS
    elif not s.chief_healthy:
        reason = Reason.WAITING_FOR_CHIEF
    else:
        reason = Reason.WAITING_FOR_PARAMETER_SERVERS
    return False, reason, f"{s.active} active, at least {s.min_replicas} needed"


def _recovering(s: Situation) -> Holds | None:
    if not isinstance(s, InProgress) or not s.started:
        return None
    if s.suspended:
        return False, Reason.SUSPENDED, "spec.suspend is true"
    if s.whole:
        return False, Reason.AT_DESIRED_WORKERS, ""
    if not s.lost:
        return False, Reason.STARTING, _starting(s)
    if not s.parameter_servers_ready:
        servers = f": {s.waiting_servers}" if s.waiting_servers else ""
        return True, Reason.PARAMETER_SERVER_LOST, f"waiting for the parameter servers to run again{servers}"
    if not s.chief_healthy:
        return True, Reason.CHIEF_LOST, "waiting for a running worker to become chief"
    if s.unschedulable:
        return True, Reason.WORKERS_UNSCHEDULABLE, s.unschedulable
    workers = f"; waiting for {s.waiting_workers}" if s.waiting_workers else ""
    return True, Reason.WORKERS_LOST, f"{s.active}/{s.desired} workers active{workers}"


def _starting(s: InProgress) -> str:
    waiting = [f"{s.active}/{s.desired} workers active"]
    if s.unschedulable:
        waiting.append(s.unschedulable)
    if not s.parameter_servers_ready:
        waiting.append("waiting for the parameter servers to start")
    if not s.chief_healthy:
        waiting.append("waiting for the chief to start")
    return "; ".join(waiting)


def _chief_elected(s: Situation) -> Holds | None:
    if not isinstance(s, InProgress):
        return None
    if s.suspended:
        return False, Reason.SUSPENDED, "spec.suspend is true: no chief until the job resumes"
    if s.chief is not None and s.chief.pod and s.chief_healthy:
        return True, Reason.ELECTED, f"chief {s.chief.pod} at epoch {s.chief.epoch}"
    return False, Reason.CHIEF_LOST if s.started else Reason.NO_RUNNING_WORKERS, ""


def _budget_exceeded(s: Situation) -> Holds | None:
    if isinstance(s, Ended):
        if not s.budget_limited:
            return None
        if s.ending.reason == Reason.BUDGET_EXCEEDED:
            return True, Reason.BUDGET_EXCEEDED, s.ending.message
        return False, Reason.WITHIN_BUDGET, ""
    if not isinstance(s, InProgress):
        return None
    if s.budget is not None and s.budget.exceeded:
        return True, Reason.BUDGET_EXCEEDED, s.budget.message
    if s.budget is not None and s.budget.message:
        return False, Reason.SCALE_OUT_LIMITED, s.budget.message
    return (False, Reason.WITHIN_BUDGET, "") if s.budget_limited else None


def _stalled(s: Situation) -> Holds | None:
    if not isinstance(s, InProgress) or not s.started:
        return None
    if s.stalled:
        return True, Reason.PROGRESS_STALLED, s.stalled
    return False, Reason.PROGRESSING, ""


def _suspended(s: Situation) -> Holds | None:
    resumed = (False, Reason.RESUMED, "spec.suspend is false: training resumes from the latest checkpoint")
    if isinstance(s, Ended) and s.resumed:
        return resumed
    if not isinstance(s, InProgress) or not s.ever_suspended:
        return None
    if not s.suspended:
        return resumed
    if s.stopping:
        return True, Reason.SUSPENDED, f"stopping {s.stopping} worker pod(s); the chief writes a checkpoint first"
    return True, Reason.SUSPENDED, "no pods run: no worker, and the parameter servers scaled to 0"


def _capacity_fallback(s: Situation) -> Holds | None:
    if not isinstance(s, InProgress) or s.capacity_fallback is None:
        return None
    if s.capacity_fallback:
        more = f"; {s.fallback_workers}" if s.fallback_workers else ""
        return True, Reason.GROUP_CAPACITY_UNAVAILABLE, s.capacity_fallback + more
    if s.fallback_workers:
        return True, Reason.FALLBACK_WORKERS, s.fallback_workers
    return False, Reason.PREFERRED_GROUPS, "no worker group is skipped for want of capacity"


_DEADLINE_REASONS = {
    DeadlineState.ON_TRACK: Reason.ON_TRACK,
    DeadlineState.AT_RISK: Reason.BEHIND_UNIFORM_PROGRESS,
    DeadlineState.INFEASIBLE: Reason.DEADLINE_INFEASIBLE,
    DeadlineState.MET: Reason.DEADLINE_MET,
    DeadlineState.MISSED: Reason.DEADLINE_MISSED,
}


def _deadline_at_risk(s: Situation) -> Holds | None:
    standing = s.deadline if isinstance(s, Ended | InProgress) else None
    if standing is None:
        return None
    at_risk = standing.state in (DeadlineState.AT_RISK, DeadlineState.INFEASIBLE)
    return at_risk, _DEADLINE_REASONS[DeadlineState(standing.state)], standing.message


def _succeeded(s: Situation) -> Holds | None:
    if isinstance(s, Ended) and s.ending.phase == Phase.SUCCEEDED:
        return True, s.ending.reason, s.ending.message
    return None


def _failed(s: Situation) -> Holds | None:
    if isinstance(s, InvalidSpec):
        return True, Reason.INVALID_SPEC, s.message
    if isinstance(s, Ended) and s.ending.phase == Phase.FAILED:
        return True, s.ending.reason, s.ending.message
    return None


#: How many refused writes a ReplicaFailure message quotes; the count says how many more there were.
QUOTED_REFUSALS = 2
_REFUSAL_REASONS = {"create": Reason.FAILED_CREATE, "delete": Reason.FAILED_DELETE}


def _replica_failure(s: Situation) -> Holds | None:
    if not isinstance(s, InProgress) or not s.refused:
        return None
    first = s.refused[0]
    quoted = "; ".join(f"{r.verb} {r.kind} {r.name}: {r.message}" for r in s.refused[:QUOTED_REFUSALS])
    more = f" ({len(s.refused)} writes refused)" if len(s.refused) > QUOTED_REFUSALS else ""
    return True, _REFUSAL_REASONS.get(first.verb, Reason.FAILED_UPDATE), quoted + more


#: Every condition the operator sets, in the order status lists them.
CONDITION_RULES: dict[ConditionType, Rule] = {
    ConditionType.INVALID: Rule(_invalid, warns=True),
    ConditionType.CREATED: Rule(_created, warns=False),
    ConditionType.RUNNING: Rule(_running, warns=False),
    ConditionType.RECOVERING: Rule(_recovering, warns=True),
    ConditionType.CHIEF_ELECTED: Rule(_chief_elected, warns=False, evented=False),
    ConditionType.BUDGET_EXCEEDED: Rule(_budget_exceeded, warns=True),
    ConditionType.STALLED: Rule(_stalled, warns=True),
    ConditionType.SUSPENDED: Rule(_suspended, warns=False),
    # the slots stage posts the Event, naming the slot, the group it left, why, and the group it went to
    ConditionType.CAPACITY_FALLBACK: Rule(_capacity_fallback, warns=True, evented=False),
    # the deadline stage posts DeadlineEscalated, DeadlineReleased and DeadlineInfeasible, with the numbers
    ConditionType.DEADLINE_AT_RISK: Rule(_deadline_at_risk, warns=True, evented=False),
    ConditionType.SUCCEEDED: Rule(_succeeded, warns=False),
    ConditionType.FAILED: Rule(_failed, warns=True),
    ConditionType.REPLICA_FAILURE: Rule(_replica_failure, warns=True),
}

#: Reasons raised as a Warning event on every change, even while their condition is False.
ALWAYS_WARN = frozenset({Reason.WORKERS_UNSCHEDULABLE})
#: Reasons raised as a Normal event when they appear, even while their condition is False.
ANNOUNCED = frozenset({Reason.STARTING, Reason.RESUMED})


def wanted_conditions(situation: Situation) -> list[Wanted]:
    wanted = []
    for type_, rule in CONDITION_RULES.items():
        found = rule.of(situation)
        if found is not None:
            status, reason, message = found
            wanted.append(Wanted(type_, "True" if status else "False", reason, message))
    return wanted


# -- applying them ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Derived:
    phase: Phase | None
    conditions: list[Condition] | None
    events: tuple[EmitEvent, ...]


def derive(situation: Situation, previous: list[Condition] | None, now: str, generation: int | None) -> Derived:
    """The phase, the new condition list and the events its changes raise."""
    if isinstance(situation, Finished):
        return Derived(situation.phase, previous, ())
    wanted = wanted_conditions(situation)
    conditions, changed = set_conditions(previous, wanted, now, generation)
    return Derived(phase_of(situation), conditions, tuple(_events(changed)))


def _events(changed: Sequence[Wanted]) -> list[EmitEvent]:
    events = []
    for change in changed:
        rule = CONDITION_RULES[change.type]
        if not rule.evented or (change.status != "True" and change.reason not in ALWAYS_WARN | ANNOUNCED):
            continue
        warning = change.reason in ALWAYS_WARN or (change.status == "True" and rule.warns)
        events.append(
            EmitEvent("Warning" if warning else "Normal", change.reason.value, change.message or change.type.value)
        )
    return events


def set_conditions(
    previous: list[Condition] | None, wanted: list[Wanted], now: str, generation: int | None
) -> tuple[list[Condition], list[Wanted]]:
    """The new condition list and the conditions that changed (status or reason).

    ``lastTransitionTime`` moves only when the status flips; conditions not wanted any more are
    dropped. A message-only change updates the message without being a transition.
    """
    before = {c.type: c for c in previous or []}
    result: list[Condition] = []
    changed: list[Wanted] = []
    for want in wanted:
        old = before.get(want.type)
        if old is None or old.status != want.status:
            since: str | None = now
            changed.append(want)
        else:
            since = old.last_transition_time
            if old.reason != want.reason:
                changed.append(want)
        result.append(
            Condition(
                type=want.type,
                status=want.status,
                reason=want.reason,
                message=want.message,
                last_transition_time=since,
                observed_generation=generation,
            )
        )
    return result, changed
