"""The handlers of resource URLs: collections, objects and their subresources (status, scale, binding, eviction,
log, finalize), and watches. Each resolves its URL against the registry (404 for what is not served), maps the
method to a Kubernetes verb (405 for one the URL does not take), lets the fault injector act, then serves."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from aiohttp import web

from . import podlog, reviews, tables
from .errors import ApiError, not_found
from .protocol import (
    Target,
    delete_options,
    dry_run,
    json_response,
    method_not_allowed,
    read_json,
    route_not_found,
    selectors,
    truthy,
    wants_table,
)
from .watch import serve_watch

if TYPE_CHECKING:
    from .server import ApiServer

DEFAULT_PATCH_TYPE = "application/merge-patch+json"


class ResourceHandlers:
    def __init__(self, server: ApiServer) -> None:
        self.server = server
        self.core = server.core
        self.subresources = server.subresources

    # -- common steps -----------------------------------------------------------------------------

    def _target(self, request: web.Request, subresource: str | None = None) -> Target:
        """The served resource the URL's variables name; 404 as kube answers for anything it does not serve."""
        info = request.match_info
        group, version = info.get("group", ""), info["version"]
        if not self.server.registry.has_group_version(group, version):
            raise route_not_found(group)
        rtype = self.server.registry.get(group, version, info["resource"])
        if rtype is None:
            raise route_not_found(group)
        namespace, name = info.get("namespace"), info.get("name")
        if namespace is not None and not rtype.namespaced:
            raise route_not_found(group)
        if rtype.namespaced and name is not None and namespace is None:
            raise route_not_found(group)
        if subresource is not None and subresource not in rtype.subresources:
            if rtype.is_custom:  # the CRD handler names the object it has no such subresource of
                raise not_found(rtype.plural, rtype.group, name or "")
            raise route_not_found(group)
        return Target(rtype, namespace, name, subresource)

    async def _accept(self, verb: str | None, target: Target) -> str:
        """405 for no verb; else the injected latency and faults, as a flaky apiserver would answer."""
        if verb is None:
            raise method_not_allowed()
        faults = self.server.faults
        latency = faults.latency()
        if latency:
            await asyncio.sleep(latency)
        fault = faults.pick(verb, target.rtype.plural, target.rtype.group, target.subresource)
        if fault is not None:
            raise fault
        return verb

    # -- collections and objects ------------------------------------------------------------------

    async def collection(self, request: web.Request) -> web.StreamResponse:
        target = self._target(request)
        get_verb = "watch" if truthy(request.query.get("watch")) else "list"
        verbs = {"GET": get_verb, "POST": "create", "DELETE": "deletecollection"}
        verb = await self._accept(verbs.get(request.method), target)
        if verb == "watch":
            return await serve_watch(self.server, request, target)
        if verb == "list":
            return self._list(request, target)
        if verb == "create":
            return await self._create(request, target)
        return await self._delete_collection(request, target)

    async def object(self, request: web.Request) -> web.StreamResponse:
        target = self._target(request)
        assert target.name is not None
        rtype, namespace, name = target.rtype, target.namespace_or_empty, target.name
        get_verb = "watch" if truthy(request.query.get("watch")) else "get"
        verbs = {"GET": get_verb, "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
        verb = await self._accept(verbs.get(request.method), target)
        if verb == "watch":
            return await serve_watch(self.server, request, target)
        if verb == "get":
            return self._get(request, target)
        if verb == "update":
            body = await read_json(request)
            return json_response(self.core.update(rtype, namespace, name, body, dry_run=dry_run(request)))
        if verb == "patch":
            return await self._patch(request, target)
        options = await delete_options(request)
        return json_response(self.core.delete(rtype, namespace, name, options))

    async def watch(self, request: web.Request) -> web.StreamResponse:
        """``/watch/...`` paths: the older spelling of ``?watch=true``, still served by kube."""
        target = self._target(request)
        await self._accept("watch" if request.method == "GET" else None, target)
        return await serve_watch(self.server, request, target)

    # -- subresources -----------------------------------------------------------------------------

    async def status(self, request: web.Request) -> web.StreamResponse:
        target = self._target(request, "status")
        assert target.name is not None
        verbs = {"GET": "get", "PUT": "update", "PATCH": "patch"}
        verb = await self._accept(verbs.get(request.method), target)
        if verb == "get":
            return self._get(request, target)
        if verb == "update":
            body = await read_json(request)
            return json_response(
                self.core.update(
                    target.rtype,
                    target.namespace_or_empty,
                    target.name,
                    body,
                    subresource="status",
                    dry_run=dry_run(request),
                )
            )
        return await self._patch(request, target)

    async def scale(self, request: web.Request) -> web.StreamResponse:
        target = self._target(request, "scale")
        assert target.name is not None
        verbs = {"GET": "get", "PUT": "update", "PATCH": "patch"}
        verb = await self._accept(verbs.get(request.method), target)
        rtype, namespace, name = target.rtype, target.namespace_or_empty, target.name
        if verb == "get":
            return json_response(self.subresources.get_scale(rtype, namespace, name))
        body = await read_json(request)
        patch_type = request.headers.get("Content-Type", DEFAULT_PATCH_TYPE) if verb == "patch" else None
        return json_response(self.subresources.write_scale(rtype, namespace, name, body, patch_type=patch_type))

    async def binding(self, request: web.Request) -> web.StreamResponse:
        target = self._target(request, "binding")
        assert target.name is not None
        await self._accept("create" if request.method == "POST" else None, target)
        body = await read_json(request)
        return json_response(self.subresources.bind(target.namespace_or_empty, target.name, body), 201)

    async def eviction(self, request: web.Request) -> web.StreamResponse:
        target = self._target(request, "eviction")
        assert target.name is not None
        await self._accept("create" if request.method == "POST" else None, target)
        body = await read_json(request)
        return json_response(self.subresources.evict(target.namespace_or_empty, target.name, body), 201)

    async def log(self, request: web.Request) -> web.StreamResponse:
        target = self._target(request, "log")
        assert target.name is not None
        await self._accept("get" if request.method == "GET" else None, target)
        return await podlog.serve(self.server, request, target.namespace_or_empty, target.name, "get")

    async def token(self, request: web.Request) -> web.StreamResponse:
        """``serviceaccounts/NAME/token``: a TokenRequest, what a kubelet asks for each pod's service account."""
        target = self._target(request, "token")
        assert target.name is not None
        await self._accept("create" if request.method == "POST" else None, target)
        body = await read_json(request)
        issued = self.server.access.authenticator.token_request(target.namespace_or_empty, target.name, body)
        return json_response(issued, 201)

    async def finalize(self, request: web.Request) -> web.StreamResponse:
        """``namespaces/NAME/finalize``, where kube's namespace controller empties ``spec.finalizers``: a PUT."""
        target = self._target(request, "finalize")
        assert target.name is not None
        await self._accept("update" if request.method == "PUT" else None, target)
        body = await read_json(request)
        return json_response(
            self.core.update(target.rtype, target.namespace_or_empty, target.name, body, dry_run=dry_run(request))
        )

    # -- verbs ------------------------------------------------------------------------------------

    def _get(self, request: web.Request, target: Target) -> web.Response:
        assert target.name is not None
        obj = self.core.get(target.rtype, target.namespace_or_empty, target.name)
        if wants_table(request):
            rv = obj["metadata"]["resourceVersion"]
            return json_response(tables.table(target.rtype, [obj], rv, request.query.get("includeObject", "Metadata")))
        return json_response(obj)

    async def _create(self, request: web.Request, target: Target) -> web.Response:
        body = await read_json(request)
        rtype, namespace = target.rtype, target.namespace_or_empty
        if rtype.plural == "bindings" and rtype.group == "":
            pod_name = str((body.get("metadata") or {}).get("name", "")) if isinstance(body, dict) else ""
            return json_response(self.subresources.bind(namespace, pod_name, body), 201)
        if rtype.group == reviews.GROUP:
            return json_response(reviews.review(self.server.access, rtype.plural, namespace, body), 201)
        return json_response(self.core.create(rtype, namespace, body, dry_run=dry_run(request)), 201)

    async def _patch(self, request: web.Request, target: Target) -> web.Response:
        assert target.name is not None
        body = await read_json(request)
        content_type = request.headers.get("Content-Type", DEFAULT_PATCH_TYPE)
        patched = self.core.patch(
            target.rtype,
            target.namespace_or_empty,
            target.name,
            content_type,
            body,
            subresource=target.subresource,
            dry_run=dry_run(request),
        )
        return json_response(patched)

    def _list(self, request: web.Request, target: Target) -> web.Response:
        query = request.query
        limit = int(query["limit"]) if query.get("limit") else None
        items, rv, token = self.core.list_objects(
            target.rtype, target.scope, selectors(request, target.rtype), limit, query.get("continue")
        )
        if wants_table(request):
            result = tables.table(target.rtype, items, rv, query.get("includeObject", "Metadata"))
            if token:
                result["metadata"]["continue"] = token
            return json_response(result)
        metadata: dict[str, Any] = {"resourceVersion": rv}
        if token:
            metadata["continue"] = token
        return json_response(
            {
                "kind": f"{target.rtype.kind}List",
                "apiVersion": target.rtype.api_version,
                "metadata": metadata,
                "items": items,
            }
        )

    async def _delete_collection(self, request: web.Request, target: Target) -> web.Response:
        options = await delete_options(request)
        items, rv, _ = self.core.list_objects(target.rtype, target.scope, selectors(request, target.rtype))
        deleted = []
        for obj in items:
            meta = obj["metadata"]
            try:
                result = self.core.delete(target.rtype, meta.get("namespace", ""), meta["name"], dict(options))
            except ApiError as exc:
                if exc.code == 404:
                    continue
                raise
            deleted.append(result if result.get("kind") != "Status" else obj)
        return json_response(
            {
                "kind": f"{target.rtype.kind}List",
                "apiVersion": target.rtype.api_version,
                "metadata": {"resourceVersion": rv},
                "items": deleted,
            }
        )
