"""An HTTP proxy in front of a real kube-apiserver that fails requests and cuts connections, for the chaos harness.

The local cluster's API server injects faults itself (5xx, 429, 409, watch drops, forced 410s); a real one does
not. This proxy gives a real one what clients meet on the way to it: answers of its own instead of the server's
(429 with Retry-After, 500, 503, 504 on any request; 409 on writes), a connection reset before any answer (as a
restarting load balancer or apiserver gives), and an answer cut mid-stream (a watch dropped, or a write whose
answer never came, applied or not).

To answer in HTTP it must read HTTP, so it ends the TLS: clients talk plain HTTP to it on the loopback, and it
talks to the server with the kubeconfig's own credentials (its client certificate, or its bearer token). The
server therefore sees the kubeconfig's identity for every client behind the proxy (the chaos operators run as
that identity anyway).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import random
import ssl
import tempfile
import threading
from pathlib import Path
from typing import Any

import yaml
from aiohttp import ClientSession, ClientTimeout, TCPConnector, web

#: Codes answered on any request, and the one answered on writes only, with kube-apiserver's reasons.
STATUS_FAULTS = {429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable", 504: "Timeout"}
WRITE_CONFLICT = (409, "Conflict")
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
#: Request headers not passed on: the connection's own, and Accept-Encoding so that bodies pass uncompressed.
_REQUEST_HOP = frozenset({"host", "connection", "keep-alive", "transfer-encoding", "content-length", "accept-encoding"})
_RESPONSE_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding"})


class FaultyApiProxy:
    """``http://127.0.0.1:port`` → the kubeconfig's server. :meth:`configure` sets the odds, per request:
    ``refuse`` resets the connection, ``status`` answers one of :data:`STATUS_FAULTS`, ``conflict`` answers 409 to
    a write; ``cut``, per chunk of an answer, aborts it."""

    def __init__(self, kubeconfig: str | Path, seed: int = 0) -> None:
        document = yaml.safe_load(Path(kubeconfig).read_text())
        self.upstream = str(document["clusters"][0]["cluster"]["server"]).rstrip("/")
        self._ssl = _client_ssl(document) if self.upstream.startswith("https:") else None
        token = document["users"][0]["user"].get("token")
        self._credentials = {"Authorization": f"Bearer {token}"} if token else {}
        self.rng = random.Random(seed)
        self.refuse_probability = self.status_probability = self.conflict_probability = self.cut_probability = 0.0
        self.refused = self.answered = self.cut = 0
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="api-proxy", daemon=True)
        self._runner: web.AppRunner | None = None
        self._session: ClientSession | None = None
        self._open: set[asyncio.BaseTransport] = set()

    def start(self) -> int:
        self._thread.start()
        self.port = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self.port

    def kubeconfig_through(self, kubeconfig: str | Path, path: Path) -> Path:
        """A copy of ``kubeconfig`` whose clients come through the proxy (plain HTTP, no credentials of their own)."""
        document = yaml.safe_load(Path(kubeconfig).read_text())
        for entry in document["clusters"]:
            entry["cluster"] = {"server": f"http://127.0.0.1:{self.port}"}
        for entry in document["users"]:
            entry["user"] = {}
        path.write_text(yaml.safe_dump(document))
        path.chmod(0o600)
        return path

    def configure(
        self,
        refuse_probability: float = 0.0,
        status_probability: float = 0.0,
        conflict_probability: float = 0.0,
        cut_probability: float = 0.0,
    ) -> None:
        self.refuse_probability, self.status_probability = refuse_probability, status_probability
        self.conflict_probability, self.cut_probability = conflict_probability, cut_probability

    def cut_all(self) -> int:
        """Abort every open connection (each watch stream among them); how many there were."""

        async def cut() -> int:
            transports = list(self._open)
            for transport in transports:
                transport.abort()
            self.cut += len(transports)
            return len(transports)

        return asyncio.run_coroutine_threadsafe(cut(), self._loop).result(10)

    def stop(self) -> None:
        async def close() -> None:
            for transport in list(self._open):
                transport.abort()
            if self._runner is not None:
                await self._runner.cleanup()
            if self._session is not None:
                await self._session.close()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _start(self) -> int:
        # No timeout: a watch stays open as long as the server keeps it.
        self._session = ClientSession(
            connector=TCPConnector(ssl=self._ssl), timeout=ClientTimeout(total=None), auto_decompress=False
        )
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert isinstance(server, asyncio.base_events.Server)
        return int(server.sockets[0].getsockname()[1])

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        transport = request.transport
        if transport is None:
            raise web.HTTPServiceUnavailable()
        draw = self.rng.random()
        if draw < self.refuse_probability:
            self.refused += 1
            transport.abort()  # a reset: the client's request fails at once, unanswered
            return web.Response()
        if draw < self.refuse_probability + self.status_probability:
            return self._status(self.rng.choice(sorted(STATUS_FAULTS)), request)
        if request.method in WRITES and self.rng.random() < self.conflict_probability:
            return self._status(WRITE_CONFLICT[0], request)
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _REQUEST_HOP} | self._credentials
        body = await request.read()
        self._open.add(transport)
        try:
            try:
                upstream = await self._session.request(
                    request.method, self.upstream + request.path_qs, headers=headers, data=body or None
                )
            except OSError:  # the server is down (restarting): the client sees its connection reset
                transport.abort()
                return web.Response()
            async with upstream:
                answer = web.StreamResponse(
                    status=upstream.status,
                    headers={k: v for k, v in upstream.headers.items() if k.lower() not in _RESPONSE_HOP},
                )
                await answer.prepare(request)
                async for chunk in upstream.content.iter_any():
                    if self.rng.random() < self.cut_probability:
                        self.cut += 1
                        transport.abort()  # mid-answer
                        return answer
                    await answer.write(chunk)
                await answer.write_eof()
                return answer
        except (ConnectionError, OSError):
            transport.abort()
            return web.Response()
        finally:
            self._open.discard(transport)

    def _status(self, code: int, request: web.Request) -> web.Response:
        self.answered += 1
        reason = WRITE_CONFLICT[1] if code == WRITE_CONFLICT[0] else STATUS_FAULTS[code]
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": f"injected by the chaos proxy: {reason} ({request.method} {request.path})",
            "reason": reason,
            "code": code,
        }
        if code in (429, 503):
            body["details"] = {"retryAfterSeconds": 1}
        headers = {"Retry-After": "1"} if code in (429, 503) else {}
        return web.Response(status=code, text=json.dumps(body), content_type="application/json", headers=headers)


def _client_ssl(document: dict[str, Any]) -> ssl.SSLContext:
    """TLS to the server trusting the kubeconfig's first cluster's CA, with its first user's client certificate
    when it has one."""
    cluster, user = document["clusters"][0]["cluster"], document["users"][0]["user"]
    authority = cluster.get("certificate-authority-data")
    context = ssl.create_default_context(cadata=base64.b64decode(authority).decode() if authority else None)
    if "client-certificate-data" not in user:
        return context
    with tempfile.TemporaryDirectory() as folder:
        certificate, key = Path(folder, "client.crt"), Path(folder, "client.key")
        certificate.write_bytes(base64.b64decode(user["client-certificate-data"]))
        key.write_bytes(base64.b64decode(user["client-key-data"]))
        context.load_cert_chain(certificate, key)
    return context
