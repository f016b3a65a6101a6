"""Object storage with one global resourceVersion counter (as etcd's revision), watch fan-out and a bounded
event history that watches resume from (older versions get ``410 Gone``).

Everything here runs on the server's event loop; stored objects are never mutated in place (writers build
new dicts), so events and lists can share them without copying.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections import deque
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


class Store:
    def __init__(self, history_size: int = 50_000) -> None:
        self.resource_version = 1
        self._objects: dict[StorageKey, dict[ObjectKey, dict[str, Any]]] = {}
        self._history: deque[WatchEvent] = deque()
        self._history_size = history_size
        #: every event at or below this version may be gone from the history
        self._history_floor = 0
        self._watchers: dict[StorageKey, set[Watcher]] = {}
        self._by_uid: dict[str, tuple[StorageKey, ObjectKey]] = {}
        self._dependents: dict[str, set[tuple[StorageKey, ObjectKey]]] = {}
        self.listeners: list[Callable[[WatchEvent], None]] = []

    # -- reads ------------------------------------------------------------------------------------

    def get(self, storage_key: StorageKey, namespace: str, name: str) -> dict[str, Any] | None:
        return self._objects.get(storage_key, {}).get((namespace, name))

    def items(self, storage_key: StorageKey, namespace: str | None = None) -> Iterable[dict[str, Any]]:
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

    def _emit(self, event: WatchEvent) -> None:
        self._history.append(event)
        while len(self._history) > self._history_size:
            self._history_floor = self._history.popleft().rv
        for watcher in list(self._watchers.get(event.storage_key, ())):
            watcher.offer(event)
        for listener in list(self.listeners):
            listener(event)

    # -- watches ----------------------------------------------------------------------------------

    def watch(self, watcher: Watcher, since: int | None) -> None:
        """Register a watcher; with ``since``, first queue every later event from the history (or raise 410)."""
        if since is not None:
            if since < self._history_floor:
                raise ApiError(410, "Expired", f"too old resource version: {since} ({self._history_floor + 1})")
            backlog = list(itertools.takewhile(lambda e: e.rv > since, reversed(self._history)))
            for event in reversed(backlog):
                if event.storage_key == watcher.storage_key:
                    watcher.offer(event)
        self._watchers.setdefault(watcher.storage_key, set()).add(watcher)

    def unwatch(self, watcher: Watcher) -> None:
        self._watchers.get(watcher.storage_key, set()).discard(watcher)

    def all_watchers(self) -> list[Watcher]:
        return [w for ws in self._watchers.values() for w in ws]

    def set_history_size(self, size: int) -> None:
        self._history_size = size
        while len(self._history) > self._history_size:
            self._history_floor = self._history.popleft().rv
