"""Fill the worker slots: one live pod per slot for ``min(replicas, slots)`` slots, lost pods replaced at
once in their slot under a new name, within what the budget allows.

A new pod's incarnation (the last number of its name) is the one ``status.slotIncarnations`` reserves for
its slot: one above every pod of the slot ever observed, or the slot's last create while that pod is not
observed yet. The observed pods alone can lag behind our own creates (a view that has dropped ``-2-1`` but
not yet shows ``-2-2``), so an unobserved create's name is kept and created again (while that pod exists
the create answers 409); once observed, its name is never used again, even after the pod is gone. A name
that came back would put two pods under one name in the job's history, and, while both lived, two pods with
one hostname and one TF task index in one slot.

Moving back, make-before-break (jobs with worker groups): a worker runs in a *fallback* position when a more
preferred group has room. Once every worker runs and nothing else changes in a pass, one extra worker is
created in the most preferred group with room whose capacity is not known to be out, in a free slot
(``workers.maxReplicas`` above ``replicas``: without a free slot there is no move back, as the slots are
TF_CONFIG's worker list), if the budget allows one more worker. While it is pending the job holds
``replicas + 1`` workers; once it runs, scaling down to ``replicas`` releases the dearest per hour of the running
workers in a less preferred group than the new one, at their groups' prices (:func:`release_order`; a Normal
Event ``MovedBack``). The chief is never released, so a chief in a fallback group stays there
(it moves only when it is lost and another worker is elected), and a move back never interrupts a checkpoint.
If the extra worker stays unschedulable for ``fallbackAfterSeconds`` it is deleted and its group marked, and
nothing replaces it. The extra worker is recognised from the observed pods alone: one worker more than
``replicas``, the only one not running, in a more preferred group than a running worker that is not the chief."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from ttj.api.models import JobRef, Reason, TransientTrainingJobSpec
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
    in_catch_up_group,
    scheduled_at,
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
    #: The incarnation each slot reserves for its next pod, this pass's creates included (status.slotIncarnations).
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
    #: Running workers, the chief aside, in a less preferred group than one with room, in words ("" when none).
    fallback_workers: str = ""


@dataclass(frozen=True)
class SlotInputs:
    """What the worker-slot stage reads: the job's workers and their verdicts, the budget, and what the status
    last recorded."""

    job: JobRef
    spec: TransientTrainingJobSpec
    workers: tuple[Obj, ...]
    verdicts: Mapping[str, PodVerdict]
    #: The operator's chief: never released while another worker can be, and kept first of two pods in one slot.
    holder: str | None
    budget: BudgetDecision | None
    placement: PlacementCheck | None
    #: The spec's worker groups, in order of preference (:func:`ttj.planner.groups.groups_of`).
    groups: tuple[Group, ...]
    #: status.slotIncarnations as last written.
    recorded: Sequence[int] = ()
    #: Workers that exited 0 free their slots (the chief ended without the final checkpoint, so the job needs a
    #: worker to write it).
    refill_finished: bool = False
    #: spec.suspend: every worker stops as when the budget is exceeded.
    suspended: bool = False
    #: For capacity fallback (:mod:`ttj.planner.groups`): the time, and the groups status.workerGroups marks as
    #: out of capacity. Without ``now`` no worker falls back in this pass.
    now: datetime | None = None
    unavailable: Mapping[str, Unavailable] = field(default_factory=dict)
    #: status.workers.desired as last written (a scale-down the user asked for is no move back).
    previous_desired: int | None = None
    #: The budget allows one worker more than ``replicas`` (to move back).
    extra_allowed: bool = True
    #: What one worker of each group costs per hour (none known: the order of preference alone says which
    #: worker a scale-down releases).
    group_prices: Mapping[str | None, float] = field(default_factory=dict)


@dataclass(frozen=True)
class _Occupancy:
    #: The pods in each slot, alive or succeeded; slots in order of first appearance.
    occupants: dict[int, list[Obj]]
    #: When each slot last lost a pod.
    last_loss: dict[int, datetime]
    #: The highest incarnation observed in each slot.
    incarnations: dict[int, int]


def fill_worker_slots(given: SlotInputs) -> WorkerSlots:
    """The worker-slot stage, as the module describes it: which pods keep their slots (one per slot, scaled
    down, none once the job stops) and which fall back to another group, then new workers in the empty slots."""
    spec, verdicts, holder, groups = given.spec, given.verdicts, given.holder, given.groups
    occupancy = _occupancy(given.workers, verdicts, given.refill_finished)
    kept = _kept(
        occupancy,
        spec,
        verdicts,
        holder,
        groups,
        user_scaled=given.previous_desired != spec.workers.replicas,
        stop_reason=_stop_reason(given.budget, suspended=given.suspended),
        prices=given.group_prices,
    )
    fallen = _fallen_back(
        kept.filled, verdicts, groups, marks=given.unavailable, spec=spec, now=given.now, extra=kept.extra
    )
    filled = fallen.remaining(kept.filled)
    created = _new_workers(given, groups, occupancy, kept, fallen, filled=filled)
    return _worker_slots(
        spec,
        groups,
        verdicts,
        kept,
        fallen,
        filled=filled,
        created=created,
        holder=holder,
        unschedulable=_why_unschedulable(
            spec, filled, verdicts, created, placement=given.placement, suspended=given.suspended
        ),
    )


def _stop_reason(budget: BudgetDecision | None, *, suspended: bool) -> Reason | None:
    """Why every worker stops in this pass: the job is suspended, or the budget is spent; None when they go on."""
    return Reason.SUSPENDED if suspended else Reason.BUDGET_EXCEEDED if budget and budget.exceeded else None


def _new_workers(
    given: SlotInputs,
    groups: tuple[Group, ...],
    occupancy: _Occupancy,
    kept: _Kept,
    fallen: _Fallbacks,
    *,
    filled: Mapping[int, Obj],
) -> _Created:
    """A new worker in each empty slot, as far as the budget allows; and, in a pass where nothing else changes,
    one more to move back (:func:`_may_move_back`)."""
    spec = given.spec
    catching_up = max(0, _catch_up_room(groups) - sum(in_catch_up_group(groups, pod) for pod in filled.values()))
    missing = _missing(kept.desired, filled, given.budget, len(fallen.slots), catching_up=catching_up)
    empty = _empty_slots(spec.workers.slots, filled, missing)
    created = _created(given.job, groups, occupancy, filled, fallen.marks, slots=empty, recorded=given.recorded)
    moves_back = given.extra_allowed and _may_move_back(
        given.workers, given.verdicts, kept, fallen, filled=filled, created=created
    )
    if not moves_back:
        return created
    return _created_to_move_back(
        given.job, groups, filled, created, marks=fallen.marks, holder=given.holder, slots=spec.workers.slots
    )


@dataclass(frozen=True)
class _Kept:
    """The pods that keep their slots before capacity fallback, and the writes and events of deciding it."""

    filled: dict[int, Obj]
    #: Workers the job is to have (0 once stopped).
    desired: int
    #: The slot of the worker created to move back, while it is pending (:func:`_moving_back`).
    extra: int | None
    #: Deletes of second pods in a slot, of workers scaled down, and of every worker when the job stops.
    writes: tuple[Write, ...]
    moved_back: tuple[EmitEvent, ...]


def _kept(
    occupancy: _Occupancy,
    spec: TransientTrainingJobSpec,
    verdicts: Mapping[str, PodVerdict],
    holder: str | None,
    groups: tuple[Group, ...],
    *,
    user_scaled: bool,
    stop_reason: Reason | None,
    prices: Mapping[str | None, float],
) -> _Kept:
    """One pod per slot, scaled down to the desired count (one more while a worker moves back); none when the
    job stops (suspended, or the budget is spent: SIGTERM every worker, the chief writes its checkpoint)."""
    desired = min(spec.workers.replicas + _catch_up_room(groups), spec.workers.slots)
    filled, duplicates = _one_per_slot(occupancy, verdicts, holder, spec.workers.slots)
    extra = _moving_back(filled, desired, verdicts, holder, groups)
    scaled, scaled_down = _scaled_down(filled, desired + (extra is not None), verdicts, holder, groups, prices=prices)
    moved_back = _moved_back(filled, scaled, verdicts, groups, holder, user_scaled=user_scaled)
    if stop_reason is None:
        return _Kept(scaled, desired, extra, (*duplicates, *scaled_down), moved_back)
    stops = [_delete(pod, stop_reason) for pod in scaled.values() if verdicts[name_of(pod)].alive]
    return _Kept({}, 0, extra, (*duplicates, *scaled_down, *stops), moved_back)


def _missing(
    desired: int, filled: Mapping[int, Obj], budget: BudgetDecision | None, fallen: int, *, catching_up: int = 0
) -> int:
    """Workers to create, as far as the budget allows. A slot that falls back swaps a pending worker the budget
    already counted for another: no new worker. The deadline's catch-up workers (``catching_up`` still to add)
    were counted against the budget when the deadline decided them."""
    missing = desired - len(filled)
    if budget is None:
        return missing
    catching_up = min(catching_up, max(0, missing - fallen))
    return budget.cap(missing - fallen - catching_up) + fallen + catching_up


def _catch_up_room(groups: tuple[Group, ...]) -> int:
    """The workers the deadline decided the catch-up group holds, on top of replicas (0 without a deadline)."""
    return sum(g.max_slots or 0 for g in groups if g.catch_up)


def _empty_slots(slots: int, filled: Mapping[int, Obj], missing: int) -> list[int]:
    """The ``missing`` lowest empty slots."""
    return [s for s in range(slots) if s not in filled][: max(0, missing)]


@dataclass(frozen=True)
class _Created:
    creates: tuple[CreateChild, ...]
    #: The incarnation each slot reserves, these creates included.
    incarnations: dict[int, int]
    #: Live workers by group, these creates included.
    held: Counter[str | None]
    #: The group of each slot's new worker.
    chosen: dict[int, str | None]
    #: The groups' maxReplicas left some of the slots empty.
    full: bool
    #: A worker created to move back (pending, beyond the desired count).
    moving: int = 0


def _created(
    job: JobRef,
    groups: tuple[Group, ...],
    occupancy: _Occupancy,
    filled: Mapping[int, Obj],
    marks: Mapping[str, Unavailable],
    *,
    slots: Sequence[int],
    recorded: Sequence[int],
) -> _Created:
    """A new worker in each of ``slots``, in the group it goes to, under the incarnation its slot reserves."""
    incarnations = _reserved(recorded, occupancy)
    creates: list[CreateChild] = []
    held = Counter(group_of(pod) for pod in filled.values())
    chosen: dict[int, str | None] = {}
    full = False
    for slot in slots:
        group = choose_group(groups, held, marks)
        if group is None:
            full = True  # the groups' maxReplicas hold no more workers
            continue
        incarnations[slot] = incarnations.get(slot, 1)
        pod = group_worker_pod(job, group, slot, incarnations[slot])
        creates.append(CreateChild(pod, recovery_since=occupancy.last_loss.get(slot)))
        held[group.name] += 1
        chosen[slot] = group.name
    return _Created(tuple(creates), incarnations, held, chosen, full)


def _reserved(recorded: Sequence[int], occupancy: _Occupancy) -> dict[int, int]:
    """By slot, the incarnation its next pod takes: the recorded one, or one above the slot's highest observed
    pod if that is more (a recorded name not yet observed is one of our creates the view has not shown)."""
    reserved = {slot: n for slot, n in enumerate(recorded) if n > 0}
    for slot, seen in occupancy.incarnations.items():
        reserved[slot] = max(reserved.get(slot, 0), seen + 1)
    return reserved


def _created_to_move_back(
    job: JobRef,
    groups: tuple[Group, ...],
    filled: Mapping[int, Obj],
    created: _Created,
    *,
    marks: Mapping[str, Unavailable],
    holder: str | None,
    slots: int,
) -> _Created:
    """``created`` and one worker more, in a free slot of the group to move back to, if there is one."""
    target = _move_back_target(groups, filled, holder, marks)
    free = next((s for s in range(slots) if s not in filled), None)
    if target is None or free is None:
        return created
    incarnation = created.incarnations.get(free, 1)
    held = Counter(created.held)
    held[target.name] += 1
    return replace(
        created,
        creates=(*created.creates, CreateChild(group_worker_pod(job, target, free, incarnation))),
        incarnations={**created.incarnations, free: incarnation},
        held=held,
        moving=1,
    )


def _why_unschedulable(
    spec: TransientTrainingJobSpec,
    filled: Mapping[int, Obj],
    verdicts: Mapping[str, PodVerdict],
    created: _Created,
    *,
    placement: PlacementCheck | None,
    suspended: bool,
) -> str:
    alive = [verdicts[name_of(p)] for p in filled.values()]
    unschedulable = _unschedulable(alive)
    active = sum(v.state == PodState.RUNNING for v in alive)
    if placement is not None and not placement.ok and not suspended and active < spec.workers.replicas:
        # No node pool can hold these pods at all: say why instead of waiting.
        unschedulable = f"{placement.reason}: {placement.message}"
    if created.full:
        workers = len(filled) + len(created.creates)
        unschedulable = unschedulable or f"the worker groups' maxReplicas hold {workers} workers"
    return unschedulable


def _may_move_back(
    workers: Sequence[Obj],
    verdicts: Mapping[str, PodVerdict],
    kept: _Kept,
    fallen: _Fallbacks,
    *,
    filled: Mapping[int, Obj],
    created: _Created,
) -> bool:
    """Every desired worker runs, none is moving back already, nothing else changes in this pass, and no worker
    released before is still stopping (its slot may be the free one)."""
    stopping = any(verdicts[name_of(pod)].state == PodState.RELEASED for pod in workers)
    quiet = not (kept.writes or fallen.deletes or created.creates or stopping)
    running_filled = all(verdicts[name_of(p)].state == PodState.RUNNING for p in filled.values())
    return quiet and kept.extra is None and len(filled) == kept.desired and running_filled


def _worker_slots(
    spec: TransientTrainingJobSpec,
    groups: tuple[Group, ...],
    verdicts: Mapping[str, PodVerdict],
    kept: _Kept,
    fallen: _Fallbacks,
    *,
    filled: Mapping[int, Obj],
    created: _Created,
    holder: str | None,
    unschedulable: str,
) -> WorkerSlots:
    """The stage's answer: the writes in order, the counts, and the events."""
    alive = [verdicts[name_of(p)] for p in filled.values()]
    pending = sum(v.state == PodState.PENDING for v in alive) + max(0, kept.desired - len(filled)) + created.moving
    incarnations = created.incarnations
    running = Counter(group_of(pod) for pod in filled.values() if verdicts[name_of(pod)].state == PodState.RUNNING)
    waiting = {slot: pod for slot, pod in filled.items() if slot != kept.extra}
    return WorkerSlots(
        (*kept.writes, *fallen.deletes, *created.creates),
        sum(v.state == PodState.RUNNING for v in alive),
        pending,
        unschedulable,
        tuple(incarnations.get(slot, 0) for slot in range(max(incarnations, default=-1) + 1)),
        held=dict(created.held),
        running=dict(running),
        unavailable=fallen.marks,
        events=(*_fallback_events(fallen, created.chosen), *kept.moved_back),
        wake=fallen.wake,
        fallback_workers=_fallback_workers(
            groups, waiting, verdicts, holder, has_slot=len(waiting) < spec.workers.slots
        ),
    )


