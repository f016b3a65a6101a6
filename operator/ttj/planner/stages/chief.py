"""Keep the chief, or elect one: the Running worker least likely to be preempted, when the holder is
lost or stopped renewing. Also the Lease and chief-label writes that make the choice known, and the
measurement of a handover once the new chief renews.

Only the operator elects. The chief is the one the job's status records (:func:`operators_chief`); the
trainers may patch the whole Lease (RBAC cannot limit a patch to fields), so a holder in the Lease that
the status does not record is someone else's change: it is refused, the operator's choice is written back
at a new epoch (which fences the usurper's), and a Warning Event names both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from ttj.api.models import ChiefStatus, JobRef
from ttj.planner.actions import EmitEvent, Observation, Write
from ttj.planner.classify import PodState, PodVerdict
from ttj.planner.config import PlannerConfig
from ttj.planner.election import Candidate, choose_chief
from ttj.planner.lease import (
    chief_labels,
    lease_epoch_of,
    lease_expiry,
    lease_write,
    renew_stamp,
    renewal_observed_at,
    renewed_since_election,
)
from ttj.planner.observed import (
    Obj,
    container_statuses,
    lease_spec,
    meta,
    name_of,
    node_name_of,
    phase_of,
    pod_spec,
    slot_of,
)
from ttj_contract import format_micro_time, format_time, parse_time


@dataclass(frozen=True)
class ChiefInputs:
    """What the chief stage reads: the job's workers and their verdicts, the Lease, the status's chief."""

    job: JobRef
    workers: tuple[Obj, ...]
    verdicts: Mapping[str, PodVerdict]
    nodes: Mapping[str, Obj]
    lease: Obj | None
    #: The operator's chief (:func:`operators_chief`; the status's when the Lease is gone).
    holder: str | None
    #: The chief the last written status names.
    recorded: ChiefStatus | None
    #: A parameter server was replaced: the epoch moves, so the chief restores the latest checkpoint.
    ps_replaced: bool
    active: int
    desired: int
    now: datetime
    config: PlannerConfig
    #: Why training has stalled (a running holder is then replaced too); empty when it has not.
    stalled: str = ""
    #: No final checkpoint of the holder's epoch was reported: a holder that exited 0 is lost.
    ended_without_model: bool = False


@dataclass(frozen=True)
class ChiefPlan:
    #: status.chief.
    chief: ChiefStatus | None
    #: Chiefs elected in this pass, an election found only in the Lease included.
    elections: int
    #: The chief runs and holds a live lease (or has just been elected).
    healthy: bool
    #: The Lease, then the chief labels that name the chief.
    writes: tuple[Write, ...]
    events: tuple[EmitEvent, ...]
    observations: tuple[Observation, ...]
    #: When the holder's lease goes stale.
    wake: datetime | None
    #: The chief label off stopped pods: due, but after the replacements.
    tidying: tuple[Write, ...] = ()


def operators_chief(recorded: ChiefStatus | None) -> str | None:
    """The chief the operator elected, as the job's status records it; None before the first election."""
    return recorded.pod if recorded is not None and recorded.epoch > 0 and recorded.pod else None


@dataclass(frozen=True)
class _Loss:
    since: datetime
    why: str


@dataclass(frozen=True)
class _Standing:
    """Whether the chief is lost (and since when), when its lease goes stale, and who could take over."""

    loss: _Loss | None
    wake: datetime | None
    candidates: list[Candidate]


@dataclass(frozen=True)
class _Holding:
    """Who holds the chief's role before this pass decides: the operator's chief, or an election of its own
    that only the Lease recorded (adopted)."""

    #: The holder the Lease names (the operator's chief when there is no Lease).
    in_lease: str | None
    holder: str | None
    chief: ChiefStatus | None
    #: 1 when an election found only in the Lease is adopted.
    elections: int
    standing: _Standing
    events: tuple[EmitEvent, ...]


