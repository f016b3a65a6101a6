"""The kopf adapter: what ttj registers with kopf (indexes of the jobs' children and of the nodes, the event
handlers that wake a job's pass, one reconcile daemon per job), kopf's settings, and the operator's start and
stop. The passes themselves are :mod:`ttj.controller.reconciler`'s, their loop :mod:`ttj.controller.loop`'s.

Level-based: a pass runs when the daemon starts (create/resume), on every change of the job (but not of its
status alone: that is our own write) or of one of its children (an event handler per kind of child pokes the
job's daemon once kopf has indexed the change; the pods, watched by :mod:`ttj.controller.pods`, once they are in
its index), on the deletion of a node its pods ran on, within a second of another change of such a node, and on
the planner's timer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

import kopf
from kopf._cogs.structs.references import (  # kopf's own reading of --namespace patterns
    NamespaceName,
    match_namespace,
)
from kubernetes.client import ApiClient
from prometheus_client import start_http_server

from ttj.controller.audit import audit_forever, lister_of, release_orphan
from ttj.controller.context import OperatorContext
from ttj.controller.loop import reconcile_loop
from ttj.controller.memory import JobKey, resource_version
from ttj.controller.observe import JobIndexes
from ttj.controller.orphans import finalizing_orphans
from ttj.controller.pods import Batch, Inbox, PodIndex, PodWatch, job_key, places
from ttj.controller.reconciler import JobReconciler
from ttj.kubeapi import RESOURCES, KubeClient
from ttj.planner import observed_child
from ttj.planner.observed import json_copy
from ttj_contract import FINALIZER, GROUP, JOB_FINALIZER, LABEL_JOB, PLURAL, VERSION

log = logging.getLogger("ttj.controller")
#: The job's children other than pods and the Lease: kind → kopf resource.
CHILD_RESOURCES = {
    kind: RESOURCES[kind].kopf_name
    for kind in ("Service", "Deployment", "ServiceAccount", "Role", "RoleBinding", "NetworkPolicy")
}
#: Nodes are big (images, allocatable…): the planner needs only these parts of their metadata (and a pass its
#: resourceVersion, to tell a changed node), their taints, conditions and capacity.
_NODE_KEEP = ("name", "uid", "resourceVersion", "labels", "creationTimestamp", "deletionTimestamp")
#: A change of a node that is still there wakes the jobs with pods on it this much later. GKE marks a node
#: shutting down (its taint, NotReady) just before its kubelet stops the pods, whose own events are what a
#: replacement waits for: passes planned at once for the node would stand in front of them. A pass for a pod
#: cancels the wait, as it sees the node too, and a second is little beside the node grace. A node's deletion
#: follows its pods' events and wakes them at once: deferred, nothing would cancel it, and each job would run
#: one more pass for it.
NODE_CHANGE_DELAY_SECONDS = 1.0
#: How long kopf keeps the worker of an object with no new events (and the last event it handled) before it exits.
QUEUE_IDLE_SECONDS = 1.0
#: When the operator stops, how long the Events its passes planned may take to be posted.
_EVENTS_DRAIN_SECONDS = 5.0


def _listed(kwargs: Mapping[str, Any]) -> bool:
    """Whether kopf delivers the object from a listing (its event type None), not from the watch: after a
    410 the list may lack objects deleted meanwhile, and kopf keeps them indexed."""
    return "type" in kwargs and kwargs["type"] is None


def _slim_node(body: kopf.Body) -> dict[str, Any]:
    metadata = {k: body.metadata.get(k) for k in _NODE_KEEP if body.metadata.get(k) is not None}
    status = body.get("status") or {}
    return {
        "metadata": metadata,
        "spec": {"taints": json_copy(body.spec.get("taints") or [])},
        "status": {"conditions": status.get("conditions") or [], "capacity": status.get("capacity") or {}},
    }


def child_index(kind: str) -> Callable[..., Any]:
    """The index function of one kind of child other than pods: the job's key → (kind, name, the object). Index
    functions and the handlers that only poke are coroutines: kopf runs those in its loop, where a sync function
    would cost a hop to an executor thread on every event of every child."""

    async def index(namespace: str, name: str, labels: dict[str, str], body: kopf.Body, **_: Any) -> Any:
        key = job_key(namespace, labels)
        if key is None:
            return None
        return {key: (kind, name, observed_child(kind, body))}

    index.__name__ = f"{kind.lower()}s_by_job"
    return index


async def index_node(name: str, body: kopf.Body, **_: Any) -> Any:
    return {name: _slim_node(body)}


class JobsDiffBase(kopf.AnnotationsDiffBaseStorage):
    """kopf builds the diff base (the object's "essence": a deep copy of all but its status) on every event of
    every watched object, but uses it only for creation/update and daemon handlers, which ttj has on its jobs
    alone. Of any other object (a pod: its containers, environment, volumes) it builds none: at 500 jobs those
    copies were a quarter of the operator's CPU."""

    def build(self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None) -> kopf.BodyEssence:
        if not _ours(body):
            return cast(kopf.BodyEssence, {})
        return super().build(body=body, extra_fields=extra_fields)

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        """Nor does it read one back of other objects (their annotations, parsed on every event)."""
        if not _ours(body):
            return None
        return super().fetch(body=body)


def _ours(body: kopf.Body) -> bool:
    """Whether ``body`` is one of ttj's jobs (an object without apiVersion counts as one)."""
    api_version = str(body.get("apiVersion") or "")
    return not api_version or api_version.startswith(f"{GROUP}/")


def _configure(settings: kopf.OperatorSettings) -> None:
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = JobsDiffBase(prefix=GROUP, key="last-handled-configuration")
    settings.persistence.finalizer = JOB_FINALIZER
    settings.posting.enabled = False  # our events go through the Applier, about the job only
    settings.watching.server_timeout = 300
    # kopf runs one worker per object that has events queued, and a worker waiting for the next event still holds
    # the last one it handled: the object as the API sent it (a pod with its containers and managedFields). With
    # kopf's default of 5 s, at start-up nearly every pod's worker was waiting, each holding its pod.
    settings.queueing.idle_timeout = QUEUE_IDLE_SECONDS
    settings.networking.request_timeout = 60


class Handlers:
    """The operator's kopf handlers, over the context they share."""

    def __init__(self, ctx: OperatorContext) -> None:
        self.ctx = ctx
        self.pods = PodIndex()
        #: kopf's index of the jobs, once the operator has started.
        self.jobs: kopf.Index[JobKey, Any] | None = None
        self.watch: PodWatch | None = None
        self.lister = lister_of(ctx)

    async def startup(self, settings: kopf.OperatorSettings, **kwargs: Any) -> None:
        ctx = self.ctx
        _configure(settings)
        ctx.state.loop = asyncio.get_running_loop()
        if ctx.metrics_port is not None:
            start_http_server(ctx.metrics_port, registry=ctx.metrics.registry)
            log.info("metrics on :%d/metrics", ctx.metrics_port)
        self.jobs = kwargs["jobs"]
        indexes = [kwargs[f"{kind.lower()}s_by_job"] for kind in ("Lease", *CHILD_RESOURCES)]
        self._in_background(
            audit_forever(ctx, indexes, kwargs["nodes_by_name"], self.pods, kwargs["jobs"]), "ttj index audit"
        )
        # Its own connections: each watch holds one for minutes.
        client = KubeClient(ApiClient(ctx.api.configuration))
        self.watch = PodWatch(client, Inbox(ctx.state.call_soon, self.pods_changed).deliver)
        for place in await asyncio.to_thread(_places_now, client, ctx.namespaces):
            self.watch.start(place)

    def _in_background(self, work: Any, name: str) -> None:
        task = asyncio.create_task(work, name=name)
        self.ctx.state.background.add(task)
        task.add_done_callback(self.ctx.state.background.discard)

    async def cleanup(self, **_: Any) -> None:
        """The operator stops: the Events its last passes planned are posted first, for a while."""
        if self.watch is not None:
            await asyncio.to_thread(self.watch.close)
        await self.ctx.events.drain(timeout=_EVENTS_DRAIN_SECONDS)

    def pods_changed(self, batch: Batch) -> None:
        """In the loop: the pods' changes into the index; each wakes its job. A pod of a job that no longer
        exists must not hang on our finalizer."""
        state = self.ctx.state
        for applied in self.pods.apply(batch):
            key, name, pod = applied.change.key, applied.change.name, applied.change.pod
            if pod is None:
                state.pod_gone(_node_of(applied.before), key, name)
                if (memory := state.jobs.get(key)) is not None:
                    # Seen deleted: our own last write of it (a finalizer released) no longer stands in for it.
                    memory.written_children.pop(("Pod", name), None)
            elif node := _node_of(pod):
                state.pod_bound(node, key, name)
            self.ctx.poke(key)
            if pod is not None and self.jobs is not None and key not in self.jobs:
                for orphan in finalizing_orphans({key: [("Pod", name, pod)]}, self.jobs):
                    self._in_background(release_orphan(self.ctx, self.lister, orphan), f"release {key[0]}/{name}")

    async def child_changed(self, namespace: str | None, labels: Mapping[str, str], **kwargs: Any) -> None:
        """A child changed: plan its job again. Poked from here, not from the index function: kopf stores
        what an index function returns only after it returns, so a pass woken from inside it could read the
        old child and then sleep until its timer."""
        key = job_key(namespace, labels)
        body = kwargs.get("body")
        listed = _listed(kwargs)
        if (
            key is not None
            and not self.ctx.our_lease_write(key, body)
            and (kwargs.get("type") == "DELETED" or self.ctx.child_news(key, body, listed=listed))
        ):
            self.ctx.poke(key)
        if listed:
            self.ctx.request_audit()

    async def node_changed(self, name: str, **kwargs: Any) -> None:
        """Wake the jobs with pods on the node: those the pods by node name, as the index shows them (not every
        job's every pod, for each event of each node: at 1,000 jobs, 9,000 pods for each node event)."""
        state = self.ctx.state
        version = resource_version(kwargs.get("body") or {})
        unchanged = state.node_versions.get(name) == version
        state.node_versions[name] = version
        if kwargs.get("type") == "DELETED":
            state.node_versions.pop(name, None)
        if _listed(kwargs):
            self.ctx.request_audit()
            if unchanged:
                return  # listed again as it was: nothing for its jobs' passes
        for key in state.jobs_on_node(name):
            if not any(_node_of(pod) == name for _kind, _name, pod in self.pods.get(key, [])):
                continue
            if kwargs.get("type") == "DELETED":
                self.ctx.poke(key)
            else:
                self.ctx.poke_later(key, NODE_CHANGE_DELAY_SECONDS)

    async def index_job(self, namespace: str, name: str, body: kopf.Body, **_: Any) -> Any:
        if self.ctx.job_changed((namespace, name), body):  # not for the status our own passes write
            self.ctx.poke((namespace, name))
        return {(namespace, name): True}

    async def reconcile_job(
        self,
        *,
        stopped: kopf.DaemonStopped,
        namespace: str,
        name: str,
        body: kopf.Body,
        leases_by_job: kopf.Index[JobKey, Any],
        nodes_by_name: kopf.Index[str, Any],
        **kwargs: Any,
    ) -> None:
        children = [kwargs[f"{kind.lower()}s_by_job"] for kind in CHILD_RESOURCES]
        indexes = JobIndexes(self.pods, leases_by_job, children, nodes_by_name)
        key = (namespace, name)
        reconciler = JobReconciler(self.ctx, key)
        place = _place_of(namespace, self.ctx.namespaces)
        if self.watch is not None:
            self.watch.start(place)  # a namespace a pattern matched since the start
        await self.pods.listed_event(place).wait()  # else its first pass would find none of its pods

        async def one_pass() -> float | None:
            return await reconciler.run_pass(body, indexes)

        try:
            await reconcile_loop(
                one_pass,
                self.ctx.state.job(key).wakeup,
                stopped,
                self.ctx.backoff,
                debounce=lambda: max(self.ctx.debounce_seconds, reconciler.coalesce_seconds()),
                what=f"{namespace}/{name}",
            )
        finally:
            self.ctx.state.jobs.pop(key, None)
            if stopped.reason is not None and kopf.DaemonStoppingReason.RESOURCE_DELETED in stopped.reason:
                self.ctx.metrics.forget(namespace, name)
                # Read the index here, on the loop that updates it: a thread iterating it would race its updates.
                held = _finalized_pods(self.pods.get(key, []))
                await asyncio.shield(asyncio.to_thread(self._release_workers, key[0], held))

    def _release_workers(self, namespace: str, pod_names: list[str]) -> None:
        """The job is gone: its workers must not hang on our finalizer (the garbage collector deletes them; a
        pod deleted later is caught by :meth:`pod_changed`)."""
        for pod_name in pod_names:
            self.ctx.applier.release_finalizer(namespace, pod_name)


def _node_of(pod: Mapping[str, Any] | None) -> str:
    return str(((pod or {}).get("spec") or {}).get("nodeName") or "")


def _exact(pattern: str) -> bool:
    """Whether a --namespace pattern names one namespace (no globs, no list, no negation)."""
    return not any(char in pattern for char in "*?[],!")


def _place_of(namespace: str, patterns: tuple[str, ...]) -> str:
    """The place whose watch holds the pods of ``namespace``."""
    return namespace if patterns else ""


def _places_now(client: KubeClient, patterns: tuple[str, ...]) -> list[str]:
    """The places to watch from the start: every namespace, the ones named, and those that the patterns match now
    (a namespace created later is watched once a job of it runs)."""
    named = [pattern for pattern in patterns if _exact(pattern)]
    globs = [pattern for pattern in patterns if not _exact(pattern)]
    if not globs:
        return places(named)
    listed = client.request("GET", "/api/v1/namespaces").get("items") or []
    names = [NamespaceName(str((ns.get("metadata") or {}).get("name") or "")) for ns in listed]
    return places([*named, *(name for name in names if any(match_namespace(name, glob) for glob in globs))])


def _finalized_pods(indexed: Iterable[tuple[str, str, Any]]) -> list[str]:
    """The names of the indexed pods that still carry our finalizer."""
    return [name for _kind, name, pod in indexed if FINALIZER in ((pod.get("metadata") or {}).get("finalizers") or [])]


def register(registry: kopf.OperatorRegistry, ctx: OperatorContext) -> None:
    """Attach every handler of the operator to ``registry``."""
    handlers = Handlers(ctx)
    job_labels = {LABEL_JOB: kopf.PRESENT}
    kopf.on.startup(registry=registry)(handlers.startup)
    kopf.on.cleanup(registry=registry)(handlers.cleanup)
    children = {"Lease": RESOURCES["Lease"].kopf_name} | CHILD_RESOURCES
    for kind, resource in children.items():
        kopf.index(resource, labels=job_labels, registry=registry, id=f"{kind.lower()}s_by_job")(child_index(kind))
        changed = handlers.child_changed
        kopf.on.event(resource, labels=job_labels, registry=registry, id=f"{kind.lower()}_changed")(changed)
    kopf.index("nodes", registry=registry, id="nodes_by_name")(index_node)
    kopf.on.event("nodes", registry=registry, id="node_changed")(handlers.node_changed)
    kopf.index(GROUP, VERSION, PLURAL, registry=registry, id="jobs")(handlers.index_job)  # type: ignore[arg-type]
    daemon = kopf.daemon(GROUP, VERSION, PLURAL, registry=registry, id="reconcile", cancellation_timeout=10, backoff=1)
    daemon(handlers.reconcile_job)  # type: ignore[arg-type]
