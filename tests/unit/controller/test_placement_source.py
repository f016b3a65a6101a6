"""The controller's placement source: which pools a job is matched against, and the verdict it gets."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ttj.controller.placement import PlacementSource
from ttj.cost.gke import GkeError, GkeSettings
from ttj.cost.model import NodeShape
from ttj.cost.pools import NodePool, ObservedNode


def gke_node(
    name: str, pool: str, *, accelerator: str | None = None, provisioning: str = "on-demand"
) -> dict[str, Any]:
    labels = {"cloud.google.com/gke-nodepool": pool, "node.kubernetes.io/instance-type": "n1-standard-8"}
    if accelerator:
        labels["cloud.google.com/gke-accelerator"] = accelerator
    if provisioning == "spot":
        labels["cloud.google.com/gke-spot"] = "true"
    elif provisioning == "preemptible":
        labels["cloud.google.com/gke-preemptible"] = "true"
    capacity = {"nvidia.com/gpu": "1"} if accelerator else {}
    return {"metadata": {"name": name, "labels": labels}, "status": {"capacity": capacity}}


T4_SPOT = [
    gke_node("c0", "cpu"),
    *(gke_node(f"g{i}", "t4", accelerator="nvidia-tesla-t4", provisioning="spot") for i in range(3)),
]


def spec(**workers: Any) -> dict[str, Any]:
    return {
        "trainSteps": 10,
        "checkpoint": {"uri": "/ck"},
        "workers": {"replicas": 2, **workers},
    }


@pytest.mark.parametrize(
    ("nodes", "workers", "ok", "words"),
    [
        (T4_SPOT, {}, True, ""),
        (
            T4_SPOT,
            {"acceleratorType": "nvidia-tesla-v100"},
            False,
            "no node pool has spot nodes with 1 x nvidia-tesla-v100",
        ),
        (T4_SPOT, {"provisioning": "preemptible"}, False, "no node pool has preemptible nodes"),
        (T4_SPOT, {"gpusPerWorker": 2}, False, "2 x nvidia-tesla-t4 per node"),
        (T4_SPOT, {"nodeSelector": {"team": "vision"}}, False, "with labels {'team': 'vision'}"),
        (T4_SPOT[1:], {}, False, "no node pool has on-demand nodes for the parameter servers"),
        (T4_SPOT, {"provisioning": "on-demand", "gpusPerWorker": 0}, True, ""),
        # with groups: the job can run when one group can; else the most preferred group's words
        (T4_SPOT, {"groups": [{"name": "v100", "acceleratorType": "nvidia-tesla-v100"}, {"name": "t4"}]}, True, ""),
        (
            T4_SPOT,
            {"groups": [{"name": "l4", "acceleratorType": "nvidia-l4"}, {"name": "od", "provisioning": "on-demand"}]},
            False,
            "no node pool has spot nodes with 1 x nvidia-l4",
        ),
    ],
)
def test_node_label_pools_judge_the_job(
    nodes: list[dict[str, Any]], workers: dict[str, Any], ok: bool, words: str
) -> None:
    check = asyncio.run(PlacementSource().check(spec(**workers), lambda: nodes))
    assert check is not None
    assert check.ok is ok
    assert words in check.message
    if not ok:
        assert check.reason == "Unschedulable"
        assert "t4 (n1-standard-8, nvidia-tesla-t4 x1, spot, 3 node(s))" in check.message or not nodes[1:]


def test_no_nodes_and_no_gke_means_no_verdict() -> None:
    assert asyncio.run(PlacementSource().check(spec(), lambda: [])) is None


def test_an_invalid_spec_is_left_to_the_planner() -> None:
    assert asyncio.run(PlacementSource().check({"workers": {"replicas": -1}}, lambda: T4_SPOT)) is None


def test_gpu_capacity_comes_from_the_node_status() -> None:
    assert ObservedNode.of(T4_SPOT[1]).gpu_capacity == 1
    assert ObservedNode.of(T4_SPOT[0]).gpu_capacity is None


class FakeGke:
    """GkeNodePools' interface: list(refresh=...) → pools, or GkeError."""

    def __init__(self, pools: list[NodePool] | None) -> None:
        self.pools = pools
        self.calls = 0
        self.settings = GkeSettings(project="p", location="l", cluster="c")  # TTJ_GKE_RAISE_AUTOSCALING off

    def list(self, *, refresh: bool = False) -> list[NodePool]:
        self.calls += 1
        if self.pools is None:
            raise GkeError("listing the node pools of projects/p/locations/l/clusters/c failed: 403")
        return list(self.pools)


V100_POOLS = [
    NodePool("cpu", NodeShape("n1-standard-4", None, 0, "on-demand"), node_count=1),  # type: ignore[arg-type]
    NodePool(
        "v100",
        NodeShape("n1-standard-8", "nvidia-tesla-v100", 1, "spot"),  # type: ignore[arg-type]
        labels={"cloud.google.com/gke-spot": "true"},
        node_count=0,
        min_nodes=0,
        max_nodes=8,
    ),
]


def test_gke_pools_win_over_node_labels_and_are_read_once_a_minute() -> None:
    now = [0.0]
    gke = FakeGke(V100_POOLS)
    source = PlacementSource(gke, clock=lambda: now[0])  # type: ignore[arg-type]

    async def checks() -> None:
        # An autoscaling V100 pool with no node yet: GKE knows it, the Nodes do not.
        v100 = await source.check(spec(acceleratorType="nvidia-tesla-v100"), lambda: T4_SPOT)
        assert v100 is not None
        assert v100.ok
        t4 = await source.check(spec(), lambda: T4_SPOT)
        assert t4 is not None
        assert not t4.ok
        assert "v100" in t4.message
        now[0] = 59.0
        await asyncio.gather(*(source.check(spec(), lambda: T4_SPOT) for _ in range(20)))
        assert gke.calls == 1
        now[0] = 61.0
        await source.check(spec(), lambda: T4_SPOT)
        assert gke.calls == 2

    asyncio.run(checks())


def test_a_failing_gke_api_falls_back_to_node_labels() -> None:
    source = PlacementSource(FakeGke(None))  # type: ignore[arg-type]
    check = asyncio.run(source.check(spec(acceleratorType="nvidia-tesla-v100"), lambda: T4_SPOT))
    assert check is not None
    assert not check.ok
    assert "t4" in check.message
