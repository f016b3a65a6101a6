"""Classify a pod: alive, done, deliberately removed, or lost — and if lost, preempted or failed.

Preemption is not failure. A worker counts as *preempted* when the evidence points outside the
training code: its node is gone or NotReady past a short grace, the kubelet or the taint manager
ended it (pod reason Terminated/Shutdown/NodeShutdown/NodeLost, a DisruptionTarget condition), it
was deleted by someone else, or it died of a signal (137/143) that is not its own OOM. It counts as
*failed* only on a non-zero exit of its own (1–127, or OOMKilled).

A worker of a GKE compute class (its nodeSelector names one) that leaves because the class's active migration
moved it is *migrated*: a preemption as far as its replacement and the chief's handover go, but a planned one,
not counted as a loss. The evidence is the cluster autoscaler draining its node: the node carries the
autoscaler's ``ToBeDeletedByClusterAutoscaler`` taint, or the pod's ``DisruptionTarget`` condition says the
Eviction API is deleting it (``EvictionByEvictionAPI``). A spot preemption of the same node (the kubelet's
``TerminationByKubelet``, the node lost without a drain) stays a preemption.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from ttj.api.objects import ConditionBody
from ttj.planner.observed import (
    Obj,
    annotations_of,
    condition,
    container_statuses,
    meta,
    node_name_of,
    pod_spec,
    pod_status,
)
from ttj_contract import (
    ANNOTATION_DELETED,
    AUTOSCALER_DELETION_TAINT,
    COMPUTE_CLASS_LABEL,
    EVICTION_REASON,
    parse_time,
)

#: Pod status reasons written when the node, not the code, ended the pod.
PREEMPTION_REASONS = frozenset({"Terminated", "Shutdown", "NodeShutdown", "NodeLost", "DeletionByTaintManager"})
#: Exit codes of a process killed by a signal from outside (SIGKILL, SIGTERM).
SIGNAL_EXIT_CODES = frozenset({137, 143})


class PodState(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    PREEMPTED = "Preempted"
    FAILED = "Failed"
    #: Deleted by the operator on purpose (scale-down, cleanup): neither alive nor a loss.
    RELEASED = "Released"


@dataclass(frozen=True)
class PodVerdict:
    state: PodState
    #: When the loss was first evidenced (for lost pods), else None.
    since: datetime | None = None
    message: str = ""
    #: The pod cannot terminate by itself (its node is gone/NotReady): delete it with grace 0.
    force_delete: bool = False
    #: For pending pods: why it is not scheduled (e.g. "Unschedulable: 0/3 nodes are available...").
    pending_reason: str = ""
    #: For failed pods: the container's exit code.
    exit_code: int | None = None
    #: For preempted pods: its compute class's active migration drained it away (a planned handover).
    migrated: bool = False

    @property
    def lost(self) -> bool:
        return self.state in (PodState.PREEMPTED, PodState.FAILED)

    @property
    def alive(self) -> bool:
        return self.state in (PodState.PENDING, PodState.RUNNING)


def _node_lost_since(pod: Obj, nodes: dict[str, Obj], now: datetime, grace: timedelta) -> datetime | None:
    """When the pod's node was lost (gone, or NotReady for longer than ``grace``), else None."""
    node_name = node_name_of(pod)
    if not node_name:
        return None
    node = nodes.get(node_name)
    if node is None:
        # The node object is gone. Watches of nodes and pods race, so only trust this once the pod
        # has been bound for longer than the grace (a just-bound pod may be on a node not seen yet).
        scheduled = condition(pod, "PodScheduled")
        bound_at = parse_time((scheduled or {}).get("lastTransitionTime")) or parse_time(
            meta(pod).get("creationTimestamp")
        )
        if bound_at is None or now - bound_at >= grace:
            return max(bound_at, now - grace) if bound_at else now
        return None
    if meta(node).get("deletionTimestamp"):
        return parse_time(meta(node)["deletionTimestamp"])
    ready = condition(node, "Ready")
    if ready is not None and ready.get("status") != "True":
        since = parse_time(ready.get("lastTransitionTime")) or now
        if now - since >= grace:
            return since
    return None


