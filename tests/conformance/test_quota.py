"""ResourceQuota: the admission plugin refuses what would exceed a namespace's quota, with the message ttj
shows in its `ReplicaFailure` condition, and the quota's status follows what the namespace holds. Runs on the
local cluster and on a real one (KUBECONFIG): the pods are never scheduled."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client

from .conftest import pod_spec, wait_for


def make_quota(core: client.CoreV1Api, namespace: str, hard: dict[str, str]) -> None:
    core.create_namespaced_resource_quota(namespace, {"metadata": {"name": "team"}, "spec": {"hard": hard}})
    # kube's admission refuses everything under a quota its controller has not yet counted
    wait_for(lambda: used(core, namespace) is not None, what="the quota's status")


def used(core: client.CoreV1Api, namespace: str) -> dict[str, str] | None:
    status = core.read_namespaced_resource_quota("team", namespace).status
    return dict(status.used) if status is not None and status.used is not None else None


def pod(name: str, **resources: Any) -> dict[str, Any]:
    container = {"name": "c", "image": "i", **({"resources": resources} if resources else {})}
    return {"metadata": {"name": name}, "spec": {**pod_spec(), "containers": [container]}}


def refusal(call: Any) -> str:
    with pytest.raises(client.ApiException) as refused:
        call()
    assert refused.value.status == 403
    return str(json.loads(refused.value.body)["message"])


def test_a_pod_past_the_pod_count_is_refused_and_admitted_once_room_is_made(
    core: client.CoreV1Api, namespace: str
) -> None:
    make_quota(core, namespace, {"pods": "1"})
    core.create_namespaced_pod(namespace, pod("first"))
    wait_for(lambda: used(core, namespace) == {"pods": "1"}, what="the quota counting the first pod")
    message = refusal(lambda: core.create_namespaced_pod(namespace, pod("second")))
    assert (
        message == 'pods "second" is forbidden: exceeded quota: team, requested: pods=1, used: pods=1, limited: pods=1'
    )
    core.delete_namespaced_pod("first", namespace, grace_period_seconds=0)
    wait_for(lambda: used(core, namespace) == {"pods": "0"}, what="the quota to let the pod go")
    core.create_namespaced_pod(namespace, pod("second"))


def test_compute_quotas_want_every_container_to_state_its_request(core: client.CoreV1Api, namespace: str) -> None:
    make_quota(core, namespace, {"requests.cpu": "1", "requests.memory": "1Gi"})
    message = refusal(lambda: core.create_namespaced_pod(namespace, pod("bare")))
    assert (
        message
        == 'pods "bare" is forbidden: failed quota: team: must specify requests.cpu for: c; requests.memory for: c'
    )
    core.create_namespaced_pod(namespace, pod("half", requests={"cpu": "500m", "memory": "512Mi"}))
    wait_for(
        lambda: used(core, namespace) == {"requests.cpu": "500m", "requests.memory": "512Mi"},
        what="the quota counting the requests",
    )
    message = refusal(
        lambda: core.create_namespaced_pod(namespace, pod("too-much", requests={"cpu": "600m", "memory": "1Mi"}))
    )
    assert message == (
        'pods "too-much" is forbidden: exceeded quota: team, requested: requests.cpu=600m, '
        "used: requests.cpu=500m, limited: requests.cpu=1"
    )


def test_object_counts_are_enforced_too(core: client.CoreV1Api, namespace: str) -> None:
    # kube-root-ca.crt is one of them. It is published into the new namespace by a controller: made after the
    # quota but before the quota's first count, it is refused, and its publisher retries only after a back-off.
    root_ca = "metadata.name=kube-root-ca.crt"
    wait_for(lambda: core.list_namespaced_config_map(namespace, field_selector=root_ca).items, what="the root CA")
    make_quota(core, namespace, {"count/configmaps": "2"})
    wait_for(lambda: used(core, namespace) == {"count/configmaps": "1"}, what="the root CA counted")
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "one"}})
    message = refusal(lambda: core.create_namespaced_config_map(namespace, {"metadata": {"name": "two"}}))
    assert message.startswith('configmaps "two" is forbidden: exceeded quota: team, requested: count/configmaps=1')


def test_a_quota_is_validated(core: client.CoreV1Api, namespace: str) -> None:
    with pytest.raises(client.ApiException) as refused:
        core.create_namespaced_resource_quota(
            namespace, {"metadata": {"name": "bad"}, "spec": {"hard": {"pods": "-1"}}}
        )
    assert refused.value.status == 422
    assert "spec.hard[pods]" in refused.value.body
