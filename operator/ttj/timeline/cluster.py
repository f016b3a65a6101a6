"""Rebuild a job's timeline from what the cluster keeps: the job's status, its Events, its pods and the Lease.

Nothing here was recorded while the job ran, so the picture is as complete as the cluster's memory:

- pods that still exist give their own lifetimes; lost pods the operator deleted live on in
  ``status.preemptionCosts`` (from when they started to when they were lost) and in WorkerPreempted Events
  (workers a compute class moved, in Migrated Events);
- a worker's group is its label while the pod is listed; for a pod gone since, the cost ledger's entry
  (``status.cost.pods[].group``), the MovedBack Event that names it, the CapacityFallback Event that sent its
  slot to a group, or the job's one group (:func:`_groups`);
- a slot stands empty from a loss until its replacement is ready; when the replacement took another, free
  slot instead (one left by a move back), until that pod ran (:func:`_gaps`);
- chief epochs come from ChiefElected Events, ``status.chief`` and the Lease;
- the global step is known at each loss (the records), at the latest checkpoint and now; the cost at each
  loss and now. Between those points the picture draws straight lines.
- the deadline (spec.deadline) from ``status.deadline``, the DeadlineAtRisk condition and ``status.progress.eta``;
  the catch-up workers the policy held from its DeadlineEscalated and DeadlineReleased Events (each says how
  many are held after it, and the global step then), the deadline's infeasibility from DeadlineInfeasible;
- the chief's evaluations come from Evaluated Events (their messages) and the latest, in full, from
  ``status.progress``; the export from the ModelExported Event, else ``status.progress.exportPath``.

Events expire (an hour by default on kube-apiserver, ``--event-ttl``), so for an old job the chief epochs
and failures before the last hour are missing; the losses in the status are not.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from ttj.api.models import PreemptionCost, TransientTrainingJobSpec
from ttj.planner.evaluation import EVALUATED, MODEL_EXPORTED, parse_evaluated, parse_exported
from ttj.planner.groups import catch_up_group_name
from ttj.timeline.model import DeadlineMove, DeadlineTrack, PodSpan, Timeline, outcome_of
from ttj_contract import (
    ANNOTATION_PROGRESS,
    LABEL_PS_INDEX,
    LABEL_ROLE,
    LABEL_SLOT,
    LABEL_WORKER_GROUP,
    LeaseProgress,
    Role,
    parse_time,
)

#: "POD (slot S, node N) is chief at epoch E" (ChiefElected) or "chief POD at epoch E" (the Elected condition).
_ELECTED = re.compile(r"^(?:chief )?(?P<pod>[a-z0-9][-a-z0-9.]*)\b.*?\bat epoch (?P<epoch>\d+)")
_WORKER_LOST = re.compile(r"^worker (?P<pod>\S+) (?:lost|failed)")
_WORKER_MIGRATED = re.compile(r"^worker (?P<pod>\S+) handed over")
#: "worker slot S moved from group A back to group B (as slot T: NEW runs, OLD released)" (MovedBack).
_MOVED_BACK = re.compile(
    r"^worker slot \d+ moved from group (?P<left>\S+) back to group (?P<to>\S+) "
    r"\(as slot \d+: (?P<new>\S+) runs, (?P<old>\S+) released\)$"
)
#: "worker slot S left group A (why) for group B" (CapacityFallback): the slot's next pod is B's.
_FELL_BACK = re.compile(r"^worker slot (?P<slot>\d+) left group \S+ \(.*\) for group (?P<chosen>\S+)$")
#: "adding N catch-up worker(s) in group G (M held): ..." (DeadlineEscalated), "releasing ..." (DeadlineReleased).
_DEADLINE_MOVE = re.compile(
    r"^(?P<verb>adding|releasing) (?P<count>\d+) catch-up worker\(s\) in group (?P<group>\S+) \((?P<held>\d+) held\)"
)
DEADLINE_REASONS = ("DeadlineEscalated", "DeadlineReleased", "DeadlineInfeasible")
#: "DONE/TOTAL steps" in a deadline Event's words: the global step when the policy decided.
_STEPS_DONE = re.compile(r"\b(?P<done>\d+)/(?P<total>\d+) steps\b")
#: How much earlier than its CapacityFallback Event the slot's new pod may be created (the same pass made
#: both; the Event is posted after the writes, its time in whole seconds).
FALLBACK_EVENT_SLACK_SECONDS = 5.0


def event_time(event: dict[str, Any]) -> datetime | None:
    """When an Event last happened (events.k8s.io's eventTime, else core/v1's lastTimestamp)."""
    meta = event.get("metadata") or {}
    for key in ("eventTime", "lastTimestamp", "firstTimestamp"):
        moment = parse_time(event.get(key))
        if moment is not None:
            return moment
    return parse_time(meta.get("creationTimestamp"))


def _pod_times(pod: dict[str, Any]) -> tuple[datetime | None, datetime | None, datetime | None]:
    """(created, running, ended) of a pod as it is now."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    created = parse_time(meta.get("creationTimestamp"))
    running = ended = None
    for container in status.get("containerStatuses") or []:
        state = container.get("state") or {}
        running = running or parse_time((state.get("running") or {}).get("startedAt"))
        terminated = state.get("terminated") or {}
        running = running or parse_time(terminated.get("startedAt"))
        ended = ended or parse_time(terminated.get("finishedAt"))
    if running is None and status.get("phase") in ("Running", "Succeeded", "Failed"):
        running = parse_time(status.get("startTime"))
    if ended is None and status.get("phase") in ("Succeeded", "Failed"):
        ended = parse_time(meta.get("deletionTimestamp")) or running
    return created, running, ended


