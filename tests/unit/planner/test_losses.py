"""What each loss cost (status.preemptionCosts, the PreemptionCost Event) and the savings net of them."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from tests.unit.planner.builders import T0, job, node, pods, renew, run_pod, run_ps, start, terminate
from ttj.api.models import PreemptionCost, TransientTrainingJobStatus
from ttj.cost.prices import load_price_table
from ttj.planner import PlannerConfig
from ttj.planner.classify import PodState, PodVerdict
from ttj.planner.stages.losses import KEPT_RECORDS, _keep, account_losses, describe
from ttj.planner.world import World
from ttj_contract import LABEL_ROLE, LABEL_SLOT, Role, format_time, worker_pod_name

S = timedelta(seconds=1)
PRICED = PlannerConfig(prices=load_price_table())


def settle(world: World, now: object) -> None:
    for _ in range(6):
        world.reconcile(now, PRICED)  # type: ignore[arg-type]


def started() -> World:
    world = World(job())
    nodes = [node(f"gpu-{i}", age=timedelta(hours=2 + 5 * i)) for i in range(3)]
    for n in nodes:
        n["metadata"]["labels"]["node.kubernetes.io/instance-type"] = "n1-standard-8"
    start(world, nodes)
    settle(world, T0)
    renew(world, T0 + 5 * S, {"globalStep": 400, "checkpointStep": 300})
    settle(world, T0 + 100 * S)
    return world


def records(world: World) -> list[dict[str, object]]:
    return list(world.job["status"].get("preemptionCosts") or [])


def test_a_worker_loss_is_recorded_then_costed_when_its_replacement_is_ready() -> None:
    world = started()
    terminate(world, "mnist-worker-0-1", 143, pod_reason="Terminated", now=T0 + 100 * S)
    settle(world, T0 + 101 * S)
    [opened] = records(world)
    assert opened["pod"] == "mnist-worker-0-1"
    assert (opened["role"], opened["slot"], opened["globalStep"], opened["stepsLost"]) == ("worker", 0, 400, 0)
    assert opened["lostAt"] == format_time(T0 + 100 * S)
    assert "recoveredAt" not in opened
    assert opened["jobUSD"] > 0
    assert world.job["status"]["savings"]["losses"] == 1
    assert world.job["status"]["savings"]["recovered"] == 0
    assert not [e for e in world.events if e.reason == "PreemptionCost"]

    # The replacement starts at +130 s (charged from then) and is Ready at +160 s.
    run_pod(world, "mnist-worker-0-2", "gpu-0", T0 + 130 * S)
    replacement = world.pod("mnist-worker-0-2")
    assert replacement is not None
    replacement["status"]["conditions"].append(
        {"type": "Ready", "status": "True", "lastTransitionTime": format_time(T0 + 160 * S)}
    )
    settle(world, T0 + 170 * S)
    [closed] = records(world)
    assert closed["replacement"] == "mnist-worker-0-2"
    assert closed["recoveredAt"] == format_time(T0 + 160 * S)
    assert (closed["slotEmptySeconds"], closed["startupSeconds"]) == (60.0, 30.0)
    entry = next(e for e in world.job["status"]["cost"]["pods"] if e["name"] == "mnist-worker-0-2")
    assert closed["startupUSD"] == pytest.approx(entry["usdPerHour"] * 30 / 3600)
    assert closed["usd"] == closed["startupUSD"]  # no steps lost
    assert closed["onDemandEquivalentUSD"] == pytest.approx(entry["onDemandUSDPerHour"] * 30 / 3600)
    [event] = [e for e in world.events if e.reason == "PreemptionCost"]
    assert "worker mnist-worker-0-1 (slot 0)" in event.message
    assert "0 steps lost" in event.message
    assert "slot empty 60 s" in event.message

    savings = world.job["status"]["savings"]
    cost = world.job["status"]["cost"]
    assert (savings["losses"], savings["recovered"], savings["slotEmptySeconds"]) == (1, 1, 60.0)
    assert savings["preemptionLossUSD"] == pytest.approx(closed["usd"])
    assert savings["grossUSD"] == pytest.approx(cost["onDemandEquivalentUSD"] - cost["usd"])
    assert savings["onDemandUSD"] == pytest.approx(cost["onDemandEquivalentUSD"] - closed["onDemandEquivalentUSD"])
    assert savings["netUSD"] == pytest.approx(savings["onDemandUSD"] - cost["usd"])
    assert 0 < savings["netUSD"] < savings["grossUSD"]
    assert savings["netPercent"] == pytest.approx(100 * savings["netUSD"] / savings["onDemandUSD"])

    # Later passes neither count nor cost the loss again.
    settle(world, T0 + 200 * S)
    assert world.job["status"]["savings"]["recovered"] == 1
    assert len([e for e in world.events if e.reason == "PreemptionCost"]) == 1


def test_the_chief_loss_says_chief() -> None:
    world = started()
    chief = world.job["status"]["chief"]["pod"]
    terminate(world, chief, 143, pod_reason="Terminated", now=T0 + 100 * S)
    settle(world, T0 + 101 * S)
    [record] = records(world)
    assert (record["pod"], record["role"]) == (chief, "chief")


def test_a_parameter_server_loss_costs_the_steps_since_the_checkpoint() -> None:
    world = started()
    world.observed.pods = [p for p in world.observed.pods if p["metadata"]["name"] != "mnist-ps-0-abc"]
    settle(world, T0 + 101 * S)
    run_ps(world, "mnist-ps-0-xyz", now=T0 + 110 * S)
    settle(world, T0 + 111 * S)
    [record] = records(world)
    assert (record["role"], record["pod"], record["replacement"], record["slot"]) == (
        "ps",
        "mnist-ps-0-abc",
        "mnist-ps-0-xyz",
        0,
    )
    assert record["stepsLost"] == 100
    assert record["usd"] == pytest.approx(100 * record["jobUSD"] / 400 + record["startupUSD"])
    assert world.job["status"]["savings"]["stepsLost"] == 100
    [event] = [e for e in world.events if e.reason == "PreemptionCost"]
    assert event.message.startswith("parameter server mnist-ps-0-abc lost at")
    assert "100 steps lost" in event.message


def test_without_prices_the_loss_is_still_timed_but_not_priced() -> None:
    world = World(job())
    start(world, [node(f"gpu-{i}") for i in range(3)])
    world.reconcile(T0)
    terminate(world, "mnist-worker-1-1", 143, pod_reason="Terminated", now=T0 + 10 * S)
    for _ in range(4):
        world.reconcile(T0 + 11 * S)
    run_pod(world, pods(world)[-1]["metadata"]["name"], "gpu-1", T0 + 20 * S)
    for _ in range(3):
        world.reconcile(T0 + 21 * S)
    [record] = records(world)
    assert record["slotEmptySeconds"] == 10.0
    assert "usd" not in record
    assert "netUSD" not in world.job["status"]["savings"] or world.job["status"]["savings"]["netUSD"] == 0


def test_the_newest_records_are_kept_closed_ones_leaving_first() -> None:
    def record(index: int, recovered: bool) -> PreemptionCost:
        return PreemptionCost(
            pod=f"p-{index}",
            role="worker",
            lost_at=format_time(T0),
            recovered_at=format_time(T0) if recovered else None,
        )

    kept, dropped_open = _keep([record(0, False), *(record(i, True) for i in range(1, KEPT_RECORDS + 5))])
    assert (len(kept), dropped_open) == (KEPT_RECORDS, 0)
    assert kept[0].pod == "p-0"
    assert kept[-1].pod == f"p-{KEPT_RECORDS + 4}"


def test_the_records_stay_bounded_however_many_losses_never_close() -> None:
    """A thousand losses whose replacements never come (a slot scaled away, say): the status keeps the newest
    records and totals for the rest, so the object stays far below etcd's 1.5 MB."""
    costs: list[PreemptionCost] = []
    savings = None
    for index in range(1000):
        accounted = account_losses(
            costs,
            savings,
            lost_workers=[f"j-worker-{index}-1"],
            lost_servers=(),
            chief=None,
            pods=(),
            verdicts={},
            progress=None,
            cost=None,
            now=T0 + index * S,
        )
        costs, savings = list(accounted.costs or []), accounted.savings
        assert len(costs) <= KEPT_RECORDS
    assert [c.pod for c in costs] == [f"j-worker-{i}-1" for i in range(1000 - KEPT_RECORDS, 1000)]
    assert savings is not None
    assert (savings.losses, savings.recovered, savings.dropped_open) == (1000, 0, 1000 - KEPT_RECORDS)
    status = TransientTrainingJobStatus(preemption_costs=costs, savings=savings)
    assert len(status.model_dump_json(by_alias=True, exclude_none=True)) < 10_000


