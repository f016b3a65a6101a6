"""A timeline recorded as a job runs (the demo): what it folds from pods and status, and the picture."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ttj.timeline.draw import draw
from ttj.timeline.model import Timeline
from ttj_contract import LABEL_ROLE, LABEL_SLOT, Role


def pod(name: str, role: str, phase: str, slot: int | None = None, **status: Any) -> dict[str, Any]:
    labels = {LABEL_ROLE: role}
    if slot is not None:
        labels[LABEL_SLOT] = str(slot)
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"nodeName": f"node-{name}"},
        "status": {"phase": phase, **status},
    }


def test_pod_outcomes_are_classified() -> None:
    timeline = Timeline()
    timeline.observe_pod(0, pod("w0", Role.WORKER, "Pending", 0))
    timeline.observe_pod(2, pod("w0", Role.WORKER, "Running", 0))
    timeline.observe_pod(9, pod("w0", Role.WORKER, "Failed", 0, reason="Terminated"))
    timeline.observe_pod(0, pod("w1", Role.WORKER, "Running", 1))
    timeline.observe_pod(5, pod("w1", Role.WORKER, "Failed", 1))
    timeline.observe_pod(0, pod("w2", Role.WORKER, "Running", 2))
    timeline.observe_gone(7, {"w0", "w1"})
    assert (timeline.pods["w0"].running, timeline.pods["w0"].ended, timeline.pods["w0"].outcome) == (2, 9, "preempted")
    assert timeline.pods["w1"].outcome == "failed"
    assert (timeline.pods["w2"].ended, timeline.pods["w2"].outcome) == (7, "deleted")


def test_steps_lost_counts_only_rollbacks() -> None:
    timeline = Timeline()
    for when, step in enumerate([0, 10, 50, 50, 120, 100, 130, 90, 200]):
        timeline.observe_status(when, {"progress": {"globalStep": step}})
    assert timeline.steps_lost() == (120 - 100) + (130 - 90)


def test_chief_epochs_and_checkpoints_are_recorded_once_each() -> None:
    timeline = Timeline()
    timeline.observe_status(1, {"chief": {"pod": "w0", "epoch": 1}, "progress": {"globalStep": 5, "checkpointStep": 0}})
    timeline.observe_status(2, {"chief": {"pod": "w0", "epoch": 1}, "progress": {"globalStep": 9, "checkpointStep": 0}})
    timeline.observe_status(3, {"chief": {"pod": "w2", "epoch": 2}, "progress": {"globalStep": 9, "checkpointStep": 9}})
    assert timeline.chiefs == [(1, 1, "w0"), (3, 2, "w2")]
    assert timeline.checkpoints == [(1, 0), (3, 9)]


def test_picture_is_a_png(tmp_path: Path) -> None:
    timeline = Timeline()
    timeline.observe_pod(0, pod("ps", Role.PS, "Running"))
    timeline.observe_pod(0, pod("w0", Role.WORKER, "Running", 0))
    timeline.observe_pod(0, pod("w1", Role.WORKER, "Running", 1))
    timeline.observe_status(1, {"chief": {"pod": "w0", "epoch": 1}, "progress": {"globalStep": 10}})
    timeline.observe_pod(4, pod("w0", Role.WORKER, "Failed", 0, reason="Terminated"))
    timeline.preemptions.append((4, "node-w0"))
    timeline.observe_status(5, {"chief": {"pod": "w1", "epoch": 2}, "progress": {"globalStep": 40}})
    out = draw(timeline, tmp_path / "run.png", "test run")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert out.stat().st_size > 10_000


def test_evaluations_and_the_export_are_recorded_once_each_and_placed_on_the_step_curve() -> None:
    timeline = Timeline()
    evaluated = {"globalStep": 100, "evaluationStep": 100, "evaluation": {"loss": 1.0}}
    timeline.observe_status(0, {"progress": {"globalStep": 0}})
    timeline.observe_status(10, {"progress": evaluated})
    timeline.observe_status(20, {"progress": {**evaluated, "globalStep": 300}})
    timeline.observe_status(30, {"progress": {**evaluated, "globalStep": 300, "exportPath": "/e"}})
    timeline.observe_status(40, {"progress": {**evaluated, "globalStep": 300, "exportPath": "/e"}})
    assert (timeline.evaluations, timeline.export) == ([(10, 100, {"loss": 1.0})], (30, "/e"))
    assert [timeline.when_step(s) for s in (0, 50, 200, 300, 301)] == [0.0, 5.0, 15.0, 20.0, None]
