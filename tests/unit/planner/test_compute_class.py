"""Worker groups of a GKE custom compute class: the pods select the class, each worker is priced by the node it
landed on, and the class's active migration (the autoscaler draining a node) is a planned handover, not a loss."""

from __future__ import annotations

import copy
from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.unit.planner.builders import T0, job, node, pods, renew, start, terminate
from ttj.api.models import JobRef, TransientTrainingJobSpec
from ttj.cost.prices import load_price_table
from ttj.planner import CreateChild, PlannerConfig, plan
from ttj.planner.children import worker_pod
from ttj.planner.groups import group_worker_pod, groups_of
from ttj.planner.world import World
from ttj_contract import format_time

S = timedelta(seconds=1)
PRICED = PlannerConfig(prices=load_price_table())
CLASS = "gpu-fallback"
GROUPS = [{"name": "flex", "computeClass": CLASS, "maxReplicas": 2}, {"name": "t4-od", "provisioning": "on-demand"}]
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
CLASS_TOLERATION = {
    "key": "cloud.google.com/compute-class",
    "operator": "Equal",
    "value": CLASS,
    "effect": "NoSchedule",
}


def classy(replicas: int = 3, groups: list[dict[str, Any]] | None = None, **workers: Any) -> dict[str, Any]:
    return job(workers={"replicas": replicas, "maxReplicas": 4, "groups": groups or GROUPS, **workers})


@pytest.mark.parametrize(
    ("case", "workers", "group", "node_selector", "tolerations"),
    [
        (
            "spot T4 job: the class replaces the spot and accelerator labels and the spot toleration",
            {"provisioning": "spot"},
            {"name": "flex", "computeClass": CLASS},
            {"cloud.google.com/compute-class": CLASS},
            [GPU_TOLERATION, CLASS_TOLERATION],
        ),
        (
            "on-demand job: no on-demand affinity, the class decides",
            {"provisioning": "on-demand", "acceleratorType": "nvidia-l4"},
            {"name": "flex", "computeClass": CLASS},
            {"cloud.google.com/compute-class": CLASS},
            [GPU_TOLERATION, CLASS_TOLERATION],
        ),
        (
            "the group's zone, selectors and tolerations still apply",
            {"nodeSelector": {"team": "ml"}},
            {
                "name": "flex",
                "computeClass": CLASS,
                "zone": "zone-b",
                "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
            },
            {"cloud.google.com/compute-class": CLASS, "team": "ml", "topology.kubernetes.io/zone": "zone-b"},
            [
                GPU_TOLERATION,
                CLASS_TOLERATION,
                {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"},
            ],
        ),
    ],
)
def test_a_compute_class_worker_is_the_plain_worker_placed_by_its_class(
    case: str,
    workers: dict[str, Any],
    group: dict[str, Any],
    node_selector: dict[str, str],
    tolerations: list[dict[str, Any]],
) -> None:
    """The whole pod: a plain worker of the same job, but with the class's selector and toleration in place of
    ttj's provisioning and accelerator labels (and of the on-demand affinity), and the group label."""
    manifest = classy(groups=[group], **workers)
    spec = TransientTrainingJobSpec.model_validate(manifest["spec"])
    [the_group] = groups_of(spec)
    built = group_worker_pod(JobRef.of(manifest), the_group, 1, 2)

    expected = copy.deepcopy(worker_pod(JobRef.of(manifest), the_group.spec, 1, 2))
    expected["metadata"]["labels"]["transient.training/worker-group"] = "flex"
    expected["spec"]["nodeSelector"] = node_selector
    expected["spec"]["tolerations"] = tolerations
    expected["spec"].pop("affinity", None)
    assert built == expected, case


def test_a_class_group_shows_its_class_not_the_inherited_accelerator() -> None:
    result = plan(classy(), World(classy()).observed, T0)
    assert [
        (g["name"], g.get("computeClass"), g.get("acceleratorType"), g.get("provisioning"), g["desired"])
        for g in result.status["workerGroups"]  # type: ignore[typeddict-item]
    ] == [("flex", CLASS, None, None, 2), ("t4-od", None, "nvidia-tesla-t4", "on-demand", 1)]
    selectors = [p.manifest["spec"]["nodeSelector"] for p in result.of_type(CreateChild) if p.kind == "Pod"]
    assert selectors[:2] == [{"cloud.google.com/compute-class": CLASS}] * 2


def test_a_group_may_not_select_a_compute_class_through_its_node_selector() -> None:
    bad = classy(groups=[{"name": "a", "nodeSelector": {"cloud.google.com/compute-class": CLASS}}])
    result = plan(bad, World(bad).observed, T0)
    invalid = next(c for c in result.status["conditions"] if c["type"] == "Invalid")
    assert "nodeSelector may not set cloud.google.com/compute-class" in invalid["message"]


# -- the class's active migration -----------------------------------------------------------------------------
def class_node(name: str, accelerator: str = "nvidia-l4", spot: bool = True) -> dict[str, Any]:
    """A node the class made: its label, the accelerator and provisioning its priority rule chose."""
    made = node(name, "spot" if spot else "on-demand", age=timedelta(hours=3))
    made["metadata"]["labels"].update(
        {
            "cloud.google.com/compute-class": CLASS,
            "cloud.google.com/gke-accelerator": accelerator,
            "node.kubernetes.io/instance-type": "g2-standard-4" if accelerator == "nvidia-l4" else "n1-standard-4",
        }
    )
    return made


def drain(world: World, node_name: str, at: datetime, *, evict: bool = True, grace: int = 30) -> list[str]:
    """The cluster autoscaler's drain: the ToBeDeleted taint on the node, then each pod on it evicted (the
    Eviction API's DisruptionTarget condition, then a graceful deletion). Returns the evicted pods."""
    the_node = world.observed.nodes[node_name]
    the_node["spec"] = {
        "unschedulable": True,
        "taints": [
            {"key": "ToBeDeletedByClusterAutoscaler", "value": str(int(at.timestamp())), "effect": "NoSchedule"}
        ],
    }
    evicted = [p["metadata"]["name"] for p in pods(world) if p["spec"].get("nodeName") == node_name]
    for name in evicted:
        pod = world.pod(name)
        assert pod is not None
        if evict:
            pod["status"]["conditions"].append(
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "EvictionByEvictionAPI",
                    "message": "Eviction API: evicting",
                    "lastTransitionTime": format_time(at),
                }
            )
        pod["metadata"]["deletionTimestamp"] = format_time(at + grace * S)
        pod["metadata"]["deletionGracePeriodSeconds"] = grace
    return evicted


