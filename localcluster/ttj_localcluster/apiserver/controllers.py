"""The controllers a real control plane runs beside the apiserver that clients rely on: the garbage collector
(ownerReferences with background, foreground and orphan propagation) and the namespace controller (deleting a
namespace deletes its content, then the namespace)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
from typing import Any

from .core import ApiCore
from .errors import ApiError
from .resources import NAMESPACES
from .store import WatchEvent

log = logging.getLogger(__name__)

Work = tuple[str, str]


class Controllers:
    def __init__(self, core: ApiCore) -> None:
        self.core = core
        self.store = core.store
        self._queue: asyncio.Queue[Work] | None = None
        self._pending: list[Work] = []
        self._task: asyncio.Task[None] | None = None
        self.store.listeners.append(self._on_event)

    def start(self) -> None:
        self._queue = asyncio.Queue()
        for item in self._pending:
            self._queue.put_nowait(item)
        self._pending.clear()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def _enqueue(self, kind: str, arg: str) -> None:
        if self._queue is None:
            self._pending.append((kind, arg))
        else:
            self._queue.put_nowait((kind, arg))

    def _on_event(self, event: WatchEvent) -> None:
        meta = event.obj["metadata"]
        namespace = meta.get("namespace")
        if event.type == "DELETED":
            self._enqueue("owner-gone", meta["uid"])
            for ref in meta.get("ownerReferences") or []:
                self._enqueue("owner", ref.get("uid", ""))  # a foreground deletion may now be complete
            if namespace:
                self._enqueue("namespace", namespace)
            return
        finalizers = meta.get("finalizers") or []
        if meta.get("deletionTimestamp") and ("foregroundDeletion" in finalizers or "orphan" in finalizers):
            self._enqueue("owner", meta["uid"])
        if event.type == "ADDED" and meta.get("ownerReferences"):
            self._enqueue("dependent", meta["uid"])
        if event.storage_key == NAMESPACES and meta.get("deletionTimestamp"):
            self._enqueue("namespace", meta["name"])

    async def _run(self) -> None:
        assert self._queue is not None
        while True:
            kind, arg = await self._queue.get()
            try:
                if kind == "owner-gone":
                    for storage_key, dependent in self.store.dependents(arg):
                        self._check_dependent(storage_key, dependent)
                elif kind == "dependent":
                    obj = self.store.by_uid(arg)
                    where = self.store.storage_key_of_uid(arg)
                    if obj is not None and where is not None:
                        self._check_dependent(where, obj)
                elif kind == "owner":
                    self._process_owner(arg)
                elif kind == "namespace":
                    self._process_namespace(arg)
            except ApiError as exc:
                log.debug("controller work %s %s: %s", kind, arg, exc.message)
            except Exception:
                log.exception("controller work %s %s failed", kind, arg)

    def _check_dependent(self, storage_key: tuple[str, str], obj: dict[str, Any]) -> None:
        """Background deletion: a dependent none of whose owners exists any more is deleted."""
        refs = obj["metadata"].get("ownerReferences") or []
        orphaned = refs and all(self.store.by_uid(ref.get("uid", "")) is None for ref in refs)
        if orphaned and not obj["metadata"].get("deletionTimestamp"):
            self.core.delete_object(storage_key, obj)

    def _process_owner(self, uid: str) -> None:
        owner = self.store.by_uid(uid)
        owner_key = self.store.storage_key_of_uid(uid)
        if owner is None or owner_key is None or not owner["metadata"].get("deletionTimestamp"):
            return
        finalizers = owner["metadata"].get("finalizers") or []
        dependents = self.store.dependents(uid)
        if "orphan" in finalizers:
            for storage_key, dependent in dependents:
                self._drop_owner_reference(storage_key, dependent, uid)
            self.core.remove_finalizer(owner_key, owner, "orphan")
        elif "foregroundDeletion" in finalizers:
            if not dependents:
                self.core.remove_finalizer(owner_key, owner, "foregroundDeletion")
                return
            for storage_key, dependent in dependents:
                if not dependent["metadata"].get("deletionTimestamp"):
                    self.core.delete_object(storage_key, dependent, "Foreground")

    def _drop_owner_reference(self, storage_key: tuple[str, str], obj: dict[str, Any], uid: str) -> None:
        rtype = self.core.registry.versions_of(storage_key)
        if not rtype:
            return
        new = copy.deepcopy(obj)
        refs = [r for r in new["metadata"].get("ownerReferences") or [] if r.get("uid") != uid]
        if refs:
            new["metadata"]["ownerReferences"] = refs
        else:
            new["metadata"].pop("ownerReferences", None)
        self.core.update(rtype[0], obj["metadata"].get("namespace", ""), obj["metadata"]["name"], new)

    def _process_namespace(self, name: str) -> None:
        namespace = self.store.get(NAMESPACES, "", name)
        if namespace is None or not namespace["metadata"].get("deletionTimestamp"):
            return
        remaining = 0
        for storage_key in self.store.storage_keys():
            if storage_key == NAMESPACES:
                continue
            for obj in self.store.items(storage_key, name):
                remaining += 1
                if not obj["metadata"].get("deletionTimestamp"):
                    self.core.delete_object(storage_key, obj)
        if remaining:
            return  # the DELETED events of the content bring us back here
        if (namespace.get("spec") or {}).get("finalizers"):
            new = copy.deepcopy(namespace)
            new["spec"]["finalizers"] = []
            rtype = self.core.registry.get("", "v1", "namespaces")
            assert rtype is not None
            self.core.write_update(rtype, namespace, new, subresource=None)
