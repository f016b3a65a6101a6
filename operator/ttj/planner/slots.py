"""Fill the worker slots: one live pod per slot for ``min(replicas, slots)`` slots, lost pods replaced at
once in their slot under a new name, within what the budget allows.

A new pod's incarnation (the last number of its name) is one above the highest observed in its slot, and
never below the slot's last create, recorded in ``status.slotIncarnations``: the observed pods alone can
lag behind our own creates (a view that has dropped ``-2-1`` but not yet shows ``-2-2``), and a name that
came back would put two live pods, with one hostname and one TF task index, in one slot. Creating the
recorded name again is safe: while that pod exists the create answers 409."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from ttj.api.models import Reason, TransientTrainingJobSpec
from ttj.cost.budget import BudgetDecision
from ttj.cost.pools import PlacementCheck
from ttj.planner.actions import CreateChild, DeleteChild, EmitEvent, Write
from ttj.planner.classify import PodState, PodVerdict
from ttj.planner.groups import (
    Group,
    Unavailable,
    choose_group,
    fallback_after,
    group_of,
    group_worker_pod,
    groups_of,
    unschedulable_since,
)
from ttj.planner.observed import Obj, name_of, slot_of, uid_of
from ttj_contract import worker_incarnation


@dataclass(frozen=True)
class WorkerSlots:
    writes: tuple[Write, ...]
    #: Workers running, and workers created or still to create but not running.
    active: int
    pending: int
    #: Why workers cannot be placed, empty when they can.
    unschedulable: str
    #: The highest incarnation each slot has had, this pass's creates included, by slot (status.slotIncarnations).
    incarnations: tuple[int, ...] = ()
    #: By worker group: its live workers after this pass (creates included), and those running.
    held: Mapping[str | None, int] = field(default_factory=dict)
    running: Mapping[str | None, int] = field(default_factory=dict)
    #: The groups new workers skip for want of capacity (status.workerGroups).
    unavailable: Mapping[str, Unavailable] = field(default_factory=dict)
    #: Warning events of slots that fell back to another group.
    events: tuple[EmitEvent, ...] = ()
    #: When the next pending worker will have waited fallbackAfterSeconds.
    wake: datetime | None = None


@dataclass(frozen=True)
class _Occupancy:
    #: The pods in each slot, alive or succeeded; slots in order of first appearance.
    occupants: dict[int, list[Obj]]
    #: When each slot last lost a pod.
    last_loss: dict[int, datetime]
    #: The highest incarnation observed in each slot.
    incarnations: dict[int, int]


def fill_worker_slots(
    job: Obj,
    spec: TransientTrainingJobSpec,
    workers: Iterable[Obj],
    verdicts: Mapping[str, PodVerdict],
    *,
    holder: str | None,
    budget: BudgetDecision | None,
    placement: PlacementCheck | None,
    recorded: Sequence[int] = (),
    refill_finished: bool = False,
    suspended: bool = False,
    resuming: bool = False,
    now: datetime | None = None,
    unavailable: Mapping[str, Unavailable] | None = None,
) -> WorkerSlots:
    """``recorded``: status.slotIncarnations as last written. ``refill_finished``: workers that exited 0
    free their slots (the chief ended without the final checkpoint, so the job needs a worker to write it).
    ``suspended``: spec.suspend; every worker stops as when the budget is exceeded. ``resuming``: the first
    pass after a suspension, whose recorded names all belonged to pods that ran and were stopped: each slot's
    new pod takes the incarnation above them, so that no name comes back. ``now`` and ``unavailable`` (the
    groups status.workerGroups marks as out of capacity): for capacity fallback (:mod:`ttj.planner.groups`)."""
    slots = spec.workers.slots
    desired = min(spec.workers.replicas, slots)
    groups = groups_of(spec)
    occupancy = _occupancy(workers, verdicts, refill_finished)
    filled, duplicates = _one_per_slot(occupancy, verdicts, holder, slots)
    filled, scaled_down = _scaled_down(filled, desired, verdicts, holder, groups)
    stops: list[Write] = []
    stop_reason = Reason.SUSPENDED if suspended else Reason.BUDGET_EXCEEDED if budget and budget.exceeded else None
    if stop_reason is not None:
        # Checkpoint and stop: SIGTERM every worker (the chief writes its checkpoint), add none.
        stops = [_delete(pod, stop_reason) for pod in filled.values() if verdicts[name_of(pod)].alive]
        filled, desired = {}, 0

    marks = dict(unavailable or {})
    fallen = (
        _fallen_back(filled, verdicts, groups, marks=marks, spec=spec, now=now) if now is not None else _Fallbacks()
    )
    filled = {slot: pod for slot, pod in filled.items() if slot not in fallen.slots}

    # Fill empty slots, lowest first, as far as the budget allows.
    missing = desired - len(filled)
    if budget is not None:
        # a slot that falls back swaps a pending worker the budget already counted for another: no new worker
        missing = budget.cap(missing - len(fallen.slots)) + len(fallen.slots)
    incarnations = {slot: n for slot, n in enumerate(recorded) if n > 0}
    for slot, seen in occupancy.incarnations.items():
        incarnations[slot] = max(incarnations.get(slot, 0), seen)
    creates: list[Write] = []
    held = Counter(group_of(pod) for pod in filled.values())
    chosen: dict[int, str | None] = {}
    full = False
    for slot in [s for s in range(slots) if s not in filled][: max(0, missing)]:
        group = choose_group(groups, held, marks)
        if group is None:
            full = True  # the groups' maxReplicas hold no more workers
            continue
        after = max(incarnations.get(slot, 0), occupancy.incarnations.get(slot, 0)) if resuming else 0
        incarnations[slot] = max(incarnations.get(slot, 0), occupancy.incarnations.get(slot, 0) + 1, after + 1)
        pod = group_worker_pod(job, group, slot, incarnations[slot])
        creates.append(CreateChild(pod, recovery_since=occupancy.last_loss.get(slot)))
        held[group.name] += 1
        chosen[slot] = group.name

    alive = [verdicts[name_of(p)] for p in filled.values()]
    active = sum(v.state == PodState.RUNNING for v in alive)
    pending = sum(v.state == PodState.PENDING for v in alive) + max(0, desired - len(filled))
    unschedulable = _unschedulable(alive)
    if placement is not None and not placement.ok and not suspended and active < spec.workers.replicas:
        # No node pool can hold these pods at all: say why instead of waiting.
        unschedulable = f"{placement.reason}: {placement.message}"
    if full:
        unschedulable = unschedulable or f"the worker groups' maxReplicas hold {len(filled) + len(creates)} workers"
    highest = tuple(incarnations.get(slot, 0) for slot in range(max(incarnations, default=-1) + 1))
    writes = (*duplicates, *scaled_down, *stops, *fallen.deletes, *creates)
    running = Counter(group_of(pod) for pod in filled.values() if verdicts[name_of(pod)].state == PodState.RUNNING)
    events = tuple(
        EmitEvent(
            "Warning",
            "CapacityFallback",
            f"worker slot {slot} left group {left} ({why}) for "
            + (f"group {chosen[slot]}" if slot in chosen else "no group yet (the budget or maxReplicas hold it)"),
        )
        for slot, (left, why) in sorted(fallen.slots.items())
    )
    return WorkerSlots(
        writes,
        active,
        pending,
        unschedulable,
        highest,
        held=dict(held),
        running=dict(running),
        unavailable=marks,
        events=events,
        wake=fallen.wake,
    )


@dataclass(frozen=True)
class _Fallbacks:
    #: Slot → the group its pod left and why.
    slots: Mapping[int, tuple[str, str]] = field(default_factory=dict)
    deletes: tuple[Write, ...] = ()
    wake: datetime | None = None


def _fallen_back(
    filled: Mapping[int, Obj],
    verdicts: Mapping[str, PodVerdict],
    groups: tuple[Group, ...],
    *,
    marks: dict[str, Unavailable],
    spec: TransientTrainingJobSpec,
    now: datetime,
) -> _Fallbacks:
    """Slots whose worker has been unschedulable for fallbackAfterSeconds and that another group can take: the
    worker is deleted and its group marked out of capacity (``marks`` is updated). A group with a running
    worker has capacity: its mark goes."""
    for pod in filled.values():
        group = group_of(pod)
        if group is not None and verdicts[name_of(pod)].state == PodState.RUNNING:
            marks.pop(group, None)
    if groups[0].name is None:
        return _Fallbacks()
    wait = fallback_after(spec)
    held = Counter(group_of(pod) for pod in filled.values())
    left: dict[int, tuple[str, str]] = {}
    deletes: list[Write] = []
    wake: datetime | None = None
    for slot, pod in sorted(filled.items()):
        verdict = verdicts[name_of(pod)]
        since, group = unschedulable_since(pod, verdict), group_of(pod)
        if since is None or group is None:
            continue
        if now - since < wait:
            wake = min(wake or since + wait, since + wait)
            continue
        held[group] -= 1
        mark = marks.get(group) or Unavailable(now, verdict.pending_reason)
        target = choose_group(groups, held, {**marks, group: mark})
        if target is None or target.name == group:
            held[group] += 1  # nowhere better to go: keep waiting
            continue
        marks[group] = mark
        seconds = int((now - since).total_seconds())
        left[slot] = (group, f"unschedulable for {seconds}s: {verdict.pending_reason}")
        deletes.append(_delete(pod, "CapacityFallback"))
    return _Fallbacks(left, tuple(deletes), wake)


def _delete(pod: Obj, reason: str) -> DeleteChild:
    return DeleteChild("Pod", name_of(pod), mark_deliberate=True, reason=reason, uid=uid_of(pod))


def _one_per_slot(
    occupancy: _Occupancy, verdicts: Mapping[str, PodVerdict], holder: str | None, slots: int
) -> tuple[dict[int, Obj], list[Write]]:
    """Never two live pods in one slot (a watch that lagged behind our own create): keep the best, in observed
    order; the others, and pods of slots beyond the spec's, are deleted."""
    kept: dict[int, Obj] = {}
    writes: list[Write] = []
    for slot, pods in sorted(occupancy.occupants.items()):
        ranked = sorted(pods, key=lambda pod: _keep_order(pod, verdicts, holder))
        keep = ranked[:1] if slot < slots else []
        writes += [_delete(pod, "SlotOutOfRange") for pod in ranked[len(keep) :]]
        kept.update((slot, pod) for pod in keep)
    return {slot: kept[slot] for slot in occupancy.occupants if slot in kept}, writes


