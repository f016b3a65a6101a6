"""Pod priority: PriorityClasses and the Priority admission plugin (on by default in kube-apiserver). A job
whose template names a PriorityClass that does not exist gets its pods refused with this 403, which ttj then
shows as `ReplicaFailure`. Runs on the local cluster and on a real one (KUBECONFIG): pods go in as dry runs,
so no scheduler or kubelet acts on them."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from .conftest import pod_spec


@pytest.fixture
def scheduling(k8s_api: client.ApiClient) -> client.SchedulingV1Api:
    return client.SchedulingV1Api(k8s_api)


@pytest.fixture
def priority_class(scheduling: client.SchedulingV1Api) -> Iterator[str]:
    """A PriorityClass of value 1000 with preemptionPolicy Never, deleted afterwards (they are cluster-wide)."""
    name = f"conf-{uuid.uuid4().hex[:10]}"
    scheduling.create_priority_class({"metadata": {"name": name}, "value": 1000, "preemptionPolicy": "Never"})
    yield name
    scheduling.delete_priority_class(name)


def dry_run_pod(core: client.CoreV1Api, namespace: str, **spec: Any) -> dict[str, Any]:
    """The pod as the API server would store it (admission and defaulting done), created as a dry run."""
    body = {"metadata": {"name": "p"}, "spec": pod_spec(**spec)}
    response = core.create_namespaced_pod(namespace, body, dry_run="All", _preload_content=False)
    return json.loads(response.data)  # type: ignore[no-any-return]


def test_the_system_classes_exist(scheduling: client.SchedulingV1Api) -> None:
    values = {pc.metadata.name: pc.value for pc in scheduling.list_priority_class().items}
    assert values["system-cluster-critical"] == 2_000_000_000
    assert values["system-node-critical"] == 2_000_001_000


def test_a_pod_naming_a_missing_class_is_refused(core: client.CoreV1Api, namespace: str) -> None:
    with pytest.raises(client.ApiException) as refused:
        dry_run_pod(core, namespace, priorityClassName="ttj-no-such-class")
    assert refused.value.status == 403
    message = json.loads(refused.value.body)["message"]
    assert message == 'pods "p" is forbidden: no PriorityClass with name ttj-no-such-class was found'


def test_the_class_sets_the_pods_priority(core: client.CoreV1Api, namespace: str, priority_class: str) -> None:
    spec = dry_run_pod(core, namespace, priorityClassName=priority_class)["spec"]
    assert (spec["priority"], spec["preemptionPolicy"]) == (1000, "Never")
    # without a class (and no global default here): priority 0
    plain = dry_run_pod(core, namespace)["spec"]
    assert (plain["priority"], plain["preemptionPolicy"]) == (0, "PreemptLowerPriority")


def test_a_pod_may_not_set_its_own_priority(core: client.CoreV1Api, namespace: str, priority_class: str) -> None:
    with pytest.raises(client.ApiException) as refused:
        dry_run_pod(core, namespace, priorityClassName=priority_class, priority=5)
    assert refused.value.status == 403
    assert (
        "the integer value of priority (5) must not be provided in pod spec"
        in json.loads(refused.value.body)["message"]
    )


@pytest.mark.parametrize(
    ("body", "field", "detail"),
    [
        ({"value": 1_000_000_001}, "value", "maximum allowed value of a user defined priority is 1000000000"),
        ({"value": 5, "name": "system-ttj"}, "metadata.name", "reserved for system use only"),
    ],
    ids=["above the user range", "system prefix"],
)
def test_priority_classes_are_validated(
    scheduling: client.SchedulingV1Api, body: dict[str, Any], field: str, detail: str
) -> None:
    name = body.pop("name", f"conf-{uuid.uuid4().hex[:10]}")
    with pytest.raises(client.ApiException) as refused:
        scheduling.create_priority_class({"metadata": {"name": name}, **body})
    assert refused.value.status == 422
    causes = json.loads(refused.value.body)["details"]["causes"]
    assert any(c["field"] == field and detail in c["message"] for c in causes), causes


def test_the_value_cannot_change(scheduling: client.SchedulingV1Api, priority_class: str) -> None:
    with pytest.raises(client.ApiException) as refused:
        scheduling.patch_priority_class(priority_class, {"value": 2000})
    assert refused.value.status == 422
    assert "value" in refused.value.body
