"""Races between the operator's view of the cluster and the cluster: a lagging or gapped view must never
make the planner put two live pods in one slot, nor delete an object that merely took a name it saw."""

from __future__ import annotations

import copy
from datetime import timedelta

from tests.unit.planner.builders import T0, job, node, pods, run_pod, start, terminate
from ttj.planner import CreateChild, DeleteChild, Observed, plan
from ttj.planner.interpreter import Interpreter, delete_options, deliberate_patch
from ttj.planner.world import World

S = timedelta(seconds=1)


def started() -> World:
    world = World(job())
    start(world, [node(f"gpu-{i}", age=timedelta(hours=2 + 5 * i)) for i in range(3)])
    for second in range(3):
        world.reconcile(T0 + second * S)
    return world


def test_a_view_that_dropped_the_lost_pod_but_not_yet_shows_its_replacement_never_reuses_a_name() -> None:
    world = started()
    terminate(world, "mnist-worker-2-1", 143, pod_reason="Terminated", now=T0 + 3 * S)
    world.reconcile(T0 + 4 * S)  # counts the loss, creates -2-2
    assert world.pod("mnist-worker-2-2") is not None
    assert world.job["status"]["slotIncarnations"] == [2, 2, 2]  # -2-2 reserved until it is observed

    # The operator's view: the DELETED of -2-1 arrived, the ADDED of -2-2 not yet.
    lagging = copy.deepcopy(world.observed)
    lagging.pods = [p for p in lagging.pods if p["metadata"]["name"] not in ("mnist-worker-2-1", "mnist-worker-2-2")]
    result = plan(world.job, lagging, T0 + 5 * S)
    created = [w.name for w in result.of_type(CreateChild) if w.kind == "Pod"]
    assert created == ["mnist-worker-2-2"]  # the name the cluster holds already: 409, harmless
    assert result.status["slotIncarnations"] == [2, 2, 2]

    world.reconcile(T0 + 6 * S)  # observes -2-2: its name is spent
    assert world.job["status"]["slotIncarnations"] == [2, 2, 3]


def test_a_released_workers_name_never_comes_back_once_it_is_gone() -> None:
    world = World(job(workers={"replicas": 2, "minReplicas": 1, "maxReplicas": 3}))
    start(world, [node(f"gpu-{i}") for i in range(3)])
    for second in range(3):
        world.reconcile(T0 + second * S)
    world.job["spec"]["workers"]["replicas"] = 1
    for second in range(3, 6):
        world.reconcile(T0 + second * S)
    assert sorted(p["metadata"]["name"] for p in pods(world, alive=False)) == ["mnist-worker-0-1"]
    world.job["spec"]["workers"]["replicas"] = 2
    world.reconcile(T0 + 6 * S)
    assert sorted(p["metadata"]["name"] for p in pods(world)) == ["mnist-worker-0-1", "mnist-worker-1-2"]


def test_incarnations_recorded_survive_a_view_with_no_pods_at_all() -> None:
    world = started()
    status = copy.deepcopy(world.job["status"])
    status["slotIncarnations"] = [4, 7, 2]
    lagging = job()
    lagging["status"] = status
    result = plan(lagging, Observed(nodes=copy.deepcopy(world.observed.nodes)), T0 + 10 * S)
    created = sorted(w.name for w in result.of_type(CreateChild) if w.kind == "Pod")
    assert created == ["mnist-worker-0-4", "mnist-worker-1-7", "mnist-worker-2-2"]


def test_every_pod_delete_names_the_uid_it_observed() -> None:
    world = started()
    terminate(world, "mnist-worker-1-1", 143, pod_reason="Terminated", now=T0 + 3 * S)
    world.reconcile(T0 + 4 * S)
    second = world.reconcile(T0 + 5 * S)
    deletes = [w for w in second.of_type(DeleteChild) if w.kind == "Pod"]
    assert [d.name for d in deletes] == ["mnist-worker-1-1"]
    assert deletes[0].uid is not None
    assert delete_options(deletes[0])["preconditions"] == {"uid": deletes[0].uid}


def test_a_delete_meant_for_an_earlier_pod_leaves_its_successor_under_the_same_name_alone() -> None:
    world = started()
    pod = world.pod("mnist-worker-0-1")
    assert pod is not None
    stale = DeleteChild("Pod", "mnist-worker-0-1", mark_deliberate=True, reason="ScaledDown", uid="an-earlier-pod")
    assert deliberate_patch(stale)["metadata"]["uid"] == "an-earlier-pod"
    api: Interpreter = world.api
    assert api.apply(stale, T0 + 4 * S) is False
    assert not pod["metadata"].get("deletionTimestamp")
    assert "transient.training/deleted" not in (pod["metadata"].get("annotations") or {})
    meant = DeleteChild(
        "Pod", "mnist-worker-0-1", mark_deliberate=True, reason="ScaledDown", uid=pod["metadata"]["uid"]
    )
    assert api.apply(meant, T0 + 4 * S) is True
    assert pod["metadata"].get("deletionTimestamp")


def test_a_replacement_is_running_before_the_next_loss_in_the_same_slot() -> None:
    world = started()
    for incarnation in (1, 2, 3):
        name = f"mnist-worker-0-{incarnation}"
        terminate(world, name, 143, pod_reason="Terminated", now=T0 + 10 * incarnation * S)
        for second in range(1, 4):
            world.reconcile(T0 + (10 * incarnation + second) * S)
        run_pod(world, f"mnist-worker-0-{incarnation + 1}", "gpu-0", T0 + (10 * incarnation + 4) * S)
    alive = sorted(p["metadata"]["name"] for p in pods(world))
    assert alive == ["mnist-worker-0-4", "mnist-worker-1-1", "mnist-worker-2-1"]
    assert world.job["status"]["slotIncarnations"][0] == 5  # -0-4 observed: the next is -0-5
