"""``GET /api/v1/namespaces/NS/pods/NAME/log``: proxied to the kubelet of the pod's node, as kube-apiserver does.

Owned by the node simulation (ttj_localcluster.nodes, which serves ``/containerLogs/NS/POD/CONTAINER`` on
every node's ``status.daemonEndpoints.kubeletEndpoint.Port`` at its InternalIP); kept apart from the rest of
the API server, which only routes the ``log`` subresource here. Plain HTTP: the local kubelet has no TLS.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp import web

from .errors import ApiError, bad_request

if TYPE_CHECKING:
    from .server import ApiServer

PASSED_QUERY = ("tailLines", "limitBytes", "previous", "follow", "timestamps", "sinceSeconds")


def _kubelet_address(node: dict[str, Any]) -> tuple[str, int] | None:
    status = node.get("status") or {}
    port = int(((status.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port") or 0)
    address = next((a.get("address") for a in status.get("addresses") or [] if a.get("type") == "InternalIP"), None)
    return (str(address), port) if address and port else None


async def serve(
    server: ApiServer, request: web.Request, namespace: str, name: str | None, verb: str
) -> web.StreamResponse:
    if verb != "get" or name is None:
        raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
    pods = server.registry.get("", "v1", "pods")
    nodes = server.registry.get("", "v1", "nodes")
    assert pods is not None
    assert nodes is not None
    pod = server.core.get(pods, namespace, name)
    containers = [str(c.get("name")) for c in (pod.get("spec") or {}).get("containers") or []]
    container = request.query.get("container")
    if not container:
        if len(containers) != 1:
            raise bad_request(
                f"a container name must be specified for pod {name}, choose one of: [{' '.join(containers)}]"
            )
        container = containers[0]
    elif container not in containers:
        raise bad_request(f"container {container} is not valid for pod {name}")
    node_name = (pod.get("spec") or {}).get("nodeName")
    if not node_name:
        raise bad_request(f'container "{container}" in pod "{name}" is waiting to start: ContainerCreating')
    try:
        node = server.core.get(nodes, "", node_name)
    except ApiError as exc:
        raise ApiError(
            404, "NotFound", f'node "{node_name}" that ran pod "{name}" is gone, and its container logs with it'
        ) from exc
    address = _kubelet_address(node)
    if address is None:
        raise ApiError(
            503, "ServiceUnavailable", f'node "{node_name}" publishes no kubelet endpoint to fetch logs from'
        )
    query = {k: request.query[k] for k in PASSED_QUERY if k in request.query}
    url = f"http://{address[0]}:{address[1]}/containerLogs/{namespace}/{name}/{container}"
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=5)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session, session.get(url, params=query) as upstream:
            if upstream.status != 200:
                try:
                    message = str((await upstream.json(content_type=None)).get("error"))
                except (ValueError, aiohttp.ContentTypeError):
                    message = await upstream.text()
                raise bad_request(message)
            response = web.StreamResponse(status=200, headers={"Content-Type": "text/plain"})
            await response.prepare(request)
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response
    except aiohttp.ClientError as exc:
        raise ApiError(500, "InternalError", f"could not reach the kubelet of node {node_name}: {exc}") from exc
