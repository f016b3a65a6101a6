"""spec.suspend: the workers stop (the chief checkpoints first), then the parameter servers scale to 0; resumed,
the job starts again from that checkpoint under a chief of a new epoch. Each pass's plan is compared whole."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

from tests.unit.planner.builders import T0, job, node, pods, renew, run_pod, run_ps, start, terminate
from ttj.api.models import ConditionType as C
from ttj.api.models import JobRef, TransientTrainingJobSpec
from ttj.api.models import Reason as R
from ttj.cost.prices import load_price_table
from ttj.planner import CreateChild, DeleteChild, EmitEvent, PlannerConfig, ReplaceChild, UpdateLease, Write, plan
from ttj.planner.children import ps_deployment
from ttj.planner.conditions import InProgress, Wanted, phase_of, wanted_conditions
from ttj.planner.world import World
from ttj_contract import format_time

S = timedelta(seconds=1)
HOUR = timedelta(hours=1)
CONFIG = PlannerConfig(prices=load_price_table())
WORKERS = ("mnist-worker-0-1", "mnist-worker-1-1", "mnist-worker-2-1")


def training(**spec: Any) -> World:
    """A job training with three workers, its chief elected, a checkpoint at step 400 reported."""
    world = World(job(**spec))
    start(world, [node(f"gpu-{i}", age=timedelta(hours=2 + 5 * i)) for i in range(3)])
    world.reconcile(T0, CONFIG)
    renew(world, T0 + S, {"globalStep": 450, "checkpointStep": 400, "epoch": 1})
    status = world.reconcile(T0 + S, CONFIG).status
    assert (status["phase"], status["chief"]["epoch"]) == ("Running", 1)
    return world


def suspend(world: World, value: bool = True) -> None:
    world.job["spec"]["suspend"] = value


def condition(status: dict[str, Any], type_: str) -> tuple[str, str, str] | None:
    found = next((c for c in status.get("conditions") or [] if c["type"] == type_), None)
    return (found["status"], found["reason"], found["message"]) if found is not None else None


def conditions(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def stops(world: World, names: tuple[str, ...]) -> list[Write]:
    """The graceful, deliberate deletes of ``names``, as suspending writes them."""
    return [
        DeleteChild("Pod", name, mark_deliberate=True, reason="Suspended", uid=world.pod(name)["metadata"]["uid"])  # type: ignore[index]
        for name in names
    ]


def ps_scaled(world: World, replicas: int) -> ReplaceChild:
    spec = TransientTrainingJobSpec.model_validate(world.job["spec"])
    return ReplaceChild(ps_deployment(JobRef.of(world.job), spec, 0, replicas=replicas))


def kubelet_stops(world: World, names: tuple[str, ...], now: Any) -> None:
    """The kubelet ends the SIGTERMed containers (exit 143) and the pods go."""
    for name in names:
        pod = world.pod(name)
        if pod is not None:
            terminate(world, name, 143, now=now)
            world.observed.pods.remove(pod)


def test_suspending_stops_the_workers_gracefully_then_scales_the_parameter_servers_to_zero() -> None:
    world = training()
    before = copy.deepcopy(world.job["status"])
    suspend(world)

    stopping = world.reconcile(T0 + 2 * S, CONFIG)
    assert stopping.writes == stops(world, WORKERS)  # no creates, no Lease write: no election
    assert stopping.events == [
        EmitEvent("Normal", "Suspended", "stopping 3 worker pod(s); the chief writes a checkpoint first")
    ]
    status = stopping.status
    assert status["phase"] == "Suspended"
    assert conditions(status) == {
        "Created": ("True", "ChildrenCreated"),
        "Running": ("False", "Suspended"),
        "Recovering": ("False", "Suspended"),
        "ChiefElected": ("False", "Suspended"),
        "Stalled": ("False", "Progressing"),
        "Suspended": ("True", "Suspended"),
    }
    assert status["chief"] == before["chief"]  # kept: it writes its SIGTERM checkpoint at its own epoch
    assert (status["preemptions"], status["failures"], status["chiefElections"]) == (0, 0, 1)
    assert status["workers"]["summary"] == "0/3"

    # The pods are terminating: no more deletes, the chief is not replaced, nothing is counted as lost.
    again = world.reconcile(T0 + 3 * S, CONFIG)
    assert not again.of_type(DeleteChild)
    assert not again.of_type(CreateChild)
    assert again.events == []
    assert (again.status["preemptions"], again.status["failures"], again.status["chiefElections"]) == (0, 0, 1)

    # The chief's SIGTERM checkpoint is reported, then the workers are gone: the parameter servers go too.
    renew(world, T0 + 4 * S, {"globalStep": 470, "checkpointStep": 470, "epoch": 1})
    kubelet_stops(world, WORKERS, T0 + 5 * S)
    down = world.reconcile(T0 + 6 * S, CONFIG)
    assert down.writes == [ps_scaled(world, 0)]
    assert down.events == []  # the same condition, a new message
    assert condition(down.status, "Suspended") == (
        "True",
        "Suspended",
        "no pods run: no worker, and the parameter servers scaled to 0",
    )
    assert down.status["progress"]["checkpointStep"] == 470
    assert down.status["parameterServerPods"] == [""]
    assert (down.status["preemptions"], down.status["failures"]) == (0, 0)

    # The Deployment controller removes the PS pod; from then on no cost accrues.
    world.observed.pods[:] = [
        p for p in world.observed.pods if p["metadata"]["labels"]["transient.training/role"] != "ps"
    ]
    idle = world.reconcile(T0 + 7 * S, CONFIG).status
    later = world.reconcile(T0 + 10 * HOUR, CONFIG)
    assert later.writes == []
    assert later.events == []
    assert later.status["cost"]["usd"] == idle["cost"]["usd"]
    assert later.status["cost"]["usdPerHour"] == 0
    assert later.status["phase"] == "Suspended"


def test_a_resumed_job_starts_again_from_its_checkpoint_under_a_new_epoch() -> None:
    world = training(activeDeadlineSeconds=600)
    suspend(world)
    world.reconcile(T0 + 2 * S, CONFIG)
    renew(world, T0 + 3 * S, {"globalStep": 470, "checkpointStep": 470, "epoch": 1})
    kubelet_stops(world, WORKERS, T0 + 3 * S)
    world.reconcile(T0 + 4 * S, CONFIG)
    world.observed.pods[:] = [
        p for p in world.observed.pods if p["metadata"]["labels"]["transient.training/role"] != "ps"
    ]
    # Suspended far past activeDeadlineSeconds: the deadline does not run while suspended.
    suspended = world.reconcile(T0 + 2 * HOUR, CONFIG).status
    assert suspended["phase"] == "Suspended"

    resumed_at = T0 + 3 * HOUR
    suspend(world, False)
    resuming = world.reconcile(resumed_at, CONFIG)
    creates = resuming.of_type(CreateChild)
    # the chief is lost (no worker runs yet): no election, the Lease says so to the trainers to come
    assert [w for w in resuming.writes if not isinstance(w, CreateChild)] == [
        ps_scaled(world, 1),
        UpdateLease("mnist-chief", annotations={"transient.training/active-workers": "0"}),
    ]
    assert [c.name for c in creates] == ["mnist-worker-0-2", "mnist-worker-1-2", "mnist-worker-2-2"]
    assert resuming.events == [
        EmitEvent(
            "Normal",
            "Starting",
            "0/3 workers active; waiting for the parameter servers to start; waiting for the chief to start",
        ),
        EmitEvent("Normal", "Resumed", "spec.suspend is false: training resumes from the latest checkpoint"),
    ]
    status = resuming.status
    assert status["startTime"] == format_time(resumed_at)  # as batch/v1: the deadline counts from the resume
    assert status["phase"] == "Pending"
    assert condition(status, "Suspended")[:2] == ("False", "Resumed")  # type: ignore[index]

    # Two workers run before the PS does: a chief of epoch 2 is elected, and the job is starting, not recovering.
    new_workers = [p["metadata"]["name"] for p in pods(world)]
    for i, name in enumerate(new_workers[:2]):
        run_pod(world, name, f"gpu-{i}", resumed_at)
    elected = world.reconcile(resumed_at + S, CONFIG)
    status = elected.status
    assert (status["phase"], status["chief"]["epoch"], status["chiefElections"]) == ("Pending", 2, 2)
    assert conditions(status)["Recovering"] == ("False", "Starting")
    assert [e.reason for e in elected.events if e.type == "Warning"] == []
    # The PS and the last worker run: whole again, nothing was lost on the way.
    run_ps(world, "mnist-ps-0-def", now=resumed_at)
    run_pod(world, new_workers[2], "gpu-2", resumed_at)
    whole = world.reconcile(resumed_at + 2 * S, CONFIG)
    status = whole.status
    assert conditions(status)["Recovering"] == ("False", "AtDesiredWorkers")
    assert (status["phase"], status["chief"]["epoch"], status["chiefElections"]) == ("Running", 2, 2)
    assert (status["preemptions"], status["failures"], status["replacements"]) == (0, 0, 0)
    assert status["parameterServerPods"] == ["mnist-ps-0-def"]
    assert [e.reason for e in whole.events if e.type == "Warning"] == []
    assert conditions(status)["Suspended"] == ("False", "Resumed")
    # Still inside the deadline 590 s after the resume (hours after the job first started).
    assert world.reconcile(resumed_at + 590 * S, CONFIG).status["phase"] != "Failed"
    failed = world.reconcile(resumed_at + 601 * S, CONFIG).status
    assert (failed["phase"], condition(failed, "Failed")[1]) == ("Failed", "DeadlineExceeded")  # type: ignore[index]
    assert conditions(failed)["Suspended"] == ("False", "Resumed")  # kept when the job ends, as batch/v1 keeps it


def test_a_job_suspended_while_it_starts_deletes_its_pending_workers_and_never_elects() -> None:
    world = World(job())
    world.reconcile(T0, CONFIG)  # children created, workers Pending
    suspend(world)
    stopping = world.reconcile(T0 + S, CONFIG)
    assert stopping.writes == stops(world, WORKERS)
    assert stopping.status["phase"] == "Suspended"
    assert "chief" not in stopping.status or stopping.status["chief"] is None
    world.reconcile(T0 + 2 * S, CONFIG)  # the finalizers go; unbound pods go at once
    down = world.reconcile(T0 + 3 * S, CONFIG)
    assert down.writes == [ps_scaled(world, 0)]
    assert conditions(down.status) == {
        "Created": ("True", "ChildrenCreated"),
        "Running": ("False", "Suspended"),
        "ChiefElected": ("False", "Suspended"),
        "Suspended": ("True", "Suspended"),
    }


def test_suspending_a_finished_job_changes_nothing() -> None:
    world = training()
    renew(world, T0 + 2 * S, {"globalStep": 1000, "checkpointStep": 1000, "epoch": 1})
    chief = world.job["status"]["chief"]["pod"]
    terminate(world, chief, 0, now=T0 + 2 * S)
    world.reconcile(T0 + 3 * S, CONFIG)
    assert world.job["status"]["phase"] == "Succeeded"
    unsuspended = plan(world.job, world.observed, T0 + 4 * S, CONFIG)
    suspend(world)
    suspended = plan(world.job, world.observed, T0 + 4 * S, CONFIG)
    assert (suspended.writes, suspended.events, suspended.status) == (
        unsuspended.writes,
        unsuspended.events,
        unsuspended.status,
    )


def _in_progress(**fields: Any) -> InProgress:
    base: dict[str, Any] = {
        "started": True,
        "lost": False,
        "chief": None,
        "chief_healthy": False,
        "parameter_servers_ready": True,
        "active": 0,
        "desired": 3,
        "min_replicas": 2,
        "unschedulable": "",
        "budget": None,
        "budget_limited": False,
    }
    return InProgress(**{**base, **fields})


SUSPENDED = "spec.suspend is true"


def test_the_suspended_rows_of_the_condition_rule_table() -> None:
    rows = [
        (
            _in_progress(suspended=True, stopping=2, ever_suspended=True),
            "Suspended",
            [
                Wanted(C.CREATED, "True", R.CHILDREN_CREATED),
                Wanted(C.RUNNING, "False", R.SUSPENDED, SUSPENDED),
                Wanted(C.RECOVERING, "False", R.SUSPENDED, SUSPENDED),
                Wanted(C.CHIEF_ELECTED, "False", R.SUSPENDED, f"{SUSPENDED}: no chief until the job resumes"),
                Wanted(C.STALLED, "False", R.PROGRESSING),
                Wanted(
                    C.SUSPENDED,
                    "True",
                    R.SUSPENDED,
                    "stopping 2 worker pod(s); the chief writes a checkpoint first",
                ),
            ],
        ),
        (
            _in_progress(started=False, suspended=True, ever_suspended=True),
            "Suspended",
            [
                Wanted(C.CREATED, "True", R.CHILDREN_CREATED),
                Wanted(C.RUNNING, "False", R.SUSPENDED, SUSPENDED),
                Wanted(C.CHIEF_ELECTED, "False", R.SUSPENDED, f"{SUSPENDED}: no chief until the job resumes"),
                Wanted(
                    C.SUSPENDED,
                    "True",
                    R.SUSPENDED,
                    "no pods run: no worker, and the parameter servers scaled to 0",
                ),
            ],
        ),
        (
            _in_progress(started=False, ever_suspended=True),
            "Pending",
            [
                Wanted(C.CREATED, "True", R.CHILDREN_CREATED),
                Wanted(C.RUNNING, "False", R.WAITING_FOR_WORKERS),
                Wanted(C.CHIEF_ELECTED, "False", R.NO_RUNNING_WORKERS),
                Wanted(
                    C.SUSPENDED,
                    "False",
                    R.RESUMED,
                    "spec.suspend is false: training resumes from the latest checkpoint",
                ),
            ],
        ),
    ]
    for situation, phase, wanted in rows:
        assert (phase_of(situation), wanted_conditions(situation)) == (phase, wanted)
    # never suspended: no Suspended condition at all
    assert "Suspended" not in [w.type for w in wanted_conditions(_in_progress())]


def test_a_job_created_suspended_creates_no_pod_until_it_is_resumed() -> None:
    """What Kueue-style queueing does: create the job suspended, admit it later."""
    world = World(job(suspend=True))
    first = world.reconcile(T0, CONFIG)
    created = [(w.kind, w.name) for w in first.of_type(CreateChild)]
    assert created == [
        ("Service", "mnist"),
        ("NetworkPolicy", "mnist"),
        ("ServiceAccount", "mnist-trainer"),
        ("Role", "mnist-trainer"),
        ("RoleBinding", "mnist-trainer"),
        ("Deployment", "mnist-ps-0"),
    ]
    assert first.of_type(CreateChild)[-1].manifest["spec"]["replicas"] == 0
    assert first.writes == first.of_type(CreateChild)
    assert first.events == [
        EmitEvent("Normal", "ChildrenCreated", "Created"),
        EmitEvent("Normal", "Suspended", "no pods run: no worker, and the parameter servers scaled to 0"),
    ]
    assert (first.status["phase"], first.status["startTime"]) == ("Suspended", format_time(T0))
    again = world.reconcile(T0 + HOUR, CONFIG)
    assert (again.writes, again.events) == ([], [])

    suspend(world, False)
    admitted = world.reconcile(T0 + 2 * HOUR, CONFIG)
    assert [(type(w).__name__, w.name) for w in admitted.writes] == [
        ("ReplaceChild", "mnist-ps-0"),
        ("CreateChild", "mnist-worker-0-1"),
        ("CreateChild", "mnist-worker-1-1"),
        ("CreateChild", "mnist-worker-2-1"),
        ("CreateChild", "mnist-chief"),  # the Lease, made with the first election's inputs
    ]
    assert admitted.of_type(ReplaceChild) == [ps_scaled(world, 1)]
    assert admitted.status["startTime"] == format_time(T0 + 2 * HOUR)
    assert conditions(admitted.status)["Suspended"] == ("False", "Resumed")


def resumed_and_whole() -> tuple[World, Any]:
    """A job suspended (its chief's SIGTERM checkpoint at 470), resumed, and whole again under a chief of epoch 2."""
    world = training()
    suspend(world)
    world.reconcile(T0 + 2 * S, CONFIG)
    renew(world, T0 + 3 * S, {"globalStep": 470, "checkpointStep": 470, "epoch": 1})
    kubelet_stops(world, WORKERS, T0 + 3 * S)
    world.reconcile(T0 + 4 * S, CONFIG)
    world.observed.pods[:] = [
        p for p in world.observed.pods if p["metadata"]["labels"]["transient.training/role"] != "ps"
    ]
    world.reconcile(T0 + 5 * S, CONFIG)
    suspend(world, False)
    now = T0 + HOUR
    world.reconcile(now, CONFIG)
    run_ps(world, "mnist-ps-0-def", now=now)
    for i, pod in enumerate(pods(world)):
        run_pod(world, pod["metadata"]["name"], f"gpu-{i}", now)
    whole = world.reconcile(now + S, CONFIG).status
    assert (whole["phase"], conditions(whole)["Recovering"], whole["chief"]["epoch"]) == (
        "Running",
        ("False", "AtDesiredWorkers"),
        2,
    )
    return world, now + S


def test_after_a_resume_only_a_new_loss_makes_the_job_recovering() -> None:
    world, now = resumed_and_whole()
    chief = world.job["status"]["chief"]["pod"]
    others = [p["metadata"]["name"] for p in pods(world) if p["metadata"]["name"] != chief]
    # A worker that reached trainSteps exits 0: short of a worker, nothing lost (the resume's election is none).
    terminate(world, others[0], 0, now=now + S)
    finishing = world.reconcile(now + S, CONFIG)
    assert (finishing.status["phase"], conditions(finishing.status)["Recovering"]) == ("Running", ("False", "Starting"))
    assert [e for e in finishing.events if e.type == "Warning"] == []
    # A worker preempted after the resume is a loss like any other.
    terminate(world, others[1], 143, pod_reason="NodeShutdown", now=now + 2 * S)
    lost = world.reconcile(now + 2 * S, CONFIG)
    assert (lost.status["phase"], conditions(lost.status)["Recovering"]) == ("Recovering", ("True", "WorkersLost"))
    assert lost.status["preemptions"] == 1
    assert [e.reason for e in lost.events if e.type == "Warning"] == ["WorkerPreempted", "WorkersLost"]
