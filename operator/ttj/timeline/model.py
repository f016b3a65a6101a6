"""A job's timeline: pod lifetimes per lane, chief epochs, preemptions, progress and cost over time.

Two ways to fill one: :meth:`Timeline.observe_pod` and friends fold what a watcher saw as it happened
(the demo samples the cluster every second), and :func:`ttj.timeline.cluster.from_cluster` rebuilds it
afterwards from what the cluster keeps. Times are seconds since ``origin`` (when the job was applied).
Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ttj.api.models import PreemptionCost
from ttj_contract import COMPUTE_CLASS_LABEL, EVICTION_REASON, LABEL_ROLE, LABEL_SLOT, LABEL_WORKER_GROUP, Role

#: Pod status reasons written when the node, not the code, ended the pod.
NODE_REASONS = frozenset({"Terminated", "Shutdown", "NodeShutdown", "NodeLost", "DeletionByTaintManager"})


@dataclass
class PodSpan:
    """One pod's life, in seconds since the timeline's origin."""

    name: str
    role: str
    slot: int | None
    node: str | None = None
    created: float = 0.0
    running: float | None = None
    ended: float | None = None
    outcome: str = "running"  # running | succeeded | failed | preempted | migrated | deleted
    #: The worker group it was made for (jobs with spec.workers.groups).
    group: str | None = None

    @property
    def lane(self) -> str:
        if self.role == Role.PS:
            return "PS" if not self.slot else f"PS {self.slot}"
        return f"worker {self.slot}"


@dataclass(frozen=True)
class DeadlineMove:
    """One of the deadline policy's Events: catch-up workers added or released, or the deadline found
    infeasible."""

    time: float
    reason: str  # DeadlineEscalated | DeadlineReleased | DeadlineInfeasible
    #: catch-up workers added (> 0) or released (< 0); 0 for DeadlineInfeasible
    change: int
    #: catch-up workers held after it (None when the Event does not say)
    held: int | None
    message: str


@dataclass
class DeadlineTrack:
    """A job's deadline as status.deadline, its condition and its Events tell it; times in seconds since the
    timeline's origin."""

    at: float
    #: the uniform line runs from (started, 0) to (at, steps_total)
    started: float
    steps_total: int
    state: str | None = None
    catch_up_group: str | None = None
    catch_up_workers: int = 0
    slack_seconds: float | None = None
    #: status.progress.eta as (p50, p90)
    eta: tuple[float, float] | None = None
    message: str | None = None
    #: the DeadlineAtRisk condition: (status, reason, message)
    condition: tuple[str, str, str] | None = None
    moves: list[DeadlineMove] = field(default_factory=list)

    def uniform_steps(self, when: float) -> float:
        """The steps the straight line from start to deadline asks for at ``when``."""
        span = self.at - self.started
        if span <= 0:
            return float(self.steps_total)
        return self.steps_total * min(1.0, max(0.0, (when - self.started) / span))

    def held(self, end: float) -> list[tuple[float, int]]:
        """Catch-up workers held over time, a step function from 0 at the start to ``end``: from the Events that
        say how many, else the status's count since the end (Events expire; the status stays)."""
        points = [(self.started, 0)]
        points += [(move.time, move.held) for move in self.moves if move.held is not None]
        if points[-1][1] != self.catch_up_workers:
            points.append((end, self.catch_up_workers))
        points.append((max(end, points[-1][0]), points[-1][1]))
        return points


