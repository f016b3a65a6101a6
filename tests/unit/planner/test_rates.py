"""Steps per second by worker group: the chief's per-slot rates mapped through each slot's running pod to its
group (status.workerGroups[].stepsPerSecond), the job's total (status.progress.stepsPerSecond), and the job's
batch size on the pods of a group with its own."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from tests.unit.planner.builders import T0, job, node, pods, renew, start
from ttj.planner.rates import pod_steps_per_second, slot_groups
from ttj.planner.world import World


def grouped() -> dict[str, Any]:
    groups = [
        {"name": "l4", "acceleratorType": "nvidia-l4", "batchSize": 256, "maxReplicas": 2},
        {"name": "t4"},
    ]
    return job(workers={"replicas": 3, "maxReplicas": 4, "groups": groups})


def test_each_groups_steps_per_second_is_the_sum_over_the_slots_its_running_pods_hold() -> None:
    world = World(grouped())
    start(world, [node(f"gpu-{i}") for i in range(3)])
    assert [(g["name"], g.get("stepsPerSecond")) for g in world.job["status"]["workerGroups"]] == [
        ("l4", None),
        ("t4", None),
    ]  # no rates reported yet
    later = T0 + timedelta(seconds=30)
    # slots 0 and 1 are l4's, slot 2 t4's; slot 3 has no pod (a stale rate of a gone worker counts nowhere)
    renew(world, later, {"globalStep": 300, "epoch": 1, "slotStepsPerSecond": {"0": 3.0, "1": 2.5, "2": 1.25, "3": 9}})
    world.reconcile(later)
    status = world.job["status"]
    assert [(g["name"], g["stepsPerSecond"]) for g in status["workerGroups"]] == [("l4", 5.5), ("t4", 1.25)]
    assert status["progress"]["stepsPerSecond"] == pytest.approx(15.75)
    # a report without rates (a chief that has not measured yet) leaves both unset
    renew(world, later + timedelta(seconds=1), {"globalStep": 310, "epoch": 1})
    world.reconcile(later + timedelta(seconds=1))
    assert [g.get("stepsPerSecond") for g in world.job["status"]["workerGroups"]] == [None, None]
    assert "stepsPerSecond" not in world.job["status"]["progress"]


def test_only_a_group_that_sets_its_own_batch_size_gives_its_pods_the_jobs() -> None:
    world = World(grouped())
    start(world, [node(f"gpu-{i}") for i in range(3)])

    def batch_sizes(pod: dict[str, Any]) -> tuple[str | None, ...]:
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        return (
            pod["metadata"]["labels"]["transient.training/worker-group"],
            env["TTJ_BATCH_SIZE"],
            env.get("TTJ_JOB_BATCH_SIZE"),
        )

    assert sorted(batch_sizes(p) for p in pods(world)) == [
        ("l4", "256", "128"),
        ("l4", "256", "128"),
        ("t4", "128", None),
    ]


def worker(name: str, slot: int, group: str | None, phase: str = "Running", deleting: bool = False) -> dict[str, Any]:
    labels = {"transient.training/role": "worker", "transient.training/slot": str(slot)}
    if group is not None:
        labels["transient.training/worker-group"] = group
    metadata: dict[str, Any] = {"name": name, "labels": labels}
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-21T12:00:00Z"
    return {"metadata": metadata, "status": {"phase": phase}}


@pytest.mark.parametrize(
    ("pods_", "groups"),
    [
        ([worker("j-worker-0-1", 0, "a"), worker("j-worker-1-1", 1, "b")], {0: "a", 1: "b"}),
        ([worker("j-worker-0-1", 0, "b"), worker("j-worker-0-2", 0, "a")], {0: "a"}),  # the latest incarnation
        ([worker("j-worker-0-1", 0, "b"), worker("j-worker-0-2", 0, "a", phase="Pending")], {0: "b"}),
        ([worker("j-worker-0-1", 0, "b", deleting=True)], {}),
        ([worker("j-worker-0-1", 0, "b", phase="Succeeded")], {}),
        ([worker("j-worker-0-1", 0, None)], {}),  # a job without groups
    ],
)
def test_slot_groups(pods_: list[dict[str, Any]], groups: dict[int, str]) -> None:
    assert slot_groups(pods_) == groups


@pytest.mark.parametrize(
    ("pods_", "rates", "expected"),
    [
        (
            [worker("j-worker-0-1", 0, "a"), worker("j-worker-1-1", 1, None)],
            {0: 2.0, 1: 0.5},
            {"j-worker-0-1": 2.0, "j-worker-1-1": 0.5},
        ),
        (
            [worker("j-worker-0-1", 0, "a"), worker("j-worker-0-2", 0, "b")],
            {0: 2.0},
            {"j-worker-0-2": 2.0},
        ),  # the latest
        ([worker("j-worker-0-1", 0, "a", phase="Pending")], {0: 2.0}, {}),  # a slot no running pod holds
        ([worker("j-worker-0-1", 0, "a")], {3: 2.0}, {}),  # a stale slot's rate
        ([worker("j-worker-0-1", 0, "a")], None, {}),  # no rates reported
    ],
)
def test_pod_steps_per_second(
    pods_: list[dict[str, Any]], rates: dict[int, float] | None, expected: dict[str, float]
) -> None:
    assert pod_steps_per_second(rates, pods_) == expected
