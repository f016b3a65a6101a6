"""The jobs' children and the nodes, listed and watched by the operator itself rather than through kopf.

kopf handles every change of every object it watches as it handles a job's (a worker task per object, its causes,
the arguments of each handler built, an index function and an event handler invoked), and lists every kind again
each time a watch ends (every five minutes), each listed object through the same machinery: at 1,000 jobs, some
9,000 objects at once, which held the loop for most of a second in the middle of a preemption wave. Here one
thread per kind and place lists and watches the objects (:class:`ttj.kubeapi.ListWatch`: each watch resumes where
the last ended; a new listing only after an error or 410 Gone), keeps of each what the planner reads, and hands
the changes to the loop in batches; there each is a dictionary update and, when it is news, a wake-up of its job.

A listing replaces what the index held at its place: an object missing from it was deleted while no watch ran (kopf
kept such objects indexed, which needed an audit), and one listed unchanged is no change at all.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ttj.controller.memory import JobKey, resource_version
from ttj.kubeapi import JSON, RESOURCES, KubeClient, ListWatch
from ttj.planner import observed_child, observed_pod
from ttj.planner.observed import json_copy
from ttj_contract import LABEL_JOB

#: Where objects are watched: a namespace, or "" for every namespace (nodes: always "").
Place = str
#: The kinds of a job's children, each watched in every place (the pods first: most of the events).
CHILD_KINDS = ("Pod", "Lease", "Service", "Deployment", "ServiceAccount", "Role", "RoleBinding", "NetworkPolicy")
NODE = "Node"
#: The server ends each watch after this long and the thread watches again from where it was.
WATCH_SECONDS = 120
#: Nodes are big (images, allocatable…): the planner reads only these parts of their metadata (and a pass its
#: resourceVersion, to tell a changed node), their taints, conditions and capacity.
_NODE_KEEP = ("name", "uid", "resourceVersion", "labels", "creationTimestamp", "deletionTimestamp")


def job_key(namespace: str | None, labels: Mapping[str, str] | None) -> JobKey | None:
    """The job a child belongs to, by its label; None for an object of no job."""
    job = (labels or {}).get(LABEL_JOB)
    return (namespace or "", job) if job else None


def slim_node(node: Mapping[str, Any]) -> JSON:
    """What the planner reads of a node."""
    metadata = node.get("metadata") or {}
    status = node.get("status") or {}
    return {
        "metadata": {k: metadata[k] for k in _NODE_KEEP if metadata.get(k) is not None},
        "spec": {"taints": json_copy((node.get("spec") or {}).get("taints") or [])},
        "status": {"conditions": status.get("conditions") or [], "capacity": status.get("capacity") or {}},
    }


def _slim(kind: str, obj: JSON) -> JSON:
    """What the planner reads of ``obj``. ``obj`` is the event's own, freshly decoded: a pod is kept as it is,
    not copied. A listed object carries no kind (a list's items do not); the planner's children do."""
    if kind == "Pod":
        return observed_pod(obj, owned=True)
    if kind == NODE:
        return slim_node(obj)
    return {"apiVersion": RESOURCES[kind].api_version, "kind": kind, **observed_child(kind, obj)}


@dataclass(frozen=True)
class Change:
    """One object's change as the loop applies it: its kind and name, its job (None for a node), and what the
    planner reads of it (None: deleted)."""

    kind: str
    name: str
    job: JobKey | None
    obj: JSON | None

    @property
    def key(self) -> JobKey | str:
        """Where its index keeps it: a child under its job, a node under its name."""
        return self.job if self.job is not None else self.name


@dataclass(frozen=True)
class Listing:
    """Every object of ``kind`` at ``place`` at one moment: what its index holds there afterwards."""

    kind: str
    place: Place
    changes: list[Change]


Batch = list[Change | Listing]


def change_of(kind: str, event_type: str, obj: JSON) -> Change | None:
    """A watch event as the loop applies it (None for a child of no job)."""
    metadata = obj.get("metadata") or {}
    name = str(metadata.get("name") or "")
    job = None
    if kind != NODE:
        job = job_key(metadata.get("namespace"), metadata.get("labels"))
        if job is None:
            return None
    return Change(kind, name, job, None if event_type == "DELETED" else _slim(kind, obj))


@dataclass(frozen=True)
class Applied:
    """What one change did to its index: the object before (None: absent); the change holds it after."""

    change: Change
    before: JSON | None


class Index(Mapping[Any, list[Any]]):
    """The objects of one kind as the passes read them: a job's children by the job's key, each as (kind, name,
    object), as kopf's indexes gave them; nodes by name, as a one-item list. Changed only in the operator's loop,
    by :meth:`Indexes.apply`."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._by_key: dict[Any, dict[str, JSON]] = {}

    def __getitem__(self, key: Any) -> list[Any]:
        objects = self._by_key[key]
        if self.kind == NODE:
            return list(objects.values())
        return [(self.kind, name, obj) for name, obj in objects.items()]

    def __iter__(self) -> Iterator[Any]:
        return iter(list(self._by_key))

    def __len__(self) -> int:
        return len(self._by_key)

    def put(self, change: Change) -> JSON | None:
        """Apply ``change``; the object it replaced."""
        objects = self._by_key.get(change.key)
        before = objects.get(change.name) if objects is not None else None
        if change.obj is None:
            if objects is not None:
                objects.pop(change.name, None)
                if not objects:
                    del self._by_key[change.key]
        else:
            if objects is None:
                objects = self._by_key[change.key] = {}
            objects[change.name] = change.obj
        return before

    def relisted(self, listing: Listing) -> list[Applied]:
        """The index at ``listing.place`` made the listing's: new and changed objects put, missing ones deleted;
        what changed (an object listed again unchanged did not)."""
        listed = {(change.key, change.name) for change in listing.changes}
        gone = [
            Change(self.kind, name, None if self.kind == NODE else key, None)
            for key, objects in self._by_key.items()
            if self.kind == NODE or not listing.place or key[0] == listing.place
            for name in objects
            if (key, name) not in listed
        ]
        applied = []
        for change in [*listing.changes, *gone]:
            before = self.put(change)
            if change.obj is None or before is None or resource_version(before) != resource_version(change.obj):
                applied.append(Applied(change, before))
        return applied


class Indexes:
    """One :class:`Index` per watched kind, and which places each has listed."""

    def __init__(self) -> None:
        self.by_kind = {kind: Index(kind) for kind in (*CHILD_KINDS, NODE)}
        self._listed: dict[tuple[str, Place], asyncio.Event] = {}

    def __getitem__(self, kind: str) -> Index:
        return self.by_kind[kind]

    def listed_event(self, kind: str, place: Place) -> asyncio.Event:
        """Set once ``kind`` has been listed at ``place``: until then a pass would see none of it there."""
        return self._listed.setdefault((kind, place), asyncio.Event())

    async def listed(self, place: Place) -> None:
        """Until every kind of child has been listed at ``place``, and the nodes."""
        for kind in CHILD_KINDS:
            await self.listed_event(kind, place).wait()
        await self.listed_event(NODE, "").wait()

    def apply(self, batch: Batch) -> list[Applied]:
        """Apply a batch of changes and listings; what each changed (a listing as the changes it implies)."""
        applied: list[Applied] = []
        for item in batch:
            index = self.by_kind[item.kind]
            if isinstance(item, Listing):
                applied.extend(index.relisted(item))
                self.listed_event(item.kind, item.place).set()
            else:
                applied.append(Applied(item, index.put(item)))
        return applied


def places(namespaces: Iterable[str]) -> list[Place]:
    """Where to watch for the operator's namespaces (none: every namespace)."""
    return sorted(set(namespaces)) or [""]


def _path(kind: str, place: Place) -> str:
    if kind == NODE:
        return "/api/v1/nodes"
    resource = RESOURCES[kind]
    return resource.path(place) if place else f"{resource.prefix}/{resource.plural}"


class Watches:
    """A thread per kind and place that lists and watches its objects (a job's children: those with the job
    label) and hands the changes to ``deliver`` (called in the thread, with batches in order; the caller moves
    them to its loop)."""

    def __init__(self, client: KubeClient, deliver: Callable[[Batch], None]) -> None:
        self.client = client
        self.deliver = deliver
        self.stop = threading.Event()
        self._threads: dict[tuple[str, Place], threading.Thread] = {}

    def start_place(self, place: Place) -> None:
        """Watch every kind of child at ``place``."""
        for kind in CHILD_KINDS:
            self.start(kind, place)

    def start(self, kind: str, place: Place) -> None:
        if (kind, place) in self._threads:
            return
        name = f"ttj-{kind.lower()}s-{place or 'all'}"
        thread = threading.Thread(target=self._run, args=(kind, place), name=name, daemon=True)
        self._threads[(kind, place)] = thread
        thread.start()

    def close(self, timeout: float = 5.0) -> None:
        """Stop every thread: their open watches end at once."""
        self.stop.set()
        self.client.close()
        for thread in self._threads.values():
            thread.join(timeout)

    def _run(self, kind: str, place: Place) -> None:
        def listed(items: list[JSON]) -> None:
            changes = [change for obj in items if (change := change_of(kind, "ADDED", obj)) is not None]
            self.deliver([Listing(kind, place, changes)])

        def changed(event_type: str, obj: JSON) -> None:
            if (change := change_of(kind, event_type, obj)) is not None:
                self.deliver([change])

        ListWatch(
            self.client,
            _path(kind, place),
            listed=listed,
            changed=changed,
            stop=self.stop,
            query=[("labelSelector", LABEL_JOB)] if kind != NODE else [],
            watch_seconds=WATCH_SECONDS,
            what=f"{kind.lower()}s in {place or 'every namespace'}" if kind != NODE else "nodes",
        ).run()


class Inbox:
    """Batches from the watch threads, handed to ``apply`` in the loop: one callback queued at a time, carrying
    everything that arrived meanwhile (a callback per event would cost the loop a wake-up each)."""

    def __init__(self, call_soon: Callable[[Callable[[], Any]], None], apply: Callable[[Batch], None]) -> None:
        self._call_soon = call_soon
        self._apply = apply
        self._lock = threading.Lock()
        self._pending: Batch = []
        self._queued = False

    def deliver(self, batch: Batch) -> None:
        """From a watch thread."""
        with self._lock:
            self._pending.extend(batch)
            if self._queued:
                return
            self._queued = True
        self._call_soon(self._drain)

    def _drain(self) -> None:
        with self._lock:
            batch, self._pending, self._queued = self._pending, [], False
        self._apply(batch)