def from_cluster(
    job: dict[str, Any],
    events: Iterable[dict[str, Any]],
    pods: Iterable[dict[str, Any]],
    lease: dict[str, Any] | None,
    now: datetime,
) -> Timeline:
    """The timeline of ``job`` (the TransientTrainingJob as read) from its Events (those whose
    involvedObject is the job), its pods and its ``NAME-chief`` Lease, as of ``now``."""
    meta = job.get("metadata") or {}
    status = job.get("status") or {}
    origin = parse_time(meta.get("creationTimestamp")) or parse_time(status.get("startTime")) or now
    timeline = Timeline(origin=origin)
    finished = parse_time(status.get("completionTime"))
    timeline.end = max(0.0, timeline.seconds(finished or now) or 0.0)
    timeline.cost_status = dict(status.get("cost") or {})
    timeline.savings = dict(status.get("savings") or {})
    for raw in status.get("preemptionCosts") or []:
        try:
            timeline.losses.append(PreemptionCost.model_validate(raw))
        except ValidationError:
            continue  # a record written by a newer operator: keep what can be read

    kept_events = list(events)
    _pods(timeline, pods)
    _losses(timeline)
    _events(timeline, kept_events)
    _gaps(timeline)
    _groups(timeline, kept_events, status)
    _chiefs(timeline, status, lease)
    _progress(timeline, status, lease, finished or now)
    _evaluation(timeline, status)
    _cost(timeline, status, finished or now)
    timeline.deadline = _deadline(timeline, job, kept_events)
    if status.get("phase"):
        timeline.phases.append((timeline.end, str(status["phase"])))
    timeline.preemptions.sort()
    timeline.failures.sort()
    timeline.events.sort()
    return timeline


def _seconds(timeline: Timeline, moment: datetime | None) -> float | None:
    return timeline.seconds(moment)


