"""Preemption injection over HTTP, for tests, the demo and the ``ttj local-cluster`` control options.

The control server listens on 127.0.0.1 (a free port) and the fleet publishes its URL in the ConfigMap
``kube-system/ttj-local-control`` (key ``url``; see :mod:`.ownership`), so anything holding the kubeconfig
can find it:

- ``GET  /ttj-local/status``  → the fleet's id, pools, live nodes, preemptions so far
- ``POST /ttj-local/preempt`` ``{"node": NAME}`` or ``{"pod": "NAMESPACE/NAME"}``, optional ``"wait": true``
  (answer once the node is gone) → ``{"node", "pool", "pods", "done"}``
- ``POST /ttj-local/migrate`` ``{"node": NAME}``, optional ``"wait": true`` → ``{"node", "pool", "pods",
  "refused", "done"}``: the cluster autoscaler drains the node for its compute class's active migration
  (``NodeFleet.migrate_node``)
- ``POST /ttj-local/lose`` ``{"node": NAME}``: the node's kubelet goes silent (``NodeFleet.lose_node``)
- ``POST /ttj-local/restore`` ``{"pool": NAME}`` and optional ``"nodes": N`` → ``{"nodes": [new names]}``
- ``POST /ttj-local/stock-out`` ``{"pool": NAME}``, optional ``"keepNodes": true`` → ``{"pool", "stockedOut",
  "preempted": [nodes]}``: the pool has no capacity (``NodeFleet.stock_out``)
- ``POST /ttj-local/restock`` ``{"pool": NAME}`` → ``{"pool", "stockedOut", "nodes": [new names]}``
- ``POST /ttj-local/replay-trace`` ``{"pool": NAME}``, optional ``"fromSeconds": S`` → ``{"pool", "trace",
  "fromSeconds", "stockedOut", "changes": [{"afterSeconds", "inStock"}]}``: the pool's trace replayed over from
  now (``NodeFleet.replay_trace``)

It is also the nodes' kubelet endpoint (``status.daemonEndpoints.kubeletEndpoint.Port`` of every node,
at the node's InternalIP 127.0.0.1): ``GET /containerLogs/NAMESPACE/POD/CONTAINER`` with ``tailLines``,
``limitBytes``, ``previous`` and ``follow``, which is where an API server's ``pods/log`` proxies to.
Errors answer ``{"error": MESSAGE}``.

An aiohttp application on its own event loop and thread: the fleet's methods block (a preemption with
``wait`` takes the pods' grace period), so the handlers call them in worker threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web
from tenacity import Retrying, retry_if_result, stop_after_delay, wait_fixed

from ttj.kubeapi import JSON, KubeClient

from .fleet_ownership import CONTROL_CONFIGMAP, CONTROL_NAMESPACE, CONTROL_PATH

if TYPE_CHECKING:
    from .fleet import NodeFleet

PREFIX = "/ttj-local"
LOGS = "/containerLogs"


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


@web.middleware
async def _errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Unknown names are 404, bad requests 400, both as ``{"error": ...}`` (what the clients read)."""
    try:
        return await handler(request)
    except KeyError as exc:
        return _error(404, str(exc.args[0]) if exc.args else str(exc))
    except (ValueError, TypeError) as exc:
        return _error(400, str(exc))
    except web.HTTPNotFound:
        if request.path.startswith(f"{LOGS}/"):
            return _error(404, f"use {LOGS}/NAMESPACE/POD/CONTAINER")
        return _error(404, f"unknown path {request.path}; try {PREFIX}/status")
    except web.HTTPException as exc:
        return _error(exc.status, exc.reason)


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "false").lower() == "true"


def _read_log(path: Path, tail_lines: str | None, limit_bytes: str | None) -> tuple[bytes, int]:
    """The part of the log asked for, and how far the file was read."""
    whole = path.read_bytes()
    data = whole
    if tail_lines is not None and tail_lines.isdigit():
        lines = data.splitlines(keepends=True)
        data = b"".join(lines[-int(tail_lines) :]) if int(tail_lines) else b""
    if limit_bytes is not None and limit_bytes.isdigit():
        data = data[: int(limit_bytes)]
    return data, len(whole)


def _read_from(path: Path, offset: int) -> bytes:
    with path.open("rb") as handle:
        handle.seek(offset)
        return handle.read()