def _fallback_events(fallen: _Fallbacks, chosen: Mapping[int, str | None]) -> tuple[EmitEvent, ...]:
    """A Warning for each slot that left its group, and for a worker created to move back that gave up."""
    events = tuple(
        EmitEvent(
            "Warning",
            "CapacityFallback",
            f"worker slot {slot} left group {left} ({why}) for "
            + (f"group {chosen[slot]}" if slot in chosen else "no group yet (the budget or maxReplicas hold it)"),
        )
        for slot, (left, why) in sorted(fallen.slots.items())
    )
    if fallen.abandoned is None:
        return events
    left, why = fallen.abandoned_why
    return (
        *events,
        EmitEvent(
            "Warning",
            "CapacityFallback",
            f"worker slot {fallen.abandoned} did not move back to group {left} ({why}): it is deleted, and "
            "the workers stay where they are",
        ),
    )


@dataclass(frozen=True)
class _Fallbacks:
    #: The groups new workers skip for want of capacity: the marks recorded, less those of groups with capacity
    #: again (:func:`_marks_still_out`), with the groups marked in this pass.
    marks: Mapping[str, Unavailable]
    #: Slot → the group its pod left and why.
    slots: Mapping[int, tuple[str, str]] = field(default_factory=dict)
    deletes: tuple[Write, ...] = ()
    wake: datetime | None = None
    #: The slot of the worker created to move back that gave up, the group it was in and why.
    abandoned: int | None = None
    abandoned_why: tuple[str, str] = ("", "")

    def remaining(self, filled: Mapping[int, Obj]) -> dict[int, Obj]:
        """The pods of ``filled`` that keep their slots."""
        return {slot: pod for slot, pod in filled.items() if slot not in self.slots and slot != self.abandoned}