@dataclass(frozen=True)
class _Decision:
    """The chief after this pass: kept, elected, lost with none to take over, or moved to a new epoch."""

    chief: ChiefStatus | None
    holder: str | None
    elected: bool
    events: tuple[EmitEvent, ...] = ()
    observations: tuple[Observation, ...] = ()


def keep_chief(given: ChiefInputs) -> ChiefPlan:
    """Keep the chief or elect one. A holder in the Lease other than ``given.holder`` is refused and
    ``given.holder`` restored at a new epoch; a replaced parameter server moves the epoch; a running holder is
    replaced when training has stalled, and a holder that exited 0 when it ended without a final checkpoint."""
    epoch = max(lease_epoch_of(given.lease), (given.recorded or ChiefStatus()).epoch)
    observed_at = renewal_observed_at(given.lease, given.recorded, given.now)
    holding = _holding(given, observed_at)
    usurped = holding.in_lease != holding.holder
    refusal = _refusal(holding, given.lease) if usurped else None
    decision = _decide(given, holding, epoch, observed_at, usurped=usurped)
    new_epoch = epoch + 1 if (decision.elected or given.ps_replaced or usurped) and decision.holder else epoch
    lease_change = lease_write(
        given.job,
        given.lease,
        given.config,
        given.now,
        holder_before=holding.in_lease,
        holder=decision.holder,
        epoch=new_epoch,
        elected=decision.elected,
        active=given.active,
        desired=given.desired,
    )
    naming, tidying = chief_labels(given.workers, decision.holder)
    writes = [*([lease_change] if lease_change is not None else []), *naming]
    verdict = given.verdicts.get(decision.holder) if decision.holder else None
    loss = holding.standing.loss
    healthy = (
        verdict is not None
        and verdict.state == PodState.RUNNING
        and (decision.holder != holding.holder or loss is None)
    )
    return ChiefPlan(
        _stamped(decision, given.lease, given.now, observed_at),
        holding.elections + int(decision.elected),
        healthy,
        tuple(writes),
        (*holding.events, *((refusal,) if refusal is not None else ()), *decision.events),
        decision.observations,
        holding.standing.wake,
        tuple(tidying),
    )


def _holding(given: ChiefInputs, observed_at: datetime) -> _Holding:
    """The operator's chief, unless the Lease holds an election the operator made and did not record."""
    lease, holder = given.lease, given.holder
    in_lease: str | None = lease_spec(lease).get("holderIdentity") if lease is not None else holder
    standing = _standing(given, holder, given.recorded, observed_at)
    if (
        in_lease
        and in_lease != holder
        and _own_unrecorded_election(
            in_lease,
            holder,
            loss=standing.loss,
            candidates=standing.candidates,
            lease=lease,
            recorded=given.recorded,
            now=given.now,
        )
    ):
        # The operator elected in_lease and stopped before its status said so: that election stands.
        adopted = _adopted(in_lease, given.recorded or ChiefStatus(), lease, standing.loss, given.now)
        event = EmitEvent("Normal", "ChiefElected", f"{in_lease} is chief at epoch {adopted.epoch}")
        return _Holding(in_lease, in_lease, adopted, 1, _standing(given, in_lease, adopted, observed_at), (event,))
    return _Holding(in_lease, holder, given.recorded, 0, standing, ())


def _refusal(holding: _Holding, lease: Obj | None) -> EmitEvent:
    holder = holding.holder
    return EmitEvent(
        "Warning",
        "ChiefChangeRefused",
        f"the Lease names {holding.in_lease or 'no chief'} at epoch {lease_epoch_of(lease)}, a change the operator "
        "did not make; only the operator elects: "
        + (f"{holder} stays chief at a new epoch" if holder else "it elects the chief itself"),
    )


