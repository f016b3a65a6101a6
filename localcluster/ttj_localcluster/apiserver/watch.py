"""Watch streams: chunked JSON lines of ADDED/MODIFIED/DELETED events from a resourceVersion (or the current
state first), BOOKMARKs (periodic, and the end of the initial events), ``410 Gone`` for a version the history
no longer holds, and the fault injector's dropped watches."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass
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
#: At most this many queued events go out in one write.
_BATCH = 64


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
    matchers, matcher = _watch_matcher(request, target)
    watcher = Watcher(target.rtype.storage_key, target.scope, matcher)
    rv_text = query.get("resourceVersion", "")
    send_initial = truthy(query.get("sendInitialEvents"))
    initial, gone = _register(server, target, watcher, matchers, rv_text=rv_text, send_initial=send_initial)
    if gone is not None:
        return await _send_gone(request, gone)
    timeout = float(query["timeoutSeconds"]) if query.get("timeoutSeconds") else None
    response = web.StreamResponse(
        status=200, headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"}
    )
    stream = _Stream(
        server=server,
        response=response,
        watcher=watcher,
        rtype=target.rtype,
        as_table=wants_table(request),
        bookmarks=truthy(query.get("allowWatchBookmarks")),
        deadline=time.monotonic() + timeout if timeout else None,
        generation=server.faults.watch_generation,
    )
    last_rv = rv_text if rv_text not in ("", "0") else str(server.store.resource_version)
    try:
        await response.prepare(request)
        last_rv = await _send_initial(stream, initial, last_rv, end_bookmark=send_initial and stream.bookmarks)
        last_rv = await _send_events(stream, last_rv)
        await _send_final_bookmark(stream, last_rv)
        await response.write_eof()
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    finally:
        server.store.unwatch(watcher)
    return response


@dataclass(frozen=True)
class _Stream:
    """What stays fixed while one watch streams."""

    server: ApiServer
    response: web.StreamResponse
    watcher: Watcher
    rtype: ResourceType
    as_table: bool
    bookmarks: bool
    #: when the watch's timeoutSeconds ends it; None: never
    deadline: float | None
    #: the fault injector's watch generation when the watch began: a new one ends it
    generation: int


def _register(
    server: ApiServer, target: Target, watcher: Watcher, matchers: list[Matcher], *, rv_text: str, send_initial: bool
) -> tuple[list[dict[str, Any]], ApiError | None]:
    """Registers ``watcher`` with the store from ``rv_text``; the objects to send first as ADDED, or the
    410 Gone of a version the history no longer holds."""
    if rv_text in ("", "0") or send_initial:
        # no version: the watch starts with the current state as ADDED events, as kube does
        initial, _, _ = server.core.list_objects(target.rtype, target.scope, matchers)
        server.store.watch(watcher, None)
        return initial, None
    try:
        since = int(rv_text)
    except ValueError:
        raise bad_request(f"invalid resource version {rv_text!r}") from None
    try:
        server.store.watch(watcher, since)
    except ApiError as gone:
        return [], gone
    return [], None


async def _send_initial(stream: _Stream, initial: list[dict[str, Any]], last_rv: str, *, end_bookmark: bool) -> str:
    """Sends the current state as ADDED events, then the bookmark that ends them when asked; the version sent last."""
    for obj in initial:
        await stream.response.write(_event_line("ADDED", obj, stream.rtype, stream.as_table))
        last_rv = obj["metadata"]["resourceVersion"]
    if end_bookmark:
        last_rv = str(stream.server.store.resource_version)
        await stream.response.write(_bookmark(stream.rtype, last_rv, initial_end=True))
    return last_rv


async def _send_events(stream: _Stream, last_rv: str) -> str:
    """Sends the watcher's events, and bookmarks when asked, until the watch times out, is closed or dropped;
    the version sent last."""
    store, faults = stream.server.store, stream.server.faults
    next_bookmark = time.monotonic() + stream.server.bookmark_interval_seconds
    while True:
        now = time.monotonic()
        if stream.deadline is not None and now >= stream.deadline:
            return last_rv
        if faults.watch_generation != stream.generation:
            return last_rv
        wait = _POLL_SECONDS
        if stream.deadline is not None:
            wait = min(wait, stream.deadline - now)
        if stream.bookmarks:
            wait = min(wait, max(0.0, next_bookmark - now))
        got = await _take(stream.watcher.queue, wait)
        if not got:
            # A bookmark promises that every event up to its version was sent: the store's version
            # only while nothing is still queued for this watch (events may arrive as it times out).
            if stream.bookmarks and time.monotonic() >= next_bookmark and stream.watcher.queue.empty():
                last_rv = str(store.resource_version)
                await stream.response.write(_bookmark(stream.rtype, last_rv))
                next_bookmark = time.monotonic() + stream.server.bookmark_interval_seconds
            continue
        lines: list[bytes] = []
        ended = False
        for item in got:
            if item is None:
                ended = True
                break
            seen, event = item
            lines.append(_event_line(seen, event.obj, stream.rtype, stream.as_table, event.object_json()))
            last_rv = str(event.rv)
            if faults.should_drop_watch():
                ended = True
                break
        if lines:  # an empty write of a chunked body could read as its end
            await stream.response.write(b"".join(lines))
        if ended:
            return last_rv


async def _take(
    queue: asyncio.Queue[tuple[str, WatchEvent] | None], wait: float
) -> list[tuple[str, WatchEvent] | None]:
    """The items of ``queue`` (at most :data:`_BATCH`), waiting at most ``wait`` seconds for the first; empty
    when none came. What a burst of writes queued goes out in one write to the socket."""
    # Queued events first: wait_for with no time left cancels the get before it runs, so it
    # would never take an event however many were queued (the watch spun, silent, for good).
    if queue.empty() and wait > 0:
        with contextlib.suppress(TimeoutError):
            first = await asyncio.wait_for(queue.get(), timeout=wait)
            return [first, *_queued(queue, _BATCH - 1)]
    return _queued(queue, _BATCH)


def _queued(queue: asyncio.Queue[tuple[str, WatchEvent] | None], most: int) -> list[tuple[str, WatchEvent] | None]:
    taken: list[tuple[str, WatchEvent] | None] = []
    while len(taken) < most and not queue.empty():
        taken.append(queue.get_nowait())
    return taken


async def _send_final_bookmark(stream: _Stream, last_rv: str) -> None:
    if not (stream.bookmarks and stream.deadline is not None and time.monotonic() >= stream.deadline):
        return
    # A watch that times out with events still queued (a slow client) must not bookmark past
    # them, or the client resumes after events it never saw: only up to the last one sent.
    final_rv = str(stream.server.store.resource_version) if stream.watcher.queue.empty() else last_rv
    if final_rv not in ("", "0"):
        await stream.response.write(_bookmark(stream.rtype, final_rv))
