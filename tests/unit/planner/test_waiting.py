"""A job short of pods says which pods it waits for, in which state and since when: a replacement that is
never scheduled (a scheduler that dropped it, a pool that never comes back) shows in the Recovering condition,
not only as "2/3 workers active" for as long as it lasts. No durations: a pass that changes nothing writes no
status."""

from __future__ import annotations

from datetime import timedelta

from tests.unit.planner.builders import T0, job, node, pods, run_ps, start, terminate
from ttj.planner.world import World
from ttj_contract import format_time

S = timedelta(seconds=1)


def _recovering(world: World) -> tuple[str, str, str]:
    condition = next(c for c in world.job["status"]["conditions"] if c["type"] == "Recovering")
    return condition["status"], condition["reason"], condition["message"]


def _running_job() -> World:
    world = World(job())
    start(world, [node(f"gpu-{i}", age=timedelta(hours=2 + 5 * i)) for i in range(3)])
    world.reconcile(T0)
    assert world.job["status"]["phase"] == "Running"
    return world


def test_a_replacement_worker_never_scheduled_is_named_in_the_recovering_condition() -> None:
    world = _running_job()
    lost = next(p for p in pods(world) if p["metadata"]["labels"].get("transient.training/chief") != "true")
    terminate(world, lost["metadata"]["name"], 143, pod_reason="Terminated", now=T0 + S)  # preempted
    for second in (2, 3):
        world.reconcile(T0 + second * S)  # counted, then replaced
    replacement = next(p for p in pods(world) if not p["spec"].get("nodeName"))
    name, created = replacement["metadata"]["name"], replacement["metadata"]["creationTimestamp"]

    world.reconcile(T0 + 4 * S)
    assert _recovering(world) == (
        "True",
        "WorkersLost",
        f"2/3 workers active; waiting for {name} Pending since {created}, not scheduled",
    )
    later = world.reconcile(T0 + 5 * S)  # still not scheduled: the same words, and no status write for them
    assert _recovering(world)[2].endswith(f"waiting for {name} Pending since {created}, not scheduled")
    assert not later.status_due


def test_a_parameter_server_whose_new_pod_never_runs_is_named_in_the_recovering_condition() -> None:
    world = _running_job()
    ps = next(p for p in world.observed.pods if p["metadata"]["labels"]["transient.training/role"] == "ps")
    ps["status"]["phase"] = "Failed"  # its node was preempted; the Deployment made a new pod, never scheduled
    run_ps(world, "mnist-ps-0-new", now=T0 + S)
    new = world.observed.pods[-1]
    new["spec"] = {}
    new["status"] = {"phase": "Pending"}

    world.reconcile(T0 + 2 * S)
    assert world.job["status"]["phase"] == "Recovering"
    assert _recovering(world) == (
        "True",
        "ParameterServerLost",
        f"waiting for the parameter servers to run again: mnist-ps-0-new Pending since {format_time(T0 + S)}, "
        "not scheduled",
    )

    world.observed.pods.remove(new)  # and then none at all
    world.reconcile(T0 + 3 * S)
    assert _recovering(world)[2] == "waiting for the parameter servers to run again: parameter server 0 has no pod yet"
