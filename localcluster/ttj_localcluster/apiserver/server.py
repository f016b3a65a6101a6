"""The HTTP front: Kubernetes URL layout, discovery, content negotiation (JSON, server-side Tables), watch
streams, fault injection, and the ``/ttj-local/`` control endpoints. Runs on an aiohttp web server."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from aiohttp import web

from . import openapi, podlog, tables
from .controllers import Controllers
from .core import ApiCore, now_rfc3339
from .crds import CrdManager
from .errors import ApiError, bad_request
from .faults import FaultInjector
from .resources import Registry, ResourceType
from .selectors import Matcher, parse_field_selector, parse_label_selector
from .store import Store, Watcher, WatchEvent

log = logging.getLogger(__name__)

KUBE_VERSION = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0-ttj.local",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-11-21T00:00:00Z",
    "goVersion": "go1.23",
    "compiler": "gc",
    "platform": "linux/amd64",
}
BOOTSTRAP_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


@dataclass
class Target:
    """A parsed resource URL."""

    rtype: ResourceType
    namespace: str | None
    name: str | None
    subresource: str | None
    watch_path: bool


def _json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        body=json.dumps(body, separators=(",", ":")).encode(),
        status=status,
        content_type="application/json",
        headers=headers,
    )


def _error_response(error: ApiError) -> web.Response:
    headers = {"Retry-After": str(error.retry_after_seconds)} if error.retry_after_seconds is not None else None
    return _json_response(error.status(), error.code, headers)


def _truthy(value: str | None) -> bool:
    return value is not None and value.lower() in ("1", "true", "yes")


def _wants_table(request: web.Request) -> bool:
    accept = request.headers.get("Accept", "")
    first = accept.split(",")[0]
    return "as=Table" in first


class ApiServer:
    """The API server. Create it, ``await start()`` in an event loop, ``await stop()`` at the end."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        history_size: int = 50_000,
        bookmark_interval_seconds: float = 5.0,
    ) -> None:
        self.host = host
        self.port = port
        self.store = Store(history_size)
        self.registry = Registry()
        self.core = ApiCore(self.store, self.registry)
        self.crds = CrdManager(self.core)
        self.controllers = Controllers(self.core)
        self.faults = FaultInjector()
        self.bookmark_interval_seconds = bookmark_interval_seconds
        self._runner: web.AppRunner | None = None
        self._watch_tasks: set[asyncio.Task[Any]] = set()
        for name in BOOTSTRAP_NAMESPACES:
            ns_type = self.registry.get("", "v1", "namespaces")
            assert ns_type is not None
            self.core.create(ns_type, "", {"metadata": {"name": name}})
        self.core.on_write.setdefault(("", "namespaces"), []).append(self._default_service_account)
        sa_type = self.registry.get("", "v1", "serviceaccounts")
        assert sa_type is not None
        for name in BOOTSTRAP_NAMESPACES:
            self.core.create(sa_type, name, {"metadata": {"name": "default"}})

    def _default_service_account(self, new: dict[str, Any], old: dict[str, Any] | None) -> None:
        """What kube's serviceaccount controller does: every new namespace gets a ``default`` ServiceAccount."""
        if new and old is None:
            sa_type = self.registry.get("", "v1", "serviceaccounts")
            assert sa_type is not None
            self.core.create(sa_type, new["metadata"]["name"], {"metadata": {"name": "default"}})

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True)
        await site.start()
        sockets = getattr(site._server, "sockets", None)
        if sockets:
            self.port = int(sockets[0].getsockname()[1])
        self.controllers.start()

    async def stop(self) -> None:
        for watcher in self.store.all_watchers():
            watcher.close()
        await self.controllers.stop()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- dispatch ---------------------------------------------------------------------------------

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        try:
            if path.startswith("/ttj-local/"):
                return await self._control(request)
            parts = [unquote(p) for p in path.strip("/").split("/") if p]
            if not parts:
                return _json_response({"paths": ["/api", "/api/v1", "/apis", "/version", "/healthz", "/readyz"]})
            head = parts[0]
            if head in ("healthz", "readyz", "livez"):
                return web.Response(text="ok")
            if head == "version":
                return _json_response(KUBE_VERSION)
            if head == "openapi":
                return self._openapi(parts)
            if head == "api":
                if len(parts) == 1:
                    return _json_response(
                        {
                            "kind": "APIVersions",
                            "versions": ["v1"],
                            "serverAddressByClientCIDRs": [
                                {"clientCIDR": "0.0.0.0/0", "serverAddress": f"{self.host}:{self.port}"}
                            ],
                        }
                    )
                group, version, rest = "", parts[1], parts[2:]
            elif head == "apis":
                if len(parts) == 1:
                    return _json_response(self.registry.group_list())
                if len(parts) == 2:
                    found = self.registry.group(parts[1])
                    if found is None:
                        raise ApiError(404, "NotFound", "the server could not find the requested resource")
                    return _json_response(found)
                group, version, rest = parts[1], parts[2], parts[3:]
            else:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            if not self.registry.has_group_version(group, version):
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            if not rest:
                return _json_response(self.registry.resource_list(group, version))
            target = self._parse_target(group, version, rest)
            return await self._resource_request(request, target)
        except ApiError as error:
            return _error_response(error)
        except json.JSONDecodeError as exc:
            return _error_response(bad_request(f"the body of the request is not valid JSON: {exc}"))
        except Exception as exc:
            log.exception("internal error serving %s %s", request.method, path)
            return _error_response(
                ApiError(
                    500, "InternalError", f'an error on the server ("{exc}") has prevented the request from succeeding'
                )
            )

    def _parse_target(self, group: str, version: str, rest: list[str]) -> Target:
        watch_path = False
        if rest[0] == "watch":
            watch_path, rest = True, rest[1:]
        namespace: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in ("status", "finalize"):
            namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        rtype = self.registry.get(group, version, rest[0])
        if rtype is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if namespace is not None and not rtype.namespaced:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        name = rest[1] if len(rest) >= 2 else None
        sub = rest[2] if len(rest) == 3 else None
        if sub is not None and sub not in rtype.subresources:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if rtype.namespaced and name is not None and namespace is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return Target(rtype, namespace, name, sub, watch_path)

    def _openapi(self, parts: list[str]) -> web.Response:
        """A minimal OpenAPI v3: every group-version's PATCH operations, with the fieldValidation parameter (so
        kubectl leaves validation to the server), and the schemas of custom resources (for kubectl explain)."""
        if parts[1:2] != ["v3"]:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        gvs = sorted({(t.group, t.version) for t in self.registry.all_types()})
        if len(parts) == 2:
            paths = {}
            for group, version in gvs:
                prefix = f"apis/{group}/{version}" if group else f"api/{version}"
                paths[prefix] = {"serverRelativeURL": f"/openapi/v3/{prefix}?hash={self.store.resource_version}"}
            return _json_response({"paths": paths})
        rest = parts[2:]
        group, version = (
            ("", rest[1]) if rest[0] == "api" and len(rest) == 2 else (rest[1], rest[2]) if len(rest) == 3 else ("", "")
        )
        if (group, version) not in gvs:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return _json_response(openapi.group_version_document(self.registry, group, version))

    # -- control (non-Kubernetes) endpoints --------------------------------------------------------

    async def _control(self, request: web.Request) -> web.Response:
        if request.path == "/ttj-local/faults":
            if request.method == "GET":
                return _json_response(self.faults.to_dict())
            if request.method in ("POST", "PUT"):
                body = await request.json()
                try:
                    self.faults.configure_from_json(body)
                except (ValueError, TypeError) as exc:
                    raise bad_request(f"invalid fault configuration: {exc}") from None
                return _json_response(self.faults.to_dict())
            if request.method == "DELETE":
                self.faults.clear()
                return _json_response(self.faults.to_dict())
        if request.path == "/ttj-local/faults/drop-watches" and request.method == "POST":
            self.faults.drop_watches()
            return _json_response(self.faults.to_dict())
        if request.path == "/ttj-local/info":
            return _json_response(
                {"resourceVersion": str(self.store.resource_version), "watches": len(self.store.all_watchers())}
            )
        raise ApiError(404, "NotFound", "the server could not find the requested resource")

    # -- resources --------------------------------------------------------------------------------

    async def _resource_request(self, request: web.Request, target: Target) -> web.StreamResponse:
        method = request.method
        query = request.query
        rtype, name, sub = target.rtype, target.name, target.subresource
        namespace = target.namespace or ""
        if method == "GET":
            watching = target.watch_path or _truthy(query.get("watch"))
            verb = "watch" if watching else ("get" if name else "list")
        else:
            verb = {
                "POST": "create",
                "PUT": "update",
                "PATCH": "patch",
                "DELETE": "delete" if name else "deletecollection",
            }.get(method, "")
        if not verb:
            raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        latency = self.faults.latency()
        if latency:
            await asyncio.sleep(latency)
        fault = self.faults.pick(verb, rtype.plural, rtype.group, sub)
        if fault is not None:
            raise fault
        dry_run = bool(query.getall("dryRun", []))
        if sub == "log":  # pods/log: proxied to the node's kubelet endpoint (podlog.py, the node simulation's)
            return await podlog.serve(self, request, namespace, name, verb)

        if verb == "watch":
            return await self._watch(request, target)
        if verb == "list":
            return self._list(request, target)
        if verb == "get":
            assert name is not None
            if sub == "scale":
                return _json_response(self.core.get_scale(rtype, namespace, name))
            obj = self.core.get(rtype, namespace, name)
            if _wants_table(request):
                return _json_response(
                    tables.table(
                        rtype, [obj], obj["metadata"]["resourceVersion"], query.get("includeObject", "Metadata")
                    )
                )
            return _json_response(obj)
        if verb == "create":
            body = await self._body(request)
            if name is not None and sub == "binding":
                return _json_response(self.core.bind(namespace, name, body), 201)
            if rtype.plural == "bindings" and rtype.group == "":
                pod_name = str((body.get("metadata") or {}).get("name", "")) if isinstance(body, dict) else ""
                return _json_response(self.core.bind(namespace, pod_name, body), 201)
            if name is not None:
                raise ApiError(
                    405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
                )
            return _json_response(self.core.create(rtype, namespace, body, dry_run=dry_run), 201)
        if verb == "update":
            assert name is not None
            body = await self._body(request)
            if sub == "scale":
                return _json_response(self.core.write_scale(rtype, namespace, name, body))
            if sub == "finalize":
                sub = None
            return _json_response(self.core.update(rtype, namespace, name, body, subresource=sub, dry_run=dry_run))
        if verb == "patch":
            assert name is not None
            body = await self._body(request)
            content_type = request.headers.get("Content-Type", "application/merge-patch+json")
            if sub == "scale":
                return _json_response(self.core.write_scale(rtype, namespace, name, body, patch_type=content_type))
            return _json_response(
                self.core.patch(rtype, namespace, name, content_type, body, subresource=sub, dry_run=dry_run)
            )
        options = await self._delete_options(request)
        if dry_run:
            options["dryRun"] = ["All"]
        if verb == "delete":
            assert name is not None
            return _json_response(self.core.delete(rtype, namespace, name, options))
        return self._delete_collection(request, target, options)

    async def _body(self, request: web.Request) -> Any:
        raw = await request.read()
        if not raw:
            return {}
        return json.loads(raw)

    async def _delete_options(self, request: web.Request) -> dict[str, Any]:
        options: dict[str, Any] = {}
        raw = await request.read()
        if raw:
            body = json.loads(raw)
            if isinstance(body, dict):
                options.update(body)
        query = request.query
        if "gracePeriodSeconds" in query:
            options["gracePeriodSeconds"] = int(query["gracePeriodSeconds"])
        if "propagationPolicy" in query:
            options["propagationPolicy"] = query["propagationPolicy"]
        if "orphanDependents" in query:
            options["orphanDependents"] = _truthy(query["orphanDependents"])
        return options

    def _matchers(self, request: web.Request) -> list[Matcher]:
        matchers = []
        for matcher in (
            parse_label_selector(request.query.get("labelSelector")),
            parse_field_selector(request.query.get("fieldSelector")),
        ):
            if matcher is not None:
                matchers.append(matcher)
        return matchers

    def _list(self, request: web.Request, target: Target) -> web.Response:
        query = request.query
        limit = int(query["limit"]) if query.get("limit") else None
        namespace = target.namespace if target.rtype.namespaced else None
        items, rv, token = self.core.list_objects(
            target.rtype, namespace, self._matchers(request), limit, query.get("continue")
        )
        if _wants_table(request):
            result = tables.table(target.rtype, items, rv, query.get("includeObject", "Metadata"))
            if token:
                result["metadata"]["continue"] = token
            return _json_response(result)
        metadata: dict[str, Any] = {"resourceVersion": rv}
        if token:
            metadata["continue"] = token
        return _json_response(
            {
                "kind": f"{target.rtype.kind}List",
                "apiVersion": target.rtype.api_version,
                "metadata": metadata,
                "items": items,
            }
        )

    def _delete_collection(self, request: web.Request, target: Target, options: dict[str, Any]) -> web.Response:
        namespace = target.namespace if target.rtype.namespaced else None
        items, rv, _ = self.core.list_objects(target.rtype, namespace, self._matchers(request))
        deleted = []
        for obj in items:
            try:
                result = self.core.delete(
                    target.rtype, obj["metadata"].get("namespace", ""), obj["metadata"]["name"], dict(options)
                )
            except ApiError as exc:
                if exc.code == 404:
                    continue
                raise
            deleted.append(result if result.get("kind") != "Status" else obj)
        return _json_response(
            {
                "kind": f"{target.rtype.kind}List",
                "apiVersion": target.rtype.api_version,
                "metadata": {"resourceVersion": rv},
                "items": deleted,
            }
        )

    # -- watch ------------------------------------------------------------------------------------

    async def _watch(self, request: web.Request, target: Target) -> web.StreamResponse:
        query = request.query
        rtype = target.rtype
        matchers = self._matchers(request)
        if target.name is not None:
            name = target.name
            matchers.append(lambda obj: obj["metadata"]["name"] == name)
        matcher: Matcher | None = None
        if matchers:
            matcher = (lambda obj: all(m(obj) for m in matchers)) if len(matchers) > 1 else matchers[0]
        if matcher is not None and rtype.from_storage is not None:
            # the store holds another API's form: select on the fields of the API being watched
            select, convert = matcher, rtype.from_storage
            matcher = lambda obj: select(convert(obj))  # noqa: E731
        namespace = target.namespace if rtype.namespaced else None
        watcher = Watcher(rtype.storage_key, namespace, matcher)
        rv_text = query.get("resourceVersion", "")
        send_initial = _truthy(query.get("sendInitialEvents"))
        bookmarks = _truthy(query.get("allowWatchBookmarks"))
        as_table = _wants_table(request)
        initial: list[dict[str, Any]] = []
        if rv_text in ("", "0") or send_initial:
            # no version: the watch starts with the current state as ADDED events, as kube does
            initial, _, _ = self.core.list_objects(rtype, namespace, matchers)
            self.store.watch(watcher, None)
        else:
            try:
                since = int(rv_text)
            except ValueError:
                raise bad_request(f"invalid resource version {rv_text!r}") from None
            try:
                self.store.watch(watcher, since)
            except ApiError as gone:
                return await self._send_gone(request, gone)
        timeout = float(query["timeoutSeconds"]) if query.get("timeoutSeconds") else None
        deadline = time.monotonic() + timeout if timeout else None
        response = web.StreamResponse(
            status=200, headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"}
        )
        generation = self.faults.watch_generation
        last_rv = rv_text if rv_text not in ("", "0") else str(self.store.resource_version)
        try:
            await response.prepare(request)
            for obj in initial:
                await response.write(self._event_line("ADDED", obj, rtype, as_table))
                last_rv = obj["metadata"]["resourceVersion"]
            if send_initial and bookmarks:
                last_rv = str(self.store.resource_version)
                await response.write(self._bookmark(rtype, last_rv, initial_end=True))
            next_bookmark = time.monotonic() + self.bookmark_interval_seconds
            while True:
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    break
                if self.faults.watch_generation != generation:
                    break
                wait = 0.5
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
                        last_rv = str(self.store.resource_version)
                        await response.write(self._bookmark(rtype, last_rv))
                        next_bookmark = time.monotonic() + self.bookmark_interval_seconds
                    continue
                item = got[0]
                if item is None:
                    break
                seen, event = item
                await response.write(self._event_line(seen, event.obj, rtype, as_table, event.object_json()))
                last_rv = str(event.rv)
                if self.faults.should_drop_watch():
                    break
            if bookmarks and deadline is not None and time.monotonic() >= deadline:
                # A watch that times out with events still queued (a slow client) must not bookmark past
                # them, or the client resumes after events it never saw: only up to the last one sent.
                final_rv = str(self.store.resource_version) if watcher.queue.empty() else last_rv
                if final_rv not in ("", "0"):
                    await response.write(self._bookmark(rtype, final_rv))
            await response.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.store.unwatch(watcher)
        return response

    async def _send_gone(self, request: web.Request, gone: ApiError) -> web.StreamResponse:
        """kube answers a too-old watch with 200 and one ERROR event carrying a 410 Status."""
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await response.write(json.dumps({"type": "ERROR", "object": gone.status()}).encode() + b"\n")
        await response.write_eof()
        return response

    def _event_line(
        self, event_type: str, obj: dict[str, Any], rtype: ResourceType, as_table: bool, obj_json: str | None = None
    ) -> bytes:
        if rtype.from_storage is not None and obj.get("apiVersion") != rtype.api_version:
            obj_json = None
            obj = rtype.from_storage(obj)
        if as_table:
            obj = rtype_obj = tables.table(rtype, [obj], obj["metadata"]["resourceVersion"])
            return json.dumps({"type": event_type, "object": rtype_obj}, separators=(",", ":")).encode() + b"\n"
        if obj.get("apiVersion") != rtype.api_version:
            obj_json = None
            obj = {**obj, "apiVersion": rtype.api_version}
        if obj_json is None:
            obj_json = json.dumps(obj, separators=(",", ":"))
        return f'{{"type":"{event_type}","object":{obj_json}}}\n'.encode()

    def _bookmark(self, rtype: ResourceType, rv: str, *, initial_end: bool = False) -> bytes:
        meta: dict[str, Any] = {"resourceVersion": rv}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        obj = {"kind": rtype.kind, "apiVersion": rtype.api_version, "metadata": meta}
        return json.dumps({"type": "BOOKMARK", "object": obj}, separators=(",", ":")).encode() + b"\n"


__all__ = ["ApiServer", "now_rfc3339"]