def _marks_still_out(
    filled: Mapping[int, Obj], verdicts: Mapping[str, PodVerdict], marks: Mapping[str, Unavailable]
) -> dict[str, Unavailable]:
    """``marks`` less the groups with capacity again: a group with a worker that was scheduled since the mark and
    runs (one that ran before shows nothing: a pool can hold some workers and not one more)."""
    still_out = dict(marks)
    for pod in filled.values():
        group = group_of(pod)
        mark = still_out.get(group) if group is not None else None
        if mark is None or verdicts[name_of(pod)].state != PodState.RUNNING:
            continue
        placed = scheduled_at(pod)
        if placed is None or placed >= mark.since:
            still_out.pop(str(group), None)
    return still_out


def _fallen_back(
    filled: Mapping[int, Obj],
    verdicts: Mapping[str, PodVerdict],
    groups: tuple[Group, ...],
    *,
    marks: Mapping[str, Unavailable],
    spec: TransientTrainingJobSpec,
    now: datetime | None,
    extra: int | None = None,
) -> _Fallbacks:
    """Slots whose worker has been unschedulable for fallbackAfterSeconds and that another group can take: the
    worker is deleted and its group marked out of capacity. The worker in slot ``extra``, created to move back,
    needs no other group: it is deleted and its group marked, and its slot stays empty. Without ``now`` nothing
    falls back and ``marks`` stay as they are."""
    if now is None:
        return _Fallbacks(dict(marks))
    marked = _marks_still_out(filled, verdicts, marks)
    if groups[0].name is None:
        return _Fallbacks(marked)
    wait = fallback_after(spec)
    held = Counter(group_of(pod) for pod in filled.values())
    left: dict[int, tuple[str, str]] = {}
    deletes: list[Write] = []
    wake: datetime | None = None
    abandoned: tuple[int, tuple[str, str]] | None = None
    for slot, pod in sorted(filled.items()):
        verdict = verdicts[name_of(pod)]
        since, group = unschedulable_since(pod, verdict), group_of(pod)
        if since is None or group is None:
            continue
        if now - since < wait:
            wake = min(wake or since + wait, since + wait)
            continue
        seconds = int((now - since).total_seconds())
        if slot == extra:
            marked[group] = marked.get(group) or Unavailable(now, verdict.pending_reason)
            abandoned = (slot, (group, f"unschedulable for {seconds}s: {verdict.pending_reason}"))
            deletes.append(_delete(pod, "CapacityFallback"))
            continue
        held[group] -= 1
        mark = marked.get(group) or Unavailable(now, verdict.pending_reason)
        target = choose_group(groups, held, {**marked, group: mark})
        if target is None or target.name == group:
            held[group] += 1  # nowhere better to go: keep waiting
            continue
        marked[group] = mark
        left[slot] = (group, f"unschedulable for {seconds}s: {verdict.pending_reason}")
        deletes.append(_delete(pod, "CapacityFallback"))
    if abandoned is None:
        return _Fallbacks(marked, left, tuple(deletes), wake)
    return _Fallbacks(marked, left, tuple(deletes), wake, abandoned[0], abandoned[1])


