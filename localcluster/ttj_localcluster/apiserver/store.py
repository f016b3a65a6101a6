"""Object storage with one global resourceVersion counter (as etcd's revision), watch fan-out, and per
resource a bounded window of recent events that watches resume from, as kube-apiserver's watch cache: a
version older than the window is ``410 Gone``.

Everything here runs on the server's event loop; stored objects are never mutated in place (writers build
new dicts), so events and lists can share them without copying.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterable
from typing import Any

from .errors import ApiError
from .resources import StorageKey
from .selectors import Matcher

ObjectKey = tuple[str, str]  # (namespace or "", name)


def object_key(obj: dict[str, Any]) -> ObjectKey:
    meta = obj["metadata"]
    return (meta.get("namespace") or "", meta["name"])


class WatchEvent:
    __slots__ = ("_object_json", "obj", "old", "rv", "storage_key", "type")

    def __init__(
        self, rv: int, type_: str, storage_key: StorageKey, obj: dict[str, Any], old: dict[str, Any] | None
    ) -> None:
        self.rv = rv
        self.type = type_
        self.storage_key = storage_key
        self.obj = obj
        self.old = old
        self._object_json: str | None = None

    def object_json(self) -> str:
        """The object serialised once, shared by every watcher that receives it."""
        if self._object_json is None:
            self._object_json = json.dumps(self.obj, separators=(",", ":"))
        return self._object_json


class Watcher:
    """One open watch: events for one resource, optionally one namespace and a selector, queued for the stream."""

    def __init__(self, storage_key: StorageKey, namespace: str | None, matcher: Matcher | None) -> None:
        self.storage_key = storage_key
        self.namespace = namespace
        self.matcher = matcher
        self.queue: asyncio.Queue[tuple[str, WatchEvent] | None] = asyncio.Queue()

    def translate(self, event: WatchEvent) -> str | None:
        """The event type this watcher sees (a selector turns updates into ADDED/DELETED), or None."""
        if self.namespace is not None and (event.obj["metadata"].get("namespace") or "") != self.namespace:
            return None
        if self.matcher is None:
            return event.type
        now = self.matcher(event.obj)
        if event.type != "MODIFIED" or event.old is None:
            return event.type if now else None
        before = self.matcher(event.old)
        if now and before:
            return "MODIFIED"
        if now:
            return "ADDED"
        if before:
            return "DELETED"
        return None

    def offer(self, event: WatchEvent) -> None:
        seen = self.translate(event)
        if seen is not None:
            self.queue.put_nowait((seen, event))

    def close(self) -> None:
        self.queue.put_nowait(None)


#: kube-apiserver 1.25's watch cache (k8s.io/apiserver/pkg/storage/cacher/watch_cache.go): each resource keeps
#: between 100 and 100 Ki events; a full window doubles while its oldest event is younger than 75 s, and halves
#: (dropping its oldest) when its newest quarter is older than that.
CACHE_LOWER_BOUND = 100
CACHE_UPPER_BOUND = 100 * 1024
EVENT_FRESH_SECONDS = 75.0


class WatchCache:
    """One resource's window of recent events, a ring as kube's: watches resume from any version from the
    one it started at (kube: the version of its initial list) until it first drops an event, then from just
    before its oldest event."""

    def __init__(self, start_rv: int, lower: int, upper: int, clock: Callable[[], float]) -> None:
        self.start_rv = start_rv
        self.lower, self.upper = lower, upper
        self.capacity = lower
        self._clock = clock
        self._ring: list[tuple[float, WatchEvent] | None] = [None] * lower
        self._start = 0  # index of the oldest event held (ever-increasing; the ring slot is index % capacity)
        self._end = 0

    def __len__(self) -> int:
        return self._end - self._start

    def _at(self, index: int) -> tuple[float, WatchEvent]:
        held = self._ring[index % self.capacity]
        assert held is not None
        return held

    def _full(self) -> bool:
        return len(self) == self.capacity

    def add(self, event: WatchEvent) -> None:
        now = self._clock()
        self._resize(now)
        if self._full():
            self._start += 1
        self._ring[self._end % self.capacity] = (now, event)
        self._end += 1

    def _resize(self, now: float) -> None:
        if not self._full():
            return
        if now - self._at(self._start)[0] < EVENT_FRESH_SECONDS:
            self._set_capacity(min(self.capacity * 2, self.upper))
        elif now - self._at(self._end - self.capacity // 4)[0] > EVENT_FRESH_SECONDS:
            self._set_capacity(max(self.capacity // 2, self.lower))

    def _set_capacity(self, capacity: int) -> None:
        if capacity == self.capacity:
            return
        if len(self) > capacity:
            self._start = self._end - capacity
        held = [self._at(i) for i in range(self._start, self._end)]
        self._ring = [None] * capacity
        self.capacity = capacity
        for i, item in zip(range(self._start, self._end), held, strict=True):
            self._ring[i % capacity] = item

    def set_bounds(self, lower: int, upper: int) -> None:
        """New bounds; a window now too large drops its oldest events at once."""
        self.lower, self.upper = lower, upper
        self._set_capacity(min(max(self.capacity, lower), upper))

    def oldest_resumable(self) -> int:
        """The oldest version a watch may resume from (kube: ``oldest - 1``)."""
        if self._start == 0:
            return self.start_rv
        return self._at(self._start)[1].rv - 1

    def since(self, rv: int) -> list[WatchEvent]:
        """The events after ``rv``, oldest first; 410 when the window no longer reaches back to it."""
        oldest = self.oldest_resumable()
        if rv < oldest:
            raise ApiError(410, "Expired", f"too old resource version: {rv} ({oldest})")
        low, high = self._start, self._end
        while low < high:  # the first event after rv
            middle = (low + high) // 2
            if self._at(middle)[1].rv > rv:
                high = middle
            else:
                low = middle + 1
        return [self._at(i)[1] for i in range(low, self._end)]


class Store:
    def __init__(self, history_size: int | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        """``history_size`` holds every resource's window at that many events; None: kube's bounds."""
        self.resource_version = 1
        self._objects: dict[StorageKey, dict[ObjectKey, dict[str, Any]]] = {}
        self._caches: dict[StorageKey, WatchCache] = {}
        self._bounds = (CACHE_LOWER_BOUND, CACHE_UPPER_BOUND) if history_size is None else (history_size,) * 2
        self._clock = clock
        self._watchers: dict[StorageKey, set[Watcher]] = {}
        self._by_uid: dict[str, tuple[StorageKey, ObjectKey]] = {}
        self._dependents: dict[str, set[tuple[StorageKey, ObjectKey]]] = {}
        self.listeners: list[Callable[[WatchEvent], None]] = []

    # -- reads ------------------------------------------------------------------------------------

    def get(self, storage_key: StorageKey, namespace: str, name: str) -> dict[str, Any] | None:
        return self._objects.get(storage_key, {}).get((namespace, name))

    def items(self, storage_key: StorageKey, namespace: str | None = None) -> Iterable[dict[str, Any]]:
        self._cache(storage_key)  # a resource's cache starts from its first list, as kube's reflector does
        objects = self._objects.get(storage_key, {})
        if namespace is None:
            return list(objects.values())
        return [obj for (ns, _), obj in objects.items() if ns == namespace]

    def storage_keys(self) -> list[StorageKey]:
        return list(self._objects)

    def by_uid(self, uid: str) -> dict[str, Any] | None:
        where = self._by_uid.get(uid)
        if where is None:
            return None
        return self._objects.get(where[0], {}).get(where[1])

    def storage_key_of_uid(self, uid: str) -> StorageKey | None:
        where = self._by_uid.get(uid)
        return where[0] if where else None

    def dependents(self, owner_uid: str) -> list[tuple[StorageKey, dict[str, Any]]]:
        found = []
        for storage_key, key in list(self._dependents.get(owner_uid, ())):
            obj = self._objects.get(storage_key, {}).get(key)
            if obj is not None:
                found.append((storage_key, obj))
        return found

    # -- writes -----------------------------------------------------------------------------------

    def next_version(self) -> int:
        self.resource_version += 1
        return self.resource_version

    def put(self, storage_key: StorageKey, obj: dict[str, Any], old: dict[str, Any] | None) -> dict[str, Any]:
        """Store a new object or a new version of one; stamps the resourceVersion and emits ADDED/MODIFIED."""
        rv = self.next_version()
        obj["metadata"]["resourceVersion"] = str(rv)
        key = object_key(obj)
        self._objects.setdefault(storage_key, {})[key] = obj
        self._index(storage_key, key, obj, old)
        self._emit(WatchEvent(rv, "MODIFIED" if old is not None else "ADDED", storage_key, obj, old))
        return obj

    def remove(self, storage_key: StorageKey, obj: dict[str, Any]) -> dict[str, Any]:
        """Remove an object for good; the DELETED event carries a new resourceVersion, as in kube."""
        key = object_key(obj)
        self._objects.get(storage_key, {}).pop(key, None)
        rv = self.next_version()
        final = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(rv)}}
        self._index(storage_key, key, None, obj)
        self._emit(WatchEvent(rv, "DELETED", storage_key, final, None))
        return final

    def _index(
        self, storage_key: StorageKey, key: ObjectKey, new: dict[str, Any] | None, old: dict[str, Any] | None
    ) -> None:
        if old is not None:
            self._by_uid.pop(old["metadata"].get("uid", ""), None)
            for ref in old["metadata"].get("ownerReferences") or []:
                self._dependents.get(ref.get("uid", ""), set()).discard((storage_key, key))
        if new is not None:
            self._by_uid[new["metadata"]["uid"]] = (storage_key, key)
            for ref in new["metadata"].get("ownerReferences") or []:
                self._dependents.setdefault(ref.get("uid", ""), set()).add((storage_key, key))

    def _cache(self, storage_key: StorageKey, start_rv: int | None = None) -> WatchCache:
        """The resource's window, started now (or from ``start_rv``) if it has none yet."""
        cache = self._caches.get(storage_key)
        if cache is None:
            start = self.resource_version if start_rv is None else start_rv
            cache = WatchCache(start, *self._bounds, self._clock)
            self._caches[storage_key] = cache
        return cache

    def _emit(self, event: WatchEvent) -> None:
        self._cache(event.storage_key, event.rv - 1).add(event)  # unread before: its history starts here
        for watcher in list(self._watchers.get(event.storage_key, ())):
            watcher.offer(event)
        for listener in list(self.listeners):
            listener(event)

    # -- watches ----------------------------------------------------------------------------------

    def watch(self, watcher: Watcher, since: int | None) -> None:
        """Register a watcher; with ``since``, first queue every later event of its resource (or raise 410)."""
        if since is not None:
            for event in self._cache(watcher.storage_key).since(since):
                watcher.offer(event)
        self._watchers.setdefault(watcher.storage_key, set()).add(watcher)

    def unwatch(self, watcher: Watcher) -> None:
        self._watchers.get(watcher.storage_key, set()).discard(watcher)

    def all_watchers(self) -> list[Watcher]:
        return [w for ws in self._watchers.values() for w in ws]

    def restart_watch_caches(self) -> None:
        """Every resource's window starts again from now, as kube-apiserver's do when it restarts: a watch
        resuming from any earlier version is 410 Gone, and its client must list again."""
        self._caches = {key: WatchCache(self.resource_version, *self._bounds, self._clock) for key in self._caches}

    def set_history_size(self, size: int | None) -> None:
        """Hold every resource's window at ``size`` events, dropping the oldest now (as a compaction would);
        None gives the windows kube's bounds back."""
        self._bounds = (CACHE_LOWER_BOUND, CACHE_UPPER_BOUND) if size is None else (size, size)
        for cache in self._caches.values():
            cache.set_bounds(*self._bounds)
