"""Worker groups: which kind of node a new worker goes to, and when a slot falls back to the next kind.

A job with ``spec.workers.groups`` lists kinds of worker nodes in order of preference; a job without has one
group made of the ``spec.workers`` fields, whose pods are exactly those ttj always made (no group label). A
group's pods are built from the job's spec as the group sees it (:func:`group_spec`): the same builder, so a
group can differ from the job's one group only in what its fields say.

A new worker goes to the first group with room (``maxReplicas``) whose capacity is not known to be out. A
worker pending as unschedulable for ``workers.fallbackAfterSeconds`` shows that its group's capacity is out:
it is deleted, its group is marked (``status.workerGroups[].capacityUnavailableSince``), and its slot goes to
the next group with room. The mark is the only memory, and it lives in the status: a restarted operator
skips the same groups. It lasts until a worker of the group is scheduled after it and runs (a group can still
get workers while marked: when every later group is full or marked too) or ``workers.capacityRetrySeconds``
pass (:func:`capacity_retry`), after which new workers try the group again (and workers in less preferred groups
move back to it, :mod:`ttj.planner.stages.slots`).

Why the wait and not the cluster autoscaler's ``NotTriggerScaleUp``/``FailedScaleUp`` Events: the pod's own
``PodScheduled=False Unschedulable`` condition is level state the planner already observes; Events are
best-effort (rate-limited, deduplicated, gone after an hour, absent on clusters without an autoscaler), so
the wait is needed as the fallback anyway, and it alone keeps the planner a function of the observed pods.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from ttj.api.models import (
    DEFAULT_CAPACITY_RETRY_SECONDS,
    DEFAULT_FALLBACK_AFTER_SECONDS,
    IMPLICIT_CATCH_UP_GROUP,
    ZONE_LABEL,
    JobRef,
    PodCost,
    TransientTrainingJobSpec,
    WorkerGroupSpec,
    WorkerGroupStatus,
)
from ttj.planner import children
from ttj.planner.classify import PodState, PodVerdict
from ttj.planner.observed import Obj, condition, labels_of, meta
from ttj_contract import (
    ACCELERATOR_LABEL,
    COMPUTE_CLASS_LABEL,
    LABEL_WORKER_GROUP,
    PREEMPTIBLE_LABEL,
    SPOT_LABEL,
    Provisioning,
    format_time,
    parse_time,
)

#: Node labels ttj sets from a group's fields: a group's nodeSelector may not set them.
GROUP_PLACEMENT_LABELS = (SPOT_LABEL, PREEMPTIBLE_LABEL, ACCELERATOR_LABEL, COMPUTE_CLASS_LABEL)


@dataclass(frozen=True)
class Group:
    """A kind of worker node: its name (None for the one group of a job without groups), the job's spec as its
    pods see it, the most slots it may hold (None: no cap), and the GKE compute class that chooses its nodes."""

    name: str | None
    spec: TransientTrainingJobSpec
    max_slots: int | None = None
    compute_class: str | None = None
    #: spec.batchSize when the group sets its own batchSize: its pods get it as TTJ_JOB_BATCH_SIZE (updateShare).
    job_batch_size: int | None = None
    #: The deadline's catch-up group: it holds only the workers the deadline decides (``max_slots``, 0 until a
    #: pass decides), on top of replicas; new workers go to it first while it has room, a scale-down releases its
    #: workers first, and they are never fallback workers to move back.
    catch_up: bool = False

    def has_room(self, held: int) -> bool:
        return self.max_slots is None or held < self.max_slots


@dataclass(frozen=True)
class Unavailable:
    """A group whose capacity is out: since when, and the scheduler's words."""

    since: datetime
    reason: str


