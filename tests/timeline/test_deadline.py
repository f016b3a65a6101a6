"""``ttj timeline`` for a job with spec.deadline: the uniform line against the progress, the ETA, the catch-up
workers the policy added and released (from its Events) and the workers running, on a job the planner took
behind the line and back."""

from __future__ import annotations

import copy
from datetime import timedelta
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

from tests.timeline.events import as_kept
from tests.unit.planner.builders import T0, job, node, pods, renew, run_pod, start
from ttj.planner.world import World
from ttj.timeline.cluster import from_cluster
from ttj.timeline.draw import figure
from ttj.timeline.model import DeadlineMove, PodSpan, Timeline
from ttj.timeline.text import render

#: each worker trains 0.4 steps/s
RATE = 0.4


class DeadlineRun:
    """A job of 1000 steps due 1000 s after its start with 3 spot workers and room for 2 catch-up workers; the
    planner's passes at the chief's reports, its Events as the API server keeps them (with their time)."""

    def __init__(self) -> None:
        self.world = World(
            job(trainSteps=1000, workers={"replicas": 3, "maxReplicas": 5}, deadline={"completeWithinSeconds": 1000})
        )
        start(self.world, [node(f"gpu-{i}") for i in range(3)])
        self.events: list[dict[str, Any]] = []

    def report(self, seconds: int, step: int, slots: int) -> None:
        """The chief reports ``step`` with ``slots`` workers training; a pending catch-up worker then runs."""
        now = T0 + timedelta(seconds=seconds)
        renew(
            self.world,
            now,
            {"globalStep": step, "epoch": 1, "slotStepsPerSecond": {str(i): RATE for i in range(slots)}},
        )
        before = len(self.world.events)
        self.world.reconcile(now)
        self.events += as_kept(self.world.events[before:], now)
        for pod in pods(self.world):
            if pod.get("status", {}).get("phase") == "Pending":
                self.world.observed.nodes.setdefault("od-0", node("od-0", "on-demand"))
                run_pod(self.world, pod["metadata"]["name"], "od-0", now)

    def timeline(self, seconds: int, listed: list[dict[str, Any]] | None = None) -> Timeline:
        if listed is None:  # a deleted pod is gone once its containers stopped
            listed = [p for p in self.world.observed.pods if not p["metadata"].get("deletionTimestamp")]
        now = T0 + timedelta(seconds=seconds)
        return from_cluster(self.world.job, self.events, listed, self.world.observed.lease, now)


def behind_and_back() -> tuple[DeadlineRun, list[dict[str, Any]]]:
    """Behind the line at 500 s (300 of 500 steps): a catch-up worker; ahead at 700 s: released. Also the pods
    as listed at 600 s, while the catch-up worker ran."""
    run = DeadlineRun()
    run.report(500, 300, 3)
    run.report(600, 450, 4)
    while_held = copy.deepcopy(list(run.world.observed.pods))
    run.report(700, 800, 4)
    return run, while_held


def test_the_deadline_and_the_policys_moves_are_read_from_the_status_and_the_events() -> None:
    run, _ = behind_and_back()
    timeline = run.timeline(710)
    track = timeline.deadline
    assert track is not None
    # the step at each of the policy's Events, between the start and now
    assert timeline.steps == [(0.0, 0), (500.0, 300), (700.0, 800), (710.0, 800)]
    assert (track.started, track.at, track.steps_total, track.state, track.catch_up_group) == (
        0.0,
        1000.0,
        1000,
        "OnTrack",
        "catch-up",
    )
    assert track.condition is not None
    assert track.condition[:2] == ("False", "OnTrack")
    assert track.eta is not None
    assert track.eta[0] <= track.eta[1] < track.at
    assert [(m.time, m.reason, m.change, m.held) for m in track.moves] == [
        (500.0, "DeadlineEscalated", 1, 1),
        (700.0, "DeadlineReleased", -1, 0),
    ]
    assert track.held(710.0) == [(0.0, 0), (500.0, 1), (700.0, 0), (710.0, 0)]
    assert [track.uniform_steps(s) for s in (-5.0, 0.0, 500.0, 1000.0, 1200.0)] == [0, 0, 500, 1000, 1000]