def _pods(timeline: Timeline, pods: Iterable[dict[str, Any]]) -> None:
    for pod in pods:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        role = labels.get(LABEL_ROLE)
        if role not in (Role.WORKER, Role.PS):
            continue
        created, running, ended = _pod_times(pod)
        slot = labels.get(LABEL_SLOT) if role == Role.WORKER else labels.get(LABEL_PS_INDEX)
        span = PodSpan(
            name=str(meta.get("name")),
            role=str(role),
            slot=int(slot) if slot is not None and str(slot).isdigit() else None,
            node=(pod.get("spec") or {}).get("nodeName"),
            created=_seconds(timeline, created) or 0.0,
            running=_seconds(timeline, running),
            ended=_seconds(timeline, ended),
            group=labels.get(LABEL_WORKER_GROUP),
        )
        if ended is not None:
            span.outcome = outcome_of(pod)
        timeline.pods[span.name] = span


def _losses(timeline: Timeline) -> None:
    """The lost pods the operator deleted since, and the time their slot stood empty."""
    for record in timeline.losses:
        lost = _seconds(timeline, parse_time(record.lost_at)) or 0.0
        role = Role.PS if record.role == "ps" else Role.WORKER
        what = "chief " if record.role == "chief" else ("parameter server " if record.role == "ps" else "worker ")
        timeline.preemptions.append((lost, what + record.pod))
        span = timeline.pods.get(record.pod)
        if span is None:
            started = _seconds(timeline, parse_time(record.started_at))
            span = timeline.pods[record.pod] = PodSpan(
                name=record.pod,
                role=str(role),
                slot=record.slot,
                created=started if started is not None else lost,
                running=started,
            )
        span.ended = lost if span.ended is None else min(span.ended, lost)
        span.outcome = "preempted"
        recovered = _seconds(timeline, parse_time(record.recovered_at))
        if record.replacement and recovered is not None and record.replacement not in timeline.pods:
            # The replacement is gone too (removed when the job ended, or lost later: a later record then
            # ends its bar where it was lost); the record still says when it took the slot over.
            timeline.pods[record.replacement] = PodSpan(
                name=record.replacement,
                role=str(role),
                slot=record.slot,
                created=max(lost, recovered - (record.startup_seconds or 0.0)),
                running=recovered,
                ended=timeline.end,
                outcome="deleted",
            )


def _gaps(timeline: Timeline) -> None:
    """The time each lost pod's slot stood empty: until the replacement the record names was ready; for an open
    worker record, until the first worker that ran since in another slot free at the loss (the planner refills
    the lowest free slot, which may be one a move back left spare: the lost slot is the spare from then on, not
    empty); while neither, to the end."""
    taken = {record.replacement for record in timeline.losses if record.replacement}
    for record in timeline.losses:
        lost = _seconds(timeline, parse_time(record.lost_at)) or 0.0
        span = timeline.pods[record.pod]
        recovered = _seconds(timeline, parse_time(record.recovered_at))
        if recovered is None and record.role != "ps":
            elsewhere = _refilled_elsewhere(timeline, record.slot, lost, taken)
            if elsewhere is not None:
                taken.add(elsewhere.name)
                recovered = elsewhere.running
        timeline.gaps.append((lost, recovered, span.lane))


def _refilled_elsewhere(timeline: Timeline, slot: int | None, lost: float, taken: set[str]) -> PodSpan | None:
    """The first worker not yet counted as a replacement that ran at or after ``lost`` in another slot than
    ``slot``, one where no worker was running at ``lost``."""

    def busy(other: int | None) -> bool:
        return any(
            s.role == Role.WORKER
            and s.slot == other
            and s.running is not None
            and s.running < lost
            and (s.ended is None or s.ended > lost)
            for s in timeline.pods.values()
        )

    candidates = [
        span
        for span in timeline.pods.values()
        if span.role == Role.WORKER
        and span.slot != slot
        and span.name not in taken
        and span.running is not None
        and span.running >= lost
        and not busy(span.slot)
    ]
    return min(candidates, key=lambda span: (span.running or 0.0, span.name), default=None)