def _decide(given: ChiefInputs, holding: _Holding, epoch: int, observed_at: datetime, *, usurped: bool) -> _Decision:
    holder, known, loss = holding.holder, holding.chief or ChiefStatus(), holding.standing.loss
    choice = choose_chief(holding.standing.candidates, given.now) if not holder or loss is not None else None
    if choice is not None:
        elected = name_of(choice.pod)
        lost_at = format_time(loss.since) if loss is not None else None
        chief = ChiefStatus(pod=elected, epoch=epoch + 1, elected_at=format_time(given.now), lost_at=lost_at)
        return _Decision(chief, elected, True, events=(_elected(choice, epoch + 1, loss),))
    if loss is not None:
        # No running worker to take over yet: remember when the chief was lost, elect later.
        lost_at = format_time(loss.since)
        chief = ChiefStatus(pod=known.pod or holder, epoch=epoch, elected_at=known.elected_at, lost_at=lost_at)
        return _Decision(chief, holder, False)
    if given.ps_replaced or (usurped and holder):
        chief = ChiefStatus(pod=holder, epoch=epoch + 1, elected_at=known.elected_at, lost_at=known.lost_at)
        return _Decision(chief, holder, False)
    if holder:
        elected_at = known.elected_at or format_time(given.now)
        kept = ChiefStatus(pod=holder, epoch=epoch, elected_at=elected_at, lost_at=known.lost_at)
        chief, observations = _handover_done(kept, given.lease, observed_at)
        return _Decision(chief, holder, False, observations=observations)
    return _Decision(holding.chief, holder, False)


def _stamped(decision: _Decision, lease: Obj | None, now: datetime, observed_at: datetime) -> ChiefStatus | None:
    """What the operator saw of the holder's heartbeat, and when (an election writes renewTime itself)."""
    if decision.chief is None:
        return None
    seen = format_time(now) if decision.elected else format_time(observed_at)
    stamp = format_micro_time(now) if decision.elected else renew_stamp(lease)
    return decision.chief.model_copy(update={"renew_time": stamp, "renew_observed_at": seen})


def _standing(given: ChiefInputs, holder: str | None, chief: ChiefStatus | None, observed_at: datetime) -> _Standing:
    verdicts, now = given.verdicts, given.now
    holder_pod = next((p for p in given.workers if name_of(p) == holder), None) if holder else None
    loss, wake = _holder_loss(
        holder, verdicts, given.lease, given.config, now=now, observed_at=observed_at, pod=holder_pod
    )
    if loss is None and holder and given.stalled:
        loss = _Loss(now, f"chief {holder}: {given.stalled}")
    holder_verdict = verdicts.get(holder) if holder else None
    if holder_verdict is not None and holder_verdict.state == PodState.SUCCEEDED and given.ended_without_model:
        loss = _Loss(holder_verdict.since or now, f"chief {holder} exited without a final checkpoint")
    lost_at = (chief or ChiefStatus()).lost_at
    if loss is not None and lost_at:
        loss = _Loss(min(loss.since, parse_time(lost_at) or loss.since), loss.why)
    candidates = [
        Candidate(pod, given.nodes.get(node_name_of(pod) or ""), slot_of(pod) or 0)
        for name, pod in sorted({name_of(p): p for p in given.workers}.items())
        if verdicts[name].state == PodState.RUNNING and not (loss is not None and name == holder)
    ]
    return _Standing(loss, wake, candidates)


def _own_unrecorded_election(
    in_lease: str,
    holder: str | None,
    *,
    loss: _Loss | None,
    candidates: list[Candidate],
    lease: Obj | None,
    recorded: ChiefStatus | None,
    now: datetime,
) -> bool:
    """Whether the Lease holds the election the operator makes now: one was due (no chief, or the chief is
    lost), it picks ``in_lease``, and the Lease moved exactly one epoch past the status. A pod that wrote
    this itself changed nothing the operator would not have done."""
    if holder and loss is None:
        return False
    if lease_epoch_of(lease) != (recorded or ChiefStatus()).epoch + 1:
        return False
    choice = choose_chief(candidates, now)
    return choice is not None and name_of(choice.pod) == in_lease


