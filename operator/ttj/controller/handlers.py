"""kopf handlers: indexes of the jobs' children, one reconcile daemon per job, metrics and liveness.

Level-based: every pass observes everything from kopf's indexes (fed by watches), asks the planner,
applies its actions, writes the status once (when the planner says it is due, with a resourceVersion
precondition), then hands the events to the background poster. A pass runs on create/resume (the daemon
starts), on every change of the job (but not of its status alone: that is our own write) or of one of its
children (an event handler per kind of child pokes the job's daemon once kopf has indexed the change), on the
deletion of a node its pods ran on, within a second of another change of such a node, and on the planner's
timer.
Nothing the next pass needs is kept only in memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import json
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol, cast

import kopf
from kubernetes.client import ApiClient
from prometheus_client import start_http_server

from ttj.controller import audit
from ttj.controller.apply import MAX_RETRY_SECONDS, Applied, Applier, Conflict, KubeApi, retry_delay
from ttj.controller.events import EventPoster
from ttj.controller.metrics import Metrics
from ttj.controller.placement import PlacementSource
from ttj.cost.prices import PriceSource
from ttj.kubeapi import RESOURCES, KubeClient, KubeError
from ttj.mergepatch import merge_patch_between
from ttj.planner import Observed, Plan, PlannerConfig, observed_pod, plan
from ttj_contract import FINALIZER, GROUP, JOB_FINALIZER, LABEL_JOB, PLURAL, VERSION, lease_name

log = logging.getLogger("ttj.controller")

JobKey = tuple[str, str]
#: The job's children other than pods and the Lease: kind → kopf resource.
CHILD_RESOURCES = {
    kind: RESOURCES[kind].kopf_name
    for kind in ("Service", "Deployment", "ServiceAccount", "Role", "RoleBinding", "NetworkPolicy")
}
#: Nodes are big (images, allocatable…): the planner needs only these parts of their metadata, their taints,
#: conditions and capacity.
_NODE_KEEP = ("name", "uid", "labels", "creationTimestamp", "deletionTimestamp")
#: A change of a node that is still there wakes the jobs with pods on it this much later. GKE marks a node
#: shutting down (its taint, NotReady) just before its kubelet stops the pods, whose own events are what a
#: replacement waits for: passes planned at once for the node would stand in front of them. A pass for a pod
#: cancels the wait, as it sees the node too, and a second is little beside the node grace. A node's deletion
#: follows its pods' events and wakes them at once: deferred, nothing would cancel it, and each job would run
#: one more pass for it.
NODE_CHANGE_DELAY_SECONDS = 1.0
#: After a listing (kopf's events of type None), wait this long for it to finish before auditing the indexes.
_AUDIT_SETTLE_SECONDS = 2.0
#: Job metadata that every write changes: not a reason to plan again.
_VOLATILE_METADATA = ("resourceVersion", "managedFields")
#: When the operator stops, how long the Events its passes planned may take to be posted.
_EVENTS_DRAIN_SECONDS = 5.0
#: After a status write lost to a concurrent change (409), the next pass plans on the newer job this soon.
CONFLICT_RETRY_SECONDS = 0.05


class Stopped(Protocol):
    """What the loop needs of :class:`kopf.DaemonStopped`: truthy once the daemon must stop, and a wait."""

    def __bool__(self) -> bool: ...

    def wait(self) -> Awaitable[Any]: ...


@dataclass
class RestartBackoff:
    """The wait after the ``failures``-th failed pass in a row: doubling from ``base`` up to ``cap``, with
    "equal jitter" (uniform over the upper half), so jobs failing together (an API outage) spread out
    instead of retrying in lockstep; the first success resets it."""

    base: float = 0.5
    cap: float = 30.0
    rng: random.Random = field(default_factory=random.Random)

    def delay(self, failures: int) -> float:
        ceiling = min(self.cap, self.base * 2 ** max(0, failures - 1))
        return self.rng.uniform(ceiling / 2, ceiling)


@dataclass(frozen=True)
class OwnWrite:
    """An object as our own writes left it, and the resourceVersions it had before them: while a watch still
    shows one of those, a pass plans on this instead, as the watch has not delivered our writes yet."""

    before: frozenset[str]
    obj: dict[str, Any]

    def over(self, seen: Mapping[str, Any]) -> dict[str, Any] | None:
        """A copy of ours when ``seen`` is from before our writes; None once the watch shows them (or newer)."""
        return copy.deepcopy(self.obj) if _resource_version(seen) in self.before else None


class Wakeup(asyncio.Event):
    """What wakes a job's daemon: set now, or after a delay. Clearing it (a pass starts, and sees everything
    there is) also cancels a pending delayed set."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: asyncio.TimerHandle | None = None

    def set_after(self, seconds: float) -> None:
        """Set in ``seconds``, unless already due sooner; call in the loop that waits on it."""
        if self.pending is None:
            self.pending = asyncio.get_running_loop().call_later(seconds, self._due)

    def _due(self) -> None:
        self.pending = None
        self.set()

    def clear(self) -> None:
        super().clear()
        if self.pending is not None:
            self.pending.cancel()
            self.pending = None


