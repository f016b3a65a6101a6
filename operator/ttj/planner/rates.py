"""Steps per second by worker group: the chief's per-slot rates (``slotStepsPerSecond`` in its report on the
Lease, measured from the workers' step reports on PS 0) summed over the groups of the pods holding the slots."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ttj.api.models import WorkerGroupStatus
from ttj.planner.observed import Obj, annotations_of, has_role, labels_of, meta, name_of, phase_of, slot_of
from ttj_contract import ANNOTATION_PROGRESS, LABEL_WORKER_GROUP, LeaseProgress, Role, worker_incarnation


def slot_holders(pods: Iterable[Obj]) -> dict[int, Obj]:
    """The running worker pod in each slot (of the latest incarnation, should two run): whose rate the chief's
    measurement of the slot is."""
    holders: dict[int, tuple[int, Obj]] = {}
    for pod in pods:
        slot = slot_of(pod)
        if not has_role(pod, Role.WORKER) or slot is None:
            continue
        if phase_of(pod) != "Running" or meta(pod).get("deletionTimestamp"):
            continue
        incarnation = worker_incarnation(name_of(pod))
        if slot not in holders or incarnation > holders[slot][0]:
            holders[slot] = (incarnation, pod)
    return {slot: pod for slot, (_, pod) in holders.items()}


def slot_groups(pods: Iterable[Obj]) -> dict[int, str]:
    """The group of the running worker pod in each slot (of the latest incarnation, should two run)."""
    groups = {slot: labels_of(pod).get(LABEL_WORKER_GROUP) for slot, pod in slot_holders(pods).items()}
    return {slot: group for slot, group in groups.items() if group is not None}


def pod_steps_per_second(slot_rates: Mapping[int, float] | None, pods: Iterable[Obj]) -> dict[str, float]:
    """The chief's measured steps per second of each running worker pod, by pod name (the holder of the slot
    measured); empty without rates. A rate of a slot no running pod holds belongs to nobody."""
    holders = slot_holders(pods)
    return {name_of(holders[slot]): rate for slot, rate in (slot_rates or {}).items() if slot in holders}


def group_steps_per_second(lease: Obj | None, pods: Iterable[Obj]) -> dict[str, float] | None:
    """Steps per second of each group's workers together; None when the chief's report has no rates."""
    report = LeaseProgress.from_annotation(annotations_of(lease or {}).get(ANNOTATION_PROGRESS))
    if report is None or report.slot_steps_per_second is None:
        return None
    holders = slot_groups(pods)
    totals: dict[str, float] = {}
    for slot, rate in report.slot_steps_per_second.items():
        group = holders.get(slot)
        if group is not None:
            totals[group] = totals.get(group, 0.0) + rate
    return {group: round(total, 3) for group, total in totals.items()}


def with_steps_per_second(
    entries: list[WorkerGroupStatus] | None, rates: Mapping[str, float] | None
) -> list[WorkerGroupStatus] | None:
    """status.workerGroups with each group's steps per second (0 for a group none of whose workers stepped);
    left unset while the chief reports no rates."""
    if entries is None or rates is None:
        return entries
    return [entry.model_copy(update={"steps_per_second": rates.get(entry.name, 0.0)}) for entry in entries]