def _rank(groups: tuple[Group, ...], pod: Obj) -> int:
    """A worker's group's place in the order of preference (0: the most preferred; -1 for the deadline's
    catch-up group, whose workers are there by decision, never to move back from)."""
    if in_catch_up_group(groups, pod):
        return -1
    names = [group.name for group in groups]
    name = group_of(pod)
    return names.index(name) if name in names else len(groups)


def _moving_back(
    filled: Mapping[int, Obj],
    desired: int,
    verdicts: Mapping[str, PodVerdict],
    holder: str | None,
    groups: tuple[Group, ...],
) -> int | None:
    """The slot of the worker created to move back, while it is not yet running: one worker more than desired,
    the only one not running, pending, and in a more preferred group than a running worker that is not the
    chief. None when there is none."""
    if groups[0].name is None or len(filled) != desired + 1:
        return None
    waiting = [slot for slot, pod in filled.items() if verdicts[name_of(pod)].state != PodState.RUNNING]
    if len(waiting) != 1:
        return None
    extra = filled[waiting[0]]
    if (
        verdicts[name_of(extra)].state != PodState.PENDING
        or name_of(extra) == holder
        or in_catch_up_group(groups, extra)
    ):
        return None
    worst = max(
        (_rank(groups, pod) for pod in filled.values() if name_of(pod) != holder and pod is not extra), default=-1
    )
    return waiting[0] if _rank(groups, extra) < worst else None