@dataclass
class JobMemory:
    """What the operator keeps of one job between its passes, while its daemon runs (never across restarts)."""

    #: Set to run a pass: now (a change of the job or of one of its children), or soon (of a node).
    wakeup: Wakeup = field(default_factory=Wakeup)
    #: The job's metadata and spec as the jobs index last saw them: a pass is due only when they change.
    seen: str = ""
    #: The job as the last status write left it, over the resourceVersion that write was based on.
    written: OwnWrite | None = None
    #: The chief's Lease as our latest writes of it left it, over the versions it had before each. A pass that
    #: elects a chief right after a pass that published the worker counts would otherwise send a stale
    #: precondition, and lose a round trip to the 409 and the pass planned again.
    lease_written: OwnWrite | None = None


@dataclass
class OperatorState:
    """All the operator holds in memory besides kopf's indexes; nothing a pass needs is kept only here."""

    #: The operator's event loop: index functions run in kopf's executor threads and wake daemons through it.
    loop: asyncio.AbstractEventLoop | None = None
    jobs: dict[JobKey, JobMemory] = field(default_factory=dict)
    #: uids of indexed objects the last index audit found deleted (see :mod:`ttj.controller.audit`).
    gone: frozenset[str] = frozenset()
    #: Set to have the indexes audited soon (after a listing).
    audit_due: asyncio.Event = field(default_factory=asyncio.Event)
    #: Tasks the operator runs besides kopf's (kept referenced until done).
    background: set[asyncio.Task[None]] = field(default_factory=set)

    def job(self, key: JobKey) -> JobMemory:
        return self.jobs.setdefault(key, JobMemory())

    def call_soon(self, callback: Callable[[], Any]) -> None:
        """Run ``callback`` in the operator's loop, from any thread (asyncio's events are not thread-safe:
        set from another thread, a waiter can miss it and the loop is not woken); at once when called from the
        loop itself (most handlers run there) or before it runs."""
        if self.loop is None or _running_loop() is self.loop:
            callback()
        elif not self.loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: the operator is stopping
                self.loop.call_soon_threadsafe(callback)


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
    #: How long a job's daemon waits after a failed pass before the next.
    backoff: RestartBackoff = field(default_factory=RestartBackoff)
    state: OperatorState = field(default_factory=OperatorState)
    applier: Applier = field(init=False)
    events: EventPoster = field(init=False)

    def __post_init__(self) -> None:
        self.applier = Applier(self.kube if self.kube is not None else KubeClient(self.api))
        self.events = EventPoster(self.applier.post_event)

    def request_audit(self) -> None:
        """From any thread: audit the indexes soon."""
        self.state.call_soon(self.state.audit_due.set)

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