def _events(timeline: Timeline, events: Iterable[dict[str, Any]]) -> None:
    recorded = {pod for _, pod in timeline.preemptions}
    for event in events:
        moment = _seconds(timeline, event_time(event))
        if moment is None:
            continue
        reason, message = str(event.get("reason") or ""), str(event.get("message") or "")
        timeline.events.append((moment, str(event.get("type") or "Normal"), reason, message))
        if reason in ("ChiefElected", "Elected") and (elected := _ELECTED.search(message)):
            timeline.chiefs.append((moment, int(elected["epoch"]), elected["pod"]))
        elif reason == "WorkerPreempted" and (lost := _WORKER_LOST.search(message)):
            if not any(what.endswith(" " + lost["pod"]) for what in recorded):
                timeline.preemptions.append((moment, "worker " + lost["pod"]))
                span = timeline.pods.get(lost["pod"])
                if span is not None and span.ended is None:
                    span.ended, span.outcome = moment, "preempted"
        elif reason == "Migrated" and (moved := _WORKER_MIGRATED.search(message)):
            span = timeline.pods.get(moved["pod"])
            if span is not None and span.ended is None:
                span.ended, span.outcome = moment, "migrated"
        elif reason == "MovedBack" and (moved_back := _MOVED_BACK.search(message)):
            # a released worker gone since: its bar ends at the release, not at the end of the record
            span = timeline.pods.get(moved_back["old"])
            if span is not None and span.outcome == "deleted" and (span.ended is None or span.ended > moment):
                span.ended = moment
        elif reason == "WorkerFailed" and (lost := _WORKER_LOST.search(message)):
            timeline.failures.append((moment, lost["pod"]))
        elif reason == EVALUATED and (evaluated := parse_evaluated(message)):
            timeline.evaluations.append((moment, *evaluated))
        elif reason == MODEL_EXPORTED and (path := parse_exported(message)):
            timeline.export = (moment, path)


def _groups(timeline: Timeline, events: Iterable[dict[str, Any]], status: dict[str, Any]) -> None:
    """The group of each worker gone since (no label to read), from what the record keeps, the first that
    knows: the cost ledger's entry, a MovedBack Event naming the pod, the CapacityFallback Event that sent its
    slot to a group just before the pod was made, the job's only group."""
    known: dict[str, str] = {}
    for entry in (status.get("cost") or {}).get("pods") or []:
        if entry.get("name") and entry.get("group"):
            known.setdefault(str(entry["name"]), str(entry["group"]))
    fell_back: list[tuple[float, int, str]] = []
    for event in events:
        message = str(event.get("message") or "")
        if event.get("reason") == "MovedBack" and (moved_back := _MOVED_BACK.search(message)):
            known.setdefault(moved_back["old"], moved_back["left"])
            known.setdefault(moved_back["new"], moved_back["to"])
        elif event.get("reason") == "CapacityFallback" and (fell := _FELL_BACK.search(message)):
            moment = _seconds(timeline, event_time(event))
            if moment is not None:
                fell_back.append((moment, int(fell["slot"]), fell["chosen"]))
    workers = sorted(
        (span for span in timeline.pods.values() if span.role == Role.WORKER), key=lambda span: span.created
    )
    for span in workers:
        chosen = _fallback_group(span, workers, fell_back)
        if chosen is not None:
            known.setdefault(span.name, chosen)
    groups = status.get("workerGroups") or []
    only = str(groups[0]["name"]) if len(groups) == 1 and groups[0].get("name") else None
    for span in workers:
        if span.group is None:
            span.group = known.get(span.name, only)


def _fallback_group(span: PodSpan, workers: list[PodSpan], fell_back: list[tuple[float, int, str]]) -> str | None:
    """The group the latest CapacityFallback of ``span``'s slot before it was made sent the slot to, when it is
    the slot's first pod made since (a slot that fell back twice made a pod for each group; the first, deleted
    while pending, is no longer known)."""
    slack = FALLBACK_EVENT_SLACK_SECONDS
    before = [
        (moment, chosen) for moment, slot, chosen in fell_back if slot == span.slot and moment <= span.created + slack
    ]
    if not before:
        return None
    moment, chosen = max(before)
    between = [
        s for s in workers if s.slot == span.slot and s is not span and moment - slack <= s.created < span.created
    ]
    return None if between else chosen


