"""Fill the worker slots: one live pod per slot for ``min(replicas, slots)`` slots, lost pods replaced at
once in their slot under a new name, within what the budget allows.

A new pod's incarnation (the last number of its name) is one above the highest observed in its slot, and
never below the slot's last create, recorded in ``status.slotIncarnations``: the observed pods alone can
lag behind our own creates (a view that has dropped ``-2-1`` but not yet shows ``-2-2``), and a name that
came back would put two live pods, with one hostname and one TF task index, in one slot. Creating the
recorded name again is safe: while that pod exists the create answers 409."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from ttj.api.models import Reason, TransientTrainingJobSpec
from ttj.cost.budget import BudgetDecision
from ttj.cost.pools import PlacementCheck
from ttj.planner import children
from ttj.planner.actions import CreateChild, DeleteChild, Write
from ttj.planner.classify import PodState, PodVerdict
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
) -> WorkerSlots:
    """``recorded``: status.slotIncarnations as last written. ``refill_finished``: workers that exited 0
    free their slots (the chief ended without the final checkpoint, so the job needs a worker to write it).
    ``suspended``: spec.suspend; every worker stops as when the budget is exceeded. ``resuming``: the first
    pass after a suspension, whose recorded names all belonged to pods that ran and were stopped: each slot's
    new pod takes the incarnation above them, so that no name comes back."""
    slots = spec.workers.slots
    desired = min(spec.workers.replicas, slots)
    occupancy = _occupancy(workers, verdicts, refill_finished)
    filled, duplicates = _one_per_slot(occupancy, verdicts, holder, slots)
    filled, scaled_down = _scaled_down(filled, desired, verdicts, holder)
    stops: list[Write] = []
    stop_reason = Reason.SUSPENDED if suspended else Reason.BUDGET_EXCEEDED if budget and budget.exceeded else None
    if stop_reason is not None:
        # Checkpoint and stop: SIGTERM every worker (the chief writes its checkpoint), add none.
        stops = [_delete(pod, stop_reason) for pod in filled.values() if verdicts[name_of(pod)].alive]
        filled, desired = {}, 0

    # Fill empty slots, lowest first, as far as the budget allows.
    missing = desired - len(filled)
    if budget is not None:
        missing = budget.cap(missing)
    incarnations = {slot: n for slot, n in enumerate(recorded) if n > 0}
    for slot, seen in occupancy.incarnations.items():
        incarnations[slot] = max(incarnations.get(slot, 0), seen)
    creates: list[Write] = []
    for slot in [s for s in range(slots) if s not in filled][: max(0, missing)]:
        after = max(incarnations.get(slot, 0), occupancy.incarnations.get(slot, 0)) if resuming else 0
        incarnations[slot] = max(incarnations.get(slot, 0), occupancy.incarnations.get(slot, 0) + 1, after + 1)
        pod = children.worker_pod(job, spec, slot, incarnations[slot])
        creates.append(CreateChild(pod, recovery_since=occupancy.last_loss.get(slot)))

    alive = [verdicts[name_of(p)] for p in filled.values()]
    active = sum(v.state == PodState.RUNNING for v in alive)
    pending = sum(v.state == PodState.PENDING for v in alive) + max(0, desired - len(filled))
    unschedulable = _unschedulable(alive)
    if placement is not None and not placement.ok and not suspended and active < spec.workers.replicas:
        # No node pool can hold these pods at all: say why instead of waiting.
        unschedulable = f"{placement.reason}: {placement.message}"
    highest = tuple(incarnations.get(slot, 0) for slot in range(max(incarnations, default=-1) + 1))
    writes = (*duplicates, *scaled_down, *stops, *creates)
    return WorkerSlots(writes, active, pending, unschedulable, highest)


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
    filled: dict[int, Obj], desired: int, verdicts: Mapping[str, PodVerdict], holder: str | None
) -> tuple[dict[int, Obj], list[Write]]:
    """Down to ``desired``: pending pods first, then the highest slots; never the chief."""
    excess = len(filled) - desired
    if excess <= 0:
        return filled, []
    order = sorted(
        filled.items(),
        key=lambda item: (
            name_of(item[1]) == holder,
            verdicts[name_of(item[1])].state == PodState.RUNNING,
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