def started() -> World:
    world = World(classy())
    nodes = [class_node("flex-0"), class_node("flex-1", "nvidia-tesla-t4", spot=False), node("od-0", "on-demand")]
    start(world, nodes)
    for _ in range(3):
        world.reconcile(T0, PRICED)
    renew(world, T0 + 5 * S, {"globalStep": 400, "checkpointStep": 300})
    world.reconcile(T0 + 100 * S, PRICED)
    return world


def on(world: World, node_name: str) -> str:
    return str(next(p["metadata"]["name"] for p in pods(world) if p["spec"].get("nodeName") == node_name))


@pytest.mark.parametrize("evict", [True, False], ids=["eviction condition", "taint only (kube < 1.26)"])
def test_a_worker_the_class_migrates_is_replaced_as_a_planned_handover_not_a_preemption(evict: bool) -> None:
    world = started()
    holder = world.job["status"]["chief"]["pod"]
    moved = next(name for name in (on(world, "flex-0"), on(world, "flex-1")) if name != holder)
    node_name = world.pod(moved)["spec"]["nodeName"]  # type: ignore[index]
    drain(world, node_name, T0 + 110 * S, evict=evict)
    terminate(world, moved, 143, now=T0 + 112 * S)
    for _ in range(3):
        world.reconcile(T0 + 113 * S, PRICED)

    status = world.job["status"]
    assert (status["migrations"], status["preemptions"], status["failures"]) == (1, 0, 0)
    assert not status.get("preemptionCosts")
    assert status.get("savings", {}).get("losses", 0) == 0
    [event] = [e for e in world.events if e.reason == "Migrated"]
    assert event.type == "Normal"
    for part in (moved, node_name, CLASS):
        assert part in event.message
    assert not [e for e in world.events if e.reason == "WorkerPreempted"]
    # replaced like any worker: a new incarnation of the slot, in the class's group
    slot = moved.split("-")[2]
    replacement = world.pod(f"mnist-worker-{slot}-2")
    assert replacement is not None
    assert replacement["metadata"]["labels"]["transient.training/worker-group"] == "flex"
    assert replacement["spec"]["nodeSelector"] == {"cloud.google.com/compute-class": CLASS}
    assert status["replacements"] == 1