def test_describe_reads_as_a_sentence() -> None:
    text = describe(
        PreemptionCost(
            pod="j-worker-1-1",
            role="worker",
            slot=1,
            lost_at="2026-11-21T12:00:00Z",
            replacement="j-worker-1-2",
            slot_empty_seconds=42,
            startup_seconds=3,
            startup_usd=0.0012,
            usd=0.0012,
        )
    )
    assert text == (
        "worker j-worker-1-1 (slot 1) lost at 2026-11-21T12:00:00Z: 0 steps lost, slot empty 42 s, "
        "start-up of j-worker-1-2 3 s $0.0012, $0.0012 in all"
    )


def _worker(slot: int, incarnation: int, created: int, ready: int | None) -> dict[str, Any]:
    """A worker pod created at T0 + ``created`` s, Ready at T0 + ``ready`` s (None: not yet running)."""
    status: dict[str, Any] = {"phase": "Pending"}
    if ready is not None:
        status = {
            "phase": "Running",
            "startTime": format_time(T0 + created * S),
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": format_time(T0 + ready * S)}],
        }
    return {
        "metadata": {
            "name": worker_pod_name("mnist", slot, incarnation),
            "creationTimestamp": format_time(T0 + created * S),
            "labels": {LABEL_ROLE: Role.WORKER.value, LABEL_SLOT: str(slot)},
        },
        "status": status,
    }


