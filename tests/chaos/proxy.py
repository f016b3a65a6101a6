"""A TCP proxy in front of a real kube-apiserver that refuses and cuts connections, for the chaos harness.

The local cluster's API server injects faults itself (5xx, 429, 409, watch drops, forced 410s); a real one
does not. This proxy gives a real one what clients meet on the way to it: a connection reset at connect
(as a restarting load balancer or apiserver does), and a live connection cut mid-stream (a watch dropped,
a request whose answer never came, whether or not the server applied it). TLS passes through untouched,
so the client's certificate still authenticates it to the server; for that reason the proxy cannot answer
an HTTP status of its own: 5xx and 429 are not injected (an etcd restart gives real 5xx, see the harness).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading

#: bytes per read; a cut is drawn per read from the server, so a busy watch stream is cut sooner
CHUNK = 65536


class DroppingProxy:
    """``127.0.0.1:port`` → ``upstream``; :meth:`configure` sets the odds, :meth:`cut_all` drops everything."""

    def __init__(self, upstream_host: str, upstream_port: int, seed: int = 0) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.rng = random.Random(seed)
        self.refuse_probability = 0.0
        self.cut_probability = 0.0
        self.refused = 0
        self.cut = 0
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.AbstractServer | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="api-proxy", daemon=True)

    def start(self) -> int:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._accept, "127.0.0.1", 0), self._loop
        ).result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    def configure(self, refuse_probability: float = 0.0, cut_probability: float = 0.0) -> None:
        self.refuse_probability, self.cut_probability = refuse_probability, cut_probability

    def cut_all(self) -> int:
        """Abort every open connection (each watch stream among them); how many there were."""
        return asyncio.run_coroutine_threadsafe(self._cut_all(), self._loop).result(10)

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
            await self._cut_all()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _cut_all(self) -> int:
        writers = list(self._writers)
        for writer in writers:
            _abort(writer)
        self.cut += len(writers)
        return len(writers)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.rng.random() < self.refuse_probability:
            self.refused += 1
            _abort(writer)  # a reset, not a clean close: the client's request fails at once
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:  # the server is down (restarting): the client sees its connection reset
            _abort(writer)
            return
        self._writers.update((writer, up_writer))
        try:
            await asyncio.gather(self._pipe(reader, up_writer, False), self._pipe(up_reader, writer, True))
        finally:
            for w in (writer, up_writer):
                self._writers.discard(w)
                _abort(w)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, from_server: bool) -> None:
        try:
            while data := await reader.read(CHUNK):
                if from_server and self.rng.random() < self.cut_probability:
                    self.cut += 1
                    break  # mid-answer: the other pipe ends with the connection aborted below
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            _abort(writer)


def _abort(writer: asyncio.StreamWriter) -> None:
    transport = writer.transport
    if not transport.is_closing():
        transport.abort()
