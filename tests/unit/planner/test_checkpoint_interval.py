"""The adaptive checkpoint interval: Young-Daly from the chief node's hazard and the measured write time."""

from __future__ import annotations

import json
import math
from datetime import timedelta

import pytest

from tests.unit.planner.builders import T0, job, node, renew, start
from ttj.api.models import TransientTrainingJobSpec
from ttj.planner.stages.checkpoint_interval import (
    REPUBLISH_TOLERANCE,
    adaptive_checkpoint_interval,
    choose_interval,
    measured_hazard,
    young_daly_seconds,
)
from ttj.planner.world import World
from ttj_contract import ANNOTATION_CHECKPOINT_INTERVAL, Provisioning

ADAPTIVE = {"uri": "/ckpt", "adaptive": True, "minIntervalSeconds": 30, "maxIntervalSeconds": 3600}


def spec(**checkpoint: object) -> TransientTrainingJobSpec:
    return TransientTrainingJobSpec.model_validate(job(checkpoint={**ADAPTIVE, **checkpoint})["spec"])


def test_young_daly_is_the_square_root_of_twice_cost_times_mtbf() -> None:
    assert young_daly_seconds(2.0, 1 / 3600) == pytest.approx(math.sqrt(2 * 2.0 * 3600))
    assert young_daly_seconds(2.0, 0.0) == math.inf


def test_measured_hazard_falls_with_age_on_preemptible_k80s() -> None:
    young = measured_hazard("nvidia-tesla-k80", 0.0)
    old = measured_hazard("nvidia-tesla-k80", 12 * 3600.0)
    assert young > old > 0


def test_a_young_node_checkpoints_more_often_than_an_old_one() -> None:
    def interval(age_h: float) -> int:
        return choose_interval(
            spec(),
            write_seconds=5.0,
            provisioning=Provisioning.PREEMPTIBLE,
            accelerator="nvidia-tesla-k80",
            node_age_s=age_h * 3600,
        ).seconds

    assert interval(0.0) < interval(12.0)
    # the optimum itself, for a known hazard
    chosen = choose_interval(
        spec(),
        write_seconds=8.0,
        provisioning=Provisioning.SPOT,
        accelerator="nvidia-tesla-t4",
        node_age_s=0.0,
        hazard=lambda _gpu, _age: 1 / 7200,
    )
    assert chosen.seconds == round(math.sqrt(2 * 8.0 * 7200))
    assert chosen.hazard_per_hour == pytest.approx(0.5)
    assert "Young-Daly" in (chosen.reason or "")
    # the others train on while the chief writes: the cost to the job is the chief's share
    shared = choose_interval(
        spec(),
        write_seconds=8.0,
        provisioning=Provisioning.SPOT,
        accelerator="nvidia-tesla-t4",
        node_age_s=0.0,
        active_workers=4,
        hazard=lambda _gpu, _age: 1 / 7200,
    )
    assert shared.seconds == round(math.sqrt(2 * 8.0 / 4 * 7200))


def test_the_spec_bounds_the_interval() -> None:
    fast = choose_interval(
        spec(minIntervalSeconds=120),
        write_seconds=0.01,
        provisioning=Provisioning.SPOT,
        accelerator="nvidia-tesla-t4",
        node_age_s=0.0,
        hazard=lambda _gpu, _age: 1 / 60,
    )
    assert fast.seconds == 120
    assert "bounded" in (fast.reason or "")
    on_demand = choose_interval(
        spec(maxIntervalSeconds=900),
        write_seconds=3.0,
        provisioning=Provisioning.ON_DEMAND,
        accelerator="nvidia-tesla-t4",
        node_age_s=0.0,
    )
    assert on_demand.seconds == 900
    assert on_demand.hazard_per_hour == 0


def test_min_above_max_is_rejected() -> None:
    with pytest.raises(ValueError, match="minIntervalSeconds"):
        spec(minIntervalSeconds=600, maxIntervalSeconds=60)


def _world(adaptive: bool = True) -> World:
    checkpoint = ADAPTIVE if adaptive else {"uri": "/ckpt"}
    world = World(job(checkpoint=checkpoint))
    start(world, [node("n0", "preemptible", age=timedelta(minutes=10)), node("n1", "preemptible"), node("n2")])
    return world


def _progress(write_seconds: float | None) -> dict[str, object]:
    report: dict[str, object] = {"globalStep": 100, "checkpointStep": 100}
    if write_seconds is not None:
        report["checkpointWriteSeconds"] = write_seconds
    return report


def test_the_operator_publishes_the_interval_on_the_lease_and_in_status() -> None:
    world = _world()
    renew(world, T0, _progress(None))
    world.reconcile(T0)
    # no measured write yet: the chief keeps the spec's fixed intervals
    assert "checkpointInterval" not in world.job["status"]
    lease = world.observed.lease
    assert lease is not None
    assert ANNOTATION_CHECKPOINT_INTERVAL not in lease["metadata"].get("annotations", {})

    renew(world, T0 + timedelta(seconds=5), _progress(4.0))
    world.reconcile(T0 + timedelta(seconds=5))
    status = world.job["status"]["checkpointInterval"]
    published = int(lease["metadata"]["annotations"][ANNOTATION_CHECKPOINT_INTERVAL])
    assert status["seconds"] == published
    assert 30 <= published <= 3600
    assert status["writeSeconds"] == 4.0
    assert status["hazardPerHour"] > 0


def test_small_moves_do_not_rewrite_the_lease() -> None:
    world = _world()
    renew(world, T0, _progress(4.0))
    world.reconcile(T0)
    lease = world.observed.lease
    assert lease is not None
    first = lease["metadata"]["annotations"][ANNOTATION_CHECKPOINT_INTERVAL]
    renew(world, T0 + timedelta(seconds=30), _progress(4.2))
    world.reconcile(T0 + timedelta(seconds=30))
    assert lease["metadata"]["annotations"][ANNOTATION_CHECKPOINT_INTERVAL] == first
    # a much dearer write moves the optimum by more than the tolerance: republished
    renew(world, T0 + timedelta(seconds=60), _progress(4.0 * (1 + REPUBLISH_TOLERANCE) ** 2 * 4))
    world.reconcile(T0 + timedelta(seconds=60))
    assert int(lease["metadata"]["annotations"][ANNOTATION_CHECKPOINT_INTERVAL]) > int(first)


def test_not_adaptive_publishes_nothing() -> None:
    world = _world(adaptive=False)
    renew(world, T0, _progress(4.0))
    world.reconcile(T0)
    lease = world.observed.lease
    assert lease is not None
    assert ANNOTATION_CHECKPOINT_INTERVAL not in lease["metadata"].get("annotations", {})
    assert "checkpointInterval" not in world.job["status"]


def test_stage_without_a_chief_node_keeps_the_previous_choice() -> None:
    plan = adaptive_checkpoint_interval(
        spec(),
        job_name="mnist",
        holder_pod={"metadata": {"name": "p"}, "spec": {"nodeName": "gone"}},
        nodes={},
        lease={"metadata": {"annotations": {"transient.training/progress": json.dumps(_progress(2.0))}}},
        previous=None,
        now=T0,
    )
    assert plan.status is None
    assert plan.writes == ()