def _open(slot: int, incarnation: int, lost: int) -> PreemptionCost:
    return PreemptionCost(
        pod=worker_pod_name("mnist", slot, incarnation), role="worker", slot=slot, lost_at=format_time(T0 + lost * S)
    )


@pytest.mark.parametrize(
    ("name", "records", "workers", "want"),
    [
        (
            "refilled in a slot that was free (maxReplicas above replicas)",
            [_open(0, 1, 100)],
            [_worker(1, 0, 0, 5), _worker(3, 0, 110, 160)],
            {"mnist-worker-0-1": ("mnist-worker-3-0", 60.0)},
        ),
        (
            "its own slot's next pod first, even if a free slot's is ready sooner",
            [_open(0, 1, 100)],
            [_worker(3, 0, 105, 120), _worker(0, 2, 110, 160)],
            {"mnist-worker-0-1": ("mnist-worker-0-2", 60.0)},
        ),
        (
            "a worker running since before the loss replaces nothing",
            [_open(0, 1, 100)],
            [_worker(1, 0, 0, 5), _worker(2, 0, 50, 60)],
            {"mnist-worker-0-1": None},
        ),
        (
            "another loss's own replacement is not taken",
            [_open(0, 1, 100), _open(1, 1, 100)],
            [_worker(0, 2, 110, None), _worker(1, 2, 110, 130)],
            {"mnist-worker-0-1": None, "mnist-worker-1-1": ("mnist-worker-1-2", 30.0)},
        ),
        (
            "a pod that closed one loss closes no other",
            [
                _open(0, 1, 100).model_copy(
                    update={"replacement": "mnist-worker-3-0", "recovered_at": format_time(T0)}
                ),
                _open(1, 1, 100),
            ],
            [_worker(3, 0, 110, 130)],
            {"mnist-worker-0-1": ("mnist-worker-3-0", None), "mnist-worker-1-1": None},
        ),
    ],
)
def test_which_pod_closes_a_worker_loss(
    name: str,
    records: list[PreemptionCost],
    workers: list[dict[str, Any]],
    want: dict[str, tuple[str, float | None] | None],
) -> None:
    verdicts = {
        str(w["metadata"]["name"]): PodVerdict(
            PodState.RUNNING if w["status"]["phase"] == "Running" else PodState.PENDING
        )
        for w in workers
    }
    accounting = account_losses(
        records,
        None,
        lost_workers=[],
        lost_servers=[],
        chief=None,
        pods=workers,
        verdicts=verdicts,
        progress=None,
        cost=None,
        now=T0 + 200 * S,
    )
    got = {r.pod: ((r.replacement, r.slot_empty_seconds) if r.replacement else None) for r in accounting.costs or []}
    assert got == want, name
