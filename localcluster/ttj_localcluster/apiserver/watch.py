"""Watch streams: chunked JSON lines of ADDED/MODIFIED/DELETED events from a resourceVersion (or the current
state first), BOOKMARKs (periodic, and the end of the initial events), ``410 Gone`` for a version the history
no longer holds, and the fault injector's dropped watches."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

from . import tables
from .errors import ApiError, bad_request
from .protocol import Target, selectors, truthy, wants_table
from .resources import ResourceType
from .selectors import Matcher
from .store import Watcher, WatchEvent

if TYPE_CHECKING:
    from .server import ApiServer

#: how long one wait for an event lasts, so that timeouts, bookmarks and dropped watches are noticed
_POLL_SECONDS = 0.5


def _event_line(
    event_type: str, obj: dict[str, Any], rtype: ResourceType, as_table: bool, obj_json: str | None = None
) -> bytes:
    """One event as the watched API presents it; ``obj_json`` is the stored object already serialised."""
    if rtype.from_storage is not None and obj.get("apiVersion") != rtype.api_version:
        obj_json = None
        obj = rtype.from_storage(obj)
    if as_table:
        row = tables.table(rtype, [obj], obj["metadata"]["resourceVersion"])
        return json.dumps({"type": event_type, "object": row}, separators=(",", ":")).encode() + b"\n"
    if obj.get("apiVersion") != rtype.api_version:
        obj_json = None
        obj = {**obj, "apiVersion": rtype.api_version}
    if obj_json is None:
        obj_json = json.dumps(obj, separators=(",", ":"))
    return f'{{"type":"{event_type}","object":{obj_json}}}\n'.encode()


def _bookmark(rtype: ResourceType, rv: str, *, initial_end: bool = False) -> bytes:
    meta: dict[str, Any] = {"resourceVersion": rv}
    if initial_end:
        meta["annotations"] = {"k8s.io/initial-events-end": "true"}
    obj = {"kind": rtype.kind, "apiVersion": rtype.api_version, "metadata": meta}
    return json.dumps({"type": "BOOKMARK", "object": obj}, separators=(",", ":")).encode() + b"\n"


def _watch_matcher(request: web.Request, target: Target) -> tuple[list[Matcher], Matcher | None]:
    """The selectors of the request (and the watched name), and them combined into the watcher's filter."""
    matchers = selectors(request, target.rtype)
    if target.name is not None:
        name = target.name
        matchers.append(lambda obj: obj["metadata"]["name"] == name)
    matcher: Matcher | None = None
    if matchers:
        matcher = (lambda obj: all(m(obj) for m in matchers)) if len(matchers) > 1 else matchers[0]
    convert = target.rtype.from_storage
    if matcher is not None and convert is not None:
        # the store holds another API's form: select on the fields of the API being watched
        select = matcher
        matcher = lambda obj: select(convert(obj))  # noqa: E731
    return matchers, matcher


async def _send_gone(request: web.Request, gone: ApiError) -> web.StreamResponse:
    """kube answers a too-old watch with 200 and one ERROR event carrying a 410 Status."""
    response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
    await response.prepare(request)
    await response.write(json.dumps({"type": "ERROR", "object": gone.status()}).encode() + b"\n")
    await response.write_eof()
    return response


async def serve_watch(server: ApiServer, request: web.Request, target: Target) -> web.StreamResponse:
    query = request.query
    rtype = target.rtype
    matchers, matcher = _watch_matcher(request, target)
    namespace = target.scope
    watcher = Watcher(rtype.storage_key, namespace, matcher)
    rv_text = query.get("resourceVersion", "")
    send_initial = truthy(query.get("sendInitialEvents"))
    bookmarks = truthy(query.get("allowWatchBookmarks"))
    as_table = wants_table(request)
    store = server.store
    initial: list[dict[str, Any]] = []
    if rv_text in ("", "0") or send_initial:
        # no version: the watch starts with the current state as ADDED events, as kube does
        initial, _, _ = server.core.list_objects(rtype, namespace, matchers)
        store.watch(watcher, None)
    else:
        try:
            since = int(rv_text)
        except ValueError:
            raise bad_request(f"invalid resource version {rv_text!r}") from None
        try:
            store.watch(watcher, since)
        except ApiError as gone:
            return await _send_gone(request, gone)
    timeout = float(query["timeoutSeconds"]) if query.get("timeoutSeconds") else None
    deadline = time.monotonic() + timeout if timeout else None
    response = web.StreamResponse(
        status=200, headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"}
    )
    faults = server.faults
    generation = faults.watch_generation
    last_rv = rv_text if rv_text not in ("", "0") else str(store.resource_version)
    try:
        await response.prepare(request)
        for obj in initial:
            await response.write(_event_line("ADDED", obj, rtype, as_table))
            last_rv = obj["metadata"]["resourceVersion"]
        if send_initial and bookmarks:
            last_rv = str(store.resource_version)
            await response.write(_bookmark(rtype, last_rv, initial_end=True))
        next_bookmark = time.monotonic() + server.bookmark_interval_seconds
        while True:
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                break
            if faults.watch_generation != generation:
                break
            wait = _POLL_SECONDS
            if deadline is not None:
                wait = min(wait, deadline - now)
            if bookmarks:
                wait = min(wait, max(0.0, next_bookmark - now))
            # Queued events first: wait_for with no time left cancels the get before it runs, so it
            # would never take an event however many were queued (the watch spun, silent, for good).
            got: list[tuple[str, WatchEvent] | None] = []
            if not watcher.queue.empty():
                got.append(watcher.queue.get_nowait())
            elif wait > 0:
                with contextlib.suppress(TimeoutError):
                    got.append(await asyncio.wait_for(watcher.queue.get(), timeout=wait))
            if not got:
                # A bookmark promises that every event up to its version was sent: the store's version
                # only while nothing is still queued for this watch (events may arrive as it times out).
                if bookmarks and time.monotonic() >= next_bookmark and watcher.queue.empty():
                    last_rv = str(store.resource_version)
                    await response.write(_bookmark(rtype, last_rv))
                    next_bookmark = time.monotonic() + server.bookmark_interval_seconds
                continue
            item = got[0]
            if item is None:
                break
            seen, event = item
            await response.write(_event_line(seen, event.obj, rtype, as_table, event.object_json()))
            last_rv = str(event.rv)
            if faults.should_drop_watch():
                break
        if bookmarks and deadline is not None and time.monotonic() >= deadline:
            # A watch that times out with events still queued (a slow client) must not bookmark past
            # them, or the client resumes after events it never saw: only up to the last one sent.
            final_rv = str(store.resource_version) if watcher.queue.empty() else last_rv
            if final_rv not in ("", "0"):
                await response.write(_bookmark(rtype, final_rv))
        await response.write_eof()
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    finally:
        store.unwatch(watcher)
    return response