def test_a_spot_preemption_of_a_class_node_is_still_a_preemption() -> None:
    world = started()
    holder = world.job["status"]["chief"]["pod"]
    lost = next(name for name in (on(world, "flex-0"), on(world, "flex-1")) if name != holder)
    pod = world.pod(lost)
    assert pod is not None
    pod["status"]["conditions"].append(
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "TerminationByKubelet",
            "lastTransitionTime": format_time(T0 + 110 * S),
        }
    )
    terminate(world, lost, 143, pod_reason="Terminated", now=T0 + 110 * S)
    world.reconcile(T0 + 111 * S, PRICED)
    status = world.job["status"]
    assert (status["migrations"], status["preemptions"]) == (0, 1)
    assert [r["pod"] for r in status["preemptionCosts"]] == [lost]


def test_a_migrated_chief_checkpoints_in_its_grace_then_the_election_follows() -> None:
    world = started()
    holder = world.job["status"]["chief"]["pod"]
    node_name = world.pod(holder)["spec"]["nodeName"]  # type: ignore[index]
    drain(world, node_name, T0 + 110 * S)
    world.reconcile(T0 + 111 * S, PRICED)
    assert world.job["status"]["chief"]["pod"] == holder, "no new chief while the old one writes its checkpoint"
    renew(world, T0 + 115 * S, {"globalStep": 450, "checkpointStep": 450, "epoch": 1})
    terminate(world, holder, 143, now=T0 + 116 * S)
    world.reconcile(T0 + 117 * S, PRICED)
    status = world.job["status"]
    assert status["chief"]["pod"] != holder
    assert status["chief"]["epoch"] == 2
    assert (status["migrations"], status["preemptions"]) == (1, 0)
    assert [e.reason for e in world.events].count("Migrated") == 1


def test_a_class_worker_is_priced_by_the_node_it_landed_on() -> None:
    """The group inherits spec.workers' T4 spot, but its workers ran on an L4 spot and a T4 on-demand node the
    class chose: each is priced as its node."""
    world = started()
    prices = load_price_table()
    entries = {e["name"]: e for e in world.job["status"]["cost"]["pods"]}
    l4 = entries[on(world, "flex-0")]
    t4_od = entries[on(world, "flex-1")]
    assert (l4["provisioning"], t4_od["provisioning"]) == ("spot", "on-demand")
    l4_price = prices.node_price(
        machine_type="g2-standard-4", accelerator_type="nvidia-l4", accelerator_count=1, provisioning="spot"
    )
    t4_price = prices.node_price(
        machine_type="n1-standard-4", accelerator_type="nvidia-tesla-t4", accelerator_count=1, provisioning="on-demand"
    )
    assert l4["usdPerHour"] == pytest.approx(l4_price.usd_per_hour)
    assert t4_od["usdPerHour"] == pytest.approx(t4_price.usd_per_hour)
    assert l4["group"] == t4_od["group"] == "flex"


def test_a_class_worker_whose_node_is_unknown_is_priced_as_the_node_its_group_landed_on() -> None:
    """Not as spec.workers' T4 spot: the class chose an L4 spot node for the group's other worker."""
    world = World(classy())
    start(world, [class_node("flex-0"), class_node("flex-1", "nvidia-tesla-t4", spot=False), node("od-0", "on-demand")])
    unseen = on(world, "flex-1")
    del world.observed.nodes["flex-1"]  # not in the operator's cache yet
    world.reconcile(T0, PRICED)
    entries = {e["name"]: e for e in world.job["status"]["cost"]["pods"]}
    assert entries[unseen]["usdPerHour"] == pytest.approx(entries[on(world, "flex-0")]["usdPerHour"])
    assert entries[unseen]["provisioning"] == "spot"
    assert any(unseen in note and "node unknown" in note for note in world.job["status"]["cost"]["notes"])
