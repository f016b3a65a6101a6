"""The kopf adapter: what ttj registers with kopf (the jobs' index and one reconcile daemon per job), kopf's
settings, the operator's start and stop, and what each change of a watched object does. The passes themselves are
:mod:`ttj.controller.reconciler`'s, their loop :mod:`ttj.controller.loop`'s; the jobs' children and the nodes are
watched by :mod:`ttj.controller.watches`, not kopf.

Level-based: a pass runs when the daemon starts (create/resume), on every change of the job (but not of its
status alone: that is our own write) or of one of its children (once it is in the index), on the deletion of a
node its pods ran on, within a second of another change of such a node, and on the planner's timer.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Iterable, Mapping
from typing import Any, cast

import kopf
from kopf._cogs.structs.references import (  # kopf's own reading of --namespace patterns
    NamespaceName,
    match_namespace,
)
from kubernetes.client import ApiClient
from prometheus_client import start_http_server

from ttj.controller.context import OperatorContext
from ttj.controller.loop import reconcile_loop
from ttj.controller.memory import JobKey
from ttj.controller.observe import JobIndexes
from ttj.controller.orphans import finalizing_orphans, lister_of, release_orphan
from ttj.controller.reconciler import JobReconciler
from ttj.controller.watches import CHILD_KINDS, NODE, Applied, Batch, Inbox, Indexes, Watches, places
from ttj.kubeapi import KubeClient
from ttj_contract import FINALIZER, GROUP, JOB_FINALIZER, PLURAL, VERSION

log = logging.getLogger("ttj.controller")
#: The job's children other than pods and the Lease, in the order a pass reads their indexes.
CHILD_RESOURCES = tuple(kind for kind in CHILD_KINDS if kind not in ("Pod", "Lease"))
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
#: Connections the watch client keeps besides one per watch.
_SPARE_CONNECTIONS = 4


def _configure(settings: kopf.OperatorSettings) -> None:
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    settings.persistence.finalizer = JOB_FINALIZER
    settings.posting.enabled = False  # our events go through the Applier, about the job only
    settings.watching.server_timeout = 300
    # kopf runs one worker per object that has events queued, and a worker waiting for the next event still holds
    # the last one it handled (the job as the API sent it).
    settings.queueing.idle_timeout = QUEUE_IDLE_SECONDS
    settings.networking.request_timeout = 60


class Handlers:
    """The operator's kopf handlers and what a change of a watched object does, over the context they share."""

    def __init__(self, ctx: OperatorContext) -> None:
        self.ctx = ctx
        self.indexes = Indexes()
        #: kopf's index of the jobs, once the operator has started.
        self.jobs: kopf.Index[JobKey, Any] | None = None
        self.watches: Watches | None = None
        self.lister = lister_of(ctx)

    async def startup(self, settings: kopf.OperatorSettings, **kwargs: Any) -> None:
        ctx = self.ctx
        _configure(settings)
        ctx.state.loop = asyncio.get_running_loop()
        if ctx.metrics_port is not None:
            start_http_server(ctx.metrics_port, registry=ctx.metrics.registry)
            log.info("metrics on :%d/metrics", ctx.metrics_port)
        self.jobs = kwargs["jobs"]
        self._in_background(self._sweep_orphans_forever(kwargs["jobs"]), "ttj orphan sweep")
        watched = await asyncio.to_thread(_places_now, KubeClient(ctx.api), ctx.namespaces)
        # Its own connections: each watch holds one for minutes.
        self.watches = Watches(_watch_client(ctx.api, len(watched)), Inbox(ctx.state.call_soon, self.changed).deliver)
        self.watches.start(NODE, "")
        for place in watched:
            self.watches.start_place(place)

    def _in_background(self, work: Any, name: str) -> None:
        task = asyncio.create_task(work, name=name)
        self.ctx.state.background.add(task)
        task.add_done_callback(self.ctx.state.background.discard)

    async def cleanup(self, **_: Any) -> None:
        """The operator stops: the Events its last passes planned are posted first, for a while."""
        if self.watches is not None:
            await asyncio.to_thread(self.watches.close)
        await self.ctx.events.drain(timeout=_EVENTS_DRAIN_SECONDS)

    def changed(self, batch: Batch) -> None:
        """In the loop: the watched objects' changes into the indexes; each wakes the jobs it may concern."""
        for applied in self.indexes.apply(batch):
            kind = applied.change.kind
            if kind == "Pod":
                self._pod_changed(applied)
            elif kind == NODE:
                self._node_changed(applied)
            else:
                self._child_changed(applied)

    def _pod_changed(self, applied: Applied) -> None:
        """A pod's change wakes its job. A pod of a job that no longer exists must not hang on our finalizer."""
        state = self.ctx.state
        change = applied.change
        key, name, pod = cast(JobKey, change.job), change.name, change.obj
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

    def _child_changed(self, applied: Applied) -> None:
        """A child other than a pod changed: plan its job again, unless the change is our own Lease write as that
        pass left it, or nothing the planner reads of the child."""
        change = applied.change
        key = cast(JobKey, change.job)
        if change.obj is None or (
            not self.ctx.our_lease_write(key, change.kind, change.obj)
            and self.ctx.child_news(key, change.kind, change.obj)
        ):
            self.ctx.poke(key)

    def _node_changed(self, applied: Applied) -> None:
        """Wake the jobs with pods on the node: those the pods by node name, as the index shows them (not every
        job's every pod, for each event of each node: at 1,000 jobs, 9,000 pods for each node event)."""
        name, deleted = applied.change.name, applied.change.obj is None
        pods = self.indexes["Pod"]
        for key in self.ctx.state.jobs_on_node(name):
            if not any(_node_of(pod) == name for _kind, _name, pod in pods.get(key, [])):
                continue
            if deleted:
                self.ctx.poke(key)
            else:
                self.ctx.poke_later(key, NODE_CHANGE_DELAY_SECONDS)

    async def _sweep_orphans_forever(self, jobs: kopf.Index[JobKey, Any]) -> None:
        """Every resync period, release the workers left on our finalizer by a job that went
        (:mod:`ttj.controller.orphans`)."""
        while True:
            await asyncio.sleep(self.ctx.planner.resync_seconds)
            for orphan in finalizing_orphans(self.indexes["Pod"], jobs):  # read in the loop, where they change
                await release_orphan(self.ctx, self.lister, orphan)

    async def index_job(self, namespace: str, name: str, body: kopf.Body, **_: Any) -> Any:
        if self.ctx.job_changed((namespace, name), body):  # not for the status our own passes write
            self.ctx.poke((namespace, name))
        return {(namespace, name): True}

    async def reconcile_job(
        self, *, stopped: kopf.DaemonStopped, namespace: str, name: str, body: kopf.Body, **_: Any
    ) -> None:
        indexes = self.indexes
        observed = JobIndexes(
            indexes["Pod"], indexes["Lease"], [indexes[kind] for kind in CHILD_RESOURCES], indexes[NODE]
        )
        key = (namespace, name)
        reconciler = JobReconciler(self.ctx, key)
        place = _place_of(namespace, self.ctx.namespaces)
        if self.watches is not None:
            self.watches.start_place(place)  # a namespace a pattern matched since the start
        await indexes.listed(place)  # else its first pass would find none of its children

        async def one_pass() -> float | None:
            return await reconciler.run_pass(body, observed)

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
                held = _finalized_pods(indexes["Pod"].get(key, []))
                await asyncio.shield(asyncio.to_thread(self._release_workers, key[0], held))

    def _release_workers(self, namespace: str, pod_names: list[str]) -> None:
        """The job is gone: its workers must not hang on our finalizer (the garbage collector deletes them; a
        pod deleted later is caught by :meth:`_pod_changed`)."""
        for pod_name in pod_names:
            self.ctx.applier.release_finalizer(namespace, pod_name)


