"""Worker groups: which group a slot's pod goes to, what the pod looks like, and capacity fallback."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import pytest

from tests.unit.planner.builders import T0, job, node, pods, renew, run_pod, run_ps
from ttj.api.models import JobRef, TransientTrainingJobSpec
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
    assert without == [worker_pod(JobRef.of(plain), spec, slot, 1) for slot in (0, 1)]
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


# -- moving back, make-before-break ---------------------------------------------------------------------------
MOVE_BACK_GROUPS = [
    {"name": "l4", "acceleratorType": "nvidia-l4", "maxReplicas": 2},
    {"name": "t4"},
    {"name": "t4-od", "provisioning": "on-demand", "maxReplicas": 1},
]


def pod_writes(result: Any) -> list[tuple[str, str, str]]:
    """Each pod write of a pass: its kind, the pod, and the group it is made for (creates) or why (deletes)."""
    return [
        (type(a).__name__, a.name, a.manifest["metadata"]["labels"].get("transient.training/worker-group"))
        if isinstance(a, CreateChild)
        else (type(a).__name__, a.name, a.reason)
        for a in result.writes
        if getattr(a, "kind", None) == "Pod"
    ]


def fallback_condition(world: World) -> tuple[str, str, str]:
    cond = next(c for c in world.job["status"]["conditions"] if c["type"] == "CapacityFallback")
    return cond["status"], cond["reason"], cond["message"]


def gpu_node(name: str, accelerator: str = "nvidia-tesla-t4", kind: str = "spot") -> dict[str, Any]:
    made = node(name, kind)
    made["metadata"]["labels"]["cloud.google.com/gke-accelerator"] = accelerator
    return made


def passes(world: World, now: Any) -> Any:
    """The chief renews its lease and reports a step, then an operator pass."""
    if world.observed.lease is not None:
        step = int((now - T0).total_seconds())
        epoch = world.job["status"].get("chief", {}).get("epoch", 0)
        renew(world, now, {"globalStep": step, "checkpointStep": step, "epoch": epoch})
    return world.reconcile(now)


def fallen_back_world(replicas: int, max_replicas: int, groups: list[dict[str, Any]] | None = None) -> World:
    """Every worker running in t4 (the chief is slot 0's), l4 marked out of capacity at T0."""
    world = World(
        job(
            workers={
                "replicas": replicas,
                "minReplicas": 1,
                "maxReplicas": max_replicas,
                "groups": groups or MOVE_BACK_GROUPS,
                "fallbackAfterSeconds": 60,
            }
        )
    )
    world.job["status"] = {
        "workerGroups": [
            {"name": "l4", "capacityUnavailableSince": format_time(T0), "capacityUnavailableReason": "out"}
        ]
    }
    world.observed.nodes["cpu-0"] = node("cpu-0", "on-demand")
    passes(world, T0)
    run_ps(world, "mnist-ps-0-abc")
    for slot in range(replicas):
        world.observed.nodes[f"t4-{slot}"] = node(f"t4-{slot}", age=timedelta(hours=10 - slot))
        run_pod(world, f"mnist-worker-{slot}-1", f"t4-{slot}")
    passes(world, T0 + timedelta(seconds=1))
    assert world.job["status"]["chief"]["pod"] == "mnist-worker-0-1"
    return world


#: When l4's mark has lapsed (workers.capacityRetrySeconds, by default) and new workers try it again.
RETRY = T0 + timedelta(seconds=1800)


def test_a_worker_moves_back_make_before_break_when_the_preferred_group_is_tried_again() -> None:
    world = fallen_back_world(replicas=2, max_replicas=3)
    assert live(world) == [("mnist-worker-0-1", "t4"), ("mnist-worker-1-1", "t4")]
    status, reason, _ = fallback_condition(world)
    assert (status, reason) == ("True", "GroupCapacityUnavailable")

    # l4's mark lapses: one extra worker in l4, in the free slot; nobody is deleted yet
    probe = passes(world, RETRY)
    assert pod_writes(probe) == [("CreateChild", "mnist-worker-2-1", "l4")]
    assert [(g["name"], g["desired"], g["active"], g["pending"]) for g in probe.status["workerGroups"]] == [
        ("l4", 1, 0, 1),
        ("t4", 2, 2, 0),
        ("t4-od", 0, 0, 0),
    ]
    assert (probe.status["workers"]["active"], probe.status["workers"]["pending"]) == (2, 1)
    assert fallback_condition(world) == (
        "True",
        "FallbackWorkers",
        "1 worker(s) run in a less preferred group than l4 (1 in group t4); moving back one at a time once its "
        "capacity is not known to be out",
    )

    # while it is pending, the job holds replicas + 1 workers: nothing is scaled down, nothing more created
    assert pod_writes(passes(world, RETRY + timedelta(seconds=30))) == []

    # it runs: the fallback worker that is not the chief goes
    world.observed.nodes["l4-0"] = gpu_node("l4-0", "nvidia-l4")
    run_pod(world, "mnist-worker-2-1", "l4-0", RETRY + timedelta(seconds=40))
    moved = passes(world, RETRY + timedelta(seconds=41))
    assert pod_writes(moved) == [("DeleteChild", "mnist-worker-1-1", "ScaledDown")]
    assert [(e.type, e.reason, e.message) for e in moved.events if e.reason == "MovedBack"] == [
        (
            "Normal",
            "MovedBack",
            "worker slot 1 moved from group t4 back to group l4 (as slot 2: mnist-worker-2-1 runs, "
            "mnist-worker-1-1 released)",
        )
    ]
    assert live(world) == [("mnist-worker-0-1", "t4"), ("mnist-worker-2-1", "l4")]
    assert world.job["status"]["chief"]["pod"] == "mnist-worker-0-1"  # the chief stays where it is
    assert fallback_condition(world) == ("False", "PreferredGroups", "no worker group is skipped for want of capacity")

    # the chief in t4 is not moved back: nothing more happens
    assert pod_writes(passes(world, RETRY + timedelta(seconds=60))) == []


def test_the_worker_that_moved_back_is_named_even_when_it_started_in_the_chiefs_second() -> None:
    """Start times have whole seconds, so the worker moving back may tie with the chief as the newest; the chief
    is never the worker created to move back."""
    world = fallen_back_world(replicas=2, max_replicas=3)
    assert pod_writes(passes(world, RETRY)) == [("CreateChild", "mnist-worker-2-1", "l4")]
    world.observed.nodes["l4-0"] = gpu_node("l4-0", "nvidia-l4")
    run_pod(world, "mnist-worker-2-1", "l4-0", T0)  # the chief's own startTime
    moved = passes(world, RETRY + timedelta(seconds=1))
    assert pod_writes(moved) == [("DeleteChild", "mnist-worker-1-1", "ScaledDown")]
    assert [e.message for e in moved.events if e.reason == "MovedBack"] == [
        "worker slot 1 moved from group t4 back to group l4 (as slot 2: mnist-worker-2-1 runs, mnist-worker-1-1 "
        "released)"
    ]


def test_the_on_demand_fallback_is_released_first_and_moving_back_stops_when_the_group_is_full() -> None:
    world = fallen_back_world(replicas=3, max_replicas=5)
    # a fourth worker finds no t4 capacity either: its slot falls back to on-demand
    world.job["spec"]["workers"]["replicas"] = 4
    passes(world, T0 + timedelta(seconds=2))
    unschedulable(world, T0 + timedelta(seconds=2))
    assert pod_writes(passes(world, T0 + timedelta(seconds=62))) == [
        ("DeleteChild", "mnist-worker-3-1", "CapacityFallback"),
        ("CreateChild", "mnist-worker-3-2", "t4-od"),
    ]
    world.observed.nodes["od-0"] = gpu_node("od-0", kind="on-demand")
    run_pod(world, "mnist-worker-3-2", "od-0", T0 + timedelta(seconds=63))
    passes(world, T0 + timedelta(seconds=64))
    assert world.job["status"]["chief"]["pod"] == "mnist-worker-0-1"

    # l4 is tried again: the first move back releases the on-demand worker, the dearest, the second a t4 one
    steps = []
    for n, at in enumerate((RETRY, RETRY + timedelta(seconds=20))):
        created_now = pod_writes(passes(world, at))
        name = created_now[0][1]
        world.observed.nodes[f"l4-{n}"] = gpu_node(f"l4-{n}", "nvidia-l4")
        run_pod(world, name, f"l4-{n}", at + timedelta(seconds=5))
        released = pod_writes(passes(world, at + timedelta(seconds=10)))
        steps.append((created_now, released))
        if n == 0:
            # the released worker is still there (its finalizer goes in this pass): the next move back waits
            assert world.pod(released[0][1]) is not None
            assert pod_writes(passes(world, at + timedelta(seconds=15))) == []
            assert world.pod(released[0][1]) is None
    assert steps == [
        ([("CreateChild", "mnist-worker-4-1", "l4")], [("DeleteChild", "mnist-worker-3-2", "ScaledDown")]),
        ([("CreateChild", "mnist-worker-3-3", "l4")], [("DeleteChild", "mnist-worker-2-1", "ScaledDown")]),
    ]
    assert live(world) == [
        ("mnist-worker-0-1", "t4"),
        ("mnist-worker-1-1", "t4"),
        ("mnist-worker-3-3", "l4"),
        ("mnist-worker-4-1", "l4"),
    ]
    # l4 holds its maxReplicas: the t4 workers are no fallback any more; t4's mark stands (its workers that run
    # were placed before it), until it lapses
    assert pod_writes(passes(world, RETRY + timedelta(seconds=60))) == []
    why = "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."
    assert fallback_condition(world) == (
        "True",
        "GroupCapacityUnavailable",
        f"group t4 skipped since {format_time(T0 + timedelta(seconds=62))}: Unschedulable: {why}",
    )
    assert pod_writes(passes(world, T0 + timedelta(seconds=62 + 1800))) == []
    assert fallback_condition(world) == ("False", "PreferredGroups", "no worker group is skipped for want of capacity")


def test_a_worker_that_does_not_move_back_in_time_is_deleted_its_group_marked_and_nothing_replaces_it() -> None:
    world = fallen_back_world(replicas=2, max_replicas=3)
    assert pod_writes(passes(world, RETRY)) == [("CreateChild", "mnist-worker-2-1", "l4")]
    unschedulable(world, RETRY)
    assert pod_writes(passes(world, RETRY + timedelta(seconds=59))) == []
    gave_up = passes(world, RETRY + timedelta(seconds=60))
    assert pod_writes(gave_up) == [("DeleteChild", "mnist-worker-2-1", "CapacityFallback")]
    why = "Unschedulable: 0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."
    assert [(e.type, e.message) for e in gave_up.events if e.reason in ("CapacityFallback", "MovedBack")] == [
        (
            "Warning",
            f"worker slot 2 did not move back to group l4 (unschedulable for 60s: {why}): it is deleted, and the "
            "workers stay where they are",
        )
    ]
    assert live(world) == [("mnist-worker-0-1", "t4"), ("mnist-worker-1-1", "t4")]
    since = format_time(RETRY + timedelta(seconds=60))
    assert fallback_condition(world) == (
        "True",
        "GroupCapacityUnavailable",
        f"group l4 skipped since {since}: {why}; 1 worker(s) run in a less preferred group than l4 (1 in group "
        "t4); moving back one at a time once its capacity is not known to be out",
    )
    # l4 is skipped again: no new attempt until the mark lapses
    assert pod_writes(passes(world, RETRY + timedelta(seconds=1000))) == []


def test_without_a_free_slot_or_within_the_budget_no_worker_moves_back() -> None:
    world = fallen_back_world(replicas=2, max_replicas=2)
    assert pod_writes(passes(world, RETRY)) == []
    assert fallback_condition(world) == (
        "True",
        "FallbackWorkers",
        "1 worker(s) run in a less preferred group than l4 (1 in group t4); no free worker slot to move back "
        "make-before-break (set workers.maxReplicas above replicas)",
    )

    from ttj.api.models import TransientTrainingJobSpec as Spec
    from ttj.cost.model import worker_hourly_rate
    from ttj.cost.prices import load_price_table
    from ttj.planner import PlannerConfig
    from ttj.planner.groups import groups_of

    config = PlannerConfig(prices=load_price_table())
    world = fallen_back_world(replicas=2, max_replicas=3)
    world.reconcile(T0 + timedelta(seconds=2), config)
    cost = world.job["status"]["cost"]
    l4_rate = worker_hourly_rate(groups_of(Spec.model_validate(world.job["spec"]))[0].spec, config.prices)  # type: ignore[arg-type]
    # room for what runs over the next 15 minutes, and half an l4 worker more
    quarter = 0.25
    spent_by_retry = cost["usdPerHour"] * (RETRY - T0).total_seconds() / 3600
    world.job["spec"]["budget"] = {
        "maxCostUSD": round(spent_by_retry + cost["usdPerHour"] * quarter + 0.5 * l4_rate * quarter, 4)
    }
    assert pod_writes(passes_priced(world, RETRY, config)) == []
    world.job["spec"]["budget"]["maxCostUSD"] += l4_rate * quarter
    assert pod_writes(passes_priced(world, RETRY + timedelta(seconds=1), config)) == [
        ("CreateChild", "mnist-worker-2-1", "l4")
    ]


def passes_priced(world: World, now: Any, config: Any) -> Any:
    step = int((now - T0).total_seconds())
    renew(world, now, {"globalStep": step, "checkpointStep": step, "epoch": world.job["status"]["chief"]["epoch"]})
    return world.reconcile(now, config)


def test_a_chief_in_a_fallback_group_is_not_moved_and_a_scale_down_is_no_move_back() -> None:
    world = fallen_back_world(replicas=1, max_replicas=3)
    assert pod_writes(passes(world, RETRY)) == []  # the only worker is the chief: it stays in t4
    assert fallback_condition(world)[:2] == ("False", "PreferredGroups")

    world = fallen_back_world(replicas=2, max_replicas=3)
    world.job["spec"]["workers"]["replicas"] = 3
    passes(world, T0 + timedelta(seconds=2))  # l4 is still out: t4
    world.observed.nodes["t4-2"] = node("t4-2")
    run_pod(world, "mnist-worker-2-1", "t4-2", T0 + timedelta(seconds=3))
    passes(world, RETRY - timedelta(seconds=10))
    world.job["spec"]["workers"]["replicas"] = 2
    scaled = passes(world, RETRY)
    assert pod_writes(scaled) == [("DeleteChild", "mnist-worker-2-1", "ScaledDown")]
    assert not [e for e in scaled.events if e.reason == "MovedBack"]


def test_budget_projections_price_each_worker_at_its_group() -> None:
    from ttj.cost.prices import load_price_table
    from ttj.planner import PlannerConfig
    from ttj.planner.classify import classify_pod
    from ttj.planner.groups import Unavailable, group_worker_pod, groups_of
    from ttj.planner.observed import Observed
    from ttj.planner.stages.costing import cost_and_budget

    prices = load_price_table()

    def hourly(accelerator: str, provisioning: str) -> float:
        host = prices.host_machine_types[accelerator]
        price = prices.node_price(
            machine_type=host, accelerator_type=accelerator, accelerator_count=1, provisioning=provisioning
        )
        return price.usd_per_hour

    l4, t4, od = hourly("nvidia-l4", "spot"), hourly("nvidia-tesla-t4", "spot"), hourly("nvidia-tesla-t4", "on-demand")
    groups = [
        {"name": "l4", "acceleratorType": "nvidia-l4", "maxReplicas": 1},
        {"name": "t4"},
        {"name": "od", "provisioning": "on-demand"},
    ]
    out = Unavailable(T0, "out")

    def projected(
        replicas: int, marked: tuple[str, ...], pending_in: tuple[str, ...], with_groups: bool = True
    ) -> float:
        """Per hour: what the budget projects for the pending workers and the new ones (nothing runs yet)."""
        manifest = (
            grouped(replicas=replicas, groups=groups, minReplicas=1)
            if with_groups
            else job(workers={"replicas": replicas, "minReplicas": 1})
        )
        spec = TransientTrainingJobSpec.model_validate(manifest["spec"])
        by_name = {g.name: g for g in groups_of(spec)}
        made = [group_worker_pod(JobRef.of(manifest), by_name[name], slot, 1) for slot, name in enumerate(pending_in)]
        for pod in made:
            pod["status"] = {"phase": "Pending"}
        observed = Observed(pods=made)
        verdicts = {p["metadata"]["name"]: classify_pod(p, {}, T0, timedelta(minutes=5)) for p in made}
        costing = cost_and_budget(
            spec,
            observed,
            verdicts,
            None,
            now=T0,
            config=PlannerConfig(prices=prices),
            groups=groups_of(spec),
            unavailable=dict.fromkeys(marked, out),
        )
        assert costing.budget is not None
        return round(costing.budget.projected_usd / 0.25, 6)

    cases = {
        "no groups: spec.workers' T4 spot": projected(2, (), (), with_groups=False),
        "the first group": projected(1, (), ()),
        "the first group marked: the next": projected(1, ("l4",), ()),
        "two marked: on-demand": projected(1, ("l4", "t4"), ()),
        "l4 full with a pending worker: l4 pending, t4 new": projected(2, (), ("l4",)),
        "pending in t4 and od, one more to l4": projected(3, (), ("t4", "od")),
    }
    assert cases == {
        "no groups: spec.workers' T4 spot": round(2 * t4, 6),
        "the first group": round(l4, 6),
        "the first group marked: the next": round(t4, 6),
        "two marked: on-demand": round(od, 6),
        "l4 full with a pending worker: l4 pending, t4 new": round(l4 + t4, 6),
        "pending in t4 and od, one more to l4": round(t4 + od + l4, 6),
    }
    assert len({round(l4, 6), round(t4, 6), round(od, 6)}) == 3


def test_a_group_in_another_zone_than_the_parameter_server_pays_for_the_traffic() -> None:
    """The chief reports 100 MB on its one PS (zone a); the fallback group runs in zone b: each of its steps
    moves 200 MB across zones, priced per GiB into its group, its ledger entry and the job's cost."""
    from ttj.cost.prices import load_price_table
    from ttj.cost.traffic import GIB
    from ttj.planner import PlannerConfig

    config = PlannerConfig(prices=load_price_table())
    groups = [{"name": "t4-a", "zone": "zone-a", "maxReplicas": 1}, {"name": "t4-b", "zone": "zone-b"}]
    world = World(grouped(replicas=2, minReplicas=1, groups=groups))
    zoned = {"cpu-0": node("cpu-0", "on-demand"), "a-0": node("a-0"), "b-0": node("b-0")}
    for name, zone in (("cpu-0", "zone-a"), ("a-0", "zone-a"), ("b-0", "zone-b")):
        zoned[name]["metadata"]["labels"]["topology.kubernetes.io/zone"] = zone
    world.observed.nodes |= zoned
    world.reconcile(T0, config)
    run_ps(world, "mnist-ps-0-abc")
    run_pod(world, "mnist-worker-0-1", "a-0")
    run_pod(world, "mnist-worker-1-1", "b-0")
    report = {"globalStep": 0, "epoch": 1, "parameterBytes": [100 * 10**6]}
    renew(world, T0, report)
    first = world.reconcile(T0 + timedelta(minutes=1), config).status
    assert first["cost"]["crossZone"] == {
        "usd": 0.0,
        "gib": 0.0,
        "step": 0,
        "pricedAt": "2026-11-21T12:01:00.000000Z",
        "usdPerHour": 0.0,
    }
    renew(world, T0 + timedelta(hours=1), report | {"globalStep": 7200})
    hour = world.reconcile(T0 + timedelta(hours=1, minutes=1), config).status
    # both ran the whole hour: 3600 steps each, the zone-b worker's at 200 MB across
    usd = 3600 * 200 * 10**6 / GIB * 0.01
    cost = hour["cost"]
    assert cost["crossZone"] == {
        "usd": pytest.approx(usd),
        "gib": pytest.approx(usd / 0.01),
        "step": 7200,
        "pricedAt": "2026-11-21T13:01:00.000000Z",
        "usdPerHour": pytest.approx(usd),
    }
    ledger = {e["name"]: (e["usd"], e.get("crossZoneUSD", 0.0)) for e in cost["pods"]}
    assert cost["usd"] == pytest.approx(sum(gpu + traffic for gpu, traffic in ledger.values()))
    assert ledger["mnist-worker-1-1"][1] == pytest.approx(usd)
    assert [(g["name"], g["usd"], g.get("crossZoneUSD", 0.0)) for g in hour["workerGroups"]] == [
        ("t4-a", ledger["mnist-worker-0-1"][0], 0.0),
        ("t4-b", pytest.approx(ledger["mnist-worker-1-1"][0] + usd), pytest.approx(usd)),
    ]
    # the zone-b worker goes: its group keeps what its traffic cost
    world.observed.pods.remove(world.pod("mnist-worker-1-1"))  # type: ignore[arg-type]
    world.job["spec"]["workers"]["replicas"] = 1
    later = world.reconcile(T0 + timedelta(hours=2), config).status
    assert {g["name"]: g.get("crossZoneUSD", 0.0) for g in later["workerGroups"]} == {
        "t4-a": 0.0,
        "t4-b": pytest.approx(usd),
    }
    assert later["cost"]["crossZone"]["usd"] == pytest.approx(usd)


def test_a_workers_share_of_the_traffic_follows_the_steps_per_second_the_chief_measured_for_its_slot() -> None:
    """Two workers in zone b, the PS in zone a: the chief measures slot 0 at 3 steps/s and slot 1 at 1, so of an
    hour's 14,400 steps slot 0's worker is charged for 10,800 and slot 1's for 3,600 (7,200 each by seconds)."""
    from ttj.cost.prices import load_price_table
    from ttj.cost.traffic import GIB
    from ttj.planner import PlannerConfig

    config = PlannerConfig(prices=load_price_table())
    groups = [{"name": "fast", "zone": "zone-b", "maxReplicas": 1}, {"name": "slow", "zone": "zone-b"}]
    world = World(grouped(replicas=2, minReplicas=1, groups=groups))
    zoned = {"cpu-0": node("cpu-0", "on-demand"), "b-0": node("b-0"), "b-1": node("b-1")}
    for name, zone in (("cpu-0", "zone-a"), ("b-0", "zone-b"), ("b-1", "zone-b")):
        zoned[name]["metadata"]["labels"]["topology.kubernetes.io/zone"] = zone
    world.observed.nodes |= zoned
    world.reconcile(T0, config)
    run_ps(world, "mnist-ps-0-abc")
    run_pod(world, "mnist-worker-0-1", "b-0")
    run_pod(world, "mnist-worker-1-1", "b-1")
    report = {"globalStep": 0, "epoch": 1, "parameterBytes": [100 * 10**6], "slotStepsPerSecond": {"0": 3.0, "1": 1}}
    renew(world, T0, report)
    world.reconcile(T0 + timedelta(minutes=1), config)
    renew(world, T0 + timedelta(hours=1), report | {"globalStep": 14400})
    status = world.reconcile(T0 + timedelta(hours=1, minutes=1), config).status
    per_step = 200 * 10**6 / GIB * 0.01
    ledger = {e["name"]: e.get("crossZoneUSD", 0.0) for e in status["cost"]["pods"] if e["role"] == "worker"}
    groups_usd = {g["name"]: g.get("crossZoneUSD", 0.0) for g in status["workerGroups"]}
    assert (ledger, groups_usd) == (
        {"mnist-worker-0-1": pytest.approx(10800 * per_step), "mnist-worker-1-1": pytest.approx(3600 * per_step)},
        {"fast": pytest.approx(10800 * per_step), "slow": pytest.approx(3600 * per_step)},
    )
    assert status["cost"]["crossZone"]["usd"] == pytest.approx(14400 * per_step)


# -- how long a group found out of capacity is skipped ----------------------------------------------------------
def test_a_groups_mark_lasts_capacity_retry_seconds() -> None:
    from ttj.api.models import WorkerGroupStatus
    from ttj.planner.groups import next_capacity_retry, recorded_unavailable

    marks = [
        WorkerGroupStatus(name="l4", capacity_unavailable_since=format_time(T0), capacity_unavailable_reason="out"),
        WorkerGroupStatus(name="t4", capacity_unavailable_since=format_time(T0 + timedelta(seconds=50))),
        WorkerGroupStatus(name="t4-od"),
    ]

    def skipped(retry: int | None, seconds: int) -> tuple[list[str], Any]:
        spec = TransientTrainingJobSpec.model_validate(
            grouped(replicas=1, minReplicas=1, **({} if retry is None else {"capacityRetrySeconds": retry}))["spec"]
        )
        now = T0 + timedelta(seconds=seconds)
        found = recorded_unavailable(spec, marks, now)
        wake = next_capacity_retry(spec, found)
        return sorted(found), None if wake is None else (wake - T0).total_seconds()

    cases = {
        "default, just marked": skipped(None, 60),
        "default, l4's 30 minutes over": skipped(None, 1800),
        "default, both over": skipped(None, 1850),
        "120 s, l4's not over": skipped(120, 119),
        "120 s, l4's over": skipped(120, 120),
        "120 s, both over": skipped(120, 170),
    }
    assert cases == {
        "default, just marked": (["l4", "t4"], 1800.0),
        "default, l4's 30 minutes over": (["t4"], 1850.0),
        "default, both over": ([], None),
        "120 s, l4's not over": (["l4", "t4"], 120.0),
        "120 s, l4's over": (["t4"], 170.0),
        "120 s, both over": ([], None),
    }


def test_capacity_retry_seconds_is_checked_by_the_api() -> None:
    import pydantic
    import pytest

    for bad in (0, -1, 2**31):
        with pytest.raises(pydantic.ValidationError, match="capacityRetrySeconds"):
            TransientTrainingJobSpec.model_validate(grouped(capacityRetrySeconds=bad)["spec"])
    spec = TransientTrainingJobSpec.model_validate(grouped(capacityRetrySeconds=1)["spec"])
    assert spec.workers.capacity_retry_seconds == 1


# -- which worker a move back (or a scale-down) releases -------------------------------------------------------
#: l4 spot preferred, then on-demand T4 (listed before spot T4: kept to one, e.g. for a chief), then spot T4.
PRICED_GROUPS = [
    {"name": "l4", "acceleratorType": "nvidia-l4", "maxReplicas": 2},
    {"name": "t4-od", "provisioning": "on-demand", "maxReplicas": 1},
    {"name": "t4"},
]
#: USD per hour of one worker of each group (the packaged gce-us-central1 table's order: od > l4 > t4).
PRICES = {"l4": 0.283, "t4-od": 0.54, "t4": 0.15}


def release_case(
    workers: list[tuple[str, str, int | None]], *, chief: str, prices: dict[str, float] | None = None
) -> list[str]:
    """The release order of ``workers`` (group, state, start second: None while pending), slots in order; the
    chief is slot ``chief``'s; names are ``slot/group``."""
    from ttj.planner.classify import classify_pod
    from ttj.planner.groups import group_worker_pod, groups_of
    from ttj.planner.stages.slots import release_order

    manifest = grouped(replicas=len(workers), groups=PRICED_GROUPS, maxReplicas=8)
    spec = TransientTrainingJobSpec.model_validate(manifest["spec"])
    by_name = {g.name: g for g in groups_of(spec)}
    filled, nodes, names = {}, {}, {}
    for slot, (group, state, started) in enumerate(workers):
        pod = group_worker_pod(JobRef.of(manifest), by_name[group], slot, 1)
        if state == "running":
            assert started is not None
            at = T0 + timedelta(seconds=started)
            nodes[f"n{slot}"] = node(f"n{slot}", "on-demand" if group == "t4-od" else "spot")
            pod["spec"]["nodeName"] = f"n{slot}"
            pod["status"] = {"phase": "Running", "startTime": format_time(at)}
        else:
            pod["status"] = {"phase": "Pending"}
        filled[slot] = pod
        names[pod["metadata"]["name"]] = f"{slot}/{group}"
    now = T0 + timedelta(seconds=100)
    verdicts = {
        name: classify_pod(p, nodes, now, timedelta(minutes=5))
        for p in filled.values()
        for name in [p["metadata"]["name"]]
    }
    holder = next(n for n, label in names.items() if label == chief)
    order = release_order(filled, verdicts, holder, groups_of(spec), PRICES if prices is None else prices)
    return [names[filled[slot]["metadata"]["name"]] for slot in order]


def test_a_move_back_releases_the_dearest_worker_behind_the_new_one() -> None:
    running = "running"
    cases = {
        "an l4 worker moved back: the on-demand one goes first, though spot t4 is listed after it": release_case(
            [("t4", running, 0), ("t4-od", running, 1), ("t4", running, 2), ("l4", running, 50)], chief="0/t4"
        ),
        "without prices: the order of preference (least preferred first)": release_case(
            [("t4", running, 0), ("t4-od", running, 1), ("t4", running, 2), ("l4", running, 50)],
            chief="0/t4",
            prices={},
        ),
        "the new worker's group is dearer than the spot fallback's: the new one stays": release_case(
            [("t4", running, 0), ("t4", running, 1), ("l4", running, 50)], chief="0/t4"
        ),
        "equal prices behind the new one: the highest slot": release_case(
            [("t4-od", running, 0), ("t4", running, 1), ("t4", running, 2), ("l4", running, 50)], chief="0/t4-od"
        ),
        "a pending worker goes before any running one": release_case(
            [("t4-od", running, 0), ("t4", None, None), ("l4", running, 50)], chief="0/t4-od"
        ),
        "the newest in the least preferred group (a replacement): nothing is behind it, the order of preference": (
            release_case([("l4", running, 0), ("t4-od", running, 1), ("t4", running, 50)], chief="0/l4")
        ),
        "the chief is never released before another worker, however dear": release_case(
            [("t4-od", running, 0), ("t4", running, 1), ("l4", running, 50)], chief="0/t4-od"
        ),
    }
    assert cases == {
        "an l4 worker moved back: the on-demand one goes first, though spot t4 is listed after it": [
            "1/t4-od",
            "2/t4",
            "3/l4",
            "0/t4",
        ],
        "without prices: the order of preference (least preferred first)": ["2/t4", "1/t4-od", "3/l4", "0/t4"],
        "the new worker's group is dearer than the spot fallback's: the new one stays": ["1/t4", "2/l4", "0/t4"],
        "equal prices behind the new one: the highest slot": ["2/t4", "1/t4", "3/l4", "0/t4-od"],
        "a pending worker goes before any running one": ["1/t4", "2/l4", "0/t4-od"],
        "the newest in the least preferred group (a replacement): nothing is behind it, the order of preference": [
            "2/t4",
            "1/t4-od",
            "0/l4",
        ],
        "the chief is never released before another worker, however dear": ["1/t4", "2/l4", "0/t4-od"],
    }


def test_with_prices_a_move_back_releases_the_on_demand_fallback_listed_before_spot() -> None:
    """capacityRetrySeconds 120: l4 and t4-od are out when the job starts, so its three workers run in spot t4
    (the chief in slot 0). t4-od's mark lapses first: one worker moves back to it. Then l4's: its worker runs, and
    the on-demand worker goes, the dearest, though spot t4 is the least preferred group."""
    from ttj.cost.prices import load_price_table
    from ttj.planner import PlannerConfig

    config = PlannerConfig(prices=load_price_table())
    world = World(
        job(
            workers={
                "replicas": 3,
                "minReplicas": 1,
                "maxReplicas": 4,
                "groups": PRICED_GROUPS,
                "fallbackAfterSeconds": 60,
                "capacityRetrySeconds": 120,
            }
        )
    )
    world.job["status"] = {
        "workerGroups": [
            {"name": "l4", "capacityUnavailableSince": format_time(T0), "capacityUnavailableReason": "out"},
            {
                "name": "t4-od",
                "capacityUnavailableSince": format_time(T0 - timedelta(seconds=100)),
                "capacityUnavailableReason": "out",
            },
        ]
    }
    world.observed.nodes["cpu-0"] = node("cpu-0", "on-demand")
    world.reconcile(T0, config)
    run_ps(world, "mnist-ps-0-abc")
    assert live(world) == [("mnist-worker-0-1", "t4"), ("mnist-worker-1-1", "t4"), ("mnist-worker-2-1", "t4")]
    for slot in range(3):
        world.observed.nodes[f"t4-{slot}"] = node(f"t4-{slot}", age=timedelta(hours=10 - slot))
        run_pod(world, f"mnist-worker-{slot}-1", f"t4-{slot}")
    world.reconcile(T0 + timedelta(seconds=1), config)
    assert world.job["status"]["chief"]["pod"] == "mnist-worker-0-1"
    waiting = passes_priced(world, T0 + timedelta(seconds=10), config)
    assert (pod_writes(waiting), waiting.requeue_after) == ([], 10.0)  # woken when t4-od's mark lapses

    def move_back(at: timedelta, node_name: str, kind: str, accelerator: str) -> list[Any]:
        """A pass at T0 + ``at`` creates a worker, which then runs; the pass after releases one."""
        made = pod_writes(passes_priced(world, T0 + at, config))
        world.observed.nodes[node_name] = gpu_node(node_name, accelerator, kind)
        run_pod(world, made[0][1], node_name, T0 + at + timedelta(seconds=5))
        moved = passes_priced(world, T0 + at + timedelta(seconds=6), config)
        passes_priced(world, T0 + at + timedelta(seconds=7), config)  # the released pod goes
        return [made, pod_writes(moved), [e.message for e in moved.events if e.reason == "MovedBack"]]

    assert move_back(timedelta(seconds=20), "od-0", "on-demand", "nvidia-tesla-t4") == [
        [("CreateChild", "mnist-worker-3-1", "t4-od")],
        [("DeleteChild", "mnist-worker-2-1", "ScaledDown")],
        [
            "worker slot 2 moved from group t4 back to group t4-od (as slot 3: mnist-worker-3-1 runs, "
            "mnist-worker-2-1 released)"
        ],
    ]
    assert pod_writes(passes_priced(world, T0 + timedelta(seconds=119), config)) == []  # l4 still skipped
    assert move_back(timedelta(seconds=120), "l4-0", "spot", "nvidia-l4") == [
        [("CreateChild", "mnist-worker-2-2", "l4")],
        [("DeleteChild", "mnist-worker-3-1", "ScaledDown")],
        [
            "worker slot 3 moved from group t4-od back to group l4 (as slot 2: mnist-worker-2-2 runs, "
            "mnist-worker-3-1 released)"
        ],
    ]
    assert live(world) == [("mnist-worker-0-1", "t4"), ("mnist-worker-1-1", "t4"), ("mnist-worker-2-2", "l4")]


def test_a_groups_preemption_grace_overrides_the_workers_and_the_others_inherit_it() -> None:
    """Each group's nodes may give their own window after SIGTERM (a node pool with a lengthened graceful
    termination beside one without): its pods' trainer deadline and grace follow the group."""
    groups = [{**GROUPS[0], "preemptionGraceSeconds": 90}, GROUPS[1], GROUPS[2]]
    result = plan(grouped(3, groups, preemptionGraceSeconds=25), World(job()).observed, T0)
    pods = sorted(created(result), key=lambda p: p["metadata"]["name"])
    got = [
        (
            p["metadata"]["labels"]["transient.training/worker-group"],
            p["spec"]["terminationGracePeriodSeconds"],
            env(p, "TTJ_TERMINATION_GRACE_SECONDS"),
        )
        for p in pods
    ]
    assert got == [("l4", 90, "87"), ("l4", 90, "87"), ("t4", 30, "22")]
