"""What a kubelet knows of a pod it runs, and the pod status it reports from that (pure)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ttj.kubeapi import JSON

from .pools import NODE_INTERNAL_IP, now_rfc3339
from .runtime import ContainerRun, PodSandbox
from .scheduler import replace_condition

SHUTDOWN_MESSAGE = "Pod was terminated in response to imminent node shutdown."
#: the exit code of a container that obeyed SIGTERM (128 + 15)
SIGTERM_EXIT_CODE = 143


@dataclass
class ContainerState:
    name: str
    image: str
    restart_count: int = 0
    state: JSON = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: JSON = field(default_factory=dict)
    ready: bool = False
    container_id: str = ""


@dataclass
class LocalPod:
    """What a kubelet knows of one pod it runs."""

    namespace: str
    name: str
    uid: str
    node: str
    ip: str
    started_at: str
    restart_policy: str
    containers: dict[str, ContainerState]
    spec: JSON
    sandbox: PodSandbox | None = None
    phase: str = "Pending"
    reason: str | None = None
    message: str | None = None
    extra_conditions: list[JSON] = field(default_factory=list)
    reported_conditions: list[JSON] = field(default_factory=list)
    terminating: bool = False
    final: bool = False
    lock: threading.RLock = field(default_factory=threading.RLock)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def grace_seconds(self) -> float:
        return float(self.spec.get("terminationGracePeriodSeconds") or 30)

    def container_spec(self, name: str) -> JSON | None:
        return next((c for c in self.spec.get("containers") or [] if c.get("name") == name), None)


def new_local_pod(pod: JSON, ip: str) -> LocalPod:
    meta = pod["metadata"]
    spec = pod.get("spec") or {}
    containers = {
        str(c.get("name")): ContainerState(str(c.get("name")), str(c.get("image") or ""))
        for c in spec.get("containers") or []
    }
    return LocalPod(
        namespace=meta["namespace"],
        name=meta["name"],
        uid=str(meta.get("uid") or meta["name"]),
        node=spec["nodeName"],
        ip=ip,
        started_at=now_rfc3339(),
        restart_policy=str(spec.get("restartPolicy") or "Always"),
        containers=containers,
        spec=spec,
    )


def condition(kind: str, ok: bool, reason: str | None = None) -> JSON:
    result: JSON = {
        "type": kind,
        "status": "True" if ok else "False",
        "lastProbeTime": None,
        "lastTransitionTime": now_rfc3339(),
    }
    if reason:
        result["reason"] = reason
    return result


def disruption_condition() -> JSON:
    """The ``DisruptionTarget`` condition the kubelet sets on the pods of a node that shuts down."""
    return {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "TerminationByKubelet",
        "message": SHUTDOWN_MESSAGE,
        "lastProbeTime": None,
        "lastTransitionTime": now_rfc3339(),
    }


def shutdown_failure(pod: JSON) -> JSON:
    """The status patch that fails a pod this kubelet never ran when its node shuts down."""
    status = dict(pod.get("status") or {})
    conditions = replace_condition(list(status.get("conditions") or []), disruption_condition())
    conditions = replace_condition(conditions, condition("Ready", False, "PodFailed"))
    return {
        "status": {"phase": "Failed", "reason": "Terminated", "message": SHUTDOWN_MESSAGE, "conditions": conditions}
    }


def terminated_state(
    local: LocalPod, run: ContainerRun, fallback_message: Callable[[ContainerRun], str] | None = None
) -> JSON:
    """A container's ``terminated`` state from its finished run (exit code, reason, message).

    ``fallback_message(run)`` (the log's tail) stands in for the termination message of a failed container
    that wrote none and asked for it (terminationMessagePolicy FallbackToLogsOnError).
    """
    message = run.message
    fallback = (local.container_spec(run.name) or {}).get("terminationMessagePolicy") == "FallbackToLogsOnError"
    if not message and run.exit_code and fallback and fallback_message is not None:
        message = fallback_message(run)
    terminated: JSON = {
        "exitCode": run.exit_code,
        "reason": run.reason,
        "startedAt": run.started_at,
        "finishedAt": run.finished_at,
        "containerID": f"ttj-local://{run.pid}",
    }
    if message:
        terminated["message"] = message
    return terminated


def settle_phase(local: LocalPod) -> None:
    """Succeeded or Failed once every container has terminated (call with ``local.lock`` held)."""
    states = [c.state for c in local.containers.values()]
    if not all("terminated" in s for s in states):
        return
    failed = any(s["terminated"].get("exitCode") for s in states)
    local.phase = "Failed" if failed else "Succeeded"
    local.final = True


def sigterm_state(local: LocalPod) -> JSON:
    """How a simulated container (or one that never started) ends on a node shutdown: as if it obeyed SIGTERM."""
    return {
        "terminated": {
            "exitCode": SIGTERM_EXIT_CODE,
            "reason": "Error",
            "startedAt": local.started_at,
            "finishedAt": now_rfc3339(),
        }
    }


def pod_status(local: LocalPod) -> JSON:
    """The status the kubelet reports for the pod (remembers the conditions it reported)."""
    with local.lock:
        ready = local.phase == "Running" and all(c.ready for c in local.containers.values())
        conditions = list(local.reported_conditions)
        for wanted in (
            condition("PodScheduled", True),
            condition("Initialized", True),
            condition("ContainersReady", ready, None if ready else "ContainersNotReady"),
            condition("Ready", ready, None if ready else ("PodCompleted" if local.final else "ContainersNotReady")),
            *local.extra_conditions,
        ):
            conditions = replace_condition(conditions, wanted)
        local.reported_conditions = conditions
        statuses = []
        for container in local.containers.values():
            entry: JSON = {
                "name": container.name,
                "image": container.image,
                "imageID": "",
                "ready": container.ready,
                "started": "running" in container.state,
                "restartCount": container.restart_count,
                "state": container.state,
                "lastState": container.last_state,
            }
            if container.container_id:
                entry["containerID"] = container.container_id
            statuses.append(entry)
        status: JSON = {
            "phase": local.phase,
            "conditions": conditions,
            "hostIP": NODE_INTERNAL_IP,
            "hostIPs": [{"ip": NODE_INTERNAL_IP}],
            "podIP": local.ip,
            "podIPs": [{"ip": local.ip}],
            "startTime": local.started_at,
            "containerStatuses": statuses,
        }
        if local.reason:
            status["reason"] = local.reason
            status["message"] = local.message or ""
        return status


def status_summary(status: JSON) -> tuple[Any, ...]:
    """What tells a lost status write: phase, IP, reason and each container's state, restarts and exit code."""
    containers = tuple(
        (
            c.get("name"),
            tuple(sorted((c.get("state") or {}).keys())),
            c.get("restartCount"),
            ((c.get("state") or {}).get("terminated") or {}).get("exitCode"),
        )
        for c in status.get("containerStatuses") or []
    )
    return (status.get("phase"), status.get("podIP"), status.get("reason"), containers)