def _moved_back(
    before: Mapping[int, Obj],
    after: Mapping[int, Obj],
    verdicts: Mapping[str, PodVerdict],
    groups: tuple[Group, ...],
    holder: str | None,
    *,
    user_scaled: bool,
) -> tuple[EmitEvent, ...]:
    """The MovedBack Event when scaling down released one running worker for a newer one of a more preferred
    group: the worker created to move back runs. Not when the user changed replicas. The chief is never the
    worker created to move back; leaving it out matters, as start times have whole seconds and often tie."""
    released = [slot for slot in before if slot not in after]
    if user_scaled or groups[0].name is None or len(released) != 1:
        return ()
    old = before[released[0]]
    if verdicts[name_of(old)].state != PodState.RUNNING:
        return ()
    running = [
        (slot, pod)
        for slot, pod in after.items()
        if verdicts[name_of(pod)].state == PodState.RUNNING and name_of(pod) != holder
    ]
    if not running:
        return ()
    slot, new = max(running, key=lambda item: (_started(item[1]), worker_incarnation(name_of(item[1]))))
    if _rank(groups, new) >= _rank(groups, old):
        return ()
    return (
        EmitEvent(
            "Normal",
            "MovedBack",
            f"worker slot {released[0]} moved from group {group_of(old)} back to group {group_of(new)} "
            f"(as slot {slot}: {name_of(new)} runs, {name_of(old)} released)",
        ),
    )


