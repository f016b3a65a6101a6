"""The API server's own ``/ttj-local/`` endpoints, not Kubernetes ones: fault injection (``faults``, and
``faults/drop-watches`` to end every open watch), ``info`` (the current resourceVersion, open watches) and
``requests`` (requests served so far, by client and method: what a benchmark counts a client's writes by)."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from aiohttp import web
from aiohttp.typedefs import Handler

from .errors import bad_request
from .protocol import json_response

if TYPE_CHECKING:
    from .server import ApiServer


def client_of(user_agent: str) -> str:
    """A request's client as its User-Agent's first product name (``kopf/1.45`` → ``kopf``)."""
    return user_agent.split("/", 1)[0].split(" ", 1)[0] or "-"


def resource_of(path: str) -> str:
    """The resource a request names, with its subresource (``pods``, ``leases``, ``pods/status``)."""
    parts = [part for part in path.split("/") if part]
    if "namespaces" in parts:
        at = parts.index("namespaces")
        rest = parts[at + 2 :] or ["namespaces"]
    else:
        rest = parts[3:] if parts[:1] == ["apis"] else parts[2:]
    if not rest:
        return path
    return "/".join(rest[:1] + rest[2:3])


class Control:
    def __init__(self, server: ApiServer) -> None:
        self.server = server
        self.faults = server.faults
        #: (client, method, resource) → requests served
        self.requests: Counter[tuple[str, str, str]] = Counter()

    def counting_middleware(self) -> Any:
        @web.middleware
        async def count(request: web.Request, handler: Handler) -> web.StreamResponse:
            client = client_of(request.headers.get("User-Agent", ""))
            self.requests[(client, request.method, resource_of(request.path))] += 1
            return await handler(request)

        return count

    async def requests_read(self, _request: web.Request) -> web.Response:
        """``{"requests": {client: {method: n}}, "byResource": {client: {"METHOD resource": n}}}``."""
        by_client: dict[str, dict[str, int]] = {}
        by_resource: dict[str, dict[str, int]] = {}
        for (client, method, resource), count in sorted(self.requests.items()):
            methods = by_client.setdefault(client, {})
            methods[method] = methods.get(method, 0) + count
            by_resource.setdefault(client, {})[f"{method} {resource}"] = count
        return json_response({"requests": by_client, "byResource": by_resource})

    async def faults_read(self, _request: web.Request) -> web.Response:
        return json_response(self.faults.to_dict())

    async def faults_configure(self, request: web.Request) -> web.Response:
        body = await request.json()  # an empty body is a 400 here: there is nothing to configure
        try:
            self.faults.configure_from_json(body)
        except (ValueError, TypeError, AttributeError) as exc:
            raise bad_request(f"invalid fault configuration: {exc}") from None
        return json_response(self.faults.to_dict())

    async def faults_clear(self, _request: web.Request) -> web.Response:
        self.faults.clear()
        return json_response(self.faults.to_dict())

    async def drop_watches(self, _request: web.Request) -> web.Response:
        self.faults.drop_watches()
        return json_response(self.faults.to_dict())

    async def info(self, _request: web.Request) -> web.Response:
        store = self.server.store
        return json_response({"resourceVersion": str(store.resource_version), "watches": len(store.all_watchers())})
