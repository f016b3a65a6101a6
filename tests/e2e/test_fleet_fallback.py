"""End to end with real TensorFlow trainers: a mixed GPU fleet through spot stock-outs (issue 26).

A job prefers spot L4 over spot T4 over on-demand T4 (at most two on-demand workers). It starts while both spot
pools are stocked out, so its workers fall back to on-demand and train there. Spot T4 comes back: a worker moves
to it, make-before-break, and the on-demand one goes. The on-demand chief is lost: a T4 worker is elected and
the slot refilled in T4. Spot L4 comes back: the T4 worker that is not the chief moves to L4. The T4 chief is
preempted: an L4 worker is elected, and the job ends Succeeded on spot L4 with no step lost and what each group
cost in status.workerGroups.

Local cluster only (stock-outs and restocks go through its control endpoint). Waits are on conditions, never on
time: the pools' simulated GPU time (step-seconds) only keeps the training long enough for the moves.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.training_support import (
    Run,
    checkpoint_step,
    checkpoint_uri,
    drawn_timeline,
    epoch,
    job_manifest,
    start_stack,
    step,
)

from ttj_contract import LABEL_WORKER_GROUP
from ttj_demo.stack import Stack

pytestmark = [pytest.mark.e2e, pytest.mark.tensorflow, pytest.mark.timeout(1500)]

TRAIN_STEPS = 800
#: The chiefs are lost once a checkpoint at least this far is reported: each had trained, so "no step lost" says
#: something.
FIRST_LOSS, SECOND_LOSS = 100, 300
#: Set to a path to keep the run's timeline picture there (docs/img/fleet-fallback-timeline.png).
TIMELINE_ENV = "TTJ_FLEET_TIMELINE"

L4, T4, ON_DEMAND = "l4-spot", "t4-spot", "t4-on-demand"
GPU_POOLS = (
    f"name={L4},nodes=2,provisioning=spot,accelerator=nvidia-l4,gpus=1,cpu=4,memory=16Gi,machine-type=g2-standard-4,"
    "restore-after=never,speed=2,step-seconds=0.5,stocked-out=true",
    f"name={T4},nodes=2,provisioning=spot,accelerator=nvidia-tesla-t4,gpus=1,cpu=8,memory=30Gi,"
    "machine-type=n1-standard-8,restore-after=never,step-seconds=0.5,stocked-out=true",
    f"name={ON_DEMAND},nodes=2,provisioning=on-demand,accelerator=nvidia-tesla-t4,gpus=1,cpu=8,memory=30Gi,"
    "machine-type=n1-standard-8,restore-after=never,step-seconds=0.5",
)
GROUPS = [
    {"name": "l4", "acceleratorType": "nvidia-l4"},
    {"name": "t4"},
    {"name": "t4-od", "provisioning": "on-demand", "maxReplicas": 2},
]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    if os.environ.get("KUBECONFIG"):
        pytest.skip("stocks out and restocks node pools: only the ttj local cluster can")
    yield from start_stack(tmp_path_factory, gpu_pools=GPU_POOLS)


def control(stack: Stack) -> Any:
    from ttj_localcluster.nodes.control import ControlClient

    return ControlClient.from_kubeconfig(str(stack.kubeconfig))


def active(status: dict[str, Any]) -> dict[str, int]:
    """Running workers by group, as the job's status counts them (groups without any left out)."""
    return {g["name"]: g["active"] for g in status.get("workerGroups") or [] if g.get("active")}


def chief_group(run: Run, status: dict[str, Any]) -> str | None:
    chief = (status.get("chief") or {}).get("pod")
    pod = next((p for p in run.pods() if p["metadata"]["name"] == chief), None)
    return None if pod is None else str(pod["metadata"]["labels"].get(LABEL_WORKER_GROUP))


def messages(run: Run, reason: str) -> list[str]:
    return [str(e.message) for e in run.events() if e.reason == reason]


def training(run: Run, status: dict[str, Any]) -> bool:
    """Whether the job still trains: a step of the scenario that came after the last step would prove nothing."""
    if step(status) >= TRAIN_STEPS or status.get("phase") == "Succeeded":
        pytest.fail(f"the training ended before the scenario did (raise TRAIN_STEPS); {run.warnings()}")
    return True