def _started(pod: Obj) -> str:
    """The pod's startTime as RFC 3339 text (which sorts as the time does)."""
    return str((pod.get("status") or {}).get("startTime") or "")


def _move_back_target(
    groups: tuple[Group, ...], filled: Mapping[int, Obj], holder: str | None, marks: Mapping[str, Unavailable]
) -> Group | None:
    """The group to move a worker back to: the most preferred with room whose capacity is not known to be out,
    when it is more preferred than the group of a worker that is not the chief; else None."""
    if groups[0].name is None:
        return None
    held = Counter(group_of(pod) for pod in filled.values())
    target = next(
        (g for g in groups if not g.catch_up and g.name not in marks and g.has_room(held.get(g.name, 0))), None
    )
    worst = max((_rank(groups, pod) for pod in filled.values() if name_of(pod) != holder), default=-1)
    if target is None or groups.index(target) >= worst:
        return None
    return target


def _fallback_workers(
    groups: tuple[Group, ...],
    filled: Mapping[int, Obj],
    verdicts: Mapping[str, PodVerdict],
    holder: str | None,
    *,
    has_slot: bool,
) -> str:
    """The running workers, the chief aside, in a less preferred group than the first with room, in words."""
    if groups[0].name is None:
        return ""
    held = Counter(group_of(pod) for pod in filled.values())
    first = next((i for i, g in enumerate(groups) if not g.catch_up and g.has_room(held.get(g.name, 0))), len(groups))
    behind = Counter(
        group_of(pod)
        for pod in filled.values()
        if name_of(pod) != holder and verdicts[name_of(pod)].state == PodState.RUNNING and _rank(groups, pod) > first
    )
    if not behind:
        return ""
    where = ", ".join(f"{count} in group {name}" for name, count in sorted(behind.items(), key=lambda kv: str(kv[0])))
    preferred = groups[first].name
    if not has_slot:
        return (
            f"{sum(behind.values())} worker(s) run in a less preferred group than {preferred} ({where}); no free "
            "worker slot to move back make-before-break (set workers.maxReplicas above replicas)"
        )
    return (
        f"{sum(behind.values())} worker(s) run in a less preferred group than {preferred} ({where}); moving back "
        "one at a time once its capacity is not known to be out"
    )


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
    *,
    prices: Mapping[str | None, float],
) -> tuple[dict[int, Obj], list[Write]]:
    """Down to ``desired``, releasing workers in :func:`release_order`."""
    excess = len(filled) - desired
    if excess <= 0:
        return filled, []
    released = release_order(filled, verdicts, holder, groups, prices)[:excess]
    return (
        {slot: pod for slot, pod in filled.items() if slot not in released},
        [_delete(filled[slot], "ScaledDown") for slot in released],
    )


