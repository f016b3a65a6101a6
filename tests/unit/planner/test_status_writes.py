"""When a pass's status is worth a write (``Plan.status_due``), and the order of a pass's writes at a chief
loss (the new chief is named before the lost pods are released and replaced)."""

from __future__ import annotations

import copy
import itertools
from datetime import timedelta
from typing import Any

import pytest

from tests.unit.planner.builders import T0, job, node, renew, start, terminate
from ttj.cost.prices import load_price_table
from ttj.planner import CreateChild, DeleteChild, LabelPod, PlannerConfig, RemoveFinalizer, UpdateLease
from ttj.planner.core import COST_WRITE_SECONDS, status_due
from ttj.planner.lease import chief_labels
from ttj.planner.world import World
from ttj_contract import LABEL_CHIEF, format_micro_time, lease_name

S = timedelta(seconds=1)
PRICED = PlannerConfig(prices=load_price_table())


def _seen() -> dict[str, Any]:
    return {
        "phase": "Running",
        "preemptions": 1,
        "cost": {
            "usd": 1.0,
            "onDemandEquivalentUSD": 3.0,
            "summary": "$1.00",
            "usdPerHour": 0.5,
            "accruedAt": format_micro_time(T0),
            "pods": [{"uid": "u1", "name": "w-0-1", "usd": 1.0, "onDemandEquivalentUSD": 3.0, "usdPerHour": 0.5}],
        },
        "savings": {"onDemandUSD": 3.0, "grossUSD": 2.0, "netUSD": 2.0, "netPercent": 66.7, "losses": 1},
        "workerGroups": [{"name": "spot", "active": 1, "usd": 1.0}],
    }


def _accrued(status: dict[str, Any], usd: float, seconds: float) -> dict[str, Any]:
    """``status`` with its cost accrued ``seconds`` after T0 up to ``usd`` (and the figures made from it)."""
    after = copy.deepcopy(status)
    cost = after["cost"]
    cost.update(usd=usd, summary=f"${usd:.2f}", accruedAt=format_micro_time(T0 + seconds * S))
    cost["pods"][0]["usd"] = usd
    after["savings"].update(grossUSD=3.0 - usd, netUSD=3.0 - usd, netPercent=100 * (3.0 - usd) / 3.0)
    after["workerGroups"][0]["usd"] = usd
    return after