def test_a_job_falls_back_to_on_demand_and_moves_to_spot_as_it_returns(stack: Stack, tmp_path: Path) -> None:
    name = f"fleet-{uuid.uuid4().hex[:6]}"
    checkpoints = checkpoint_uri(stack, tmp_path, name)
    manifest = job_manifest(
        name,
        checkpoints,
        trainSteps=TRAIN_STEPS,
        workers={
            "replicas": 2,
            "maxReplicas": 3,  # a free slot: moving back is make-before-break
            "groups": GROUPS,
            "fallbackAfterSeconds": 5,
            "capacityRetrySeconds": 10,
        },
    )
    run = Run(stack, manifest)
    fleet = control(stack)

    # Both spot pools are out: the slots fall back through t4 to on-demand, and the job trains there.
    started = run.wait(
        "training on two on-demand workers",
        lambda s: step(s) > 0 and epoch(s) >= 1 and active(s) == {"t4-od": 2},
    )
    first_chief = started["chief"]["pod"]
    fell_back = messages(run, "CapacityFallback")
    assert any(" left group l4 (unschedulable for " in m for m in fell_back), fell_back
    assert any(" left group t4 (" in m and m.endswith("for group t4-od") for m in fell_back), fell_back
    assert training(run, started)

    # Spot T4 is back: a T4 worker starts in the free slot and runs before the on-demand one that is not the
    # chief goes (the dearest).
    fleet.restock(T4)
    on_t4 = run.wait(
        "a worker moved from on-demand to spot T4",
        lambda s: active(s) == {"t4": 1, "t4-od": 1} and any("to group t4 " in m for m in messages(run, "MovedBack")),
    )
    assert on_t4["chief"]["pod"] == first_chief, "the chief is never moved back"
    assert [m for m in messages(run, "MovedBack") if "from group t4-od back to group t4 " in m], run.warnings()
    assert training(run, on_t4)

    # The on-demand chief's VM goes, once it has trained and checkpointed: the T4 worker is elected, and the slot
    # is refilled in T4 (L4 is still out).
    assert training(run, run.wait("a checkpoint under the first chief", lambda s: checkpoint_step(s) >= FIRST_LOSS))
    stack.preempt_pod_node("default", first_chief)
    on_spot = run.wait(
        "a T4 chief and both workers on spot T4",
        lambda s: epoch(s) >= 2 and s["chief"]["pod"] != first_chief and active(s) == {"t4": 2},
    )
    second_chief = on_spot["chief"]["pod"]
    assert chief_group(run, on_spot) == "t4"
    assert training(run, on_spot)

    # Spot L4 is back: the T4 worker that is not the chief moves to L4.
    fleet.restock(L4)
    on_l4 = run.wait(
        "the T4 worker that is not the chief moved to spot L4",
        lambda s: active(s) == {"l4": 1, "t4": 1} and any("back to group l4 " in m for m in messages(run, "MovedBack")),
    )
    assert on_l4["chief"]["pod"] == second_chief
    assert training(run, on_l4)

    # The T4 chief is preempted, once it has checkpointed: the L4 worker is elected and the slot refilled in L4.
    assert training(run, run.wait("a checkpoint under the T4 chief", lambda s: checkpoint_step(s) >= SECOND_LOSS))
    stack.preempt_pod_node("default", second_chief)
    run.wait(
        "an L4 chief and both workers on spot L4",
        lambda s: epoch(s) >= 3 and s["chief"]["pod"] != second_chief and active(s) == {"l4": 2},
    )
    final = run.wait("the job to succeed", lambda s: s.get("phase") == "Succeeded")

    # No step lost: each chief's loss cost none, the step never went back past a reported checkpoint, and the
    # final checkpoint is at the last step, written under the last chief's epoch.
    assert step(final) >= TRAIN_STEPS
    assert final.get("failures", 0) == 0, run.warnings()
    records = {r["pod"]: r for r in final.get("preemptionCosts") or []}
    assert {first_chief, second_chief} <= set(records), records
    assert [(records[c]["role"], records[c]["stepsLost"]) for c in (first_chief, second_chief)] == [
        ("chief", 0),
        ("chief", 0),
    ]
    assert records[first_chief]["globalStep"] >= FIRST_LOSS
    assert records[second_chief]["globalStep"] >= SECOND_LOSS
    assert final["savings"]["stepsLost"] == 0
    seen = 0
    for status in run.history:
        assert step(status) >= seen or step(status) == 0
        seen = max(seen, checkpoint_step(status))
    latest = run.latest_checkpoint()
    assert latest is not None
    assert (latest.step >= TRAIN_STEPS, latest.epoch) == (True, epoch(final))

    # What each group cost, in the job's status; the on-demand cap held throughout.
    groups = {g["name"]: g for g in final["workerGroups"]}
    assert list(groups) == ["l4", "t4", "t4-od"]
    assert all(g["usd"] > 0 for g in groups.values()), groups
    assert sum(g["usd"] for g in groups.values()) <= final["cost"]["usd"]
    assert max(g["desired"] for s in run.history for g in s.get("workerGroups") or [] if g["name"] == "t4-od") <= 2
    moved = messages(run, "MovedBack")
    assert len(moved) >= 2, moved
    assert all(" back to group " in m for m in moved), moved
    assert {"CapacityFallback", "MovedBack", "ChiefElected"} <= run.event_reasons()

    # The job's timeline, from what the cluster keeps.
    picture = Path(os.environ.get(TIMELINE_ENV) or tmp_path / "timeline.png")
    text = drawn_timeline(stack, name, picture)
    print(text)
