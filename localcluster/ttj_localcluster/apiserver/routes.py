"""The URL layout of the API server: every path it answers, each bound to the handler that serves it, and the
middleware that answers every failure as a Kubernetes ``Status`` (404 for what is not served, 405 for a
method a path does not take, 400 for a body that is not JSON, 500 for a bug)."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

from aiohttp import web
from aiohttp.typedefs import Handler

from .control import Control
from .discovery import Discovery
from .errors import ApiError, bad_request
from .handlers import ResourceHandlers
from .protocol import error_response, group_of_path, method_not_allowed, route_not_found

if TYPE_CHECKING:
    from .server import ApiServer

log = logging.getLogger(__name__)

#: the core group, and the named groups
API_PREFIXES = ("/api/{version}", "/apis/{group}/{version}")
MAX_BODY_BYTES = 64 * 1024 * 1024


@web.middleware
async def kube_status_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as error:
        return error_response(error)
    except json.JSONDecodeError as exc:
        return error_response(bad_request(f"the body of the request is not valid JSON: {exc}"))
    except web.HTTPClientError as exc:  # from the router, or aiohttp's body size limit
        return error_response(_client_error(exc, request.path))
    except web.HTTPRedirection:
        raise  # to the normalized path
    except Exception as exc:
        log.exception("internal error serving %s %s", request.method, request.path)
        message = f'an error on the server ("{exc}") has prevented the request from succeeding'
        return error_response(ApiError(500, "InternalError", message))


def _client_error(exc: web.HTTPClientError, path: str) -> ApiError:
    if exc.status == 404:
        return route_not_found(group_of_path(path))
    if exc.status == 405:
        return method_not_allowed()
    return ApiError(exc.status, exc.reason.replace(" ", ""), exc.text or exc.reason)


def build_app(server: ApiServer) -> web.Application:
    # A path with a trailing or doubled slash (`kubectl get --raw /api/v1/`) is redirected to the path meant.
    normalize = web.normalize_path_middleware(append_slash=False, remove_slash=True, merge_slashes=True)
    access = server.access.middleware()
    control = Control(server)
    middlewares = [control.counting_middleware(), kube_status_errors, access, normalize]
    app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=middlewares)
    _add_discovery(app.router, Discovery(server))
    _add_control(app.router, control)
    _add_resources(app.router, ResourceHandlers(server))
    return app


def _add_discovery(router: web.UrlDispatcher, discovery: Discovery) -> None:
    router.add_get("/", discovery.root, allow_head=False)
    for probe in ("/{probe:healthz|readyz|livez}", "/{probe:healthz|readyz|livez}/{check}"):
        router.add_get(probe, discovery.health, allow_head=False)
    for version in ("/version", "/version/"):  # the official client's VersionApi asks for the second
        router.add_get(version, discovery.version, allow_head=False)
    router.add_get("/api", discovery.core_versions, allow_head=False)
    router.add_get("/apis", discovery.groups, allow_head=False)
    router.add_get("/apis/{group}", discovery.group, allow_head=False)
    for prefix in API_PREFIXES:
        router.add_get(prefix, discovery.resources, allow_head=False)
    router.add_get("/openapi/v3", discovery.openapi_index, allow_head=False)
    for prefix in API_PREFIXES:
        router.add_get(f"/openapi/v3{prefix}", discovery.openapi_document, allow_head=False)


def _add_control(router: web.UrlDispatcher, control: Control) -> None:
    router.add_get("/ttj-local/faults", control.faults_read, allow_head=False)
    router.add_post("/ttj-local/faults", control.faults_configure)
    router.add_put("/ttj-local/faults", control.faults_configure)
    router.add_delete("/ttj-local/faults", control.faults_clear)
    router.add_post("/ttj-local/faults/drop-watches", control.drop_watches)
    router.add_get("/ttj-local/info", control.info, allow_head=False)
    router.add_get("/ttj-local/requests", control.requests_read, allow_head=False)


def _add_resources(router: web.UrlDispatcher, handlers: ResourceHandlers) -> None:
    """Every method reaches the handler, which answers 404 for a resource it does not serve before 405 for a
    method the path does not take, as kube-apiserver does. The order matters where paths overlap: ``watch/``
    first, then the subresources of cluster-scoped objects (``namespaces/NAME/status`` is the namespace's
    status, not a resource ``status`` in namespace NAME), then namespaced paths, then cluster-scoped ones."""
    subresources = {
        "status": handlers.status,
        "scale": handlers.scale,
        "binding": handlers.binding,
        "eviction": handlers.eviction,
        "log": handlers.log,
        "finalize": handlers.finalize,
        "token": handlers.token,
    }
    for prefix in API_PREFIXES:
        namespaced = f"{prefix}/namespaces/{{namespace}}/{{resource}}"
        watch = f"{prefix}/watch"
        for watched in (
            f"{watch}/namespaces/{{namespace}}/{{resource}}/{{name}}",
            f"{watch}/namespaces/{{namespace}}/{{resource}}",
            f"{watch}/{{resource}}/{{name}}",
            f"{watch}/{{resource}}",
        ):
            router.add_route("*", watched, handlers.watch)
        for subresource, handler in subresources.items():
            router.add_route("*", f"{prefix}/{{resource}}/{{name}}/{subresource}", handler)
        router.add_route("*", namespaced, handlers.collection)
        router.add_route("*", f"{namespaced}/{{name}}", handlers.object)
        for subresource, handler in subresources.items():
            router.add_route("*", f"{namespaced}/{{name}}/{subresource}", handler)
        router.add_route("*", f"{prefix}/{{resource}}", handlers.collection)
        router.add_route("*", f"{prefix}/{{resource}}/{{name}}", handlers.object)
