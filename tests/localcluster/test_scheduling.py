"""Scheduler predicates and pool configuration (pure functions, no cluster)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from ttj_localcluster.nodes.pools import (
    NodePool,
    default_pools,
    load_pools_file,
    node_object,
    parse_pool_option,
)
from ttj_localcluster.nodes.predicates import (
    filter_node,
    pod_requests,
    unschedulable_message,
)


def pod(**spec: Any) -> dict[str, Any]:
    containers = spec.pop("containers", [{"name": "c", "resources": spec.pop("resources", {})}])
    return {"metadata": {"name": "p", "namespace": "default"}, "spec": {"containers": containers, **spec}}


def gpu_node() -> dict[str, Any]:
    return node_object(default_pools()[1], "gke-ttj-local-t4-spot-00000000-abcd", "10.0.0.1")


def cpu_node() -> dict[str, Any]:
    return node_object(default_pools()[0], "gke-ttj-local-default-pool-00000000-abcd", "10.0.0.2")


GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def test_requests_default_to_limits_and_init_containers_count_as_max() -> None:
    p = pod(
        containers=[
            {"name": "a", "resources": {"limits": {"nvidia.com/gpu": 1}, "requests": {"cpu": "1"}}},
            {"name": "b", "resources": {"requests": {"cpu": "500m"}}},
        ],
        initContainers=[{"name": "i", "resources": {"requests": {"cpu": "2"}}}],
    )
    assert pod_requests(p) == {"cpu": Decimal(2), "nvidia.com/gpu": Decimal(1)}


def test_gke_labels_and_taint() -> None:
    node = gpu_node()
    labels = node["metadata"]["labels"]
    assert labels["cloud.google.com/gke-spot"] == "true"
    assert labels["cloud.google.com/gke-accelerator"] == "nvidia-tesla-t4"
    assert labels["cloud.google.com/gke-nodepool"] == "t4-spot"
    assert labels["node.kubernetes.io/instance-type"] == "n1-standard-8"
    assert labels["topology.kubernetes.io/zone"] == "us-central1-a"
    assert node["spec"]["taints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "1"
    assert "cloud.google.com/gke-spot" not in cpu_node()["metadata"]["labels"]


def test_taint_toleration_and_selector() -> None:
    plain = pod(resources={"requests": {"cpu": "1"}})
    assert filter_node(plain, gpu_node(), []) == ["node(s) had untolerated taint {nvidia.com/gpu: present}"]
    assert filter_node(plain, cpu_node(), []) == []
    spot = pod(nodeSelector={"cloud.google.com/gke-spot": "true"}, tolerations=[GPU_TOLERATION])
    assert filter_node(spot, gpu_node(), []) == []
    assert filter_node(spot, cpu_node(), []) == ["node(s) didn't match Pod's node affinity/selector"]


@pytest.mark.parametrize(
    ("expression", "on_gpu", "on_cpu"),
    [
        ({"key": "cloud.google.com/gke-accelerator", "operator": "In", "values": ["nvidia-tesla-t4"]}, True, False),
        ({"key": "cloud.google.com/gke-spot", "operator": "NotIn", "values": ["true"]}, False, True),
        ({"key": "cloud.google.com/gke-spot", "operator": "Exists"}, True, False),
        ({"key": "cloud.google.com/gke-spot", "operator": "DoesNotExist"}, False, True),
    ],
)
def test_required_node_affinity(expression: dict[str, Any], on_gpu: bool, on_cpu: bool) -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [expression]}]
            }
        }
    }
    p = pod(affinity=affinity, tolerations=[GPU_TOLERATION])
    assert (filter_node(p, gpu_node(), []) == []) is on_gpu
    assert (filter_node(p, cpu_node(), []) == []) is on_cpu


def test_resource_fit_counts_bound_non_terminal_pods() -> None:
    wants_gpu = pod(resources={"limits": {"nvidia.com/gpu": 1}}, tolerations=[GPU_TOLERATION])
    bound = pod(resources={"limits": {"nvidia.com/gpu": 1}})
    assert filter_node(wants_gpu, gpu_node(), [bound]) == ["Insufficient nvidia.com/gpu"]
    finished = {**bound, "status": {"phase": "Failed"}}
    assert filter_node(wants_gpu, gpu_node(), [finished]) == []
    assert filter_node(pod(resources={"requests": {"memory": "64Gi"}}), cpu_node(), []) == ["Insufficient memory"]


def test_unschedulable_message_like_kube_scheduler() -> None:
    greedy = pod(resources={"limits": {"nvidia.com/gpu": 4}}, tolerations=[GPU_TOLERATION])
    nodes = [gpu_node(), gpu_node(), cpu_node()]
    reasons = [filter_node(greedy, n, []) for n in nodes]
    assert unschedulable_message(len(nodes), reasons) == ("0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")
    plain = pod(resources={"limits": {"nvidia.com/gpu": 1}})
    assert unschedulable_message(3, [filter_node(plain, n, []) for n in nodes]) == (
        "0/3 nodes are available: 1 Insufficient nvidia.com/gpu, "
        "2 node(s) had untolerated taint {nvidia.com/gpu: present}."
    )
    assert unschedulable_message(0, []) == "no nodes available to schedule pods"


def test_pool_options(tmp_path: Any) -> None:
    pool = parse_pool_option(
        "name=v100,nodes=3,accelerator=nvidia-tesla-v100,provisioning=preemptible,"
        "preemption=lifetime,seed=4,time-scale=3600,restore-after=never"
    )
    assert pool == NodePool(
        name="v100",
        nodes=3,
        accelerator="nvidia-tesla-v100",
        gpus=1,
        provisioning="preemptible",
        preemption="lifetime",
        seed=4,
        time_scale=3600.0,
        restore_after=None,
    )
    assert parse_pool_option("name=s,preemption=scripted,preempt-at=5:20").preempt_at == (5.0, 20.0)
    with pytest.raises(ValueError, match="unknown option"):
        parse_pool_option("name=x,gpu=1")
    with pytest.raises(ValueError, match="on-demand nodes are not preempted"):
        parse_pool_option("name=x,preemption=lifetime")
    with pytest.raises(ValueError, match=r"name=\.\.\. is required"):
        parse_pool_option("nodes=3")
    path = tmp_path / "pools.yaml"
    path.write_text(
        "pools:\n- {name: cpu, nodes: 1}\n- {name: gpu, nodes: 2, accelerator: nvidia-tesla-k80, provisioning: spot}\n"
    )
    loaded = load_pools_file(path)
    assert [(p.name, p.nodes, p.gpus) for p in loaded] == [("cpu", 1, 0), ("gpu", 2, 1)]
