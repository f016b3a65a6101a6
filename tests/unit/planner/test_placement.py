"""The planner with the cost/pools placement check: a job no node pool can hold says why it waits."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from tests.unit.planner.builders import T0, job, node
from ttj.api.models import TransientTrainingJobSpec
from ttj.cost.pools import ObservedNode, pools_from_nodes, validate_placement
from ttj.planner import CreateChild
from ttj.planner.world import World


def placement_for(world: World, nodes: list[dict[str, Any]]) -> None:
    """What the controller does: the cluster's Node labels → pools → a verdict for the job."""
    spec = TransientTrainingJobSpec.model_validate(world.job["spec"])
    observed = [
        ObservedNode(n["metadata"]["labels"], 1 if "cloud.google.com/gke-accelerator" in n["metadata"]["labels"] else 0)
        for n in nodes
    ]
    world.observed.placement = validate_placement(spec, pools_from_nodes(observed))


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == kind)


def test_a_job_whose_gpus_no_pool_has_waits_with_the_reason() -> None:
    nodes = [node("gpu-0", "preemptible"), node("cpu-0", "on-demand")]
    nodes[1]["metadata"]["labels"] = {"node.kubernetes.io/instance-type": "e2-standard-4"}
    world = World(job())  # spot T4 workers, but the cluster has preemptible ones only
    placement_for(world, nodes)
    assert world.observed.placement is not None
    assert not world.observed.placement.ok
    status = world.reconcile(T0).status
    running = condition(status, "Running")
    assert running["reason"] == "WorkersUnschedulable"
    assert running["message"].startswith("Unschedulable: no node pool has spot nodes with 1 x nvidia-tesla-t4")
    assert "preemptible" in running["message"]


def test_a_job_that_fits_is_planned_as_before() -> None:
    nodes = [node(f"gpu-{i}", age=timedelta(hours=3)) for i in range(3)]
    cpu = node("cpu-0", "on-demand")
    cpu["metadata"]["labels"] = {"node.kubernetes.io/instance-type": "e2-standard-4"}
    world = World(job())
    placement_for(world, [*nodes, cpu])
    assert world.observed.placement is not None
    assert world.observed.placement.ok
    result = world.reconcile(T0)
    assert len([a for a in result.of_type(CreateChild) if a.kind == "Pod"]) == 3
    assert condition(result.status, "Running")["reason"] == "WaitingForWorkers"


def test_pools_too_small_for_the_slots_are_said_in_the_created_condition() -> None:
    cpu = node("cpu-0", "on-demand")
    cpu["metadata"]["labels"] = {"node.kubernetes.io/instance-type": "e2-standard-4"}
    world = World(job())
    placement_for(world, [node("gpu-0", age=timedelta(hours=3)), cpu])
    assert world.observed.placement is not None
    slots = TransientTrainingJobSpec.model_validate(world.job["spec"]).workers.slots
    status = world.reconcile(T0).status
    created = condition(status, "Created")
    assert (created["status"], created["reason"]) == ("True", "ChildrenCreated")
    assert created["message"] == (
        f"the matching node pools hold at most 1 worker(s), fewer than the job's {slots} worker slot(s): "
        f"{world.observed.placement.worker_pools[0].describe()}"
    )