@dataclass(frozen=True)
class JobIndexes:
    """kopf's indexes a pass observes a job through."""

    pods: kopf.Index[JobKey, Any]
    leases: kopf.Index[JobKey, Any]
    #: One index per kind of :data:`CHILD_RESOURCES`.
    children: Sequence[kopf.Index[JobKey, Any]]
    nodes: kopf.Index[str, Any]

    def all_nodes(self) -> list[dict[str, Any]]:
        return [node for _name, store in self.nodes.items() for node in store]


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:  # a thread without a loop: one of kopf's executor threads
        return None


def _listed(kwargs: Mapping[str, Any]) -> bool:
    """Whether kopf delivers the object from a listing (its event type None), not from the watch: after a
    410 the list may lack objects deleted meanwhile, and kopf keeps them indexed."""
    return "type" in kwargs and kwargs["type"] is None


def _job_key(namespace: str | None, labels: Mapping[str, str]) -> JobKey | None:
    job = labels.get(LABEL_JOB)
    return (namespace or "", job) if job else None


def _slim_node(body: kopf.Body) -> dict[str, Any]:
    metadata = {k: body.metadata.get(k) for k in _NODE_KEEP if body.metadata.get(k) is not None}
    status = body.get("status") or {}
    return {
        "metadata": metadata,
        "spec": {"taints": copy.deepcopy(body.spec.get("taints") or [])},
        "status": {"conditions": status.get("conditions") or [], "capacity": status.get("capacity") or {}},
    }


def child_index(kind: str) -> Callable[..., Any]:
    """The index function of one kind of child: the job's key → (kind, name, the object). Index functions
    and the handlers that only poke are coroutines: kopf runs those in its loop, where a sync function would
    cost a hop to an executor thread on every event of every child."""

    slim = observed_pod if kind == "Pod" else copy.deepcopy

    async def index(namespace: str, name: str, labels: dict[str, str], body: kopf.Body, **_: Any) -> Any:
        key = _job_key(namespace, labels)
        if key is None:
            return None
        return {key: (kind, name, slim(dict(body)))}

    index.__name__ = f"{kind.lower()}s_by_job"
    return index


async def index_node(name: str, body: kopf.Body, **_: Any) -> Any:
    return {name: _slim_node(body)}


def _finalizing_pod(body: kopf.Body, **_: Any) -> bool:
    """A pod being deleted that our finalizer holds."""
    return bool(body.metadata.get("deletionTimestamp")) and FINALIZER in (body.metadata.get("finalizers") or [])


class JobsDiffBase(kopf.AnnotationsDiffBaseStorage):
    """kopf builds the diff base (the object's "essence": a deep copy of all but its status) on every event of
    every watched object, but uses it only for creation/update and daemon handlers, which ttj has on its jobs
    alone. Of any other object (a pod: its containers, environment, volumes) it builds none: at 500 jobs those
    copies were a quarter of the operator's CPU."""

    def build(self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None) -> kopf.BodyEssence:
        api_version = str(body.get("apiVersion") or "")
        if api_version and not api_version.startswith(f"{GROUP}/"):
            return cast(kopf.BodyEssence, {})
        return super().build(body=body, extra_fields=extra_fields)


def _configure(settings: kopf.OperatorSettings) -> None:
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = JobsDiffBase(prefix=GROUP, key="last-handled-configuration")
    settings.persistence.finalizer = JOB_FINALIZER
    settings.posting.enabled = False  # our events go through the Applier, about the job only
    settings.watching.server_timeout = 300
    settings.networking.request_timeout = 60


