"""A PS pod replaced faster than a pass could see it missing (the Deployment's usual speed) still makes the
job recover: the new PS holds no model state until the chief restores the latest checkpoint."""

from __future__ import annotations

from datetime import timedelta

from tests.unit.planner.builders import T0, job, node, run_ps, start
from ttj.planner import DeleteChild
from ttj.planner.world import World

S = timedelta(seconds=1)


def test_a_parameter_server_replaced_between_two_passes_is_recovering_for_one_pass() -> None:
    world = World(job())
    start(world, [node(f"gpu-{i}", age=timedelta(hours=2 + 5 * i)) for i in range(3)])
    for _ in range(5):
        world.reconcile(T0)
    assert world.job["status"]["phase"] == "Running"
    epoch = world.job["status"]["chief"]["epoch"]
    # The old PS pod is gone and its replacement already runs when the operator next looks.
    world.observed.pods = [p for p in world.observed.pods if p["metadata"]["labels"]["transient.training/role"] != "ps"]
    run_ps(world, "mnist-ps-0-xyz", now=T0 + S)
    result = world.reconcile(T0 + S)
    status = world.job["status"]
    assert status["phase"] == "Recovering"
    recovering = next(c for c in status["conditions"] if c["type"] == "Recovering")
    assert (recovering["status"], recovering["reason"]) == ("True", "ParameterServerLost")
    assert status["chief"]["epoch"] == epoch + 1
    assert {e.reason for e in result.events} >= {
        "ParameterServerReplaced",
        "ParameterServerLost",
    }
    # The chief restores into the fresh PS; the next pass finds everything in place again.
    world.reconcile(T0 + 2 * S)
    status = world.job["status"]
    assert status["phase"] == "Running"
    assert status["chief"]["epoch"] == epoch + 1
    assert next(c for c in status["conditions"] if c["type"] == "Recovering")["status"] == "False"


def test_a_parameter_server_on_a_not_ready_node_is_lost_not_ready() -> None:
    """The API still shows the PS pod Running; its node stopped reporting. Past the node grace the PS counts
    as lost (the job is Recovering, not Running) and its pod is deleted without grace, so that its Deployment
    replaces it at once instead of after taint eviction (~300 s)."""
    world = World(job())
    start(world, [node(f"gpu-{i}", age=timedelta(hours=2 + 5 * i)) for i in range(3)])
    world.reconcile(T0)
    assert world.job["status"]["phase"] == "Running"
    world.observed.nodes["cpu-0"] = node("cpu-0", "on-demand", ready=False, ready_since=T0 + S)

    within_grace = world.reconcile(T0 + 10 * S)
    assert world.job["status"]["phase"] == "Running"
    assert within_grace.requeue_after is not None
    assert within_grace.requeue_after <= 21  # wakes when the node's grace ends

    result = world.reconcile(T0 + 40 * S)
    status = world.job["status"]
    assert status["phase"] == "Recovering"
    recovering = next(c for c in status["conditions"] if c["type"] == "Recovering")
    assert (recovering["status"], recovering["reason"]) == ("True", "ParameterServerLost")
    deletes = [w for w in result.of_type(DeleteChild) if w.name == "mnist-ps-0-abc"]
    assert [(d.kind, d.force) for d in deletes] == [("Pod", True)]
    assert any(e.reason == "ParameterServerLost" and e.type == "Warning" for e in result.events)
