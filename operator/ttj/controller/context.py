"""What the handlers share: settings, the API client and the writes, metrics, and the operator's memory."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import kopf
from kubernetes.client import ApiClient

from ttj.controller.apply import Applier, KubeApi
from ttj.controller.backoff import Backoff
from ttj.controller.events import EventPoster
from ttj.controller.memory import JobKey, OperatorState, resource_version
from ttj.controller.metrics import Metrics
from ttj.controller.placement import PlacementSource
from ttj.controller.threads import RequestThreads
from ttj.cost.prices import PriceSource
from ttj.kubeapi import KubeClient
from ttj.planner import PlannerConfig

#: Job metadata that every write changes: not a reason to plan again.
_VOLATILE_METADATA = ("resourceVersion", "managedFields")
#: A child's metadata that every write changes (and its spec's generation): not a reason to plan again.
_VOLATILE_CHILD_METADATA = ("resourceVersion", "managedFields", "generation")
#: Threads that carry the passes' requests (their writes, their status writes; see ttj.controller.threads). Each
#: waits on a round trip without the GIL. asyncio's default executor has 6 on 2 cores, shared with the Events
#: and the audit, first come first served: at start-up the first passes' creates held all 6, and a job whose pods
#: were all ready waited seconds for one to write its status. Not more than 8: each answer is decoded holding the
#: GIL the event loop needs (16 were no faster at 100 jobs, within the spread of runs on a shared machine).
API_THREADS = 8
#: ... of which batches of more than HEAVY_WRITES writes (a job's first pass) never hold the last few.
API_THREADS_RESERVED = 2
HEAVY_WRITES = 4


@dataclass
class OperatorContext:
    """What the handlers share: settings, the API client, metrics, and the operator's state."""

    api: ApiClient
    metrics: Metrics
    planner: PlannerConfig = field(default_factory=PlannerConfig)
    metrics_port: int | None = None
    #: Extra pause before a pass to coalesce bursts of watch events (seconds).
    debounce_seconds: float = 0.0
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    #: Price table re-read when its file changes (a mounted ConfigMap), replacing ``planner.prices``.
    prices: PriceSource | None = None
    #: Node pools for the placement check; None: no check.
    placement: PlacementSource | None = None
    #: Where the writes go; None: the API server behind ``api``.
    kube: KubeApi | None = None
    #: The namespaces (kopf patterns) the operator acts in; none: every namespace.
    namespaces: tuple[str, ...] = ()
    #: How long a job's daemon waits after a failed pass before the next.
    backoff: Backoff = field(default_factory=Backoff)
    state: OperatorState = field(default_factory=OperatorState)
    applier: Applier = field(init=False)
    events: EventPoster = field(init=False)
    #: Where the passes' blocking requests run.
    api_threads: RequestThreads = field(init=False)

    def __post_init__(self) -> None:
        self.applier = Applier(self.kube if self.kube is not None else KubeClient(self.api))
        self.events = EventPoster(self.applier.post_event)
        self.api_threads = RequestThreads(API_THREADS, reserved=API_THREADS_RESERVED, heavy_above=HEAVY_WRITES)

    def poke(self, key: JobKey) -> None:
        """From any thread: run a pass of the job now, if its daemon runs."""
        memory = self.state.jobs.get(key)
        if memory is not None:
            self.state.call_soon(memory.wakeup.set)

    def poke_later(self, key: JobKey, seconds: float) -> None:
        """From any thread: run a pass of the job in ``seconds``, or sooner if anything else pokes it."""
        memory = self.state.jobs.get(key)
        if memory is not None:
            self.state.call_soon(lambda: memory.wakeup.set_after(seconds))

    def our_lease_write(self, key: JobKey, kind: str, obj: Mapping[str, Any]) -> bool:
        """Whether this change of a child is the job's Lease exactly as the last pass's write of it left it: that
        pass planned the write, and a pass woken by it would find nothing new (at 500 jobs, one pass more per
        Lease write)."""
        memory = self.state.jobs.get(key)
        if kind != "Lease" or memory is None or memory.lease_written is None:
            return False
        return resource_version(obj) == resource_version(memory.lease_written.obj)

    def child_news(self, key: JobKey, kind: str, obj: Mapping[str, Any]) -> bool:
        """Whether this change of a child may change what the job's next pass plans. A PS Deployment's status
        changes some five times as its pod comes up (replicas, ready, available, observedGeneration), and the
        planner reads of it only the ReplicaFailure condition: each woke a pass that planned nothing (a tenth of a
        100-job start-up's passes). Every other kind, and anything else of a Deployment, is news."""
        memory = self.state.jobs.get(key)
        if kind != "Deployment" or memory is None:
            return True
        name = str((obj.get("metadata") or {}).get("name") or "")
        view = deployment_as_planned(obj)
        if memory.children_seen.get(("Deployment", name)) == view:
            return False
        memory.children_seen[("Deployment", name)] = view
        return True

    def job_changed(self, key: JobKey, body: kopf.Body) -> bool:
        """Whether this event of the job carries more than a status (and resourceVersion) change.

        Only the operator writes the status, and each pass accrues cost, so passes write often: were the job's
        daemon woken by such a write, it would write again soon, and so on without end.
        """
        metadata = {k: v for k, v in dict(body.get("metadata") or {}).items() if k not in _VOLATILE_METADATA}
        fingerprint = json.dumps([metadata, body.get("spec")], sort_keys=True, default=str)
        memory = self.state.job(key)
        if memory.seen == fingerprint:
            return False
        memory.seen = fingerprint
        return True


def deployment_as_planned(body: Mapping[str, Any]) -> dict[str, Any]:
    """What the planner reads of a PS Deployment (see :func:`ttj.planner.observed.observed_child`): its metadata
    but the versions, its spec but the pod template (compared by its fingerprint annotation), and its
    ReplicaFailure condition."""
    metadata = {k: v for k, v in (body.get("metadata") or {}).items() if k not in _VOLATILE_CHILD_METADATA}
    spec = {k: v for k, v in (body.get("spec") or {}).items() if k != "template"}
    conditions = [c for c in (body.get("status") or {}).get("conditions") or [] if c.get("type") == "ReplicaFailure"]
    return {"metadata": metadata, "spec": spec, "conditions": conditions}
