"""The local API server counts the requests it serves by client (the User-Agent's product name), method and
resource: what a benchmark reads to count one client's writes (``GET /ttj-local/requests``)."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from ttj_localcluster.apiserver.control import client_of, resource_of
from ttj_localcluster.apiserver.routes import build_app
from ttj_localcluster.apiserver.server import ApiServer


def test_a_request_is_told_by_its_client_and_resource() -> None:
    assert client_of("kopf/1.45.2") == "kopf"
    assert client_of("ttj-operator/0.1.0") == "ttj-operator"
    assert client_of("") == "-"
    assert resource_of("/api/v1/namespaces/ns/pods/w-1") == "pods"
    assert resource_of("/apis/transient.training/v1alpha1/namespaces/ns/transienttrainingjobs/j/status") == (
        "transienttrainingjobs/status"
    )
    assert resource_of("/apis/coordination.k8s.io/v1/namespaces/ns/leases") == "leases"
    assert resource_of("/api/v1/nodes") == "nodes"
    assert resource_of("/api/v1/namespaces/ns") == "namespaces"


def test_requests_are_counted_by_client_method_and_resource() -> None:
    answer = asyncio.run(requests_counted())
    assert answer["requests"]["ttj-operator"] == {"GET": 1, "POST": 1}
    assert answer["requests"]["kopf"] == {"GET": 2}
    assert answer["byResource"]["ttj-operator"] == {"GET pods": 1, "POST namespaces": 1}
    assert answer["byResource"]["kopf"] == {"GET namespaces": 2}


async def requests_counted() -> Any:
    async with TestClient(TestServer(build_app(ApiServer()))) as client:
        operator, kopf = {"User-Agent": "ttj-operator/0.1.0"}, {"User-Agent": "kopf/1.45.2"}
        created = await client.post("/api/v1/namespaces", json={"metadata": {"name": "a"}}, headers=operator)
        assert created.status == 201
        for _ in range(2):
            assert (await client.get("/api/v1/namespaces/a", headers=kopf)).status == 200
        missing = await client.get("/api/v1/namespaces/a/pods/none", headers=operator)
        assert missing.status == 404  # refused requests count too: they cost the server as much
        return await (await client.get("/ttj-local/requests")).json()
