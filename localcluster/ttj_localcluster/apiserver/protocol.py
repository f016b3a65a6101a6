"""The HTTP side of the Kubernetes API that every handler shares: JSON and ``Status`` responses, request
bodies, query parameters (selectors, delete options, dry run) and content negotiation (server-side Tables)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from .errors import ApiError
from .resources import ResourceType
from .selectors import Matcher, parse_field_selector, parse_label_selector


@dataclass(frozen=True)
class Target:
    """What a resource URL names: a resource, maybe a namespace, maybe one object, maybe a subresource of it."""

    rtype: ResourceType
    namespace: str | None
    name: str | None
    subresource: str | None = None

    @property
    def namespace_or_empty(self) -> str:
        return self.namespace or ""

    @property
    def scope(self) -> str | None:
        """The namespace a collection request covers: None for every namespace (or a cluster-scoped resource)."""
        return self.namespace if self.rtype.namespaced else None


#: The API groups kube-apiserver 1.25 serves itself (go-restful web services): a path under one of them that
#: names nothing is answered with a ``Status``. Any other group's paths go to the CRD handler, which hands
#: what it does not serve to the end of the handler chain: Go's plain-text ``404 page not found``.
KUBE_GROUPS = frozenset(
    {
        "",
        "admissionregistration.k8s.io",
        "apiextensions.k8s.io",
        "apiregistration.k8s.io",
        "apps",
        "authentication.k8s.io",
        "authorization.k8s.io",
        "autoscaling",
        "batch",
        "certificates.k8s.io",
        "coordination.k8s.io",
        "discovery.k8s.io",
        "events.k8s.io",
        "flowcontrol.apiserver.k8s.io",
        "networking.k8s.io",
        "node.k8s.io",
        "policy",
        "rbac.authorization.k8s.io",
        "scheduling.k8s.io",
        "storage.k8s.io",
    }
)
PLAIN_NOT_FOUND = "404 page not found\n"


class PlainNotFound(ApiError):
    """A 404 from the end of kube's handler chain: plain text, not a ``Status``."""

    def __init__(self) -> None:
        super().__init__(404, "NotFound", PLAIN_NOT_FOUND.strip())


def route_not_found(group: str = "") -> ApiError:
    """What kube answers for a path that names nothing under ``group`` (the core group for ``/api``)."""
    if group not in KUBE_GROUPS:
        return PlainNotFound()
    return ApiError(404, "NotFound", "the server could not find the requested resource")


def group_of_path(path: str) -> str:
    """The API group a request path is under: ``/apis/GROUP/...``; the core group for anything else."""
    parts = path.split("/")
    return parts[2] if len(parts) > 2 and parts[1] == "apis" and parts[2] else ""


def method_not_allowed() -> ApiError:
    return ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        body=json.dumps(body, separators=(",", ":")).encode(),
        status=status,
        content_type="application/json",
        headers=headers,
    )


def error_response(error: ApiError) -> web.Response:
    if isinstance(error, PlainNotFound):
        return web.Response(
            text=PLAIN_NOT_FOUND, status=404, content_type="text/plain", headers={"X-Content-Type-Options": "nosniff"}
        )
    headers = {"Retry-After": str(error.retry_after_seconds)} if error.retry_after_seconds is not None else None
    return json_response(error.status(), error.code, headers)


def truthy(value: str | None) -> bool:
    return value is not None and value.lower() in ("1", "true", "yes")


def wants_table(request: web.Request) -> bool:
    """kubectl asks for ``application/json;as=Table;...`` first and plain JSON as the fallback."""
    first = request.headers.get("Accept", "").split(",")[0]
    return "as=Table" in first


def dry_run(request: web.Request) -> bool:
    return bool(request.query.getall("dryRun", []))


async def read_json(request: web.Request) -> Any:
    """The request's JSON body ({} when empty); invalid JSON raises json.JSONDecodeError (a 400)."""
    raw = await request.read()
    if not raw:
        return {}
    if "protobuf" in request.headers.get("Content-Type", ""):
        from .protobuf import to_json  # kubectl's typed clients: `create token`, `auth can-i`

        return to_json(raw)
    return json.loads(raw)


async def delete_options(request: web.Request) -> dict[str, Any]:
    """DeleteOptions from the body, overridden by the query parameters kubectl and clients send instead."""
    options: dict[str, Any] = {}
    body = await read_json(request)
    if isinstance(body, dict):
        options.update(body)
    query = request.query
    if "gracePeriodSeconds" in query:
        options["gracePeriodSeconds"] = int(query["gracePeriodSeconds"])
    if "propagationPolicy" in query:
        options["propagationPolicy"] = query["propagationPolicy"]
    if "orphanDependents" in query:
        options["orphanDependents"] = truthy(query["orphanDependents"])
    if dry_run(request):
        options["dryRun"] = ["All"]
    return options


def selectors(request: web.Request, rtype: ResourceType) -> list[Matcher]:
    """The label and field selectors of the query, as predicates an object must all pass."""
    parsed = (
        parse_label_selector(request.query.get("labelSelector")),
        parse_field_selector(
            request.query.get("fieldSelector"),
            rtype.group,
            rtype.kind,
            custom=rtype.is_custom,
            namespaced=rtype.namespaced,
        ),
    )
    return [matcher for matcher in parsed if matcher is not None]