def _watch_client(api: ApiClient, watched_places: int) -> KubeClient:
    """A client of its own for the watches, with a connection for each (one per kind of child and place, and
    the nodes') and a few more: with fewer, urllib3 drops and reopens connections."""
    configuration = copy.deepcopy(api.configuration)
    watches = len(CHILD_KINDS) * watched_places + 1
    configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize, watches + _SPARE_CONNECTIONS)
    return KubeClient(ApiClient(configuration))


def _node_of(pod: Mapping[str, Any] | None) -> str:
    return str(((pod or {}).get("spec") or {}).get("nodeName") or "")


def _exact(pattern: str) -> bool:
    """Whether a --namespace pattern names one namespace (no globs, no list, no negation)."""
    return not any(char in pattern for char in "*?[],!")


def _place_of(namespace: str, patterns: tuple[str, ...]) -> str:
    """The place whose watches hold the children of ``namespace``."""
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
    kopf.on.startup(registry=registry)(handlers.startup)
    kopf.on.cleanup(registry=registry)(handlers.cleanup)
    kopf.index(GROUP, VERSION, PLURAL, registry=registry, id="jobs")(handlers.index_job)  # type: ignore[arg-type]
    daemon = kopf.daemon(GROUP, VERSION, PLURAL, registry=registry, id="reconcile", cancellation_timeout=10, backoff=1)
    daemon(handlers.reconcile_job)  # type: ignore[arg-type]
