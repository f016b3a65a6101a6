"""A PS pod replaced faster than a pass could see it missing (the Deployment's usual speed) still makes the
job recover: the new PS holds no model state until the chief restores the latest checkpoint."""

from __future__ import annotations

from datetime import timedelta

from tests.unit.planner.builders import T0, job, node, run_ps, start
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