class Handlers:
    """The operator's kopf handlers, over the context they share."""

    def __init__(self, ctx: OperatorContext) -> None:
        self.ctx = ctx

    async def startup(self, settings: kopf.OperatorSettings, **kwargs: Any) -> None:
        ctx = self.ctx
        _configure(settings)
        ctx.state.loop = asyncio.get_running_loop()
        if ctx.metrics_port is not None:
            start_http_server(ctx.metrics_port, registry=ctx.metrics.registry)
            log.info("metrics on :%d/metrics", ctx.metrics_port)
        indexes = [kwargs[f"{kind.lower()}s_by_job"] for kind in ("Pod", "Lease", *CHILD_RESOURCES)]
        auditing = asyncio.create_task(audit_forever(ctx, indexes, kwargs["nodes_by_name"]), name="ttj index audit")
        ctx.state.background.add(auditing)
        auditing.add_done_callback(ctx.state.background.discard)

    async def cleanup(self, **_: Any) -> None:
        """The operator stops: the Events its last passes planned are posted first, for a while."""
        await self.ctx.events.drain(timeout=_EVENTS_DRAIN_SECONDS)

    async def child_changed(self, namespace: str | None, labels: Mapping[str, str], **kwargs: Any) -> None:
        """A child changed: plan its job again. Poked from here, not from the index function: kopf stores
        what an index function returns only after it returns, so a pass woken from inside it could read the
        old child and then sleep until its timer."""
        key = _job_key(namespace, labels)
        if key is not None:
            self.ctx.poke(key)
        if _listed(kwargs):
            self.ctx.request_audit()

    async def node_changed(self, name: str, pods_by_job: kopf.Index[JobKey, Any], **kwargs: Any) -> None:
        if _listed(kwargs):
            self.ctx.request_audit()
        for key, store in list(pods_by_job.items()):
            if not any((pod[2].get("spec") or {}).get("nodeName") == name for pod in store):
                continue
            if kwargs.get("type") == "DELETED":
                self.ctx.poke(key)
            else:
                self.ctx.poke_later(key, NODE_CHANGE_DELAY_SECONDS)

    async def index_job(self, namespace: str, name: str, body: kopf.Body, **_: Any) -> Any:
        if self.ctx.job_changed((namespace, name), body):  # not for the status our own passes write
            self.ctx.poke((namespace, name))
        return {(namespace, name): True}

    def orphan_pod(
        self, *, namespace: str, name: str, labels: dict[str, str], jobs: kopf.Index[JobKey, Any], **_: Any
    ) -> None:
        """A worker of a job that no longer exists must not hang on our finalizer."""
        key = _job_key(namespace, labels)
        if key is not None and key not in jobs:
            self.ctx.applier.release_finalizer(namespace, name)

    async def reconcile_job(
        self,
        *,
        stopped: kopf.DaemonStopped,
        namespace: str,
        name: str,
        body: kopf.Body,
        pods_by_job: kopf.Index[JobKey, Any],
        leases_by_job: kopf.Index[JobKey, Any],
        nodes_by_name: kopf.Index[str, Any],
        **kwargs: Any,
    ) -> None:
        children = [kwargs[f"{kind.lower()}s_by_job"] for kind in CHILD_RESOURCES]
        indexes = JobIndexes(pods_by_job, leases_by_job, children, nodes_by_name)
        key = (namespace, name)
        reconciler = JobReconciler(self.ctx, key)

        async def one_pass() -> float | None:
            return await reconciler.run_pass(body, indexes)

        try:
            await reconcile_loop(
                one_pass,
                self.ctx.state.job(key).wakeup,
                stopped,
                self.ctx.backoff,
                debounce_seconds=self.ctx.debounce_seconds,
                what=f"{namespace}/{name}",
            )
        finally:
            self.ctx.state.jobs.pop(key, None)
            if stopped.reason is not None and kopf.DaemonStoppingReason.RESOURCE_DELETED in stopped.reason:
                self.ctx.metrics.forget(namespace, name)
                # Read the index here, on the loop that updates it: a thread iterating it would race its updates.
                held = _finalized_pods(pods_by_job.get(key, []))
                await asyncio.shield(asyncio.to_thread(self._release_workers, key[0], held))

    def _release_workers(self, namespace: str, pod_names: list[str]) -> None:
        """The job is gone: its workers must not hang on our finalizer (the garbage collector deletes them; a
        pod deleted later is caught by :meth:`orphan_pod`)."""
        for pod_name in pod_names:
            self.ctx.applier.release_finalizer(namespace, pod_name)


