"""Steps per second by worker group: the chief's per-slot rates (``slotStepsPerSecond`` in its report on the
Lease, measured from the workers' step reports on PS 0) summed over the groups of the pods holding the slots."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ttj.api.models import WorkerGroupStatus
from ttj.planner.observed import Obj, annotations_of, has_role, labels_of, meta, name_of, phase_of, slot_of
from ttj_contract import ANNOTATION_PROGRESS, LABEL_WORKER_GROUP, LeaseProgress, Role, worker_incarnation


def slot_groups(pods: Iterable[Obj]) -> dict[int, str]:
    """The group of the running worker pod in each slot (of the latest incarnation, should two run)."""
    holders: dict[int, tuple[int, str]] = {}
    for pod in pods:
        slot, group = slot_of(pod), labels_of(pod).get(LABEL_WORKER_GROUP)
        if not has_role(pod, Role.WORKER) or slot is None or group is None:
            continue
        if phase_of(pod) != "Running" or meta(pod).get("deletionTimestamp"):
            continue
        incarnation = worker_incarnation(name_of(pod))
        if slot not in holders or incarnation > holders[slot][0]:
            holders[slot] = (incarnation, group)
    return {slot: group for slot, (_, group) in holders.items()}


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
