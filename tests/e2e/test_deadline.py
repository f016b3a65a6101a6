"""End to end with real TensorFlow trainers: jobs with spec.deadline on a spot pool that follows a trace (issue 38).

The spot T4 pool follows a spot availability trace (the published traces' format): out of stock for three 30 s
samples, then back. It starts at the trace's last sample (in stock for good) and a test replays the trace when
its job trains, so the outage comes at a point of the job's own, whatever the machine's speed. An on-demand T4
pool is the implicit catch-up group's.

- A deadline spot alone meets: the job stays on spot, and ends Met without a catch-up worker.
- A deadline that spot alone misses through a 90 s outage of the spot pool: every spot worker is lost and its
  replacement unschedulable, and the catch-up worker alone needs most of the time left; the policy adds it on
  on-demand (DeadlineEscalated), it runs, spot comes back, and the job ends Met. When the policy escalates
  depends on its rules (behind the uniform line already while the job starts, as soon as spot is out, or once
  the slack left is what on-demand alone needs); the deadline is tight enough that each of them does, so the test
  asserts that it did and what followed, not when. Whether the catch-up worker is released before the end
  depends on which worker is chief (the operator never releases a chief); the test asserts the release, or the
  status saying why it is kept.
- A deadline no fleet can meet is said at once: DeadlineAtRisk True, reason DeadlineInfeasible, and its Event.

Local cluster only (the trace replay goes through its control endpoint). Waits are on conditions, never on time.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.training_support import Run, checkpoint_uri, condition, drawn_timeline, job_manifest, start_stack, step

from ttj_contract import LABEL_ROLE, LABEL_WORKER_GROUP, Role, parse_time
from ttj_demo.stack import Stack

pytestmark = [pytest.mark.e2e, pytest.mark.tensorflow, pytest.mark.timeout(1800)]

SPOT, ON_DEMAND = "t4-spot", "t4-on-demand"
#: The implicit catch-up group: the on-demand twin of the job's only group.
CATCH_UP = "catch-up"
#: 30 s samples: out of stock for 90 s from the replay's start, then in stock (the last sample holds).
TRACE = {"metadata": {"gap_seconds": 30}, "data": [0, 0, 0, 1]}
TRACE_END = 90
#: simulated GPU seconds per step on both pools: a worker makes at most one step a second, and close to that
#: however loaded the machine (the CPU's own step time is a small part of it)
STEP_SECONDS = 1.0
#: The outage's job: 240 steps by 500 s after its start. Spot's two workers would take 2 min and the catch-up
#: worker alone 4 min and a join; with 90 s of spot lost, on-demand is needed.
OUTAGE_STEPS, OUTAGE_SECONDS = 240, 500
#: Set to a path to keep the outage's timeline picture there.
TIMELINE_ENV = "TTJ_DEADLINE_TIMELINE"
#: Far enough that the uniform line never runs ahead of a job still starting (its first report's steps).
GENEROUS_SECONDS = 7200


def pools(trace: Path) -> tuple[str, ...]:
    gpu = "accelerator=nvidia-tesla-t4,gpus=1,cpu=8,memory=30Gi,machine-type=n1-standard-8,restore-after=never"
    return (
        f"name={SPOT},nodes=2,provisioning=spot,{gpu},step-seconds={STEP_SECONDS},grace=3,"
        f"trace={trace},trace-start={TRACE_END}",
        f"name={ON_DEMAND},nodes=2,provisioning=on-demand,{gpu},step-seconds={STEP_SECONDS}",
    )


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    if os.environ.get("KUBECONFIG"):
        pytest.skip("replays a spot availability trace on a node pool: only the ttj local cluster can")
    trace = tmp_path_factory.mktemp("traces") / "t4-outage.json"
    trace.write_text(json.dumps(TRACE), encoding="utf-8")
    yield from start_stack(tmp_path_factory, gpu_pools=pools(trace))


def control(stack: Stack) -> Any:
    from ttj_localcluster.nodes.control import ControlClient

    return ControlClient.from_kubeconfig(str(stack.kubeconfig))


def deadline_job(name: str, checkpoints: str, train_steps: int, within_seconds: int) -> dict[str, Any]:
    """Two spot workers and a free slot the deadline may fill with a catch-up worker."""
    return job_manifest(
        name,
        checkpoints,
        trainSteps=train_steps,
        workers={"replicas": 2, "minReplicas": 1, "maxReplicas": 3},
        deadline={"completeWithinSeconds": within_seconds},
    )


def deadline(status: dict[str, Any]) -> dict[str, Any]:
    return status.get("deadline") or {}


def reasons(run: Run, prefix: str = "Deadline") -> list[str]:
    return [str(e.reason) for e in run.events() if str(e.reason).startswith(prefix)]


def messages(run: Run, reason: str) -> list[str]:
    return [str(e.message) for e in run.events() if e.reason == reason]


def running_workers(run: Run, group: str | None) -> list[str]:
    """The running workers of ``group`` (None: of the job's own group, which has no label)."""
    return [
        p["metadata"]["name"] for p in run.running_workers() if p["metadata"]["labels"].get(LABEL_WORKER_GROUP) == group
    ]


def met_in_time(final: dict[str, Any]) -> None:
    completed, due = parse_time(final.get("completionTime")), parse_time(deadline(final).get("at"))
    assert isinstance(completed, datetime)
    assert isinstance(due, datetime)
    assert completed <= due
    assert (deadline(final)["state"], condition(final, "DeadlineAtRisk").get("reason")) == ("Met", "DeadlineMet")


def test_a_deadline_spot_alone_meets_stays_on_spot(stack: Stack, tmp_path: Path) -> None:
    name = f"on-spot-{uuid.uuid4().hex[:6]}"
    run = Run(stack, deadline_job(name, checkpoint_uri(stack, tmp_path, name), 120, GENEROUS_SECONDS))
    training = run.wait(
        "the job training with an ETA",
        lambda s: step(s) > 0 and bool((s.get("progress") or {}).get("eta")) and bool(deadline(s)),
    )
    eta = parse_time(training["progress"]["eta"]["p90"])
    due = parse_time(deadline(training)["at"])
    assert eta is not None
    assert due is not None
    assert eta < due
    assert deadline(training)["state"] == "OnTrack"
    assert condition(training, "DeadlineAtRisk").get("status") == "False"
    final = run.wait("the job to succeed", lambda s: s.get("phase") == "Succeeded")
    met_in_time(final)
    assert all(deadline(s).get("catchUpWorkers", 0) == 0 for s in run.history), [deadline(s) for s in run.history]
    assert reasons(run) == [], run.warnings()
    groups = {p["metadata"]["labels"].get(LABEL_WORKER_GROUP) for p in run.pods(Role.WORKER)}
    assert groups == {None}, groups


def test_a_spot_outage_escalates_to_on_demand_and_the_job_finishes_in_time(stack: Stack, tmp_path: Path) -> None:
    name = f"outage-{uuid.uuid4().hex[:6]}"
    checkpoints = checkpoint_uri(stack, tmp_path, name)
    run = Run(stack, deadline_job(name, checkpoints, OUTAGE_STEPS, OUTAGE_SECONDS))
    run.wait(
        "the job training on spot with its deadline judged",
        lambda s: step(s) > 0 and bool(deadline(s)) and len(running_workers(run, None)) == 2,
    )

    # The trace's outage, from now: both spot nodes preempted, none can join for 90 s.
    replayed = control(stack).replay_trace(SPOT, 0)
    assert (replayed["stockedOut"], replayed["changes"]) == (True, [{"afterSeconds": 90.0, "inStock": True}])
    escalated = run.wait(
        "a catch-up worker running on on-demand",
        lambda s: deadline(s).get("catchUpWorkers", 0) >= 1 and bool(running_workers(run, CATCH_UP)),
    )
    assert step(escalated) < OUTAGE_STEPS, "the training ended before the escalation (raise OUTAGE_STEPS)"
    assert deadline(escalated)["escalatedAt"]
    [added] = messages(run, "DeadlineEscalated")[:1]
    assert added.startswith(f"adding 1 catch-up worker(s) in group {CATCH_UP} "), added  # the free slot
    nodes = {
        p["spec"]["nodeName"] for p in run.pods(Role.WORKER) if p["metadata"]["name"] in running_workers(run, CATCH_UP)
    }
    assert all(node.startswith(f"gke-ttj-local-{ON_DEMAND}-") for node in nodes), nodes

    # The trace says spot is back: the job's own workers run on spot again, and the catch-up worker is released
    # unless it is the chief (then the status says so).
    back = run.wait(
        "two spot workers running again",
        lambda s: len(running_workers(run, None)) == 2 and not control(stack).status()["pools"][SPOT]["stockedOut"],
    )
    assert step(back) < OUTAGE_STEPS, "the training ended before spot came back (raise OUTAGE_STEPS)"
    settled = run.wait(
        "the catch-up worker released, or kept as the chief",
        lambda s: (
            bool(messages(run, "DeadlineReleased"))
            or "the chief runs in the catch-up group" in str(deadline(s).get("message"))
            or s.get("phase") == "Succeeded"
        ),
    )
    final = run.wait("the job to succeed", lambda s: s.get("phase") == "Succeeded")
    met_in_time(final)
    released = messages(run, "DeadlineReleased")
    if released:
        assert released[0].startswith(f"releasing 1 catch-up worker(s) in group {CATCH_UP} "), released
    elif settled.get("phase") != "Succeeded":
        chief = (settled.get("chief") or {}).get("pod")
        pod = next(p for p in run.pods(Role.WORKER) if p["metadata"]["name"] == chief)
        assert pod["metadata"]["labels"].get(LABEL_WORKER_GROUP) == CATCH_UP
    # While spot is out, the policy may also call the deadline infeasible before or after it escalates (on a
    # loaded machine the measured pace is slow enough for that): the job still escalated and ends Met.
    assert "DeadlineEscalated" in reasons(run), reasons(run)
    records = {r["pod"]: r for r in final.get("preemptionCosts") or []}
    assert len(records) >= 2, records  # both spot workers went with the outage

    # The timeline draws the deadline and the escalation.
    picture = Path(os.environ.get(TIMELINE_ENV) or tmp_path / "deadline-timeline.png")
    text = drawn_timeline(stack, name, picture)
    assert "deadline at " in text
    assert f"DeadlineEscalated: adding 1 catch-up worker(s) in group {CATCH_UP} " in text
    print(text)


def test_an_infeasible_deadline_is_said_at_once(stack: Stack, tmp_path: Path) -> None:
    name = f"infeasible-{uuid.uuid4().hex[:6]}"
    # 200000 steps in 10 minutes: three workers at a step a second at most would take over 18 hours
    run = Run(stack, deadline_job(name, checkpoint_uri(stack, tmp_path, name), 200_000, 600))
    try:
        judged = run.wait("the deadline judged", lambda s: bool(deadline(s)))
        assert deadline(judged)["state"] == "Infeasible", deadline(judged)
        at_risk = condition(judged, "DeadlineAtRisk")
        assert (at_risk.get("status"), at_risk.get("reason")) == ("True", "DeadlineInfeasible")
        assert "cannot be met" in str(at_risk.get("message"))
        said = run.wait("the DeadlineInfeasible Event", lambda s: bool(messages(run, "DeadlineInfeasible")))
        assert step(said) < 200_000
        [event] = [e for e in run.events() if e.reason == "DeadlineInfeasible"]
        assert event.type == "Warning"
        assert "cannot be met even with " in str(event.message)
        assert " 1 catch-up workers" in str(event.message)
        assert [p for p in run.pods() if p["metadata"]["labels"].get(LABEL_ROLE) == Role.WORKER]
    finally:
        run.delete()
