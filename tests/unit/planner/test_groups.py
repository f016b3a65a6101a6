"""Worker groups: which group a slot's pod goes to, what the pod looks like, and capacity fallback."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

from tests.unit.planner.builders import T0, job, node, pods, run_pod, run_ps
from ttj.api.models import TransientTrainingJobSpec
from ttj.planner import CreateChild, DeleteChild, plan
from ttj.planner.children import worker_pod
from ttj.planner.world import World
from ttj_contract import format_time

GROUPS = [
    {"name": "l4", "acceleratorType": "nvidia-l4", "batchSize": 256, "maxReplicas": 2},
    {"name": "t4", "zone": "zone-b", "nodeSelector": {"team": "ml"}},
    {"name": "t4-od", "provisioning": "on-demand", "maxReplicas": 1},
]


def grouped(replicas: int = 3, groups: list[dict[str, Any]] | None = None, **workers: Any) -> dict[str, Any]:
    return job(workers={"replicas": replicas, "maxReplicas": 4, "groups": groups or GROUPS, **workers})


def env(pod: dict[str, Any], name: str) -> str:
    return next(e["value"] for e in pod["spec"]["containers"][0]["env"] if e["name"] == name)


def shape(pod: dict[str, Any]) -> tuple[Any, ...]:
    """What a group decides of a pod: name, group label, node selector, on-demand affinity, batch size."""
    return (
        pod["metadata"]["name"],
        pod["metadata"]["labels"].get("transient.training/worker-group"),
        pod["spec"]["nodeSelector"],
        "affinity" in pod["spec"],
        env(pod, "TTJ_BATCH_SIZE"),
    )


def created(result: Any) -> list[dict[str, Any]]:
    return [a.manifest for a in result.of_type(CreateChild) if a.kind == "Pod"]


SPOT = {"cloud.google.com/gke-spot": "true"}


def test_slots_fill_the_groups_in_order_within_their_max_replicas() -> None:
    result = plan(grouped(replicas=4), World(grouped(replicas=4)).observed, T0)
    assert [shape(p) for p in created(result)] == [
        ("mnist-worker-0-1", "l4", {**SPOT, "cloud.google.com/gke-accelerator": "nvidia-l4"}, False, "256"),
        ("mnist-worker-1-1", "l4", {**SPOT, "cloud.google.com/gke-accelerator": "nvidia-l4"}, False, "256"),
        (
            "mnist-worker-2-1",
            "t4",
            {
                "team": "ml",
                "topology.kubernetes.io/zone": "zone-b",
                **SPOT,
                "cloud.google.com/gke-accelerator": "nvidia-tesla-t4",
            },
            False,
            "128",
        ),
        (
            "mnist-worker-3-1",
            "t4",
            {
                "team": "ml",
                "topology.kubernetes.io/zone": "zone-b",
                **SPOT,
                "cloud.google.com/gke-accelerator": "nvidia-tesla-t4",
            },
            False,
            "128",
        ),
    ]
    assert [(g["name"], g["desired"], g["active"], g["pending"]) for g in result.status["workerGroups"]] == [
        ("l4", 2, 0, 2),
        ("t4", 2, 0, 2),
        ("t4-od", 0, 0, 0),
    ]


def test_one_group_of_the_workers_fields_makes_the_pods_a_job_without_groups_makes() -> None:
    plain = job(workers={"replicas": 2, "maxReplicas": 4, "acceleratorType": "nvidia-l4"})
    one = job(workers={"replicas": 2, "maxReplicas": 4, "groups": [{"name": "only", "acceleratorType": "nvidia-l4"}]})
    without = created(plan(plain, World(plain).observed, T0))
    with_group = created(plan(one, World(one).observed, T0))
    for pod in with_group:
        assert pod["metadata"]["labels"].pop("transient.training/worker-group") == "only"
    assert with_group == without
    spec = TransientTrainingJobSpec.model_validate(plain["spec"])
    assert without == [worker_pod(plain, spec, slot, 1) for slot in (0, 1)]
    assert "workerGroups" not in plan(plain, World(plain).observed, T0).status


def test_a_group_may_not_set_ttjs_placement_labels() -> None:
    bad = grouped(groups=[{"name": "a", "nodeSelector": {"cloud.google.com/gke-spot": "false"}}])
    result = plan(bad, World(bad).observed, T0)
    assert result.status["phase"] == "Failed"
    invalid = next(c for c in result.status["conditions"] if c["type"] == "Invalid")
    assert "workers.groups[0] (a): nodeSelector may not set cloud.google.com/gke-spot" in invalid["message"]


def unschedulable(world: World, since: Any) -> None:
    """The scheduler: every pending worker finds no node."""
    for pod in pods(world):
        if pod.get("status", {}).get("phase") == "Pending" or "status" not in pod:
            pod["status"] = {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.",
                        "lastTransitionTime": format_time(since),
                    }
                ],
            }


def live(world: World) -> list[tuple[str, str | None]]:
    return sorted(
        (p["metadata"]["name"], p["metadata"]["labels"].get("transient.training/worker-group")) for p in pods(world)
    )


def test_a_slot_unschedulable_for_fallback_after_seconds_is_filled_from_the_next_group() -> None:
    world = World(grouped(replicas=2, fallbackAfterSeconds=300))
    world.observed.nodes["cpu-0"] = node("cpu-0", "on-demand")
    world.reconcile(T0)
    run_ps(world, "mnist-ps-0-abc")
    unschedulable(world, T0)
    waiting = world.reconcile(T0 + timedelta(seconds=299))
    assert not waiting.of_type(DeleteChild)
    assert waiting.requeue_after == 1.0  # woken when the wait is over
    assert live(world) == [("mnist-worker-0-1", "l4"), ("mnist-worker-1-1", "l4")]

    moved = world.reconcile(T0 + timedelta(seconds=300))
    assert [(d.name, d.reason) for d in moved.of_type(DeleteChild)] == [
        ("mnist-worker-0-1", "CapacityFallback"),
        ("mnist-worker-1-1", "CapacityFallback"),
    ]
    assert live(world) == [("mnist-worker-0-2", "t4"), ("mnist-worker-1-2", "t4")]
    why = "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."
    assert [(e.type, e.reason, e.message) for e in moved.events if e.reason == "CapacityFallback"] == [
        (
            "Warning",
            "CapacityFallback",
            f"worker slot {s} left group l4 (unschedulable for 300s: Unschedulable: {why}) for group t4",
        )
        for s in (0, 1)
    ]
    fallback = next(c for c in world.job["status"]["conditions"] if c["type"] == "CapacityFallback")
    since = format_time(T0 + timedelta(seconds=300))
    assert (fallback["status"], fallback["reason"], fallback["message"]) == (
        "True",
        "GroupCapacityUnavailable",
        f"group l4 skipped since {since}: Unschedulable: {why}",
    )
    l4 = world.job["status"]["workerGroups"][0]
    assert (l4["capacityUnavailableSince"], l4["desired"]) == (since, 0)

    # a worker added later skips l4 too; once an l4 worker runs, l4 has capacity again
    world.job["spec"]["workers"]["replicas"] = 3
    world.reconcile(T0 + timedelta(seconds=310))
    assert live(world) == [("mnist-worker-0-2", "t4"), ("mnist-worker-1-2", "t4"), ("mnist-worker-2-1", "t4")]


def test_the_mark_goes_when_a_worker_of_the_group_runs_and_new_workers_go_there_again() -> None:
    world = World(grouped(replicas=1, minReplicas=1, fallbackAfterSeconds=60))
    world.observed.nodes |= {"cpu-0": node("cpu-0", "on-demand"), "l4-0": node("l4-0")}
    world.reconcile(T0)
    status = copy.deepcopy(world.job["status"])
    status["workerGroups"][0] |= {"capacityUnavailableSince": format_time(T0), "capacityUnavailableReason": "out"}
    world.job["status"] = status
    world.job["spec"]["workers"]["replicas"] = 2
    world.reconcile(T0 + timedelta(seconds=1))
    assert live(world) == [("mnist-worker-0-1", "l4"), ("mnist-worker-1-1", "t4")]
    run_pod(world, "mnist-worker-0-1", "l4-0", T0)
    result = world.reconcile(T0 + timedelta(seconds=2))
    assert "capacityUnavailableSince" not in result.status["workerGroups"][0]
    cond = next(c for c in result.status["conditions"] if c["type"] == "CapacityFallback")
    assert (cond["status"], cond["reason"]) == ("False", "PreferredGroups")


def test_without_a_group_to_go_to_the_worker_keeps_waiting() -> None:
    world = World(grouped(replicas=1, minReplicas=1, groups=[{"name": "only"}], fallbackAfterSeconds=60))
    world.reconcile(T0)
    unschedulable(world, T0)
    result = world.reconcile(T0 + timedelta(hours=1))
    assert not result.of_type(DeleteChild)
    assert "capacityUnavailableSince" not in result.status["workerGroups"][0]


def test_scaling_down_releases_the_least_preferred_groups_first() -> None:
    world = World(grouped(replicas=2))
    world.observed.nodes |= {"cpu-0": node("cpu-0", "on-demand")}
    world.job["status"] = {"workerGroups": [{"name": "l4", "capacityUnavailableSince": format_time(T0)}]}
    world.reconcile(T0)  # l4 is out: slots 0 and 1 go to t4
    world.job["status"]["workerGroups"][0].pop("capacityUnavailableSince")
    world.job["spec"]["workers"]["replicas"] = 4
    world.reconcile(T0)  # slots 2 and 3 go to l4
    run_ps(world, "mnist-ps-0-abc")
    for pod in pods(world):
        name, group = pod["metadata"]["name"], pod["metadata"]["labels"]["transient.training/worker-group"]
        world.observed.nodes[name] = node(name, age=timedelta(hours=10 if group == "l4" else 1))
        run_pod(world, name, name)
    world.reconcile(T0)
    assert live(world) == [
        ("mnist-worker-0-1", "t4"),
        ("mnist-worker-1-1", "t4"),
        ("mnist-worker-2-1", "l4"),
        ("mnist-worker-3-1", "l4"),
    ]
    assert world.job["status"]["chief"]["pod"] == "mnist-worker-2-1"  # the older nodes: less risk
    world.job["spec"]["workers"]["replicas"] = 2
    result = world.reconcile(T0 + timedelta(seconds=1))
    # the fallback group's workers go, though their slots are the lowest
    assert sorted(d.name for d in result.of_type(DeleteChild)) == ["mnist-worker-0-1", "mnist-worker-1-1"]


def test_each_groups_cost_is_its_pods_at_their_nodes_prices_and_outlives_the_pods() -> None:
    from ttj.cost.prices import load_price_table
    from ttj.planner import PlannerConfig

    config = PlannerConfig(prices=load_price_table())
    groups = [
        {"name": "l4", "acceleratorType": "nvidia-l4", "maxReplicas": 1},
        {"name": "od", "provisioning": "on-demand"},
    ]
    world = World(grouped(replicas=2, minReplicas=1, groups=groups))
    l4, od = node("l4-0"), node("od-0", "on-demand")
    l4["metadata"]["labels"]["cloud.google.com/gke-accelerator"] = "nvidia-l4"
    world.observed.nodes |= {"cpu-0": node("cpu-0", "on-demand"), "l4-0": l4, "od-0": od}
    world.reconcile(T0, config)
    run_ps(world, "mnist-ps-0-abc")
    run_pod(world, "mnist-worker-0-1", "l4-0")
    run_pod(world, "mnist-worker-1-1", "od-0")
    hour = world.reconcile(T0 + timedelta(hours=1), config).status
    ledger = {
        e["name"]: (e["group"], e["usd"], e["provisioning"]) for e in hour["cost"]["pods"] if e["role"] == "worker"
    }
    l4_usd, od_usd = ledger["mnist-worker-0-1"][1], ledger["mnist-worker-1-1"][1]
    assert ledger == {
        "mnist-worker-0-1": ("l4", l4_usd, "spot"),
        "mnist-worker-1-1": ("od", od_usd, "on-demand"),
    }
    assert 0 < l4_usd < od_usd  # a spot L4 VM costs less than an on-demand T4 VM
    assert [(g["name"], g["usd"], g["settledUSD"]) for g in hour["workerGroups"]] == [
        ("l4", l4_usd, 0.0),
        ("od", od_usd, 0.0),
    ]
    assert hour["chief"]["pod"] == "mnist-worker-1-1"  # on-demand: the safest node
    # the L4 worker goes; its group keeps what it cost
    world.observed.pods.remove(world.pod("mnist-worker-0-1"))  # type: ignore[arg-type]
    world.job["spec"]["workers"]["replicas"] = 1
    later = world.reconcile(T0 + timedelta(hours=2), config).status
    by_group = {g["name"]: (g["usd"], g["settledUSD"], g["desired"]) for g in later["workerGroups"]}
    assert by_group["l4"] == (l4_usd, l4_usd, 0)
    assert by_group["od"] == (2 * od_usd, 0.0, 1)


def test_a_running_chief_stays_when_a_safer_or_faster_worker_starts() -> None:
    groups = [
        {"name": "t4", "maxReplicas": 1},
        {"name": "l4-od", "acceleratorType": "nvidia-l4", "provisioning": "on-demand"},
    ]
    world = World(grouped(replicas=1, minReplicas=1, groups=groups))
    world.observed.nodes |= {"cpu-0": node("cpu-0", "on-demand"), "t4-0": node("t4-0", age=timedelta(hours=1))}
    world.reconcile(T0)
    run_ps(world, "mnist-ps-0-abc")
    run_pod(world, "mnist-worker-0-1", "t4-0")
    world.reconcile(T0)
    assert (world.job["status"]["chief"]["pod"], world.job["status"]["chief"]["epoch"]) == ("mnist-worker-0-1", 1)
    world.job["spec"]["workers"]["replicas"] = 2
    world.reconcile(T0 + timedelta(seconds=1))
    assert live(world) == [("mnist-worker-0-1", "t4"), ("mnist-worker-1-1", "l4-od")]
    l4 = node("l4-0", "on-demand")
    l4["metadata"]["labels"]["cloud.google.com/gke-accelerator"] = "nvidia-l4"
    world.observed.nodes["l4-0"] = l4
    run_pod(world, "mnist-worker-1-1", "l4-0", T0 + timedelta(seconds=2))
    world.reconcile(T0 + timedelta(seconds=3))
    assert (world.job["status"]["chief"]["pod"], world.job["status"]["chief"]["epoch"]) == ("mnist-worker-0-1", 1)


def test_with_prices_the_slot_falling_back_is_refilled_in_the_same_pass() -> None:
    from ttj.cost.prices import load_price_table
    from ttj.planner import PlannerConfig

    config = PlannerConfig(prices=load_price_table())
    world = World(grouped(replicas=2, minReplicas=1, fallbackAfterSeconds=3))
    world.observed.nodes["cpu-0"] = node("cpu-0", "on-demand")
    world.reconcile(T0, config)
    run_ps(world, "mnist-ps-0-abc")
    unschedulable(world, T0)
    slot_1 = world.pod("mnist-worker-1-1")
    assert slot_1 is not None
    slot_1["status"]["conditions"][0]["lastTransitionTime"] = format_time(T0 + timedelta(seconds=2))
    result = world.reconcile(T0 + timedelta(seconds=3), config)
    assert [(a.name, type(a).__name__) for a in result.writes if a.kind == "Pod"] == [
        ("mnist-worker-0-1", "DeleteChild"),
        ("mnist-worker-0-2", "CreateChild"),
    ]
    assert live(world) == [("mnist-worker-0-2", "t4"), ("mnist-worker-1-1", "l4")]