def _adopted(holder: str, recorded: ChiefStatus, lease: Obj | None, loss: _Loss | None, now: datetime) -> ChiefStatus:
    acquired = parse_time(lease_spec(lease).get("acquireTime"))
    lost_at = recorded.lost_at or (format_time(loss.since) if loss is not None else None)
    return ChiefStatus(
        pod=holder, epoch=lease_epoch_of(lease), elected_at=format_time(acquired or now), lost_at=lost_at
    )


def _holder_loss(
    holder: str | None,
    verdicts: Mapping[str, PodVerdict],
    lease: Obj | None,
    config: PlannerConfig,
    *,
    now: datetime,
    observed_at: datetime,
    pod: Obj | None = None,
) -> tuple[_Loss | None, datetime | None]:
    """Whether (and since when) the holder is lost or stopped renewing; else when its lease goes stale.

    A holder being stopped gracefully (preempted or deleted, its container still running on a live node)
    is not lost yet: it is writing its SIGTERM checkpoint, which fencing would refuse were another chief
    named now. It stays chief until its container ends, its lease goes stale, or its grace period ends."""
    if not holder:
        return None, None
    verdict = verdicts.get(holder)
    draining_until = _draining_until(pod, verdict)
    if draining_until is not None and now < draining_until:
        stale_at = lease_expiry(lease, config, observed_at)
        if stale_at is not None and now >= stale_at:
            return _Loss(stale_at, f"chief {holder} stopped renewing the lease while stopping"), None
        return None, min([draining_until, *([stale_at] if stale_at is not None else [])])
    if verdict is None or verdict.lost or verdict.state == PodState.RELEASED:
        why = f"chief {holder} lost" + (f": {verdict.message}" if verdict and verdict.message else "")
        return _Loss((verdict.since if verdict else None) or now, why), None
    if verdict.state != PodState.RUNNING:
        return None, None
    stale_at = lease_expiry(lease, config, observed_at)
    if stale_at is not None and now >= stale_at:
        return _Loss(stale_at, f"chief {holder} stopped renewing the lease"), None
    return None, stale_at


def _draining_until(pod: Obj | None, verdict: PodVerdict | None) -> datetime | None:
    """When the grace period of a holder that is stopping gracefully ends; None unless it is doing so now."""
    if pod is None or verdict is None or verdict.state != PodState.PREEMPTED or verdict.force_delete:
        return None
    if phase_of(pod) != "Running" or any("terminated" in status.get("state", {}) for status in container_statuses(pod)):
        return None
    deleting = parse_time(meta(pod).get("deletionTimestamp"))
    grace = pod_spec(pod).get("terminationGracePeriodSeconds")
    started = verdict.since
    if deleting is not None:
        return deleting  # the API sets it to the deletion time plus the grace period
    if started is not None:
        return started + timedelta(seconds=int(grace if grace is not None else 30))
    return None


def _elected(choice: Candidate, epoch: int, loss: _Loss | None) -> EmitEvent:
    node = node_name_of(choice.pod) or "?"
    message = f"{name_of(choice.pod)} (slot {choice.slot}, node {node}) is chief at epoch {epoch}"
    return EmitEvent("Normal", "ChiefElected", message + (f"; {loss.why}" if loss is not None else ""))


def _handover_done(
    chief: ChiefStatus, lease: Obj | None, observed_at: datetime
) -> tuple[ChiefStatus, tuple[Observation, ...]]:
    """The new chief renewed its lease: the handover is over; measure it, on the operator's clock."""
    lost = parse_time(chief.lost_at)
    if lost is None or not renewed_since_election(lease):
        return chief, ()
    seconds = max(0.0, (observed_at - lost).total_seconds())
    return chief.model_copy(update={"lost_at": None}), (Observation("chief_handover_seconds", seconds),)
