"""Informers and work queues for the simulated control plane and nodes.

The controllers, scheduler and kubelets of the local cluster are API clients like their Kubernetes
counterparts: they read and write over HTTP through the operator's :class:`ttj.kubeapi.KubeClient`,
with list+watch informers. Objects stay plain JSON dicts.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from ttj.kubeapi import JSON, KubeClient, ListWatch, transient

log = logging.getLogger(__name__)


T = TypeVar("T")


def retrying(action: Callable[[], T], attempts: int = 6, delay: float = 0.1) -> T:
    """Run ``action``, retrying transient failures with a doubling delay (0.1 s → 1.6 s); the last failure
    or a lasting one is raised as it is."""
    retryer = Retrying(
        retry=retry_if_exception(transient),
        stop=stop_after_attempt(attempts),
        wait=wait_exponential(multiplier=delay),
        reraise=True,
    )
    return retryer(action)


def obj_key(obj: JSON) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))


Handler = Callable[[str, JSON, JSON | None], None]
#: Each informer's watch is ended by the server after this long and resumed from where it was.
WATCH_SECONDS = 20


class Informer:
    """List+watch of one collection into a cache; calls handlers with (event type, object, old object).

    Lists again after a watch ends in error or with 410 Gone (:func:`ttj.kubeapi.ListWatch`).
    """

    def __init__(self, client: KubeClient, path: str, name: str, stop: threading.Event) -> None:
        self.client = client
        self.path = path
        self.name = name
        self.stop = stop
        self.cache: dict[str, JSON] = {}
        self.lock = threading.RLock()
        self.handlers: list[Handler] = []
        self.synced = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"informer-{name}", daemon=True)

    def add_handler(self, handler: Handler) -> None:
        self.handlers.append(handler)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float) -> None:
        if self._thread.is_alive():
            self._thread.join(timeout)

    def items(self) -> list[JSON]:
        with self.lock:
            return list(self.cache.values())

    def get(self, key: str) -> JSON | None:
        with self.lock:
            return self.cache.get(key)

    def _emit(self, kind: str, obj: JSON, old: JSON | None) -> None:
        for handler in self.handlers:
            try:
                handler(kind, obj, old)
            except Exception:
                log.exception("%s: handler failed on %s %s", self.name, kind, obj_key(obj))

    def _listed(self, items: list[JSON]) -> None:
        """A listing replaces the cache; the handlers hear what changed since the last (deletions included)."""
        fresh = {obj_key(item): item for item in items}
        with self.lock:
            old = self.cache
            self.cache = fresh
        for key, item in fresh.items():
            previous = old.get(key)
            if previous is None:
                self._emit("ADDED", item, None)
            elif previous.get("metadata", {}).get("resourceVersion") != item.get("metadata", {}).get("resourceVersion"):
                self._emit("MODIFIED", item, previous)
        for key, item in old.items():
            if key not in fresh:
                self._emit("DELETED", item, item)
        self.synced.set()

    def _changed(self, kind: str, obj: JSON) -> None:
        key = obj_key(obj)
        with self.lock:
            old = self.cache.get(key)
            if kind == "DELETED":
                self.cache.pop(key, None)
            else:
                self.cache[key] = obj
        self._emit(kind, obj, old)

    def _run(self) -> None:
        ListWatch(
            self.client,
            self.path,
            listed=self._listed,
            changed=self._changed,
            stop=self.stop,
            watch_seconds=WATCH_SECONDS,
            what=f"informer {self.name}",
        ).run()


_WAKE = "\0wake"  # not a key: wakes the worker so that it notices the stop


class WorkQueue:
    """A de-duplicating queue of keys with delayed re-adds, served by one worker thread."""

    def __init__(self, name: str, reconcile: Callable[[str], float | None], stop: threading.Event) -> None:
        self.name = name
        self.reconcile = reconcile
        self.stop = stop
        self._queue: queue.Queue[str] = queue.Queue()
        self._pending: set[str] = set()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"worker-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float) -> None:
        if self._thread.is_alive():
            self._queue.put(_WAKE)  # the worker sees the stop now, not after its poll interval
            self._thread.join(timeout)

    def add(self, key: str) -> None:
        with self._lock:
            if key in self._pending:
                return
            self._pending.add(key)
        self._queue.put(key)

    def add_after(self, key: str, seconds: float) -> None:
        timer = threading.Timer(seconds, self.add, args=(key,))
        timer.daemon = True
        timer.start()

    def _run(self) -> None:
        failures: dict[str, int] = {}
        while not self.stop.is_set():
            try:
                key = self._queue.get(timeout=0.5)
            except queue.Empty:
                continue
            if key == _WAKE:
                continue
            with self._lock:
                self._pending.discard(key)
            try:
                again = self.reconcile(key)
                failures.pop(key, None)
                if again is not None:
                    self.add_after(key, again)
            except Exception as exc:
                count = failures.get(key, 0) + 1
                failures[key] = count
                delay = min(10.0, 0.1 * 2**count) * (1 + random.random() / 4)
                level = logging.WARNING if count >= 5 else logging.DEBUG
                log.log(level, "%s: %s failed (%s); retrying in %.1fs", self.name, key, exc, delay)
                self.add_after(key, delay)


def wait_synced(informers: Sequence[Informer], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    for informer in informers:
        if not informer.synced.wait(max(0.0, deadline - time.monotonic())):
            raise TimeoutError(f"informer {informer.name} did not sync within {timeout:.0f}s")


def pod_event(
    pod: JSON, name: str, event_type: str, reason: str, *, message: str, component: str, now: str
) -> dict[str, Any]:
    """A core/v1 Event about ``pod``, first seen ``now``, as a control-plane component writes one."""
    meta = pod["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta.get("uid"),
        },
        "type": event_type,
        "reason": reason,
        "message": message,
        "source": {"component": component},
        "reportingComponent": component,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
