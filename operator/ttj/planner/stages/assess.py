"""Assess the worker pods: what became of each, which losses are new, and which counted pods may go.

A lost worker is counted exactly once: its name goes into ``status.accountedPods`` in the status written
after this pass, and only a later pass, seeing the name there, deletes the pod and releases its
finalizer. So a restarted operator never counts a loss twice nor misses one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from ttj.planner.actions import DeleteChild, EmitEvent, RemoveFinalizer, Write
from ttj.planner.classify import PodState, PodVerdict, classify_pod
from ttj.planner.observed import (
    Obj,
    Observed,
    condition,
    finalizers_of,
    has_role,
    is_terminal,
    meta,
    name_of,
    node_name_of,
    uid_of,
)
from ttj_contract import FINALIZER, Role, parse_time


@dataclass(frozen=True)
class Assessment:
    """The worker pods judged from cluster state, and the accounting of their losses."""

    #: The worker pods, in observed order.
    workers: tuple[Obj, ...]
    verdicts: Mapping[str, PodVerdict]
    #: Lost workers counted so far that still exist (status.accountedPods), sorted.
    accounted: tuple[str, ...]
    #: Losses counted in this pass.
    preemptions: int
    failures: int
    #: The newest failure counted in this pass, for the BackoffLimitExceeded message.
    last_failure: str
    events: tuple[EmitEvent, ...]
    #: Deletes and finalizer removals of pods whose loss an earlier, written status counted.
    releases: tuple[Write, ...]
    #: When a node's grace period ends (its pods then count as lost).
    wake: tuple[datetime, ...]
    #: The workers counted as preempted in this pass, sorted.
    preempted: tuple[str, ...] = ()
    #: Workers their compute class's active migration moved, counted in this pass: replaced, but no loss.
    migrations: int = 0

    @property
    def replacements(self) -> int:
        """Every counted loss, and every migrated worker, gets a replacement pod in its slot in this same plan."""
        return self.preemptions + self.failures + self.migrations

    def count(self, state: PodState) -> int:
        return sum(v.state == state for v in self.verdicts.values())


def assess_workers(
    observed: Observed, accounted_before: Iterable[str], now: datetime, node_grace: timedelta
) -> Assessment:
    workers = tuple(p for p in observed.pods if has_role(p, Role.WORKER))
    verdicts = {name_of(p): classify_pod(p, observed.nodes, now, node_grace) for p in workers}
    by_name = {name_of(p): p for p in workers}
    already = set(accounted_before) & set(by_name)

    accounted = set(already)
    preemptions = failures = migrations = 0
    preempted: list[str] = []
    last_failure = ""
    events: list[EmitEvent] = []
    for name in sorted(by_name):
        verdict = verdicts[name]
        if not verdict.lost or name in accounted:
            continue
        accounted.add(name)
        if verdict.migrated:
            migrations += 1
            events.append(EmitEvent("Normal", "Migrated", f"worker {name} handed over: {verdict.message}"))
        elif verdict.state == PodState.PREEMPTED:
            preemptions += 1
            preempted.append(name)
            events.append(EmitEvent("Warning", "WorkerPreempted", f"worker {name} lost: {verdict.message}"))
        else:
            failures += 1
            last_failure = f"worker {name} failed: {verdict.message}"
            events.append(EmitEvent("Warning", "WorkerFailed", last_failure))

    releases: list[Write] = []
    for name in sorted(already):
        if verdicts[name].lost:
            releases += _release(by_name[name], verdicts[name].force_delete)
    for name, verdict in sorted(verdicts.items()):
        if verdict.state == PodState.RELEASED and FINALIZER in finalizers_of(by_name[name]):
            releases.append(RemoveFinalizer(name))

    return Assessment(
        workers=workers,
        verdicts=verdicts,
        accounted=tuple(sorted(accounted)),
        preemptions=preemptions,
        failures=failures,
        last_failure=last_failure,
        events=tuple(events),
        releases=tuple(releases),
        wake=tuple(_node_grace_ends(workers, observed.nodes, now, node_grace)),
        preempted=tuple(preempted),
        migrations=migrations,
    )


def _release(pod: Obj, force: bool) -> list[Write]:
    """Let a counted pod go: delete it (again, with grace 0, when its node cannot stop it) and its finalizer."""
    name = name_of(pod)
    deleting = meta(pod).get("deletionTimestamp")
    already_forced = meta(pod).get("deletionGracePeriodSeconds") == 0
    writes: list[Write] = []
    if not deleting or (force and not already_forced and not is_terminal(pod)):
        writes.append(DeleteChild("Pod", name, force=force, reason="LostWorker", uid=uid_of(pod)))
    if FINALIZER in finalizers_of(pod):
        writes.append(RemoveFinalizer(name))
    return writes


def _node_grace_ends(
    workers: Iterable[Obj], nodes: Mapping[str, Obj], now: datetime, grace: timedelta
) -> list[datetime]:
    moments = []
    for pod in workers:
        node_name = node_name_of(pod)
        if node_name is None:
            continue
        node = nodes.get(node_name)
        if node is None:
            moments.append(now + grace)
            continue
        ready = condition(node, "Ready")
        since = parse_time((ready or {}).get("lastTransitionTime"))
        if ready is not None and ready.get("status") != "True" and since is not None:
            moments.append(since + grace)
    return moments