def groups_of(spec: TransientTrainingJobSpec) -> tuple[Group, ...]:
    """The job's worker groups in order of preference; with spec.deadline, its catch-up group marked (or the
    implicit one added last, :func:`catch_up_group_name`), holding no worker until the deadline decides."""
    if not spec.workers.groups:
        groups: tuple[Group, ...] = (Group(None, spec),)
    else:
        groups = tuple(
            Group(
                g.name,
                group_spec(spec, g),
                g.max_replicas,
                g.compute_class,
                spec.batch_size if g.batch_size is not None else None,
            )
            for g in spec.workers.groups
        )
    catch_up = catch_up_group_name(spec)
    if catch_up is None:
        return groups
    if catch_up == IMPLICIT_CATCH_UP_GROUP and all(g.name != catch_up for g in groups):
        first = groups[0]
        workers = first.spec.workers.model_copy(update={"provisioning": Provisioning.ON_DEMAND})
        twin = first.spec.model_copy(update={"workers": workers})
        groups = (*groups, replace(first, name=catch_up, spec=twin, max_slots=None, compute_class=None))
    return tuple(replace(g, max_slots=0, catch_up=True) if g.name == catch_up else g for g in groups)


def catch_up_group_name(spec: TransientTrainingJobSpec) -> str | None:
    """The group spec.deadline may add workers to: deadline.catchUpGroup, else the last on-demand group after the
    first (the first holds the replicas), else the implicit on-demand twin of the first group; None without a
    deadline."""
    if spec.deadline is None:
        return None
    if spec.deadline.catch_up_group is not None:
        return spec.deadline.catch_up_group
    on_demand = _on_demand_after_first(spec)
    return on_demand[-1] if on_demand else IMPLICIT_CATCH_UP_GROUP


def _on_demand_after_first(spec: TransientTrainingJobSpec) -> list[str]:
    return [
        g.name
        for g in (spec.workers.groups or [])[1:]
        if g.compute_class is None and group_spec(spec, g).workers.provisioning == Provisioning.ON_DEMAND
    ]


def catch_up_cap(spec: TransientTrainingJobSpec) -> int | None:
    """The catch-up group's own maxReplicas (None: no cap; the implicit group has none)."""
    name = catch_up_group_name(spec)
    return next((g.max_replicas for g in spec.workers.groups or [] if g.name == name), None)


def in_catch_up_group(groups: Iterable[Group], pod: Obj) -> bool:
    """Whether ``pod`` is a worker of the deadline's catch-up group."""
    name = group_of(pod)
    return any(g.catch_up and g.name == name for g in groups)


def with_catch_up_workers(groups: tuple[Group, ...], count: int) -> tuple[Group, ...]:
    """``groups`` with room for ``count`` workers in the catch-up group (the deadline's decision)."""
    return tuple(replace(g, max_slots=count) if g.catch_up else g for g in groups)


def group_spec(spec: TransientTrainingJobSpec, group: WorkerGroupSpec) -> TransientTrainingJobSpec:
    """The job's spec as ``group``'s pods see it: the group's fields over spec.workers' (selectors and
    tolerations added to them), its batch size over spec.batchSize."""
    workers = spec.workers
    selector = {**(workers.node_selector or {}), **(group.node_selector or {})}
    if group.zone is not None:
        selector[ZONE_LABEL] = group.zone
    tolerations = [*(group.tolerations or []), *(workers.tolerations or [])]
    own = workers.model_copy(
        update={
            "accelerator_type": group.accelerator_type or workers.accelerator_type,
            "gpus_per_worker": workers.gpus_per_worker if group.gpus_per_worker is None else group.gpus_per_worker,
            "provisioning": group.provisioning or workers.provisioning,
            "resources": group.resources if group.resources is not None else workers.resources,
            "node_selector": selector or None,
            "tolerations": tolerations or None,
            "preemption_grace_seconds": group.preemption_grace_seconds or workers.preemption_grace_seconds,
            "groups": None,
        }
    )
    return spec.model_copy(update={"workers": own, "batch_size": group.batch_size or spec.batch_size})