def _deadline(timeline: Timeline, job: dict[str, Any], events: Iterable[dict[str, Any]]) -> DeadlineTrack | None:
    """The deadline from status.deadline (else spec.deadline), its condition, the ETA and the policy's Events;
    None for a job without a deadline."""
    spec, status = job.get("spec") or {}, job.get("status") or {}
    recorded = status.get("deadline") or {}
    started = _seconds(timeline, parse_time(status.get("startTime"))) or 0.0
    at = _seconds(timeline, parse_time(recorded.get("at")))
    if at is None:
        at = _spec_deadline(timeline, spec.get("deadline") or {}, started)
    if at is None:
        return None
    track = DeadlineTrack(
        at=at,
        started=started,
        steps_total=int(spec.get("trainSteps") or 0),
        state=recorded.get("state"),
        catch_up_group=_catch_up_group(spec),
        catch_up_workers=int(recorded.get("catchUpWorkers") or 0),
        slack_seconds=recorded.get("slackSeconds"),
        message=recorded.get("message"),
    )
    eta = (status.get("progress") or {}).get("eta") or {}
    p50, p90 = _seconds(timeline, parse_time(eta.get("p50"))), _seconds(timeline, parse_time(eta.get("p90")))
    track.eta = (p50, p90) if p50 is not None and p90 is not None else None
    condition = next((c for c in status.get("conditions") or [] if c.get("type") == "DeadlineAtRisk"), None)
    if condition is not None:
        track.condition = (str(condition.get("status")), str(condition.get("reason")), str(condition.get("message")))
    for event in events:
        reason, message = str(event.get("reason") or ""), str(event.get("message") or "")
        moment = _seconds(timeline, event_time(event))
        if reason not in DEADLINE_REASONS or moment is None:
            continue
        moved = _DEADLINE_MOVE.search(message)
        change = 0 if moved is None else int(moved["count"]) * (1 if moved["verb"] == "adding" else -1)
        held = None if moved is None else int(moved["held"])
        if moved is not None and track.catch_up_group is None:
            track.catch_up_group = moved["group"]
        track.moves.append(DeadlineMove(moment, reason, change, held, message))
        done = _STEPS_DONE.search(message)
        if done is not None and int(done["total"]) == track.steps_total:
            timeline.steps.append((moment, int(done["done"])))
    track.moves.sort(key=lambda move: move.time)
    timeline.steps.sort(key=lambda point: point[0])
    return track


def _spec_deadline(timeline: Timeline, deadline: dict[str, Any], started: float) -> float | None:
    """spec.deadline as seconds since the origin: the earlier of completeBy and completeWithinSeconds."""
    moments = []
    complete_by = _seconds(timeline, parse_time(deadline.get("completeBy")))
    if complete_by is not None:
        moments.append(complete_by)
    if deadline.get("completeWithinSeconds") is not None:
        moments.append(started + float(deadline["completeWithinSeconds"]))
    return min(moments, default=None)


def _catch_up_group(spec: dict[str, Any]) -> str | None:
    """The group the deadline adds workers to, as the planner names it; None when the spec does not read (the
    Events then name it)."""
    try:
        return catch_up_group_name(TransientTrainingJobSpec.model_validate(spec))
    except ValidationError:
        return None


