"""Custom resources: our CRD served, validated, defaulted, pruned; CEL rules; status and scale subresources."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client

from .conftest import minimal_job

GROUP, VERSION, PLURAL = "transient.training", "v1alpha1", "transienttrainingjobs"


@pytest.fixture
def custom(k8s_api: client.ApiClient, ttj_crd: dict[str, Any]) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(k8s_api)


def _create(custom: client.CustomObjectsApi, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    return result


def test_crd_resource_is_discoverable(k8s_api: client.ApiClient, ttj_crd: dict[str, Any]) -> None:
    resources = client.CustomObjectsApi(k8s_api).get_api_resources(GROUP, VERSION)
    names = {r.name: r for r in resources.resources}
    assert {"transienttrainingjobs", "transienttrainingjobs/status", "transienttrainingjobs/scale"} <= set(names)
    assert "ttj" in names["transienttrainingjobs"].short_names


def test_defaulting_and_pruning(custom: client.CustomObjectsApi, namespace: str) -> None:
    body = minimal_job("defaults")
    body["spec"]["notAField"] = "dropped"
    created = _create(custom, namespace, body)
    spec = created["spec"]
    assert "notAField" not in spec
    # model and dataset have no schema default (a program excludes them); the operator reads resnet32/cifar10
    assert "model" not in spec
    assert "dataset" not in spec
    assert spec["backoffLimit"] == 3
    assert spec["learningRateScaling"] == "activeWorkers"
    assert spec["checkpoint"]["uri"] == "/tmp/x"
    assert created["metadata"]["generation"] == 1


def test_schema_validation(custom: client.CustomObjectsApi, namespace: str) -> None:
    body = minimal_job("bad", batchSize=0)
    with pytest.raises(client.ApiException) as info:
        _create(custom, namespace, body)
    status = json.loads(info.value.body)
    assert info.value.status == 422
    assert status["reason"] == "Invalid"
    assert "spec.batchSize" in status["message"]
    del body["spec"]["trainSteps"]
    body["spec"]["batchSize"] = 10
    with pytest.raises(client.ApiException) as info:
        _create(custom, namespace, body)
    assert "spec.trainSteps" in json.loads(info.value.body)["message"]


def test_cel_rule_refused_at_create(custom: client.CustomObjectsApi, namespace: str) -> None:
    body = minimal_job("cel", workers={"replicas": 2, "minReplicas": 3, "maxReplicas": 4})
    with pytest.raises(client.ApiException) as info:
        _create(custom, namespace, body)
    status = json.loads(info.value.body)
    assert info.value.status == 422
    assert status["kind"] == "Status"
    assert status["reason"] == "Invalid"
    assert "workers.minReplicas must not exceed workers.replicas" in status["message"]


def test_status_subresource_and_generation(custom: client.CustomObjectsApi, namespace: str) -> None:
    _create(custom, namespace, minimal_job("gen", workers={"replicas": 2, "minReplicas": 1, "maxReplicas": 4}))
    custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, PLURAL, "gen", {"status": {"phase": "Running"}}
    )
    job = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "gen")
    assert job["status"]["phase"] == "Running"
    assert job["metadata"]["generation"] == 1
    # the main resource ignores status; metadata-only changes keep the generation
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "gen", {"status": {"phase": "Failed"}, "metadata": {"labels": {"a": "b"}}}
    )
    job = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "gen")
    assert job["status"]["phase"] == "Running"
    assert job["metadata"]["generation"] == 1
    custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "gen", {"spec": {"trainSteps": 200}})
    job = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "gen")
    assert job["metadata"]["generation"] == 2


def test_evaluation_in_status_is_bounded(custom: client.CustomObjectsApi, namespace: str) -> None:
    """What the operator copies from the chief must fit: at most 32 metrics, names up to 63 characters."""
    _create(custom, namespace, minimal_job("evaluated"))

    def write(progress: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, PLURAL, "evaluated", {"status": {"progress": {"globalStep": 10, **progress}}}
        )
        return result

    fits = {f"metric_{i:02d}": i / 10 for i in range(32)} | {"m" * 63: 1.0}
    del fits["metric_31"]
    written = write({"evaluationStep": 10, "evaluation": fits, "exportPath": "/ckpt/export"})
    assert written["status"]["progress"]["evaluation"] == fits
    assert written["status"]["progress"]["exportPath"] == "/ckpt/export"
    replaced: dict[str, Any] = dict.fromkeys(fits)  # a merge patch: null removes what was written
    for refused, says in (
        (
            {"evaluation": replaced | {f"metric_{i:02d}": 0.5 for i in range(33)}},
            "status.progress.evaluation: Too many: 33: must have at most 32 items",
        ),
        ({"evaluation": replaced | {"m" * 64: 0.5}}, "metric names must be at most 63 characters"),
        ({"exportPath": "/" + "x" * 4096}, "status.progress.exportPath: Too long: may not be longer than 4096"),
    ):
        with pytest.raises(client.ApiException) as info:
            write(refused)
        assert info.value.status == 422
        assert says in json.loads(info.value.body)["message"]


def test_scale_subresource_and_cel_on_scale(custom: client.CustomObjectsApi, namespace: str) -> None:
    _create(custom, namespace, minimal_job("sc", workers={"replicas": 3, "minReplicas": 2, "maxReplicas": 6}))
    scale = custom.get_namespaced_custom_object_scale(GROUP, VERSION, namespace, PLURAL, "sc")
    assert scale["kind"] == "Scale"
    assert scale["spec"]["replicas"] == 3
    custom.patch_namespaced_custom_object_scale(GROUP, VERSION, namespace, PLURAL, "sc", {"spec": {"replicas": 5}})
    job = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "sc")
    assert job["spec"]["workers"]["replicas"] == 5
    with pytest.raises(client.ApiException) as info:
        custom.patch_namespaced_custom_object_scale(GROUP, VERSION, namespace, PLURAL, "sc", {"spec": {"replicas": 1}})
    assert info.value.status == 422
    assert "workers.minReplicas must not exceed workers.replicas" in json.loads(info.value.body)["message"]
    with pytest.raises(client.ApiException) as info:
        custom.patch_namespaced_custom_object_scale(GROUP, VERSION, namespace, PLURAL, "sc", {"spec": {"replicas": 7}})
    assert "workers.replicas must not exceed workers.maxReplicas" in json.loads(info.value.body)["message"]


def test_worker_groups_are_stored_in_order_and_scale_counts_all_of_them(
    custom: client.CustomObjectsApi, namespace: str
) -> None:
    groups = [
        {"name": "l4", "acceleratorType": "nvidia-l4", "batchSize": 256},
        {"name": "t4", "zone": "zone-b"},
        {"name": "t4-od", "provisioning": "on-demand", "maxReplicas": 1},
        {"name": "flex", "computeClass": "gpu-fallback"},
    ]
    created = _create(
        custom, namespace, minimal_job("grp", workers={"replicas": 2, "maxReplicas": 4, "groups": groups})
    )
    assert created["spec"]["workers"]["groups"] == groups  # no defaults written into a group: it inherits
    custom.patch_namespaced_custom_object_scale(GROUP, VERSION, namespace, PLURAL, "grp", {"spec": {"replicas": 4}})
    job = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "grp")
    assert job["spec"]["workers"]["replicas"] == 4


@pytest.mark.parametrize(
    ("groups", "words"),
    [
        ([{"name": "a"}, {"name": "a"}], "each group needs a name of its own"),
        ([{"name": "a", "zone": "z", "nodeSelector": {"topology.kubernetes.io/zone": "y"}}], "a group with zone"),
        ([{"name": f"g{i}"} for i in range(9)], "must have at most 8 items"),
        ([{"name": "a", "computeClass": "c", "acceleratorType": "nvidia-l4"}], "a group with computeClass"),
        ([{"name": "a", "computeClass": "c", "provisioning": "spot"}], "a group with computeClass"),
    ],
)
def test_bad_worker_groups_are_refused(
    custom: client.CustomObjectsApi, namespace: str, groups: list[dict[str, Any]], words: str
) -> None:
    with pytest.raises(client.ApiException) as info:
        _create(custom, namespace, minimal_job("badgrp", workers={"groups": groups}))
    assert info.value.status == 422
    assert words in json.loads(info.value.body)["message"]


def test_strategic_merge_is_refused_for_custom_resources(
    k8s_api: client.ApiClient, custom: client.CustomObjectsApi, namespace: str
) -> None:
    from .conftest import raw_request

    _create(custom, namespace, minimal_job("smp"))
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/smp"
    headers = {"Accept": "application/json", "Content-Type": "application/strategic-merge-patch+json"}
    with pytest.raises(client.ApiException) as info:
        raw_request(k8s_api, "PATCH", path, {"spec": {"trainSteps": 5}}, headers)
    assert info.value.status == 415


@pytest.mark.parametrize(
    ("patch", "words"),
    [
        ({"model": "small-cnn"}, "model cannot change"),
        ({"dataset": "synthetic"}, "dataset cannot change"),
        ({"checkpoint": {"uri": "/elsewhere"}}, "checkpoint.uri cannot change"),
        ({"parameterServers": {"replicas": 2}}, "parameterServers.replicas cannot change"),
        ({"workers": {"maxReplicas": 8}}, "number of worker slots"),
    ],
)
def test_what_running_pods_depend_on_cannot_change(
    custom: client.CustomObjectsApi, namespace: str, patch: dict[str, Any], words: str
) -> None:
    _create(custom, namespace, minimal_job("im", workers={"replicas": 2, "minReplicas": 1, "maxReplicas": 4}))
    with pytest.raises(client.ApiException) as info:
        custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "im", {"spec": patch})
    assert info.value.status == 422
    assert words in json.loads(info.value.body)["message"]
    # what may change still does: replicas within the slots, the image, the steps
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "im", {"spec": {"workers": {"replicas": 4}, "trainSteps": 99}}
    )


def test_without_max_replicas_the_slots_are_the_replicas(custom: client.CustomObjectsApi, namespace: str) -> None:
    _create(custom, namespace, minimal_job("nomax", workers={"replicas": 2, "minReplicas": 1}))
    with pytest.raises(client.ApiException) as info:
        custom.patch_namespaced_custom_object_scale(
            GROUP, VERSION, namespace, PLURAL, "nomax", {"spec": {"replicas": 3}}
        )
    assert "set maxReplicas to scale" in json.loads(info.value.body)["message"]


@pytest.mark.parametrize(
    "spec",
    [
        {"activeDeadlineSeconds": 251_607_038_400},
        {"ttlSecondsAfterFinished": 2**40},
        {"checkpoint": {"uri": "/c", "intervalSeconds": 2**64}},
        {"workers": {"resources": {"requests": {"cpu": "banana"}}}},
        {"workers": {"resources": {"limits": {"memory": "-1"}}}},
        {"workers": {"acceleratorType": "not a label value"}},
        {"checkpoint": {"uri": "/c", "volumeClaimName": "Not:A:Name"}},
    ],
)
def test_out_of_range_and_malformed_values_are_refused(
    custom: client.CustomObjectsApi, namespace: str, spec: dict[str, Any]
) -> None:
    with pytest.raises(client.ApiException) as info:
        _create(custom, namespace, minimal_job("oor", **spec))
    assert info.value.status == 422


_GROUPS = {"groups": [{"name": "spot"}, {"name": "on-demand", "provisioning": "on-demand"}]}


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ({"deadline": {}}, "deadline needs completeBy or completeWithinSeconds"),
        (
            {"deadline": {"completeWithinSeconds": 60, "catchUpGroup": "on-demand"}},
            "deadline.catchUpGroup must name a workers.groups entry other than the first",
        ),
        (
            {"deadline": {"completeWithinSeconds": 60, "catchUpGroup": "spot"}, "workers": _GROUPS},
            "deadline.catchUpGroup must name a workers.groups entry other than the first",
        ),
    ],
)
def test_bad_deadlines_are_refused(
    custom: client.CustomObjectsApi, namespace: str, spec: dict[str, Any], words: str
) -> None:
    with pytest.raises(client.ApiException) as info:
        _create(custom, namespace, minimal_job("baddl", **spec))
    assert info.value.status == 422
    assert words in json.loads(info.value.body)["message"]


def test_a_deadline_and_where_the_job_stands_are_stored(custom: client.CustomObjectsApi, namespace: str) -> None:
    deadline = {"completeBy": "2026-12-04T09:00:00Z", "catchUpGroup": "on-demand", "maxCatchUpWorkers": 2}
    created = _create(custom, namespace, minimal_job("dl", deadline=deadline, workers=_GROUPS))
    assert created["spec"]["deadline"] == deadline
    standing = {
        "at": "2026-12-04T09:00:00Z",
        "state": "AtRisk",
        "catchUpWorkers": 1,
        "slackSeconds": -30,
        "escalatedAt": "2026-12-01T09:00:00Z",
        "message": "behind",
    }
    eta = {"p50": "2026-12-04T08:00:00Z", "p90": "2026-12-04T09:00:30Z"}
    written = custom.patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        "dl",
        {"status": {"deadline": standing, "progress": {"globalStep": 10, "eta": eta}}},
    )
    assert written["status"]["deadline"] == standing
    assert written["status"]["progress"]["eta"] == eta