class _Handlers:
    FOLLOW_POLL_S = 0.2

    def __init__(self, fleet: NodeFleet) -> None:
        self.fleet = fleet

    async def status(self, _request: web.Request) -> web.Response:
        return web.json_response(self.fleet.describe())

    async def preempt(self, request: web.Request) -> web.Response:
        body = await _body(request)
        wait = bool(body.get("wait"))
        if body.get("node"):
            record = await asyncio.to_thread(self.fleet.preempt_node, str(body["node"]), wait=wait)
        elif body.get("pod"):
            namespace, _, name = str(body["pod"]).rpartition("/")
            record = await asyncio.to_thread(self.fleet.preempt_pod, namespace or "default", name, wait=wait)
        else:
            raise ValueError('give "node": NAME or "pod": "NAMESPACE/NAME"')
        return web.json_response(record.to_json())

    async def migrate(self, request: web.Request) -> web.Response:
        body = await _body(request)
        if not body.get("node"):
            raise ValueError('give "node": NAME')
        record = await asyncio.to_thread(self.fleet.migrate_node, str(body["node"]), wait=bool(body.get("wait")))
        return web.json_response(record.to_json())

    async def lose(self, request: web.Request) -> web.Response:
        body = await _body(request)
        if not body.get("node"):
            raise ValueError('give "node": NAME')
        await asyncio.to_thread(self.fleet.lose_node, str(body["node"]))
        return web.json_response({"node": str(body["node"])})

    async def partition(self, request: web.Request) -> web.Response:
        body = await _body(request)
        ips = [str(ip) for ip in body.get("podIPs") or []]
        refused = await asyncio.to_thread(self.fleet.partition_api, ips)
        return web.json_response({"podIPs": ips, "refused": refused})

    async def restore(self, request: web.Request) -> web.Response:
        body = await _body(request)
        if not body.get("pool"):
            raise ValueError('give "pool": NAME')
        nodes = body.get("nodes")
        count = int(nodes) if nodes is not None else None
        created = await asyncio.to_thread(self.fleet.restore_pool, str(body["pool"]), count)
        return web.json_response({"nodes": created})

    async def stock_out(self, request: web.Request) -> web.Response:
        body = await _body(request)
        if not body.get("pool"):
            raise ValueError('give "pool": NAME')
        answer = await asyncio.to_thread(
            self.fleet.stock_out, str(body["pool"]), keep_nodes=bool(body.get("keepNodes"))
        )
        return web.json_response(answer)

    async def restock(self, request: web.Request) -> web.Response:
        body = await _body(request)
        if not body.get("pool"):
            raise ValueError('give "pool": NAME')
        return web.json_response(await asyncio.to_thread(self.fleet.restock, str(body["pool"])))

    async def replay_trace(self, request: web.Request) -> web.Response:
        body = await _body(request)
        if not body.get("pool"):
            raise ValueError('give "pool": NAME')
        start = body.get("fromSeconds")
        answer = await asyncio.to_thread(
            self.fleet.replay_trace, str(body["pool"]), None if start is None else float(start)
        )
        return web.json_response(answer)

    async def container_log(self, request: web.Request) -> web.StreamResponse:
        namespace, pod = request.match_info["namespace"], request.match_info["pod"]
        container = request.match_info.get("container")
        previous = _flag(request, "previous")
        path = self.fleet.log_file(namespace, pod, container, previous)
        if path is None or not path.exists():
            what = "previous terminated container" if previous else "container"
            return _error(404, f'{what} "{container or "?"}" in pod "{pod}" has no log here')
        data, offset = await asyncio.to_thread(
            _read_log, path, request.query.get("tailLines"), request.query.get("limitBytes")
        )
        if not (_flag(request, "follow") and not previous):
            return web.Response(body=data, content_type="text/plain", charset="utf-8")
        response = web.StreamResponse(headers={"Content-Type": "text/plain; charset=utf-8"})
        await response.prepare(request)
        try:
            if data:
                await response.write(data)
            while True:
                live = self.fleet.log_is_live(namespace, pod, container)
                # read after asking: what the container wrote before it ended is sent too
                more = await asyncio.to_thread(_read_from, path, offset)
                if more:
                    await response.write(more)
                    offset += len(more)
                elif not live:
                    break
                else:
                    await asyncio.sleep(self.FOLLOW_POLL_S)
            await response.write_eof()
        except ConnectionResetError:
            pass  # the reader went away
        return response


async def _body(request: web.Request) -> JSON:
    body = json.loads(await request.read() or b"{}")
    if not isinstance(body, dict):
        raise ValueError("the body must be a JSON object")
    return body


def control_app(fleet: NodeFleet) -> web.Application:
    handlers = _Handlers(fleet)
    app = web.Application(middlewares=[_errors])
    for slash in ("", "/"):  # with or without a trailing slash
        app.router.add_get(f"{PREFIX}/status{slash}", handlers.status)
        app.router.add_post(f"{PREFIX}/preempt{slash}", handlers.preempt)
        app.router.add_post(f"{PREFIX}/migrate{slash}", handlers.migrate)
        app.router.add_post(f"{PREFIX}/lose{slash}", handlers.lose)
        app.router.add_post(f"{PREFIX}/restore{slash}", handlers.restore)
        app.router.add_post(f"{PREFIX}/partition{slash}", handlers.partition)
        app.router.add_post(f"{PREFIX}/stock-out{slash}", handlers.stock_out)
        app.router.add_post(f"{PREFIX}/restock{slash}", handlers.restock)
        app.router.add_post(f"{PREFIX}/replay-trace{slash}", handlers.replay_trace)
    app.router.add_get(LOGS + "/{namespace}/{pod}", handlers.container_log)
    app.router.add_get(LOGS + "/{namespace}/{pod}/{container}", handlers.container_log)
    return app


