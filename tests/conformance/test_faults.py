"""Fault injection (local cluster only): injected errors, latency, dropped watches, the HTTP control API."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Iterator

import pytest
from kubernetes import client

from ttj_localcluster.apiserver import FaultRule
from ttj_localcluster.cluster import LocalCluster


@pytest.fixture
def faults_cluster(local_cluster: LocalCluster | None) -> Iterator[LocalCluster]:
    if local_cluster is None:
        pytest.skip("fault injection needs the local cluster")
    yield local_cluster
    local_cluster.faults.clear()


def test_injected_errors_are_kube_statuses(
    faults_cluster: LocalCluster, core: client.CoreV1Api, namespace: str
) -> None:
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "f"}})
    rule = FaultRule(probability=1.0, codes=[500], verbs=["get"], resources=["configmaps"], count=1)
    faults_cluster.faults.configure(seed=7, rules=[rule])
    with pytest.raises(client.ApiException) as info:
        core.read_namespaced_config_map("f", namespace)
    assert info.value.status == 500
    assert json.loads(info.value.body)["reason"] == "InternalError"
    # count=1: the next one goes through
    assert core.read_namespaced_config_map("f", namespace).metadata.name == "f"


def test_throttling_carries_retry_after(faults_cluster: LocalCluster, core: client.CoreV1Api, namespace: str) -> None:
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "t"}})
    rule = FaultRule(probability=1.0, codes=[429], verbs=["get"], resources=["configmaps"], count=1)
    faults_cluster.faults.configure(rules=[rule])
    # urllib3 under the official client honours Retry-After on 429 and retries, as against a real apiserver
    assert core.read_namespaced_config_map("t", namespace).metadata.name == "t"
    assert rule.injected == 1


def test_seeded_share_of_failures_is_reproducible(
    faults_cluster: LocalCluster, core: client.CoreV1Api, namespace: str
) -> None:
    def run() -> list[int]:
        faults_cluster.faults.configure(seed=42, rules=[FaultRule(probability=0.5, codes=[409, 500], verbs=["list"])])
        outcomes = []
        for _ in range(20):
            try:
                core.list_namespaced_config_map(namespace)
                outcomes.append(200)
            except client.ApiException as exc:
                outcomes.append(exc.status)
        return outcomes

    first, second = run(), run()
    assert first == second
    assert 200 in first
    assert {409, 500} & set(first)


def test_http_control_and_dropped_watches(faults_cluster: LocalCluster, core: client.CoreV1Api, namespace: str) -> None:
    body = json.dumps(
        {"seed": 1, "rules": [{"probability": 1.0, "codes": [500], "verbs": ["create"], "resources": ["configmaps"]}]}
    )
    request = urllib.request.Request(
        f"{faults_cluster.url}/ttj-local/faults",
        data=body.encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request) as response:
        state = json.loads(response.read())
    assert state["rules"][0]["codes"] == [500]
    with pytest.raises(client.ApiException) as info:
        core.create_namespaced_config_map(namespace, {"metadata": {"name": "x"}})
    assert info.value.status == 500
    with urllib.request.urlopen(urllib.request.Request(f"{faults_cluster.url}/ttj-local/faults", method="DELETE")):
        pass
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "x"}})
    # dropping watches ends every open stream long before its timeout
    rv = core.list_namespaced_config_map(namespace).metadata.resource_version
    ended = threading.Event()

    def consume() -> None:
        response = core.list_namespaced_config_map(
            namespace, watch=True, resource_version=rv, timeout_seconds=120, _preload_content=False
        )
        response.read()
        response.release_conn()
        ended.set()

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not ended.is_set() and time.monotonic() < deadline:
        faults_cluster.faults.drop_watches()  # repeated: the stream may not have been open the first time
        ended.wait(0.2)
    assert ended.is_set(), "the watch stream was not dropped"
    assert faults_cluster.faults.to_dict()["watchGeneration"] > 0