def group_problems(spec: TransientTrainingJobSpec) -> list[str]:
    """Why a group's nodeSelector would override ttj's placement; why the implicit catch-up group cannot be."""
    problems = [
        f"workers.groups[{i}] ({g.name}): nodeSelector may not set {key}: ttj places the pods by provisioning and "
        "acceleratorType, or computeClass"
        for i, g in enumerate(spec.workers.groups or [])
        for key in sorted(set(g.node_selector or {}) & set(GROUP_PLACEMENT_LABELS))
    ]
    implicit = spec.deadline is not None and spec.deadline.catch_up_group is None and not _on_demand_after_first(spec)
    if implicit and IMPLICIT_CATCH_UP_GROUP in [g.name for g in spec.workers.groups or []]:
        problems.append(
            f"workers.groups: a group is named {IMPLICIT_CATCH_UP_GROUP}, the name of the deadline's implicit "
            "catch-up group: name the catch-up group in deadline.catchUpGroup, or rename the group"
        )
    return problems


def group_of(pod: Obj) -> str | None:
    """The group a worker pod was made for; None without the label (a job without groups)."""
    return labels_of(pod).get(LABEL_WORKER_GROUP)


def worker_gpus(spec: TransientTrainingJobSpec, pod: Obj) -> int:
    """The GPUs a worker pod was made with: its group's gpusPerWorker (spec.workers' without groups)."""
    name = group_of(pod)
    group = next((g for g in spec.workers.groups or [] if g.name == name), None) if name is not None else None
    return spec.workers.gpus_per_worker if group is None or group.gpus_per_worker is None else group.gpus_per_worker


def group_worker_pod(job: JobRef, group: Group, slot: int, incarnation: int) -> Obj:
    """Worker pod ``incarnation`` of ``slot`` in ``group``."""
    pod = children.worker_pod(
        job, group.spec, slot, incarnation, compute_class=group.compute_class, job_batch_size=group.job_batch_size
    )
    if group.name is not None:
        pod["metadata"]["labels"][LABEL_WORKER_GROUP] = group.name
    return pod


def fallback_after(spec: TransientTrainingJobSpec) -> timedelta:
    seconds = spec.workers.fallback_after_seconds
    return timedelta(seconds=DEFAULT_FALLBACK_AFTER_SECONDS if seconds is None else seconds)


def capacity_retry(spec: TransientTrainingJobSpec) -> timedelta:
    """How long a group's mark lasts: workers.capacityRetrySeconds, else the default."""
    seconds = spec.workers.capacity_retry_seconds
    return timedelta(seconds=DEFAULT_CAPACITY_RETRY_SECONDS if seconds is None else seconds)


def recorded_unavailable(
    spec: TransientTrainingJobSpec, previous: Iterable[WorkerGroupStatus], now: datetime
) -> dict[str, Unavailable]:
    """The groups status marks as out of capacity, less the marks older than :func:`capacity_retry`."""
    retry = capacity_retry(spec)
    marks: dict[str, Unavailable] = {}
    for entry in previous:
        since = parse_time(entry.capacity_unavailable_since)
        if since is not None and now - since < retry:
            marks[entry.name] = Unavailable(since, entry.capacity_unavailable_reason or "")
    return marks


def next_capacity_retry(spec: TransientTrainingJobSpec, marks: Mapping[str, Unavailable]) -> datetime | None:
    """When the first of ``marks`` lapses and new workers try its group again (a pass is due then); None
    without marks."""
    first = min((mark.since for mark in marks.values()), default=None)
    return None if first is None else first + capacity_retry(spec)


def unschedulable_since(pod: Obj, verdict: PodVerdict) -> datetime | None:
    """Since when a pending worker has been unschedulable (its PodScheduled=False Unschedulable condition), or
    None when it is not."""
    if verdict.state != PodState.PENDING or not verdict.pending_reason:
        return None
    scheduled = condition(pod, "PodScheduled")
    if scheduled is None or scheduled.get("reason") != "Unschedulable":
        return None
    return parse_time(scheduled.get("lastTransitionTime")) or parse_time(meta(pod).get("creationTimestamp"))


def scheduled_at(pod: Obj) -> datetime | None:
    """When a pod was bound to its node (its PodScheduled=True condition, else its startTime); None if unknown."""
    scheduled = condition(pod, "PodScheduled")
    if scheduled is not None and scheduled.get("status") == "True":
        at = parse_time(scheduled.get("lastTransitionTime"))
        if at is not None:
            return at
    return parse_time((pod.get("status") or {}).get("startTime"))


