"""Finalizers, graceful pod deletion, garbage collection with each propagation policy, namespace deletion."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client

from .conftest import pod_spec, wait_for


def _gone(read: Any, *args: Any) -> bool:
    try:
        read(*args)
    except client.ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def _owner_ref(obj: Any, kind: str = "ConfigMap", block: bool = False) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": kind,
        "name": obj.metadata.name,
        "uid": obj.metadata.uid,
        "blockOwnerDeletion": block,
    }


def test_finalizers_hold_deletion(core: client.CoreV1Api, namespace: str) -> None:
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "fin", "finalizers": ["example.com/hold"]}})
    core.delete_namespaced_config_map("fin", namespace)
    held = core.read_namespaced_config_map("fin", namespace)
    assert held.metadata.deletion_timestamp is not None
    core.patch_namespaced_config_map("fin", namespace, {"metadata": {"finalizers": None}})
    wait_for(lambda: _gone(core.read_namespaced_config_map, "fin", namespace), what="the configmap to go")


def test_pod_on_a_node_is_deleted_gracefully(core: client.CoreV1Api, namespace: str) -> None:
    spec = pod_spec(nodeName=f"fake-node-{namespace}")  # a node no kubelet runs
    core.create_namespaced_pod(namespace, {"metadata": {"name": "g"}, "spec": spec})
    core.delete_namespaced_pod("g", namespace, grace_period_seconds=30)
    pod = core.read_namespaced_pod("g", namespace)
    assert pod.metadata.deletion_timestamp is not None
    assert pod.metadata.deletion_grace_period_seconds == 30
    # what the kubelet does once the containers are gone
    core.delete_namespaced_pod("g", namespace, grace_period_seconds=0)
    wait_for(lambda: _gone(core.read_namespaced_pod, "g", namespace), what="the pod to go")


def test_unscheduled_pod_is_deleted_at_once(core: client.CoreV1Api, namespace: str) -> None:
    core.create_namespaced_pod(namespace, {"metadata": {"name": "u"}, "spec": pod_spec()})
    core.delete_namespaced_pod("u", namespace)
    wait_for(lambda: _gone(core.read_namespaced_pod, "u", namespace), what="the pod to go")


def test_background_garbage_collection(core: client.CoreV1Api, namespace: str) -> None:
    owner = core.create_namespaced_config_map(namespace, {"metadata": {"name": "owner"}})
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "child", "ownerReferences": [_owner_ref(owner)]}}
    )
    core.delete_namespaced_config_map("owner", namespace, propagation_policy="Background")
    wait_for(lambda: _gone(core.read_namespaced_config_map, "child", namespace), what="the dependent to be collected")


def test_foreground_garbage_collection(core: client.CoreV1Api, namespace: str) -> None:
    owner = core.create_namespaced_config_map(namespace, {"metadata": {"name": "fg-owner"}})
    core.create_namespaced_config_map(
        namespace,
        {
            "metadata": {
                "name": "fg-child",
                "finalizers": ["example.com/hold"],
                "ownerReferences": [_owner_ref(owner, block=True)],
            }
        },
    )
    core.delete_namespaced_config_map("fg-owner", namespace, propagation_policy="Foreground")

    def owner_waits() -> bool:
        current = core.read_namespaced_config_map("fg-owner", namespace)
        child = core.read_namespaced_config_map("fg-child", namespace)
        return (
            "foregroundDeletion" in (current.metadata.finalizers or [])
            and child.metadata.deletion_timestamp is not None
        )

    wait_for(owner_waits, what="the owner to wait for its dependent")
    core.patch_namespaced_config_map("fg-child", namespace, {"metadata": {"finalizers": None}})
    wait_for(lambda: _gone(core.read_namespaced_config_map, "fg-owner", namespace), what="the owner to go")


def test_orphan_propagation(core: client.CoreV1Api, namespace: str) -> None:
    owner = core.create_namespaced_config_map(namespace, {"metadata": {"name": "or-owner"}})
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "or-child", "ownerReferences": [_owner_ref(owner)]}}
    )
    core.delete_namespaced_config_map("or-owner", namespace, propagation_policy="Orphan")
    wait_for(lambda: _gone(core.read_namespaced_config_map, "or-owner", namespace), what="the owner to go")
    child = core.read_namespaced_config_map("or-child", namespace)
    assert not child.metadata.owner_references


def test_delete_precondition(core: client.CoreV1Api, namespace: str) -> None:
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "pre"}})
    with pytest.raises(client.ApiException) as info:
        core.delete_namespaced_config_map(
            "pre", namespace, body=client.V1DeleteOptions(preconditions={"uid": "not-it"})
        )
    assert info.value.status == 409


def test_a_patch_naming_another_uid_is_refused_and_the_right_one_applies(
    core: client.CoreV1Api, namespace: str
) -> None:
    """A writer that names the object it observed never changes a successor that took the same name: a patch
    carries no precondition, so its uid fails validation (422, the uid is immutable); an update's uid and a
    delete's uid precondition fail as preconditions (409)."""
    first = core.create_namespaced_config_map(namespace, {"metadata": {"name": "reborn"}})
    core.delete_namespaced_config_map("reborn", namespace)
    wait_for(lambda: _gone(core.read_namespaced_config_map, "reborn", namespace), what="the configmap to go")
    second = core.create_namespaced_config_map(namespace, {"metadata": {"name": "reborn"}})
    stale = {"metadata": {"uid": first.metadata.uid, "annotations": {"example.com/touched": "yes"}}}
    with pytest.raises(client.ApiException) as info:
        core.patch_namespaced_config_map("reborn", namespace, stale)
    assert info.value.status == 422
    status = json.loads(info.value.body)
    assert status["reason"] == "Invalid"
    assert status["message"] == (
        f'ConfigMap "reborn" is invalid: metadata.uid: Invalid value: "{first.metadata.uid}": field is immutable'
    )
    assert {c["field"] for c in status["details"]["causes"]} == {"metadata.uid"}
    with pytest.raises(client.ApiException) as info:
        core.replace_namespaced_config_map("reborn", namespace, {"metadata": {"name": "reborn", **stale["metadata"]}})
    assert info.value.status == 409
    assert "UID in precondition" in info.value.body
    with pytest.raises(client.ApiException) as info:
        core.delete_namespaced_config_map(
            "reborn", namespace, body=client.V1DeleteOptions(preconditions={"uid": first.metadata.uid})
        )
    assert info.value.status == 409
    right = {"metadata": {"uid": second.metadata.uid, "annotations": {"example.com/touched": "yes"}}}
    patched = core.patch_namespaced_config_map("reborn", namespace, right)
    assert patched.metadata.annotations == {"example.com/touched": "yes"}
    core.delete_namespaced_config_map(
        "reborn", namespace, body=client.V1DeleteOptions(preconditions={"uid": second.metadata.uid})
    )


def test_namespace_deletion_removes_content(core: client.CoreV1Api) -> None:
    name = "conf-nsdel-" + __import__("uuid").uuid4().hex[:8]
    core.create_namespace({"metadata": {"name": name}})
    core.create_namespaced_config_map(name, {"metadata": {"name": "c"}})
    core.delete_namespace(name)
    wait_for(lambda: _gone(core.read_namespace, name), timeout=60, what="the namespace to go")
