"""The API relay pods use to reach the API server (nodes/netns.py): many connections at once, long watches,
clients that vanish with a reset. Runs on loopback, so it needs no root."""

from __future__ import annotations

import json
import socket
import struct
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import pytest

from ttj_localcluster.cluster import LocalCluster
from ttj_localcluster.nodes.netns import TcpRelay

from .conftest import wait_for

CONNECTIONS = 300


@pytest.fixture(scope="module")
def relay() -> Iterator[TcpRelay]:
    with LocalCluster() as cluster:
        url = urlsplit(cluster.url)
        relay = TcpRelay("127.0.0.1", (url.hostname or "127.0.0.1", url.port or 80))
        relay.start()
        yield relay
        relay.stop()


def request(path: str, method: str = "GET", body: dict[str, object] | None = None) -> bytes:
    payload = json.dumps(body).encode() if body is not None else b""
    head = f"{method} {path} HTTP/1.1\r\nHost: kubernetes\r\nConnection: close\r\nAccept: application/json\r\n"
    if payload:
        head += f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
    return head.encode() + b"\r\n" + payload


def read_all(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def call(relay: TcpRelay, path: str, method: str = "GET", body: dict[str, object] | None = None) -> bytes:
    with socket.create_connection(("127.0.0.1", relay.port), timeout=30) as sock:
        sock.sendall(request(path, method, body))
        return read_all(sock)


def test_hundreds_of_connections_open_at_once(relay: TcpRelay) -> None:
    # Every socket connects before any sends: the listen backlog and the accept loop must take them all.
    sockets = [socket.create_connection(("127.0.0.1", relay.port), timeout=30) for _ in range(CONNECTIONS)]
    try:
        for sock in sockets:
            sock.sendall(request("/version"))
        with ThreadPoolExecutor(max_workers=32) as pool:
            answers = list(pool.map(read_all, sockets))
    finally:
        for sock in sockets:
            sock.close()
    assert all(answer.startswith(b"HTTP/1.1 200") for answer in answers)
    assert all(b'"gitVersion"' in answer for answer in answers)
    wait_for(lambda: relay.open_connections == 0, what="every relayed connection closed")


def test_concurrent_requests_from_many_threads(relay: TcpRelay) -> None:
    with ThreadPoolExecutor(max_workers=48) as pool:
        answers = list(
            pool.map(lambda i: call(relay, f"/api/v1/namespaces/default/configmaps?limit={i % 5 + 1}"), range(400))
        )
    assert all(answer.startswith(b"HTTP/1.1 200") for answer in answers)


def test_watches_survive_other_clients_resetting(relay: TcpRelay) -> None:
    watches = []
    for _ in range(20):
        sock = socket.create_connection(("127.0.0.1", relay.port), timeout=30)
        sock.sendall(request("/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=30"))
        watches.append(sock)
    kept, dropped = watches[:10], watches[10:]
    wait_for(lambda: relay.open_connections >= 20, what="20 relayed watches")
    for sock in dropped:
        # a pod that vanished: its connection ends with a reset, not a goodbye
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    created = call(
        relay,
        "/api/v1/namespaces/default/configmaps",
        "POST",
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "relayed"}, "data": {"a": "b"}},
    )
    assert created.startswith(b"HTTP/1.1 201"), created[:200]
    received: list[bytes] = []

    def read_until_event(sock: socket.socket) -> None:
        data = b""
        while b'"relayed"' not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        received.append(data)

    readers = [threading.Thread(target=read_until_event, args=(sock,)) for sock in kept]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join(30)
    for sock in kept:
        sock.close()
    assert len(received) == len(kept)
    assert all(b'"type":"ADDED"' in data and b'"relayed"' in data for data in received)
    wait_for(lambda: relay.open_connections == 0, what="the watches' connections closed")
    assert call(relay, "/version").startswith(b"HTTP/1.1 200")


def reset_or_closed(sock: socket.socket) -> bool:
    """The relay dropped this connection: a request on it gets a reset or nothing at all."""
    try:
        sock.sendall(request("/version"))
        return read_all(sock) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True


def test_a_partition_cuts_one_peer_off_and_heals() -> None:
    with LocalCluster() as cluster:
        url = urlsplit(cluster.url)
        relay = TcpRelay("127.0.0.1", (url.hostname or "127.0.0.1", url.port or 80))
        relay.start()
        try:
            assert b"200 OK" in call(relay, "/version")
            # A kept-alive connection open when the partition starts is reset, as a broken network would.
            open_sock = socket.create_connection(("127.0.0.1", relay.port), timeout=30)
            wait_for(lambda: relay.open_connections >= 1, 10, "the connection to be relayed")
            relay.block(["127.0.0.2"])
            assert b"200 OK" in call(relay, "/version"), "other peers are not cut"
            relay.block(["127.0.0.1"])
            wait_for(lambda: relay.open_connections == 0, 10, "the open connection to be reset")
            assert reset_or_closed(open_sock)
            refused_before = relay.refused
            try:
                answer = call(relay, "/version")
            except ConnectionResetError:
                answer = b""
            assert answer == b"", "a new connection from the cut peer gets nowhere"
            assert relay.refused == refused_before + 1
            relay.block([])
            assert b"200 OK" in call(relay, "/version")
        finally:
            open_sock.close()
            relay.stop()