def _drained_by_autoscaler(node: Obj | None) -> bool:
    taints = ((node or {}).get("spec") or {}).get("taints") or []
    return any(taint.get("key") == AUTOSCALER_DELETION_TAINT for taint in taints)


def _migration(pod: Obj, nodes: dict[str, Obj], disruption: ConditionBody | None) -> str:
    """Why ``pod`` left as its compute class's active migration (a drain of its node), or "" when it did not."""
    compute_class = (pod_spec(pod).get("nodeSelector") or {}).get(COMPUTE_CLASS_LABEL)
    if not compute_class:
        return ""
    node_name = node_name_of(pod)
    reason = disruption.get("reason") if disruption is not None and disruption.get("status") == "True" else None
    if reason == EVICTION_REASON:
        return f"evicted from node {node_name} (compute class {compute_class} moving its workloads)"
    if reason is None and node_name and _drained_by_autoscaler(nodes.get(node_name)):
        return f"node {node_name} drained by the cluster autoscaler (compute class {compute_class})"
    return ""


def _terminated(pod: Obj) -> Obj | None:
    for status in container_statuses(pod):
        terminated = status.get("state", {}).get("terminated")
        if terminated is not None:
            return dict(terminated)
    return None


def classify_pod(pod: Obj, nodes: dict[str, Obj], now: datetime, node_grace: timedelta) -> PodVerdict:
    """What became of ``pod`` (a worker), judged from cluster state alone."""
    metadata = meta(pod)
    status = pod_status(pod)
    phase = status.get("phase", "Pending")
    deleting = parse_time(metadata.get("deletionTimestamp"))
    if deleting is not None and annotations_of(pod).get(ANNOTATION_DELETED):
        return PodVerdict(PodState.RELEASED, since=deleting)
    if phase == "Succeeded":
        return PodVerdict(PodState.SUCCEEDED)

    node_lost = _node_lost_since(pod, nodes, now, node_grace)
    disruption = condition(pod, "DisruptionTarget")
    disrupted = disruption is not None and disruption.get("status") == "True"
    evidence = node_lost is not None or disrupted or status.get("reason") in PREEMPTION_REASONS or deleting is not None
    terminated = _terminated(pod)
    finished = parse_time((terminated or {}).get("finishedAt"))

    def preempted(why: str) -> PodVerdict:
        candidates = [t for t in (node_lost, deleting, finished) if t is not None]
        if disrupted and disruption is not None:
            candidates.append(parse_time(disruption.get("lastTransitionTime")) or now)
        migration = _migration(pod, nodes, disruption)
        return PodVerdict(
            PodState.PREEMPTED,
            since=min(candidates, default=now),
            message=migration or why,
            force_delete=node_lost is not None,
            migrated=bool(migration),
        )

    if phase == "Failed":
        if evidence:
            return preempted(status.get("message") or status.get("reason") or "node lost")
        exit_code = int((terminated or {}).get("exitCode", 1))
        reason = (terminated or {}).get("reason") or ""
        if exit_code in SIGNAL_EXIT_CODES and reason != "OOMKilled":
            return preempted(f"killed by signal (exit code {exit_code})")
        message = (terminated or {}).get("message") or status.get("message") or ""
        detail = f"exit code {exit_code}" + (f" ({reason})" if reason else "")
        return PodVerdict(
            PodState.FAILED,
            since=finished or now,
            message=f"{detail}: {message.strip()}" if message.strip() else detail,
            exit_code=exit_code,
        )
    if deleting is not None:
        return preempted("pod deleted" + (" on a lost node" if node_lost else ""))
    if node_lost is not None:
        return preempted(f"node {node_name_of(pod)} lost")
    if disrupted:
        return preempted((disruption or {}).get("message") or "disruption")
    if phase == "Running":
        return PodVerdict(PodState.RUNNING)
    scheduled = condition(pod, "PodScheduled")
    pending_reason = ""
    if scheduled is not None and scheduled.get("status") == "False":
        pending_reason = f"{scheduled.get('reason') or 'Unschedulable'}: {scheduled.get('message') or ''}".strip()
    return PodVerdict(PodState.PENDING, pending_reason=pending_reason)
