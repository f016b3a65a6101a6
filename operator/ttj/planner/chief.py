"""Keep the chief, or elect one: the Running worker least likely to be preempted, when the holder is
lost or stopped renewing. Also the Lease and chief-label writes that make the choice known, and the
measurement of a handover once the new chief renews."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from ttj.api.models import ChiefStatus
from ttj.planner.actions import EmitEvent, Observation, Write
from ttj.planner.classify import PodState, PodVerdict
from ttj.planner.config import PlannerConfig
from ttj.planner.election import Candidate, choose_chief
from ttj.planner.lease import (
    chief_labels,
    lease_epoch_of,
    lease_expiry,
    lease_spec_of,
    lease_write,
    renew_stamp,
    renewal_observed_at,
    renewed_since_election,
)
from ttj.planner.observed import Obj, meta, name_of, node_name_of, phase_of, slot_of
from ttj_contract import format_micro_time, format_time, parse_time


@dataclass(frozen=True)
class ChiefPlan:
    #: status.chief.
    chief: ChiefStatus | None
    #: Chiefs elected in this pass, an election found only in the Lease included.
    elections: int
    #: The chief runs and holds a live lease (or has just been elected).
    healthy: bool
    #: The Lease, then the chief labels.
    writes: tuple[Write, ...]
    events: tuple[EmitEvent, ...]
    observations: tuple[Observation, ...]
    #: When the holder's lease goes stale.
    wake: datetime | None


@dataclass(frozen=True)
class _Loss:
    since: datetime
    why: str


def keep_chief(
    job: Obj,
    workers: Iterable[Obj],
    verdicts: Mapping[str, PodVerdict],
    nodes: Mapping[str, Obj],
    *,
    lease: Obj | None,
    holder: str | None,
    recorded: ChiefStatus | None,
    ps_replaced: bool,
    active: int,
    desired: int,
    now: datetime,
    config: PlannerConfig,
    stalled: str = "",
    ended_without_model: bool = False,
) -> ChiefPlan:
    """``holder`` is the pod the Lease names (:func:`ttj.planner.lease.lease_holder`), ``recorded`` the chief
    the last written status names; a replaced parameter server (``ps_replaced``) moves the epoch, so the
    chief restores the latest checkpoint. A running holder is replaced too when training has ``stalled``
    (the why, empty when it has not), and a holder that exited 0 when it ``ended_without_model`` (no final
    checkpoint of its epoch reported)."""
    workers = list(workers)
    epoch = max(lease_epoch_of(lease), (recorded or ChiefStatus()).epoch)
    chief, elections = recorded, 0
    events: list[EmitEvent] = []
    adopted = _adopt_unrecorded_election(holder, recorded or ChiefStatus(), lease, verdicts, now)
    if adopted is not None:
        chief, elections = adopted, 1
        events.append(EmitEvent("Normal", "ChiefElected", f"{holder} is chief at epoch {adopted.epoch}"))
    known = chief or ChiefStatus()

    observed_at = renewal_observed_at(lease, recorded, now)
    holder_pod = next((p for p in workers if name_of(p) == holder), None) if holder else None
    loss, wake = _holder_loss(holder, verdicts, lease, config, now=now, observed_at=observed_at, pod=holder_pod)
    if loss is None and holder and stalled:
        loss = _Loss(now, f"chief {holder}: {stalled}")
    holder_verdict = verdicts.get(holder) if holder else None
    if holder_verdict is not None and holder_verdict.state == PodState.SUCCEEDED and ended_without_model:
        loss = _Loss(holder_verdict.since or now, f"chief {holder} exited without a final checkpoint")
    if loss is not None and known.lost_at:
        loss = _Loss(min(loss.since, parse_time(known.lost_at) or loss.since), loss.why)
    candidates = [
        Candidate(pod, nodes.get(node_name_of(pod) or ""), slot_of(pod) or 0)
        for name, pod in sorted({name_of(p): p for p in workers}.items())
        if verdicts[name].state == PodState.RUNNING and not (loss is not None and name == holder)
    ]

    new_holder, elected = holder, False
    observations: tuple[Observation, ...] = ()
    choice = choose_chief(candidates, now) if not holder or loss is not None else None
    if choice is not None:
        new_holder, elected = name_of(choice.pod), True
        elections += 1
        lost_at = format_time(loss.since) if loss is not None else None
        chief = ChiefStatus(pod=new_holder, epoch=epoch + 1, elected_at=format_time(now), lost_at=lost_at)
        events.append(_elected(choice, epoch + 1, loss))
    elif loss is not None:
        # No running worker to take over yet: remember when the chief was lost, elect later.
        lost_at = format_time(loss.since)
        chief = ChiefStatus(pod=known.pod or holder, epoch=epoch, elected_at=known.elected_at, lost_at=lost_at)
    elif ps_replaced:
        chief = ChiefStatus(pod=holder, epoch=epoch + 1, elected_at=known.elected_at, lost_at=known.lost_at)
    elif holder:
        elected_at = known.elected_at or format_time(now)
        kept = ChiefStatus(pod=holder, epoch=epoch, elected_at=elected_at, lost_at=known.lost_at)
        chief, observations = _handover_done(kept, lease, observed_at)
    new_epoch = epoch + 1 if (elected or ps_replaced) and new_holder else epoch

    lease_change = lease_write(
        job,
        lease,
        config,
        now,
        holder_before=holder,
        holder=new_holder,
        epoch=new_epoch,
        elected=elected,
        active=active,
        desired=desired,
    )
    if chief is not None:
        # What the operator saw of the holder's heartbeat, and when (an election writes renewTime itself).
        seen = format_time(now) if elected else format_time(observed_at)
        stamp = format_micro_time(now) if elected else renew_stamp(lease)
        chief = chief.model_copy(update={"renew_time": stamp, "renew_observed_at": seen})
    writes: list[Write] = [lease_change] if lease_change is not None else []
    writes += chief_labels(workers, new_holder)
    verdict = verdicts.get(new_holder) if new_holder else None
    healthy = verdict is not None and verdict.state == PodState.RUNNING and (new_holder != holder or loss is None)
    return ChiefPlan(chief, elections, healthy, tuple(writes), tuple(events), observations, wake)


def _adopt_unrecorded_election(
    holder: str | None, recorded: ChiefStatus, lease: Obj | None, verdicts: Mapping[str, PodVerdict], now: datetime
) -> ChiefStatus | None:
    """The Lease moved but the status never said so (the operator stopped between the two writes): adopt
    that election, so it is counted once and the handover is still measured."""
    lease_epoch = lease_epoch_of(lease)
    if not holder or holder == recorded.pod or lease_epoch <= recorded.epoch:
        return None
    acquired = parse_time(lease_spec_of(lease).get("acquireTime"))
    lost_at = recorded.lost_at
    if recorded.pod and not lost_at:
        old = verdicts.get(recorded.pod)
        since = old.since if old is not None and old.lost else None
        lost_at = format_time(since or acquired or now)
    return ChiefStatus(pod=holder, epoch=lease_epoch, elected_at=format_time(acquired or now), lost_at=lost_at)


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
    if phase_of(pod) != "Running" or any(
        "terminated" in (status.get("state") or {})
        for status in (pod.get("status") or {}).get("containerStatuses") or []
    ):
        return None
    deleting = parse_time(meta(pod).get("deletionTimestamp"))
    grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
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
