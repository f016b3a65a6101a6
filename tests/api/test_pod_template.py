"""The per-role pod template and resource quantities: the CRD (on the local API server, with its CEL rules)
and the pydantic models refuse the same mistakes."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import ValidationError

from tests.unit.controller.in_process_api import InProcessApi
from tests.unit.planner.builders import T0, job
from ttj.api.models import TransientTrainingJobSpec
from ttj.kubeapi import KubeError

TEMPLATE: dict[str, Any] = {
    "metadata": {"labels": {"team": "vision", "example.com/cost-center": "42"}, "annotations": {"a.io/b": "c"}},
    "spec": {
        "serviceAccountName": "team-vision",
        "priorityClassName": "batch-low",
        "imagePullSecrets": [{"name": "registry"}],
        "nodeSelector": {"cloud.google.com/gke-nodepool": "t4-spot"},
        "tolerations": [{"key": "team", "operator": "Equal", "value": "vision", "effect": "NoSchedule"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}
                            ]
                        }
                    ]
                }
            },
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 10,
                        "podAffinityTerm": {
                            "labelSelector": {"matchLabels": {"team": "vision"}},
                            "topologyKey": "kubernetes.io/hostname",
                        },
                    }
                ]
            },
        },
        "securityContext": {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000},
        "volumes": [
            {"name": "config", "configMap": {"name": "train-config"}},
            {"name": "creds", "secret": {"secretName": "creds", "defaultMode": 0o400}},
            {"name": "scratch", "emptyDir": {"sizeLimit": "10Gi"}},
            {
                "name": "bucket",
                "csi": {"driver": "gcsfuse.csi.storage.gke.io", "volumeAttributes": {"bucketName": "b"}},
            },
        ],
        "containers": [
            {
                "name": "trainer",
                "env": [
                    {"name": "WANDB_PROJECT", "value": "vision"},
                    {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
                ],
                "envFrom": [{"configMapRef": {"name": "train-env"}}],
                "volumeMounts": [
                    {"name": "config", "mountPath": "/etc/train", "readOnly": True},
                    {"name": "scratch", "mountPath": "/scratch"},
                ],
            }
        ],
    },
}


def with_spec(**changes: Any) -> dict[str, Any]:
    manifest = job()
    manifest["spec"] = {**manifest["spec"], **copy.deepcopy(changes)}
    return manifest


@pytest.fixture(scope="module")
def api() -> InProcessApi:
    return InProcessApi(T0)


def create(api: InProcessApi, manifest: dict[str, Any], name: str) -> None:
    manifest = copy.deepcopy(manifest)
    manifest["metadata"] = {"name": name, "namespace": "ns"}
    api.create(manifest)


def test_a_full_template_is_accepted_by_both(api: InProcessApi) -> None:
    manifest = with_spec(
        workers={"replicas": 3, "template": TEMPLATE}, parameterServers={"template": TEMPLATE, "replicas": 1}
    )
    TransientTrainingJobSpec.model_validate(manifest["spec"])
    create(api, manifest, "full")


def bad_template(path: list[Any], value: Any) -> dict[str, Any]:
    template = copy.deepcopy(TEMPLATE)
    node = template
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return with_spec(workers={"replicas": 3, "template": template})


BAD = {
    "quantity banana": with_spec(workers={"resources": {"requests": {"cpu": "banana"}}}),
    "negative quantity": with_spec(workers={"resources": {"requests": {"memory": "-1"}}}),
    "negative integer quantity": with_spec(parameterServers={"resources": {"limits": {"cpu": -2}}}),
    "empty node label key": with_spec(workers={"nodeSelector": {"": ""}}),
    "gpu in resources": with_spec(workers={"resources": {"limits": {"nvidia.com/gpu": 2}}}),
    "unknown resource": with_spec(workers={"resources": {"requests": {"bananas": "1"}}}),
    "env value and valueFrom": bad_template(
        ["spec", "containers", 0, "env"],
        [{"name": "A", "value": "x", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
    ),
    "env name": bad_template(["spec", "containers", 0, "env"], [{"name": "1=2", "value": "x"}]),
    "two volume sources": bad_template(
        ["spec", "volumes"], [{"name": "v", "emptyDir": {}, "secret": {"secretName": "s"}}]
    ),
    "no volume source": bad_template(["spec", "volumes"], [{"name": "v"}]),
    "volume name": bad_template(["spec", "volumes"], [{"name": "Not_A_Label", "emptyDir": {}}]),
    "label key": bad_template(["metadata", "labels"], {"bad key!": "x"}),
    "label value": bad_template(["metadata", "labels"], {"team": "-x-" * 30}),
    "root user": bad_template(["spec", "securityContext"], {"runAsUser": 0}),
    "relative mount": bad_template(["spec", "containers", 0, "volumeMounts"], [{"name": "config", "mountPath": "etc"}]),
    "dot-dot mount": bad_template(
        ["spec", "containers", 0, "volumeMounts"], [{"name": "config", "mountPath": "/etc/../root"}]
    ),
    "toleration value with Exists": bad_template(
        ["spec", "tolerations"], [{"key": "a", "operator": "Exists", "value": "b"}]
    ),
    "another container": bad_template(["spec", "containers", 0, "name"], "sidecar"),
}


@pytest.mark.parametrize("manifest", list(BAD.values()), ids=list(BAD))
def test_mistakes_are_refused_by_both(api: InProcessApi, manifest: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        TransientTrainingJobSpec.model_validate(manifest["spec"])
    with pytest.raises(KubeError) as refused:
        create(api, manifest, "bad")
    assert refused.value.status == 422


def test_a_mount_of_a_missing_volume_is_refused_by_the_operator() -> None:
    manifest = bad_template(["spec", "containers", 0, "volumeMounts"], [{"name": "nope", "mountPath": "/x"}])
    with pytest.raises(ValidationError, match=r"not in spec\.volumes"):
        TransientTrainingJobSpec.model_validate(manifest["spec"])