def _scaled_down(
    filled: dict[int, Obj],
    desired: int,
    verdicts: Mapping[str, PodVerdict],
    holder: str | None,
    groups: tuple[Group, ...],
) -> tuple[dict[int, Obj], list[Write]]:
    """Down to ``desired``: pending pods first, then those of the least preferred groups (a fallback, often
    on-demand and the dearest), then the highest slots; never the chief."""
    excess = len(filled) - desired
    if excess <= 0:
        return filled, []
    rank = {group.name: index for index, group in enumerate(groups)}
    order = sorted(
        filled.items(),
        key=lambda item: (
            name_of(item[1]) == holder,
            verdicts[name_of(item[1])].state == PodState.RUNNING,
            -rank.get(group_of(item[1]), len(groups)),
            -item[0],
        ),
    )
    removed = dict(order[:excess])
    return (
        {slot: pod for slot, pod in filled.items() if slot not in removed},
        [_delete(pod, "ScaledDown") for pod in removed.values()],
    )


def _occupancy(workers: Iterable[Obj], verdicts: Mapping[str, PodVerdict], refill_finished: bool) -> _Occupancy:
    occupants: dict[int, list[Obj]] = {}
    last_loss: dict[int, datetime] = {}
    incarnations: dict[int, int] = {}
    for pod in workers:
        slot = slot_of(pod)
        if slot is None:
            continue
        verdict = verdicts[name_of(pod)]
        incarnations[slot] = max(incarnations.get(slot, 0), worker_incarnation(name_of(pod)))
        if verdict.alive or (verdict.state == PodState.SUCCEEDED and not refill_finished):
            occupants.setdefault(slot, []).append(pod)
        elif verdict.lost and verdict.since is not None:
            last_loss[slot] = max(last_loss.get(slot, verdict.since), verdict.since)
    return _Occupancy(occupants, last_loss, incarnations)


def _keep_order(pod: Obj, verdicts: Mapping[str, PodVerdict], holder: str | None) -> tuple[bool, bool, int]:
    """Of two pods in one slot keep the chief, else the running one, else the newest."""
    name = name_of(pod)
    return (name != holder, verdicts[name].state != PodState.RUNNING, -worker_incarnation(name))


def _unschedulable(alive: list[PodVerdict]) -> str:
    reasons = sorted({v.pending_reason for v in alive if v.pending_reason})
    if not reasons:
        return ""
    return f"{sum(bool(v.pending_reason) for v in alive)} worker(s) unschedulable: " + "; ".join(reasons)
