"""Preemption injection over HTTP, for tests, the demo and the ``ttj local-cluster`` control options.

The control server listens on 127.0.0.1 (a free port) and publishes its URL in the ConfigMap
``kube-system/ttj-local-control`` (key ``url``), so anything holding the kubeconfig can find it:

- ``GET  /ttj-local/status``  → pools, live nodes, preemptions so far
- ``POST /ttj-local/preempt`` ``{"node": NAME}`` or ``{"pod": "NAMESPACE/NAME"}``, optional ``"wait": true``
  (answer once the node is gone) → ``{"node", "pool", "pods", "done"}``
- ``POST /ttj-local/lose`` ``{"node": NAME}``: the node's kubelet goes silent (``NodeFleet.lose_node``)
- ``POST /ttj-local/restore`` ``{"pool": NAME}`` and optional ``"nodes": N`` → ``{"nodes": [new names]}``

It is also the nodes' kubelet endpoint (``status.daemonEndpoints.kubeletEndpoint.Port`` of every node,
at the node's InternalIP 127.0.0.1): ``GET /containerLogs/NAMESPACE/POD/CONTAINER`` with ``tailLines``,
``limitBytes``, ``previous`` and ``follow``, which is where an API server's ``pods/log`` proxies to.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlsplit

from ttj.kubeapi import JSON, KubeClient

if TYPE_CHECKING:
    from .fleet import NodeFleet, PreemptionRecord

CONTROL_NAMESPACE = "kube-system"
CONTROL_CONFIGMAP = "ttj-local-control"
PREFIX = "/ttj-local"


def _record_json(record: PreemptionRecord) -> JSON:
    return {
        "node": record.node,
        "pool": record.pool,
        "cause": record.cause,
        "pods": record.pods,
        "done": record.done.is_set(),
    }


class ControlServer:
    """The addon ``ttj_localcluster.nodes.control.ControlServer``: HTTP control of a NodeFleet."""

    name = "control"
    FOLLOW_POLL_S = 0.2

    def __init__(self, fleet: NodeFleet) -> None:
        self.fleet = fleet
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.url = ""

    @property
    def port(self) -> int:
        return int(self._server.server_address[1]) if self._server is not None else 0

    def start(self, kubeconfig_path: str) -> None:
        fleet = self.fleet

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def _answer(self, status: int, body: JSON) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _container_log(self) -> None:
                parts = [unquote(p) for p in urlsplit(self.path).path.split("/") if p]
                query = {k: v[-1] for k, v in parse_qs(urlsplit(self.path).query).items()}
                if len(parts) not in (3, 4):
                    self._answer(404, {"error": "use /containerLogs/NAMESPACE/POD/CONTAINER"})
                    return
                container = parts[3] if len(parts) == 4 else None
                previous = query.get("previous", "false").lower() == "true"
                path = fleet.log_file(parts[1], parts[2], container, previous)
                if path is None or not path.exists():
                    what = "previous terminated container" if previous else "container"
                    self._answer(404, {"error": f'{what} "{container or "?"}" in pod "{parts[2]}" has no log here'})
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                follow = query.get("follow", "false").lower() == "true" and not previous
                data = _read_log(path, query.get("tailLines"), query.get("limitBytes"))
                if not follow:
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                offset = path.stat().st_size
                try:
                    self._chunk(data)
                    while fleet.log_is_live(parts[1], parts[2], container):
                        size = path.stat().st_size
                        if size > offset:
                            with path.open("rb") as handle:
                                handle.seek(offset)
                                self._chunk(handle.read(size - offset))
                            offset = size
                        else:
                            fleet.wait_stopping(ControlServer.FOLLOW_POLL_S)
                    self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):
                    return

            def _chunk(self, data: bytes) -> None:
                if data:
                    self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                    self.wfile.flush()

            def do_GET(self) -> None:
                if self.path.startswith("/containerLogs/"):
                    self._container_log()
                elif self.path.rstrip("/") == f"{PREFIX}/status":
                    self._answer(200, fleet.describe())
                else:
                    self._answer(404, {"error": f"unknown path {self.path}; try {PREFIX}/status"})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                    if not isinstance(body, dict):
                        raise ValueError("the body must be a JSON object")
                    path = self.path.rstrip("/")
                    wait = bool(body.get("wait"))
                    if path == f"{PREFIX}/preempt":
                        if body.get("node"):
                            record = fleet.preempt_node(str(body["node"]), wait=wait)
                        elif body.get("pod"):
                            namespace, _, name = str(body["pod"]).rpartition("/")
                            record = fleet.preempt_pod(namespace or "default", name, wait=wait)
                        else:
                            raise ValueError('give "node": NAME or "pod": "NAMESPACE/NAME"')
                        self._answer(200, _record_json(record))
                    elif path == f"{PREFIX}/lose":
                        if not body.get("node"):
                            raise ValueError('give "node": NAME')
                        fleet.lose_node(str(body["node"]))
                        self._answer(200, {"node": str(body["node"])})
                    elif path == f"{PREFIX}/restore":
                        if not body.get("pool"):
                            raise ValueError('give "pool": NAME')
                        nodes = body.get("nodes")
                        created = fleet.restore_pool(str(body["pool"]), int(nodes) if nodes is not None else None)
                        self._answer(200, {"nodes": created})
                    else:
                        self._answer(404, {"error": f"unknown path {self.path}"})
                except KeyError as exc:
                    self._answer(404, {"error": str(exc.args[0]) if exc.args else str(exc)})
                except (ValueError, TypeError) as exc:
                    self._answer(400, {"error": str(exc)})

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}{PREFIX}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="ttj-local-control", daemon=True)
        self._thread.start()
        client = KubeClient.from_kubeconfig(kubeconfig_path)
        try:
            client.create(
                "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": CONTROL_NAMESPACE}}
            )
            configmap = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": CONTROL_CONFIGMAP, "namespace": CONTROL_NAMESPACE},
                "data": {"url": self.url},
            }
            path = f"/api/v1/namespaces/{CONTROL_NAMESPACE}/configmaps"
            if client.create(path, configmap) is None:
                client.merge_patch(f"{path}/{CONTROL_CONFIGMAP}", {"data": {"url": self.url}})
        finally:
            client.close()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)


def _read_log(path: Path, tail_lines: str | None, limit_bytes: str | None) -> bytes:
    data = path.read_bytes()
    if tail_lines is not None and tail_lines.isdigit():
        lines = data.splitlines(keepends=True)
        data = b"".join(lines[-int(tail_lines) :]) if int(tail_lines) else b""
    if limit_bytes is not None and limit_bytes.isdigit():
        data = data[: int(limit_bytes)]
    return data


#: how long a control command waits for a just-started local cluster's nodes (they follow its kubeconfig)
STARTUP_WAIT_S = 30.0


class ControlClient:
    """Talks to a running local cluster's control server (found through its kubeconfig)."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    @classmethod
    def from_kubeconfig(cls, kubeconfig: str) -> ControlClient:
        client = KubeClient.from_kubeconfig(kubeconfig)
        path = f"/api/v1/namespaces/{CONTROL_NAMESPACE}/configmaps/{CONTROL_CONFIGMAP}"
        try:
            configmap = client.get(path)
            if configmap is None and "ttj.local" in str(client.request("GET", "/version").get("gitVersion")):
                # A local cluster writes its kubeconfig before its nodes (and this ConfigMap) are up: wait a little.
                deadline = time.monotonic() + STARTUP_WAIT_S
                while configmap is None and time.monotonic() < deadline:
                    time.sleep(0.1)
                    configmap = client.get(path)
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

    def lose_node(self, node: str) -> JSON:
        return self._call("POST", "/lose", {"node": node})

    def restore_pool(self, pool: str, nodes: int | None = None) -> JSON:
        body: JSON = {"pool": pool}
        if nodes is not None:
            body["nodes"] = nodes
        return self._call("POST", "/restore", body)
