"""Matching jobs against node pools: from Node labels alone, the same verdicts as from the GKE API."""

from __future__ import annotations

from typing import Any

import pytest

from ttj.api.models import TransientTrainingJobSpec
from ttj.cost.model import NodeShape
from ttj.cost.pools import (
    UNSCHEDULABLE,
    NodePool,
    ObservedNode,
    autoscaling_max_needed,
    pools_from_nodes,
    validate_placement,
)
from ttj_contract import Provisioning


def node(
    pool: str,
    machine: str,
    accelerator: str | None = None,
    provisioning: str = "on-demand",
    gpus: int = 1,
    **extra: str,
) -> ObservedNode:
    labels = {"cloud.google.com/gke-nodepool": pool, "node.kubernetes.io/instance-type": machine, **extra}
    if accelerator:
        labels["cloud.google.com/gke-accelerator"] = accelerator
    if provisioning == "spot":
        labels["cloud.google.com/gke-spot"] = "true"
    if provisioning == "preemptible":
        labels["cloud.google.com/gke-preemptible"] = "true"
    return ObservedNode(labels, gpus if accelerator else 0)


CLUSTER = [
    node("default-pool", "e2-standard-4"),
    node("default-pool", "e2-standard-4"),
    node("t4-spot", "n1-standard-4", "nvidia-tesla-t4", "spot", team="ml"),
    node("t4-spot", "n1-standard-4", "nvidia-tesla-t4", "spot", team="ml"),
    node("v100-preemptible", "n1-standard-8", "nvidia-tesla-v100", "preemptible", gpus=2),
]


def job(**workers: Any) -> TransientTrainingJobSpec:
    return TransientTrainingJobSpec.model_validate(
        {"trainSteps": 10, "checkpoint": {"uri": "/ckpt"}, "workers": workers}
    )


def test_nodes_are_grouped_into_pools_with_their_shape_and_common_labels() -> None:
    pools = {pool.name: pool for pool in pools_from_nodes(CLUSTER)}
    assert set(pools) == {"default-pool", "t4-spot", "v100-preemptible"}
    assert pools["t4-spot"].shape == NodeShape("n1-standard-4", "nvidia-tesla-t4", 1, Provisioning.SPOT)
    assert pools["t4-spot"].node_count == 2
    assert pools["t4-spot"].labels["team"] == "ml"
    assert pools["v100-preemptible"].shape.accelerator_count == 2


def test_nodes_without_a_pool_label_are_grouped_by_shape() -> None:
    bare = [ObservedNode({"node.kubernetes.io/instance-type": "m", "cloud.google.com/gke-spot": "true"})] * 3
    (pool,) = pools_from_nodes(bare)
    assert pool.node_count == 3
    assert pool.shape.provisioning == Provisioning.SPOT


@pytest.mark.parametrize(
    ("workers", "pool"),
    [
        ({"acceleratorType": "nvidia-tesla-t4", "provisioning": "spot"}, "t4-spot"),
        ({"acceleratorType": "nvidia-tesla-t4", "provisioning": "spot", "nodeSelector": {"team": "ml"}}, "t4-spot"),
        (
            {"acceleratorType": "nvidia-tesla-v100", "provisioning": "preemptible", "gpusPerWorker": 2},
            "v100-preemptible",
        ),
        ({"gpusPerWorker": 0, "provisioning": "on-demand"}, "default-pool"),
    ],
)
def test_jobs_that_fit_a_pool_are_valid(workers: dict[str, Any], pool: str) -> None:
    check = validate_placement(job(replicas=1, **workers), pools_from_nodes(CLUSTER))
    assert check.ok, check.message
    assert [p.name for p in check.worker_pools] == [pool]
    assert [p.name for p in check.ps_pools] == ["default-pool"]


@pytest.mark.parametrize(
    ("workers", "expected"),
    [
        ({"acceleratorType": "nvidia-l4"}, "no node pool has spot nodes with 1 x nvidia-l4 per node for the workers"),
        (
            {"acceleratorType": "nvidia-tesla-t4", "provisioning": "on-demand"},
            "no node pool has on-demand nodes with 1 x nvidia-tesla-t4",
        ),
        ({"acceleratorType": "nvidia-tesla-t4", "gpusPerWorker": 2}, "2 x nvidia-tesla-t4 per node"),
        ({"acceleratorType": "nvidia-tesla-t4", "nodeSelector": {"team": "infra"}}, "with labels {'team': 'infra'}"),
    ],
)
def test_jobs_that_fit_no_pool_are_unschedulable_with_what_there_is(workers: dict[str, Any], expected: str) -> None:
    check = validate_placement(job(**workers), pools_from_nodes(CLUSTER))
    assert not check.ok
    assert check.reason == UNSCHEDULABLE
    assert expected in check.message
    assert "t4-spot (n1-standard-4, nvidia-tesla-t4 x1, spot, 2 node(s))" in check.message


def test_parameter_servers_need_an_on_demand_pool() -> None:
    only_spot = pools_from_nodes([node("t4-spot", "n1-standard-4", "nvidia-tesla-t4", "spot")])
    check = validate_placement(job(replicas=1), only_spot)
    assert not check.ok
    assert "no node pool has on-demand nodes for the parameter servers" in check.message


def test_capacity_short_of_the_slots_is_a_warning_not_an_error() -> None:
    check = validate_placement(job(replicas=2, maxReplicas=8), pools_from_nodes(CLUSTER))
    assert check.ok
    assert check.worker_capacity == 2
    assert "hold at most 2 worker(s), fewer than the job's 8 worker slot(s)" in check.warnings[0]


def test_autoscaling_maximum_needed_for_the_slots() -> None:
    pool = NodePool("t4", NodeShape("n1-standard-8", "nvidia-tesla-t4", 2, Provisioning.SPOT), min_nodes=0, max_nodes=2)
    assert autoscaling_max_needed(job(replicas=4, maxReplicas=7), pool) == 4  # 7 workers, 2 per node
    assert autoscaling_max_needed(job(replicas=4), pool) is None  # 4 workers fit 2 nodes
    fixed = NodePool("t4", pool.shape, node_count=1)
    assert autoscaling_max_needed(job(replicas=4, maxReplicas=7), fixed) is None
