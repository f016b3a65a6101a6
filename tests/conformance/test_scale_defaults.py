"""`kubectl scale` and schema defaults: kube-apiserver defaults a request's body as it decodes it, but the scale
subresource sets the replicas path in the stored object and validates that as it is, so an object the write
creates (``spec.workers`` of a job written without it) reaches the CEL rules with none of its defaults. The
local API server must refuse and accept exactly the same writes."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from .conftest import apply_crd, minimal_job, wait_for

REPO = Path(__file__).resolve().parents[2]
TTJ = ("transient.training", "v1alpha1", "transienttrainingjobs")
#: A group of its own per run: a CRD of an earlier run may still be terminating (409 on create, then 404s).
PROBE_GROUP = f"scaleprobe-{uuid.uuid4().hex[:8]}.conformance.ttj.test"
PROBE = (PROBE_GROUP, "v1", "scaleprobes")

PROBE_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"scaleprobes.{PROBE_GROUP}"},
    "spec": {
        "group": PROBE_GROUP,
        "scope": "Namespaced",
        "names": {"plural": "scaleprobes", "kind": "ScaleProbe"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {
                    "status": {},
                    "scale": {"specReplicasPath": ".spec.box.replicas", "statusReplicasPath": ".status.replicas"},
                },
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {
                                    "box": {
                                        "type": "object",
                                        "properties": {
                                            "replicas": {"type": "integer"},
                                            "floor": {"type": "integer", "default": 1},
                                        },
                                        # unsafe on purpose: it reads floor without has()
                                        "x-kubernetes-validations": [
                                            {"rule": "self.floor <= self.replicas", "message": "floor over replicas"}
                                        ],
                                    }
                                },
                            },
                            "status": {"type": "object", "properties": {"replicas": {"type": "integer"}}},
                        },
                    }
                },
            }
        ],
    },
}


@pytest.fixture(scope="module")
def probe_crd(k8s_api: client.ApiClient) -> Iterator[None]:
    apply_crd(k8s_api, PROBE_CRD)
    yield
    client.ApiextensionsV1Api(k8s_api).delete_custom_resource_definition(PROBE_CRD["metadata"]["name"])


@pytest.fixture
def custom(k8s_api: client.ApiClient, ttj_crd: dict[str, Any]) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(k8s_api)


def _scale(custom: client.CustomObjectsApi, kind: tuple[str, str, str], ns: str, name: str, replicas: int) -> None:
    group, version, plural = kind
    custom.patch_namespaced_custom_object_scale(group, version, ns, plural, name, {"spec": {"replicas": replicas}})


def _refusal(custom: client.CustomObjectsApi, kind: tuple[str, str, str], ns: str, name: str, replicas: int) -> str:
    with pytest.raises(client.ApiException) as info:
        _scale(custom, kind, ns, name, replicas)
    assert info.value.status == 422
    status = json.loads(info.value.body)
    assert status["reason"] == "Invalid"
    return str(status["message"])


def test_a_scale_write_is_validated_before_defaults(k8s_api: client.ApiClient, probe_crd: None, namespace: str) -> None:
    custom = client.CustomObjectsApi(k8s_api)

    def create() -> None:
        body = {"apiVersion": f"{PROBE_GROUP}/v1", "kind": "ScaleProbe", "metadata": {"name": "p"}, "spec": {}}
        custom.create_namespaced_custom_object(PROBE_GROUP, "v1", namespace, "scaleprobes", body)

    wait_for(lambda: _created(create), timeout=60, what="the probe resource to be served")
    # the same object written whole is defaulted first, and the rule holds
    written = custom.patch_namespaced_custom_object(
        PROBE_GROUP, "v1", namespace, "scaleprobes", "p", {"spec": {"box": {"replicas": 2}}}
    )
    assert written["spec"]["box"] == {"replicas": 2, "floor": 1}
    custom.patch_namespaced_custom_object(PROBE_GROUP, "v1", namespace, "scaleprobes", "p", {"spec": {"box": None}})
    # through /scale, box is made without floor: the rule cannot read it
    assert "spec.box" in _refusal(custom, PROBE, namespace, "p", 2)


def _created(create: Any) -> bool:
    try:
        create()
    except client.ApiException as exc:
        if exc.status == 404:  # discovery of a new resource lags behind Established
            return False
        raise
    return True


def test_a_job_without_workers_scales_to_its_slots_and_no_further(
    custom: client.CustomObjectsApi, namespace: str
) -> None:
    custom.create_namespaced_custom_object(*TTJ[:2], namespace, TTJ[2], minimal_job("noworkers"))
    _scale(custom, TTJ, namespace, "noworkers", 4)  # its 4 slots: the rules fall back on the defaults
    job = custom.get_namespaced_custom_object(*TTJ[:2], namespace, TTJ[2], "noworkers")
    assert (job["spec"]["workers"]["replicas"], job["spec"]["workers"]["minReplicas"]) == (4, 1)
    message = _refusal(custom, TTJ, namespace, "noworkers", 6)
    assert "the number of worker slots" in message
    assert "no such key" not in message
    assert "minReplicas must not exceed" not in message


def test_the_readmes_job_scales_within_max_replicas(custom: client.CustomObjectsApi, namespace: str) -> None:
    body = yaml.safe_load((REPO / "examples" / "minimal.yaml").read_text())
    custom.create_namespaced_custom_object(*TTJ[:2], namespace, TTJ[2], body)
    name = body["metadata"]["name"]
    _scale(custom, TTJ, namespace, name, 6)  # the README's `kubectl scale ttj/resnet32-cifar10 --replicas=6`
    assert custom.get_namespaced_custom_object(*TTJ[:2], namespace, TTJ[2], name)["spec"]["workers"]["replicas"] == 6
    assert "workers.replicas must not exceed workers.maxReplicas" in _refusal(custom, TTJ, namespace, name, 9)