def _resource_version(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _finalized_pods(indexed: Iterable[tuple[str, str, Any]]) -> list[str]:
    """The names of the indexed pods that still carry our finalizer."""
    return [name for _kind, name, pod in indexed if FINALIZER in ((pod.get("metadata") or {}).get("finalizers") or [])]


def register(registry: kopf.OperatorRegistry, ctx: OperatorContext) -> None:
    """Attach every handler of the operator to ``registry``."""
    handlers = Handlers(ctx)
    job_labels = {LABEL_JOB: kopf.PRESENT}
    kopf.on.startup(registry=registry)(handlers.startup)
    kopf.on.cleanup(registry=registry)(handlers.cleanup)
    children = {kind: RESOURCES[kind].kopf_name for kind in ("Pod", "Lease")} | CHILD_RESOURCES
    for kind, resource in children.items():
        kopf.index(resource, labels=job_labels, registry=registry, id=f"{kind.lower()}s_by_job")(child_index(kind))
        kopf.on.event(resource, labels=job_labels, registry=registry, id=f"{kind.lower()}_changed")(
            handlers.child_changed
        )
    kopf.index("nodes", registry=registry, id="nodes_by_name")(index_node)
    kopf.on.event("nodes", registry=registry, id="node_changed")(handlers.node_changed)  # type: ignore[arg-type]
    kopf.index(GROUP, VERSION, PLURAL, registry=registry, id="jobs")(handlers.index_job)  # type: ignore[arg-type]
    orphans = kopf.on.event("pods", labels=job_labels, registry=registry, id="orphan_pod", when=_finalizing_pod)
    orphans(handlers.orphan_pod)  # type: ignore[arg-type]
    daemon = kopf.daemon(GROUP, VERSION, PLURAL, registry=registry, id="reconcile", cancellation_timeout=10, backoff=1)
    daemon(handlers.reconcile_job)  # type: ignore[arg-type]


async def reconcile_loop(
    one_pass: Callable[[], Awaitable[float | None]],
    wakeup: asyncio.Event,
    stopped: Stopped,
    backoff: RestartBackoff,
    *,
    debounce_seconds: float = 0.0,
    what: str = "",
) -> None:
    """Pass after pass until the job is gone or the daemon stops. A failed pass (an API error, a bug) is
    retried here after :class:`RestartBackoff`, during which wake-ups are ignored: kopf would restart the
    daemon after a fixed second, and every watch event would retry at once, all jobs in lockstep."""
    failures = 0
    while not stopped:
        wakeup.clear()
        try:
            delay = await one_pass()
        except Exception as exc:  # any failure of a pass is retried, not fatal
            failures += 1
            pause = backoff.delay(failures)
            log.warning("%s: pass failed (%d in a row), again in %.1f s: %s", what, failures, pause, exc)
            await _sleep(asyncio.Event(), stopped, pause)
            continue
        failures = 0
        if delay is None:
            return
        await _sleep(wakeup, stopped, delay)
        if debounce_seconds:
            await asyncio.sleep(debounce_seconds)


async def _sleep(wakeup: asyncio.Event, stopped: Stopped, seconds: float) -> None:
    """Until the job's wake-up, the daemon's stop (so cleanup runs before kopf cancels), or ``seconds``."""

    async def until_stopped() -> None:
        await stopped.wait()

    waiters = [asyncio.ensure_future(wakeup.wait()), asyncio.ensure_future(until_stopped())]
    try:
        await asyncio.wait(waiters, timeout=max(0.01, seconds), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


async def audit_forever(
    ctx: OperatorContext, children: list[kopf.Index[JobKey, Any]], nodes_by_name: kopf.Index[str, Any]
) -> None:
    """Audit the indexes soon after each listing, and at least every resync period."""
    state = ctx.state
    lister = ctx.kube if isinstance(ctx.kube, audit.Lister) else KubeClient(ctx.api)
    while True:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(state.audit_due.wait(), timeout=ctx.planner.resync_seconds)
            await asyncio.sleep(_AUDIT_SETTLE_SECONDS)
        state.audit_due.clear()
        before = audit.snapshot(children, nodes_by_name)  # in the loop: kopf changes the indexes there
        places = sorted({where.place for where in before.values()})
        try:
            listed = await asyncio.to_thread(_list_places, lister, places)
        except Exception as exc:  # the audit must outlive any API trouble
            log.warning("index audit failed: %s", exc)
            continue
        found = audit.ghosts(before, listed)
        new = set(found) - state.gone
        state.gone = frozenset(found)
        if new:
            log.info("index audit: %d object(s) deleted while a watch was away, forgotten", len(new))
            for key in _jobs_to_wake(found, new, set(state.jobs)):
                ctx.poke(key)


def _list_places(lister: audit.Lister, places: list[audit.Place]) -> dict[audit.Place, Any]:
    return {place: audit.listed_uids(lister, place) for place in places}


def _jobs_to_wake(found: Mapping[str, audit.Indexed], new: set[str], running: set[JobKey]) -> set[JobKey]:
    """The jobs whose children the audit newly found deleted; all running jobs when a node was (any job may
    have pods on it)."""
    jobs = {where.job for uid, where in found.items() if uid in new and where.job is not None}
    if any(where.job is None for uid, where in found.items() if uid in new):
        jobs |= running
    return jobs


def observe(key: JobKey, indexes: JobIndexes, *, gone: frozenset[str] = frozenset()) -> Observed:
    """The job's children from the indexes, without those the index audit found deleted."""

    def present(obj: dict[str, Any]) -> bool:
        return not gone or (obj.get("metadata") or {}).get("uid") not in gone

    observed = Observed()
    for _kind, _name, pod in indexes.pods.get(key, []):
        if not present(pod):
            continue
        observed.pods.append(pod)
        node_name = (pod.get("spec") or {}).get("nodeName")
        if node_name and node_name not in observed.nodes:
            for node in indexes.nodes.get(node_name, []):
                if present(node):
                    observed.nodes[node_name] = node
    chief_lease = lease_name(key[1])
    for _kind, name, lease in indexes.leases.get(key, []):
        if name == chief_lease and present(lease):
            observed.lease = lease
    for index in indexes.children:
        for kind, name, child in index.get(key, []):
            if present(child):
                observed.children[(kind, name)] = child
    return observed


class JobReconciler:
    """One job's passes: observe, plan, apply, write the status, hand over the events."""

    def __init__(self, ctx: OperatorContext, key: JobKey) -> None:
        self.ctx = ctx
        self.key = key
        self.applier = ctx.applier
        #: Passes in a row in which the API refused a write: the retries back off.
        self.refused_passes = 0

    async def run_pass(self, body: kopf.Body, indexes: JobIndexes) -> float | None:
        """One reconcile; returns seconds until the next timed pass, None when the job is gone."""
        namespace, name = self.key
        started = time.perf_counter()
        job = self._current_job(body)
        observed = await self._observe(job, indexes)
        config = self._planner_config()
        now = self.ctx.clock()
        result = plan(job, observed, now, config)
        self._log_plan(job, observed, result)
        try:
            applied = await asyncio.to_thread(self.applier.apply, namespace, result.writes)
            self._remember_lease(observed.lease, applied.lease)
            if applied.refused:
                # The same pass planned again, knowing what was refused: its status and Events say so.
                result = plan(job, observed, now, config, refused=applied.refused)
            await self._write_status(job, result)
        except Conflict as exc:
            log.info("%s/%s: %s; planning again", namespace, name, exc)
            return CONFLICT_RETRY_SECONDS
        except KubeError as exc:
            return self._after_refused_write(exc)
        finally:
            self.ctx.metrics.reconcile.labels(namespace, name).observe(time.perf_counter() - started)
        self._observe_durations(applied, result)
        self.ctx.events.hand_over(job, result.events, now)
        if result.delete_job:
            await asyncio.to_thread(self.applier.delete_job, namespace, name)
            return None
        return self._next_pass(applied, result)

    def _current_job(self, body: kopf.Body) -> dict[str, Any]:
        job = copy.deepcopy(dict(body))
        memory = self.ctx.state.jobs.get(self.key)
        ours = memory.written.over(job) if memory is not None and memory.written is not None else None
        return ours if ours is not None else job

    async def _observe(self, job: dict[str, Any], indexes: JobIndexes) -> Observed:
        observed = observe(self.key, indexes, gone=self.ctx.state.gone)
        observed.lease = self._latest_lease(observed.lease)
        if self.ctx.placement is not None:
            observed.placement = await self.ctx.placement.check(job.get("spec") or {}, indexes.all_nodes)
        return observed

    def _latest_lease(self, seen: dict[str, Any] | None) -> dict[str, Any] | None:
        """The Lease as our own latest writes left it while the watch still shows it from before them."""
        memory = self.ctx.state.jobs.get(self.key)
        if seen is None or memory is None or memory.lease_written is None:
            return seen
        ours = memory.lease_written.over(seen)
        if ours is None:
            memory.lease_written = None  # the watch delivered our writes, or a newer change
            return seen
        return ours

    def _remember_lease(self, observed: dict[str, Any] | None, answer: dict[str, Any] | None) -> None:
        if observed is None or answer is None:
            return
        memory = self.ctx.state.job(self.key)
        before = memory.lease_written.before if memory.lease_written is not None else frozenset()
        memory.lease_written = OwnWrite(before | {_resource_version(observed)}, answer)

    def _planner_config(self) -> PlannerConfig:
        if self.ctx.prices is None:
            return self.ctx.planner
        return dataclasses.replace(self.ctx.planner, prices=self.ctx.prices.current())  # a stat() when unchanged

    def _log_plan(self, job: dict[str, Any], observed: Observed, result: Plan) -> None:
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "%s/%s: pass on job rv %s, lease rv %s: %s",
                *self.key,
                job.get("metadata", {}).get("resourceVersion"),
                ((observed.lease or {}).get("metadata") or {}).get("resourceVersion"),
                [repr(a)[:300] for a in result.writes] or "nothing to do",
            )

    async def _write_status(self, job: dict[str, Any], result: Plan) -> None:
        """The planned status, as a merge patch on the status seen, when the planner says it is due."""
        namespace, name = self.key
        old_status = job.get("status") or {}
        if not result.status_due:
            return
        patch = merge_patch_between(old_status, result.status)
        pre = job["metadata"].get("resourceVersion")
        answer = await asyncio.to_thread(self.applier.write_status, namespace, name, pre, patch)
        after = copy.deepcopy(job)
        after["status"] = answer.get("status", result.status)
        after["metadata"]["resourceVersion"] = answer["metadata"]["resourceVersion"]
        self.ctx.state.job(self.key).written = OwnWrite(frozenset({_resource_version(job)}), after)
        self.ctx.metrics.status_written(namespace, name, old_status, result.status, job.get("spec"))

    def _after_refused_write(self, exc: KubeError) -> float | None:
        """Seconds until the next pass after the API refused the status write (None: the job is gone)."""
        namespace, name = self.key
        if exc.status == 404:  # the status write found no job: deleted while the watch was away
            log.info("%s/%s: the job is gone", namespace, name)
            return None
        self.refused_passes += 1
        delay = retry_delay(self.refused_passes, exc.retry_after_seconds)
        log.warning("%s/%s: %s; retrying in %.1fs", namespace, name, exc, delay)
        return delay

    def _observe_durations(self, applied: Applied, result: Plan) -> None:
        namespace, name = self.key
        for seconds in applied.recoveries:
            self.ctx.metrics.recovery.labels(namespace, name).observe(seconds)
        for observation in result.observations:
            if observation.metric == "chief_handover_seconds":
                self.ctx.metrics.handover.labels(namespace, name).observe(observation.seconds)

    def _next_pass(self, applied: Applied, result: Plan) -> float | None:
        """Seconds until the next timed pass: the planner's timer, or a back-off after refused writes."""
        if not applied.refused:
            self.refused_passes = 0
            return result.requeue_after
        self.refused_passes += 1
        # Back off, but not past a timer of the planner's (a stale lease), nor before the server's Retry-After.
        timer = MAX_RETRY_SECONDS if result.requeue_after is None else result.requeue_after
        retry = min(retry_delay(self.refused_passes), timer)
        return max(retry, applied.retry_after_seconds or 0.0)