def _evaluation(timeline: Timeline, status: dict[str, Any]) -> None:
    """The Events' evaluations, with the status's latest (its metrics in full) where the global step reached
    it; the export where its Event says, else at the end (Events expire, the status stays)."""
    progress = status.get("progress") or {}
    latest, metrics = progress.get("evaluationStep"), progress.get("evaluation")
    if isinstance(latest, int) and isinstance(metrics, dict):
        told = [e for e in timeline.evaluations if e[1] == latest]
        kept = [e for e in timeline.evaluations if e[1] != latest]
        when = told[-1][0] if told else timeline.when_step(latest)
        kept.append((timeline.end if when is None else when, latest, {str(k): float(v) for k, v in metrics.items()}))
        timeline.evaluations = kept
    timeline.evaluations.sort(key=lambda e: (e[0], e[1]))
    if progress.get("exportPath"):
        path = str(progress["exportPath"])
        timeline.export = timeline.export if timeline.export and timeline.export[1] == path else (timeline.end, path)


def _chiefs(timeline: Timeline, status: dict[str, Any], lease: dict[str, Any] | None) -> None:
    """Chief epochs from the Events, the status and the Lease; one entry per epoch, the earliest seen."""
    chief = status.get("chief") or {}
    if chief.get("pod"):
        elected = _seconds(timeline, parse_time(chief.get("electedAt")))
        timeline.chiefs.append((elected if elected is not None else 0.0, int(chief.get("epoch") or 0), chief["pod"]))
    spec = (lease or {}).get("spec") or {}
    if spec.get("holderIdentity"):
        acquired = _seconds(timeline, parse_time(spec.get("acquireTime")))
        epoch = int(spec.get("leaseTransitions") or 0)
        timeline.chiefs.append((acquired if acquired is not None else 0.0, epoch, str(spec["holderIdentity"])))
    by_epoch: dict[int, tuple[float, int, str]] = {}
    for entry in sorted(timeline.chiefs):
        by_epoch.setdefault(entry[1], entry)
    timeline.chiefs = sorted(by_epoch.values())


def _progress(timeline: Timeline, status: dict[str, Any], lease: dict[str, Any] | None, until: datetime) -> None:
    """Global steps: 0 at the start, at each loss, at the latest checkpoint and now."""
    started = _seconds(timeline, parse_time(status.get("startTime")))
    points: list[tuple[float, int]] = [(started if started is not None else 0.0, 0)]
    for record in timeline.losses:
        lost = _seconds(timeline, parse_time(record.lost_at))
        if lost is not None:
            points.append((lost, record.global_step))
            if record.steps_lost:  # training went back to the checkpoint
                points.append((lost, record.global_step - record.steps_lost))
    progress = dict(status.get("progress") or {})
    report = LeaseProgress.from_annotation(
        ((lease or {}).get("metadata") or {}).get("annotations", {}).get(ANNOTATION_PROGRESS)
    )
    if report is not None and report.global_step >= int(progress.get("globalStep") or 0):
        progress.update(globalStep=report.global_step)
    checkpoint_at = _seconds(timeline, parse_time(progress.get("checkpointTime")))
    if checkpoint_at is not None and progress.get("checkpointStep") is not None:
        timeline.checkpoints.append((checkpoint_at, int(progress["checkpointStep"])))
    points.append((_seconds(timeline, until) or 0.0, int(progress.get("globalStep") or 0)))
    timeline.steps = sorted(points, key=lambda point: point[0])


def _cost(timeline: Timeline, status: dict[str, Any], until: datetime) -> None:
    """US dollars paid: 0 at the start, at each loss, and now."""
    cost = status.get("cost") or {}
    if not cost:
        return
    started = _seconds(timeline, parse_time(status.get("startTime")))
    points = [(started if started is not None else 0.0, 0.0)]
    points += [
        (moment, record.job_usd)
        for record in timeline.losses
        if (moment := _seconds(timeline, parse_time(record.lost_at))) is not None
    ]
    accrued = parse_time(cost.get("accruedAt")) or until
    points.append((_seconds(timeline, min(accrued, until)) or 0.0, float(cost.get("usd") or 0.0)))
    timeline.cost = sorted(points)
