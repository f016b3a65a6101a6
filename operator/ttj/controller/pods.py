"""The jobs' pods, listed and watched by the operator itself rather than through kopf.

Pods are most of what the operator watches: a job's workers each change some five times as they come up. kopf
handled every change of every pod as it handles a job's (a worker task per object, its causes, the arguments of
each handler built, an index function and an event handler invoked): a third of the operator's loop at a
250-job start-up. Here one thread per watched place (every namespace, or one namespace) lists and watches the
pods that carry the job label, keeps of each what the planner reads, and hands the changes to the loop in
batches; there each is a dictionary update and a wake-up of its job.

After a watch ends in error or with 410 Gone the place is listed again (:func:`ttj.kubeapi.ListWatch`), and a
pod missing from the new list is dropped from the index as deleted (kopf's indexes kept such pods: see
:mod:`ttj.controller.audit`).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ttj.controller.memory import JobKey, resource_version
from ttj.kubeapi import JSON, KubeClient, ListWatch
from ttj.planner import observed_pod
from ttj_contract import LABEL_JOB

#: An indexed pod as the passes read it: ("Pod", its name, what the planner reads of it).
PodEntry = tuple[str, str, dict[str, Any]]
#: Where pods are watched: a namespace, or "" for every namespace.
Place = str
#: The server ends each watch after this long and the thread watches again from where it was.
WATCH_SECONDS = 120


@dataclass(frozen=True)
class PodChange:
    """One pod's change as the loop applies it: its job, its name, and what the planner reads of it (None:
    deleted)."""

    key: JobKey
    name: str
    pod: dict[str, Any] | None


@dataclass(frozen=True)
class Listing:
    """Every pod of ``place`` at one moment: what the index holds there afterwards."""

    place: Place
    pods: list[PodChange]


Batch = list[PodChange | Listing]


def job_key(namespace: str | None, labels: Mapping[str, str] | None) -> JobKey | None:
    """The job a child belongs to, by its label; None for an object of no job."""
    job = (labels or {}).get(LABEL_JOB)
    return (namespace or "", job) if job else None


def change_of(event_type: str, pod: JSON) -> PodChange | None:
    """A watch event of a pod as the loop applies it (None for a pod of no job). ``pod`` is the event's own,
    freshly decoded: kept as it is, not copied."""
    metadata = pod.get("metadata") or {}
    key = job_key(metadata.get("namespace"), metadata.get("labels"))
    if key is None:
        return None
    name = str(metadata.get("name") or "")
    return PodChange(key, name, None if event_type == "DELETED" else observed_pod(pod, owned=True))


@dataclass(frozen=True)
class Applied:
    """What one change did to the index: the pod before and after (None: absent)."""

    change: PodChange
    before: dict[str, Any] | None


class PodIndex(Mapping[JobKey, list[PodEntry]]):
    """The jobs' pods by job, as the passes read them (job key → its pods as :data:`PodEntry`); changed only in
    the operator's loop, by :meth:`apply`."""

    def __init__(self) -> None:
        self._by_job: dict[JobKey, dict[str, PodEntry]] = {}
        self._listed: dict[Place, asyncio.Event] = {}

    def __getitem__(self, key: JobKey) -> list[PodEntry]:
        return list(self._by_job[key].values())

    def __iter__(self) -> Iterator[JobKey]:
        return iter(list(self._by_job))

    def __len__(self) -> int:
        return len(self._by_job)

    def listed_event(self, place: Place) -> asyncio.Event:
        """Set once ``place`` has been listed: until then a pass would see none of its jobs' pods."""
        return self._listed.setdefault(place, asyncio.Event())

    def apply(self, batch: Batch) -> list[Applied]:
        """Apply a batch of changes and listings; what each changed (a listing as the changes it implies)."""
        applied: list[Applied] = []
        for item in batch:
            if isinstance(item, Listing):
                applied.extend(self._relisted(item))
                self.listed_event(item.place).set()
            else:
                before = self._put(item)
                applied.append(Applied(item, before))
        return applied

    def _put(self, change: PodChange) -> dict[str, Any] | None:
        pods = self._by_job.get(change.key)
        before = pods.get(change.name) if pods is not None else None
        if change.pod is None:
            if pods is not None:
                pods.pop(change.name, None)
                if not pods:
                    del self._by_job[change.key]
        else:
            if pods is None:
                pods = self._by_job[change.key] = {}
            pods[change.name] = ("Pod", change.name, change.pod)
        return before[2] if before is not None else None

    def _relisted(self, listing: Listing) -> list[Applied]:
        """The index at ``listing.place`` made the listing: new and changed pods put, missing ones deleted."""
        listed = {(change.key, change.name) for change in listing.pods}
        gone = [
            PodChange(key, name, None)
            for key, pods in self._by_job.items()
            if not listing.place or key[0] == listing.place
            for name in pods
            if (key, name) not in listed
        ]
        applied = []
        for change in [*listing.pods, *gone]:
            before = self._put(change)
            if change.pod is None or before is None or resource_version(before) != resource_version(change.pod):
                applied.append(Applied(change, before))
        return applied


def places(namespaces: Iterable[str]) -> list[Place]:
    """Where to watch for the operator's namespaces (none: every namespace)."""
    return sorted(set(namespaces)) or [""]


class PodWatch:
    """A thread per place that lists and watches the jobs' pods there and hands the changes to ``deliver``
    (called in the thread, with batches in order; the caller moves them to its loop)."""

    def __init__(self, client: KubeClient, deliver: Callable[[Batch], None]) -> None:
        self.client = client
        self.deliver = deliver
        self.stop = threading.Event()
        self._threads: dict[Place, threading.Thread] = {}

    def start(self, place: Place) -> None:
        if place in self._threads:
            return
        thread = threading.Thread(target=self._run, args=(place,), name=f"ttj-pods-{place or 'all'}", daemon=True)
        self._threads[place] = thread
        thread.start()

    def close(self, timeout: float = 5.0) -> None:
        """Stop every thread: their open watches end at once."""
        self.stop.set()
        self.client.close()
        for thread in self._threads.values():
            thread.join(timeout)

    def _run(self, place: Place) -> None:
        def listed(items: list[JSON]) -> None:
            self.deliver([Listing(place, [change for pod in items if (change := change_of("ADDED", pod)) is not None])])

        def changed(event_type: str, pod: JSON) -> None:
            if (change := change_of(event_type, pod)) is not None:
                self.deliver([change])

        ListWatch(
            self.client,
            f"/api/v1/namespaces/{place}/pods" if place else "/api/v1/pods",
            listed=listed,
            changed=changed,
            stop=self.stop,
            query=[("labelSelector", LABEL_JOB)],
            watch_seconds=WATCH_SECONDS,
            what=f"pods in {place or 'every namespace'}",
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
