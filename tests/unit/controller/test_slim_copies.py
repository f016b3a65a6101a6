"""What the operator keeps of each pod at scale: a pod is indexed as the planner reads it, not copied."""

from __future__ import annotations

import copy
from typing import Any

from ttj.controller.watches import Indexes, change_of
from ttj.planner import observed_pod
from ttj_contract import FINALIZER, LABEL_JOB

POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "mnist-worker-0-0",
        "namespace": "ns",
        "uid": "u-1",
        "labels": {LABEL_JOB: "mnist"},
        "annotations": {"a": "b"},
        "finalizers": [FINALIZER],
        "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}],
    },
    "spec": {
        "nodeName": "node-1",
        "nodeSelector": {"pool": "gpu"},
        "terminationGracePeriodSeconds": 30,
        "containers": [{"name": "trainer", "env": [{"name": "TF_CONFIG", "value": "{}"}]}],
        "volumes": [{"name": "scratch", "emptyDir": {}}],
        "tolerations": [{"operator": "Exists"}],
    },
    "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
}
SLIM: dict[str, Any] = {
    "metadata": {
        "name": "mnist-worker-0-0",
        "namespace": "ns",
        "uid": "u-1",
        "labels": {LABEL_JOB: "mnist"},
        "annotations": {"a": "b"},
        "finalizers": [FINALIZER],
    },
    "spec": {"nodeName": "node-1", "nodeSelector": {"pool": "gpu"}, "terminationGracePeriodSeconds": 30},
    "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
}


def test_a_pod_is_kept_as_the_planner_reads_it_and_not_shared_with_the_event() -> None:
    slim = observed_pod(POD)
    assert slim == SLIM
    slim["status"]["conditions"][0]["status"] = "False"
    assert POD["status"]["conditions"][0]["status"] == "True"
    assert observed_pod({"metadata": {"name": "p"}}) == {"metadata": {"name": "p"}}


def test_the_pod_index_keeps_the_slim_pod_of_the_decoded_event_without_copying_it() -> None:
    decoded = copy.deepcopy(POD)
    indexes = Indexes()
    indexes.apply([change_of("Pod", "ADDED", decoded)])  # type: ignore[list-item]
    index = indexes["Pod"]
    assert index[("ns", "mnist")] == [("Pod", "mnist-worker-0-0", SLIM)]
    assert index[("ns", "mnist")][0][2]["status"] is decoded["status"]


def test_json_copy_is_a_deep_copy_of_what_json_decodes_to() -> None:
    from datetime import UTC, datetime

    from ttj.planner.observed import json_copy

    value = {"a": [{"b": 1, "c": None, "d": 1.5, "e": True, "f": "x"}], "g": {"h": []}}
    copied = json_copy(value)
    assert copied == value
    copied["a"][0]["b"] = 2
    copied["g"]["h"].append(1)
    assert value == {"a": [{"b": 1, "c": None, "d": 1.5, "e": True, "f": "x"}], "g": {"h": []}}
    other = {"at": datetime(2026, 1, 1, tzinfo=UTC), "set": {1}}  # not JSON: copied as copy.deepcopy copies it
    again = json_copy(other)
    assert again == other
    assert again["set"] is not other["set"]
