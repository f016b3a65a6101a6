"""What clients read before they touch a resource: ``/version``, health probes, the API discovery documents
(``/api``, ``/apis``, one group, one group-version's resources) and the OpenAPI v3 documents."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from . import openapi
from .protocol import json_response, route_not_found

if TYPE_CHECKING:
    from .server import ApiServer

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


class Discovery:
    def __init__(self, server: ApiServer) -> None:
        self.server = server
        self.registry = server.registry

    async def root(self, _request: web.Request) -> web.Response:
        return json_response({"paths": ["/api", "/api/v1", "/apis", "/version", "/healthz", "/readyz"]})

    async def health(self, _request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def version(self, _request: web.Request) -> web.Response:
        return json_response(KUBE_VERSION)

    async def core_versions(self, _request: web.Request) -> web.Response:
        address = f"{self.server.host}:{self.server.port}"
        return json_response(
            {
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}],
            }
        )

    async def groups(self, _request: web.Request) -> web.Response:
        return json_response(self.registry.group_list())

    async def group(self, request: web.Request) -> web.Response:
        found = self.registry.group(request.match_info["group"])
        if found is None:
            raise route_not_found(request.match_info["group"])
        return json_response(found)

    async def resources(self, request: web.Request) -> web.Response:
        group, version = request.match_info.get("group", ""), request.match_info["version"]
        if not self.registry.has_group_version(group, version):
            raise route_not_found(group)
        return json_response(self.registry.resource_list(group, version))

    async def openapi_index(self, _request: web.Request) -> web.Response:
        """Every group-version's document, with a hash that changes whenever the API might have (CRDs)."""
        revision = self.server.store.resource_version
        paths = {}
        for group, version in self._group_versions():
            prefix = f"apis/{group}/{version}" if group else f"api/{version}"
            paths[prefix] = {"serverRelativeURL": f"/openapi/v3/{prefix}?hash={revision}"}
        return json_response({"paths": paths})

    async def openapi_document(self, request: web.Request) -> web.Response:
        """The PATCH operations with the fieldValidation parameter (so kubectl leaves validation to the server),
        and the schemas of custom resources (for kubectl explain)."""
        group, version = request.match_info.get("group", ""), request.match_info["version"]
        if (group, version) not in self._group_versions():
            raise route_not_found()
        return json_response(openapi.group_version_document(self.registry, group, version))

    def _group_versions(self) -> list[tuple[str, str]]:
        return sorted({(t.group, t.version) for t in self.registry.all_types()})
