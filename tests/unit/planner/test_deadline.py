"""Finishing by spec.deadline: the stage's decisions (escalate, hold, release make-before-break, infeasible, capped
by the budget), and whole operator passes that add and release catch-up workers; a job without a deadline keeps
its workers as before and gains only its ETA."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from tests.unit.planner.builders import T0, job, node, pods, renew, run_pod, start, terminate
from ttj.api.models import DeadlineStatus, ProgressStatus, TransientTrainingJobSpec, TransientTrainingJobStatus
from ttj.cost.budget import BudgetDecision
from ttj.planner.classify import PodState, PodVerdict
from ttj.planner.groups import Unavailable, group_problems, groups_of
from ttj.planner.stages.deadline import DeadlineInputs, plan_deadline
from ttj.planner.world import World
from ttj_contract import format_time

UNSCHEDULABLE = "Unschedulable: 0/3 nodes are available"
#: Each worker trains 0.4 steps/s; 3 spot workers, 5 slots (2 free for catch-up), 1000 steps in 1000 s.
RATE = 0.4


def spec(**deadline: Any) -> TransientTrainingJobSpec:
    return TransientTrainingJobSpec.model_validate(
        job(trainSteps=1000, deadline={"completeWithinSeconds": 1000, **deadline}, workers={"maxReplicas": 5})["spec"]
    )


def worker(slot: int, group: str | None) -> dict[str, Any]:
    labels = {"transient.training/role": "worker", "transient.training/slot": str(slot)}
    if group is not None:
        labels["transient.training/worker-group"] = group
    return {"metadata": {"name": f"mnist-worker-{slot}-1", "labels": labels}, "status": {"phase": "Running"}}


def inputs(
    *,
    step: int,
    seconds: int,
    spot: str = "RRR",
    catch_up: int = 0,
    previous: DeadlineStatus | None = None,
    budget: BudgetDecision | None = None,
    the_spec: TransientTrainingJobSpec | None = None,
    chief: int = 0,
) -> DeadlineInputs:
    """The job ``seconds`` after its start at ``step``: its spot workers (R running, P pending and schedulable,
    U unschedulable in a group out of capacity) and ``catch_up`` running catch-up workers, each at RATE; the
    chief is the worker of slot ``chief``."""
    the_spec = the_spec or spec()
    workers = [worker(i, None) for i in range(len(spot))]
    workers += [worker(len(spot) + i, "catch-up") for i in range(catch_up)]
    verdicts = {}
    for pod, kind in zip(workers, spot + "R" * catch_up, strict=True):
        state = PodState.RUNNING if kind == "R" else PodState.PENDING
        verdicts[pod["metadata"]["name"]] = PodVerdict(state, pending_reason=UNSCHEDULABLE if kind == "U" else "")
        if kind != "R":
            pod["status"]["phase"] = "Pending"
    running = [i for i, kind in enumerate(spot + "R" * catch_up) if kind == "R"]
    report = {"globalStep": step, "epoch": 1, "slotStepsPerSecond": {str(i): RATE for i in running} or {"0": RATE}}
    now = T0 + timedelta(seconds=seconds)
    return DeadlineInputs(
        spec=the_spec,
        progress=ProgressStatus(global_step=step, last_progress_time=format_time(now)),
        previous=TransientTrainingJobStatus(deadline=previous),
        groups=groups_of(the_spec),
        workers=workers,
        verdicts=verdicts,
        unavailable={"None": Unavailable(T0, UNSCHEDULABLE)} if "U" in spot else {},
        lease={"metadata": {"annotations": {"transient.training/progress": json.dumps(report)}}},
        holder=f"mnist-worker-{chief}-1",
        budget=budget,
        group_prices={None: 1.0, "catch-up": 4.0},
        started=T0,
        created=T0,
        suspended=False,
        now=now,
    )


def held(count: int, state: str = "AtRisk") -> DeadlineStatus:
    """status.deadline of a job that held ``count`` catch-up workers."""
    escalated = format_time(T0) if count else None
    return DeadlineStatus(at=format_time(T0), state=state, catch_up_workers=count, escalated_at=escalated)


#: Budget: $18 of $20 projected; a catch-up worker costs $4/h, so $1 over the 15 min horizon: one more fits.
ONE_MORE = BudgetDecision(None, False, "", spent_usd=10.0, max_cost_usd=20.0, projected_usd=19.0)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        # ahead of the line and spot alone finishes in time: no catch-up worker
        (inputs(step=600, seconds=500), (0, "OnTrack", ())),
        # behind the line (300 of 500): the fewest catch-up workers that finish in time
        (inputs(step=300, seconds=500), (1, "AtRisk", ("DeadlineEscalated",))),
        # hysteresis: ahead, but by less than the margin (5 % of the steps): the worker stays
        (inputs(step=520, seconds=500, catch_up=1, previous=held(1)), (1, "AtRisk", ())),
        # ahead by the margin and spot alone makes it: released
        (inputs(step=600, seconds=500, catch_up=1, previous=held(1)), (0, "OnTrack", ("DeadlineReleased",))),
        # ... but not while a spot worker it would rely on is still starting (make-before-break)
        (inputs(step=600, seconds=500, spot="RRP", catch_up=1, previous=held(1)), (1, "OnTrack", ())),
        # ... but a spot worker that cannot be scheduled is not waited for: spot alone (2) makes it
        (
            inputs(step=650, seconds=500, spot="RRU", catch_up=1, previous=held(1)),
            (0, "OnTrack", ("DeadlineReleased",)),
        ),
        # ... and never the chief: a chief in the catch-up group keeps one catch-up worker until it is lost
        (
            inputs(step=600, seconds=500, catch_up=2, previous=held(2), chief=3),
            (1, "OnTrack", ("DeadlineReleased",)),
        ),
        # the spot pool is out (every spot worker unschedulable): ahead, yet only catch-up workers finish in time
        (inputs(step=700, seconds=500, spot="UUU"), (2, "AtRisk", ("DeadlineEscalated",))),
        # not even every allowed catch-up worker makes it: said at once, with all of them
        (inputs(step=100, seconds=500), (2, "Infeasible", ("DeadlineEscalated", "DeadlineInfeasible"))),
        # ... once
        (inputs(step=10, seconds=520, catch_up=2, previous=held(2, "Infeasible")), (2, "Infeasible", ())),
        # the budget allows one catch-up worker where two are needed: the budget wins, and the deadline is infeasible
        (
            inputs(step=200, seconds=500, budget=ONE_MORE),
            (1, "Infeasible", ("DeadlineEscalated", "DeadlineInfeasible")),
        ),
        # maxCatchUpWorkers caps them the same way
        (
            inputs(step=200, seconds=500, the_spec=spec(maxCatchUpWorkers=1)),
            (1, "Infeasible", ("DeadlineEscalated", "DeadlineInfeasible")),
        ),
        # more held than now allowed (maxCatchUpWorkers lowered): the policy holds what is allowed
        (
            inputs(step=300, seconds=500, catch_up=2, previous=held(2), the_spec=spec(maxCatchUpWorkers=1)),
            (1, "AtRisk", ("DeadlineReleased",)),
        ),
        # done before the deadline
        (inputs(step=1000, seconds=900, catch_up=1, previous=held(1)), (0, "Met", ("DeadlineReleased",))),
    ],
    ids=[
        "on-track",
        "escalate",
        "hold",
        "release",
        "release-waits-for-spot",
        "release-without-unschedulable-spot",
        "chief-stays",
        "spot-out",
        "infeasible",
        "infeasible-once",
        "budget-capped",
        "max-catch-up",
        "cap-lowered",
        "met",
    ],
)
def test_the_deadline_stage_decides_the_catch_up_workers(
    given: DeadlineInputs, expected: tuple[int, str, tuple[str, ...]]
) -> None:
    decided = plan_deadline(given)
    assert decided.status is not None
    assert (decided.catch_up_workers, decided.status.state, tuple(e.reason for e in decided.events)) == expected


NO_FREE_SLOT = TransientTrainingJobSpec.model_validate(
    job(trainSteps=1000, deadline={"completeWithinSeconds": 1000}, workers={"maxReplicas": 3})["spec"]
)


@pytest.mark.parametrize(
    ("given", "capped"),
    [
        (
            inputs(step=200, seconds=500, budget=ONE_MORE),
            "; 1 catch-up worker(s) at most: the budget (maxCostUSD $20.00)",
        ),
        (
            inputs(step=200, seconds=500, the_spec=NO_FREE_SLOT),
            "; 0 catch-up worker(s) at most: the free worker slots (maxReplicas 3)",
        ),
    ],
    ids=["budget", "no-free-slot"],
)
def test_an_infeasible_deadline_says_what_capped_the_catch_up_workers(given: DeadlineInputs, capped: str) -> None:
    decided = plan_deadline(given)
    assert decided.status is not None
    assert decided.status.state == "Infeasible"
    assert decided.status.message is not None
    assert decided.status.message.endswith(capped)
    assert decided.status.slack_seconds is not None
    assert decided.status.slack_seconds < 0


@pytest.mark.parametrize(
    ("given", "why"),
    [
        (
            inputs(step=600, seconds=500, spot="RRP", catch_up=1, previous=held(1)),
            "; 1 kept until the 3 other workers counted on run (2 do)",
        ),
        (
            inputs(step=600, seconds=500, catch_up=2, previous=held(2), chief=3),
            "; 1 kept: the chief runs in the catch-up group until it is lost",
        ),
    ],
    ids=["spot-starting", "chief"],
)
def test_the_status_says_why_catch_up_workers_are_kept(given: DeadlineInputs, why: str) -> None:
    decided = plan_deadline(given)
    assert decided.status is not None
    assert decided.status.message is not None
    assert decided.status.message.endswith(why)


def test_the_slack_is_the_deadline_less_the_published_p90() -> None:
    decided = plan_deadline(inputs(step=300, seconds=500))
    assert decided.status is not None
    assert decided.eta is not None
    # 700 steps left at 4 x 0.4 steps/s, the new worker joining in 60 s: 497.5 s after the report, 1000 s to go
    assert (decided.eta.p90, decided.status.slack_seconds) == (format_time(T0 + timedelta(seconds=997)), 3)


def test_the_eta_moves_with_the_clock_only_once_the_step_stands_still() -> None:
    no_deadline = TransientTrainingJobSpec.model_validate(job(trainSteps=1000)["spec"])
    reported = inputs(step=300, seconds=500, the_spec=no_deadline)
    etas = [plan_deadline(replace(reported, now=reported.now + timedelta(seconds=later))).eta for later in (0, 60, 61)]
    # 700 steps left at 1.2 steps/s: 583 s after the report, or after now once the step stood still for 60 s
    assert [eta.p90 if eta else None for eta in etas] == [
        format_time(T0 + timedelta(seconds=500 + 583)),
        format_time(T0 + timedelta(seconds=500 + 583)),
        format_time(T0 + timedelta(seconds=561 + 583)),
    ]


def test_without_a_deadline_the_stage_gives_only_the_eta() -> None:
    no_deadline = TransientTrainingJobSpec.model_validate(job(trainSteps=1000)["spec"])
    decided = plan_deadline(inputs(step=400, seconds=500, the_spec=no_deadline))
    # 600 steps left at 3 x 0.4 steps/s: 500 s after the report
    assert (decided.catch_up_workers, decided.status, decided.events) == (0, None, ())
    assert decided.eta is not None
    assert (decided.eta.p50, decided.eta.p90) == (format_time(T0 + timedelta(seconds=1000)),) * 2


SPOT_L4 = {"name": "l4", "acceleratorType": "nvidia-l4"}
SPOT_T4 = {"name": "t4"}
ON_DEMAND_T4 = {"name": "t4-od", "provisioning": "on-demand", "maxReplicas": 2}


@pytest.mark.parametrize(
    ("groups", "deadline", "expected"),
    [
        # no groups: the job's one group, and its on-demand twin
        (None, {}, [(None, "spot", False, None), ("catch-up", "on-demand", True, 0)]),
        # the last on-demand group after the first
        (
            [SPOT_L4, ON_DEMAND_T4, SPOT_T4],
            {},
            [("l4", "spot", False, None), ("t4-od", "on-demand", True, 0), ("t4", "spot", False, None)],
        ),
        # no on-demand group: the first group's on-demand twin, last
        (
            [SPOT_L4, SPOT_T4],
            {},
            [("l4", "spot", False, None), ("t4", "spot", False, None), ("catch-up", "on-demand", True, 0)],
        ),
        # named: any group but the first, on-demand or not
        (
            [SPOT_L4, SPOT_T4, ON_DEMAND_T4],
            {"catchUpGroup": "t4"},
            [("l4", "spot", False, None), ("t4", "spot", True, 0), ("t4-od", "on-demand", False, 2)],
        ),
    ],
    ids=["no-groups", "last-on-demand", "implicit-twin", "named"],
)
def test_the_catch_up_group(
    groups: list[dict[str, Any]] | None, deadline: dict[str, Any], expected: list[tuple[Any, ...]]
) -> None:
    workers: dict[str, Any] = {"groups": groups} if groups else {}
    the_spec = TransientTrainingJobSpec.model_validate(
        job(deadline={"completeWithinSeconds": 60, **deadline}, workers=workers)["spec"]
    )
    made = [(g.name, str(g.spec.workers.provisioning), g.catch_up, g.max_slots) for g in groups_of(the_spec)]
    assert made == expected


def test_a_group_named_like_the_implicit_catch_up_group_makes_the_job_invalid() -> None:
    the_spec = TransientTrainingJobSpec.model_validate(
        job(deadline={"completeWithinSeconds": 60}, workers={"groups": [SPOT_L4, {"name": "catch-up"}]})["spec"]
    )
    assert group_problems(the_spec) == [
        "workers.groups: a group is named catch-up, the name of the deadline's implicit catch-up group: name the "
        "catch-up group in deadline.catchUpGroup, or rename the group"
    ]


# -- whole passes ------------------------------------------------------------------------------------
def rates(slots: int) -> dict[str, float]:
    return {str(i): RATE for i in range(slots)}


def passes(world: World, steps: list[tuple[int, int, int]]) -> list[tuple[Any, ...]]:
    """Report (seconds, step, slots reporting) as the chief and reconcile; after each pass: the deadline's state,
    its catch-up workers, the live workers by group, the condition, and the deadline Events of the pass."""
    seen = []
    for seconds, step, slots in steps:
        now = T0 + timedelta(seconds=seconds)
        before = len(world.events)
        renew(world, now, {"globalStep": step, "epoch": 1, "slotStepsPerSecond": rates(slots)})
        world.reconcile(now)
        for pod in pods(world):
            if pod.get("status", {}).get("phase") == "Pending":
                world.observed.nodes.setdefault("od-0", node("od-0", "on-demand"))
                run_pod(world, pod["metadata"]["name"], "od-0", now)
        status = world.job["status"]
        groups = sorted(str(p["metadata"]["labels"].get("transient.training/worker-group")) for p in pods(world))
        condition = next((c for c in status["conditions"] if c["type"] == "DeadlineAtRisk"), {})
        seen.append(
            (
                status["deadline"]["state"],
                status["deadline"]["catchUpWorkers"],
                groups,
                (condition.get("status"), condition.get("reason")),
                [e.reason for e in world.events[before:] if e.reason.startswith("Deadline")],
            )
        )
    return seen


def test_catch_up_workers_are_added_held_and_released_on_demand_never_the_chief() -> None:
    world = World(
        job(trainSteps=1000, workers={"replicas": 3, "maxReplicas": 5}, deadline={"completeWithinSeconds": 1000})
    )
    start(world, [node(f"gpu-{i}") for i in range(3)])
    spot = ["None"] * 3
    assert passes(world, [(500, 300, 3)]) == [
        ("AtRisk", 1, [*spot, "catch-up"], ("True", "BehindUniformProgress"), ["DeadlineEscalated"]),
    ]
    catch_up = world.pod("mnist-worker-3-1")
    assert catch_up is not None
    # the implicit catch-up group is the first group's on-demand twin, in a free slot
    assert catch_up["spec"]["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}
    assert passes(world, [(600, 450, 4), (700, 800, 4), (710, 810, 3)]) == [
        ("AtRisk", 1, [*spot, "catch-up"], ("True", "BehindUniformProgress"), []),
        ("OnTrack", 0, spot, ("False", "OnTrack"), ["DeadlineReleased"]),
        ("OnTrack", 0, spot, ("False", "OnTrack"), []),
    ]
    assert world.pod("mnist-worker-3-1") is None
    assert world.job["status"]["chief"]["pod"] == "mnist-worker-0-1"


def test_the_last_on_demand_group_catches_up_within_its_max_replicas() -> None:
    groups = [
        {"name": "spot"},
        {"name": "on-demand", "provisioning": "on-demand", "maxReplicas": 1},
    ]
    world = World(
        job(
            trainSteps=1000,
            workers={"replicas": 3, "maxReplicas": 5, "groups": groups},
            deadline={"completeWithinSeconds": 1000},
        )
    )
    start(world, [node(f"gpu-{i}") for i in range(3)])
    assert passes(world, [(500, 200, 3)]) == [
        (
            "Infeasible",
            1,
            ["on-demand", "spot", "spot", "spot"],
            ("True", "DeadlineInfeasible"),
            ["DeadlineEscalated", "DeadlineInfeasible"],
        ),
    ]
    status = world.job["status"]
    assert [(g["name"], g["desired"]) for g in status["workerGroups"]] == [("spot", 3), ("on-demand", 1)]


def test_a_spot_pool_out_escalates_to_on_demand_and_its_return_releases_them() -> None:
    groups = [{"name": "spot"}, {"name": "on-demand", "provisioning": "on-demand"}]
    world = World(
        job(
            trainSteps=1000,
            workers={"replicas": 3, "maxReplicas": 5, "groups": groups},
            deadline={"completeWithinSeconds": 1000},
        )
    )
    start(world, [node(f"gpu-{i}") for i in range(3)])
    seen = []

    def reconcile(seconds: int, step: int, slots: list[int]) -> None:
        now = T0 + timedelta(seconds=seconds)
        renew(world, now, {"globalStep": step, "epoch": 1, "slotStepsPerSecond": {str(i): RATE for i in slots}})
        world.reconcile(now)
        live = sorted(
            (p["metadata"]["name"], p["metadata"]["labels"]["transient.training/worker-group"], p["status"]["phase"])
            for p in pods(world)
        )
        deadline = world.job["status"]["deadline"]
        seen.append((seconds, deadline["state"], deadline["catchUpWorkers"], live))

    def run(group: str, seconds: int) -> None:
        for pod in pods(world):
            name = pod["metadata"]["name"]
            if (
                pod["metadata"]["labels"]["transient.training/worker-group"] == group
                and pod["status"]["phase"] != "Running"
            ):
                world.observed.nodes[f"{name}-node"] = node(f"{name}-node", "spot" if group == "spot" else "on-demand")
                run_pod(world, name, f"{name}-node", T0 + timedelta(seconds=seconds))

    reconcile(300, 300, [0, 1, 2])
    for name in ("mnist-worker-1-1", "mnist-worker-2-1"):
        terminate(world, name, 137, now=T0 + timedelta(seconds=310))
    reconcile(310, 310, [0])  # replacements are on their way: a preemption alone is no reason to catch up
    for pod in pods(world):
        if pod["status"]["phase"] == "Pending":
            pod["status"]["conditions"] = [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/3 nodes are available",
                    "lastTransitionTime": format_time(T0 + timedelta(seconds=311)),
                }
            ]
    reconcile(311, 311, [0])  # the spot pool is out: only on-demand workers finish in time
    run("on-demand", 320)
    reconcile(400, 360, [0, 3, 4])
    run("spot", 450)
    reconcile(500, 600, [0, 1, 2, 3, 4])  # spot is back and the job ahead: released, the spot workers running
    spot = [("mnist-worker-0-1", "spot", "Running")]
    back = [("mnist-worker-1-2", "spot", "Running"), ("mnist-worker-2-2", "spot", "Running")]
    waiting = [("mnist-worker-1-2", "spot", "Pending"), ("mnist-worker-2-2", "spot", "Pending")]
    assert seen == [
        (
            300,
            "OnTrack",
            0,
            [*spot, ("mnist-worker-1-1", "spot", "Running"), ("mnist-worker-2-1", "spot", "Running")],
        ),
        (310, "OnTrack", 0, [*spot, *waiting]),
        (
            311,
            "AtRisk",
            2,
            [
                *spot,
                *waiting,
                ("mnist-worker-3-1", "on-demand", "Pending"),
                ("mnist-worker-4-1", "on-demand", "Pending"),
            ],
        ),
        (
            400,
            "AtRisk",
            2,
            [
                *spot,
                *waiting,
                ("mnist-worker-3-1", "on-demand", "Running"),
                ("mnist-worker-4-1", "on-demand", "Running"),
            ],
        ),
        (500, "OnTrack", 0, [*spot, *back]),
    ]
    assert [e.reason for e in world.events if e.reason.startswith("Deadline")] == [
        "DeadlineEscalated",
        "DeadlineReleased",
    ]
    assert world.job["status"]["chief"]["pod"] == "mnist-worker-0-1"


def test_a_job_without_a_deadline_keeps_its_workers_and_gains_an_eta() -> None:
    world = World(job(trainSteps=1000, workers={"replicas": 3, "maxReplicas": 5}))
    start(world, [node(f"gpu-{i}") for i in range(3)])
    now = T0 + timedelta(seconds=500)
    renew(world, now, {"globalStep": 300, "epoch": 1, "slotStepsPerSecond": rates(3)})
    world.reconcile(now)
    status = world.job["status"]
    assert [p["metadata"]["name"] for p in pods(world)] == [f"mnist-worker-{i}-1" for i in range(3)]
    assert "deadline" not in status
    assert all(c["type"] != "DeadlineAtRisk" for c in status["conditions"])
    # 700 steps left at 1.2 steps/s, from the report
    eta = format_time(now + timedelta(seconds=round(700 / 1.2)))
    assert status["progress"]["eta"] == {"p50": eta, "p90": eta}


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [(900, ("Met", "DeadlineMet")), (1100, ("Missed", "DeadlineMissed"))],
)
def test_a_job_that_succeeds_met_or_missed_its_deadline(seconds: int, expected: tuple[str, str]) -> None:
    world = World(
        job(trainSteps=1000, workers={"replicas": 3, "maxReplicas": 5}, deadline={"completeWithinSeconds": 1000})
    )
    start(world, [node(f"gpu-{i}") for i in range(3)])
    passes(world, [(500, 600, 3)])
    done = T0 + timedelta(seconds=seconds)
    final = {"globalStep": 1000, "checkpointStep": 1000, "checkpointPath": "/ckpt/model-1000", "epoch": 1}
    renew(world, done, {**final, "checkpointTime": format_time(done)})
    for pod in pods(world):
        terminate(world, pod["metadata"]["name"], 0, reason="Completed")
    world.reconcile(done)
    status = world.job["status"]
    condition = next(c for c in status["conditions"] if c["type"] == "DeadlineAtRisk")
    assert (status["phase"], status["deadline"]["state"], condition["status"], condition["reason"]) == (
        "Succeeded",
        expected[0],
        "False",
        expected[1],
    )
    assert "slackSeconds" not in status["deadline"]


@pytest.mark.parametrize(
    ("spot", "previous", "expected"),
    [
        # spot out at the start: one catch-up worker trains so that the pace can be measured
        ("UUU", None, (1, "AtRisk", ("DeadlineEscalated",))),
        # already held: held on, said once
        ("UUU", held(1), (1, "AtRisk", ())),
        # spot workers starting: wait for their pace
        ("PPP", None, (0, None, ())),
    ],
    ids=["spot-out-at-start", "held", "spot-starting"],
)
def test_before_any_pace_is_known_a_job_no_spot_worker_can_run_starts_with_one_catch_up_worker(
    spot: str, previous: DeadlineStatus | None, expected: tuple[int, str | None, tuple[str, ...]]
) -> None:
    given = replace(inputs(step=0, seconds=10, spot=spot, previous=previous), lease=None, progress=None)
    decided = plan_deadline(given)
    state = decided.status.state if decided.status is not None else None
    assert (decided.catch_up_workers, state, tuple(e.reason for e in decided.events)) == expected
    assert decided.eta is None