def _changed(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    status = _accrued(_seen(), 1.001, 5)
    holder: Any = status
    for key in path[:-1]:
        holder = holder[key]
    holder[path[-1]] = value
    return status


ROWS = [
    ("nothing changed", _seen(), 5, False),
    ("cost accrued by less than a cent, 5 s later", _accrued(_seen(), 1.009, 5), 5, False),
    ("cost accrued by a cent", _accrued(_seen(), 1.01, 5), 5, True),
    ("cost accrued by less than a cent, but the cost seen is old", _accrued(_seen(), 1.001, 30), 30, True),
    ("a counter", _changed(("preemptions",), 2), 5, True),
    ("a savings counter", _changed(("savings", "losses"), 2), 5, True),
    ("the hourly rate", _changed(("cost", "usdPerHour"), 1.0), 5, True),
    ("a pod enters the ledger", _changed(("cost", "pods"), [*_seen()["cost"]["pods"], {"uid": "u2"}]), 5, True),
    ("a pod's end time", _changed(("cost", "pods", 0, "endedAt"), format_micro_time(T0)), 5, True),
    ("a group's workers", _changed(("workerGroups", 0, "active"), 2), 5, True),
]


@pytest.mark.parametrize(("case", "planned", "seconds", "due"), ROWS, ids=[row[0] for row in ROWS])
def test_status_due(case: str, planned: dict[str, Any], seconds: float, due: bool) -> None:
    assert status_due(_seen(), planned, T0 + seconds * S) == due


def test_no_status_seen_is_due() -> None:
    assert status_due({}, _seen(), T0)
    seen = _seen()
    del seen["cost"]
    assert status_due(seen, _seen(), T0)


def test_cost_alone_is_written_every_cost_write_seconds_and_the_budget_still_stops_the_job_on_time() -> None:
    """Passes every 2 s: the status is written at the first, then when the cost moved by a cent or is
    COST_WRITE_SECONDS old. The budget decision uses the cost accrued in the pass, written or not: the job is
    stopped in the same pass as when every pass writes."""

    def run(write_every_pass: bool) -> tuple[list[int], int]:
        world = World(job(budget={"maxCostUSD": 0.02}))
        start(world, [node(f"gpu-{i}", age=timedelta(hours=2 + 5 * i)) for i in range(3)])
        written, stopped_at = [], -1
        for second in range(0, 600, 2):
            before = world.job.get("status")
            result = world.reconcile(T0 + second * S, PRICED)
            if write_every_pass:
                world.job["status"] = copy.deepcopy(result.status)
            if world.job.get("status") is not before:
                written.append(second)
            if any(isinstance(w, DeleteChild) and w.kind == "Pod" for w in result.writes):
                stopped_at = second
                break
        return written, stopped_at

    written, stopped_at = run(write_every_pass=False)
    _, stopped_at_when_always_written = run(write_every_pass=True)
    assert stopped_at == stopped_at_when_always_written > 0
    gaps = [b - a for a, b in itertools.pairwise(written)]
    assert len(written) < stopped_at // 2 / 2, written  # far fewer writes than passes
    assert max(gaps) <= COST_WRITE_SECONDS, written


def _written(write: object) -> tuple[str, str, object]:
    """A write as (kind, object, what changes), for comparing a pass's writes in order."""
    if isinstance(write, LabelPod):
        return ("label", write.pod, write.labels)
    if isinstance(write, RemoveFinalizer):
        return ("release", write.pod, None)
    if isinstance(write, UpdateLease):
        return ("lease", write.name, write.holder)
    assert isinstance(write, CreateChild | DeleteChild), write
    return (type(write).__name__, write.name, None)


def test_at_a_chief_loss_the_new_chief_is_named_first_and_the_stopped_chief_unlabelled_after_the_replacement() -> None:
    world = World(job())
    start(world, [node(f"gpu-{i}", age=timedelta(hours=2 + 5 * i)) for i in range(3)])
    for second in range(3):
        world.reconcile(T0 + second * S)
    renew(world, T0 + 5 * S)
    chief = world.job["status"]["chief"]["pod"]
    terminate(world, chief, 143, pod_reason="Terminated", now=T0 + 10 * S)
    counted = world.reconcile(T0 + 11 * S)
    elected = world.job["status"]["chief"]["pod"]
    slot = chief.rsplit("-", 1)[0]

    assert [_written(w) for w in counted.writes] == [
        ("lease", lease_name(world.job["metadata"]["name"]), elected),
        ("label", elected, {LABEL_CHIEF: "true"}),
        ("CreateChild", f"{slot}-2", None),
        ("label", chief, {LABEL_CHIEF: None}),
    ]
    # the pass after, once the written status counts the loss, lets the stopped chief go
    assert [_written(w) for w in world.reconcile(T0 + 12 * S).writes] == [
        ("DeleteChild", chief, None),
        ("release", chief, None),
    ]


def _worker(name: str, *, chief: bool, phase: str = "Running", containers: tuple[str, ...] = ()) -> dict[str, Any]:
    """A worker pod as the index holds it; ``containers`` gives each container's state ("running", "terminated")."""
    statuses = [{"name": f"c{i}", "state": {state: {}}} for i, state in enumerate(containers)]
    labels = {LABEL_CHIEF: "true"} if chief else {}
    return {"metadata": {"name": name, "labels": labels}, "status": {"phase": phase, "containerStatuses": statuses}}


ON = {LABEL_CHIEF: "true"}
OFF = {LABEL_CHIEF: None}

# (name, the workers, the holder, want: (the writes that name the holder, the label off stopped pods))
CHIEF_LABEL_CASES = [
    ("the holder has it already", [_worker("a", chief=True)], "a", ([], [])),
    (
        "a running chief loses it before the holder gets it",
        [_worker("a", chief=True), _worker("b", chief=False)],
        "b",
        ([LabelPod("a", OFF), LabelPod("b", ON)], []),
    ),
    (
        "a failed chief loses it after",
        [_worker("a", chief=True, phase="Failed"), _worker("b", chief=False)],
        "b",
        ([LabelPod("b", ON)], [LabelPod("a", OFF)]),
    ),
    (
        "every container terminated, the phase not yet written: stopped",
        [_worker("a", chief=True, containers=("terminated", "terminated")), _worker("b", chief=False)],
        "b",
        ([LabelPod("b", ON)], [LabelPod("a", OFF)]),
    ),
    (
        "one container of two still running: not stopped",
        [_worker("a", chief=True, containers=("terminated", "running")), _worker("b", chief=False)],
        "b",
        ([LabelPod("a", OFF), LabelPod("b", ON)], []),
    ),
    ("no holder: every label comes off", [_worker("a", chief=True)], None, ([LabelPod("a", OFF)], [])),
]


@pytest.mark.parametrize(
    ("workers", "holder", "want"), [c[1:] for c in CHIEF_LABEL_CASES], ids=[c[0] for c in CHIEF_LABEL_CASES]
)
def test_one_pod_that_can_run_carries_the_chief_label(
    workers: list[dict[str, Any]], holder: str | None, want: tuple[list[LabelPod], list[LabelPod]]
) -> None:
    assert chief_labels(workers, holder) == want
