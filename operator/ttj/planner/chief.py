"""Keep the chief, or elect one: the Running worker least likely to be preempted, when the holder is
lost or stopped renewing. Also the Lease and chief-label writes that make the choice known, and the
measurement of a handover once the new chief renews.

Only the operator elects. The chief is the one the job's status records (:func:`operators_chief`); the
trainers may patch the whole Lease (RBAC cannot limit a patch to fields), so a holder in the Lease that
the status does not record is someone else's change: it is refused, the operator's choice is written back
at a new epoch (which fences the usurper's), and a Warning Event names both.
"""

from __future__ import annotations

import functools
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


def operators_chief(recorded: ChiefStatus | None) -> str | None:
    """The chief the operator elected, as the job's status records it; None before the first election."""
    return recorded.pod if recorded is not None and recorded.epoch > 0 and recorded.pod else None


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
    """``holder`` is the operator's chief (:func:`operators_chief`; the status's when the Lease is gone),
    ``recorded`` the chief the last written status names; a replaced parameter server (``ps_replaced``)
    moves the epoch, so the chief restores the latest checkpoint. A holder in the Lease other than
    ``holder`` is refused and ``holder`` restored at a new epoch. A running holder is replaced too when
    training has ``stalled`` (the why, empty when it has not), and a holder that exited 0 when it
    ``ended_without_model`` (no final checkpoint of its epoch reported)."""
    workers = list(workers)
    epoch = max(lease_epoch_of(lease), (recorded or ChiefStatus()).epoch)
    chief, elections = recorded, 0
    events: list[EmitEvent] = []
    in_lease: str | None = lease_spec_of(lease).get("holderIdentity") if lease is not None else holder
    observed_at = renewal_observed_at(lease, recorded, now)
    standing = functools.partial(
        _standing,
        workers=workers,
        verdicts=verdicts,
        nodes=nodes,
        lease=lease,
        config=config,
        now=now,
        observed_at=observed_at,
        stalled=stalled,
        ended_without_model=ended_without_model,
    )
    loss, wake, candidates = standing(holder, chief=chief)
    if (
        in_lease
        and in_lease != holder
        and _own_unrecorded_election(
            in_lease, holder, loss=loss, candidates=candidates, lease=lease, recorded=recorded, now=now
        )
    ):
        # The operator elected in_lease and stopped before its status said so: that election stands.
        chief, elections, holder = _adopted(in_lease, recorded or ChiefStatus(), lease, loss, now), 1, in_lease
        events.append(EmitEvent("Normal", "ChiefElected", f"{in_lease} is chief at epoch {chief.epoch}"))
        loss, wake, candidates = standing(holder, chief=chief)
    usurped = in_lease != holder
    if usurped:
        events.append(
            EmitEvent(
                "Warning",
                "ChiefChangeRefused",
                f"the Lease names {in_lease or 'no chief'} at epoch {lease_epoch_of(lease)}, a change the operator "
                "did not make; only the operator elects: "
                + (f"{holder} stays chief at a new epoch" if holder else "it elects the chief itself"),
            )
        )
    known = chief or ChiefStatus()

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
    elif ps_replaced or (usurped and holder):
        chief = ChiefStatus(pod=holder, epoch=epoch + 1, elected_at=known.elected_at, lost_at=known.lost_at)
    elif holder:
        elected_at = known.elected_at or format_time(now)
        kept = ChiefStatus(pod=holder, epoch=epoch, elected_at=elected_at, lost_at=known.lost_at)
        chief, observations = _handover_done(kept, lease, observed_at)
    new_epoch = epoch + 1 if (elected or ps_replaced or usurped) and new_holder else epoch

    lease_change = lease_write(
        job,
        lease,
        config,
        now,
        holder_before=in_lease,
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


def _standing(
    holder: str | None,
    *,
    workers: list[Obj],
    verdicts: Mapping[str, PodVerdict],
    nodes: Mapping[str, Obj],
    lease: Obj | None,
    config: PlannerConfig,
    now: datetime,
    observed_at: datetime,
    stalled: str,
    ended_without_model: bool,
    chief: ChiefStatus | None,
) -> tuple[_Loss | None, datetime | None, list[Candidate]]:
    """Whether the chief is lost (and since when), when its lease goes stale, and who could take over."""
    holder_pod = next((p for p in workers if name_of(p) == holder), None) if holder else None
    loss, wake = _holder_loss(holder, verdicts, lease, config, now=now, observed_at=observed_at, pod=holder_pod)
    if loss is None and holder and stalled:
        loss = _Loss(now, f"chief {holder}: {stalled}")
    holder_verdict = verdicts.get(holder) if holder else None
    if holder_verdict is not None and holder_verdict.state == PodState.SUCCEEDED and ended_without_model:
        loss = _Loss(holder_verdict.since or now, f"chief {holder} exited without a final checkpoint")
    lost_at = (chief or ChiefStatus()).lost_at
    if loss is not None and lost_at:
        loss = _Loss(min(loss.since, parse_time(lost_at) or loss.since), loss.why)
    candidates = [
        Candidate(pod, nodes.get(node_name_of(pod) or ""), slot_of(pod) or 0)
        for name, pod in sorted({name_of(p): p for p in workers}.items())
        if verdicts[name].state == PodState.RUNNING and not (loss is not None and name == holder)
    ]
    return loss, wake, candidates


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
    acquired = parse_time(lease_spec_of(lease).get("acquireTime"))
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