def release_order(
    filled: Mapping[int, Obj],
    verdicts: Mapping[str, PodVerdict],
    holder: str | None,
    groups: tuple[Group, ...],
    prices: Mapping[str | None, float],
) -> list[int]:
    """The slots in the order a scale-down releases their workers: pending ones first (they cost nothing yet); then the
    running workers in a less preferred group than the one that started last (the worker created to move back,
    once it runs), the dearest per hour at its group's price first (an on-demand fallback before a spot one,
    wherever the job lists it); then the others, least preferred group first; ties in a tier by the order of
    preference (least preferred first), then the highest slot. Running workers of the deadline's catch-up group
    go before all other running ones. The chief comes last: it is never released while another worker can be.
    Only workers below the one that started last are priced, so the worker that moved back is never the one it
    replaces, however dear its group."""
    rank = {group.name: index for index, group in enumerate(groups)}
    running = [pod for pod in filled.values() if verdicts[name_of(pod)].state == PodState.RUNNING]
    newest = _newest(running)
    newest_rank = rank.get(group_of(newest), len(groups)) if newest is not None else len(groups)

    def order(item: tuple[int, Obj]) -> tuple[bool, bool, bool, bool, float, int, int]:
        slot, pod = item
        group_rank = rank.get(group_of(pod), len(groups))
        is_running = verdicts[name_of(pod)].state == PodState.RUNNING
        behind = is_running and group_rank > newest_rank
        return (
            name_of(pod) == holder,
            is_running,
            not in_catch_up_group(groups, pod),
            not behind,
            -prices.get(group_of(pod), 0.0) if behind else 0.0,
            -group_rank,
            -slot,
        )

    return [slot for slot, _ in sorted(filled.items(), key=order)]


def _newest(running: Iterable[Obj]) -> Obj | None:
    """The running worker that started last (by its startTime, then its incarnation)."""
    return max(running, key=lambda pod: (_started(pod), worker_incarnation(name_of(pod))), default=None)


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
