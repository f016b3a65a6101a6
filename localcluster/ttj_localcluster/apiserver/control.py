"""The API server's own ``/ttj-local/`` endpoints, not Kubernetes ones: fault injection (``faults``, and
``faults/drop-watches`` to end every open watch) and ``info`` (the current resourceVersion, open watches)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from .errors import bad_request
from .protocol import json_response

if TYPE_CHECKING:
    from .server import ApiServer


class Control:
    def __init__(self, server: ApiServer) -> None:
        self.server = server
        self.faults = server.faults

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