@dataclass
class Timeline:
    """Everything the picture and the text need."""

    origin: datetime | None = None
    pods: dict[str, PodSpan] = field(default_factory=dict)
    #: (time, global step), in time order.
    steps: list[tuple[float, int]] = field(default_factory=list)
    checkpoints: list[tuple[float, int]] = field(default_factory=list)
    chiefs: list[tuple[float, int, str]] = field(default_factory=list)  # (time, epoch, pod)
    preemptions: list[tuple[float, str]] = field(default_factory=list)  # (time, what was hit)
    failures: list[tuple[float, str]] = field(default_factory=list)
    phases: list[tuple[float, str]] = field(default_factory=list)
    #: (time, US dollars paid so far).
    cost: list[tuple[float, float]] = field(default_factory=list)
    #: Slots standing empty after a loss: (from, until or None while it waits, lane).
    gaps: list[tuple[float, float | None, str]] = field(default_factory=list)
    #: What each loss cost, as the job's status says.
    losses: list[PreemptionCost] = field(default_factory=list)
    #: The job's status.cost and status.savings (camelCase JSON), for the summary.
    cost_status: dict[str, Any] = field(default_factory=dict)
    savings: dict[str, Any] = field(default_factory=dict)
    #: The chief's evaluations: (time, global step evaluated, metrics by name), in time order.
    evaluations: list[tuple[float, int, dict[str, float]]] = field(default_factory=list)
    #: (time, directory) of the final model's export, once the chief made it.
    export: tuple[float, str] | None = None
    #: (time, type, reason, message) of the job's Events still kept by the cluster.
    events: list[tuple[float, str, str, str]] = field(default_factory=list)
    #: The newest time the timeline knows of (now for a running job).
    end: float = 0.0
    #: spec.deadline and how the job fared against it (None: the job has no deadline).
    deadline: DeadlineTrack | None = None

    def seconds(self, moment: datetime | None) -> float | None:
        """``moment`` as seconds since the origin."""
        if moment is None or self.origin is None:
            return None
        return (moment - self.origin).total_seconds()

    def observe_pod(self, now: float, pod: dict[str, Any]) -> None:
        """Fold one pod as listed from the API into its span."""
        meta = pod.get("metadata", {})
        labels = meta.get("labels") or {}
        name = meta["name"]
        slot = labels.get(LABEL_SLOT)
        span = self.pods.get(name)
        if span is None:
            span = self.pods[name] = PodSpan(
                name=name,
                role=labels.get(LABEL_ROLE, "?"),
                slot=int(slot) if slot is not None else None,
                created=now,
                group=labels.get(LABEL_WORKER_GROUP),
            )
        status = pod.get("status") or {}
        span.node = (pod.get("spec") or {}).get("nodeName") or span.node
        phase = status.get("phase")
        if phase == "Running" and span.running is None:
            span.running = now
        if phase in ("Succeeded", "Failed") and span.ended is None:
            span.ended = now
            span.outcome = outcome_of(pod)
        self.end = max(self.end, now)

    def observe_gone(self, now: float, present: set[str]) -> None:
        """Pods no longer listed have ended (deleted by the operator, or gone with their node)."""
        for name, span in self.pods.items():
            if name not in present and span.ended is None:
                span.ended = now
                span.outcome = "deleted"

    def observe_status(self, now: float, status: dict[str, Any]) -> None:
        """Fold the job's status: step, checkpoints, chief epochs, phase, cost."""
        progress = status.get("progress") or {}
        step = progress.get("globalStep")
        if isinstance(step, int) and (not self.steps or self.steps[-1][1] != step):
            self.steps.append((now, step))
        checkpoint = progress.get("checkpointStep")
        if isinstance(checkpoint, int) and (not self.checkpoints or self.checkpoints[-1][1] != checkpoint):
            self.checkpoints.append((now, checkpoint))
        evaluated = progress.get("evaluationStep")
        if isinstance(evaluated, int) and (not self.evaluations or self.evaluations[-1][1] != evaluated):
            self.evaluations.append((now, evaluated, dict(progress.get("evaluation") or {})))
        if progress.get("exportPath") and self.export is None:
            self.export = (now, str(progress["exportPath"]))
        chief = status.get("chief") or {}
        if chief.get("pod") and (not self.chiefs or self.chiefs[-1][1] != chief.get("epoch")):
            self.chiefs.append((now, int(chief.get("epoch") or 0), str(chief["pod"])))
        phase = status.get("phase")
        if phase and (not self.phases or self.phases[-1][1] != phase):
            self.phases.append((now, phase))
        cost = status.get("cost") or {}
        if "usd" in cost and (not self.cost or self.cost[-1][1] != cost["usd"]):
            self.cost.append((now, float(cost["usd"])))
        self.cost_status = dict(cost)
        self.savings = dict(status.get("savings") or {})
        self.losses = [PreemptionCost.model_validate(r) for r in status.get("preemptionCosts") or []]
        self.end = max(self.end, now)

    def refine(self, samples: Timeline) -> None:
        """Take the finer step, checkpoint, cost and evaluation curves of a timeline sampled as the job ran (same
        origin), and when it saw the export."""
        for attribute in ("steps", "checkpoints", "cost", "evaluations"):
            sampled = getattr(samples, attribute)
            if len(sampled) > len(getattr(self, attribute)):
                setattr(self, attribute, list(sampled))
        self.export = samples.export or self.export
        self.end = max(self.end, samples.end)

    def when_step(self, step: int) -> float | None:
        """When the global step reached ``step``, on the straight lines between the known points."""
        for (before, low), (after, high) in zip(self.steps, self.steps[1:], strict=False):
            if low <= step <= high and high > low:
                return before + (after - before) * (step - low) / (high - low)
        return None

    def workers_running(self, catch_up_group: str | None) -> list[tuple[float, int, int]]:
        """(time, other workers running, catch-up group workers running) at each change, from the pods known:
        each from when it ran until it ended (still running: on)."""
        changes: list[tuple[float, int, int]] = []
        for span in self.pods.values():
            if span.role != Role.WORKER or span.running is None:
                continue
            caught_up = int(catch_up_group is not None and span.group == catch_up_group)
            changes.append((span.running, 1 - caught_up, caught_up))
            if span.ended is not None:
                changes.append((span.ended, caught_up - 1, -caught_up))
        counts: list[tuple[float, int, int]] = [(0.0, 0, 0)]
        for when, spot_change, catch_up_change in sorted(changes):
            _, spot_before, catch_up_before = counts[-1]
            point = (when, spot_before + spot_change, catch_up_before + catch_up_change)
            counts[-1:] = [point] if counts[-1][0] == when else [counts[-1], point]
        return counts

    def steps_lost(self) -> int:
        """Global steps that went backwards (only a parameter-server loss should cause any)."""
        lost, peak = 0, 0
        for _, step in self.steps:
            if step < peak:
                lost += peak - step
                peak = step
            peak = max(peak, step)
        return max(lost, int(self.savings.get("stepsLost") or 0))


def outcome_of(pod: dict[str, Any]) -> str:
    """How a finished pod ended: migrated (its compute class's active migration evicted it), preempted (its node
    ended it), succeeded or failed."""
    status = pod.get("status") or {}
    evicted = any(
        c.get("type") == "DisruptionTarget" and c.get("status") == "True" and c.get("reason") == EVICTION_REASON
        for c in status.get("conditions") or []
    )
    if evicted and COMPUTE_CLASS_LABEL in ((pod.get("spec") or {}).get("nodeSelector") or {}):
        return "migrated"
    preempted = status.get("reason") in NODE_REASONS or any(
        c.get("type") == "DisruptionTarget" and c.get("status") == "True" for c in status.get("conditions") or []
    )
    if preempted:
        return "preempted"
    return "succeeded" if status.get("phase") == "Succeeded" else "failed"