def test_spot_and_catch_up_workers_running_come_from_the_pods() -> None:
    run, while_held = behind_and_back()
    timeline = run.timeline(600, while_held)
    assert timeline.workers_running("catch-up") == [(0.0, 3, 0), (500.0, 3, 1)]
    # the catch-up worker is gone since its release; what it held stays in the Events
    assert run.timeline(710).workers_running("catch-up") == [(0.0, 3, 0)]


def test_an_infeasible_deadline_is_a_move_without_a_count() -> None:
    run = DeadlineRun()
    run.report(500, 100, 3)
    track = run.timeline(510).deadline
    assert track is not None
    assert track.state == "Infeasible"
    assert track.condition is not None
    assert track.condition[:2] == ("True", "DeadlineInfeasible")
    assert [(m.reason, m.change, m.held) for m in track.moves] == [
        ("DeadlineEscalated", 2, 2),
        ("DeadlineInfeasible", 0, None),
    ]


def test_the_text_says_where_the_job_stands_and_each_move() -> None:
    run, _ = behind_and_back()
    text = render(run.timeline(710), "ns/mnist")
    section = text.split("deadline at ", 1)[1].split("\n\n", 1)[0].splitlines()
    assert section[0].startswith("1000.0s: OnTrack, catch-up workers 0 (group catch-up), slack ")
    assert section[1] == "  at 710.0s: step 800 of 1000, the uniform line asks 710"
    assert section[2].startswith("  DeadlineAtRisk False (OnTrack): ")
    assert section[3] == "  workers running at once, at most: 3 others, 0 catch-up"
    assert section[4].startswith(
        "    500.0s  DeadlineEscalated: adding 1 catch-up worker(s) in group catch-up (1 held)"
    )
    assert section[5].startswith(
        "    700.0s  DeadlineReleased: releasing 1 catch-up worker(s) in group catch-up (0 held)"
    )


def test_the_picture_draws_the_uniform_line_the_deadline_and_the_workers(tmp_path: Path) -> None:
    run, while_held = behind_and_back()
    timeline = run.timeline(710)
    timeline.pods.update(run.timeline(710, while_held).pods)  # as a timeline sampled while the job ran
    fig = figure(timeline, "ns/mnist")
    try:
        lanes, steps, workers = fig.axes[:3]
        labels = {line.get_label(): line for line in steps.get_lines()}
        uniform = labels["uniform progress"]
        assert (list(uniform.get_xdata()), list(uniform.get_ydata())) == ([0.0, 1000.0], [0, 1000])
        assert "ETA" in labels
        assert steps.get_xlim()[1] >= 1000.0  # the deadline is in the picture
        drawn = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in workers.get_lines()}
        assert drawn["catch-up held (catch-up)"] == ([0.0, 500.0, 700.0, 710.0], [0, 1, 0, 0])
        assert drawn["spot workers running"][1][:2] == [3, 3]
        assert max(drawn["catch-up workers running"][1]) == 1
        assert [t.get_text() for t in workers.texts] == ["+1", "-1"]
        assert lanes.get_title() == "ns/mnist"
    finally:
        plt.close(fig)


def test_a_far_deadline_is_named_at_the_edge_not_stretched_to() -> None:
    run, _ = behind_and_back()
    timeline = run.timeline(710)
    assert timeline.deadline is not None
    timeline.deadline.at = 7200.0
    fig = figure(timeline, "ns/mnist")
    try:
        steps = fig.axes[1]
        assert steps.get_xlim()[1] < 1000.0
        assert "deadline at 7200 s →" in [t.get_text() for t in steps.texts]
    finally:
        plt.close(fig)


def test_a_job_without_a_deadline_is_drawn_as_before() -> None:
    timeline = Timeline(pods={"w": PodSpan("w", "worker", 0, running=1.0)}, steps=[(0.0, 0), (5.0, 10)], end=5.0)
    assert timeline.deadline is None
    fig = figure(timeline, "ns/mnist")
    try:
        assert len(fig.axes) == 2
    finally:
        plt.close(fig)
    assert "deadline" not in render(timeline, "ns/mnist")


def test_a_deadline_move_is_plain_data() -> None:
    move = DeadlineMove(1.0, "DeadlineReleased", -2, 0, "releasing 2 catch-up worker(s) in group od (0 held): ahead")
    assert (move.change, move.held) == (-2, 0)