class ControlServer:
    """HTTP control of a NodeFleet and its nodes' kubelet endpoint; the port is bound at construction."""

    #: how long stopping waits for open requests (a followed log ends once the fleet stops)
    SHUTDOWN_S = 2.0

    def __init__(self, fleet: NodeFleet) -> None:
        self.fleet = fleet
        self._socket = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._socket.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}{PREFIX}"
        self._loop = asyncio.new_event_loop()
        self._runner = web.AppRunner(control_app(fleet), access_log=None, shutdown_timeout=self.SHUTDOWN_S)
        self._ready = threading.Event()
        self._failure: list[BaseException] = []
        self._thread = threading.Thread(target=self._serve, name="ttj-local-control", daemon=True)

    def start(self) -> None:
        """Serve (the fleet then publishes the URL: :func:`.ownership.claim_control`)."""
        self._thread.start()
        self._ready.wait()
        if self._failure:
            raise RuntimeError(f"the node control server did not start: {self._failure[0]}") from self._failure[0]

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._runner.setup())
            self._loop.run_until_complete(web.SockSite(self._runner, self._socket).start())
        except BaseException as exc:
            self._failure.append(exc)
            self._ready.set()
            self._loop.close()
            return
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            with contextlib.suppress(Exception):
                self._loop.run_until_complete(self._runner.cleanup())
            self._loop.close()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(self.SHUTDOWN_S + 5)
        else:
            self._socket.close()


#: how long a control command waits for a just-started local cluster's nodes (they follow its kubeconfig)
STARTUP_WAIT_S = 30.0


class ControlClient:
    """Talks to a running local cluster's control server (found through its kubeconfig)."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    @classmethod
    def from_kubeconfig(cls, kubeconfig: str) -> ControlClient:
        client = KubeClient.from_kubeconfig(kubeconfig)
        try:
            configmap = client.get(CONTROL_PATH)
            if configmap is None and "ttj.local" in str(client.request("GET", "/version").get("gitVersion")):
                # A local cluster writes its kubeconfig before its nodes (and this ConfigMap) are up: wait a little.
                configmap = Retrying(
                    stop=stop_after_delay(STARTUP_WAIT_S),
                    wait=wait_fixed(0.1),
                    retry=retry_if_result(lambda found: found is None),
                    retry_error_callback=lambda _state: None,
                )(client.get, CONTROL_PATH)
        finally:
            client.close()
        url = ((configmap or {}).get("data") or {}).get("url")
        if not url:
            raise RuntimeError(
                f"no {CONTROL_NAMESPACE}/{CONTROL_CONFIGMAP} ConfigMap: is this a ttj local cluster "
                "with simulated nodes?"
            )
        return cls(url)

    def _call(self, method: str, path: str, body: JSON | None = None, timeout: float = 180) -> JSON:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"{self.url}{path}", data=data, method=method)
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                answer: JSON = json.loads(response.read())
                return answer
        except urllib.error.HTTPError as exc:
            try:
                message = json.loads(exc.read()).get("error", str(exc))
            except ValueError:
                message = str(exc)
            raise RuntimeError(message) from exc

    def status(self) -> JSON:
        return self._call("GET", "/status")

    def preempt_node(self, node: str, wait: bool = False) -> JSON:
        return self._call("POST", "/preempt", {"node": node, "wait": wait})

    def preempt_pod(self, namespace: str, name: str, wait: bool = False) -> JSON:
        return self._call("POST", "/preempt", {"pod": f"{namespace}/{name}", "wait": wait})

    def migrate_node(self, node: str, wait: bool = False) -> JSON:
        """The cluster autoscaler drains the node (its compute class's active migration) and deletes it."""
        return self._call("POST", "/migrate", {"node": node, "wait": wait}, timeout=300)

    def lose_node(self, node: str) -> JSON:
        return self._call("POST", "/lose", {"node": node})

    def partition_api(self, pod_ips: list[str]) -> JSON:
        """Cuts these pods off the API server (an empty list heals); ``refused``: connections refused so far."""
        return self._call("POST", "/partition", {"podIPs": list(pod_ips)})

    def restore_pool(self, pool: str, nodes: int | None = None) -> JSON:
        body: JSON = {"pool": pool}
        if nodes is not None:
            body["nodes"] = nodes
        return self._call("POST", "/restore", body)

    def stock_out(self, pool: str, keep_nodes: bool = False) -> JSON:
        """The pool has no capacity: its nodes are preempted (unless ``keep_nodes``) and none can join."""
        return self._call("POST", "/stock-out", {"pool": pool, "keepNodes": keep_nodes})

    def restock(self, pool: str) -> JSON:
        """Capacity is back: the pool returns to its size."""
        return self._call("POST", "/restock", {"pool": pool})

    def replay_trace(self, pool: str, from_seconds: float | None = None) -> JSON:
        """The pool's trace replayed over from now, from ``from_seconds`` (default: the pool's trace-start)."""
        body: JSON = {"pool": pool}
        if from_seconds is not None:
            body["fromSeconds"] = from_seconds
        return self._call("POST", "/replay-trace", body)
