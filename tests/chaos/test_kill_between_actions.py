"""An operator killed between any two actions of a pass, at every point, then a fresh one: the same result.

The random SIGKILLs of the chaos suite land where they land; this test visits every point of the passes
of a recovery, deterministically, with the planner and the in-memory API (``ttj.planner.world``): apply
only the first ``k`` writes of a pass (the status write and the events never happen), then let a new
operator (nothing carried over but the cluster) reconcile until nothing changes. Whatever ``k``: one live
pod per slot, one chief, the loss counted once and replaced once, the epoch never back.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.unit.planner.builders import T0, job, node, pods, renew, run_pod, start, terminate
from ttj.planner import plan
from ttj.planner.world import Conflict, World

S = timedelta(seconds=1)


def started() -> World:
    world = World(job())
    start(world, [node(f"gpu-{i}", age=timedelta(hours=2 + 5 * i)) for i in range(3)])
    for second in range(3):
        world.reconcile(T0 + second * S)
    renew(world, T0 + 3 * S)
    return world


def settle(world: World, now: datetime, passes: int = 12) -> None:
    for _ in range(passes):
        before = copy.deepcopy((world.job.get("status"), world.observed))
        result = world.reconcile(now)
        if not result.writes and before == (world.job.get("status"), world.observed):
            return
    raise AssertionError("no fixed point")


def killed_after(world: World, k: int, now: datetime) -> World:
    """A copy of ``world`` where a pass applied its first ``k`` writes, then the operator died."""
    copied = copy.deepcopy(world)
    writes = plan(copied.job, copied.observed, now).writes
    for write in writes[:k]:
        try:
            copied.apply(write, now)
        except Conflict:
            break
    return copied


def check(world: World, epoch_before: int) -> None:
    alive = pods(world)
    slots = [p["metadata"]["labels"]["transient.training/slot"] for p in alive]
    assert sorted(slots) == ["0", "1", "2"], [p["metadata"]["name"] for p in alive]
    labelled = [p for p in alive if p["metadata"]["labels"].get("transient.training/chief") == "true"]
    assert len(labelled) == 1
    status = world.job["status"]
    assert (status["preemptions"], status["replacements"], status["failures"]) == (1, 1, 0)
    lease = world.observed.lease
    assert lease is not None
    assert lease["spec"]["holderIdentity"] == labelled[0]["metadata"]["name"] == status["chief"]["pod"]
    assert lease["spec"]["leaseTransitions"] >= epoch_before
    assert status["chief"]["epoch"] == lease["spec"]["leaseTransitions"]


def lose(name: str) -> Callable[[World], None]:
    def act(world: World) -> None:
        terminate(world, name, 143, pod_reason="Terminated", now=T0 + 10 * S)

    return act


def pass_lengths(act: Callable[[World], None]) -> list[tuple[int, int]]:
    """(pass, k) for every kill point of the first three passes after the loss."""
    world = started()
    act(world)
    points = []
    for n in range(3):
        now = T0 + (11 + n) * S
        points += [(n, k) for k in range(len(plan(world.job, world.observed, now).writes) + 1)]
        world.reconcile(now)
    return points


@pytest.mark.parametrize(
    ("victim", "point"),
    [(v, p) for v in ("mnist-worker-0-1", "mnist-worker-2-1") for p in pass_lengths(lose(v))],
)
def test_a_kill_between_any_two_actions_of_a_recovery_changes_nothing(victim: str, point: tuple[int, int]) -> None:
    """Worker 2 is the chief (the oldest spot node's): its loss also elects a new chief."""
    world = started()
    epoch_before = int(world.job["status"]["chief"]["epoch"])
    lose(victim)(world)
    doomed_pass, k = point
    for n in range(doomed_pass):
        world.reconcile(T0 + (11 + n) * S)
    now = T0 + (11 + doomed_pass) * S
    world = killed_after(world, k, now)  # the operator dies here; a new one starts from the cluster alone
    settle(world, now + S)
    for pod in pods(world):
        if pod["status"]["phase"] == "Pending":
            run_pod(world, pod["metadata"]["name"], f"gpu-{pod['metadata']['labels']['transient.training/slot']}")
    holder = world.observed.lease["spec"]["holderIdentity"] if world.observed.lease else None
    assert holder
    renew(world, now + 5 * S)
    settle(world, now + 6 * S)
    check(world, epoch_before)


def test_every_kill_point_is_visited() -> None:
    points: list[Any] = pass_lengths(lose("mnist-worker-2-1"))
    assert len(points) > 6, points  # the chief's loss: the replacement, the Lease, the labels, the release