def choose_group(
    groups: tuple[Group, ...], held: Mapping[str | None, int], unavailable: Mapping[str, Unavailable]
) -> Group | None:
    """The group a new worker goes to: the first with room whose capacity is not known to be out, else the first
    with room (every group with room is out: try the preferred one again); None when no group has room. The
    deadline's catch-up group comes first: it has room only for the workers the deadline decided."""
    ordered = sorted(groups, key=lambda g: not g.catch_up)
    roomy = [g for g in ordered if g.has_room(held.get(g.name, 0))]
    available = [g for g in roomy if g.name not in unavailable]
    candidates = available or roomy
    return candidates[0] if candidates else None


def next_group(groups: tuple[Group, ...], after: str | None, held: Mapping[str | None, int]) -> Group | None:
    """The first group after ``after`` with room, or None."""
    names = [g.name for g in groups]
    if after not in names:
        return None
    return next((g for g in groups[names.index(after) + 1 :] if g.has_room(held.get(g.name, 0))), None)


def groups_status(
    groups: tuple[Group, ...],
    *,
    held: Mapping[str | None, int],
    running: Mapping[str | None, int],
    unavailable: Mapping[str, Unavailable],
    previous: Sequence[WorkerGroupStatus],
    ledger_before: Sequence[PodCost],
    ledger: Sequence[PodCost],
) -> list[WorkerGroupStatus] | None:
    """status.workerGroups: each group's live workers after this pass (``held``, creates included) and those
    running, its capacity mark, and its cost: what its pods in the cost ledger (status.cost.pods, ``ledger``
    now and ``ledger_before`` as last written) have accrued, plus what its pods gone from the ledger had, as
    the job's own settledUSD keeps it, plus its workers' cross-zone traffic (:func:`cross_zone_by_group`).
    None for a job without groups."""
    if groups[0].name is None:
        return None
    settled = {entry.name: entry.settled_usd for entry in previous}
    now_in = {entry.uid for entry in ledger}
    for entry in ledger_before:
        if entry.group is not None and entry.uid not in now_in:
            settled[entry.group] = settled.get(entry.group, 0.0) + entry.usd
    running_usd: dict[str, float] = {}
    for entry in ledger:
        if entry.group is not None:
            running_usd[entry.group] = running_usd.get(entry.group, 0.0) + entry.usd
    cross_zone = cross_zone_by_group(previous, ledger_before, ledger)
    entries = []
    for group in groups:
        name = group.name or ""
        mark = unavailable.get(name)
        desired, active = held.get(group.name, 0), running.get(group.name, 0)
        entries.append(
            WorkerGroupStatus(
                name=name,
                accelerator_type=group.spec.workers.accelerator_type if group.compute_class is None else None,
                provisioning=str(group.spec.workers.provisioning) if group.compute_class is None else None,
                compute_class=group.compute_class,
                desired=desired,
                active=active,
                pending=max(0, desired - active),
                usd=round(settled.get(name, 0.0) + running_usd.get(name, 0.0) + cross_zone.get(name, 0.0), 6),
                settled_usd=round(settled.get(name, 0.0), 6),
                # unrounded: a pass adds fractions of a micro-dollar for a small model
                cross_zone_usd=cross_zone.get(name, 0.0),
                capacity_unavailable_since=format_time(mark.since) if mark else None,
                capacity_unavailable_reason=mark.reason if mark else None,
            )
        )
    return entries


def cross_zone_by_group(
    previous: Sequence[WorkerGroupStatus], ledger_before: Sequence[PodCost], ledger: Sequence[PodCost]
) -> dict[str, float]:
    """Each group's cross-zone traffic cost so far: what status said, plus what its pods' ledger entries gained
    since (an entry only grows; one gone from the ledger keeps what it had, which status already holds)."""
    totals = {entry.name: entry.cross_zone_usd for entry in previous}
    before = {entry.uid: entry.cross_zone_usd for entry in ledger_before}
    for entry in ledger:
        gained = entry.cross_zone_usd - before.get(entry.uid, 0.0)
        if entry.group is not None and gained > 0:
            totals[entry.group] = totals.get(entry.group, 0.0) + gained
    return totals
