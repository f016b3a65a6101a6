"""The chief's evaluation and exported model: copied into status.progress, told as Events."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from tests.unit.planner.builders import T0, job, node, renew, start, terminate
from ttj.api.models import ProgressStatus
from ttj.planner.actions import EmitEvent
from ttj.planner.evaluation import (
    evaluated_message,
    exported_message,
    parse_evaluated,
    parse_exported,
    progress_events,
)
from ttj.planner.lease import reported_progress
from ttj.planner.world import World
from ttj_contract import ANNOTATION_PROGRESS, LeaseProgress, format_time

S = timedelta(seconds=1)
SEEN = format_time(T0)
EARLIER = ProgressStatus(
    global_step=600,
    checkpoint_step=500,
    epoch=1,
    last_progress_time=SEEN,
    evaluation_step=500,
    evaluation={"accuracy": 0.5, "loss": 1.25},
    export_path="/ckpt/export",
)


def lease_with(report: LeaseProgress) -> dict[str, Any]:
    return {"metadata": {"name": "mnist-chief", "annotations": {ANNOTATION_PROGRESS: report.to_annotation()}}}


@pytest.mark.parametrize(
    ("case", "previous", "report", "expected"),
    [
        (
            "a first report: everything copied",
            None,
            LeaseProgress(global_step=10, epoch=1, evaluation_step=10, evaluation={"loss": 2.0}, export_path="/x"),
            ProgressStatus(global_step=10, epoch=1, evaluation_step=10, evaluation={"loss": 2.0}, export_path="/x"),
        ),
        (
            "a new chief that has not evaluated or exported yet keeps what its predecessor did",
            EARLIER,
            LeaseProgress(global_step=520, checkpoint_step=500, epoch=2),
            ProgressStatus(
                global_step=520,
                checkpoint_step=500,
                epoch=2,
                last_progress_time=SEEN,
                evaluation_step=500,
                evaluation={"accuracy": 0.5, "loss": 1.25},
                export_path="/ckpt/export",
            ),
        ),
        (
            "a newer evaluation replaces the metrics whole",
            EARLIER,
            LeaseProgress(global_step=1000, epoch=1, evaluation_step=1000, evaluation={"loss": 0.5}),
            ProgressStatus(
                global_step=1000,
                epoch=1,
                last_progress_time=SEEN,
                evaluation_step=1000,
                evaluation={"loss": 0.5},
                export_path="/ckpt/export",
            ),
        ),
        (
            "a step without metrics is no evaluation",
            EARLIER,
            LeaseProgress(global_step=1000, epoch=1, evaluation_step=1000),
            EARLIER.model_copy(update={"global_step": 1000, "checkpoint_step": None}),
        ),
        (
            "what the status cannot hold is left out: NaN, long names, past 32 metrics (the first by name kept)",
            None,
            LeaseProgress(
                global_step=10,
                evaluation_step=10,
                evaluation={"loss": float("nan"), "n" * 64: 1.0} | {f"m{i:02d}": float(i) for i in range(40)},
                export_path="/" + "x" * 4096,
            ),
            ProgressStatus(global_step=10, evaluation_step=10, evaluation={f"m{i:02d}": float(i) for i in range(32)}),
        ),
    ],
)
def test_the_chiefs_report_is_copied(
    case: str, previous: ProgressStatus | None, report: LeaseProgress, expected: ProgressStatus
) -> None:
    assert reported_progress(lease_with(report), previous) == expected, case


@pytest.mark.parametrize(
    ("case", "previous", "progress", "events"),
    [
        ("no report yet", None, None, []),
        ("nothing new", EARLIER, EARLIER.model_copy(update={"global_step": 700}), []),
        (
            "a first evaluation and the export",
            None,
            EARLIER,
            [
                EmitEvent("Normal", "Evaluated", "evaluated at global step 500: accuracy=0.5, loss=1.25"),
                EmitEvent(
                    "Normal",
                    "ModelExported",
                    "the final model is exported to /ckpt/export (model.keras and saved_model/)",
                ),
            ],
        ),
        (
            "an evaluation at a new step",
            EARLIER,
            EARLIER.model_copy(update={"evaluation_step": 1000, "evaluation": {"loss": 0.123456}}),
            [EmitEvent("Normal", "Evaluated", "evaluated at global step 1000: loss=0.1235")],
        ),
    ],
)
def test_events_tell_what_the_new_status_adds(
    case: str, previous: ProgressStatus | None, progress: ProgressStatus | None, events: list[EmitEvent]
) -> None:
    assert progress_events(previous, progress) == events, case


def test_the_messages_read_back_and_a_long_evaluation_fits_one_event() -> None:
    metrics = {f"{'metric_' * 8}{i:02d}": i + 0.5 for i in range(32)}
    message = evaluated_message(1000, metrics)
    assert len(message) <= 1024
    step, read = parse_evaluated(message)  # type: ignore[misc]
    assert step == 1000
    assert read == dict(list(metrics.items())[: len(read)])
    assert len(read) > 10
    assert message.endswith(f" (+{32 - len(read)} more)")
    assert parse_evaluated(evaluated_message(7, {"loss": -1.5e-07, "auc": 12345678.0})) == (
        7,
        {"loss": -1.5e-07, "auc": 1.235e07},
    )
    assert parse_evaluated("worker x lost") is None
    assert parse_exported(exported_message("gs://bucket/run 1/export")) == "gs://bucket/run 1/export"
    assert parse_exported("evaluated at global step 1: loss=1") is None


def test_over_a_jobs_life_each_evaluation_is_told_once_and_a_late_export_still_reaches_the_status() -> None:
    world = World(job())
    start(world, [node(f"gpu-{i}", age=timedelta(hours=2 + 5 * i)) for i in range(3)])

    def report(step: int, evaluated_at: int, loss: float) -> dict[str, Any]:
        at = {"checkpointStep": evaluated_at, "evaluationStep": evaluated_at, "evaluation": {"loss": loss}}
        return {"globalStep": step, "epoch": 1, **at}

    renew(world, T0 + 5 * S, report(500, 500, 1.5))
    world.reconcile(T0 + 5 * S)
    renew(world, T0 + 6 * S, report(600, 500, 1.5))
    world.reconcile(T0 + 6 * S)
    final = report(1000, 1000, 0.5)
    renew(world, T0 + 7 * S, final)
    for name in ("mnist-worker-0-1", "mnist-worker-1-1", "mnist-worker-2-1"):
        terminate(world, name, 0, reason="Completed")
    world.reconcile(T0 + 8 * S)
    assert world.job["status"]["phase"] == "Succeeded"
    # the export path reaches this operator after the pass that saw the chief exit
    renew(world, T0 + 9 * S, {**final, "exportPath": "/ckpt/export"})
    world.reconcile(T0 + 9 * S)
    world.reconcile(T0 + 10 * S)
    progress = world.job["status"]["progress"]
    assert (progress["evaluationStep"], progress["evaluation"], progress["exportPath"]) == (
        1000,
        {"loss": 0.5},
        "/ckpt/export",
    )
    told = [(e.reason, e.message) for e in world.events if e.reason in ("Evaluated", "ModelExported")]
    assert told == [
        ("Evaluated", "evaluated at global step 500: loss=1.5"),
        ("Evaluated", "evaluated at global step 1000: loss=0.5"),
        ("ModelExported", "the final model is exported to /ckpt/export (model.keras and saved_model/)"),
    ]
